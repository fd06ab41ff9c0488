"""studies/dual_study.py: the strategies' configs, the cell plan and the
summary's figures, on run directories written by hand (no training)."""

import csv
import dataclasses
import json
import os

import pytest

from tandem.agents.mpo.config import DualConfig
from tandem.launch import cli
from tandem.launch import config as config_lib
from tandem.launch import horizons
from tandem.launch import resolve
from tests import REPO_ROOT, load_script

MAKE_RUN = os.path.join(REPO_ROOT, 'configs', 'mpo.py') + ':make_run'
TINY = os.path.join(REPO_ROOT, 'configs', 'mpo.py') + ':tiny'


ds = load_script('studies', 'dual_study')
Refusal = ds.harness.Refusal

# What each strategy must be, written out independently of the module:
# (num_steps, temperature optimizer, solver, temperature_for_weights).
EXPECTED = {
    'adam1': (1, 'adam', 'gradient', 'before_update'),
    'adam10': (10, 'adam', 'gradient', 'before_update'),
    'sgd10_temp': (10, 'sgd', 'gradient', 'before_update'),
    'exact_before': (1, 'adam', 'exact', 'before_update'),
    'exact_after': (1, 'adam', 'exact', 'after_update'),
    'adam1_next': (1, 'adam', 'gradient', 'before_update'),
    'adam1_current_and_next': (1, 'adam', 'gradient', 'before_update'),
    'adam1_acme_init': (1, 'adam', 'gradient', 'before_update'),
    'adam1_cold': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_spi64': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_cosine': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_n40': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_n10': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_lr6e4': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_scale03': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_scale07': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_epsmean01': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_mog': (1, 'adam', 'gradient', 'before_update'),
    'adam1_next_epsmean01_target': (1, 'adam', 'gradient', 'before_update'),
}
# (η, η_penalty) starts of each strategy.
INIT_TEMPERATURES = {s: (10.0, 10.0) for s in EXPECTED} | {
    'adam1_cold': (0.03, 10.0)}
# (MPOConfig.estep_states, MPOConfig.init) of each strategy.
OTHER = {s: ('current', 'tandem') for s in EXPECTED} | {
    'adam1_next': ('next', 'tandem'),
    'adam1_next_spi64': ('next', 'tandem'),
    'adam1_next_cosine': ('next', 'tandem'),
    'adam1_next_n40': ('next', 'tandem'),
    'adam1_next_n10': ('next', 'tandem'),
    'adam1_next_lr6e4': ('next', 'tandem'),
    'adam1_next_scale03': ('next', 'tandem'),
    'adam1_next_scale07': ('next', 'tandem'),
    'adam1_next_epsmean01': ('next', 'tandem'),
    'adam1_next_mog': ('next', 'tandem'),
    'adam1_next_epsmean01_target': ('next', 'tandem'),
    'adam1_current_and_next': ('current_and_next', 'tandem'),
    'adam1_acme_init': ('current', 'acme')}
# TrainConfig.samples_per_insert of each strategy on make_run (48).
SAMPLES_PER_INSERT = {s: 48.0 for s in EXPECTED} | {'adam1_next_spi64': 64.0}
# (schedule, final_fraction) of both network optimizers and the schedule
# horizon of each strategy.
SCHEDULES = {s: ('constant', 1.0, 1_000_000) for s in EXPECTED} | {
    'adam1_next_cosine': ('cosine', 0.1, 18_750)}
# MPOConfig.num_samples of each strategy.
NUM_SAMPLES = {s: 20 for s in EXPECTED} | {'adam1_next_n40': 40,
                                           'adam1_next_n10': 10}
# Both network learning rates of each strategy.
LEARNING_RATES = {s: 3e-4 for s in EXPECTED} | {'adam1_next_lr6e4': 6e-4}
# MPOConfig.policy_init_scale of each strategy.
INIT_SCALES = {s: 0.5 for s in EXPECTED} | {'adam1_next_scale03': 0.3,
                                            'adam1_next_scale07': 0.7}
# MPOConfig.epsilon_mean of each strategy.
EPSILON_MEANS = {s: 0.0025 for s in EXPECTED} | {
    'adam1_next_epsmean01': 0.01, 'adam1_next_epsmean01_target': 0.01}
# (MPOConfig.critic_type, mog_num_value_samples) of each strategy.
CRITICS = {s: ('scalar', 128) for s in EXPECTED} | {
    'adam1_next_mog': ('mog', 16)}
# MPOConfig.acting_policy of each strategy.
ACTING = {s: 'online' for s in EXPECTED} | {
    'adam1_next_epsmean01_target': 'target'}


# ------------------------------------------------------------- strategies


def test_the_strategies_exist_and_run_defaults_to_the_five_dual_ones():
  assert set(ds.STRATEGIES) == set(EXPECTED)
  assert ds.REFERENCE == 'adam1'
  # `run` defaults to the grid; the E-step variants are opt-in.
  assert ds.make_parser().parse_args(['run']).strategies == [
      'adam1', 'adam10', 'sgd10_temp', 'exact_before', 'exact_after']


def test_benchmarks_md_lists_every_strategy():
  # The study's section is where a reader learns what a cell name means.
  text = open(os.path.join(REPO_ROOT, 'BENCHMARKS.md')).read()
  start = text.index('## Dual strategies: the learning study')
  section = text[start:text.index('- Cells are', start)]
  missing = [s for s in ds.STRATEGIES if f'`{s}`' not in section]
  assert not missing, missing


