"""The learning check of the adversarial program (GAIL, AIRL), on
cartpole:swingup unless a config says otherwise: runs every (kind, seed)
cell, then summarises how fast and how far the true evaluation return
climbs towards the expert's.

    python studies/ail_learning.py run --kinds gail,airl --seeds 0,1,2
        [--runs_root runs/ail_learning] [--demos FILE.npz] [--budget 150000]
        [--records_dir DIR] [--png PNG] [--config NAME ...]
        [--set FIELD=VALUE ...] [--extend_from RUNS_ROOT] [--dry_run]
    python studies/ail_learning.py summary [--runs_root runs/ail_learning]
        [--kinds gail,airl] [--seeds 0,1,2] [--demos FILE.npz]
        [--records_dir DIR] [--also_records DIR ...] [--png PNG]

`run` trains the cells one at a time (`tandem train-ail`, from the repo
root), each kind from configs/ail.py's <kind>_cartpole or the --config of
its kind, with the --set overrides on top. Each cell runs as
RUNS_ROOT/<kind>_s<seed>, its output streamed to the terminal and appended
to RUNS_ROOT/<kind>_s<seed>.log. It is resumable: a cell whose run
directory holds final.json is skipped, one that holds a run without
final.json (interrupted) is continued with `train-ail --resume`. After each
cell it prints the summary so far. --dry_run prints what it would run.
`--extend_from OTHER_ROOT` continues finished runs to a larger budget: each
cell absent from RUNS_ROOT is copied from OTHER_ROOT, where it must have
finished below --budget, and resumed to --budget with its stored config
(schedule horizons included: a schedule that is not constant holds its
end value past the shorter run's horizon). The shorter runs and their
records stay as they were; the extended ones are recorded under RUNS_ROOT's
own records.

`summary` reads every RUNS_ROOT/<kind>_s<seed> (logs/evaluator.csv,
final.json) and reports, per seed, the global env steps and the wall-clock
seconds the program had run (all launches) at which the evaluation return
first reached 50% and 90% of the expert's mean return (from the
demonstrations file's episode_returns, or 869.36 where the file is absent),
the final and the best evaluation return; per kind, the medians. A median of
steps (or seconds) to a threshold counts a seed that never reached it as
never (the time by which half the seeds had reached it, as `tandem compare`
computes it), and is None where half or more never did. Beside whether
each run held (ended within 5% of its peak) it gives how likely that would
be for a policy as steady as the expert, from the demonstrations' episode
returns: the evaluations' noise alone; and the lowest evaluation over the
last 20% of the budget, since a final can hold after a dip. Ends with one
JSON line. `--seeds` keeps those seeds only; `--also_records` adds the
cells recorded in other folders (read only), so that seeds run as separate
variants with the same settings are summarised together; a cell found in
two places is refused, naming both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness
import harness  # studies/harness.py
from harness import REPO_ROOT

KINDS = ('gail', 'airl')
FRACTIONS = (0.5, 0.9)  # thresholds: of the expert's mean return
HELD_FRACTION = 0.95    # a final return this close to the peak has held
LATE_FRACTION = 0.2     # the end of a run: this share of its budget
EXPERT_MEAN_FALLBACK = 869.36  # /work/shared/demos/README.md
DEFAULT_RUNS_ROOT = os.path.join(REPO_ROOT, 'runs', 'ail_learning')
DEFAULT_DEMOS = os.path.normpath(os.path.join(
    REPO_ROOT, '..', 'shared', 'demos', 'cartpole_swingup_expert.npz'))
DEFAULT_BUDGET = 150_000
RECORD_FORMAT = 'tandem.ail_learning.cell/1'


def expert_returns(demos: str):
  """The expert's episode returns (None where the file is absent) and where
  they came from."""
  if not os.path.isfile(demos):
    return None, f'{demos} absent; README value'
  import numpy as np
  with np.load(demos, allow_pickle=False) as data:
    if 'episode_returns' not in data.files:
      raise harness.Refusal(
          f'ail_learning: {demos} has no episode_returns array '
          f'(arrays: {sorted(data.files)})')
    returns = np.asarray(data['episode_returns'], dtype=np.float64)
  if returns.size == 0:
    raise harness.Refusal(f'ail_learning: {demos}: episode_returns is empty')
  return returns, f'{demos}, {returns.size} episodes'


def held_by_chance(returns, evaluations: int, eval_episodes: int,
                   final_episodes: int, draws: int = 20_000,
                   seed: int = 0) -> float:
  """The probability that a run counts as holding (final return within 5%
  of its peak) when its policy does not change at all: every episode of
  its `evaluations` periodic evaluations (`eval_episodes` each) and of its
  final one (`final_episodes`) returns a draw from `returns`, the expert's
  episode returns. Below 1 by the evaluations' noise alone: where the
  expert's returns spread (point_mass's start positions), the peak is the
  luckiest of several small means and the final one more. Monte Carlo with
  a fixed seed, so the same inputs give the same figure."""
  import numpy as np
  returns = np.asarray(returns, dtype=np.float64)
  rng = np.random.default_rng(seed)
  final = rng.choice(returns, (draws, final_episodes)).mean(-1)
  peak = final
  if evaluations:
    periodic = rng.choice(returns, (draws, evaluations, eval_episodes))
    peak = np.maximum(periodic.mean(-1).max(-1), final)
  return float(np.mean(final >= HELD_FRACTION * peak))


# ------------------------------------------------------- one cell's parts


def run_parts(run_dir: str) -> dict:
  """A run directory's parts: its evaluations [{'env_steps', 'elapsed_s',
  'eval_return', 'learned_return', 'final'}] in env-step order, and
  final.json and config.json (None where absent or unreadable)."""
  rows = harness.read_evaluations(run_dir,
                                  ('elapsed_s', 'learned_return', 'final'))
  return {'curve': [dict(r, final=bool(r['final'])) for r in rows],
          'final': harness.read_json(os.path.join(run_dir, 'final.json')),
          'config': harness.read_json(os.path.join(run_dir, 'config.json'))}


def parts_of_record(rec: dict) -> dict:
  """A record's parts, as run_parts gives them (its config only recorded,
  never read back for the figures)."""
  final = rec['final']
  if not isinstance(final, dict):
    raise TypeError('final must be an object')
  float(final['final_eval_return'])
  curve = [{'env_steps': int(p['env_steps']),
            'elapsed_s': harness.finite(p['elapsed_s']),
            'eval_return': float(p['eval_return']),
            'learned_return': harness.finite(p['learned_return']),
            'final': bool(p['final'])} for p in rec['curve']]
  return {'curve': curve, 'final': final, 'config': rec.get('config')}


STUDY = harness.Study(
    name='ail_learning', role='kind', record_format=RECORD_FORMAT,
    subcommand='train-ail', read_run=run_parts,
    parts_of_record=parts_of_record, strict=False)


def default_records_dir(runs_root: str) -> str:
  """studies/results/<the runs root's folder name>: each variant of the
  check (its own runs root) has its own records."""
  return os.path.join(REPO_ROOT, 'studies', 'results',
                      os.path.basename(os.path.normpath(runs_root)))


def config_problems(config, kind: str, seed: int) -> list:
  """Why a run's config.json is not the cell's (its seed or kind), [] where
  it is or cannot tell; an interrupted one is continued with a warning."""
  try:
    got = (config.get('seed'), config.get('ail', {}).get('kind'))
  except AttributeError:
    return []
  if got == (seed, kind):
    return []
  return [f'its config has seed {got[0]}, kind {got[1]}']


def cell_plan(runs_root: str, demos: str, kind: str, seed: int,
              budget: int, records_dir=None, overrides=(), config=None,
              extend_from=None):
  """harness.plan_cell for one cell, started from configs/ail.py's
  `config` (default <kind>_cartpole) with `overrides`
  (['ail.bc_weight=0', ...]) on top, or extended from the same cell of the
  runs root `extend_from`; a resume keeps the run's stored config."""
  start = STUDY.command(
      '--config', f'configs/ail.py:{config or kind + "_cartpole"}',
      '--demos', demos,
      f'--runs_root={runs_root}', '--name', harness.cell_name(kind, seed),
      f'--seed={seed}', f'--env_step_budget={budget}',
      *(f'--{o}' for o in overrides))
  return harness.plan_cell(STUDY, runs_root, records_dir, kind, seed, budget,
                           start, lambda c: config_problems(c, kind, seed),
                           extend_from)


