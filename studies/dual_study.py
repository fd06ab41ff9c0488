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
import collections
import csv
import dataclasses
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
from tandem.agents.core.fields import ConfigError
from tandem.launch import config as config_lib

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
FRACTIONS = (0.5, 0.9)
DEFAULT_CONFIG = 'configs/mpo.py:make_run'
DEFAULT_BUDGET = 100_000
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
RUN_NAME = re.compile(r'^(.+)_s(\d+)$')
EXIT_INTERRUPTED = _cells.EXIT_INTERRUPTED
# Fields a run's config.json may hold with other values than the study's
# and still be the study's cell: its name and location, the budget (checked
# on its own, from final.json) and plumbing that changes neither learning
# nor what is measured. Every other field is compared, resumable or not:
# actors, replay sizes, refresh and evaluation periods, final evaluation
# episodes and fault injection all change the learning or the figures.
PLUMBING = frozenset({
    'checkpoint_period_s', 'checkpoints_to_keep', 'learner_log_every',
    'tensorboard', 'stop_grace_s', 'replay_checkpoints',
    'replay_checkpoint_period_s', 'max_consecutive_env_faults',
    'stall_window', 'max_skipped_fraction'})
NOT_COMPARED = frozenset({'name', 'runs_root', 'env_step_budget'}) | PLUMBING
TRAJECTORY_POINTS = 400  # temperature samples kept per cell, for the plot


def _pct(fraction: float) -> str:
  return f'{round(fraction * 100)}pct'


# ------------------------------------------------------------ the cells


def strategy_overrides(strategy: str) -> dict:
  """{'mpo.duals.<field>': value, 'mpo.<field>': value} that makes a run
  use `strategy`."""
  fields = dict(_COMMON, **STRATEGIES[strategy])
  out = {f'mpo.duals.{k}': v for k, v in sorted(fields.items())}
  out.update({f'mpo.{k}': v for k, v in sorted(MPO_FIELDS[strategy].items())})
  out.update(sorted(TRAIN_FIELDS[strategy].items()))
  return out


def override_args(strategy: str) -> list:
  """The strategy's overrides as `tandem train` arguments."""
  return [f'--{k}={v}' for k, v in strategy_overrides(strategy).items()]


def cell_name(strategy: str, seed: int) -> str:
  return f'{strategy}_s{seed}'


def resolve_config_spec(spec: str) -> str:
  """'<file.py>:<name>' with the file made absolute: cells run from the repo
  root, so a path relative to the caller's directory must not change."""
  path, sep, name = spec.partition(':')
  if not sep or not name:
    raise SystemExit(f"dual_study: --config {spec!r}: expected "
                     "'<file.py>:<name>', e.g. " + DEFAULT_CONFIG)
  if not os.path.isabs(path) and not os.path.isfile(path):
    path = os.path.join(REPO_ROOT, path)  # the default is repo-relative
  return f'{os.path.abspath(path)}:{name}'


def load_base_config(spec: str):
  """The named TrainConfig the cells start from."""
  from tandem.launch import errors
  from tandem.launch import resolve
  try:
    return resolve.load_named_config(spec)
  except errors.UsageError as e:
    raise SystemExit(f'dual_study: {e}') from e


def expected_config(base, strategy: str, seed: int):
  """What `train` resolves for this cell (name and location aside)."""
  return config_lib.apply_overrides(
      base, dict(strategy_overrides(strategy), seed=str(seed)))


def config_mismatches(recorded: dict, expected) -> list:
  """'field: got X, expected Y' for every field of a run's config.json that
  defines the run and differs from `expected`; [] when it is the cell."""
  try:
    got = config_lib.leaf_fields(config_lib.from_dict(recorded))
  except (ConfigError, TypeError, AttributeError, ValueError) as e:
    return [f'config.json is not a valid config ({e})']
  want = config_lib.leaf_fields(expected)
  out = []
  for path in sorted(set(got) | set(want)):
    if path in NOT_COMPARED or got.get(path) == want.get(path):
      continue
    out.append(f'{path}: got {got.get(path)!r}, expected {want.get(path)!r}')
  return out