@pytest.mark.parametrize('strategy', sorted(EXPECTED))
def test_overrides_give_the_strategy_on_make_run(strategy):
  base = resolve.load_named_config(MAKE_RUN)
  cfg = config_lib.apply_overrides(base, ds.strategy_overrides(strategy))
  d = cfg.mpo.duals
  steps, t_opt, solver, weights = EXPECTED[strategy]
  assert (d.num_steps, d.temperature_optimizer.name, d.solver,
          d.temperature_for_weights) == (steps, t_opt, solver, weights)
  # Adam on the alphas and the same dual learning rates everywhere, so only
  # the strategy differs between cells.
  assert d.alpha_optimizer.name == 'adam'
  assert d.temperature_optimizer.learning_rate == 0.01
  assert d.alpha_optimizer.learning_rate == 0.01
  assert (cfg.mpo.estep_states, cfg.mpo.init) == OTHER[strategy]
  assert (d.init_temperature, d.penalty_temperature_start) == (
      INIT_TEMPERATURES[strategy])
  kind, final, horizon = SCHEDULES[strategy]
  for opt in (cfg.mpo.policy_optimizer, cfg.mpo.critic_optimizer):
    assert (opt.schedule, opt.final_fraction, opt.learning_rate) == (
        kind, final, LEARNING_RATES[strategy])
  assert cfg.mpo.schedule_horizon == horizon
  assert cfg.mpo.num_samples == NUM_SAMPLES[strategy]
  assert cfg.mpo.policy_init_scale == INIT_SCALES[strategy]
  assert cfg.mpo.epsilon_mean == EPSILON_MEANS[strategy]
  assert (cfg.mpo.critic_type, cfg.mpo.mog_num_value_samples) == (
      CRITICS[strategy])
  assert cfg.mpo.acting_policy == ACTING[strategy]
  # Nothing outside the duals, the E-step's states, the initialisers, the
  # network optimizers, the sample count and the initial stddev moves.
  varied = {'duals': None, 'estep_states': None, 'init': None,
            'policy_optimizer': None, 'critic_optimizer': None,
            'schedule_horizon': None, 'num_samples': None,
            'policy_init_scale': None, 'epsilon_mean': None,
            'critic_type': None, 'mog_num_value_samples': None,
            'acting_policy': None}
  assert config_lib.to_dict(cfg)['mpo'] | varied == (
      config_lib.to_dict(base)['mpo'] | varied)
  # Outside `mpo` only the replay ratio may move, and only where stated.
  assert cfg.samples_per_insert == SAMPLES_PER_INSERT[strategy]
  outside = {'mpo': None, 'samples_per_insert': None}
  assert config_lib.to_dict(cfg) | outside == (
      config_lib.to_dict(base) | outside)
  reference = config_lib.apply_overrides(base,
                                         ds.strategy_overrides('adam1'))
  assert (config_lib.to_dict(cfg)['mpo'] !=
          config_lib.to_dict(reference)['mpo']) == (strategy != 'adam1')


def test_adam1_cold_differs_from_adam1_only_in_the_temperature_start():
  base = resolve.load_named_config(MAKE_RUN)
  cold = ds.expected_config(base, 'adam1_cold', 0)
  ref = ds.expected_config(base, 'adam1', 0)
  assert cold.mpo.duals.init_temperature == 0.03
  assert cold.mpo == dataclasses.replace(
      ref.mpo, duals=dataclasses.replace(
          ref.mpo.duals, init_temperature=0.03,
          init_penalty_temperature=10.0))


def test_reference_duals_are_todays_default_duals():
  base = resolve.load_named_config(MAKE_RUN)
  cfg = ds.expected_config(base, 'adam1', 0)
  assert cfg.mpo.duals == DualConfig()
  assert cfg.mpo.duals == base.mpo.duals


def test_strategies_are_pairwise_different():
  base = resolve.load_named_config(MAKE_RUN)
  cfgs = [ds.expected_config(base, s, 0) for s in EXPECTED]
  # The whole resolved config, so a new field varied by a strategy counts.
  assert len({repr(sorted(config_lib.leaf_fields(c).items()))
              for c in cfgs}) == len(EXPECTED)


def test_a_pinned_horizon_runs_only_where_the_run_has_that_many_steps(
    tmp_path):
  base = resolve.load_named_config(MAKE_RUN)
  # The pinned horizon is within HORIZON_TOLERANCE of the updates the
  # launcher says make_run's limiter pays for at 100k env steps (the same
  # count its schedule note uses), and not at 50k.
  cosine = ds.expected_config(base, 'adam1_next_cosine', 0)
  paid = horizons.expected_updates(cosine)['mpo']
  assert cosine.env_step_budget == 100_000
  assert abs(ds.COSINE_HORIZON - paid) <= ds.HORIZON_TOLERANCE * paid
  assert ds.COSINE_HORIZON != round(paid)  # so the tolerance is what passes
  assert ds.horizon_mismatch(base, 'adam1_next_cosine', 100_000) is None
  # 101k: 18750 is 1% under the 18937 paid for (the old rule, budget x spi /
  # batch exactly, refused it).
  assert ds.horizon_mismatch(base, 'adam1_next_cosine', 101_000) is None
  assert ds.horizon_mismatch(base, 'adam1_next_cosine', 106_000) is not None
  assert ds.horizon_mismatch(base, 'adam1', 50_000) is None
  why = ds.horizon_mismatch(base, 'adam1_next_cosine', 50_000)
  half = horizons.expected_updates(dataclasses.replace(
      cosine, env_step_budget=50_000))['mpo']
  assert 'adam1_next_cosine' in why and '18750' in why, why
  assert f'{half:.0f}' in why and 'replay_min_size' in why, why
  # Refused before any cell runs, naming the strategy.
  with pytest.raises(Refusal, match='adam1_next_cosine anneals over'):
    ds.main(['run', '--strategies', 'adam1,adam1_next_cosine', '--seeds',
             '0', '--budget', '50000', '--runs_root', str(tmp_path / 'r'),
             '--records_dir', str(tmp_path / 'rec')])
  assert not (tmp_path / 'r').exists()


