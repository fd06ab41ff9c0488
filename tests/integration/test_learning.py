"""Learning check (slow, `make test-slow`): the make_run config learns
cartpole:swingup within 100k env steps, judged over 3 seeds.

A statistic a correct learner passes every time: runs of one seed of this
task vary a lot, and settings beside the defaults leave single seeds well
below 750 (BENCHMARKS.md, Learning checks). So: the median of 3 seeds >= 600
and the best >= 700. A broken learner (the runs sit near 200 without
learning) fails both. The stricter figure (median >= 850, no seed below 750)
is measured and recorded in BENCHMARKS.md, not asserted: 850 sits inside the
run-to-run spread of make_run. About 15-30 minutes on 2 cores.
"""

import json
import os
import statistics

import pytest

from tests.integration.conftest import run_tandem


@pytest.mark.slow
def test_cartpole_swingup_learns_within_100k_steps_over_3_seeds(runs_root):
  finals = []
  for seed in (0, 1, 2):
    name = f'learning_s{seed}'
    r = run_tandem(['train', '--config', 'configs/mpo.py:make_run',
                    '--runs_root', runs_root, '--name', name,
                    f'--seed={seed}'], timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    final = json.load(open(os.path.join(runs_root, name, 'final.json')))
    assert final['counts']['env_steps'] <= 100_000 + 2 * 100
    finals.append(final['final_eval_return'])
  assert statistics.median(finals) >= 600, finals
  assert max(finals) >= 700, finals