def _read_json(path: str):
  """The parsed file, or None where it is absent or unreadable."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def train_command(config_spec: str, runs_root: str, strategy: str,
                  seed: int, budget: int) -> list:
  """The `tandem train` command line that starts a new cell."""
  return [sys.executable, '-m', 'tandem.launch.cli', 'train',
          '--config', config_spec, f'--runs_root={runs_root}',
          '--name', cell_name(strategy, seed), f'--seed={seed}',
          f'--env_step_budget={budget}'] + override_args(strategy)


def record_plan(path: str, base, strategy: str, seed: int, budget: int):
  """cell_plan's answer for a cell whose run directory has not finished but
  whose record exists: it finished elsewhere, so it is skipped, never rerun
  over; an unreadable record is refused (restore it or delete it)."""
  try:
    final, recorded, _, _ = read_record(path, strategy, seed)
  except RecordError as e:
    return 'refuse', None, (f'{e}; restore it (git checkout) or delete it '
                            'to redo the cell')
  wrong = config_mismatches(recorded, expected_config(base, strategy, seed))
  return 'skip', None, finished_note(f'finished (recorded in {path})',
                                     final.get('budget'), budget, wrong)


def finished_note(note: str, done, budget: int, wrong: list) -> str:
  """A skipped cell's note, with the budget it ran to where that is not
  the study's and the config fields that are not its strategy's."""
  if done is not None and done != budget:
    note += f'; budget {done}, not {budget}'
  if wrong:
    note += '; NOT this strategy\'s config (' + '; '.join(wrong) + ')'
  return note


def cell_plan(runs_root: str, config_spec: str, base, strategy: str,
              seed: int, budget: int, records_dir=None):
  """(action, command, note) for one cell. action: 'skip' (finished, in
  its run directory or in its record under records_dir), 'resume'
  (interrupted), 'start' (new) or 'refuse' (its run directory holds
  another config, or its record is unreadable); command is None unless the
  cell is to be run."""
  run_dir = os.path.join(runs_root, cell_name(strategy, seed))
  recorded = _read_json(os.path.join(run_dir, 'config.json'))
  finished = os.path.isfile(os.path.join(run_dir, 'final.json'))
  record = (_cells.record_path(records_dir, strategy, seed) if records_dir
            else None)
  if not finished and record is not None and os.path.exists(record):
    return record_plan(record, base, strategy, seed, budget)
  if recorded is None and not finished:
    return 'start', train_command(config_spec, runs_root, strategy, seed,
                                  budget), 'new'
  wrong = (['no readable config.json'] if recorded is None else
           config_mismatches(recorded, expected_config(base, strategy, seed)))
  if finished:
    done = (_read_json(os.path.join(run_dir, 'final.json')) or {}).get(
        'budget')
    note = finished_note('finished', done, budget, wrong)
    if note != 'finished':
      note += '; delete the run directory to redo it'
    return 'skip', None, note
  if wrong:
    # Continuing it would add another strategy's run to this cell.
    return 'refuse', None, ('interrupted, but its config is not this '
                            'strategy\'s (' + '; '.join(wrong) + '); delete '
                            'the run directory to redo it')
  return 'resume', [sys.executable, '-m', 'tandem.launch.cli', 'train', '--resume',
                    run_dir, f'--env_step_budget={budget}'], (
                        'interrupted; continuing it')


# ------------------------------------------------------- one cell's figures


def _finite(v):
  """v as a float where it is a finite number, else None."""
  if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(
      v):
    return float(v)
  return None


def read_eval_curve(run_dir: str) -> list:
  """[(env_steps, eval_return), ...] in env-step order."""
  path = os.path.join(run_dir, 'logs', 'evaluator.csv')
  rows = logs.read_csv(path) if os.path.isfile(path) else []
  curve = []
  for r in rows:
    steps, ret = _finite(r.get('env_steps')), _finite(r.get('eval_return'))
    if steps is not None and ret is not None:  # a torn last line is skipped
      curve.append((int(steps), ret))
  # Stable: a periodic row stays before the final row of the same count.
  curve.sort(key=lambda p: p[0])
  return curve


def _thin(points: list, limit: int) -> list:
  """At most `limit` evenly spaced points, the last one kept."""
  if len(points) <= limit:
    return points
  stride = math.ceil(len(points) / limit)
  return points[::stride] + ([points[-1]] if (len(points) - 1) % stride
                             else [])


def read_learner(run_dir: str) -> dict:
  """Means of |temperature_dual_residual| and of kl_q_rel over the run, and
  the temperature's trajectory [(env_steps, temperature), ...]."""
  path = os.path.join(run_dir, 'logs', 'learner.csv')
  residual, kl, temps = [], [], []
  if os.path.isfile(path):
    # Streamed, parsing only the columns used: a long run logs one row per
    # learner step, and read_csv would parse all of its ~30 columns.
    with open(path, newline='') as f:
      for row in csv.DictReader(f):
        steps = _parse(row.get('env_steps'))
        r = _parse(row.get('temperature_dual_residual'))
        k = _parse(row.get('kl_q_rel'))
        t = _parse(row.get('temperature'))
        if r is not None:
          residual.append(abs(r))
        if k is not None:
          kl.append(k)
        if steps is not None and t is not None:
          temps.append((int(steps), t))
  temps.sort(key=lambda p: p[0])
  return {'mean_abs_temperature_dual_residual':
              statistics.fmean(residual) if residual else None,
          'mean_kl_q_rel': statistics.fmean(kl) if kl else None,
          'final_temperature': temps[-1][1] if temps else None,
          'temperature': _thin(temps, TRAJECTORY_POINTS)}


def _parse(text):
  """A CSV cell as a finite float, else None (blank, nan, torn)."""
  try:
    return _finite(float(text))
  except (TypeError, ValueError):
    return None


