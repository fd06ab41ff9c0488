"""The dual-optimisation study: every (strategy, seed) cell of an MPO task,
then a table of how well and how fast each strategy learns, with a paired
comparison against the reference (`adam1`, or the strategy --reference
names).

    python studies/dual_study.py run [--config configs/mpo.py:make_run]
        [--task_label cartpole:swingup] [--strategies adam1,adam10,...]
        [--seeds 0,1,2,3,4] [--budget 100000] [--runs_root DIR] [--png PNG]
        [--records_dir DIR] [--reference adam1] [--dry_run]
    python studies/dual_study.py summary [--config ...] [--task_label ...]
        [--strategies ...] [--seeds ...] [--budget N] [--runs_root DIR]
        [--png PNG] [--records_dir DIR] [--reference adam1]

Strategies (each pins every field that tells them apart, so a later change
of the named config's dual defaults cannot change what a strategy means):
  adam1         one Adam step on all duals per SGD step (the reference)
  adam10        10 Adam steps on all duals
  sgd10_temp    10 SGD steps on the temperatures, Adam on the alphas (the
                published attempt; num_steps is shared, so the alphas take
                10 Adam steps too)
  exact_before  the exact temperature solve, E-step weighted with the
                temperature from before the update
  exact_after   the exact solve, weighted with the solved temperature
Each of those improves the policy at s (estep_states=current; the named MPO
configs use 'next') from Tandem's initial weights (init=tandem). Fourteen more
strategies keep the reference's dual optimisation and change one or two other
fields, for choosing defaults or testing a finding; run them with
--strategies:
  adam1_next               one sample set at s' serves the bootstrap and
                           the E-step (half the critic work)
  adam1_current_and_next   the E-step at s and at s' (Acme's JAX MPO)
  adam1_acme_init          Acme JAX MPO's initialisers (mpo.init=acme)
  adam1_cold               η starts at 0.03, not 10 (where the exact
                           solve and adam10 spend their start); the
                           action penalty's temperature still starts at 10
  adam1_next_spi64         adam1_next at 64 samples per insert (48 in
                           make_run): the critic work 'next' saves spent
                           on more SGD steps per env step
  adam1_next_cosine        adam1_next with both network learning rates
                           annealed from 3e-4 to 3e-5 along half a cosine
                           over 18750 learner steps (100k env steps at 48
                           samples per insert, batch 256; within 2% of the
                           18562 make_run's limiter pays for); refused for
                           a config or budget whose count is further off
  adam1_next_n40           adam1_next with 40 action samples per state
                           (20 elsewhere): the critic work 'next' saves
                           spent on the E-step's and bootstrap's samples
  adam1_next_n10           adam1_next with 10 action samples per state
  adam1_next_lr6e4         adam1_next with both network learning rates
                           at 6e-4 (3e-4 elsewhere)
  adam1_next_scale03       adam1_next with the policy's initial stddev
                           at 0.3 (0.5 elsewhere)
  adam1_next_scale07       the same at 0.7 (Acme's network default)
  adam1_next_epsmean01     adam1_next with epsilon_mean 0.01 (Acme's
                           published control-suite baseline; the named
                           configs' value)
  adam1_next_mog           adam1_next with Acme's mixture-of-Gaussians
                           critic (16 return samples per action)
  adam1_next_epsmean01_target  adam1_next_epsmean01, acting with the
                           target policy as Acme's MPO does

`run` trains the cells one at a time, strategy-major, each as
`python -m tandem.launch.cli train --config CONFIG --runs_root RUNS_ROOT --name
<strategy>_s<seed> --seed=<seed> --env_step_budget=BUDGET <overrides>`
from the repo root, its output streamed to the terminal and appended to
RUNS_ROOT/<strategy>_s<seed>.log. It is resumable: a cell whose run
directory holds final.json, or that is recorded (below), is skipped; one
whose run directory holds config.json but no
final.json (interrupted) is continued with `train --resume`, and one whose
recorded config is not the strategy's is refused, never continued. After
each cell it writes the summary so far. --dry_run prints what it would run.

Every finished cell is also recorded in RECORDS_DIR (default
studies/results/dual_study_<config name>/<strategy>_s<seed>.json, in the
repo): its config.json, final.json, evaluation curve and learner figures,
small and deterministic. runs/ is not kept from one machine to the next;
the records are committed, so a study continues on a fresh clone: `run`
skips a recorded cell and `summary` counts it where no finished run
directory exists (status "counted, record" in the cell table).

`summary` reads every RUNS_ROOT/<strategy>_s<seed> and writes
RUNS_ROOT/dual_study.md (tables), RUNS_ROOT/dual_study.csv (one row per
cell) and the PNG (default RUNS_ROOT/dual_study.png), then prints the
Markdown and one JSON line. A cell counts only when it finished and its
config.json is what the study would launch for its strategy and seed (any
field that defines the run; a resume may change only the plumbing); other
cells are listed with the reason. Statistics per strategy are over its
counted cells.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # harness
import harness  # studies/harness.py
from harness import REPO_ROOT
from tandem.launch import config as config_lib

# ------------------------------------------------------------ the strategies

REFERENCE = 'adam1'
# The dual learning rates every strategy uses (DualConfig's default, Acme's
# dual learning rate): pinned so that only the strategy varies.
_DUAL_LR = '0.01'
# The initial temperatures too (DualConfig's defaults: both start at 10),
# which only the opt-in `adam1_cold` changes.
_COMMON = {'temperature_optimizer.learning_rate': _DUAL_LR,
           'alpha_optimizer.name': 'adam',
           'alpha_optimizer.learning_rate': _DUAL_LR,
           'init_temperature': '10.0', 'init_penalty_temperature': '0.0'}
# strategy -> its mpo.duals fields (values as the command line writes them).
STRATEGIES = {
    'adam1': {'num_steps': '1', 'temperature_optimizer.name': 'adam',
              'solver': 'gradient',
              'temperature_for_weights': 'before_update'},
    'adam10': {'num_steps': '10', 'temperature_optimizer.name': 'adam',
               'solver': 'gradient',
               'temperature_for_weights': 'before_update'},
    'sgd10_temp': {'num_steps': '10', 'temperature_optimizer.name': 'sgd',
                   'solver': 'gradient',
                   'temperature_for_weights': 'before_update'},
    # The exact solver ignores the temperature optimizer; num_steps=1 keeps
    # the alphas' update the reference's.
    'exact_before': {'num_steps': '1', 'temperature_optimizer.name': 'adam',
                     'solver': 'exact',
                     'temperature_for_weights': 'before_update'},
    'exact_after': {'num_steps': '1', 'temperature_optimizer.name': 'adam',
                    'solver': 'exact',
                    'temperature_for_weights': 'after_update'},
}
DUAL_STRATEGIES = tuple(STRATEGIES)  # the core strategies: `run`'s default
# strategy -> the MPOConfig fields outside the duals that the study varies,
# pinned for every strategy like the dual fields are (a later change of a
# named config's default must not change what a cell means).
# The network learning rates and their schedules, the number of action
# samples and the policy's initial stddev are pinned at the named configs'
# values, which the opt-in strategies below vary one at a time.
_MPO_DEFAULTS = {'estep_states': 'current', 'init': 'tandem',
                 'policy_mean': 'linear',
                 'policy_optimizer.learning_rate': '0.0003',
                 'critic_optimizer.learning_rate': '0.0003',
                 'policy_optimizer.schedule': 'constant',
                 'policy_optimizer.final_fraction': '1.0',
                 'critic_optimizer.schedule': 'constant',
                 'critic_optimizer.final_fraction': '1.0',
                 'schedule_horizon': '1000000', 'num_samples': '20',
                 'policy_init_scale': '0.5', 'epsilon_mean': '0.0025',
                 'critic_type': 'scalar', 'acting_policy': 'online'}
MPO_FIELDS = {s: dict(_MPO_DEFAULTS) for s in DUAL_STRATEGIES}
for _where in ('next', 'current_and_next'):
  STRATEGIES[f'adam1_{_where}'] = STRATEGIES['adam1']
  MPO_FIELDS[f'adam1_{_where}'] = dict(_MPO_DEFAULTS, estep_states=_where)
STRATEGIES['adam1_acme_init'] = STRATEGIES['adam1']
MPO_FIELDS['adam1_acme_init'] = dict(_MPO_DEFAULTS, init='acme')
# One Adam step started where the exact solve and ten Adam steps spend
# their first 10k cartpole env steps, far below where one Adam step from 10
# is then (BENCHMARKS.md, Dual strategies): tells whether those strategies'
# wider spread comes from their greedy early E-steps or from holding the
# bound.
# Only η moves: the action penalty's temperature keeps adam1's start.
STRATEGIES['adam1_cold'] = dict(STRATEGIES['adam1'], init_temperature='0.03',
                                init_penalty_temperature='10.0')
MPO_FIELDS['adam1_cold'] = dict(_MPO_DEFAULTS)
# strategy -> TrainConfig fields outside `mpo` that it changes (most none).
TRAIN_FIELDS = {s: {} for s in STRATEGIES}


def _next_variant(name: str, mpo: dict | None = None,
                  train: dict | None = None) -> None:
  """Registers `name`: adam1_next (the reference's duals, E-step at s')
  with the pinned MPOConfig fields `mpo` and the TrainConfig fields `train`
  changed (values as the command line writes them)."""
  STRATEGIES[name] = STRATEGIES['adam1']
  MPO_FIELDS[name] = dict(_MPO_DEFAULTS, estep_states='next', **(mpo or {}))
  TRAIN_FIELDS[name] = dict(train or {})


# 'next' with the learner time it saves spent on more SGD steps per env
# step: its step is about 1.7x faster than 'current' (BENCHMARKS.md, Learner
# speed), so 64 samples per insert cost ~0.8x the learner time of 'current'
# at 48.
_next_variant('adam1_next_spi64', train={'samples_per_insert': '64.0'})
# 'next' with the network learning rates annealed to a tenth by the budget:
# asks whether a policy settled by a decaying rate ends above the default's
# plateau. It ends no higher (BENCHMARKS.md, Dual strategies).
# The horizon is 100k x 48 / 256 = 18750; make_run's limiter pays for 1%
# fewer (18562: replay_min_size's env steps buy none). `run` refuses the
# strategy where config and budget give a count further off than 2%
# (horizon_mismatch).
COSINE_HORIZON = 18_750
_next_variant('adam1_next_cosine', mpo={
    'schedule_horizon': str(COSINE_HORIZON),
    **{f'{net}_optimizer.{k}': v for net in ('policy', 'critic')
       for k, v in (('schedule', 'cosine'), ('final_fraction', '0.1'))}})
# 'next' with the critic work it saves spent on twice the action samples per
# state (40 at s' instead of 20 at s and 20 at s'): the same target-critic
# evaluations per step as 'current', a less noisy E-step and bootstrap. It
# ends lower (BENCHMARKS.md, Dual strategies), so half the samples (10) asks
# whether the count moves the plateau the other way.
for _n in (10, 40):
  _next_variant(f'adam1_next_n{_n}', mpo={'num_samples': str(_n)})
# 'next' with both network learning rates doubled. The default's runs first
# evaluate >= 700 late in the 100k env steps, and Acme's 1e-4 learns far
# less in them than 3e-4: asks whether learning is still rate-limited. It
# swings up sooner and ends no higher (BENCHMARKS.md, Dual strategies).
_next_variant('adam1_next_lr6e4', mpo={
    f'{net}_optimizer.learning_rate': '0.0006'
    for net in ('policy', 'critic')})
# 'next' with the policy's initial stddev at 0.3, not 0.5. The stddev hardly
# moves in 100k env steps (α_stddev starts at 1000), so it sets the actors'
# noise for the whole run while the evaluator acts with the mean: asks
# whether less noise refines the swung-up policy more. It delays the
# swing-up instead (BENCHMARKS.md, Dual strategies).
# And the other way: 0.7, the default of Acme's make_control_networks. It
# swings up sooner on most seeds and misses the swing-up on others: no
# higher median, a wider spread (same section).
for _name, _scale in (('adam1_next_scale03', '0.3'),
                      ('adam1_next_scale07', '0.7')):
  _next_variant(_name, mpo={'policy_init_scale': _scale})
# 'next' with the mean's KL bound at 0.01, four times MPOConfig's 0.0025:
# the value Acme's published control-suite MPO baseline passes
# (examples/baselines/rl_continuous/run_mpo.py, epsilon_mean=0.01, applied
# per action dimension; on cartpole's one dimension Tandem's per-dimension
# convention gives the same bound). Asks whether a mean held to a tighter
# trust region than the reference's baseline is what keeps the plateau low.
# It ends at the default's median with a higher lowest seed and a larger
# area under the curve, and no worse on walker_stand, so configs/mpo.py's
# named configs use it (BENCHMARKS.md, Dual strategies).
_next_variant('adam1_next_epsmean01', mpo={'epsilon_mean': '0.01'})
# 'next' with the mixture-of-Gaussians critic, Acme's MPOConfig default
# (5 components, initial stddev 1e-3), which the published baseline above
# swaps for a scalar critic: asks whether a distributional critic lifts the
# plateau. 16 return samples per bootstrap action, not Acme's 128: 128 makes
# the learner step several times scalar 'next''s on a 2-core CPU, 16 only a
# little dearer (bench/learner.py --mog; BENCHMARKS.md, Learner speed). It
# learns later than the scalar critic, so the named configs keep the scalar
# critic (BENCHMARKS.md, Dual strategies).
_next_variant('adam1_next_mog', mpo={'critic_type': 'mog',
                                     'mog_num_value_samples': '16'})
# The named configs' learner ('next', epsilon_mean 0.01) with the actors and the
# evaluator acting with the target policy, as Acme's MPO does (it serves its
# target params): asks whether behaviour that moves only with the target,
# the policy the E-step samples from and the KL bounds are measured
# against, learns better than behaviour that follows every SGD step.
_next_variant('adam1_next_epsmean01_target', mpo={'epsilon_mean': '0.01',
                                                  'acting_policy': 'target'})
FRACTIONS = (0.5, 0.9)  # thresholds: of the best strategy's median return
DEFAULT_CONFIG = 'configs/mpo.py:make_run'
DEFAULT_BUDGET = 100_000
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
RECORD_FORMAT = 'tandem.dual_study.cell/1'
TRAJECTORY_POINTS = 400  # temperature samples kept per cell, for the plot
# The figures whose spread (median, min, max) each strategy reports, and its
# env steps to each threshold (harness.median_reached).
STAT_KEYS = ('final_return', 'auc', 'mean_abs_temperature_dual_residual',
             'mean_kl_q_rel', 'final_temperature')
THRESHOLD_KEYS = tuple(f'env_steps_to_{harness.pct(f)}' for f in FRACTIONS)


# ------------------------------------------------------------- the cells


def strategy_overrides(strategy: str) -> dict:
  """{'mpo.duals.<field>': value, 'mpo.<field>': value} that makes a run
  use `strategy`."""
  fields = dict(_COMMON, **STRATEGIES[strategy])
  out = {f'mpo.duals.{k}': v for k, v in sorted(fields.items())}
  out.update({f'mpo.{k}': v for k, v in sorted(MPO_FIELDS[strategy].items())})
  out.update(sorted(TRAIN_FIELDS[strategy].items()))
  return out


def expected_config(base, strategy: str, seed: int):
  """What `train` resolves for this cell (name and location aside)."""
  return config_lib.apply_overrides(
      base, dict(strategy_overrides(strategy), seed=str(seed)))


def train_command(config_spec: str, runs_root: str, strategy: str,
                  seed: int, budget: int) -> list:
  """The `tandem train` command line that starts a new cell."""
  return STUDY.command(
      '--config', config_spec, f'--runs_root={runs_root}', '--name',
      harness.cell_name(strategy, seed), f'--seed={seed}',
      f'--env_step_budget={budget}',
      *[f'--{k}={v}' for k, v in strategy_overrides(strategy).items()])


def cell_plan(runs_root: str, config_spec: str, base, strategy: str,
              seed: int, budget: int, records_dir=None):
  """harness.plan_cell for one cell: a run directory or record holding
  another config than the strategy's and seed's is never continued."""
  expected = expected_config(base, strategy, seed)
  return harness.plan_cell(
      STUDY, runs_root, records_dir, strategy, seed, budget,
      train_command(config_spec, runs_root, strategy, seed, budget),
      lambda recorded: harness.config_mismatches(recorded, expected))


# How far a pinned horizon may sit from the updates a run gets: within it
# the schedule runs at least 98% of its course (COSINE_HORIZON's runs end
# at 0.1003x, not 0.1x).
HORIZON_TOLERANCE = 0.02


def horizon_mismatch(base, strategy: str, budget: int):
  """Why `strategy` cannot run on `base` at `budget`, or None.

  A strategy that pins a schedule horizon is meant to anneal by the end of
  the run: on a config or budget whose learner-step count (the launcher's
  `expected_updates`: (budget - replay_min_size) x samples_per_insert /
  batch_size, what the rate limiter pays for) differs by more than
  HORIZON_TOLERANCE, its schedule would end early or far from done, which
  is another experiment."""
  from tandem.launch import horizons
  pinned = MPO_FIELDS[strategy].get('schedule_horizon')
  if pinned is None or pinned == _MPO_DEFAULTS['schedule_horizon']:
    return None
  # The study's --budget overrides the config's.
  cfg = dataclasses.replace(expected_config(base, strategy, 0),
                            env_step_budget=budget)
  steps = horizons.expected_updates(cfg)['mpo']
  if abs(int(pinned) - steps) <= HORIZON_TOLERANCE * steps:
    return None
  return (f'{strategy} anneals over {pinned} learner steps, but '
          f'{cfg.name} at --budget {budget} gives {steps:.0f} (({budget} env '
          f'steps - replay_min_size {cfg.replay_min_size}) × samples_per_insert '
          f'{cfg.samples_per_insert:g} / batch_size {cfg.mpo.batch_size}), '
          f'more than {HORIZON_TOLERANCE:.0%} away')


# ------------------------------------------------------- one cell's parts


def read_learner(run_dir: str) -> dict:
  """Means of |temperature_dual_residual| and of kl_q_rel over the run, and
  the temperature's trajectory [(env_steps, temperature), ...]."""
  cols = harness.read_learner_columns(
      run_dir, ('temperature_dual_residual', 'kl_q_rel', 'temperature'))
  residual = [abs(v) for _, v in cols['temperature_dual_residual']]
  kl = [v for _, v in cols['kl_q_rel']]
  temps = sorted(((s, t) for s, t in cols['temperature'] if s is not None),
                 key=lambda p: p[0])
  return {'mean_abs_temperature_dual_residual':
              statistics.fmean(residual) if residual else None,
          'mean_kl_q_rel': statistics.fmean(kl) if kl else None,
          'final_temperature': temps[-1][1] if temps else None,
          'temperature': harness.thin(temps, TRAJECTORY_POINTS)}