# ------------------------------------------------------ one cell's figures


def figures(kind: str, seed: int, source: str, curve: list, final, expert:
            float, config=None, returns=None) -> dict:
  """The summary's figures of one cell, from its evaluation rows, its
  final.json (None if unfinished) and its config.json (None if not known),
  wherever they were read from. `held` says whether a finished run's final
  return is within 5% of its peak (a run that reached 90% and fell far
  below it is not a success); `held_if_steady`, how likely `held` would be
  for a policy as steady as the expert (`returns`, its episode returns)
  from the evaluation that first reached 90% on (held_by_chance; None
  where a figure it needs is not known); `lowest_late_return`, the lowest
  evaluation over the last LATE_FRACTION of the budget, and `held_late`,
  whether it too is within 5% of the peak."""
  config = config if isinstance(config, dict) else {}
  ail = config.get('ail') if isinstance(config.get('ail'), dict) else {}
  out = {'kind': kind, 'seed': seed, 'run_dir': source,
         'task': config.get('env'), 'bc_weight': ail.get('bc_weight'),
         'finished': final is not None, 'evaluations': len(curve),
         'env_steps': curve[-1]['env_steps'] if curve else 0,
         'elapsed_s': None, 'budget': None,
         'final_return': None, 'final_learned_return': None,
         'final_sampled_return': None,
         'max_return': None, 'max_return_env_steps': None}
  if curve:
    out['elapsed_s'] = curve[-1]['elapsed_s']
    best = max(curve, key=lambda p: p['eval_return'])
    out['max_return'] = best['eval_return']
    out['max_return_env_steps'] = best['env_steps']
  if final is not None:
    counts = final.get('counts', {})
    out['final_return'] = float(final['final_eval_return'])
    # A run with eval_sampled: its policy's samples, from the same params.
    if isinstance(final.get('final_eval_sampled_return'), (int, float)):
      out['final_sampled_return'] = float(final['final_eval_sampled_return'])
    out['env_steps'] = int(counts.get('env_steps', out['env_steps']))
    if counts.get('elapsed_s') is not None:
      out['elapsed_s'] = float(counts['elapsed_s'])
    out['budget'] = final.get('budget')
    finals = [p for p in curve if p['final']]
    if finals:
      out['final_learned_return'] = finals[-1]['learned_return']
  for fraction in FRACTIONS:
    hit = harness.first_reaching(curve, fraction * expert,
                                 lambda p: p['eval_return'])
    pct = harness.pct(fraction)
    out[f'env_steps_to_{pct}'] = hit['env_steps'] if hit else None
    out[f'elapsed_s_to_{pct}'] = (
        round(hit['elapsed_s'], 1) if hit and hit['elapsed_s'] is not None
        else None)
  out['held'] = _near_peak(out['final_return'], out['max_return'])
  out['held_if_steady'] = _held_if_steady(out, curve, config, returns)
  out['lowest_late_return'] = _lowest_late(out, curve)
  out['held_late'] = _near_peak(out['lowest_late_return'], out['max_return'])
  for key in ('elapsed_s', 'final_return', 'final_learned_return',
              'final_sampled_return', 'max_return', 'lowest_late_return'):
    if out[key] is not None:
      out[key] = round(out[key], 1)
  out['curve'] = curve
  return out


