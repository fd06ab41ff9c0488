"""`tandem compare`: several runs' learning curves, grouped, over seeds.

Runs are grouped by a label: the value of a config field (`--by
mpo.estep_states`), or by default the run directory's name without a
trailing seed (`cartpole_s0`, `cartpole_s1` -> `cartpole`; `folder/name`
where runs named alike lie in different folders).
Each group's curve is the median evaluation return over its runs, with the
interquartile band, against global env steps and against wall-clock
(`elapsed_s`: the time the program has run, all launches), up to where its
shortest run ends; the table gives each group's final return (an
unfinished run's last evaluation, said so) and the env steps and wall-clock
its runs took to reach 50% and 90% of the best group's median final return
(or of `--reference`, an expert's mean return, say), and, against the first
group, the median paired difference of final returns over the seeds both
have. All runs must be of one task (config.json's `env`): others are
refused by name."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from typing import NamedTuple, Optional

import numpy as np

from tandem.agents.runtime import logs
from tandem.launch import plotting
from tandem.launch.errors import EXIT_OK, UsageError, require_writable_dir

_SEED_SUFFIX = re.compile(r'[_-](?:s|seed)\d+$')
FRACTIONS = (0.5, 0.9)


class Run(NamedTuple):
  path: str
  label: str
  seed: Optional[int]
  steps: np.ndarray     # env steps of each evaluation
  seconds: np.ndarray   # elapsed_s of each evaluation
  returns: np.ndarray   # eval_return of each evaluation
  task: Optional[str] = None   # config.json's env
  finished: bool = True        # final.json written: the budget was reached


def _config(path: str) -> dict:
  file = os.path.join(path, 'config.json')
  try:
    with open(file) as f:
      data = json.load(f)
  except (OSError, ValueError, RecursionError) as e:
    raise UsageError(f'{path}: no readable config.json ({e}); is it a Tandem '
                     'run directory?') from e
  if not isinstance(data, dict):
    raise UsageError(f'{file}: not a JSON object of config fields')
  return data


def field_value(config: dict, field: str, path: str):
  """config's value at a dotted path, or a UsageError naming it."""
  value = config
  for part in field.split('.'):
    if not isinstance(value, dict) or part not in value:
      raise UsageError(f'--by {field}: {path}/config.json has no such field')
    value = value[part]
  return value


def label_of(path: str, config: dict, by: Optional[str]) -> str:
  if by:
    return f'{by}={field_value(config, by, path)}'
  return _SEED_SUFFIX.sub('', os.path.basename(os.path.normpath(path)))


def read_run(path: str, by: Optional[str]) -> Run:
  """A run's evaluations; a UsageError naming the file where there are
  none, or a value is not a number."""
  config = _config(path)
  file = os.path.join(path, 'logs', 'evaluator.csv')
  try:
    rows = logs.read_csv(file)
  except OSError as e:
    raise UsageError(f'{file}: cannot be read ({e.strerror or e})') from e
  if not rows:
    raise UsageError(f'{file}: no evaluation yet')
  try:
    steps, seconds, returns = plotting.columns(
        rows, file, ('env_steps', 'elapsed_s', 'eval_return'), finite=True)
  except plotting.PlotError as e:
    raise UsageError(str(e)) from e
  seed, task = config.get('seed'), config.get('env')
  return Run(path, label_of(path, config, by),
             seed if isinstance(seed, int) else None,
             *(np.asarray(c, np.float64) for c in (steps, seconds, returns)),
             task=task if isinstance(task, str) else None,
             finished=os.path.exists(os.path.join(path, 'final.json')))


def one_task(runs: list) -> None:
  """A UsageError naming each task and its runs where the runs are not
  all of one task: returns of different tasks are not on one scale, and a
  threshold taken from one would mean nothing for another. A run whose
  config.json names no env is not judged."""
  by_task: dict = {}
  for run in runs:
    if run.task is not None:
      by_task.setdefault(run.task, []).append(run.path)
  if len(by_task) > 1:
    raise UsageError(
        'runs of different tasks: ' + '; '.join(
            f'{task} ({", ".join(paths)})' for task, paths in by_task.items())
        + '; compare runs of one task')


def group(runs: list) -> dict:
  """{label: [Run]} in the order labels first appear."""
  out: dict = {}
  for run in runs:
    out.setdefault(run.label, []).append(run)
  return out


def repeated_seeds(runs: list) -> dict:
  """{label: [seed, ...]} for each group holding a seed more than once."""
  out = {}
  for label, members in group(runs).items():
    seeds = [r.seed for r in members if r.seed is not None]
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
      out[label] = twice
  return out


