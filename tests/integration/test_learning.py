"""Learning check (slow, `make test-slow`): the make_run config learns
cartpole:swingup to an evaluation return >= 700 within 100k env steps.

About 7-10 minutes on 2 cores; BENCHMARKS.md reports 3 seeds.
"""

import json
import os

import pytest

from tests.integration.conftest import run_tandem


@pytest.mark.slow
def test_cartpole_swingup_reaches_700_within_100k_steps(runs_root):
  r = run_tandem(['train', '--config', 'configs/mpo.py:make_run',
                  '--runs_root', runs_root, '--name', 'learning'],
                 timeout=1800)
  assert r.returncode == 0, r.stderr[-3000:]
  final = json.load(open(os.path.join(runs_root, 'learning', 'final.json')))
  assert final['counts']['env_steps'] <= 100_000 + 2 * 100
  assert final['final_eval_return'] >= 700, final