def run_parts(run_dir: str) -> dict:
  """A run directory's parts: final.json and config.json (None where absent
  or unreadable), the evaluation curve [(env_steps, return)] and the
  learner's figures, with 'code', the commits it ran."""
  return {'final': harness.read_json(os.path.join(run_dir, 'final.json')),
          'config': harness.read_json(os.path.join(run_dir, 'config.json')),
          'curve': [(r['env_steps'], r['eval_return'])
                    for r in harness.read_evaluations(run_dir)],
          'learner': dict(read_learner(run_dir),
                          code=harness.read_code(run_dir))}


def parts_of_record(rec: dict) -> dict:
  """A record's parts, as run_parts gives them."""
  final, recorded = rec['final'], rec['config']
  if not isinstance(final, dict) or not isinstance(recorded, dict):
    raise TypeError('final and config must be objects')
  learner = dict(rec['learner'])
  learner['temperature'] = [(int(s), float(t))
                            for s, t in learner['temperature']]
  # A record without the commits it ran: unknown.
  learner['code'] = [str(c) for c in learner.get('code') or []]
  for key in ('mean_abs_temperature_dual_residual', 'mean_kl_q_rel',
              'final_temperature'):
    learner[key] = harness.finite(learner.get(key))
  return {'final': final, 'config': recorded, 'learner': learner,
          'curve': [(int(s), float(r)) for s, r in rec['curve']]}