def _near_peak(value, peak):
  """Whether a return is within 5% of the run's peak; None if either is."""
  if value is None or peak is None:
    return None
  return value >= HELD_FRACTION * peak


def _lowest_late(out: dict, curve: list):
  """The lowest evaluation return from (1 - LATE_FRACTION)·budget env steps
  on, final included; None for a run not finished or of unknown budget."""
  budget = out['budget']
  if out['final_return'] is None or not isinstance(budget, (int, float)):
    return None
  late = [p['eval_return'] for p in curve
          if p['env_steps'] >= (1.0 - LATE_FRACTION) * budget]
  return min(late + [out['final_return']])


def _held_if_steady(out: dict, curve: list, config: dict, returns):
  reached = out['env_steps_to_90pct']
  episodes = (config.get('eval_episodes'), config.get('final_eval_episodes'))
  if (returns is None or out['held'] is None or reached is None or
      not all(isinstance(n, int) and n > 0 for n in episodes)):
    return None
  evaluations = sum(1 for p in curve
                    if not p['final'] and p['env_steps'] >= reached)
  return round(held_by_chance(returns, evaluations, *episodes), 3)


def read_cells(runs_root: str, kinds, expert: float, records_dir=None,
               returns=None, seeds=None, also_records=()) -> dict:
  """{kind: [figures, ...] by seed}: each seed's finished run directory
  (recorded into records_dir on the way), else its record, else its
  unfinished run directory; then the cells recorded under each of
  also_records (read only). Only `seeds` where given. An unreadable record
  is left out, with a warning naming it; a cell found in two places is a
  harness.Refusal naming both."""
  found = STUDY.collect(runs_root, records_dir, kinds, seeds)
  for extra in also_records:
    found += [STUDY.found_record(*cell)
              for cell in harness.find_records(extra, kinds, seeds)]
  out = {k: [] for k in kinds}
  seen = {}
  for f in found:
    if (f.variant, f.seed) in seen:
      raise harness.Refusal(
          f'ail_learning: {f.variant} seed {f.seed} is both '
          f'{seen[f.variant, f.seed]} and {f.source}; give --seeds or one '
          'folder fewer')
    seen[f.variant, f.seed] = f.source
    if isinstance(f.parts, harness.RecordError):
      print(f'ail_learning: {f.parts}; not counted (restore it with git '
            'checkout, or delete it)', file=sys.stderr)
      continue
    if records_dir and not f.recorded and f.parts['final'] is not None:
      STUDY.store(records_dir, f.variant, f.seed, f.parts, f.source)
    cell = figures(f.variant, f.seed, f.source, f.parts['curve'],
                   f.parts['final'], expert, f.parts.get('config'), returns)
    cell['recorded'] = f.recorded
    out[f.variant].append(cell)
  for runs in out.values():
    runs.sort(key=lambda r: r['seed'])
  return out