def area_under_curve(curve: list, budget: int):
  """Trapezoid area under the evaluation return over env steps, divided by
  the budget: the run's average return. Every run spans [0, budget]:
  evaluations taken past the budget (the final one lands a few steps beyond
  it) count as at the budget, and the first evaluation's return also holds
  from step 0 (it lands at 0-2k env steps, before the learner's first step
  at replay_min_size, so it is the untrained policy's)."""
  if not curve or not budget:
    return None
  if curve[0][0] > 0:
    curve = [(0, curve[0][1])] + list(curve)
  xs = [min(s, budget) for s, _ in curve]
  ys = [r for _, r in curve]
  area = sum((xs[i] - xs[i - 1]) * (ys[i] + ys[i - 1]) / 2
             for i in range(1, len(xs)))
  return area / budget


def steps_to(curve: list, threshold):
  """The env steps of the first evaluation at or above threshold, or None."""
  if threshold is None:
    return None
  return next((s for s, r in curve if r >= threshold), None)


def cell_figures(strategy: str, seed: int, source: str, final, recorded,
                 curve: list, learner: dict, expected, budget) -> dict:
  """One cell's figures from its parts (final.json and config.json as
  dicts, None where absent; the evaluation curve; read_learner's dict),
  wherever they were read from: a run directory or a committed record.
  Thresholds are filled in later, once the best strategy is known."""
  problems = (['no readable config.json'] if recorded is None else
              config_mismatches(recorded, expected))
  cell = {'strategy': strategy, 'seed': seed, 'source': source,
          'finished': final is not None, 'curve': curve,
          'env_steps': curve[-1][0] if curve else 0,
          'budget': None, 'final_return': None, 'auc': None,
          'elapsed_s': None}
  if final is not None:
    counts = final.get('counts', {})
    cell['budget'] = final.get('budget')
    cell['final_return'] = _finite(final.get('final_eval_return'))
    cell['env_steps'] = int(counts.get('env_steps', cell['env_steps']))
    cell['elapsed_s'] = _finite(counts.get('elapsed_s'))
    if budget is not None and cell['budget'] != budget:
      problems.append(f'budget {cell["budget"]}, the study\'s is {budget}')
    cell['auc'] = area_under_curve(curve, cell['budget'] or budget)
  cell.update(learner)
  cell['problems'] = problems
  cell['counted'] = cell['finished'] and not problems
  cell['status'] = ('counted' if cell['counted'] else
                    'config mismatch' if problems else 'unfinished')
  return cell


def read_cell(run_dir: str, strategy: str, seed: int, expected,
              budget) -> dict:
  """One cell's figures, from its run directory."""
  return cell_figures(strategy, seed, run_dir, *run_parts(run_dir),
                      expected, budget)


def read_code(run_dir: str) -> list:
  """The git commits the run's launches ran (config_history.jsonl), in
  order and without repeats, '<commit>+dirty' where tracked files differed;
  [] where none was recorded."""
  out = []
  try:
    with open(os.path.join(run_dir, 'config_history.jsonl')) as f:
      lines = f.read().splitlines()
  except OSError:
    return out
  for line in lines:
    try:
      code = json.loads(line).get('code') or {}
      commit = code.get('commit')
    except (ValueError, AttributeError):
      continue
    if isinstance(commit, str):
      name = commit[:12] + ('+dirty' if code.get('dirty') else '')
      if name not in out:
        out.append(name)
  return out


def run_parts(run_dir: str) -> tuple:
  """(final.json, config.json, evaluation curve, learner figures) of a run
  directory; the JSON files as dicts, None where absent or unreadable. The
  learner figures also carry 'code', the commits it ran (`read_code`)."""
  return (_read_json(os.path.join(run_dir, 'final.json')),
          _read_json(os.path.join(run_dir, 'config.json')),
          read_eval_curve(run_dir),
          dict(read_learner(run_dir), code=read_code(run_dir)))


# ------------------------------------------------------ committed records
#
# A run directory lives under runs/, which git ignores: it is gone on the
# next machine, and with it hours of finished cells. So every finished cell
# whose config is its strategy's is also written, small and deterministic,
# to a records directory inside the repo (default studies/results/
# dual_study_<config name>/<cell>.json), which is committed; `run` skips a
# recorded cell and `summary` counts it where no finished run directory
# exists. A record holds the parts the figures are computed from, never the
# figures alone, so a change of the summary's statistics recomputes them.

RECORD_FORMAT = 'tandem.dual_study.cell/1'
RecordError = _cells.RecordError  # a record that cannot be read as its cell


def default_records_dir(config_name: str) -> str:
  return os.path.join(REPO_ROOT, 'studies', 'results',
                      f'dual_study_{config_name}')