def recorded_before_code(old, record: dict) -> bool:
  """Whether `old` is this record as written before records kept the
  commits their run ran (no learner 'code'): brought up to date, not
  taken for another run."""
  learner = old.get('learner') if isinstance(old, dict) else None
  if not isinstance(learner, dict) or 'code' in learner:
    return False
  same = dict(record, learner={k: v for k, v in record['learner'].items()
                               if k != 'code'})
  return old == json.loads(json.dumps(same))


STUDY = harness.Study(
    name='dual_study', role='strategy', record_format=RECORD_FORMAT,
    subcommand='train', read_run=run_parts, parts_of_record=parts_of_record,
    older_form=recorded_before_code)
_NO_PARTS = {'final': None, 'config': None, 'curve': [], 'learner': {
    'mean_abs_temperature_dual_residual': None, 'mean_kl_q_rel': None,
    'final_temperature': None, 'temperature': [], 'code': []}}


def default_records_dir(config_name: str) -> str:
  return os.path.join(REPO_ROOT, 'studies', 'results',
                      f'dual_study_{config_name}')


# ------------------------------------------------------ one cell's figures


def cell_figures(found: harness.Found, expected, budget) -> dict:
  """One cell's figures from its parts, wherever they were read from: a
  run directory or a committed record. It counts where it finished, at the
  study's budget, with the strategy's config. Thresholds are filled in
  later, once the best strategy is known."""
  strategy, seed, source, parts, recorded = found
  unreadable = isinstance(parts, harness.RecordError)
  if unreadable:
    parts = _NO_PARTS
  final, curve = parts['final'], parts['curve']
  problems = [str(found.parts)] if unreadable else harness.config_mismatches(
      parts['config'], expected)
  cell = {'strategy': strategy, 'seed': seed, 'source': source,
          'recorded': recorded, 'finished': final is not None,
          'curve': curve, 'env_steps': curve[-1][0] if curve else 0,
          'budget': None, 'final_return': None, 'auc': None,
          'elapsed_s': None}
  if final is not None:
    counts = final.get('counts', {})
    cell['budget'] = final.get('budget')
    cell['final_return'] = harness.finite(final.get('final_eval_return'))
    cell['env_steps'] = int(counts.get('env_steps', cell['env_steps']))
    cell['elapsed_s'] = harness.finite(counts.get('elapsed_s'))
    if budget is not None and cell['budget'] != budget:
      problems.append(f'budget {cell["budget"]}, the study\'s is {budget}')
    cell['auc'] = harness.area_under_curve(curve, cell['budget'] or budget)
  cell.update(parts['learner'])
  cell['problems'] = problems
  cell['counted'] = cell['finished'] and not problems
  cell['status'] = ('unreadable record' if unreadable else
                    'counted' if cell['counted'] else
                    'config mismatch' if problems else 'unfinished')
  return cell


