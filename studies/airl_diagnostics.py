"""AIRL's discriminator and generator at one learner checkpoint, on the
expert's transitions and on sampled episodes of the checkpoint's policy: the
diagnostic behind BENCHMARKS.md's AIRL tables (Adversarial imitation).

    python studies/airl_diagnostics.py RUN_DIR [--checkpoint PATH]
        [--demos FILE.npz] [--episodes 1] [--seed 5]

RUN_DIR is a `tandem train-ail` run of an AIRL config; the checkpoint is its
latest learner checkpoint unless --checkpoint names one, the expert's
transitions those of the file it trained on (its demos.json) unless --demos
names one. Reported, as means over the expert's transitions ("expert") and
over the sampled episodes' transitions ("agent"):

  log_pi_*      log π(a|s) under the checkpoint's policy, the clipped
                Gaussian's likelihood that AIRL's logit f − log π uses
  f_*           AIRL's f(s, a, s') = g + γ·h(s') − h(s)
  d_*           D = σ(f − log π)
  mean_abs_mu   |μ(s)| of the policy on the expert's states (> 1: beyond
                the action box, where the clipped critic is flat)
  beyond_box_*  the fraction of the policy mean's entries beyond the box,
                |μ(s)| > 1, on the expert's and the agent's states
  at_edge_*     the fraction of the action entries on the box's edge,
                |a| >= 0.99: the expert's, and the agent's samples (a mean
                action reaches the edge only where μ is beyond it, so a
                wide policy's samples and its mean action use the edge as
                often only where these agree)
  agent_return  the sampled episodes' mean true return

A log-π gap (log_pi_agent − log_pi_expert) of many nats lets a constant f
separate the two batches, so f need not take a shape and the generator's
reward says nothing about the expert. Ends with a Markdown row and one JSON
line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

from tandem.agents.ail import demonstrations
from tandem.agents.ail import discriminator as disc
from tandem.agents.ail import learner as ail_learner
from tandem.agents.mpo import learner as mpo_learner
from tandem.launch import ail as launch_ail

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness
import harness  # studies/harness.py


# An action entry this close to the normalised box's bound (1) counts as on
# its edge: the actors clip to the bound exactly, demonstrations may hold
# values a rounding away from it.
EDGE = 0.99


def diagnose(run_dir: str, checkpoint: str | None, demos_path: str | None,
             *, episodes: int, seed: int) -> dict:
  tc, checkpoint, counts, state = harness.restore_ail_run(
      run_dir, checkpoint,
      lambda tc: tc.ail.kind != 'airl' and (
          f'ail.kind is {tc.ail.kind!r}; this diagnostic reads AIRL runs'))
  # The policy the run's actors acted with (and AIRL's log π used).
  policy, d = launch_ail.policy_of(tc, state), state.discriminator
  expert = ail_learner.expert_transitions(
      harness.load_run_demos(run_dir, demos_path, tc.env))
  rollouts = demonstrations.collect(
      tc.env, ail_learner.to_numpy(policy), tc.mpo, episodes=episodes,
      seed=seed, deterministic=False)
  agent = ail_learner.expert_transitions(rollouts)
  agent_return = float(np.mean(rollouts.episode_returns))
  g_cfg = dataclasses.replace(tc.ail, reward='g')
  out = {'run': os.path.basename(os.path.normpath(run_dir)),
         'checkpoint': os.path.basename(checkpoint),
         'env_steps': counts.get('env_steps')}
  dists = {}
  for name, t in (('expert', expert), ('agent', agent)):
    log_pi = ail_learner.policy_log_prob(tc.mpo, policy, t.observation,
                                         t.action)
    dists[name] = mpo_learner.apply_policy(tc.mpo, policy, t.observation)
    out[f'beyond_box_{name}'] = float(jnp.mean(jnp.abs(dists[name].mean) >
                                               1.0))
    out[f'at_edge_{name}'] = float(np.mean(np.abs(t.action) >= EDGE))
    f = disc.score(tc.ail, d.params, d.normalizer, t, tc.mpo.discount)
    g = disc.rewards(g_cfg, d.params, d.normalizer, t, tc.mpo.discount)
    out[f'log_pi_{name}'] = float(jnp.mean(log_pi))
    out[f'f_{name}'] = float(jnp.mean(f))
    out[f'g_{name}'] = float(jnp.mean(g))
    out[f'd_{name}'] = float(jnp.mean(jax.nn.sigmoid(f - log_pi)))
  dist = dists['expert']
  out['mean_abs_mu'] = float(jnp.mean(jnp.abs(dist.mean)))
  out['mean_stddev'] = float(jnp.mean(dist.stddev))
  out['agent_return'] = agent_return
  return out


def markdown_row(r: dict) -> str:
  return (f"| {r['run']}, {r['env_steps']} | {r['log_pi_expert']:.2f} | "
          f"{r['log_pi_agent']:.2f} | {r['f_expert']:.2f} | "
          f"{r['f_agent']:.2f} | {r['mean_abs_mu']:.2f} | "
          f"{r['agent_return']:.0f} |")


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('run_dir')
  p.add_argument('--checkpoint', help='a learner checkpoint (default: latest)')
  p.add_argument('--demos', help="the expert's transitions (default: the "
                 'file the run trained on)')
  p.add_argument('--episodes', type=int, default=1)
  p.add_argument('--seed', type=int, default=5)
  args = p.parse_args(argv)
  r = diagnose(args.run_dir, args.checkpoint, args.demos,
               episodes=args.episodes, seed=args.seed)
  print('| run, env steps | log π(a_E│s_E) | log π(a│s) own | f expert | '
        'f agent | |μ| on expert states | sampled return |')
  print('|---|---|---|---|---|---|---|')
  print(markdown_row(r))
  print(json.dumps(r))
  return 0


if __name__ == '__main__':
  harness.run_tool(main)
