"""The learning check of the adversarial program (GAIL, AIRL) on
cartpole:swingup: runs every (kind, seed) cell, then summarises how fast and
how far the true evaluation return climbs towards the expert's.

    python studies/ail_learning.py run --kinds gail,airl --seeds 0,1,2
        [--runs_root runs/ail_learning] [--demos FILE.npz] [--budget 150000]
        [--records_dir DIR] [--png PNG] [--dry_run]
    python studies/ail_learning.py summary [--runs_root runs/ail_learning]
        [--kinds gail,airl] [--demos FILE.npz] [--records_dir DIR] [--png PNG]

`run` trains the cells one at a time (`tandem train-ail`, from the repo
root), each as RUNS_ROOT/<kind>_s<seed>, its output streamed to the terminal
and appended to RUNS_ROOT/<kind>_s<seed>.log. It is resumable: a cell whose
run directory holds final.json is skipped, one that holds a run without
final.json (interrupted) is continued with `train-ail --resume`. After each
cell it prints the summary so far. --dry_run prints what it would run.

`summary` reads every RUNS_ROOT/<kind>_s<seed> (logs/evaluator.csv,
final.json) and reports, per seed, the global env steps and the wall-clock
seconds the program had run (all launches) at which the evaluation return
first reached 50% and 90% of the expert's mean return (from the
demonstrations file's episode_returns, or 869.36 where the file is absent),
the final and the best evaluation return; per kind, the medians. A median of
steps (or seconds) to a threshold is taken over the seeds that reached it,
and is None where fewer than half of the seeds did. Ends with one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _cells
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from tandem.agents.runtime import logs
import _cells  # studies/_cells.py

KINDS = ('gail', 'airl')
FRACTIONS = (0.5, 0.9)
EXPERT_MEAN_FALLBACK = 869.36  # /work/shared/demos/README.md
DEFAULT_RUNS_ROOT = os.path.join(REPO_ROOT, 'runs', 'ail_learning')
DEFAULT_DEMOS = os.path.normpath(os.path.join(
    REPO_ROOT, '..', 'shared', 'demos', 'cartpole_swingup_expert.npz'))
DEFAULT_BUDGET = 150_000
RECORD_FORMAT = 'tandem.ail_learning.cell/1'
RUN_NAME = re.compile(r'^([a-z]+)_s(\d+)$')
EXIT_INTERRUPTED = _cells.EXIT_INTERRUPTED


def _pct(fraction: float) -> str:
  return f'{round(fraction * 100)}pct'


# ---------------------------------------------------------------- summary


def expert_mean(demos: str) -> tuple[float, str]:
  """The expert's mean episode return and where it came from."""
  if not os.path.isfile(demos):
    return EXPERT_MEAN_FALLBACK, f'{demos} absent; README value'
  import numpy as np
  with np.load(demos, allow_pickle=False) as data:
    if 'episode_returns' not in data.files:
      raise SystemExit(f'ail_learning: {demos} has no episode_returns array '
                       f'(arrays: {sorted(data.files)})')
    returns = np.asarray(data['episode_returns'], dtype=np.float64)
  if returns.size == 0:
    raise SystemExit(f'ail_learning: {demos}: episode_returns is empty')
  return float(returns.mean()), f'{demos}, {returns.size} episodes'


def find_runs(runs_root: str, kinds) -> dict:
  """{kind: [(seed, run_dir), ...] sorted by seed} for each
  RUNS_ROOT/<kind>_s<seed>."""
  found = {k: [] for k in kinds}
  if os.path.isdir(runs_root):
    for entry in os.listdir(runs_root):
      m = RUN_NAME.match(entry)
      path = os.path.join(runs_root, entry)
      if m and m.group(1) in found and os.path.isdir(path):
        found[m.group(1)].append((int(m.group(2)), path))
  return {k: sorted(v) for k, v in found.items()}


def _number(v):
  """A finite float read from a CSV cell, else None (empty, text, nan: a
  record must compare equal to itself when written again)."""
  return v if isinstance(v, float) and math.isfinite(v) else None


