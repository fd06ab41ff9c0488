"""BENCHMARKS.md's adversarial summary lines are what their records say.

Each JSON line of `studies/ail_learning.py summary` quoted in a section that
names its records (`studies/results/<study>/`, or the runs root they came
from) is rebuilt from those records alone, one folder or two together, as a
fresh clone's `summary --records_dir` would, and must agree on every key it
quotes (a line quoted before a key existed lacks it). Without
../shared's cartpole demonstrations the expert's mean is the README value
and `seeds_holding_if_steady`, which needs every episode's return, is not
compared. The imitation library's lines (`"library"`) are another study's
and are left out; every other line must name its records."""

import functools
import json
import os
import re

import pytest

from tests import REPO_ROOT, load_script

al = load_script('studies', 'ail_learning')

BENCHMARKS = os.path.join(REPO_ROOT, 'BENCHMARKS.md')
RESULTS = os.path.join(REPO_ROOT, 'studies', 'results')
KINDS = ('gail', 'airl')
# The demonstrations each task's studies measured against.
DEMOS = {
    'cartpole:swingup': os.path.join(REPO_ROOT, '..', 'shared', 'demos',
                                     'cartpole_swingup_expert.npz'),
    'point_mass:easy': os.path.join(REPO_ROOT, 'tests', 'data',
                                    'point_mass_easy_expert.npz'),
    'walker:walk': os.path.join(REPO_ROOT, 'tests', 'data',
                                'walker_walk_expert.npz'),
}
# A records folder is named by its path, by its name alone in a list after
# one, or by the runs root it was recorded from (`runs/<name>`).
WORD = re.compile(r'[A-Za-z][\w.-]*\w')


def _holds_cells(folder: str) -> bool:
  """Whether a folder of studies/results holds this study's cell records."""
  if not os.path.isdir(os.path.join(RESULTS, folder)):
    return False
  for name in os.listdir(os.path.join(RESULTS, folder)):
    record = al.harness.read_json(os.path.join(RESULTS, folder, name))
    if isinstance(record, dict) and str(record.get('format')).startswith(
        'tandem.ail_learning.cell'):
      return True
  return False


RECORDED = frozenset(f for f in os.listdir(RESULTS) if _holds_cells(f))


def quoted_lines():
  """[(line number, the JSON object, the records folders its section
  names)] for every summary line of an adversarial kind but the imitation
  library's; a line that is not JSON comes as its text, to fail by name
  (at collection it would stop every test of the run)."""
  sections, current, fenced = [], None, False
  with open(BENCHMARKS, encoding='utf-8') as f:
    for number, line in enumerate(f, 1):
      if line.lstrip().startswith('```'):
        fenced = not fenced
      elif line.startswith('#') and not fenced:
        current = {'folders': [], 'lines': []}
        sections.append(current)
        continue
      if current is None:
        continue
      current['folders'] += [w for w in WORD.findall(line)
                             if w in RECORDED and w not in current['folders']]
      if line.startswith('{"task"'):
        try:
          current['lines'].append((number, json.loads(line)))
        except ValueError:
          current['lines'].append((number, line.strip()))
  return [(number, quoted, section['folders'])
          for section in sections for number, quoted in section['lines']
          if not isinstance(quoted, dict) or (
              'library' not in quoted and
              any(key.split('.')[0] in KINDS for key in quoted))]


@functools.lru_cache(maxsize=None)
def expert(task):
  """(the expert's episode returns or None, their mean), read once a task."""
  returns, _ = al.expert_returns(DEMOS[task])
  return returns, (al.EXPERT_MEAN_FALLBACK if returns is None
                   else returns.mean())


def rebuilt(folders, kinds, task):
  """The summary's keys from the records under `folders` alone (read only),
  and whether the expert's episode returns were at hand."""
  returns, expert_mean = expert(task)
  cells = al.read_cells(os.path.join(RESULTS, '.none'), kinds, expert_mean,
                        returns=returns,
                        also_records=[os.path.join(RESULTS, f)
                                      for f in folders])
  out = {'task': task, 'expert_return_mean': round(float(expert_mean), 2)}
  for kind in kinds:
    if not cells[kind] or any(c['task'] != task for c in cells[kind]):
      return None, returns is not None
    for key, value in al.kind_stats(cells[kind]).items():
      out[f'{kind}.{key}'] = value
  return out, returns is not None


def differences(quoted, built, with_returns):
  skip = {'task'} | (set() if with_returns else
                     {f'{k}.seeds_holding_if_steady' for k in KINDS})
  return {key: (value, built.get(key, '(absent)'))
          for key, value in quoted.items()
          if key not in skip and built.get(key, '(absent)') != value}


def candidates(folders):
  """Each folder alone, then each pair (a study continued in a second
  folder, e.g. three more seeds); `folders` are RECORDED's."""
  singles = [[f] for f in folders]
  pairs = [a + b for i, a in enumerate(singles) for b in singles[i + 1:]]
  return singles + pairs


LINES = quoted_lines()


def test_the_quoted_lines_are_found():
  # Enough that a parsing slip cannot pass by checking nothing.
  assert len(LINES) >= 30


@pytest.mark.parametrize('number, quoted, folders', [
    pytest.param(n, q, f, id=f'BENCHMARKS.md:{n}') for n, q, f in LINES])
def test_a_quoted_summary_line_is_its_records(number, quoted, folders):
  assert isinstance(quoted, dict), f'BENCHMARKS.md:{number}: not JSON'
  assert folders, (f'BENCHMARKS.md:{number}: its section names no records '
                   '(studies/results/<study>/)')
  kinds = [k for k in KINDS if any(key.startswith(k + '.') for key in quoted)]
  nearest = None
  for combo in candidates(folders):
    try:
      built, with_returns = rebuilt(combo, kinds, quoted['task'])
    except al.harness.Refusal:
      continue  # e.g. one seed in both folders of a pair
    if built is None:
      continue
    diff = differences(quoted, built, with_returns)
    if not diff:
      return
    if nearest is None or len(diff) < len(nearest[1]):
      nearest = (combo, diff)
  pytest.fail(f'BENCHMARKS.md:{number}: no records named in its section '
              f'({folders}) give this line; nearest {nearest}')