@pytest.mark.parametrize('strategy', sorted(EXPECTED))
def test_the_cli_resolves_the_start_command(tmp_path, strategy):
  """The command a new cell runs, through the real `tandem train` parser:
  argparse must pass every override through, and the config resolve."""
  command = ds.train_command(MAKE_RUN, str(tmp_path), strategy, 3, 1234)
  assert command[1:4] == ['-m', 'tandem.launch.cli', 'train']
  args, extra = cli.make_parser().parse_known_args(command[3:])
  cfg, run_dir, resume = resolve.resolve_train_config(args, extra)
  assert not resume
  assert run_dir == str(tmp_path / f'{strategy}_s3')
  assert (cfg.seed, cfg.env_step_budget, cfg.name) == (
      3, 1234, f'{strategy}_s3')
  # Exactly the cell the summary expects, name, place and budget aside.
  assert cfg == config_lib.apply_overrides(
      ds.expected_config(resolve.load_named_config(MAKE_RUN), strategy, 3),
      {'name': f'{strategy}_s3', 'runs_root': str(tmp_path),
       'env_step_budget': '1234'})
  steps, t_opt, solver, weights = EXPECTED[strategy]
  assert (cfg.mpo.duals.num_steps, cfg.mpo.duals.temperature_optimizer.name,
          cfg.mpo.duals.solver, cfg.mpo.duals.temperature_for_weights) == (
              steps, t_opt, solver, weights)
  assert ds.harness.config_mismatches(
      config_lib.to_dict(cfg),
      ds.expected_config(resolve.load_named_config(MAKE_RUN), strategy, 3)) == []


# ----------------------------------------------------------- run directories


def _config_json(run_dir, base, strategy, seed, **changes):
  """config.json as `train` writes it for this cell (plus changes)."""
  cfg = config_lib.apply_overrides(
      ds.expected_config(base, strategy, seed),
      {'name': os.path.basename(run_dir),
       'runs_root': os.path.dirname(run_dir), **changes})
  os.makedirs(run_dir, exist_ok=True)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)


def _final_json(run_dir, final_return, budget, env_steps=None):
  with open(os.path.join(run_dir, 'final.json'), 'w') as f:
    json.dump({'budget': budget, 'final_eval_return': final_return,
               'counts': {'env_steps': env_steps or budget + 10,
                          'elapsed_s': 12.5}}, f)