# ------------------------------------------------------------- statistics


def add_thresholds(cells: list, best_median) -> None:
  """Each cell's env steps to each fraction of the best median return."""
  for cell in cells:
    for fraction in FRACTIONS:
      threshold = None if best_median is None else fraction * best_median
      cell[f'env_steps_to_{harness.pct(fraction)}'] = harness.steps_to(
          cell['curve'], threshold)


# ---------------------------------------------------------------- outputs

num = harness.num


def strategy_columns(reference: str) -> list:
  """The per-strategy table's columns, over each strategy's stats with its
  name under 'strategy'."""
  spread, reached = harness.range_text, harness.reached_text
  return [
      ('strategy', 'l', lambda st: st['strategy']),
      ('counted', 'r', lambda st: f"{st['counted']}/{st['cells']}"),
      ('final return median (min–max)', 'r',
       lambda st: spread(st['final_return'])),
      ('AUC median (min–max)', 'r', lambda st: spread(st['auc'])),
      ('env steps to 50% (reached)', 'r',
       lambda st: reached(st['env_steps_to_50pct'])),
      ('env steps to 90% (reached)', 'r',
       lambda st: reached(st['env_steps_to_90pct'])),
      ('mean abs temperature dual residual', 'r',
       lambda st: spread(st['mean_abs_temperature_dual_residual'], '{:.3g}')),
      ('mean kl_q_rel', 'r', lambda st: spread(st['mean_kl_q_rel'],
                                               '{:.3f}')),
      (f'paired Δ final vs {reference}', 'l',
       lambda st: harness.paired_text(st.get('paired_final_return'))),
      (f'paired Δ AUC vs {reference}', 'l',
       lambda st: harness.paired_text(st.get('paired_auc')))]


