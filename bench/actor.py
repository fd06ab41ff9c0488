"""Actor env steps/s per process against raw `env.step`, side by side.

    python bench/actor.py [--seconds 8] [--rounds 5] [--tasks cartpole_swingup walker_walk]

"raw": the dm_control environment stepped with precomputed random actions.
"actor": what one actor process does per step: the Tandem environment wrapper
(flatten, check, rescale), the jitted CPU policy (3×256 MLP, sampling), and
the n-step adder writing to a Reverb table, with a parameter refresh every
100 steps. The Reverb server runs in its own process, as the replay node does
in the program (--server inprocess puts it in the actor's process). Rounds alternate
raw/actor so machine noise hits both alike; the ratio is the median of
per-round ratios. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault('MUJOCO_GL', 'disable')
os.environ.setdefault('JAX_PLATFORMS', 'cpu')
# As the program sets for actor processes (launch/mpo.py): one BLAS thread,
# since a second one spin-waits after every matrix-vector product.
os.environ.setdefault('OPENBLAS_NUM_THREADS', '1')

import jax  # noqa: E402
import numpy as np  # noqa: E402

from agents.common import environments  # noqa: E402
from agents.common import replay  # noqa: E402
from agents.mpo import actor as actor_lib  # noqa: E402
from agents.mpo import learner as learner_lib  # noqa: E402
from agents.mpo.config import MPOConfig  # noqa: E402

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


def actor_rate(name: str, seconds: float, address: str, params) -> float:
  cfg = MPOConfig()
  env = environments.make_environment(name, seed=2)
  dims = environments.env_dims(env)
  adder = replay.make_adder(
      address, replay.TransitionLayout(dims.observation_dim, dims.action_dim),
      n_step=cfg.n_step, discount=cfg.discount)
  actor = actor_lib.Actor(cfg, params, seed=0, variable_source=lambda: params,
                          update_period=100, adder=adder)
  ts = env.reset()
  actor.observe_first(ts)
  steps, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    action = actor.select_action(ts.observation)
    ts = env.step(action)
    actor.observe(action, ts)
    actor.update()
    steps += 1
    if ts.last():
      ts = env.reset()
      actor.observe_first(ts)
  return steps / (time.perf_counter() - start)


def _layout(env) -> replay.TransitionLayout:
  dims = environments.env_dims(env)
  return replay.TransitionLayout(dims.observation_dim, dims.action_dim)


def _serve(task: str, conn) -> None:
  """Child process: a Reverb server for `task`'s transitions."""
  import reverb
  env = environments.make_environment(TASKS[task], seed=0)
  table = replay.make_table(_layout(env), max_size=200_000,
                            min_size=1, samples_per_insert=1.0,
                            error_buffer=1e9)
  server = reverb.Server([table])
  conn.send(server.port)
  conn.recv()  # until the parent says stop
  server.stop()


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('--seconds', type=float, default=8.0)
  p.add_argument('--rounds', type=int, default=5)
  p.add_argument('--tasks', nargs='+', default=list(TASKS))
  p.add_argument('--server', choices=('process', 'inprocess'),
                 default='process')
  args = p.parse_args()
  import reverb
  result = {}
  print(f'jax {jax.__version__}, device {jax.devices()[0]}, '
        f'{os.cpu_count()} cores')
  for task in args.tasks:
    name = TASKS[task]
    env = environments.make_environment(name, seed=0)
    dims = environments.env_dims(env)
    cfg = MPOConfig()
    state = learner_lib.init(cfg, learner_lib.Dims(dims.observation_dim,
                                                   dims.action_dim), 0)
    params = jax.device_get(state.policy)
    if args.server == 'inprocess':
      table = replay.make_table(_layout(env),
                                max_size=200_000, min_size=1,
                                samples_per_insert=1.0, error_buffer=1e9)
      server = reverb.Server([table])
      port, stop = server.port, server.stop
    else:
      import multiprocessing as mp
      ctx = mp.get_context('spawn')
      parent, child = ctx.Pipe()
      proc = ctx.Process(target=_serve, args=(task, child), daemon=True)
      proc.start()
      port = parent.recv()
      stop = lambda: (parent.send('stop'), proc.join(10))
    address = f'localhost:{port}'
    actor_rate(name, 1.0, address, params)  # compile, warm up
    raws, actors, ratios = [], [], []
    for _ in range(args.rounds):
      r = raw_rate(name, args.seconds)
      a = actor_rate(name, args.seconds, address, params)
      raws.append(r)
      actors.append(a)
      ratios.append(a / r)
    stop()
    ratio = statistics.median(ratios)
    result[f'actor_to_raw_ratio.{task}'] = round(ratio, 3)
    result[f'actor_steps_per_s.{task}'] = round(statistics.median(actors), 1)
    result[f'raw_steps_per_s.{task}'] = round(statistics.median(raws), 1)
    print(f'{task:18s} raw {statistics.median(raws):8.1f} steps/s | actor '
          f'{statistics.median(actors):8.1f} steps/s | ratio {ratio:.3f} '
          f'(per round: {", ".join(f"{x:.3f}" for x in ratios)})')
  target = result.get('actor_to_raw_ratio.walker_walk')
  if target is not None:
    print(f'target actor_to_raw_ratio.walker_walk >= 0.5: '
          f'{"PASS" if target >= 0.5 else "FAIL"}')
  print(json.dumps(result))


if __name__ == '__main__':
  main()