def run_parts(run_dir: str) -> tuple:
  """(evaluation rows, final.json, config.json) of a run directory; the
  JSON files as dicts, None where absent."""
  csv_path = os.path.join(run_dir, 'logs', 'evaluator.csv')
  rows = logs.read_csv(csv_path) if os.path.isfile(csv_path) else []
  curve = []
  for r in rows:
    steps, ret = _number(r.get('env_steps')), _number(r.get('eval_return'))
    if steps is None or ret is None:
      continue  # a torn last line of a run that is being written
    curve.append({'env_steps': int(steps),
                  'elapsed_s': _number(r.get('elapsed_s')),
                  'eval_return': ret,
                  'learned_return': _number(r.get('learned_return')),
                  'final': bool(_number(r.get('final')))})
  # Rows are appended in time order, restarts included; the global counts
  # order them. A stable sort keeps the periodic row before the final one.
  curve.sort(key=lambda p: p['env_steps'])
  final = _read_json(os.path.join(run_dir, 'final.json'))
  try:
    config = _read_json(os.path.join(run_dir, 'config.json'))
  except ValueError:
    config = None  # only recorded, never read back for the figures
  return curve, final, config


def _read_json(path: str):
  """The file's JSON, None if there is no file."""
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    return json.load(f)


def figures(kind: str, seed: int, source: str, curve: list, final, expert:
            float) -> dict:
  """The summary's figures of one cell, from its evaluation rows and its
  final.json (None if unfinished), wherever they were read from."""
  out = {'kind': kind, 'seed': seed, 'run_dir': source,
         'finished': final is not None, 'evaluations': len(curve),
         'env_steps': curve[-1]['env_steps'] if curve else 0,
         'elapsed_s': None, 'budget': None,
         'final_return': None, 'final_learned_return': None,
         'max_return': None, 'max_return_env_steps': None}
  if curve:
    out['elapsed_s'] = curve[-1]['elapsed_s']
    best = max(curve, key=lambda p: p['eval_return'])
    out['max_return'] = best['eval_return']
    out['max_return_env_steps'] = best['env_steps']
  if final is not None:
    counts = final.get('counts', {})
    out['final_return'] = float(final['final_eval_return'])
    out['env_steps'] = int(counts.get('env_steps', out['env_steps']))
    if counts.get('elapsed_s') is not None:
      out['elapsed_s'] = float(counts['elapsed_s'])
    out['budget'] = final.get('budget')
    finals = [p for p in curve if p['final']]
    if finals:
      out['final_learned_return'] = finals[-1]['learned_return']
  for fraction in FRACTIONS:
    hit = next((p for p in curve if p['eval_return'] >= fraction * expert),
               None)
    out[f'env_steps_to_{_pct(fraction)}'] = hit['env_steps'] if hit else None
    out[f'elapsed_s_to_{_pct(fraction)}'] = (
        round(hit['elapsed_s'], 1) if hit and hit['elapsed_s'] is not None
        else None)
  for key in ('elapsed_s', 'final_return', 'final_learned_return',
              'max_return'):
    if out[key] is not None:
      out[key] = round(out[key], 1)
  out['curve'] = curve
  return out


# ------------------------------------------------------ committed records
# (studies/_cells.py says why.) A record holds what the figures are computed
# from, never the figures alone, so a change of the statistics recomputes
# them.


RecordError = _cells.RecordError  # a record that cannot be read as its cell


def default_records_dir(runs_root: str) -> str:
  return os.path.join(REPO_ROOT, 'studies', 'results',
                      os.path.basename(os.path.normpath(runs_root)))


def make_record(kind: str, seed: int, curve: list, final: dict,
                config) -> dict:
  return {'format': RECORD_FORMAT, 'kind': kind, 'seed': seed,
          'final': final, 'config': config, 'curve': curve}


