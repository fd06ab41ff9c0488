"""Actor env steps/s per process against raw `env.step`, side by side.

    python bench/actor.py [--seconds 8] [--rounds 5] [--envs_per_actor K]
                          [--tasks cartpole_swingup walker_walk]

"raw": the dm_control environment stepped with precomputed random actions.
"actor": what one actor process of the program does (agents/nodes/acting.py's
EnvGroup): K environments behind Tandem's wrapper (flatten, check, rescale),
the numpy policy (3×256 MLP, sampling), one n-step adder per environment
writing packed transitions to a Reverb table, and a parameter refresh every
100 env steps. K defaults to TrainConfig's envs_per_actor; K=1 is measured
too, for reference. The Reverb server runs in its own process, as the replay
node does in the program (--server inprocess puts it in the actor's
process), and this process has one BLAS thread, as actor processes do.
Rounds alternate raw/actor(K)/actor(1), reversed every other round, so
machine noise hits all alike; each ratio is the median of per-round ratios. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault('MUJOCO_GL', 'disable')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# As the program sets for actor processes (launch/mpo.py): one BLAS thread,
# since a second one spin-waits after every matrix-vector product.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')
import _checkout  # noqa: F401  (binds `tandem` to this checkout)

import numpy as np

from tandem.agents.envs import environments
from tandem.agents.replay import adders
from tandem.agents.replay import layouts
from tandem.agents.nodes import acting
from tandem.agents.mpo import actor as actor_lib
from tandem.agents.mpo.config import MPOConfig
from tandem.launch.config import TrainConfig

TASKS = {'cartpole_swingup': 'cartpole:swingup', 'walker_walk': 'walker:walk'}


def raw_rate(name: str, seconds: float) -> float:
  env = environments.make_environment(name, seed=1).environment  # unwrapped
  spec = env.action_spec()
  rng = np.random.default_rng(0)
  actions = rng.uniform(spec.minimum, spec.maximum,
                        size=(1000,) + spec.shape).astype(spec.dtype)
  env.reset()
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    ts = env.step(actions[steps % 1000])
    steps += 1
    if ts.last():
      env.reset()
  return steps / (time.perf_counter() - start)


def actor_rate(name: str, seconds: float, address: str, params,
               envs_per_actor: int) -> float:
  cfg = MPOConfig()
  envs = [environments.make_environment(name, seed=2 + k)
          for k in range(envs_per_actor)]
  layout = _layout(envs[0])
  writers = [adders.make_adder(address, layout, n_step=cfg.n_step,
                               discount=cfg.discount) for _ in envs]
  actor = actor_lib.Actor(cfg, params, seed=0, variable_source=lambda: params,
                          update_period=100)
  group = acting.EnvGroup(envs, actor, writers)
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    group.step()
    steps += envs_per_actor
  rate = steps / (time.perf_counter() - start)
  for writer in writers:
    writer.close()
  return rate


def _layout(env) -> layouts.TransitionLayout:
  dims = environments.env_dims(env)
  return layouts.TransitionLayout(dims.observation, dims.action)


def _initial_params(env):
  """The learner's initial policy, as numpy (JAX runs only here)."""
  import jax
  from tandem.agents.mpo import learner as learner_lib
  dims = environments.env_dims(env)
  state = learner_lib.init(MPOConfig(), dims, 0)
  return jax.device_get(state.policy)


def _serve(task: str, conn) -> None:
  """Child process: a Reverb server for `task`'s transitions, and the initial
  policy, so that the measuring process never starts an XLA runtime (actor
  processes in the program do not either)."""
  import reverb
  env = environments.make_environment(TASKS[task], seed=0)
  table = layouts.make_table(_layout(env), max_size=200_000, min_size=1,
                            samples_per_insert=1.0, error_buffer=1e9)
  server = reverb.Server([table])
  conn.send((server.port, _initial_params(env)))
  conn.recv()  # until the parent says stop
  server.stop()


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('--seconds', type=float, default=8.0)
  p.add_argument('--rounds', type=int, default=5)
  p.add_argument('--envs_per_actor', type=int,
                 default=TrainConfig().envs_per_actor)
  p.add_argument('--tasks', nargs='+', default=list(TASKS))
  p.add_argument('--server', choices=('process', 'inprocess'),
                 default='process')
  args = p.parse_args()
  k = args.envs_per_actor
  result = {}
  print(f'{os.cpu_count()} cores; actor: {k} envs per process (and 1)')
  for task in args.tasks:
    name = TASKS[task]
    if args.server == 'inprocess':
      import reverb
      env = environments.make_environment(name, seed=0)
      server = reverb.Server([layouts.make_table(
          _layout(env), max_size=200_000, min_size=1, samples_per_insert=1.0,
          error_buffer=1e9)])
      port, params, stop = server.port, _initial_params(env), server.stop
    else:
      import multiprocessing as mp
      ctx = mp.get_context('spawn')
      parent, child = ctx.Pipe()
      proc = ctx.Process(target=_serve, args=(task, child), daemon=True)
      proc.start()
      port, params = parent.recv()
      stop = lambda parent=parent, proc=proc: (parent.send('stop'),
                                               proc.join(10))
    address = f'localhost:{port}'
    actor_rate(name, 1.0, address, params, k)  # warm up
    rates = {'raw': [], 'k': [], '1': []}
    measure = {
        'raw': functools.partial(raw_rate, name, args.seconds),
        'k': functools.partial(actor_rate, name, args.seconds, address,
                               params, k),
        '1': functools.partial(actor_rate, name, args.seconds, address,
                               params, 1)}
    for i in range(args.rounds):
      # The order reversed every other round: a load that drifts within a
      # round then biases the ratios both ways, not one.
      for x in (('raw', 'k', '1') if i % 2 == 0 else ('1', 'k', 'raw')):
        rates[x].append(measure[x]())
    stop()
    ratios = {x: [a / r for a, r in zip(rates[x], rates['raw'])]
              for x in ('k', '1')}
    result[f'actor_to_raw_ratio.{task}'] = round(statistics.median(ratios['k']), 3)
    result[f'actor_to_raw_ratio_1env.{task}'] = round(statistics.median(ratios['1']), 3)
    result[f'actor_steps_per_s.{task}'] = round(statistics.median(rates['k']), 1)
    result[f'actor_steps_per_s_1env.{task}'] = round(statistics.median(rates['1']), 1)
    result[f'raw_steps_per_s.{task}'] = round(statistics.median(rates['raw']), 1)
    for x, label in (('k', f'{k} envs'), ('1', '1 env ')):
      print(f'{task:18s} raw {statistics.median(rates["raw"]):8.1f} steps/s | actor '
            f'({label}) {statistics.median(rates[x]):8.1f} steps/s | ratio '
            f'{statistics.median(ratios[x]):.3f} (per round: '
            f'{", ".join(f"{r:.3f}" for r in ratios[x])})')
  target = result.get('actor_to_raw_ratio.walker_walk')
  if target is not None:
    print(f'target actor_to_raw_ratio.walker_walk >= 0.5: '
          f'{"PASS" if target >= 0.5 else "FAIL"}')
  print(json.dumps(result))


if __name__ == '__main__':
  main()
