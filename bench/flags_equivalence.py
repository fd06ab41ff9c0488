"""Whether the learner's XLA flags change what a step computes: the same
SGD steps run with them and without, in two processes, and the states
compared.

    python bench/flags_equivalence.py [--tasks walker_walk] [--calls 5]
                                      [bench/learner.py's other shape flags]

Each process builds the learner state and K random batches of
bench/learner.py's shapes (same seed), runs --calls calls of the update
(K SGD steps each) for both E-step settings and saves every leaf of the
final state; one runs with the learner node's XLA_FLAGS
(agents/core/xla_flags.py: command buffers that hold the K-step loop), the
other with XLA's default command buffers (`BASELINE`). Command buffers
replay the kernels a step launches, so the states should be bit for bit
the same; where they are not, `max_abs_diff` says by how much, and the run
fails (exit 1) beyond float32 rounding (`RTOL`, `ATOL`). On the CPU the
flag is read and ignored: the two must agree exactly. Imports only jax,
optax, numpy and agents.mpo. The last line printed is one JSON object:
  {"flags_equivalence.max_abs_diff.<estep>.<task>": ...,
   "flags_equivalence.bitwise_equal.<estep>.<task>": ...,
   "flags_equivalence.equivalent": ..., "compared_xla_flags": [...], ...,
   "device": ...}
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import _timing  # binds `tandem` to this checkout
import hlo_ops

import jax
import numpy as np

from tandem.agents.core import xla_flags
from tandem.agents.mpo import learner

# XLA's command buffers without the loop's while and conditionals: a GPU's
# default (BENCHMARKS.md, The learner's XLA flags on a GPU).
BASELINE = xla_flags.DEFAULT_GPU_COMMAND_BUFFERS
# Float32 rounding, compounded over the steps compared.
RTOL, ATOL = 1e-5, 1e-6


def run_steps(task: str, estep_states: str, args) -> dict:
  """{leaf path: array} of the state after --calls calls of the update."""
  cfg, state, batches = hlo_ops.setup(task, estep_states, args)
  update = learner.make_update(cfg)
  for _ in range(args.calls):
    state, _ = update(state, batches)
  leaves = jax.tree_util.tree_flatten_with_path(state)[0]
  return {jax.tree_util.keystr(path): np.asarray(leaf)
          for path, leaf in leaves}


def compare(a: dict, b: dict) -> tuple:
  """(max |a − b| over every leaf, bit for bit equal, within RTOL/ATOL) of
  two states' leaves, which must name the same paths."""
  if a.keys() != b.keys():
    raise ValueError(f'the states differ in their leaves: '
                     f'{sorted(a.keys() ^ b.keys())[:5]}')
  worst, bitwise, close = 0.0, True, True
  for k in a:
    x, y = a[k], b[k]
    bitwise &= x.tobytes() == y.tobytes() and x.shape == y.shape
    if np.issubdtype(x.dtype, np.floating):
      worst = max(worst, float(np.max(np.abs(x.astype(np.float64) -
                                             y.astype(np.float64)),
                                      initial=0.0)))
      close &= bool(np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True))
    else:
      close &= bool(np.array_equal(x, y))
  return worst, bitwise, close


def _leaves_of(saved: dict, prefix: str) -> dict:
  """The leaves of one setting's state among a child's saved arrays."""
  return {k: v for k, v in saved.items() if k.startswith(prefix)}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  _timing.add_learner_args(p)
  p.set_defaults(tasks='walker_walk')
  p.add_argument('--calls', type=_timing.positive_int, default=5,
                 help='calls of the update (K SGD steps each) compared')
  p.add_argument('--child', default=None, help=argparse.SUPPRESS)
  return p.parse_args(argv)


def _child(args, tasks) -> int:
  """Runs the steps under this process's XLA_FLAGS; saves to --child."""
  out = {}
  for task in tasks:
    for estep in hlo_ops.ESTEP_STATES:
      for path, leaf in run_steps(task, estep, args).items():
        out[f'{estep}.{task}|{path}'] = leaf
  np.savez(args.child, **out)
  return 0


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  if args.child:
    return _child(args, tasks)
  print("MPO learner: the same steps with the learner's XLA flags and "
        'without')
  for line in _timing.environment_lines():
    print('  ' + line)
  settings = {'learner': xla_flags.GPU_COMMAND_BUFFERS, 'baseline': BASELINE}
  states = {}
  with tempfile.TemporaryDirectory() as scratch:
    for name, flags in settings.items():
      path = os.path.join(scratch, f'{name}.npz')
      env = dict(os.environ, XLA_FLAGS=flags)
      proc = subprocess.run([sys.executable, os.path.abspath(__file__),
                             *argv, '--child', path], env=env, check=False)
      if proc.returncode != 0:
        print(f'the run with XLA_FLAGS={flags!r} failed (status '
              f'{proc.returncode})', file=sys.stderr)
        return 1
      with np.load(path) as f:
        states[name] = {k: f[k] for k in f.files}
  payload, equivalent = {}, True
  for task in tasks:
    for estep in hlo_ops.ESTEP_STATES:
      worst, bitwise, close = compare(
          *(_leaves_of(states[name], f'{estep}.{task}|')
            for name in ('learner', 'baseline')))
      equivalent &= close
      print(f'  {task}, {estep}: max |difference| {worst:.3g}, '
            f'{"bit for bit" if bitwise else "not bit for bit"}, '
            f'{"within" if close else "BEYOND"} rtol {RTOL} atol {ATOL}')
      payload[f'flags_equivalence.max_abs_diff.{estep}.{task}'] = worst
      payload[f'flags_equivalence.bitwise_equal.{estep}.{task}'] = bitwise
  payload['flags_equivalence.equivalent'] = equivalent
  status = _timing.finish(payload, steps_per_call=args.steps_per_call,
                          batch_size=args.batch_size,
                          num_samples=args.num_samples, calls=args.calls,
                          compared_xla_flags=list(settings.values()),
                          **_timing.layer_fields(args))
  return status if equivalent else 1


if __name__ == '__main__':
  sys.exit(main())
