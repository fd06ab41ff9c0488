"""Shared helpers for the learner benchmarks (bench/learner.py, bench/duals.py).

Imports only the standard library, numpy and jax, so the benchmarks run on an
accelerator image that has jax/optax but no TensorFlow, Reverb or Launchpad.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable, Sequence

import _checkout  # noqa: F401  (binds `tandem` to this checkout)
import jax
import numpy as np

from tandem.agents.core import xla_flags

# Task name -> (observation dim, action dim), as the dm_control tasks give them.
TASK_SHAPES = {
    'cartpole_swingup': (5, 1),
    'walker_walk': (24, 6),
}

# Modules the learner core must not pull in.
FORBIDDEN_MODULES = ('tensorflow', 'reverb', 'launchpad')


def use_learner_flags() -> None:
  """The learner node's own XLA flags (agents/core/xla_flags.py), so a
  benchmark times the step the node runs; an XLA_FLAGS naming its own
  command buffers times the step without them. For a script run as a
  program, before it uses jax; a module imported by a test changes no
  environment."""
  if not xla_flags.set_learner_flags():
    raise RuntimeError('use_learner_flags: jax has already started a '
                       'backend, which read XLA_FLAGS')


def cpu_model() -> str:
  try:
    with open('/proc/cpuinfo') as f:
      for line in f:
        if line.startswith('model name'):
          return line.split(':', 1)[1].strip()
  except OSError:
    pass
  return platform.processor() or platform.machine()


def describe_device() -> str:
  """A short label of the default JAX device, e.g. 'gpu:NVIDIA H200 x1'."""
  devices = jax.devices()
  d = devices[0]
  kind = getattr(d, 'device_kind', '') or str(d)
  label = f'{jax.default_backend()}:{kind} x{len(devices)}'
  if jax.default_backend() == 'cpu':
    label += f' ({cpu_model()}, {os.cpu_count()} cores)'
  return label


def environment_lines() -> list[str]:
  return [
      f'date (UTC):  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}',
      f'python:      {platform.python_version()} ({sys.executable})',
      f'jax:         {jax.__version__}  backend={jax.default_backend()}',
      f'devices:     {jax.devices()}',
      f'device:      {describe_device()}',
      f'host:        {platform.machine()}, {os.cpu_count()} cores, {cpu_model()}',
      f'XLA_FLAGS:   {os.environ.get("XLA_FLAGS", "")}',
  ]


def environment_json() -> dict:
  try:
    import optax
    optax_version = optax.__version__
  except Exception:  # pragma: no cover
    optax_version = None
  return {
      'device': describe_device(),
      'backend': jax.default_backend(),
      'jax_version': jax.__version__,
      'optax_version': optax_version,
      'python_version': platform.python_version(),
      'xla_flags': os.environ.get('XLA_FLAGS', ''),
  }


def _sizes(text: str) -> tuple:
  """'256,256,256' -> (256, 256, 256), for argparse (a clear error else)."""
  try:
    sizes = tuple(int(x) for x in text.split(','))
  except ValueError:
    sizes = ()
  if not sizes or min(sizes) < 1:
    raise argparse.ArgumentTypeError(
        f'expected comma-separated positive layer sizes, got {text!r}')
  return sizes


def positive_int(text: str) -> int:
  """An argparse type: an integer of at least 1 (a count of calls)."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(
        f'expected an integer of at least 1, got {text!r}')
  return value


def add_learner_args(parser) -> None:
  """The learner's shape flags bench/learner.py and bench/learner_parts.py
  share: tasks, K, batch, samples, layers, critic layers, seed (defaults: the
  named configs' learner)."""
  parser.add_argument('--tasks', default='cartpole_swingup,walker_walk',
                      help='comma-separated, from: ' + ', '.join(TASK_SHAPES))
  parser.add_argument('--steps_per_call', type=int, default=10,
                      help='SGD steps per jitted call (K)')
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--num_samples', type=int, default=20)
  parser.add_argument('--layers', type=_sizes, default=(256, 256, 256),
                      help='hidden sizes of the policy, and of the critic '
                      'unless --critic_layers')
  # Acme's make_control_networks defaults to a (512, 512, 256) critic; its
  # control-suite MPO baseline, like the named configs, uses (256, 256, 256).
  # The critic's share of a step sets what estep_states='next' can save.
  parser.add_argument('--critic_layers', type=_sizes, default=None,
                      help="the critic's hidden sizes (default: --layers)")
  parser.add_argument('--seed', type=int, default=0)