# The per-cell table's columns, over cells; a cell read from a committed
# record says so.
CELL_COLUMNS = [
    ('cell', 'l', lambda c: harness.cell_name(c['strategy'], c['seed'])),
    ('status', 'l',
     lambda c: c['status'] + (', record' if c['recorded'] else '')),
    ('final return', 'r', lambda c: num(c['final_return'])),
    ('AUC', 'r', lambda c: num(c['auc'])),
    ('env steps to 50%', 'r', lambda c: num(c['env_steps_to_50pct'],
                                            '{:.0f}')),
    ('env steps to 90%', 'r', lambda c: num(c['env_steps_to_90pct'],
                                            '{:.0f}')),
    ('mean abs residual', 'r',
     lambda c: num(c['mean_abs_temperature_dual_residual'], '{:.3g}')),
    ('mean kl_q_rel', 'r', lambda c: num(c['mean_kl_q_rel'], '{:.3f}')),
    ('final temperature', 'r', lambda c: num(c['final_temperature'],
                                             '{:.3g}')),
    ('env steps', 'r', lambda c: str(c['env_steps'])),
    ('elapsed s', 'r', lambda c: num(c['elapsed_s'], '{:.0f}'))]


def reading_note(reference: str = REFERENCE) -> str:
  return (
      'AUC: area under the evaluation return over env steps, divided by the '
      'budget (the run\'s average return). Env steps to a threshold: the '
      'median over the strategy\'s counted seeds, a seed that never reached '
      'it counting as never (the env steps by which half had reached it, as '
      '`tandem compare` computes it); – where half or more never did. '
      'Paired Δ: per seed, strategy '
      f'minus {reference}, over the seeds both counted; "better" counts '
      'seeds where the strategy is higher. Only finished cells whose '
      'config.json is the strategy\'s and the seed\'s are counted.')