def _evaluator_csv(run_dir, points, final_return, budget):
  """Periodic rows at `points` [(env_steps, return)], then the final row a
  few steps past the budget, as the evaluator writes them."""
  os.makedirs(os.path.join(run_dir, 'logs'), exist_ok=True)
  with open(os.path.join(run_dir, 'logs', 'evaluator.csv'), 'w',
            newline='') as f:
    w = csv.writer(f)
    w.writerow(['env_steps', 'learner_steps', 'elapsed_s', 'eval_return',
                'final'])
    for steps, ret in points:
      w.writerow([steps, steps // 8, steps / 100, ret, 0])
    if final_return is not None:
      w.writerow([budget + 10, budget // 8, budget / 100, final_return, 1])


def _learner_csv(run_dir, rows):
  """rows: [(env_steps, temperature, residual, kl_q_rel)]; strings go in
  as written (blank, nan)."""
  os.makedirs(os.path.join(run_dir, 'logs'), exist_ok=True)
  with open(os.path.join(run_dir, 'logs', 'learner.csv'), 'w',
            newline='') as f:
    w = csv.writer(f)
    w.writerow(['env_steps', 'learner_steps', 'kl_q_rel', 'temperature',
                'temperature_dual_residual'])
    for steps, temp, residual, kl in rows:
      w.writerow([steps, steps // 8, kl, temp, residual])


# --------------------------------------------------------------- planning


@pytest.fixture(scope='module')
def tiny():
  return resolve.load_named_config(TINY)


def test_plan_starts_a_new_cell(tmp_path, tiny):
  action, command, _ = ds.cell_plan(str(tmp_path), TINY, tiny, 'adam10', 2,
                                    500)
  assert action == 'start'
  assert command == ds.train_command(TINY, str(tmp_path), 'adam10', 2, 500)
  assert '--mpo.duals.num_steps=10' in command and '--seed=2' in command


def test_plan_skips_a_finished_cell(tmp_path, tiny):
  run_dir = str(tmp_path / 'exact_after_s1')
  _config_json(run_dir, tiny, 'exact_after', 1)
  _final_json(run_dir, 100.0, 500)
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny,
                                       'exact_after', 1, 500)
  assert (action, command, note) == ('skip', None, 'finished')
  # Another budget is still skipped (never redone silently) but said.
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny,
                                       'exact_after', 1, 800)
  assert action == 'skip' and command is None and 'budget 500' in note


def test_plan_resumes_an_interrupted_cell(tmp_path, tiny):
  run_dir = str(tmp_path / 'sgd10_temp_s0')
  _config_json(run_dir, tiny, 'sgd10_temp', 0,
               env_step_budget='300')  # a resume may change the budget
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny,
                                       'sgd10_temp', 0, 500)
  assert action == 'resume' and 'interrupted' in note
  assert command[3:] == ['train', '--resume', run_dir,
                         '--env_step_budget=500']


def test_plan_refuses_a_cell_holding_another_strategy(tmp_path, tiny):
  run_dir = str(tmp_path / 'exact_before_s0')
  _config_json(run_dir, tiny, 'exact_after', 0)  # the wrong weights
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny,
                                       'exact_before', 0, 500)
  assert action == 'refuse' and command is None
  assert 'mpo.duals.temperature_for_weights' in note
  # Finished with the wrong config: skipped, flagged.
  _final_json(run_dir, 10.0, 500)
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny,
                                       'exact_before', 0, 500)
  assert action == 'skip' and 'NOT this strategy' in note


def test_plan_refuses_a_cell_at_another_replay_ratio(tmp_path):
  # samples_per_insert may change on resume, but it is what
  # adam1_next_spi64 varies: a run of adam1_next is not that cell.
  base = resolve.load_named_config(MAKE_RUN)
  run_dir = str(tmp_path / 'adam1_next_spi64_s0')
  _config_json(run_dir, base, 'adam1_next', 0)
  action, command, note = ds.cell_plan(str(tmp_path), MAKE_RUN, base,
                                       'adam1_next_spi64', 0, 500)
  assert action == 'refuse' and command is None
  assert 'samples_per_insert: got 48.0, expected 64.0' in note
  _config_json(run_dir, base, 'adam1_next_spi64', 0)
  assert ds.cell_plan(str(tmp_path), MAKE_RUN, base, 'adam1_next_spi64', 0,
                      500)[0] == 'resume'


def test_plan_refuses_to_continue_a_run_without_a_readable_config(tmp_path,
                                                                 tiny):
  run_dir = tmp_path / 'adam1_s0'
  run_dir.mkdir()
  (run_dir / 'config.json').write_text('{"torn')
  action, command, note = ds.cell_plan(str(tmp_path), TINY, tiny, 'adam1',
                                       0, 500)
  assert (action, command) == ('refuse', None)
  assert 'no readable config.json' in note


def test_plan_refuses_a_wrong_seed(tmp_path, tiny):
  run_dir = str(tmp_path / 'adam1_s4')
  _config_json(run_dir, tiny, 'adam1', 5)
  action, _, note = ds.cell_plan(str(tmp_path), TINY, tiny, 'adam1', 4, 500)
  assert action == 'refuse' and 'seed: got 5, expected 4' in note


def test_dry_run_prints_commands_and_runs_nothing(tmp_path, capsys):
  root = tmp_path / 'study'
  rc = ds.main(['run', '--dry_run', '--config', TINY, '--runs_root',
                str(root), '--strategies', 'adam1,exact_after', '--seeds',
                '0,1', '--budget', '500', '--records_dir',
                str(tmp_path / 'records')])
  out = capsys.readouterr().out
  assert rc == 0 and not root.exists()
  assert out.count(': start (new)') == 4
  assert '--name exact_after_s1 --seed=1 --env_step_budget=500' in out
  assert '--mpo.duals.solver=exact' in out


# ---------------------------------------------------------------- summary

BUDGET = 1000
# strategy -> seed -> (periodic eval points, final return)
CURVES = {
    'adam1': {
        0: ([(0, 0.0), (500, 100.0), (1000, 200.0)], 200.0),
        1: ([(0, 0.0), (500, 200.0), (1000, 300.0)], 300.0),
        2: ([(0, 0.0), (500, 300.0), (1000, 400.0)], 400.0),
    },
    'adam10': {
        0: ([(0, 0.0), (500, 160.0), (1000, 250.0)], 250.0),
        1: ([(0, 0.0), (500, 100.0), (1000, 280.0)], 350.0),
        2: ([(0, 0.0), (500, 50.0), (1000, 100.0)], 100.0),
    },
}
# adam1's median final return is 300, the best: thresholds 150 and 270.


@pytest.fixture
def study(tmp_path, tiny):
  root = tmp_path / 'study'
  for strategy, seeds in CURVES.items():
    for seed, (points, final) in seeds.items():
      run_dir = str(root / f'{strategy}_s{seed}')
      _config_json(run_dir, tiny, strategy, seed)
      _evaluator_csv(run_dir, points, final, BUDGET)
      _final_json(run_dir, final, BUDGET)
      _learner_csv(run_dir, [(100, 10.0, '-0.5', 0.5),
                             (200, 5.0, '1.5', 'nan'),
                             (300, 2.0, '', 1.0)])
  # Finished, with the highest return of all, but adam1's config: never
  # counted, never the best.
  bad = str(root / 'adam10_s3')
  _config_json(bad, tiny, 'adam1', 3)
  _evaluator_csv(bad, [(0, 0.0), (1000, 900.0)], 900.0, BUDGET)
  _final_json(bad, 900.0, BUDGET)
  # Interrupted: listed, not counted.
  part = str(root / 'adam1_s4')
  _config_json(part, tiny, 'adam1', 4)
  _evaluator_csv(part, [(0, 0.0), (500, 800.0)], None, BUDGET)
  return root


def _summary(root, capsys, *extra):
  rc = ds.main(['summary', '--config', TINY, '--runs_root', str(root),
                '--strategies', 'adam1,adam10', '--task_label', 'fake:task',
                '--records_dir', str(root.parent / 'records'), *extra])
  out = capsys.readouterr().out
  return rc, out


def test_summary_figures(study, capsys):
  result = ds.summarise(str(study), TINY, ['adam1', 'adam10'],
                        task='fake:task', quiet=True)
  assert result['budget'] == BUDGET
  assert (result['best'], result['best_median']) == ('adam1', 300.0)
  cells = {ds.harness.cell_name(c['strategy'], c['seed']): c
           for c in result['cells']}
  assert set(cells) == {'adam1_s0', 'adam1_s1', 'adam1_s2', 'adam1_s4',
                        'adam10_s0', 'adam10_s1', 'adam10_s2', 'adam10_s3'}
  a0 = cells['adam1_s0']
  # (500·(0+100)/2 + 500·(100+200)/2) / 1000; the final row, 10 steps past
  # the budget, counts as at the budget and adds nothing.
  assert a0['auc'] == pytest.approx(100.0)
  assert cells['adam10_s1']['auc'] == pytest.approx(
      (500 * 50 + 500 * 190) / 1000)
  # First evaluation at or above 150 (50%) and 270 (90%).
  assert (a0['env_steps_to_50pct'], a0['env_steps_to_90pct']) == (1000, None)
  assert (cells['adam1_s1']['env_steps_to_50pct'],
          cells['adam1_s1']['env_steps_to_90pct']) == (500, 1000)
  # adam10_s1: 280 at 1000 reaches 90%; the final row (1010) is an
  # evaluation too, but the periodic one came first.
  assert cells['adam10_s1']['env_steps_to_90pct'] == 1000
  assert cells['adam10_s2']['env_steps_to_50pct'] is None
  # |residual| over the finite values; kl_q_rel skips nan.
  assert a0['mean_abs_temperature_dual_residual'] == pytest.approx(1.0)
  assert a0['mean_kl_q_rel'] == pytest.approx(0.75)
  assert a0['final_temperature'] == 2.0
  assert a0['temperature'] == [(100, 10.0), (200, 5.0), (300, 2.0)]
  # The config check: the mismatched and the unfinished cells do not count.
  assert cells['adam10_s3']['status'] == 'config mismatch'
  assert any('temperature_optimizer' in p or 'num_steps' in p
             for p in cells['adam10_s3']['problems'])
  assert cells['adam1_s4']['status'] == 'unfinished'
  assert not cells['adam1_s4']['problems']


def test_summary_strategy_stats_and_none_rule(study):
  stats = ds.summarise(str(study), TINY, ['adam1', 'adam10'],
                       quiet=True)['stats']
  a1, a10 = stats['adam1'], stats['adam10']
  assert (a1['counted'], a1['cells']) == (3, 4)
  assert a1['final_return'] == {'median': 300.0, 'min': 200.0, 'max': 400.0,
                                'n': 3}
  assert a1['auc']['median'] == pytest.approx(175.0)
  # adam1 to 50%: 1000, 500, 500 -> 500; to 90%: None, 1000, 500 -> 2 of 3
  # reached, the third counting as never -> median 1000.
  assert a1['env_steps_to_50pct'] == {'median': 500, 'reached': 3, 'n': 3}
  assert a1['env_steps_to_90pct'] == {'median': 1000, 'reached': 2, 'n': 3}
  # adam10 to 90%: only seed 1 of 3 reached it: fewer than half -> None.
  assert a10['env_steps_to_90pct'] == {'median': None, 'reached': 1, 'n': 3}
  # adam10 to 50%: 500, 1000 and never -> 1000 (750 over the two alone).
  assert a10['env_steps_to_50pct'] == {'median': 1000, 'reached': 2, 'n': 3}
  # Paired with adam1, seed by seed: 250-200, 350-300, 100-400.
  p = a10['paired_final_return']
  assert p['seeds'] == [0, 1, 2]
  assert p['differences'] == [50.0, 50.0, -300.0]
  assert (p['median'], p['better'], p['worse'], p['ties']) == (50.0, 2, 1, 0)
  # AUCs: adam1 100, 175, 250; adam10 142.5, 120, 50.
  q = a10['paired_auc']
  assert q['differences'] == pytest.approx([42.5, -55.0, -200.0])
  assert q['median'] == pytest.approx(-55.0)
  assert (q['better'], q['worse']) == (1, 2)
  assert 'paired_final_return' not in a1  # the reference is not paired


def test_another_reference_turns_the_pairing_round(study, capsys):
  stats = ds.summarise(str(study), TINY, ['adam1', 'adam10'], quiet=True,
                       reference='adam10')['stats']
  # adam1 minus adam10, seed by seed: 200-250, 300-350, 400-100.
  assert stats['adam1']['paired_final_return']['differences'] == [
      -50.0, -50.0, 300.0]
  assert 'paired_final_return' not in stats['adam10']
  rc, out = _summary(study, capsys, '--reference', 'adam10')
  assert rc == 0
  assert 'paired Δ final vs adam10 | paired Δ AUC vs adam10 |' in out
  assert 'strategy minus adam10' in out
  assert '| adam1 | 3/4 | ' in out and '| -50.0 (1 better, 2 worse) |' in out
  # A reference outside --strategies leaves the columns empty, not wrong.
  rc, out = _summary(study, capsys, '--reference', 'exact_after')
  assert 'vs exact_after' in out and 'reference |' not in out
  with pytest.raises(SystemExit):
    ds.make_parser().parse_args(['summary', '--reference', 'adam2'])


def test_the_report_holds_tandem_compares_table_of_the_counted_cells(
    study, capsys):
  """The same cells through `tandem compare`'s table: quartiles of the
  finals (adam1 200/300/400, adam10 250/350/100), median env steps to 150
  and 270 (a seed that never got there counting as late), the paired
  difference against the reference, which comes first; no wall-clock
  columns (the curves carry no elapsed time)."""
  rc, out = _summary(study, capsys)
  assert rc == 0
  table = out[out.index('#### As `tandem compare` puts them'):]
  assert ('| group | runs | final return: median [IQR] | env steps to 50% | '
          'env steps to 90% | paired Δ final vs adam1 |') in table
  assert '| adam1 | 3 | 300.0 [250.0, 350.0] | 500 | 1,000 | - |' in table
  assert ('| adam10 | 3 | 250.0 [175.0, 300.0] | 1,000 | - | +50.0 (3 seeds) |'
          in table)
  assert "of 300.0, the best group's median final return" in table
  assert 'wall-clock' not in table.split('\n\n')[1]
  rc, out = _summary(study, capsys, '--reference', 'adam10')
  table = out[out.index('#### As `tandem compare` puts them'):]
  assert table.index('| adam10 | 3 |') < table.index('| adam1 | 3 |')
  assert '| -50.0 (3 seeds) |' in table


def test_summary_files_and_json_line(study, capsys):
  rc, out = _summary(study, capsys)
  assert rc == 0
  line = json.loads(out.strip().splitlines()[-1])
  assert line == {
      'dual_study': {
          'adam1': {'final_return_median': 300.0,
                    'env_steps_to_90pct_median': 1000},
          'adam10': {'final_return_median': 250.0,
                     'env_steps_to_90pct_median': None}},
      'task': 'fake:task', 'seeds': [0, 1, 2]}
  md = (study / 'dual_study.md').read_text()
  assert '| adam10 | 3/4 | 250.0 (100.0–350.0) |' in md
  assert '– (1/3)' in md  # adam10's None median to 90%
  assert 'half or more never did' in md
  assert '+50.0 (2 better, 1 worse)' in md
  assert 'adam10_s3:' in md  # the mismatch, with its reason
  with open(study / 'dual_study.csv', newline='') as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == 8
  row = next(r for r in rows if (r['strategy'], r['seed']) == ('adam1', '0'))
  assert float(row['auc']) == pytest.approx(100.0)
  assert row['env_steps_to_90pct'] == '' and row['status'] == 'counted'
  assert (study / 'dual_study.png').stat().st_size > 1000


def test_summary_flags_a_budget_other_than_the_study(study):
  cells = ds.summarise(str(study), TINY, ['adam1'], budget=2000,
                       quiet=True)['cells']
  finished = [c for c in cells if c['finished']]
  assert finished and all(not c['counted'] for c in finished)
  assert all('budget 1000' in '; '.join(c['problems']) for c in finished)


# ------------------------------------------------------ committed records


def test_the_default_records_dir_is_in_the_repo_per_config():
  assert ds.default_records_dir('walker_stand') == os.path.join(
      REPO_ROOT, 'studies', 'results', 'dual_study_walker_stand')


def test_summary_records_counted_cells_only(study, capsys):
  records = study.parent / 'records'
  _summary(study, capsys)
  # The three counted cells of each strategy; not the mismatched adam10_s3
  # nor the unfinished adam1_s4.
  assert sorted(p.name for p in records.iterdir()) == sorted(
      f'{s}_s{n}.json' for s in ('adam1', 'adam10') for n in (0, 1, 2))
  rec = json.loads((records / 'adam1_s0.json').read_text())
  assert rec['format'] == ds.RECORD_FORMAT
  assert (rec['strategy'], rec['seed']) == ('adam1', 0)
  assert rec['final']['final_eval_return'] == 200.0
  assert rec['curve'][-1] == [BUDGET + 10, 200.0]
  # Deterministic: a second summary leaves the bytes as they were.
  before = (records / 'adam1_s0.json').read_bytes()
  _summary(study, capsys)
  assert (records / 'adam1_s0.json').read_bytes() == before


def test_records_alone_give_the_same_study(study, tmp_path, capsys):
  """A fresh clone has the committed records and no runs/: the summary
  from the records is the summary from the run directories."""
  records = str(study.parent / 'records')
  from_runs = ds.summarise(str(study), TINY, ['adam1', 'adam10'],
                           quiet=True, records_dir=records)
  empty = tmp_path / 'fresh_runs'
  from_records = ds.summarise(str(empty), TINY, ['adam1', 'adam10'],
                              quiet=True, records_dir=records)
  assert from_records['json'] == from_runs['json']
  # The same statistics, save the cells that never finished or were not
  # the strategy's (in runs/ only; never recorded).
  def counted_stats(result):
    return {s: {k: v for k, v in st.items() if k != 'cells'}
            for s, st in result['stats'].items()}
  assert counted_stats(from_records) == counted_stats(from_runs)
  assert from_runs['stats']['adam10']['cells'] == 4
  assert from_records['stats']['adam10']['cells'] == 3
  cells = {ds.harness.cell_name(c['strategy'], c['seed']): c
           for c in from_records['cells']}
  assert len(cells) == 6 and all(c['counted'] for c in cells.values())
  assert cells['adam1_s0']['temperature'] == [(100, 10.0), (200, 5.0),
                                              (300, 2.0)]
  assert cells['adam1_s0']['source'].endswith('adam1_s0.json')
  md = (empty / 'dual_study.md').read_text()
  assert '| adam1_s0 | counted, record |' in md


@pytest.mark.parametrize('command', ['summary', 'run'])
def test_an_unwritable_runs_root_is_named_not_a_traceback(tmp_path, command):
  blocker = tmp_path / 'a_file'
  blocker.write_text('kept')
  with pytest.raises(Refusal, match=r'dual_study: .*a_file/study'):
    ds.main([command, '--config', TINY, '--runs_root',
             str(blocker / 'study'), '--strategies', 'adam1', '--seeds', '0',
             '--records_dir', str(tmp_path / 'records')])
  assert blocker.read_text() == 'kept'


def test_an_os_error_naming_no_path_keeps_its_traceback(tmp_path,
                                                      monkeypatch):
  def broken_pipe(_):
    raise BrokenPipeError(32, 'Broken pipe')
  monkeypatch.setattr(ds, 'run', broken_pipe)
  with pytest.raises(BrokenPipeError):
    ds.main(['run', '--config', TINY, '--runs_root', str(tmp_path / 's'),
             '--strategies', 'adam1', '--seeds', '0'])


def test_a_record_wins_over_an_unfinished_run(study, tmp_path, tiny,
                                              capsys):
  records = str(study.parent / 'records')
  _summary(study, capsys)
  fresh = tmp_path / 'fresh_runs'
  part = str(fresh / 'adam1_s0')  # restarted here, recorded elsewhere
  _config_json(part, tiny, 'adam1', 0)
  _evaluator_csv(part, [(0, 0.0)], None, BUDGET)
  (cell,) = ds.summarise(str(fresh), TINY, ['adam1'], [0], quiet=True,
                         records_dir=records)['cells']
  assert cell['source'].endswith('adam1_s0.json') and cell['counted']
  assert cell['final_return'] == 200.0


def test_plan_skips_a_recorded_cell_and_refuses_a_corrupt_record(
    study, tmp_path, tiny, capsys):
  records = study.parent / 'records'
  _summary(study, capsys)
  fresh = str(tmp_path / 'fresh_runs')
  action, command, note = ds.cell_plan(fresh, TINY, tiny, 'adam10', 1,
                                       BUDGET, str(records))
  assert action == 'skip' and command is None
  assert note == f'finished (recorded in {records / "adam10_s1.json"})'
  # An interrupted run directory of a recorded cell is not resumed over it.
  _config_json(os.path.join(fresh, 'adam10_s1'), tiny, 'adam10', 1)
  assert ds.cell_plan(fresh, TINY, tiny, 'adam10', 1, BUDGET,
                      str(records))[0] == 'skip'
  # Another budget: still skipped, said.
  assert f'budget {BUDGET}, not 5' in ds.cell_plan(
      fresh, TINY, tiny, 'adam10', 1, 5, str(records))[2]
  # A torn record: refused, naming the file, never rerun over.
  path = records / 'adam1_s2.json'
  path.write_text(path.read_text()[:100])
  action, command, note = ds.cell_plan(fresh, TINY, tiny, 'adam1', 2,
                                       BUDGET, str(records))
  assert action == 'refuse' and command is None
  assert str(path) in note and 'delete it' in note
  # ... and the summary lists it as unreadable instead of failing.
  cells = ds.summarise(fresh, TINY, ['adam1'], quiet=True,
                       records_dir=str(records))['cells']
  bad = next(c for c in cells if c['seed'] == 2)
  assert bad['status'] == 'unreadable record' and not bad['counted']
  assert str(path) in bad['problems'][0]


def test_a_record_of_another_cell_or_format_is_refused(tmp_path):
  path = tmp_path / 'adam1_s0.json'
  path.write_text(json.dumps({'format': ds.RECORD_FORMAT,
                              'strategy': 'adam10', 'seed': 0}))
  with pytest.raises(ds.harness.RecordError,
                     match="records 'adam10' seed 0"):
    ds.STUDY.read_record(str(path), 'adam1', 0)
  path.write_text(json.dumps({'strategy': 'adam1', 'seed': 0}))
  with pytest.raises(ds.harness.RecordError, match='dual_study.cell/1'):
    ds.STUDY.read_record(str(path), 'adam1', 0)
  path.write_text(json.dumps({'format': ds.RECORD_FORMAT,
                              'strategy': 'adam1', 'seed': 0,
                              'final': {}, 'config': {}, 'curve': [[1]],
                              'learner': {'temperature': []}}))
  with pytest.raises(ds.harness.RecordError, match='malformed'):
    ds.STUDY.read_record(str(path), 'adam1', 0)


def test_a_record_of_another_run_is_kept_not_overwritten(study, capsys):
  records = study.parent / 'records'
  _summary(study, capsys)
  path = records / 'adam1_s1.json'
  rec = json.loads(path.read_text())
  rec['final']['final_eval_return'] = 123.0  # another machine's run
  path.write_text(json.dumps(rec))
  kept = path.read_bytes()
  ds.summarise(str(study), TINY, ['adam1'], quiet=True,
               records_dir=str(records))
  assert path.read_bytes() == kept
  assert 'records another run of this cell' in capsys.readouterr().err
  # Nor does the table silently count the run directory's figures.
  result = ds.summarise(str(study), TINY, ['adam1'], quiet=True,
                        records_dir=str(records))
  (cell,) = [c for c in result['cells'] if c['seed'] == 1]
  assert not cell['counted'] and cell['status'] == 'two runs'
  assert str(path) in cell['problems'][0]
  assert result['stats']['adam1']['counted'] == 2


def _edit_record(study, capsys, name, edit):
  """Summarises the study (recording its counted cells), applies
  `edit(record)` to <name>.json and writes it back; returns its path."""
  _summary(study, capsys)
  path = study.parent / 'records' / f'{name}.json'
  rec = json.loads(path.read_text())
  edit(rec)
  path.write_text(json.dumps(rec))
  return path


def test_a_record_from_before_commits_were_kept_is_brought_up_to_date(    study, capsys):
  records = study.parent / 'records'

  def drop_code(rec):
    assert rec['learner']['code'] == []  # the fixture's runs kept no history
    del rec['learner']['code']           # as records written before today
  path = _edit_record(study, capsys, 'adam1_s0', drop_code)
  _history(str(study / 'adam1_s0'), {'commit': 'c' * 40, 'dirty': False})
  result = ds.summarise(str(study), TINY, ['adam1'], quiet=True,
                        records_dir=str(records))
  assert 'records another run' not in capsys.readouterr().err
  assert json.loads(path.read_text())['learner']['code'] == ['c' * 12]
  assert all(c['counted'] for c in result['cells'] if c['seed'] == 0)


@pytest.mark.parametrize('field, value, counted', [
    # These change learning or what is measured: not the study's cell.
    ('num_actors', '3', False), ('replay_min_size', '128', False),
    ('actor_update_period', '500', False),
    ('eval_period_env_steps', '700', False),
    ('final_eval_episodes', '3', False),
    ('fault_injection_env_fault_every', '50', False),
    # Plumbing: still the cell.
    ('checkpoint_period_s', '99', True), ('learner_log_every', '7', True),
])
def test_a_cell_differing_in_what_changes_learning_is_not_counted(
    tmp_path, tiny, field, value, counted):
  run_dir = str(tmp_path / 'adam1_s0')
  _config_json(run_dir, tiny, 'adam1', 0, **{field: value})
  _evaluator_csv(run_dir, [(0, 0.0), (1000, 10.0)], 10.0, BUDGET)
  _final_json(run_dir, 10.0, BUDGET)
  (cell,) = ds.summarise(str(tmp_path), TINY, ['adam1'], quiet=True)['cells']
  assert cell['counted'] is counted, cell['problems']
  if not counted:
    assert any(p.startswith(field) for p in cell['problems'])


def _history(run_dir, *codes):
  with open(os.path.join(run_dir, 'config_history.jsonl'), 'w') as f:
    for code in codes:
      f.write(json.dumps({'segment': 1, 'code': code}) + '\n')


def test_records_keep_the_code_each_cell_ran_and_tables_say_when_it_differs(
    study, tmp_path, capsys):
  a, b = 'a' * 40, 'b' * 40
  for name in ('adam1_s0', 'adam1_s1', 'adam1_s2', 'adam10_s0', 'adam10_s1'):
    _history(str(study / name), {'commit': a, 'dirty': False})
  # Resumed with other code, from a tree that differed from its commit.
  _history(str(study / 'adam10_s2'), {'commit': a, 'dirty': False},
           {'commit': b, 'dirty': True}, None)
  records = study.parent / 'records'
  result = ds.summarise(str(study), TINY, ['adam1', 'adam10'], quiet=True,
                        records_dir=str(records))
  cells = {ds.harness.cell_name(c['strategy'], c['seed']): c
           for c in result['cells']}
  assert cells['adam1_s0']['code'] == [a[:12]]
  assert cells['adam10_s2']['code'] == [a[:12], b[:12] + '+dirty']
  md = (study / 'dual_study.md').read_text()
  assert 'Code of the counted cells: 2 different versions' in md, md
  assert f'{a[:12]} (5)' in md and f'{a[:12]} → {b[:12]}+dirty (1)' in md
  # The records carry it: a fresh clone's table says the same.
  rec = json.loads((records / 'adam10_s2.json').read_text())
  assert rec['learner']['code'] == [a[:12], b[:12] + '+dirty']
  fresh = ds.summarise(str(tmp_path / 'fresh'), TINY, ['adam1', 'adam10'],
                       quiet=True, records_dir=str(records))
  assert {c['seed']: c['code'] for c in fresh['cells']
          if c['strategy'] == 'adam10'}[2] == [a[:12], b[:12] + '+dirty']
  # A record from before commits were kept: unknown, and said so.
  old = json.loads((records / 'adam1_s0.json').read_text())
  del old['learner']['code']
  (records / 'adam1_s0.json').write_text(json.dumps(old))
  fresh = ds.summarise(str(tmp_path / 'fresh2'), TINY, ['adam1', 'adam10'],
                       quiet=True, records_dir=str(records))
  assert 'not recorded (records from before commits were kept) (1)' in (
      tmp_path / 'fresh2' / 'dual_study.md').read_text()


def test_a_record_whose_learner_part_is_not_an_object_does_not_crash(
    study, capsys):
  records = study.parent / 'records'
  path = _edit_record(study, capsys, 'adam1_s0',
                      lambda rec: rec.update(learner=None))
  result = ds.summarise(str(study), TINY, ['adam1'], quiet=True,
                        records_dir=str(records))
  (cell,) = [c for c in result['cells'] if c['seed'] == 0]
  assert not cell['counted'] and str(path) in cell['problems'][0]
