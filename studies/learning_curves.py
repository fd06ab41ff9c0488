"""Summarises learning runs: eval return vs global env steps, per seed.

    python studies/learning_curves.py RUN_DIR [RUN_DIR ...] [--target 700] [--png out.png]

Prints a markdown table of evaluation returns at each evaluation point, the
final evaluation of each run, the median over runs, and for each run the
first global env step and elapsed time (that the program had run, all launches) at
which the evaluation return reached the target. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from tandem.agents.runtime import logs


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  p.add_argument('runs', nargs='+')
  p.add_argument('--target', type=float, default=700.0)
  p.add_argument('--png')
  args = p.parse_args()
  curves, finals, reach = {}, {}, {}
  for run in args.runs:
    name = os.path.basename(os.path.normpath(run))
    rows = logs.read_csv(os.path.join(run, 'logs', 'evaluator.csv'))
    curves[name] = [(int(r['env_steps']), r['eval_return'],
                     r['elapsed_s']) for r in rows]
    finals[name] = json.load(open(os.path.join(run, 'final.json')))[
        'final_eval_return']
    hit = next(((s, t) for s, v, t in curves[name] if v >= args.target), None)
    reach[name] = hit
  names = list(curves)
  steps = sorted({s // 1000 * 1000 for c in curves.values() for s, _, _ in c})
  print('| env steps | ' + ' | '.join(names) + ' |')
  print('|---:|' + '---:|' * len(names))
  for s in steps:
    cells = []
    for n in names:
      v = [r for st, r, _ in curves[n] if st // 1000 * 1000 == s]
      cells.append(f'{v[-1]:.0f}' if v else '')
    print(f'| {s} | ' + ' | '.join(cells) + ' |')
  print('| **final** | ' + ' | '.join(f'**{finals[n]:.1f}**' for n in names)
        + ' |')
  median = statistics.median(finals.values())
  print(f'\nmedian final evaluation return over {len(names)} runs: '
        f'{median:.1f}')
  for n in names:
    hit = reach[n]
    print(f'{n}: eval >= {args.target:g} first at ' + (
        f'{hit[0]} env steps, {hit[1]:.0f} s since start' if hit else 'never'))
  if args.png:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    for n in names:
      ax.plot([s for s, _, _ in curves[n]], [v for _, v, _ in curves[n]],
              'o-', label=n)
    ax.axhline(args.target, color='gray', ls='--', lw=1)
    ax.set_xlabel('global env steps')
    ax.set_ylabel('evaluation return (mean action)')
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=100)
    print(f'wrote {args.png}')
  print(json.dumps({'median_final_eval_return': round(median, 1),
                    'final_eval_return': {n: round(v, 1)
                                          for n, v in finals.items()},
                    'env_steps_to_target': {n: (h[0] if h else None)
                                            for n, h in reach.items()},
                    'seconds_to_target': {n: (round(h[1]) if h else None)
                                          for n, h in reach.items()}}))


if __name__ == '__main__':
  main()