# ---------------------------------------------------------------- summary


def kind_stats(runs: list) -> dict:
  """Per kind: the medians over its seeds (those to a threshold as
  harness.median_reached takes them: None where half or more never
  reached it)."""
  n = len(runs)
  out = {'seeds': n}
  for fraction in FRACTIONS:
    pct = harness.pct(fraction)
    steps = [r[f'env_steps_to_{pct}'] for r in runs]
    med = harness.median_reached(steps)
    med_s = harness.median_reached([r[f'elapsed_s_to_{pct}'] for r in runs])
    out[f'env_steps_to_{pct}_median'] = None if med is None else round(med)
    out[f'elapsed_s_to_{pct}_median'] = (None if med_s is None
                                         else round(med_s, 1))
    out[f'seeds_reaching_{pct}'] = (f'{sum(s is not None for s in steps)}/'
                                    f'{n}')
  finals = [r['final_return'] for r in runs if r['final_return'] is not None]
  # Over the finished runs, as the finals: an unfinished run's peak so far
  # is not its peak.
  maxes = [r['max_return'] for r in runs
           if r['final_return'] is not None and r['max_return'] is not None]
  out['finished'] = f'{len(finals)}/{n}'
  # A success holds: a seed that reached 90% of the expert and ended within
  # 5% of its peak (a run that never rose has "held" nothing).
  out['seeds_reaching_90pct_and_holding'] = _reached_90_and(runs, 'held')
  # Stricter: every evaluation over the run's last LATE_FRACTION within 5%
  # of the peak, so a dip and recovery before the budget does not count.
  out['seeds_reaching_90pct_and_holding_late'] = _reached_90_and(
      runs, 'held_late')
  # What `seeds_reaching_90pct_and_holding` would average for policies as
  # steady as the expert: the evaluations' noise alone, summed over the
  # seeds it is known for.
  chances = [r['held_if_steady'] for r in runs
             if r['held_if_steady'] is not None]
  out['seeds_holding_if_steady'] = (
      f'{sum(chances):.1f}/{len(chances)}' if chances else None)
  out['bc_weight'] = _one_value([r['bc_weight'] for r in runs])
  med = harness.median(finals)
  out['final_return_median'] = None if med is None else round(med, 1)
  med = harness.median(maxes)
  out['max_return_median'] = None if med is None else round(med, 1)
  return out


