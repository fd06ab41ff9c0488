"""bench/ab.py: ratios of two checkouts' benchmark figures, from runs that
alternate, on two fake checkouts whose script prints known figures."""

import json

import pytest

from tests import load_script

ab = load_script('bench', 'ab')

SCRIPT = """import json, sys
print('warming up')
print(json.dumps({'steps_per_s': %s, 'label': 'x', 'flag': True,
                  'args': len(sys.argv) - 1}))
"""


def _checkout(root, name, rate, extra=''):
  bench = root / name / 'bench'
  bench.mkdir(parents=True)
  (bench / 'fake.py').write_text(SCRIPT % rate + extra)
  return root / name


def test_ratios_of_alternating_runs(tmp_path, capsys):
  base = _checkout(tmp_path, 'base', '100.0')
  this = _checkout(tmp_path, 'this', '95.0')
  rc = ab.main(['--base', str(base), '--this', str(this), '--rounds', '3',
                'fake.py', '--', '--seconds', '1'])
  out = capsys.readouterr().out.strip().splitlines()
  assert rc == 0
  got = json.loads(out[-1])
  assert got['ratio.steps_per_s'] == pytest.approx(0.95)
  assert got['ratio.args'] == 1.0   # both saw the two arguments
  assert 'ratio.label' not in got and 'ratio.flag' not in got
  assert got['rounds'] == 3
  # The order reverses every round.
  names = [line.split(':')[0] for line in out[:-1]]
  assert names == ['round 1 base', 'round 1 this', 'round 2 this',
                   'round 2 base', 'round 3 base', 'round 3 this']


def test_a_missing_script_or_a_failed_run_is_named(tmp_path, capsys):
  base = _checkout(tmp_path, 'base', '100.0')
  this = _checkout(tmp_path, 'this', '1 / 0')
  assert ab.main(['--base', str(base), '--this', str(this),
                  'nope.py']) == 2
  assert 'nope.py: no such file' in capsys.readouterr().err
  with pytest.raises(SystemExit, match='failed'):
    ab.main(['--base', str(base), '--this', str(this), 'fake.py'])