def make_record(strategy: str, seed: int, final: dict, recorded: dict,
                curve: list, learner: dict) -> dict:
  """A finished cell's record (JSON-ready)."""
  return {'format': RECORD_FORMAT, 'strategy': strategy, 'seed': seed,
          'final': final, 'config': recorded,
          'curve': [list(p) for p in curve],
          'learner': dict(learner,
                          temperature=[list(p) for p in
                                       learner['temperature']])}


def store_record(path: str, record: dict) -> bool:
  """_cells.store_record: never overwrites another run's record. A record
  of this same run without the commits it ran (no learner 'code') is
  brought up to date rather than taken for another run."""
  try:
    with open(path) as f:
      old = json.load(f)
    same = dict(record, learner={k: v for k, v in record['learner'].items()
                                 if k != 'code'})
    if ('code' not in old.get('learner', {}) and
        old == json.loads(json.dumps(same))):
      _cells.write_record(path, record)
      return True
  except (OSError, ValueError, AttributeError, TypeError):
    pass
  return _cells.store_record(path, record, 'dual_study',
                             record['config'].get('runs_root'))


def read_record(path: str, strategy: str, seed: int) -> tuple:
  """(final, config, curve, learner) of a record, as run_parts gives them;
  RecordError naming the file and what is wrong where it is not a finished
  cell of this strategy and seed."""
  rec = _cells.load_record(path, RECORD_FORMAT, 'strategy', strategy, seed)
  try:
    final, recorded = rec['final'], rec['config']
    if not isinstance(final, dict) or not isinstance(recorded, dict):
      raise TypeError('final and config must be objects')
    curve = [(int(s), float(r)) for s, r in rec['curve']]
    learner = dict(rec['learner'])
    learner['temperature'] = [(int(s), float(t))
                              for s, t in learner['temperature']]
    # A record without the commits it ran: unknown.
    learner['code'] = [str(c) for c in learner.get('code') or []]
    for key in ('mean_abs_temperature_dual_residual', 'mean_kl_q_rel',
                'final_temperature'):
      learner[key] = _finite(learner.get(key))
  except (KeyError, TypeError, ValueError) as e:
    raise RecordError(f'{path}: malformed record ({e!r})') from e
  return final, recorded, curve, learner


def find_records(records_dir, strategies, seeds=None) -> list:
  """[(strategy, seed, path)] for RECORDS_DIR/<strategy>_s<seed>.json."""
  return _cells.find_records(records_dir, strategies, RUN_NAME, seeds)


def find_cells(runs_root: str, strategies, seeds=None) -> list:
  """[(strategy, seed, run_dir)] for RUNS_ROOT/<strategy>_s<seed>, ordered
  as `strategies`, then by seed; seeds=None takes every seed found."""
  found = []
  if os.path.isdir(runs_root):
    for entry in os.listdir(runs_root):
      m = RUN_NAME.match(entry)
      path = os.path.join(runs_root, entry)
      if (m and m.group(1) in strategies and os.path.isdir(path) and
          (seeds is None or int(m.group(2)) in seeds)):
        found.append((m.group(1), int(m.group(2)), path))
  order = {s: i for i, s in enumerate(strategies)}
  return sorted(found, key=lambda c: (order[c[0]], c[1]))


def study_budget(finals) -> int | None:
  """The budget most finished cells ran to (the study's when not given);
  finals: the cells' final.json dicts, None where unfinished."""
  budgets = collections.Counter((f or {}).get('budget') for f in finals)
  budgets.pop(None, None)
  return budgets.most_common(1)[0][0] if budgets else None


# ------------------------------------------------------------- statistics


def _median(values):
  return statistics.median(values) if values else None


def median_reached(values: list):
  """Median over the seeds that reached a threshold; None where fewer than
  half of the seeds did (a median of the few that got there would flatter a
  strategy that mostly fails)."""
  reached = [v for v in values if v is not None]
  if not reached or 2 * len(reached) < len(values):
    return None
  return _median(reached)


def spread(values: list) -> dict:
  """Median, min and max of the values that exist."""
  got = [v for v in values if v is not None]
  return {'median': _median(got), 'min': min(got) if got else None,
          'max': max(got) if got else None, 'n': len(got)}


def best_strategy(cells_by_strategy: dict):
  """(strategy, its median final return) with the highest median over its
  counted cells; (None, None) before any cell is counted."""
  medians = {s: _median([c['final_return'] for c in cells
                         if c['counted']])
             for s, cells in cells_by_strategy.items()}
  medians = {s: m for s, m in medians.items() if m is not None}
  if not medians:
    return None, None
  best = max(medians, key=medians.get)
  return best, medians[best]


def add_thresholds(cells: list, best_median) -> None:
  """Each cell's env steps to each fraction of the best median return."""
  for cell in cells:
    for fraction in FRACTIONS:
      threshold = None if best_median is None else fraction * best_median
      cell[f'env_steps_to_{_pct(fraction)}'] = steps_to(cell['curve'],
                                                        threshold)