def compare_table(strategies, cells: list, reference: str) -> str:
  """`tandem compare`'s table of the counted cells, a group per strategy,
  `reference` first (the paired differences' base): thresholds of the best
  strategy's median final return, as above. Evaluations carry no wall-clock
  time here (records keep env steps and returns), so neither does the
  table."""
  order = sorted(strategies, key=lambda s: s != reference)
  return harness.compare_table({s: [
      {'seed': c['seed'], 'run_dir': c['source'],
       'curve': [{'env_steps': x, 'eval_return': y} for x, y in c['curve']]}
      for c in cells if c['strategy'] == s and c['counted']]
      for s in order})


def markdown(task: str, config_spec: str, budget, strategies, stats: dict,
             cells: list, best, best_median, reference: str = REFERENCE
             ) -> str:
  """The study's tables and their reading notes."""
  shown = os.path.relpath(config_spec, REPO_ROOT)  # as committed tables
  if shown.startswith('..'):                        # would name it
    shown = config_spec
  lines = [f'### Dual strategies on {task} (`{shown}`, budget '
           f'{num(budget, "{:.0f}")} env steps)', '']
  if best is None:
    lines.append('No counted cell yet: thresholds undefined.')
  else:
    lines.append(f'Thresholds: 50% = {0.5 * best_median:.1f} and 90% = '
                 f'{0.9 * best_median:.1f} of the best strategy\'s median '
                 f'final return ({best}, {best_median:.1f}).')
  lines += [''] + harness.md_table(
      strategy_columns(reference),
      [dict(stats[s], strategy=s) for s in strategies])
  lines += ['', reading_note(reference), '', '#### As `tandem compare` puts '
            'them', '', compare_table(strategies, cells, reference), '',
            harness.code_note(cells), '']
  lines += harness.md_table(CELL_COLUMNS, cells)
  flagged = [c for c in cells if c['problems']]
  if flagged:
    lines += ['', 'Not counted (the run is not this study\'s cell):']
    lines += [f"- {harness.cell_name(c['strategy'], c['seed'])}: "
              + '; '.join(c['problems']) for c in flagged]
  return '\n'.join(lines) + '\n'