def read_record(path: str, kind: str, seed: int) -> tuple:
  """(curve, final, config) of a record, as run_parts gives them;
  RecordError naming the file and what is wrong where it is not a finished
  cell of this kind and seed."""
  rec = _cells.load_record(path, RECORD_FORMAT, 'kind', kind, seed)
  try:
    final = rec['final']
    if not isinstance(final, dict):
      raise TypeError('final must be an object')
    float(final['final_eval_return'])
    curve = [{'env_steps': int(p['env_steps']),
              'elapsed_s': _number(p['elapsed_s']),
              'eval_return': float(p['eval_return']),
              'learned_return': _number(p['learned_return']),
              'final': bool(p['final'])} for p in rec['curve']]
  except (KeyError, TypeError, ValueError) as e:
    raise RecordError(f'{path}: malformed record ({e!r})') from e
  return curve, final, rec.get('config')


def find_records(records_dir, kinds) -> dict:
  """{kind: {seed: path}} for RECORDS_DIR/<kind>_s<seed>.json."""
  found = {k: {} for k in kinds}
  for kind, seed, path in _cells.find_records(records_dir, kinds, RUN_NAME):
    found[kind][seed] = path
  return found


def store_record(records_dir: str, kind: str, seed: int, run_dir: str,
                 parts: tuple) -> bool:
  """Records a finished run directory from its run_parts (never over
  another run's record)."""
  curve, final, config = parts
  return _cells.store_record(_cells.record_path(records_dir, kind, seed),
                             make_record(kind, seed, curve, final, config),
                             'ail_learning', run_dir)


def _median(values):
  return statistics.median(values) if values else None


def _median_reached(values, n: int):
  """Median over the seeds that reached; None where fewer than half did."""
  reached = [v for v in values if v is not None]
  if not reached or 2 * len(reached) < n:
    return None
  return _median(reached)


def kind_stats(runs: list) -> dict:
  n = len(runs)
  out = {'seeds': n}
  for fraction in FRACTIONS:
    pct = _pct(fraction)
    steps = [r[f'env_steps_to_{pct}'] for r in runs]
    secs = [r[f'elapsed_s_to_{pct}'] for r in runs]
    reached = sum(s is not None for s in steps)
    med = _median_reached(steps, n)
    med_s = _median_reached(secs, n)
    out[f'env_steps_to_{pct}_median'] = None if med is None else round(med)
    out[f'elapsed_s_to_{pct}_median'] = (None if med_s is None
                                         else round(med_s, 1))
    out[f'seeds_reaching_{pct}'] = f'{reached}/{n}'
  finals = [r['final_return'] for r in runs if r['final_return'] is not None]
  maxes = [r['max_return'] for r in runs if r['max_return'] is not None]
  out['finished'] = f'{len(finals)}/{n}'
  med = _median(finals)
  out['final_return_median'] = None if med is None else round(med, 1)
  med = _median(maxes)
  out['max_return_median'] = None if med is None else round(med, 1)
  return out


def _cell(v, fmt='{:.0f}'):
  return '–' if v is None else fmt.format(v)


def print_tables(kinds, runs_by_kind, stats, expert: float) -> None:
  lo, hi = (f * expert for f in FRACTIONS)
  for kind in kinds:
    runs, st = runs_by_kind[kind], stats[kind]
    print(f'\n### {kind.upper()} on cartpole:swingup — expert mean '
          f'{expert:.2f}; 50% = {lo:.1f}, 90% = {hi:.1f}\n')
    if not runs:
      print('(no runs)')
      continue
    print('| seed | env steps to 50% | s to 50% | env steps to 90% | '
          's to 90% | final eval | max eval (at env steps) | env steps | '
          'elapsed s | status |')
    print('|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---|')
    for r in runs:
      status = ('finished, record' if r.get('recorded') else
                'finished') if r['finished'] else (
          'no evaluations yet' if not r['evaluations'] else 'unfinished')
      best = ('–' if r['max_return'] is None else
              f"{r['max_return']:.1f} ({r['max_return_env_steps']})")
      print(f"| {r['seed']} | {_cell(r['env_steps_to_50pct'])} | "
            f"{_cell(r['elapsed_s_to_50pct'])} | "
            f"{_cell(r['env_steps_to_90pct'])} | "
            f"{_cell(r['elapsed_s_to_90pct'])} | "
            f"{_cell(r['final_return'], '{:.1f}')} | {best} | "
            f"{r['env_steps']} | {_cell(r['elapsed_s'])} | {status} |")
    print(f"| **median** | {_cell(st['env_steps_to_50pct_median'])} | "
          f"{_cell(st['elapsed_s_to_50pct_median'])} | "
          f"{_cell(st['env_steps_to_90pct_median'])} | "
          f"{_cell(st['elapsed_s_to_90pct_median'])} | "
          f"{_cell(st['final_return_median'], '{:.1f}')} | "
          f"{_cell(st['max_return_median'], '{:.1f}')} | | | |")
    print(f"\nreached 50%: {st['seeds_reaching_50pct']} seeds; reached 90%: "
          f"{st['seeds_reaching_90pct']} seeds; finished: {st['finished']} "
          '(medians to a threshold are over the seeds that reached it, – '
          'where fewer than half did)')


