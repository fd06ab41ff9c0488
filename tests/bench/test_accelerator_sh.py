"""bench/accelerator.sh, read: the scripts it runs exist, its time limits
fit one device command (600 s), which a session cannot extend, and its
baseline flags are XLA's default command buffers."""

import os
import re
import subprocess
import sys

from tandem.agents.core import xla_flags
from tests import REPO_ROOT

DEVICE_COMMAND_S = 600


def _script():
  with open(os.path.join(REPO_ROOT, 'bench', 'accelerator.sh')) as f:
    return f.read()


def test_every_benchmark_it_runs_exists_and_the_limits_fit_one_command():
  text = _script()
  # `bench NAME LIMIT SCRIPT ...` lines of the default call (after the
  # variant call's early exit).
  default = text[text.index('exit $status\nfi'):]
  runs = re.findall(r'^(?:\S+=\S+ )?bench (\S+) (\d+) (\S+)', default,
                    flags=re.M)
  assert [r[0] for r in runs][:2] == ['learner', 'kernel_profile']
  for _, _, script in runs:
    assert os.path.exists(os.path.join(REPO_ROOT, 'bench', f'{script}.py'))
  probe = int(re.search(r'timeout -k (\d+) (\d+) "\$PY" -c', text).group(2))
  kill = int(re.search(r'timeout -k (\d+) "\$limit"', text).group(1))
  worst = probe + 5 + sum(int(limit) + kill for _, limit, _ in runs)
  assert worst <= DEVICE_COMMAND_S - 20, worst


def test_its_baseline_is_xlas_default_list_the_learners_extends():
  line = re.search(r'^BASELINE_FLAGS=.*?\|\| exit 1$', _script(),
                   flags=re.M | re.S).group(0)
  out = subprocess.run(
      ['bash', '-c', f'{line}\necho "$BASELINE_FLAGS"'], cwd=REPO_ROOT,
      env=dict(os.environ, PY=sys.executable), capture_output=True,
      text=True, timeout=60, check=True).stdout.strip()
  assert out == xla_flags.DEFAULT_GPU_COMMAND_BUFFERS
  assert xla_flags.GPU_COMMAND_BUFFERS.startswith(out + ',')