def paired(cells: list, reference: list, key: str) -> dict:
  """Per-seed differences (cell - reference) of `key` over the seeds that
  both counted: the seeds share everything but the strategy, so the
  difference removes the seed's own luck."""
  ref = {c['seed']: c[key] for c in reference
         if c['counted'] and c[key] is not None}
  diffs = {c['seed']: c[key] - ref[c['seed']] for c in cells
           if c['counted'] and c[key] is not None and c['seed'] in ref}
  return {'seeds': sorted(diffs),
          'differences': [diffs[s] for s in sorted(diffs)],
          'median': _median(list(diffs.values())),
          'better': sum(d > 0 for d in diffs.values()),
          'worse': sum(d < 0 for d in diffs.values()),
          'ties': sum(d == 0 for d in diffs.values())}


def strategy_stats(cells: list, reference: list) -> dict:
  """Per strategy, over its counted cells."""
  counted = [c for c in cells if c['counted']]
  out = {'cells': len(cells), 'counted': len(counted),
         'seeds': [c['seed'] for c in counted]}
  for key in ('final_return', 'auc', 'mean_abs_temperature_dual_residual',
              'mean_kl_q_rel', 'final_temperature'):
    out[key] = spread([c[key] for c in counted])
  for fraction in FRACTIONS:
    key = f'env_steps_to_{_pct(fraction)}'
    values = [c[key] for c in counted]
    out[key] = {'median': median_reached(values),
                'reached': sum(v is not None for v in values),
                'n': len(values)}
  if reference is not cells:
    out['paired_final_return'] = paired(cells, reference, 'final_return')
    out['paired_auc'] = paired(cells, reference, 'auc')
  return out


# ---------------------------------------------------------------- outputs


def _num(v, fmt='{:.1f}'):
  return '–' if v is None else fmt.format(v)


def _range(s: dict, fmt='{:.1f}') -> str:
  if s['median'] is None:
    return '–'
  return (f"{fmt.format(s['median'])} ({fmt.format(s['min'])}–"
          f"{fmt.format(s['max'])})")


def _steps(s: dict) -> str:
  med = '–' if s['median'] is None else f"{s['median']:.0f}"
  return f"{med} ({s['reached']}/{s['n']})"


def _paired_text(p) -> str:
  if p is None:
    return 'reference'
  if not p['seeds']:
    return '–'
  return (f"{p['median']:+.1f} ({p['better']} better, {p['worse']} worse"
          + (f", {p['ties']} tied" if p['ties'] else '') + ')')


def _strategy_rows(strategies, stats: dict, reference: str = REFERENCE
                   ) -> list:
  """The per-strategy table."""
  lines = ['| strategy | counted | final return median (min–max) | '
           'AUC median (min–max) | env steps to 50% (reached) | '
           'env steps to 90% (reached) | mean abs temperature dual '
           f'residual | mean kl_q_rel | paired Δ final vs {reference} | '
           f'paired Δ AUC vs {reference} |',
           '|:---|---:|---:|---:|---:|---:|---:|---:|:---|:---|']
  for s in strategies:
    st = stats[s]
    lines.append(
        f"| {s} | {st['counted']}/{st['cells']} | "
        f"{_range(st['final_return'])} | {_range(st['auc'])} | "
        f"{_steps(st['env_steps_to_50pct'])} | "
        f"{_steps(st['env_steps_to_90pct'])} | "
        f"{_range(st['mean_abs_temperature_dual_residual'], '{:.3g}')} | "
        f"{_range(st['mean_kl_q_rel'], '{:.3f}')} | "
        f"{_paired_text(st.get('paired_final_return'))} | "
        f"{_paired_text(st.get('paired_auc'))} |")
  return lines