CSV_COLUMNS = ('strategy', 'seed', 'status', 'final_return', 'auc',
               'env_steps_to_50pct', 'env_steps_to_90pct',
               'mean_abs_temperature_dual_residual', 'mean_kl_q_rel',
               'final_temperature', 'env_steps', 'budget', 'elapsed_s',
               'problems')


def write_png(path: str, task: str, strategies, cells: list, budget) -> None:
  """Median evaluation return per strategy, and the temperature's
  trajectories (per seed, thin; median, thick), over env steps."""
  import numpy as np
  plt = harness.pyplot()
  counted = [c for c in cells if c['counted']]
  top = budget or max((c['env_steps'] for c in counted), default=1)
  grid = np.linspace(0, top, 201)
  fig, (ax_r, ax_t) = plt.subplots(1, 2, figsize=(13, 4.5))
  returns, temps = [], []
  for s in strategies:
    mine = [c for c in counted if c['strategy'] == s]
    curves = [[(min(x, top), y) for x, y in c['curve']] for c in mine
              if c['curve']]
    returns.append((f'{s} (n={len(curves)})', curves))
    temps.append((s, [c['temperature'] for c in mine if c['temperature']]))
  harness.plot_medians(ax_r, grid, returns)
  harness.plot_medians(ax_t, grid, temps, seeds=True, lw=2)
  ax_r.set(title=f'{task}: median evaluation return over seeds',
           xlabel='global env steps', ylabel='evaluation return')
  ax_t.set(title='temperature η (thin: seeds, thick: median)',
           xlabel='global env steps', ylabel='η', yscale='log')
  for ax in (ax_r, ax_t):
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.tight_layout()
  harness.save_figure(fig, path)


def json_line(task: str, strategies, stats: dict, cells: list) -> dict:
  """The study's one-line result: per strategy, the median final return and
  the median env steps to 90%."""
  out = {}
  for s in strategies:
    final = stats[s]['final_return']['median']
    steps = stats[s]['env_steps_to_90pct']['median']
    out[s] = {'final_return_median': None if final is None else
              round(final, 1),
              'env_steps_to_90pct_median': None if steps is None else
              round(steps)}
  # The seeds the medians are over (a strategy may still lack some).
  seeds = sorted({c['seed'] for c in cells if c['counted']})
  return {'dual_study': out, 'task': task, 'seeds': seeds}


# ---------------------------------------------------------------- summary


def read_cells(runs_root: str, base, strategies, seeds, budget,
               records_dir) -> tuple:
  """(cells, budget, recorded paths): every cell found, its figures judged
  against `budget` (default: the one most finished cells ran to); each
  counted cell read from a run directory is recorded into records_dir. Two
  runs of one cell (a run directory beside another run's record) count
  neither until one goes."""
  found = STUDY.collect(runs_root, records_dir, strategies, seeds)
  if budget is None:
    budget = harness.common_budget(
        None if isinstance(f.parts, harness.RecordError) else
        f.parts['final'] for f in found)
  cells, recorded = [], []
  for f in found:
    cell = cell_figures(f, expected_config(base, f.variant, f.seed), budget)
    if records_dir and cell['counted'] and not f.recorded:
      path, stored = STUDY.store(records_dir, f.variant, f.seed, f.parts,
                                 f.source)
      if stored:
        recorded.append(path)
      else:
        cell['problems'].append(
            f'{path} records another run of this cell; delete it or this '
            'run directory')
        cell.update(counted=False, status='two runs')
    cells.append(cell)
  return cells, budget, recorded


def summarise(runs_root: str, config_spec: str, strategies, seeds=None,
              budget=None, task=None, png=None, quiet=False,
              records_dir=None, reference: str = REFERENCE) -> dict:
  """Reads the cells (run directories under runs_root and, where given,
  records under records_dir), records every counted cell read from a run
  directory into records_dir, writes dual_study.md, dual_study.csv and the
  PNG, prints the Markdown and the JSON line (unless quiet); returns a dict
  with the cells, the per-strategy stats and the JSON line. The paired
  columns are each strategy minus `reference` (– where it is not among
  `strategies`)."""
  base = harness.load_named_config(config_spec, 'dual_study')
  task = task or base.env
  cells, budget, recorded = read_cells(runs_root, base, strategies, seeds,
                                       budget, records_dir)
  by_strategy = {s: [c for c in cells if c['strategy'] == s]
                 for s in strategies}
  best, best_median = harness.best_median(by_strategy, 'final_return')
  add_thresholds(cells, best_median)
  ref_cells = by_strategy.get(reference, [])
  stats = {s: harness.variant_stats(by_strategy[s], ref_cells, STAT_KEYS,
                                    THRESHOLD_KEYS, ('final_return', 'auc'))
           for s in strategies}
  text = markdown(task, config_spec, budget, strategies, stats, cells, best,
                  best_median, reference)
  line = json_line(task, strategies, stats, cells)
  os.makedirs(runs_root, exist_ok=True)
  with open(os.path.join(runs_root, 'dual_study.md'), 'w') as f:
    f.write(text + '\n```\n' + json.dumps(line) + '\n```\n')
  harness.write_csv(os.path.join(runs_root, 'dual_study.csv'), CSV_COLUMNS,
                    [dict(c, problems='; '.join(c['problems']))
                     for c in cells])
  png = png or os.path.join(runs_root, 'dual_study.png')
  write_png(png, task, strategies, cells, budget)
  if not quiet:
    print(text)
    print(f'wrote {runs_root}/dual_study.md, dual_study.csv, {png}')
    if recorded:
      print(f'recorded {len(recorded)} finished cell(s) in {records_dir} '
            '(commit them: runs/ is not kept)')
    print(json.dumps(line), flush=True)
  return {'cells': cells, 'stats': stats, 'json': line, 'best': best,
          'best_median': best_median, 'budget': budget}