def write_png(path: str, kinds, runs_by_kind, expert: float) -> None:
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  shown = [k for k in kinds if runs_by_kind[k]] or list(kinds)
  fig, axes = plt.subplots(1, len(shown), figsize=(6.5 * len(shown), 4.2),
                           squeeze=False, sharey=True)
  for ax, kind in zip(axes[0], shown):
    twin = None
    for i, r in enumerate(runs_by_kind[kind]):
      color = f'C{i}'
      steps = [p['env_steps'] for p in r['curve']]
      ax.plot(steps, [p['eval_return'] for p in r['curve']], 'o-', ms=3,
              color=color, label=f"seed {r['seed']}"
              + ('' if r['finished'] else ' (unfinished)'))
      learned = [(s, p['learned_return']) for s, p in zip(steps, r['curve'])
                 if p['learned_return'] is not None]
      if learned:
        twin = twin or ax.twinx()
        twin.plot([s for s, _ in learned], [v for _, v in learned], ':',
                  color=color, alpha=0.6, lw=1)
    for fraction in FRACTIONS:
      ax.axhline(fraction * expert, color='gray', ls='--', lw=1)
      ax.text(0.01, fraction * expert, f' {fraction:.0%} of expert',
              transform=ax.get_yaxis_transform(), va='bottom', fontsize=8,
              color='gray')
    if twin is not None:
      twin.set_ylabel('learned return (dotted)', color='gray')
    ax.set_title(f'{kind.upper()} — cartpole:swingup')
    ax.set_xlabel('global env steps')
    ax.set_ylabel('evaluation return (mean action)')
    ax.grid(alpha=0.3)
    if runs_by_kind[kind]:
      ax.legend(loc='lower right', fontsize=8)
  fig.tight_layout()
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)
  print(f'wrote {path}')


def read_cells(runs_root: str, kinds, expert: float, records_dir=None) -> dict:
  """{kind: [figures, ...] by seed}: each seed's finished run directory
  (recorded into records_dir on the way), else its record, else its
  unfinished run directory. An unreadable record is left out, with a
  warning naming it."""
  runs = find_runs(runs_root, kinds)
  records = find_records(records_dir, kinds)
  out = {}
  for kind in kinds:
    dirs = dict(runs[kind])
    cells = []
    for seed in sorted(set(dirs) | set(records[kind])):
      run_dir = dirs.get(seed)
      # An unfinished run directory beside a record is not read at all.
      parts = (run_parts(run_dir) if run_dir and (
          seed not in records[kind] or
          os.path.isfile(os.path.join(run_dir, 'final.json'))) else None)
      if parts is not None and parts[1] is not None:
        if records_dir:
          store_record(records_dir, kind, seed, run_dir, parts)
        cells.append(figures(kind, seed, run_dir, parts[0], parts[1], expert))
      elif seed in records[kind]:
        path = records[kind][seed]
        try:
          curve, final, _ = read_record(path, kind, seed)
        except RecordError as e:
          print(f'ail_learning: {e}; not counted (restore it with git '
                'checkout, or delete it)', file=sys.stderr)
          continue
        cell = figures(kind, seed, path, curve, final, expert)
        cell['recorded'] = True
        cells.append(cell)
      else:
        cells.append(figures(kind, seed, run_dir, parts[0], None, expert))
    out[kind] = cells
  return out