def parent_labels(runs: list) -> list:
  """Runs named alike in different folders (`study_a/gail_s0`,
  `study_b/gail_s3`) are different variants, not more seeds: where one name
  covers runs of more than one folder, its runs are labelled `folder/name`.
  The folder is that of the run's absolute path, so a run named from inside
  its folder is labelled as one named from outside."""
  def folder(run):
    return os.path.basename(os.path.dirname(os.path.abspath(run.path)))
  folders: dict = {}
  for run in runs:
    folders.setdefault(run.label, set()).add(folder(run))
  return [r._replace(label=f'{folder(r)}/{r.label}')
          if len(folders[r.label]) > 1 else r for r in runs]


def first_reaching(x: np.ndarray, returns: np.ndarray, threshold: float):
  """The x of the first evaluation at or above threshold, or None."""
  hit = np.flatnonzero(returns >= threshold)
  return float(x[hit[0]]) if hit.size else None


def quartiles(values) -> tuple:
  """(25th, 50th, 75th percentile) of values (linear interpolation)."""
  return tuple(float(q) for q in np.percentile(values, (25, 50, 75)))


def median_reached(values: list):
  """The median over runs of a time to a threshold, counting runs that
  never reached it as infinitely late; None where half or more never did."""
  ordered = sorted(math.inf if v is None else v for v in values)
  middle = float(np.median(ordered)) if ordered else math.inf
  return None if math.isinf(middle) or math.isnan(middle) else middle


def group_table(groups: dict,
                reference: Optional[float] = None) -> tuple[list, float]:
  """(rows, best): one row per group (runs, final-return quartiles, median
  env steps and wall-clock to each fraction of the reference return,
  median paired difference of finals against the first group), and that
  reference: `reference` where given (an expert's mean return, say), else
  the best group's median final return. Where that is not above 0 the
  times are None: a fraction of a return ≤ 0 lies above it, not on the way
  to it (`has_thresholds`)."""
  finals = {g: [float(r.returns[-1]) for r in runs]
            for g, runs in groups.items()}
  best = (max(float(np.median(f)) for f in finals.values())
          if reference is None else float(reference))
  first = next(iter(groups))
  ref_by_seed = {r.seed: float(r.returns[-1]) for r in groups[first]
                 if r.seed is not None}
  rows = []
  for g, runs in groups.items():
    row = {'group': g, 'runs': len(runs), 'final': quartiles(finals[g]),
           'unfinished': [r.path for r in runs if not r.finished]}
    for fraction in FRACTIONS:
      if not has_thresholds(best):
        row[f'steps_{fraction}'] = row[f'seconds_{fraction}'] = None
        continue
      threshold = fraction * best
      row[f'steps_{fraction}'] = median_reached(
          [first_reaching(r.steps, r.returns, threshold) for r in runs])
      row[f'seconds_{fraction}'] = median_reached(
          [first_reaching(r.seconds, r.returns, threshold) for r in runs])
    pairs = [float(r.returns[-1]) - ref_by_seed[r.seed] for r in runs
             if r.seed in ref_by_seed]
    row['paired'] = (None if g == first or not pairs else
                     (float(np.median(pairs)), len(pairs)))
    rows.append(row)
  return rows, best


def has_thresholds(best: float) -> bool:
  """Whether fractions of `best` are levels a learning curve climbs to."""
  return best > 0


def _number(v, spec='{:,.0f}') -> str:
  return '-' if v is None else spec.format(v)


