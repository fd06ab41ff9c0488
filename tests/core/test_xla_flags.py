"""The XLA flags a learner process sets for itself (agents/core/xla_flags.py)."""

import os
import subprocess
import sys

from tandem.agents.core import xla_flags
from tests import REPO_ROOT

FLAG = xla_flags.GPU_COMMAND_BUFFERS


def test_learner_flags_add_command_buffers_and_keep_the_callers():
  assert xla_flags.learner_flags('') == FLAG
  assert xla_flags.learner_flags('--xla_dump_to=/tmp/d') == \
      f'--xla_dump_to=/tmp/d {FLAG}'
  # A choice of command buffers (e.g. XLA's default list, to time a step
  # without loops in them) is kept as set.
  own = '--xla_gpu_enable_command_buffer=FUSION,CUBLAS'
  assert xla_flags.learner_flags(own) == own


_PROCESS = """
import os, jax
from tandem.agents.core import xla_flags
first = xla_flags.set_learner_flags()
total = float(jax.numpy.ones(3).sum())  # starts the backend, reading XLA_FLAGS
second = xla_flags.set_learner_flags()
print(first, second, total, os.environ['XLA_FLAGS'], sep='|')
"""


def test_a_fresh_process_sets_them_and_xla_accepts_them():
  # XLA aborts the process on a flag or value it does not know; this jax's
  # XLA starts with them. Once a backend runs, setting them would change
  # nothing, and says so.
  env = dict(os.environ, XLA_FLAGS='--xla_cpu_enable_fast_math=false')
  out = subprocess.run([sys.executable, '-c', _PROCESS], env=env, cwd=REPO_ROOT,
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  first, second, total, flags = out.stdout.strip().splitlines()[-1].split('|')
  assert (first, second, total) == ('True', 'False', '3.0')
  assert flags == f'--xla_cpu_enable_fast_math=false {FLAG}'