def summarise(runs_root: str, kinds, demos: str, png=None,
              records_dir=None) -> dict:
  expert, source = expert_mean(demos)
  runs_by_kind = read_cells(runs_root, kinds, expert, records_dir)
  stats = {k: kind_stats(runs_by_kind[k]) for k in kinds}
  print(f'runs under {runs_root}'
        + (f' and records in {records_dir}' if records_dir else '')
        + f'; expert mean return {expert:.2f} ({source})')
  print_tables(kinds, runs_by_kind, stats, expert)
  if png:
    write_png(png, kinds, runs_by_kind, expert)
  result = {'expert_return_mean': round(expert, 2)}
  for k in kinds:
    for key, value in stats[k].items():
      result[f'{k}.{key}'] = value
  result['runs'] = {f"{r['kind']}_s{r['seed']}": {
      key: value for key, value in r.items()
      if key not in ('curve', 'kind', 'run_dir', 'recorded')}
      for k in kinds for r in runs_by_kind[k]}
  print(json.dumps(result), flush=True)
  return result


# -------------------------------------------------------------------- run


def _budget_note(done_budget, budget: int, what: str) -> str:
  if done_budget is not None and done_budget != budget:
    return (f' with a budget of {done_budget} env steps, not {budget}; '
            f'delete {what} to redo it')
  return ''


def cell_plan(runs_root: str, demos: str, kind: str, seed: int,
              budget: int, records_dir=None):
  """(action, command, note) for one cell: action is 'skip' (finished here
  or recorded), 'resume', 'start' or 'refuse' (its record is unreadable);
  command is None for 'skip' and 'refuse'."""
  name = f'{kind}_s{seed}'
  run_dir = os.path.join(runs_root, name)
  base = [sys.executable, '-m', 'tandem.launch.cli', 'train-ail']
  final_path = os.path.join(run_dir, 'final.json')
  if os.path.isfile(final_path):
    try:
      with open(final_path) as f:
        done_budget = json.load(f).get('budget')
    except (OSError, ValueError):
      done_budget = None
    return 'skip', None, 'finished' + _budget_note(
        done_budget, budget, 'the run directory')
  record = (_cells.record_path(records_dir, kind, seed) if records_dir
            else None)
  if record is not None and os.path.exists(record):
    # Finished on another machine: never rerun over it, nor resume an
    # interrupted run directory of it here.
    try:
      _, final, _ = read_record(record, kind, seed)
    except RecordError as e:
      return 'refuse', None, f'{e}; restore it (git checkout) or delete it'
    return 'skip', None, f'finished (recorded in {record})' + _budget_note(
        final.get('budget'), budget, 'the record')
  config_path = os.path.join(run_dir, 'config.json')
  if os.path.isfile(config_path):
    note = 'interrupted; continuing it'
    try:
      with open(config_path) as f:
        cfg = json.load(f)
      if cfg.get('seed') != seed or cfg.get('ail', {}).get('kind') != kind:
        note += (f" (warning: its config has seed {cfg.get('seed')}, kind "
                 f"{cfg.get('ail', {}).get('kind')})")
    except (OSError, ValueError, AttributeError):
      pass
    return 'resume', base + ['--resume', run_dir,
                             f'--env_step_budget={budget}'], note
  return 'start', base + [
      '--config', f'configs/ail.py:{kind}_cartpole', '--demos', demos,
      f'--runs_root={runs_root}', '--name', name, f'--seed={seed}',
      f'--env_step_budget={budget}'], 'new'


def run_cell(command, log_path: str) -> int:
  """One cell from the repo root (studies/_cells.py)."""
  return _cells.run_cell(command, log_path, REPO_ROOT, 'ail_learning')