def markdown(rows: list, best: float,
             reference: str = "the best group's median final return",
             wall_clock: bool = True) -> str:
  """The table of `group_table`'s rows; `reference` names what `best` is.
  wall_clock False leaves out the wall-clock columns (runs whose
  evaluations carry no elapsed time). Where `best` is not above 0 the
  threshold columns are left out and the note says why."""
  fractions = FRACTIONS if has_thresholds(best) else ()
  head = ['group', 'runs', 'final return: median [IQR]']
  for fraction in fractions:
    head.append(f'env steps to {fraction:.0%}')
    if wall_clock:
      head.append(f'wall-clock to {fraction:.0%}')
  head.append(f'paired Δ final vs {rows[0]["group"]}')
  lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
  for row in rows:
    q1, q2, q3 = row['final']
    unfinished = len(row.get('unfinished', ()))
    cells = [row['group'],
             f"{row['runs']} ({unfinished} unfinished)" if unfinished
             else str(row['runs']),
             f'{q2:.1f} [{q1:.1f}, {q3:.1f}]']
    for fraction in fractions:
      cells.append(_number(row[f'steps_{fraction}']))
      if wall_clock:
        cells.append(_number(row[f'seconds_{fraction}'], '{:,.0f} s'))
    paired = row['paired']
    cells.append('-' if paired is None else
                 f'{paired[0]:+.1f} ({paired[1]} seeds)')
    lines.append('| ' + ' | '.join(cells) + ' |')
  if fractions:
    lines.append(f'\nthresholds: {", ".join(f"{f:.0%}" for f in fractions)} '
                 f'of {best:.1f}, {reference}; a time is the median over '
                 'runs, "-" where half or more never got there')
  else:
    lines.append(f'\nno thresholds: {reference} is {best:.1f}, and a '
                 'fraction of a return not above 0 lies above it, not on the '
                 'way to it; --reference RETURN (> 0) sets one where a '
                 'positive return means something')
  unfinished = [p for row in rows for p in row.get('unfinished', ())]
  if unfinished:
    lines.append('unfinished (no final.json: the last evaluation stands as '
                 'the final return, and the group\'s curve ends with it): '
                 + ', '.join(unfinished))
  return '\n'.join(lines)


def on_grid(runs: list, axis: str, grid: np.ndarray) -> np.ndarray:
  """[runs, grid] returns interpolated at grid points (each run only up to
  its last evaluation: NaN beyond)."""
  out = np.full((len(runs), len(grid)), np.nan)
  for i, run in enumerate(runs):
    x = getattr(run, axis)
    inside = grid <= x[-1]
    out[i, inside] = np.interp(grid[inside], x, run.returns)
  return out


def curves(runs: list, axis: str, grid: np.ndarray) -> tuple:
  """(x, q1, median, q3): the quartiles over `runs` of their returns at the
  grid points (axis 'steps' or 'seconds') that every run reaches. A curve
  ends where the group's shortest run ends: past it, a "median" of the
  runs left would jump with each run that drops out (runs of one budget end
  at different wall-clock times) and speak for the slower runs only."""
  values = on_grid(runs, axis, grid)
  every = ~np.any(np.isnan(values), axis=0)
  q1, q2, q3 = np.percentile(values[:, every], (25, 50, 75), axis=0)
  return grid[every], q1, q2, q3


def figure(groups: dict):
  """Each group's median curve and interquartile band against global env
  steps (left) and wall-clock (right), on 200 points up to the longest
  run."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  for ax, axis, name in ((axes[0], 'steps', 'global env steps'),
                         (axes[1], 'seconds', 'wall-clock (s)')):
    end = max(getattr(r, axis)[-1] for runs in groups.values() for r in runs)
    grid = np.linspace(0, end, 200)
    for label, runs in groups.items():
      x, q1, q2, q3 = curves(runs, axis, grid)
      line, = ax.plot(x, q2, label=f'{label} (n={len(runs)})')
      ax.fill_between(x, q1, q3, alpha=0.2, color=line.get_color())
    ax.set_xlabel(name)
    ax.set_ylabel('evaluation return')
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.suptitle('median and interquartile range over runs')
  fig.tight_layout()
  return fig


def plot(groups: dict, out: str) -> None:
  fig = figure(groups)
  import matplotlib.pyplot as plt
  from tandem.agents.core import files
  try:
    files.write_atomic(out, lambda f: fig.savefig(f, format='png', dpi=100))
  except OSError as e:
    raise UsageError(f'--out {out}: cannot write the picture '
                     f'({e.strerror or e})') from e
  finally:
    plt.close(fig)


def compare(args) -> int:
  if not args.out.endswith('.png'):
    raise UsageError(f'--out {args.out}: expected a .png file')
  reference = getattr(args, 'reference', None)
  if reference is not None and not (math.isfinite(reference) and
                                    reference > 0):
    raise UsageError(f'--reference: expected a finite return > 0, got '
                     f'{reference}')
  require_writable_dir(args.out)
  runs = [read_run(path, args.by) for path in args.run_dirs]
  one_task(runs)
  if args.by is None:
    runs = parent_labels(runs)
  for label, seeds in repeated_seeds(runs).items():
    print(f'tandem compare: warning: group {label} holds seed(s) '
          f'{", ".join(map(str, seeds))} more than once: are its runs one '
          'variant? (--by FIELD groups by a config field)', file=sys.stderr)
  groups = group(runs)
  rows, best = group_table(groups, reference)
  print(markdown(rows, best) if reference is None else
        markdown(rows, best, 'the --reference return'))
  plot(groups, args.out)
  print(f'\n{args.out}')
  return EXIT_OK