def _cell_rows(cells: list) -> list:
  """The per-cell table."""
  lines = ['| cell | status | final return | AUC | env steps to 50% | '
           'env steps to 90% | mean abs residual | mean kl_q_rel | '
           'final temperature | env steps | elapsed s |',
           '|:---|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
  for c in cells:
    # Where the figures came from: a committed record, or a run directory.
    status = c['status'] + (', record' if c['source'].endswith('.json')
                            else '')
    lines.append(
        f"| {cell_name(c['strategy'], c['seed'])} | {status} | "
        f"{_num(c['final_return'])} | {_num(c['auc'])} | "
        f"{_num(c['env_steps_to_50pct'], '{:.0f}')} | "
        f"{_num(c['env_steps_to_90pct'], '{:.0f}')} | "
        f"{_num(c['mean_abs_temperature_dual_residual'], '{:.3g}')} | "
        f"{_num(c['mean_kl_q_rel'], '{:.3f}')} | "
        f"{_num(c['final_temperature'], '{:.3g}')} | {c['env_steps']} | "
        f"{_num(c['elapsed_s'], '{:.0f}')} |")
  return lines


def reading_note(reference: str = REFERENCE) -> str:
  return (
      'AUC: area under the evaluation return over env steps, divided by the '
      'budget (the run\'s average return). Env steps to a threshold: median '
      'over the seeds that reached it; – where fewer than half of the '
      'strategy\'s counted seeds reached it. Paired Δ: per seed, strategy '
      f'minus {reference}, over the seeds both counted; "better" counts '
      'seeds where the strategy is higher. Only finished cells whose '
      'config.json is the strategy\'s and the seed\'s are counted.')


def markdown(task: str, config_spec: str, budget, strategies, stats: dict,
             cells: list, best, best_median, reference: str = REFERENCE
             ) -> str:
  """The study's tables and their reading notes."""
  shown = os.path.relpath(config_spec, REPO_ROOT)  # as committed tables
  if shown.startswith('..'):                        # would name it
    shown = config_spec
  lines = [f'### Dual strategies on {task} (`{shown}`, budget '
           f'{_num(budget, "{:.0f}")} env steps)', '']
  if best is None:
    lines.append('No counted cell yet: thresholds undefined.')
  else:
    lines.append(f'Thresholds: 50% = {0.5 * best_median:.1f} and 90% = '
                 f'{0.9 * best_median:.1f} of the best strategy\'s median '
                 f'final return ({best}, {best_median:.1f}).')
  lines += [''] + _strategy_rows(strategies, stats, reference)
  lines += ['', reading_note(reference), '', code_note(cells), '']
  lines += _cell_rows(cells)
  flagged = [c for c in cells if c['problems']]
  if flagged:
    lines += ['', 'Not counted (the run is not this study\'s cell):']
    lines += [f"- {cell_name(c['strategy'], c['seed'])}: "
              + '; '.join(c['problems']) for c in flagged]
  return '\n'.join(lines) + '\n'


def code_note(cells: list) -> str:
  """Which code the counted cells ran: a table pooling cells of several
  commits (a record keeps its run's) says so rather than pairing them
  silently."""
  counted = [c for c in cells if c['counted']]
  runs: dict = {}
  for c in counted:
    key = ' → '.join(c.get('code') or []) or 'not recorded (records ' \
        'from before commits were kept)'
    runs[key] = runs.get(key, 0) + 1
  if not runs:
    return 'Code: no counted cell.'
  parts = [f'{k} ({n})' for k, n in sorted(runs.items())]
  head = ('Code of the counted cells:' if len(runs) == 1 else
          f'Code of the counted cells: {len(runs)} different versions,')
  return f"{head} {'; '.join(parts)}."


CSV_COLUMNS = ('strategy', 'seed', 'status', 'final_return', 'auc',
               'env_steps_to_50pct', 'env_steps_to_90pct',
               'mean_abs_temperature_dual_residual', 'mean_kl_q_rel',
               'final_temperature', 'env_steps', 'budget', 'elapsed_s',
               'problems')


def write_csv(path: str, cells: list) -> None:
  """One row per cell, blank where a figure does not exist."""
  with open(path, 'w', newline='') as f:
    w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
    w.writeheader()
    for c in cells:
      row = {k: c.get(k) for k in CSV_COLUMNS}
      row['problems'] = '; '.join(c['problems'])
      w.writerow({k: '' if v is None else v for k, v in row.items()})


def _median_on_grid(curves: list, grid):
  """The pointwise median of curves interpolated onto grid, each defined
  only up to its last point (a shorter run does not pretend to go on)."""
  import warnings
  import numpy as np
  rows = []
  for pts in curves:
    xs = np.array([p[0] for p in pts], dtype=float)
    ys = np.array([p[1] for p in pts], dtype=float)
    row = np.interp(grid, xs, ys)
    row[grid > xs[-1]] = np.nan
    rows.append(row)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore', RuntimeWarning)  # all-nan columns
    return np.nanmedian(np.array(rows), axis=0)


def write_png(path: str, task: str, strategies, cells: list, budget) -> None:
  """Median evaluation return per strategy, and the temperature's
  trajectories (per seed, thin; median, thick), over env steps."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  import numpy as np
  counted = [c for c in cells if c['counted']]
  top = budget or max((c['env_steps'] for c in counted), default=1)
  grid = np.linspace(0, top, 201)
  fig, (ax_r, ax_t) = plt.subplots(1, 2, figsize=(13, 4.5))
  for i, s in enumerate(strategies):
    mine = [c for c in counted if c['strategy'] == s]
    color = f'C{i}'
    curves = [[(min(x, top), y) for x, y in c['curve']] for c in mine
              if c['curve']]
    if curves:
      ax_r.plot(grid, _median_on_grid(curves, grid), color=color,
                label=f'{s} (n={len(curves)})')
    temps = [c['temperature'] for c in mine if c['temperature']]
    for t in temps:
      ax_t.plot([p[0] for p in t], [p[1] for p in t], color=color,
                alpha=0.25, lw=0.7)
    if temps:
      ax_t.plot(grid, _median_on_grid(temps, grid), color=color, lw=2,
                label=s)
  ax_r.set(title=f'{task}: median evaluation return over seeds',
           xlabel='global env steps', ylabel='evaluation return')
  ax_t.set(title='temperature η (thin: seeds, thick: median)',
           xlabel='global env steps', ylabel='η', yscale='log')
  for ax in (ax_r, ax_t):
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
      ax.legend(fontsize=8)
  fig.tight_layout()
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=100)
  plt.close(fig)


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


def collect(runs_root: str, records_dir, strategies, seeds=None) -> list:
  """[(strategy, seed, source, parts)] for every cell found, in study order.
  A finished run directory wins over the cell's record (it is the fuller);
  a record wins over an unfinished run directory (the cell finished
  elsewhere). parts is run_parts' tuple, or the RecordError of a record
  that cannot be read."""
  runs = {(s, n): d for s, n, d in find_cells(runs_root, strategies, seeds)}
  recs = {(s, n): p for s, n, p in find_records(records_dir, strategies,
                                                seeds)}
  order = {s: i for i, s in enumerate(strategies)}
  out = []
  for key in sorted(set(runs) | set(recs), key=lambda k: (order[k[0]], k[1])):
    run_dir, path = runs.get(key), recs.get(key)
    # An unfinished run directory beside a record is not read at all.
    if run_dir is not None and (path is None or os.path.isfile(
        os.path.join(run_dir, 'final.json'))):
      parts = run_parts(run_dir)
      if parts[0] is not None or path is None:
        out.append(key + (run_dir, parts))
        continue
    try:
      parts = read_record(path, *key)
    except RecordError as e:
      parts = e
    out.append(key + (path, parts))
  return out


_NO_LEARNER = {'mean_abs_temperature_dual_residual': None,
               'mean_kl_q_rel': None, 'final_temperature': None,
               'temperature': []}


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
  base = load_base_config(config_spec)
  task = task or base.env
  found = collect(runs_root, records_dir, strategies, seeds)
  if budget is None:
    # Judge every cell against the budget most of them ran to.
    budget = study_budget(None if isinstance(parts, RecordError) else
                          parts[0] for _, _, _, parts in found)
  cells, recorded = [], []
  for s, seed, source, parts in found:
    expected = expected_config(base, s, seed)
    if isinstance(parts, RecordError):
      cell = cell_figures(s, seed, source, None, None, [], _NO_LEARNER,
                          expected, budget)
      cell.update(problems=[str(parts)], status='unreadable record')
    else:
      cell = cell_figures(s, seed, source, *parts, expected, budget)
      if records_dir and cell['counted'] and os.path.isdir(source):
        path = _cells.record_path(records_dir, s, seed)
        if store_record(path, make_record(s, seed, *parts)):
          recorded.append(path)
        else:  # two runs of one cell: neither is counted until one goes
          cell['problems'].append(
              f'{path} records another run of this cell; delete it or this '
              'run directory')
          cell.update(counted=False, status='two runs')
    cells.append(cell)
  by_strategy = {s: [c for c in cells if c['strategy'] == s]
                 for s in strategies}
  best, best_median = best_strategy(by_strategy)
  add_thresholds(cells, best_median)
  ref_cells = by_strategy.get(reference, [])
  stats = {s: strategy_stats(by_strategy[s], ref_cells) for s in strategies}
  text = markdown(task, config_spec, budget, strategies, stats, cells, best,
                  best_median, reference)
  line = json_line(task, strategies, stats, cells)
  os.makedirs(runs_root, exist_ok=True)
  with open(os.path.join(runs_root, 'dual_study.md'), 'w') as f:
    f.write(text + '\n```\n' + json.dumps(line) + '\n```\n')
  write_csv(os.path.join(runs_root, 'dual_study.csv'), cells)
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


def run_cell(command, log_path: str) -> int:
  """One cell from the repo root (studies/_cells.py)."""
  return _cells.run_cell(command, log_path, REPO_ROOT, 'dual_study')


def plan(args, base) -> list:
  """[(name, action, command, note)] for every requested cell, in order."""
  return [(cell_name(s, seed),) + cell_plan(args.runs_root, args.config,
                                            base, s, seed, args.budget,
                                            args.records_dir)
          for s in args.strategies for seed in args.seeds]


def print_plan(args, cells: list) -> None:
  """--dry_run: what each cell would do, with its command and log."""
  for i, (name, action, command, note) in enumerate(cells, 1):
    print(f'[{i}/{len(cells)}] {name}: {action} ({note})' + (
        '' if command is None else
        f'\n  cd {shlex.quote(REPO_ROOT)} && {shlex.join(command)}\n'
        f'  log: {os.path.join(args.runs_root, name + ".log")}'))


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
  from tandem.launch import notes
  pinned = MPO_FIELDS[strategy].get('schedule_horizon')
  if pinned is None or pinned == _MPO_DEFAULTS['schedule_horizon']:
    return None
  # The study's --budget overrides the config's.
  cfg = dataclasses.replace(expected_config(base, strategy, 0),
                            env_step_budget=budget)
  steps = notes.expected_updates(cfg)['mpo']
  if abs(int(pinned) - steps) <= HORIZON_TOLERANCE * steps:
    return None
  return (f'{strategy} anneals over {pinned} learner steps, but '
          f'{cfg.name} at --budget {budget} gives {steps:.0f} (({budget} env '
          f'steps - replay_min_size {cfg.replay_min_size}) × samples_per_insert '
          f'{cfg.samples_per_insert:g} / batch_size {cfg.mpo.batch_size}), '
          f'more than {HORIZON_TOLERANCE:.0%} away')


def run(args) -> int:
  base = load_base_config(args.config)
  bad = [m for m in (horizon_mismatch(base, s, args.budget)
                     for s in args.strategies) if m]
  if bad:
    raise SystemExit('dual_study: ' + '; '.join(bad))
  if args.dry_run:
    print_plan(args, plan(args, base))
    return 0
  cells = [(s, seed) for s in args.strategies for seed in args.seeds]
  failed, ran = [], False
  for i, (strategy, seed) in enumerate(cells, 1):
    name = cell_name(strategy, seed)
    # Planned just before it runs: an earlier cell may have taken an hour,
    # and another process may have finished this one meanwhile.
    action, command, note = cell_plan(args.runs_root, args.config, base,
                                      strategy, seed, args.budget,
                                      args.records_dir)
    print(f'\n[{i}/{len(cells)}] {name}: {action} ({note})', flush=True)
    if command is None:
      if action == 'refuse':
        failed.append(name)
      continue
    os.makedirs(args.runs_root, exist_ok=True)
    log_path = os.path.join(args.runs_root, f'{name}.log')
    print(f'$ {shlex.join(command)}\n(log: {log_path})', flush=True)
    rc, ran = run_cell(command, log_path), True
    if rc == EXIT_INTERRUPTED:
      print(f'dual_study: {name} interrupted; rerun the same command to '
            'continue it', file=sys.stderr)
      return EXIT_INTERRUPTED
    if rc != 0:
      failed.append(name)
      print(f'dual_study: {name} exited with status {rc}; see {log_path}. '
            'Going on with the other cells.', file=sys.stderr)
    print(f'\n--- summary after {name} ---', flush=True)
    _summary(args)
  if not ran:  # nothing ran: still show where the study stands
    print('\n--- summary ---', flush=True)
    _summary(args)
  if failed:
    print(f'dual_study: cells not finished: {", ".join(failed)}; rerun to '
          'continue them (a refused cell needs its run directory removed)',
          file=sys.stderr)
    return 1
  return 0


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


def _strategies(text: str) -> list:
  names = [s.strip() for s in text.split(',') if s.strip()]
  bad = [s for s in names if s not in STRATEGIES]
  if not names or bad:
    raise argparse.ArgumentTypeError(
        f'expected a comma-separated subset of {",".join(STRATEGIES)}, got '
        f'{text!r}')
  return list(dict.fromkeys(names))


_seeds = _cells.parse_seeds
_budget = _cells.parse_budget


def make_parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawTextHelpFormatter)
  sub = p.add_subparsers(dest='command', required=True)
  r = sub.add_parser('run', help='train every (strategy, seed) cell not yet '
                     'finished, one at a time')
  r.add_argument('--seeds', type=_seeds, default=list(DEFAULT_SEEDS),
                 help='e.g. 0,1,2,3,4 (the default)')
  r.add_argument('--budget', type=_budget, default=DEFAULT_BUDGET,
                 help='env steps per run (default %(default)s)')
  r.add_argument('--dry_run', action='store_true',
                 help='print the commands it would run; run nothing')
  s = sub.add_parser('summary', help='summarise the cells found')
  s.add_argument('--seeds', type=_seeds, default=None,
                 help='default: every seed found')
  s.add_argument('--budget', type=_budget, default=None,
                 help='the study\'s budget (default: the one most finished '
                 'cells ran to)')
  for q in (r, s):
    q.add_argument('--config', default=DEFAULT_CONFIG,
                   help='named MPO config, <file.py>:<name> (default '
                   '%(default)s)')
    q.add_argument('--task_label', help='the task in the tables (default: '
                   'the config\'s env)')
    q.add_argument('--strategies', type=_strategies,
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
  args.config = resolve_config_spec(args.config)
  # The cells run from the repo root: make every path absolute now.
  args.runs_root = os.path.abspath(args.runs_root or os.path.join(
      REPO_ROOT, 'runs', f'dual_study_{name}'))
  args.records_dir = os.path.abspath(args.records_dir or default_records_dir(
      name))
  if args.png:
    args.png = os.path.abspath(args.png)
  with _cells.paths_named('dual_study'):
    if args.command == 'run':
      return run(args)
    _summary(args)
  return 0


if __name__ == '__main__':
  sys.exit(main())
