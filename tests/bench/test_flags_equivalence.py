"""bench/flags_equivalence.py: its comparison of two states, and the script
on the CPU, where the learner's XLA flags are read and ignored, so the two
processes' states must agree bit for bit."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests import REPO_ROOT, load_script

eq = load_script('bench', 'flags_equivalence')


def test_compare_tells_bitwise_rounding_and_real_differences_apart():
  a = {'w': np.array([1.0, 2.0], np.float32), 'n': np.array(3, np.int32)}
  assert eq.compare(a, dict(a)) == (0.0, True, True)
  rounding = dict(a, w=np.array([1.0, 2.0 + 1e-6], np.float32))
  worst, bitwise, close = eq.compare(a, rounding)
  assert not bitwise and close and 0 < worst < 1e-5
  real = dict(a, w=np.array([1.0, 2.01], np.float32))
  assert eq.compare(a, real)[2] is False
  assert eq.compare(a, dict(a, n=np.array(4, np.int32)))[2] is False
  with pytest.raises(ValueError, match='leaves'):
    eq.compare(a, {'w': a['w']})


def test_on_the_cpu_the_two_runs_agree_bit_for_bit():
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, 'bench',
                                    'flags_equivalence.py'),
       '--tasks', 'cartpole_swingup', '--steps_per_call', '2',
       '--batch_size', '8', '--num_samples', '2', '--layers', '16,16',
       '--calls', '2'],
      capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
      check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  payload = json.loads(proc.stdout.strip().splitlines()[-1])
  assert payload['flags_equivalence.equivalent'] is True
  for estep in ('current', 'next'):
    assert payload[f'flags_equivalence.bitwise_equal.{estep}.'
                   'cartpole_swingup'] is True
  assert payload['compared_xla_flags'][0].endswith('WHILE,CONDITIONAL')


def test_a_count_of_calls_below_one_exits_2_naming_the_flag():
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, 'bench',
                                    'flags_equivalence.py'), '--calls', '0'],
      capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)
  assert proc.returncode == 2, proc.stderr[-500:]
  assert '--calls' in proc.stderr and 'at least 1' in proc.stderr
