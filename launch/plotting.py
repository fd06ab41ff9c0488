"""`tandem plot`: learning curves against global env steps."""

from __future__ import annotations

import math
import os
from typing import Optional

from tandem.agents.runtime import logs
from tandem.agents.runtime.rundir import RunDir


class PlotError(ValueError):
  """A log cannot be drawn, or the picture cannot be written; names which."""


def columns(rows: list, path: str, names, finite: bool = False) -> list:
  """The named columns of a log's rows as lists of numbers (finite ones
  with `finite`); PlotError naming the file, the column and the first row
  where one is missing or not such a number (a picture or table of garbage
  would look like a result)."""
  missing = [c for c in names if rows and c not in rows[0]]
  if missing:
    raise PlotError(f'{path}: no column {missing[0]!r}; found '
                    f'{sorted(rows[0])}')
  for n, r in enumerate(rows, start=2):  # line 1 is the header
    for c in names:
      v = r[c]
      if (not isinstance(v, (int, float)) or isinstance(v, bool) or
          (finite and not math.isfinite(v))):
        raise PlotError(f'{path}: line {n}: column {c!r} is {v!r}, expected '
                        f'a {"finite " if finite else ""}number')
  return [[r[c] for r in rows] for c in names]


def series(rows: list, path: str, x: str, y: str) -> tuple[list, list]:
  """The (x, y) columns of a log's rows as numbers (`columns`)."""
  xs, ys = columns(rows, path, (x, y))
  return xs, ys


def plot_run(run_dir: str, out: Optional[str] = None) -> str:
  rd = RunDir(run_dir)
  eval_csv = os.path.join(rd.logs, 'evaluator.csv')
  if not os.path.isfile(eval_csv):
    raise FileNotFoundError(f'{eval_csv}: no evaluator log; is {run_dir} a '
                            'Tandem run directory with an evaluation yet?')
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(7, 4.6))
  for name in sorted(os.listdir(rd.logs)):
    if name.startswith('actor_') and name.endswith('.csv'):
      path = os.path.join(rd.logs, name)
      rows = logs.read_csv(path)
      if rows:
        ax.plot(*series(rows, path, 'env_steps', 'episode_return'), '.',
                alpha=0.3, markersize=3, label=f'{name[:-4]} (episodes)')
  rows = logs.read_csv(eval_csv)
  ax.plot(*series(rows, eval_csv, 'env_steps', 'eval_return'),
          'o-', color='black', label='evaluator (mean action)')
  sampled = [r for r in rows if isinstance(r.get('eval_sampled_return'),
                                           float) and
             math.isfinite(r['eval_sampled_return'])]
  if sampled:  # eval_sampled: the actions the actors take, same params
    ax.plot([r['env_steps'] for r in sampled],
            [r['eval_sampled_return'] for r in sampled], 'o--',
            color='tab:blue', label='evaluator (samples)')
  learned = [r for r in rows if isinstance(r.get('learned_return'), float)]
  top = ax  # the axes drawn last, which holds the legend
  if learned:
    # Adversarial runs: what the generator optimises, on the same x-axis.
    top = ax.twinx()
    top.plot([r['env_steps'] for r in learned],
             [r['learned_return'] for r in learned], 's--',
             color='tab:red', label='learned return (discriminator)')
    top.set_ylabel('learned return', color='tab:red')
  ax.set_xlabel('global env steps')
  ax.set_ylabel('episode return')
  ax.set_title(os.path.basename(os.path.abspath(run_dir)))
  ax.grid(alpha=0.3)
  # One legend, under the plot, on the axes drawn last: inside, it would
  # hide curves (a legend on the first axes lies under the learned
  # return's line, one on the twin avoids only that line).
  handles, labels = ax.get_legend_handles_labels()
  if top is not ax:
    more = top.get_legend_handles_labels()
    handles, labels = handles + more[0], labels + more[1]
  top.legend(handles, labels, fontsize=8, ncol=2, loc='upper center',
             bbox_to_anchor=(0.5, -0.14), frameon=False)
  out = out or os.path.join(run_dir, 'learning_curve.png')
  fig.tight_layout()
  try:
    if os.path.islink(out):
      raise PlotError(f'{out} is a symbolic link; tandem plot writes only '
                      'regular files, never through a link')
    fig.savefig(out, dpi=100)
  except OSError as e:
    raise PlotError(f'{out}: cannot write the picture ({e.strerror or e}); '
                    'choose another --out') from e
  finally:
    plt.close(fig)
  return out