# -------------------------------------------------------------------- run


def run(args) -> int:
  """Trains every requested cell not yet finished (harness.run_grid),
  strategy-major, after refusing any strategy whose pinned schedule does
  not fit the config and budget."""
  base = harness.load_named_config(args.config, 'dual_study')
  bad = [m for m in (horizon_mismatch(base, s, args.budget)
                     for s in args.strategies) if m]
  if bad:
    raise harness.Refusal('dual_study: ' + '; '.join(bad))
  return harness.run_grid(
      STUDY, [(s, seed) for s in args.strategies for seed in args.seeds],
      args.runs_root,
      lambda s, seed: cell_plan(args.runs_root, args.config, base, s, seed,
                                args.budget, args.records_dir),
      lambda last: _summary(args), dry_run=args.dry_run)


def _summary(args) -> dict:
  return summarise(args.runs_root, args.config, args.strategies,
                   args.seeds, args.budget, args.task_label, args.png,
                   records_dir=args.records_dir, reference=args.reference)


# ------------------------------------------------------------------- main


def _reference(text: str) -> str:
  if text not in STRATEGIES:
    raise argparse.ArgumentTypeError(
        f'expected one of {",".join(STRATEGIES)}, got {text!r}')
  return text


def make_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)
  r = sub.add_parser('run', help='train every (strategy, seed) cell not yet '
                     'finished, one at a time')
  r.add_argument('--seeds', type=harness.parse_seeds,
                 default=list(DEFAULT_SEEDS),
                 help='e.g. 0,1,2,3,4 (the default)')
  r.add_argument('--budget', type=harness.parse_budget,
                 default=DEFAULT_BUDGET,
                 help='env steps per run (default %(default)s)')
  r.add_argument('--dry_run', action='store_true',
                 help='print the commands it would run; run nothing')
  s = sub.add_parser('summary', help='summarise the cells found')
  s.add_argument('--seeds', type=harness.parse_seeds, default=None,
                 help='default: every seed found')
  s.add_argument('--budget', type=harness.parse_budget, default=None,
                 help='the study\'s budget (default: the one most finished '
                 'cells ran to)')
  for q in (r, s):
    q.add_argument('--config', default=DEFAULT_CONFIG,
                   help='named MPO config, <file.py>:<name> (default '
                   '%(default)s)')
    q.add_argument('--task_label', help='the task in the tables (default: '
                   'the config\'s env)')
    q.add_argument('--strategies', type=harness.names_type(STRATEGIES),
                   default=list(DUAL_STRATEGIES),
                   help='comma-separated subset of ' + ','.join(STRATEGIES)
                   + ' (default: the first five)')
    q.add_argument('--reference', type=_reference, default=REFERENCE,
                   help='the strategy the paired columns subtract (default '
                   '%(default)s; – where it is not among --strategies)')
    q.add_argument('--runs_root', help='default: runs/dual_study_<config '
                   'name> in the repo')
    q.add_argument('--png', help='default: RUNS_ROOT/dual_study.png')
    q.add_argument('--records_dir', help='where finished cells are recorded '
                   'for git (default: studies/results/dual_study_<config '
                   'name> in the repo)')
  return p


def main(argv=None) -> int:
  args = make_parser().parse_args(argv)
  name = args.config.partition(':')[2]
  args.config = harness.resolve_config_spec(args.config, 'dual_study',
                                            DEFAULT_CONFIG)
  # The cells run from the repo root: make every path absolute now.
  args.runs_root = os.path.abspath(args.runs_root or os.path.join(
      REPO_ROOT, 'runs', f'dual_study_{name}'))
  args.records_dir = os.path.abspath(args.records_dir or default_records_dir(
      name))
  if args.png:
    args.png = os.path.abspath(args.png)
  with harness.paths_named('dual_study'):
    if args.command == 'run':
      return run(args)
    _summary(args)
  return 0


if __name__ == '__main__':
  harness.run_tool(main)
