"""What an adversarial run's discriminator pays on dm_control point_mass,
and where its policy goes: the diagnostic behind BENCHMARKS.md's
point_mass:easy section (Adversarial imitation).

    python studies/point_mass_rewards.py RUN_DIR [--checkpoint PATH]
        [--demos FILE.npz] [--grid 7] [--episodes 1] [--seed 5]

RUN_DIR is a `tandem train-ail` run on `point_mass:*`; the checkpoint is its
latest learner checkpoint unless --checkpoint names one. Printed:

  - the generator's reward (the run's `ail.reward`) for resting at each
    point of a grid over the arena (x, y in [-0.3, 0.3], zero velocity,
    zero action, s' = s), a Markdown table with y down the rows: where the
    discriminator pays most;
  - its mean over the expert's transitions and over the policy's own
    mean-action episodes, with the episodes' true return and where they
    end.

The task's target is at the origin (reward within 0.015 of it), so a
reward that peaks there while the policy ends elsewhere points at the
generator, and a flat or misplaced peak at the discriminator. Ends with one
JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax.numpy as jnp
import numpy as np

from tandem.agents.ail import demonstrations
from tandem.agents.ail import discriminator as disc
from tandem.agents.ail import learner as ail_learner
from tandem.launch import ail as launch_ail

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness
import harness  # studies/harness.py

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DEMOS = os.path.join(REPO_ROOT, 'tests', 'data',
                             'point_mass_easy_expert.npz')
ARENA = 0.3  # the walls' distance from the origin


def _rewards(tc, state, policy, t: disc.Transitions) -> np.ndarray:
  """The run's own reward for transitions t, [N]."""
  d = state.discriminator
  log_pi = (ail_learner.policy_log_prob(tc.mpo, policy, t.observation,
                                        t.action)
            if disc.needs_log_pi(tc.ail) else None)
  return np.asarray(disc.rewards(tc.ail, d.params, d.normalizer, t,
                                 tc.mpo.discount, log_pi))


def at_rest(points: np.ndarray, action_dim: int) -> disc.Transitions:
  """Resting at each of points [N, 2]: position, zero velocity, s' = s."""
  obs = np.concatenate([points, np.zeros_like(points)], -1)
  obs = jnp.asarray(obs, jnp.float32)
  return disc.Transitions(observation=obs,
                          action=jnp.zeros((len(points), action_dim)),
                          next_observation=obs,
                          discount=jnp.ones(len(points)))


def diagnose(run_dir: str, checkpoint: str | None, demos_path: str, *,
             grid: int, episodes: int, seed: int) -> dict:
  tc, checkpoint, counts, state = harness.restore_ail_run(
      run_dir, checkpoint,
      lambda tc: not tc.env.startswith('point_mass:') and (
          f'env is {tc.env!r}; this diagnostic reads point_mass runs'))
  policy = launch_ail.policy_of(tc, state)
  axis = np.linspace(-ARENA, ARENA, grid)
  xs, ys = np.meshgrid(axis, axis)
  points = np.stack([xs.ravel(), ys.ravel()], -1)
  resting = _rewards(tc, state, policy, at_rest(points, 2)).reshape(grid,
                                                                   grid)
  expert = ail_learner.expert_transitions(
      harness.load_run_demos(run_dir, demos_path, tc.env))
  rollouts = demonstrations.collect(
      tc.env, ail_learner.to_numpy(policy), tc.mpo, episodes=episodes,
      seed=seed, deterministic=True)
  agent = ail_learner.expert_transitions(rollouts)
  ends = np.asarray(rollouts.next_observation)[
      np.flatnonzero(np.asarray(rollouts.step_index) ==
                     np.max(rollouts.step_index)), :2]
  return {'run': os.path.basename(os.path.normpath(run_dir)),
          'checkpoint': os.path.basename(checkpoint),
          'env_steps': counts.get('env_steps'),
          'axis': axis.tolist(), 'reward_at_rest': resting.tolist(),
          'reward_expert': float(np.mean(_rewards(tc, state, policy,
                                                  expert))),
          'reward_agent': float(np.mean(_rewards(tc, state, policy, agent))),
          'agent_return': float(np.mean(rollouts.episode_returns)),
          'agent_ends': ends.tolist()}


def markdown(r: dict) -> str:
  head = ['y \\ x'] + [f'{x:+.2f}' for x in r['axis']]
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---:|' * len(head)]
  for y, row in zip(r['axis'], r['reward_at_rest']):
    lines.append(f'| {y:+.2f} | ' + ' | '.join(f'{v:.2f}' for v in row) +
                 ' |')
  ends = '; '.join(f'({x:+.2f}, {y:+.2f})' for x, y in r['agent_ends'])
  lines.append(f"\n{r['run']} at {r['env_steps']} env steps: reward on the "
               f"expert's transitions {r['reward_expert']:.2f}, on the "
               f"policy's own {r['reward_agent']:.2f}; its episodes' return "
               f"{r['agent_return']:.1f}, ending at {ends}")
  return '\n'.join(lines)


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('run_dir')
  p.add_argument('--checkpoint', help='a learner checkpoint (default: latest)')
  p.add_argument('--demos', default=DEFAULT_DEMOS)
  p.add_argument('--grid', type=int, default=7)
  p.add_argument('--episodes', type=int, default=1)
  p.add_argument('--seed', type=int, default=5)
  args = p.parse_args(argv)
  r = diagnose(args.run_dir, args.checkpoint, args.demos, grid=args.grid,
               episodes=args.episodes, seed=args.seed)
  print(markdown(r))
  print(json.dumps(r))
  return 0


if __name__ == '__main__':
  harness.run_tool(main)