def run(args) -> int:
  if not args.dry_run and not os.path.isfile(args.demos):
    raise SystemExit(f'ail_learning: --demos {args.demos}: no such file')
  cells = [(k, s) for k in args.kinds for s in args.seeds]
  failed = []
  for i, (kind, seed) in enumerate(cells, 1):
    name = f'{kind}_s{seed}'
    action, command, note = cell_plan(args.runs_root, args.demos, kind,
                                      seed, args.budget, args.records_dir)
    head = f'[{i}/{len(cells)}] {name}: {action} ({note})'
    if args.dry_run:
      print(head + ('' if command is None else
                    f'\n  cd {shlex.quote(REPO_ROOT)} && '
                    f'{shlex.join(command)}\n'
                    f'  log: {os.path.join(args.runs_root, name + ".log")}'))
      continue
    print(f'\n{head}', flush=True)
    last = i == len(cells)
    if action == 'refuse':
      failed.append(name)
      print(f'ail_learning: {name}: {note}', file=sys.stderr)
    if command is None:
      if last:  # the summary so far, once, if the last cell was skipped
        print('\n--- summary ---', flush=True)
        summarise(args.runs_root, args.kinds, args.demos, args.png,
                  args.records_dir)
      continue
    os.makedirs(args.runs_root, exist_ok=True)
    log_path = os.path.join(args.runs_root, f'{name}.log')
    print(f'$ {shlex.join(command)}\n(log: {log_path})', flush=True)
    rc = run_cell(command, log_path)
    if rc == EXIT_INTERRUPTED:
      print(f'ail_learning: {name} interrupted; rerun the same command to '
            'continue it', file=sys.stderr)
      return EXIT_INTERRUPTED
    if rc != 0:
      failed.append(name)
      print(f'ail_learning: {name} exited with status {rc}; see {log_path}. '
            'Going on with the other cells.', file=sys.stderr)
    print(f'\n--- summary after {name} ---', flush=True)
    summarise(args.runs_root, args.kinds, args.demos,
              args.png if last else None, args.records_dir)
  if args.dry_run:
    return 0
  if failed:
    print(f'ail_learning: failed cells: {", ".join(failed)}; rerun to '
          'continue them', file=sys.stderr)
    return 1
  return 0


# ------------------------------------------------------------------- main


def _kinds(text: str) -> list:
  kinds = [k.strip() for k in text.split(',') if k.strip()]
  bad = [k for k in kinds if k not in KINDS]
  if not kinds or bad:
    raise argparse.ArgumentTypeError(
        f'expected a comma-separated subset of {",".join(KINDS)}, got '
        f'{text!r}')
  return list(dict.fromkeys(kinds))


_seeds = _cells.parse_seeds
_budget = _cells.parse_budget


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)
  r = sub.add_parser('run', help='train every (kind, seed) cell not yet '
                     'finished, one at a time')
  r.add_argument('--kinds', type=_kinds, required=True, help='e.g. gail,airl')
  r.add_argument('--seeds', type=_seeds, required=True, help='e.g. 0,1,2')
  r.add_argument('--budget', type=_budget, default=DEFAULT_BUDGET,
                 help='env steps per run (default %(default)s)')
  r.add_argument('--dry_run', action='store_true',
                 help='print the commands it would run; run nothing')
  s = sub.add_parser('summary', help='summarise the runs found')
  s.add_argument('--kinds', type=_kinds, default=list(KINDS))
  for q in (r, s):
    q.add_argument('--runs_root', default=DEFAULT_RUNS_ROOT,
                   help='default: runs/ail_learning in the repo')
    q.add_argument('--demos', default=DEFAULT_DEMOS,
                   help='expert demonstrations (default: %(default)s)')
    q.add_argument('--png', help='write the curves PNG here')
    q.add_argument('--records_dir',
                   help='committed cell records (default: studies/results/'
                   "<the runs root's folder name>); '' for none")
  args = p.parse_args(argv)
  # The runs go from the repo root: make every path absolute now.
  args.runs_root = os.path.abspath(args.runs_root)
  args.demos = os.path.abspath(args.demos)
  if args.png:
    args.png = os.path.abspath(args.png)
  if args.records_dir is None:
    args.records_dir = default_records_dir(args.runs_root)
  args.records_dir = (os.path.abspath(args.records_dir) if args.records_dir
                      else None)
  with _cells.paths_named('ail_learning'):
    if args.command == 'run':
      return run(args)
    summarise(args.runs_root, args.kinds, args.demos, args.png,
              args.records_dir)
  return 0


if __name__ == '__main__':
  sys.exit(main())