def _reached_90_and(runs: list, key: str) -> str:
  """'k/n': the runs that reached 90% of the expert and whose `key` is
  True."""
  k = sum(r[key] is True and r['env_steps_to_90pct'] is not None
          for r in runs)
  return f'{k}/{len(runs)}'


def _one_value(values: list):
  """The value all of `values` share (None where there are none), else the
  list of the distinct ones in order (None among them for an unknown)."""
  distinct = list(dict.fromkeys(values))
  if not distinct:
    return None
  return distinct[0] if len(distinct) == 1 else distinct


def _cell(v, fmt='{:.0f}'):
  return harness.num(v, fmt)


def _status(r: dict) -> str:
  if r['finished']:
    return 'finished, record' if r.get('recorded') else 'finished'
  return 'unfinished' if r['evaluations'] else 'no evaluations yet'


# The per-seed table's columns; the samples' final return only where a run
# of the table evaluated them (eval_sampled).
SAMPLED_COLUMN = 'final eval, samples'
SEED_COLUMNS = [
    ('seed', 'r', lambda r: str(r['seed'])),
    ('env steps to 50%', 'r', lambda r: _cell(r['env_steps_to_50pct'])),
    ('s to 50%', 'r', lambda r: _cell(r['elapsed_s_to_50pct'])),
    ('env steps to 90%', 'r', lambda r: _cell(r['env_steps_to_90pct'])),
    ('s to 90%', 'r', lambda r: _cell(r['elapsed_s_to_90pct'])),
    ('final eval', 'r', lambda r: _cell(r['final_return'], '{:.1f}')),
    (SAMPLED_COLUMN, 'r', lambda r: _cell(r['final_sampled_return'],
                                          '{:.1f}')),
    ('max eval (at env steps)', 'r', lambda r: (
        '–' if r['max_return'] is None else
        f"{r['max_return']:.1f} ({r['max_return_env_steps']})")),
    ('env steps', 'r', lambda r: str(r['env_steps'])),
    ('elapsed s', 'r', lambda r: _cell(r['elapsed_s'])),
    ('final ≥ 95% of max', 'l', lambda r: {True: 'yes', False: '**no**',
                                            None: '–'}[r['held']]),
    ('P(held) if steady', 'r', lambda r: _cell(r['held_if_steady'],
                                               '{:.2f}')),
    (f'lowest, last {LATE_FRACTION:.0%} of budget', 'r', lambda r: (
        '–' if r['lowest_late_return'] is None else
        f"{r['lowest_late_return']:.1f}" +
        ('' if r['held_late'] else ' **below 95%**'))),
    ('status', 'l', _status)]


def print_tables(kinds, runs_by_kind, stats, expert: float) -> None:
  lo, hi = (f * expert for f in FRACTIONS)
  for kind in kinds:
    runs, st = runs_by_kind[kind], stats[kind]
    task = _one_value([r['task'] for r in runs]) or 'its task'
    print(f'\n### {kind.upper()} on {task} — expert mean '
          f'{expert:.2f}; 50% = {lo:.1f}, 90% = {hi:.1f}; BC weight '
          f"{st['bc_weight']}\n")
    if not runs:
      print('(no runs)')
      continue
    columns = [c for c in SEED_COLUMNS if c[0] != SAMPLED_COLUMN or
               any(r['final_sampled_return'] is not None for r in runs)]
    print('\n'.join(harness.md_table(columns, runs)))
    medians = {
        'seed': '**median**',
        'env steps to 50%': _cell(st['env_steps_to_50pct_median']),
        's to 50%': _cell(st['elapsed_s_to_50pct_median']),
        'env steps to 90%': _cell(st['env_steps_to_90pct_median']),
        's to 90%': _cell(st['elapsed_s_to_90pct_median']),
        'final eval': _cell(st['final_return_median'], '{:.1f}'),
        'max eval (at env steps)': _cell(st['max_return_median'], '{:.1f}')}
    print(harness.md_row([medians.get(c[0], '') for c in columns]))
    print(f"\nreached 50%: {st['seeds_reaching_50pct']} seeds; reached 90%: "
          f"{st['seeds_reaching_90pct']} seeds; reached 90% and ended within "
          f"5% of the peak: {st['seeds_reaching_90pct_and_holding']} seeds "
          f"(a policy as steady as the expert: {st['seeds_holding_if_steady']} "
          "on average, by the evaluations' noise alone); and at every "
          f'evaluation of the last {LATE_FRACTION:.0%} of the budget: '
          f"{st['seeds_reaching_90pct_and_holding_late']} seeds; "
          f"finished: {st['finished']} "
          '(medians to a threshold count a seed that never reached it as '
          'never; – where half or more never did)')


