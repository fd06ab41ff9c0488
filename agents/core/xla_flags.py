"""XLA flags a learner process runs with (launch/mpo.py's local_resources
puts them into its environment; the learner benchmarks set them too).

On a GPU, XLA records a step's kernels into command buffers (CUDA graphs)
and launches each buffer at once; by default it leaves a while loop and a
conditional out, so the K-step loop's body runs kernel by kernel from the
host. A step is a long chain of small kernels (about 3 µs each on an H200),
so launches are much of its time. The list below is the one measured on an
H200 with jax 0.11.2 (BENCHMARKS.md, Learner speed): XLA's usual types plus
WHILE and CONDITIONAL, named in full because that is the form measured (a
jax whose default list holds more types loses those). Off a GPU the flag
is read and has no effect; XLA aborts on a type it does not know, which
tests/core/test_xla_flags.py checks for the jax installed.
"""

from __future__ import annotations

import os

COMMAND_BUFFER_FLAG = '--xla_gpu_enable_command_buffer'
# XLA's default list (jax 0.11), the baseline the learner's is measured
# and checked against (bench/accelerator.sh, bench/flags_equivalence.py).
DEFAULT_GPU_COMMAND_BUFFERS = (f'{COMMAND_BUFFER_FLAG}='
                               'FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN')
GPU_COMMAND_BUFFERS = f'{DEFAULT_GPU_COMMAND_BUFFERS},WHILE,CONDITIONAL'


def with_flag(xla_flags: str, setting: str) -> str:
  """`xla_flags` (an XLA_FLAGS value) with `setting` ('--name=value') added,
  unless it already sets that flag (the caller's choice is kept)."""
  if setting.partition('=')[0] in xla_flags:
    return xla_flags
  return f'{xla_flags} {setting}'.strip()


def learner_flags(xla_flags: str) -> str:
  """`xla_flags` with the learner's command buffers added, unless it already
  chooses command buffers (kept as set: the way to time a step without
  them)."""
  return with_flag(xla_flags, GPU_COMMAND_BUFFERS)


def set_learner_flags() -> bool:
  """Puts `learner_flags` into this process's XLA_FLAGS; True if they take
  effect. XLA reads the variable once, when jax starts its first backend:
  in a process where that has happened nothing changes and this returns
  False."""
  from jax._src import xla_bridge
  started = getattr(xla_bridge, 'backends_are_initialized', None)
  if started is not None and started():
    return False
  os.environ['XLA_FLAGS'] = learner_flags(os.environ.get('XLA_FLAGS', ''))
  return True
