"""The imitation library's GAIL on a Tandem demonstration file: the
side-by-side numbers for BENCHMARKS.md's adversarial-imitation sections.

    make venv-imitation
    .venv-imitation/bin/python studies/imitation_gail.py run \\
        --demos tests/data/point_mass_easy_expert.npz --task point_mass:easy \\
        --seeds 0,1,2 --budget 1000000 [--records_dir DIR] [--eval_episodes 5]

It runs in an environment of its own (`make venv-imitation`, from
`studies/imitation-requirements.txt`): the library needs PyTorch,
stable-baselines3 and gymnasium 0.29, none of which Tandem's `.venv` holds,
so it imports nothing of Tandem's and reads the demonstration file itself.

The library's settings are its documented ones: GAIL's constructor defaults
(two discriminator updates per round, a generator replay of one round),
stable-baselines3's PPO defaults (2048 steps per environment per round,
10 epochs of minibatches of 64, learning rate 3e-4, γ 0.99), eight
environments and a demonstration batch of 1024 as the library's GAIL
example uses, and `BasicRewardNet` on (s, a) with `RunningNorm` inputs as
its tutorial does. The task is dm_control's, observations flattened in
its own order as Tandem flattens them, so the demonstrations fit as
written.

After every round the policy's mean action is evaluated on the task's
own reward (`--eval_episodes` episodes, env seeds 10000 + i, as Tandem's
evaluator plays its mean action). Each seed writes one JSON record
(`--records_dir`, default studies/results/imitation_gail_<domain>_<task>/)
with the evaluation curve; the command ends with one JSON line of the
same keys `ail_learning.py` prints (`gail.seeds_reaching_90pct`, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRACTIONS = (0.5, 0.9)
HELD_FRACTION = 0.95
EVAL_SEED = 10_000
DEMO_BATCH_SIZE = 1024  # the library's GAIL example
NUM_ENVS = 8            # the library's GAIL example


# ------------------------------------------------------ demonstrations


class Refusal(Exception):
  """Input this tool will not take; the message names the file or flag, and
  the tool exits 2 (argparse's status for bad usage). The tool runs in the
  imitation library's environment, without studies/harness.py's imports."""


def observation_keys(npz_files) -> list:
  """The observation entries of a Tandem demonstration file, in its order:
  `observations_<key>` members, or `observations` alone."""
  keys = [f[len('observations_'):] for f in npz_files
          if f.startswith('observations_')]
  return keys or ([''] if 'observations' in npz_files else [])


def episodes(path: str) -> list:
  """[(observations [T+1, D], actions [T, A])] per episode of a Tandem
  demonstration file, observations flattened in the file's order with the
  episode's last next observation appended."""
  with np.load(path, allow_pickle=False) as d:
    keys = observation_keys(d.files)
    if not keys:
      raise Refusal(f'imitation_gail: {path}: no observations member; '
                    'expected a Tandem demonstration file')

    def flat(prefix):
      name = lambda k: f'{prefix}_{k}' if k else prefix  # noqa: E731
      return np.concatenate(
          [d[name(k)].reshape(len(d[name(k)]), -1) for k in keys],
          axis=1).astype(np.float32)
    obs, next_obs = flat('observations'), flat('next_observations')
    actions = d['actions'].astype(np.float32)
    index = d['episode_index']
  out = []
  for e in np.unique(index):
    rows = np.flatnonzero(index == e)
    out.append((np.concatenate([obs[rows], next_obs[rows[-1:]]]),
                actions[rows]))
  return out


# ------------------------------------------------------------ figures


def figures(curve: list, expert: float) -> dict:
  """A seed's figures from its evaluations [{'env_steps', 'elapsed_s',
  'eval_return'}], as ail_learning.py computes them for Tandem's runs."""
  out = {'final_return': None, 'max_return': None, 'held': None}
  if curve:
    best = max(curve, key=lambda p: p['eval_return'])
    out['final_return'] = curve[-1]['eval_return']
    out['max_return'] = best['eval_return']
    out['max_return_env_steps'] = best['env_steps']
    out['held'] = out['final_return'] >= HELD_FRACTION * out['max_return']
  for fraction in FRACTIONS:
    pct = f'{round(fraction * 100)}pct'
    hit = next((p for p in curve if p['eval_return'] >= fraction * expert),
               None)
    out[f'env_steps_to_{pct}'] = hit['env_steps'] if hit else None
    out[f'elapsed_s_to_{pct}'] = hit['elapsed_s'] if hit else None
  return out


def median_reached(values: list):
  """The median of times to a threshold counting never as infinitely late;
  None where half or more never reached it (tandem compare's rule)."""
  ordered = sorted(float('inf') if v is None else v for v in values)
  if not ordered:
    return None
  middle = float(np.median(ordered))
  return None if not np.isfinite(middle) else middle


def summary(records: list, task: str) -> dict:
  n = len(records)
  out = {'task': task, 'library': 'imitation', 'gail.seeds': n}
  for fraction in FRACTIONS:
    pct = f'{round(fraction * 100)}pct'
    steps = [r[f'env_steps_to_{pct}'] for r in records]
    out[f'gail.seeds_reaching_{pct}'] = (
        f'{sum(s is not None for s in steps)}/{n}')
    out[f'gail.env_steps_to_{pct}_median'] = median_reached(steps)
  out['gail.seeds_reaching_90pct_and_holding'] = (
      f"{sum(r['held'] is True and r['env_steps_to_90pct'] is not None for r in records)}/{n}")
  finals = [r['final_return'] for r in records
            if r['final_return'] is not None]
  out['gail.final_return_median'] = (
      round(float(np.median(finals)), 1) if finals else None)
  return out


# ------------------------------------------------------------ training


def make_env_class():
  """A gymnasium environment over a dm_control suite task (imported here:
  only the imitation environment has gymnasium)."""
  import gymnasium
  from dm_control import suite

  class DMControl(gymnasium.Env):
    """dm_control `domain:task`, observations flattened in the task's own
    order, actions clipped to its bounds; the time limit is a truncation."""

    def __init__(self, domain: str, task: str, seed: int):
      self._env = suite.load(domain, task, task_kwargs={'random': seed})
      spec = self._env.action_spec()
      self._low, self._high = spec.minimum, spec.maximum
      size = sum(int(np.prod(s.shape))
                 for s in self._env.observation_spec().values())
      self.observation_space = gymnasium.spaces.Box(
          -np.inf, np.inf, (size,), np.float32)
      self.action_space = gymnasium.spaces.Box(
          spec.minimum.astype(np.float32), spec.maximum.astype(np.float32),
          dtype=np.float32)

    def _flat(self, ts):
      return np.concatenate([np.asarray(v, np.float32).ravel()
                             for v in ts.observation.values()])

    def reset(self, *, seed=None, options=None):
      super().reset(seed=seed)
      return self._flat(self._env.reset()), {}

    def step(self, action):
      ts = self._env.step(np.clip(action, self._low, self._high))
      return self._flat(ts), float(ts.reward or 0.0), False, ts.last(), {}

  return DMControl


def evaluate(policy, env_class, domain, task, episodes: int) -> float:
  """The mean true return of the policy's mean action over `episodes`
  episodes on env seeds EVAL_SEED + i."""
  returns = []
  for i in range(episodes):
    env = env_class(domain, task, EVAL_SEED + i)
    obs, _ = env.reset()
    total, done = 0.0, False
    while not done:
      action, _ = policy.predict(obs, deterministic=True)
      obs, reward, terminated, truncated, _ = env.step(action)
      total += reward
      done = terminated or truncated
    returns.append(total)
  return float(np.mean(returns))


def train_seed(demos: str, task: str, seed: int, budget: int,
               eval_episodes: int) -> list:
  """One GAIL run; its evaluation curve after every round."""
  import torch
  from imitation.algorithms.adversarial.gail import GAIL
  from imitation.data.types import Trajectory
  from imitation.rewards.reward_nets import BasicRewardNet
  from imitation.util import logger
  from imitation.util.networks import RunningNorm
  from stable_baselines3 import PPO
  from stable_baselines3.common.vec_env import DummyVecEnv
  torch.set_num_threads(1)
  domain, name = task.split(':')
  env_class = make_env_class()
  venv = DummyVecEnv([
      (lambda i=i: env_class(domain, name, seed * NUM_ENVS + i))
      for i in range(NUM_ENVS)])
  trajectories = [Trajectory(obs=o, acts=a, infos=None, terminal=False)
                  for o, a in episodes(demos)]
  learner = PPO('MlpPolicy', venv, seed=seed, verbose=0)
  reward_net = BasicRewardNet(venv.observation_space, venv.action_space,
                              normalize_input_layer=RunningNorm)
  # The library's own per-round tables go to a CSV no one keeps, not the
  # terminal.
  scratch = tempfile.mkdtemp(prefix='imitation_gail_')
  trainer = GAIL(demonstrations=trajectories,
                 demo_batch_size=DEMO_BATCH_SIZE, venv=venv,
                 gen_algo=learner, reward_net=reward_net,
                 allow_variable_horizon=False,
                 custom_logger=logger.configure(scratch, ['csv']))
  curve, start = [], time.time()

  def after_round(round_index: int) -> None:
    steps = (round_index + 1) * trainer.gen_train_timesteps
    value = evaluate(learner, env_class, domain, name, eval_episodes)
    curve.append({'env_steps': steps,
                  'elapsed_s': round(time.time() - start, 1),
                  'eval_return': round(value, 1)})
    print(f'seed {seed}: env steps {steps:>8} | eval {value:7.1f} | '
          f'{time.time() - start:6.0f} s', flush=True)

  try:
    trainer.train(budget, callback=after_round)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  return curve


# ---------------------------------------------------------------- main


def parse_task(text: str) -> str:
  parts = text.split(':')
  if len(parts) != 2 or not all(parts):
    raise argparse.ArgumentTypeError(
        f'expected a dm_control DOMAIN:TASK such as point_mass:easy, got '
        f'{text!r}')
  return text


def parse_seeds(text: str) -> list:
  try:
    seeds = [int(s) for s in text.split(',')]
  except ValueError:
    seeds = []
  if not seeds or min(seeds) < 0:
    raise argparse.ArgumentTypeError(
        f'expected seeds such as 0,1,2, got {text!r}')
  return seeds


def expert_return(path: str) -> float:
  with np.load(path, allow_pickle=False) as d:
    if 'episode_returns' not in d.files:
      raise Refusal(f'imitation_gail: {path}: no episode_returns member')
    return float(np.mean(d['episode_returns']))


def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog='imitation_gail', description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)
  for name in ('run', 'summary'):
    q = sub.add_parser(name)
    q.add_argument('--demos', required=True)
    q.add_argument('--task', required=True, type=parse_task)
    q.add_argument('--seeds', type=parse_seeds, default=[0, 1, 2])
    q.add_argument('--records_dir', default=None)
  run = sub.choices['run']
  run.add_argument('--budget', type=int, default=1_000_000)
  run.add_argument('--eval_episodes', type=int, default=5)
  args = p.parse_args(argv)
  if not os.path.isfile(args.demos):
    raise Refusal(f'imitation_gail: --demos {args.demos}: no such file')
  expert = expert_return(args.demos)
  records_dir = args.records_dir or os.path.join(
      REPO_ROOT, 'studies', 'results',
      'imitation_gail_' + args.task.replace(':', '_'))
  records = []
  for seed in args.seeds:
    path = os.path.join(records_dir, f'gail_s{seed}.json')
    if args.command == 'run' and not os.path.exists(path):
      curve = train_seed(args.demos, args.task, seed, args.budget,
                         args.eval_episodes)
      record = {'task': args.task, 'seed': seed, 'budget': args.budget,
                'expert_return': expert, 'curve': curve,
                'settings': 'imitation 1.0.1 GAIL defaults, SB3 PPO '
                            'defaults, 8 envs, demo batch 1024, '
                            'BasicRewardNet with RunningNorm'}
      os.makedirs(records_dir, exist_ok=True)
      with open(path + '.tmp', 'w') as f:
        json.dump(record, f, indent=1)
      os.replace(path + '.tmp', path)
    if not os.path.exists(path):
      print(f'seed {seed}: no record at {path}', file=sys.stderr)
      continue
    with open(path) as f:
      record = json.load(f)
    fig = figures(record['curve'], expert)
    records.append(fig)
    print(f"seed {seed}: final {fig['final_return']}, peak "
          f"{fig['max_return']}, env steps to 50% "
          f"{fig['env_steps_to_50pct']}, to 90% {fig['env_steps_to_90pct']}")
  print(json.dumps(summary(records, args.task)))
  return 0


if __name__ == '__main__':
  try:
    sys.exit(main())
  except Refusal as e:
    print(e, file=sys.stderr)
    sys.exit(2)