def panel_title(kind: str, runs: list) -> str:
  """The method and its task, e.g. 'AIRL with BC — walker:walk': whether
  the expert's actions were cloned changes what a curve says about the
  method, so a panel names it ('BC weight mixed' where its runs differ)."""
  task = _one_value([r['task'] for r in runs])
  bc = _one_value([r['bc_weight'] for r in runs])
  if isinstance(bc, list):
    bc_text = ', BC weight mixed'
  else:
    bc_text = ' with BC' if bc else ''
  return (f'{kind.upper()}{bc_text} — '
          f'{task if isinstance(task, str) else "its task"}')


def write_png(path: str, kinds, runs_by_kind, expert: float) -> None:
  """Per kind, each seed's evaluation return (and its learned return,
  dotted) over env steps, with the thresholds."""
  plt = harness.pyplot()
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
    ax.set_title(panel_title(kind, runs_by_kind[kind]))
    ax.set_xlabel('global env steps')
    ax.set_ylabel('evaluation return (mean action)')
    ax.grid(alpha=0.3)
    if runs_by_kind[kind]:
      ax.legend(loc='lower right', fontsize=8)
  fig.tight_layout()
  harness.save_figure(fig, path)
  print(f'wrote {path}')


def summarise(runs_root: str, kinds, demos: str, png=None,
              records_dir=None, seeds=None, also_records=()) -> dict:
  """Reads the cells (read_cells), prints the tables and the JSON line
  (returned), and writes the PNG where asked."""
  returns, source = expert_returns(demos)
  expert = (EXPERT_MEAN_FALLBACK if returns is None
            else float(returns.mean()))
  runs_by_kind = read_cells(runs_root, kinds, expert, records_dir, returns,
                            seeds, also_records)
  stats = {k: kind_stats(runs_by_kind[k]) for k in kinds}
  print(f'runs under {runs_root}'
        + (f' and records in {records_dir}' if records_dir else '')
        + ''.join(f' and {d}' for d in also_records)
        + f'; expert mean return {expert:.2f} ({source})')
  print_tables(kinds, runs_by_kind, stats, expert)
  print('\n### As `tandem compare --reference` puts them (finished runs)\n')
  print(harness.compare_table(
      {k: [r for r in runs if r['finished']]
       for k, runs in runs_by_kind.items()},
      expert, "the expert's mean return"))
  if png:
    write_png(png, kinds, runs_by_kind, expert)
  result = {'task': _one_value([r['task'] for k in kinds
                                for r in runs_by_kind[k]]),
            'expert_return_mean': round(expert, 2)}
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


def run(args) -> int:
  """Trains every requested cell not yet finished (harness.run_grid),
  kind-major; the PNG is drawn once, after the last cell."""
  if not args.dry_run and not os.path.isfile(args.demos):
    raise harness.Refusal(f'ail_learning: --demos {args.demos}: no such file')
  if args.extend_from is not None and not os.path.isdir(args.extend_from):
    raise harness.Refusal(f'ail_learning: --extend_from {args.extend_from}: '
                          'no such folder')
  return harness.run_grid(
      STUDY, [(k, s) for k in args.kinds for s in args.seeds],
      args.runs_root,
      lambda k, s: cell_plan(args.runs_root, args.demos, k, s, args.budget,
                             args.records_dir, args.set,
                             args.config.get(k), args.extend_from),
      lambda last: summarise(args.runs_root, args.kinds, args.demos,
                             args.png if last else None, args.records_dir),
      dry_run=args.dry_run, extend_from=args.extend_from)


# ------------------------------------------------------------------- main


def override(text: str) -> str:
  """FIELD=VALUE, FIELD a dotted config path (checked by train-ail)."""
  field, sep, _ = text.partition('=')
  if not sep or not field or field.startswith('-'):
    raise argparse.ArgumentTypeError(
        f'expected FIELD=VALUE (e.g. ail.bc_weight=0), got {text!r}')
  return text