def parse_tasks(text: str):
  """The task names of a comma-separated --tasks, or None where one is not
  in TASK_SHAPES (named on stderr; the caller exits 2)."""
  tasks = [t.strip() for t in text.split(',') if t.strip()]
  unknown = [t for t in tasks if t not in TASK_SHAPES]
  if unknown:
    print(f'unknown task(s) {unknown}; known: {list(TASK_SHAPES)}',
          file=sys.stderr)
    return None
  return tasks


def layer_sizes(args) -> tuple:
  """(policy_layers, critic_layers) from the parsed --layers and
  --critic_layers."""
  return args.layers, args.critic_layers or args.layers


def layer_fields(args) -> dict:
  """The sizes as the benchmarks' JSON line records them."""
  policy, critic = layer_sizes(args)
  return {'layers': ','.join(map(str, policy)),
          'critic_layers': ','.join(map(str, critic))}


def random_batches(batch_cls, k: int, b: int, obs_dim: int, act_dim: int,
                   seed: int = 0):
  """A Batch of float32 device arrays with shapes [K, B, ...]."""
  rng = np.random.default_rng(seed)
  f = lambda *s: rng.standard_normal(s).astype(np.float32)
  batch = batch_cls(
      observation=f(k, b, obs_dim),
      action=np.clip(f(k, b, act_dim), -1.0, 1.0),
      reward=f(k, b),
      discount=np.full((k, b), 0.99 ** 5, np.float32),
      next_observation=f(k, b, obs_dim))
  return jax.device_put(batch)


class Runner:
  """Holds a learner state and calls the donating update on it."""

  def __init__(self, update: Callable, state, batches):
    self.update, self.state, self.batches = update, state, batches

  def call(self, n: int = 1) -> None:
    metrics = None
    for _ in range(n):
      self.state, metrics = self.update(self.state, self.batches)
    jax.block_until_ready((self.state, metrics))

  def timed(self, n: int) -> float:
    """Seconds for n calls, blocking at the end."""
    jax.block_until_ready(self.state)
    t0 = time.perf_counter()
    self.call(n)
    return time.perf_counter() - t0


def calls_for(runner: Runner, seconds: float) -> int:
  """How many calls fill about `seconds`, from one timed call (post-warm-up)."""
  dt = runner.timed(1)
  return max(1, int(round(seconds / max(dt, 1e-6))))


def median(xs: Sequence[float]) -> float:
  return float(statistics.median(xs))


def check_forbidden_modules() -> bool:
  """True if no TensorFlow/Reverb/Launchpad module got imported; else says so."""
  bad = sorted(m for m in sys.modules
               if m.split('.')[0] in FORBIDDEN_MODULES)
  if bad:
    print(f'ERROR: the learner core imported modules it must not need on an '
          f'accelerator image ({", ".join(FORBIDDEN_MODULES)}): '
          f'{", ".join(bad[:10])}{" ..." if len(bad) > 10 else ""}. '
          'The benchmark would fail on a GPU image without them.',
          file=sys.stderr)
    return False
  return True


def print_json(payload: dict) -> None:
  print(json.dumps(payload, sort_keys=False))


def finish(payload: dict, core_ok: bool | None = None, **run_fields) -> int:
  """Ends a learner-side benchmark: adds the environment and `run_fields` to
  `payload`, prints it as the last line and returns the exit status, 1 if
  the learner core pulled in a module an accelerator image lacks (checked
  now, or `core_ok` where the caller checked before something else could
  import them)."""
  ok = check_forbidden_modules() if core_ok is None else core_ok
  payload.update(environment_json())
  payload.update(run_fields)
  if not ok:
    payload['error'] = ('forbidden modules imported '
                        '(tensorflow/reverb/launchpad)')
  print_json(payload)
  return 0 if ok else 1