def named_configs(names: list) -> dict:
  """{kind: name} for `--config` names of configs/ail.py, each kind given
  by the config's own `ail.kind`; an unknown name, or two for one kind,
  is an error naming them."""
  from tandem.configs import ail as ail_configs
  by_kind = {}
  for name in names:
    if name not in ail_configs.CONFIGS:
      raise argparse.ArgumentTypeError(
          f'--config {name}: not a config of configs/ail.py (one of '
          f'{", ".join(ail_configs.CONFIGS)})')
    kind = getattr(ail_configs, name)().ail.kind
    if kind in by_kind:
      raise argparse.ArgumentTypeError(
          f'--config {name}: {by_kind[kind]} is already the {kind} config')
    by_kind[kind] = name
  return by_kind


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)
  r = sub.add_parser('run', help='train every (kind, seed) cell not yet '
                     'finished, one at a time')
  kinds = harness.names_type(KINDS)
  r.add_argument('--kinds', type=kinds, required=True, help='e.g. gail,airl')
  r.add_argument('--seeds', type=harness.parse_seeds, required=True,
                 help='e.g. 0,1,2')
  r.add_argument('--budget', type=harness.parse_budget,
                 default=DEFAULT_BUDGET,
                 help='env steps per run (default %(default)s)')
  r.add_argument('--dry_run', action='store_true',
                 help='print the commands it would run; run nothing')
  r.add_argument('--config', action='append', default=[],
                 metavar='NAME',
                 help='the configs/ail.py config its kind\'s cells start '
                 'from (default <kind>_cartpole; repeatable, one per kind), '
                 'e.g. gail_point_mass')
  r.add_argument('--set', action='append', default=[], type=override,
                 metavar='FIELD=VALUE',
                 help='a config override for every cell it starts, e.g. '
                 'ail.bc_weight=0 (repeatable); give each variant its own '
                 '--runs_root')
  r.add_argument('--extend_from', metavar='RUNS_ROOT',
                 help='continue the cells that finished there below '
                 '--budget: each is copied into --runs_root and resumed to '
                 '--budget with its own config (no --config or --set)')
  s = sub.add_parser('summary', help='summarise the runs found')
  s.add_argument('--kinds', type=kinds, default=list(KINDS))
  s.add_argument('--seeds', type=harness.parse_seeds, default=None,
                 help='only these seeds, e.g. 0,1,2 (default: every seed '
                 'found)')
  s.add_argument('--also_records', action='append', default=[],
                 metavar='DIR', help='another folder of records to add '
                 '(read only; repeatable), e.g. the same settings\' other '
                 'seeds')
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
  if args.command == 'run':
    try:
      args.config = named_configs(args.config)
    except argparse.ArgumentTypeError as e:
      p.error(str(e))
    if args.extend_from is not None:
      if args.config or args.set:
        p.error('--extend_from continues each run with its stored config; '
                '--config and --set would not apply to it')
      args.extend_from = os.path.abspath(args.extend_from)
      if args.extend_from == os.path.abspath(args.runs_root):
        p.error('--extend_from is --runs_root itself; give the extended '
                'runs a --runs_root of their own (the shorter runs and '
                'their records stay as they are)')
  # The runs go from the repo root: make every path absolute now.
  args.runs_root = os.path.abspath(args.runs_root)
  args.demos = os.path.abspath(args.demos)
  if args.png:
    args.png = os.path.abspath(args.png)
  if args.records_dir is None:
    args.records_dir = default_records_dir(args.runs_root)
  args.records_dir = (os.path.abspath(args.records_dir) if args.records_dir
                      else None)
  with harness.paths_named('ail_learning'):
    if args.command == 'run':
      return run(args)
    for extra in args.also_records:
      if not os.path.isdir(extra):
        raise harness.Refusal(
            f'ail_learning: --also_records {extra}: no such folder')
    summarise(args.runs_root, args.kinds, args.demos, args.png,
              args.records_dir, args.seeds,
              [os.path.abspath(d) for d in args.also_records])
  return 0


if __name__ == '__main__':
  harness.run_tool(main)
