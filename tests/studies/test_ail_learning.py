"""studies/ail_learning.py's committed records on hand-written run
directories (no training): a finished cell is recorded, a fresh clone's
summary from the records alone equals the one from the run directories, a
recorded cell is never rerun, and a bad record is refused by name."""

import json
import os

import pytest

from tests import REPO_ROOT, load_script

al = load_script('studies', 'ail_learning')

DEMOS = '/nonexistent/demos.npz'  # the expert mean falls back to 869.36


def _write_run(root, kind, seed, returns, finished=True, budget=3000,
               env='cartpole:swingup', bc_weight=0.0):
  run = root / f'{kind}_s{seed}'
  (run / 'logs').mkdir(parents=True)
  (run / 'config.json').write_text(json.dumps(
      {'seed': seed, 'ail': {'kind': kind, 'bc_weight': bc_weight},
       'env': env, 'runs_root': str(root)}))
  lines = ['env_steps,elapsed_s,eval_return,learned_return,final']
  for i, r in enumerate(returns):
    last = finished and i == len(returns) - 1
    # The first evaluation has no learned return yet (nan in the CSV).
    learned = 'nan' if i == 0 else r / 10
    lines.append(f'{1000 * i},{10.0 * i},{r},{learned},{int(last)}')
  (run / 'logs' / 'evaluator.csv').write_text('\n'.join(lines) + '\n')
  if finished:
    (run / 'final.json').write_text(json.dumps({
        'final_eval_return': returns[-1], 'budget': budget,
        'counts': {'env_steps': 1000 * (len(returns) - 1),
                   'elapsed_s': 10.0 * (len(returns) - 1)}}))
  return run


@pytest.fixture
def study(tmp_path):
  runs = tmp_path / 'runs'
  _write_run(runs, 'gail', 0, [50.0, 500.0, 800.0])
  _write_run(runs, 'gail', 1, [60.0, 300.0, 790.0])
  _write_run(runs, 'airl', 0, [40.0, 100.0], finished=False)
  return runs


def test_summary_records_finished_cells_only(study, capsys):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail', 'airl'], DEMOS, records_dir=str(records))
  assert sorted(p.name for p in records.iterdir()) == ['gail_s0.json',
                                                       'gail_s1.json']
  rec = json.loads((records / 'gail_s0.json').read_text())
  assert rec['format'] == al.RECORD_FORMAT
  assert (rec['kind'], rec['seed']) == ('gail', 0)
  assert rec['final']['final_eval_return'] == 800.0
  assert [p['eval_return'] for p in rec['curve']] == [50.0, 500.0, 800.0]
  assert rec['config']['ail']['kind'] == 'gail'
  assert rec['curve'][0]['learned_return'] is None
  before = (records / 'gail_s0.json').read_bytes()
  capsys.readouterr()
  al.summarise(str(study), ['gail', 'airl'], DEMOS, records_dir=str(records))
  assert (records / 'gail_s0.json').read_bytes() == before
  assert 'another run' not in capsys.readouterr().err


def test_records_alone_give_the_same_summary(study, tmp_path, capsys):
  records = str(study.parent / 'records')
  from_runs = al.summarise(str(study), ['gail'], DEMOS, records_dir=records)
  empty = tmp_path / 'fresh_clone_runs'
  from_records = al.summarise(str(empty), ['gail'], DEMOS,
                              records_dir=records)
  assert from_records == from_runs
  assert from_records['gail.final_return_median'] == 795.0
  assert from_records['gail.max_return_median'] == 795.0
  assert from_records['gail.env_steps_to_50pct_median'] == 1500
  assert '| 0 | 1000 |' in capsys.readouterr().out


def test_finals_and_peaks_are_medians_of_finished_runs_only(study):
  # airl_s0 is unfinished (peak so far 100): no final, and no peak either.
  got = al.summarise(str(study), ['airl'], DEMOS, records_dir=None)
  assert got['airl.finished'] == '0/1'
  assert got['airl.final_return_median'] is None
  assert got['airl.max_return_median'] is None


def test_the_table_marks_recorded_cells(study, tmp_path, capsys):
  records = str(study.parent / 'records')
  al.summarise(str(study), ['gail'], DEMOS, records_dir=records)
  capsys.readouterr()
  al.summarise(str(tmp_path / 'none'), ['gail'], DEMOS, records_dir=records)
  assert '| finished, record |' in capsys.readouterr().out


def test_plan_skips_a_recorded_cell_and_refuses_a_bad_record(study, tmp_path):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail'], DEMOS, records_dir=str(records))
  fresh = tmp_path / 'fresh'
  action, command, note = al.cell_plan(str(fresh), DEMOS, 'gail', 1, 3000,
                                       str(records))
  assert (action, command) == ('skip', None)
  assert note == f'finished (recorded in {records / "gail_s1.json"})'
  # An interrupted run directory of a recorded cell is not resumed over it.
  _write_run(fresh, 'gail', 1, [10.0], finished=False)
  assert al.cell_plan(str(fresh), DEMOS, 'gail', 1, 3000,
                      str(records))[0] == 'skip'
  assert 'not 5000' in al.cell_plan(str(fresh), DEMOS, 'gail', 1, 5000,
                                    str(records))[2]
  # Without a record the cell starts.
  assert al.cell_plan(str(fresh), DEMOS, 'gail', 2, 3000,
                      str(records))[0] == 'start'
  (records / 'gail_s1.json').write_text('{"format": "something else"}')
  action, command, note = al.cell_plan(str(fresh), DEMOS, 'gail', 1, 3000,
                                       str(records))
  assert (action, command) == ('refuse', None)
  assert 'gail_s1.json' in note and al.RECORD_FORMAT in note


def test_a_run_of_another_seed_or_kind_is_continued_with_a_warning(tmp_path):
  runs = tmp_path / 'runs'
  run = _write_run(runs, 'gail', 1, [10.0], finished=False)
  (run / 'config.json').write_text(json.dumps({'seed': 4,
                                               'ail': {'kind': 'airl'}}))
  action, command, note = al.cell_plan(str(runs), DEMOS, 'gail', 1, 3000)
  assert action == 'resume'
  assert command[3:] == ['train-ail', '--resume', str(run),
                         '--env_step_budget=3000']
  assert note == ('interrupted; continuing it (warning: its config has '
                  'seed 4, kind airl)')
  (run / 'config.json').write_text('{"torn')  # cannot tell: no warning
  assert al.cell_plan(str(runs), DEMOS, 'gail', 1, 3000)[2] == (
      'interrupted; continuing it')
  assert al.cell_plan(str(runs), DEMOS, 'airl', 0, 3000) == (
      'start', [al.sys.executable, '-m', 'tandem.launch.cli', 'train-ail',
                '--config', 'configs/ail.py:airl_cartpole', '--demos', DEMOS,
                f'--runs_root={runs}', '--name', 'airl_s0', '--seed=0',
                '--env_step_budget=3000'], 'new')


def test_a_bad_record_is_left_out_of_the_summary_by_name(study, tmp_path,
                                                         capsys):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail'], DEMOS, records_dir=str(records))
  (records / 'gail_s1.json').write_text('not json')
  result = al.summarise(str(tmp_path / 'none'), ['gail'], DEMOS,
                        records_dir=str(records))
  assert result['gail.seeds'] == 1
  assert 'gail_s1.json' in capsys.readouterr().err


def test_a_record_of_another_cell_is_refused(study, tmp_path):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail'], DEMOS, records_dir=str(records))
  os.replace(records / 'gail_s1.json', records / 'gail_s7.json')
  with pytest.raises(al.harness.RecordError,
                     match="seed 1, expected 'gail' seed 7"):
    al.STUDY.read_record(str(records / 'gail_s7.json'), 'gail', 7)


def test_another_runs_record_is_never_overwritten(study, capsys):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail'], DEMOS, records_dir=str(records))
  before = (records / 'gail_s0.json').read_bytes()
  other = study.parent / 'other_runs'
  _write_run(other, 'gail', 0, [50.0, 700.0])
  al.summarise(str(other), ['gail'], DEMOS, records_dir=str(records))
  assert (records / 'gail_s0.json').read_bytes() == before
  assert 'records another run of this cell' in capsys.readouterr().err


def test_each_runs_root_has_its_own_default_records_dir():
  assert al.default_records_dir('/x/runs/ail_learning/') == os.path.join(
      al.REPO_ROOT, 'studies', 'results', 'ail_learning')
  assert al.default_records_dir('runs/ail_airl_bcfloor') == os.path.join(
      al.REPO_ROOT, 'studies', 'results', 'ail_airl_bcfloor')


def test_run_skips_a_cell_recorded_elsewhere(tmp_path, capsys):
  runs = tmp_path / 'my_variant'
  assert al.main(['run', '--kinds', 'gail', '--seeds', '0', '--dry_run',
                  '--runs_root', str(runs)]) == 0
  assert 'gail_s0: start (new)' in capsys.readouterr().out
  records = tmp_path / 'records'
  _write_run(tmp_path / 'elsewhere', 'gail', 0, [50.0, 800.0])
  al.summarise(str(tmp_path / 'elsewhere'), ['gail'], DEMOS,
               records_dir=str(records))
  assert al.main(['run', '--kinds', 'gail', '--seeds', '0', '--dry_run',
                  '--runs_root', str(runs), '--records_dir',
                  str(records)]) == 0
  assert 'gail_s0: skip (finished (recorded in' in capsys.readouterr().out


def test_run_extends_the_cells_of_another_runs_root(tmp_path, capsys):
  shorter = tmp_path / 'shorter'
  _write_run(shorter, 'airl', 0, [50.0, 800.0], budget=3000)
  args = ['run', '--kinds', 'airl', '--seeds', '0,1', '--dry_run',
          '--budget', '5000', '--runs_root', str(tmp_path / 'longer'),
          '--records_dir', '', '--extend_from', str(shorter)]
  assert al.main(args) == 0
  out = capsys.readouterr().out
  assert (f'airl_s0: extend (finished at a budget of 3000 in '
          f'{shorter / "airl_s0"}; copying it here and continuing it to '
          '5000)') in out
  assert (f'--resume {tmp_path / "longer" / "airl_s0"} '
          '--env_step_budget=5000') in out
  assert f'airl_s1: refuse ({shorter / "airl_s1"}: no finished run' in out
  assert not (tmp_path / 'longer').exists()  # a dry run copies nothing
  # The stored config is what continues: overrides would not apply.
  for extra in (['--set', 'ail.bc_weight=0'], ['--config', 'airl_walker'],
                ['--runs_root', str(shorter)]):
    with pytest.raises(SystemExit) as e:
      al.main(args + extra)
    assert e.value.code == 2
    assert '--extend_from' in capsys.readouterr().err
  with pytest.raises(al.harness.Refusal, match='no such folder'):
    al.main(args[:-1] + [str(tmp_path / 'nowhere')])


def test_an_unwritable_runs_root_is_named_not_a_traceback(tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('kept')
  # An expert file that exists (the run checks it first), wherever
  # ../shared is.
  demos = os.path.join(REPO_ROOT, 'tests', 'data',
                       'cartpole_swingup_expert_2ep.npz')
  with pytest.raises(al.harness.Refusal,
                     match=r'ail_learning: .*a_file/study'):
    al.main(['run', '--kinds', 'gail', '--seeds', '0', '--runs_root',
             str(blocker / 'study'), '--records_dir', '', '--demos', demos])
  assert blocker.read_text() == 'kept'


def test_a_record_wins_over_an_unfinished_run(study, tmp_path):
  records = study.parent / 'records'
  al.summarise(str(study), ['gail'], DEMOS, records_dir=str(records))
  fresh = tmp_path / 'fresh_runs'
  _write_run(fresh, 'gail', 0, [50.0], finished=False)  # restarted here
  cells = al.read_cells(str(fresh), ['gail'], 869.36, str(records))
  assert [c['recorded'] for c in cells['gail']] == [True, True]
  assert cells['gail'][0]['final_return'] == 800.0


def test_a_final_return_far_below_the_peak_is_shown_as_not_held(tmp_path,
                                                               capsys):
  runs = tmp_path / 'runs'
  # 95% of the peak 800 is 760: 770 held, 700 did not.
  _write_run(runs, 'airl', 0, [50.0, 800.0, 770.0], bc_weight=1.0)
  _write_run(runs, 'airl', 1, [50.0, 800.0, 700.0], bc_weight=1.0)
  _write_run(runs, 'airl', 2, [50.0, 400.0], finished=False, bc_weight=1.0)
  # Never near the expert (869.36): its final is its peak, yet no success.
  _write_run(runs, 'airl', 3, [50.0, 60.0], bc_weight=1.0)
  got = al.summarise(str(runs), ['airl'], DEMOS, records_dir=None)
  out = capsys.readouterr().out
  assert got['airl.seeds_reaching_90pct_and_holding'] == '1/4'
  assert got['airl.bc_weight'] == 1.0
  assert got['task'] == 'cartpole:swingup'
  held = {s: got['runs'][f'airl_s{s}']['held'] for s in range(4)}
  assert held == {0: True, 1: False, 2: None, 3: True}
  assert '**no**' in out
  assert 'reached 90% and ended within 5% of the peak: 1/4' in out
  assert '### AIRL on cartpole:swingup' in out and 'BC weight 1.0' in out


def test_the_samples_final_return_is_a_column_where_a_run_has_it(tmp_path,
                                                                capsys):
  runs = tmp_path / 'runs'
  _write_run(runs, 'airl', 0, [50.0, 800.0])
  al.summarise(str(runs), ['airl'], DEMOS, records_dir=None)
  assert al.SAMPLED_COLUMN not in capsys.readouterr().out
  run = _write_run(runs, 'airl', 1, [50.0, 700.0])
  final = json.loads((run / 'final.json').read_text())
  (run / 'final.json').write_text(json.dumps(
      dict(final, final_eval_sampled_return=854.04)))
  records = tmp_path / 'records'
  got = al.summarise(str(runs), ['airl'], DEMOS, records_dir=str(records))
  out = capsys.readouterr().out
  header = next(line for line in out.splitlines()
                if line.startswith('| seed'))
  cells = [c.strip() for c in header.split('|')]
  at = cells.index(al.SAMPLED_COLUMN)
  rows = {line.split('|')[1].strip(): [c.strip() for c in line.split('|')]
          for line in out.splitlines() if line.startswith('| ') and
          line.split('|')[1].strip() in ('0', '1')}
  assert (rows['0'][at], rows['1'][at]) == ('–', '854.0')
  # The median row lines up with the header: the finals' median (800, 700)
  # under 'final eval', none under the samples'.
  median = [c.strip() for c in next(
      line for line in out.splitlines() if '**median**' in line).split('|')]
  assert len(median) == len(cells)
  assert median[cells.index('final eval')] == '750.0'
  assert median[at] == ''
  assert got['runs']['airl_s1']['final_sampled_return'] == 854.0
  # Recorded with the run: the record reads back with it.
  again = al.summarise(str(tmp_path / 'gone'), ['airl'], DEMOS,
                       records_dir=str(records))
  assert again['runs']['airl_s1']['final_sampled_return'] == 854.0


def test_runs_of_several_tasks_or_weights_are_listed_not_merged(tmp_path):
  runs = tmp_path / 'runs'
  _write_run(runs, 'airl', 0, [50.0, 800.0], bc_weight=0.0)
  _write_run(runs, 'airl', 1, [50.0, 800.0], bc_weight=0.5,
             env='walker:walk')
  got = al.summarise(str(runs), ['airl'], DEMOS, records_dir=None)
  assert got['task'] == ['cartpole:swingup', 'walker:walk']
  assert got['airl.bc_weight'] == [0.0, 0.5]


def test_run_passes_each_override_to_the_cells_it_starts(tmp_path, capsys):
  rc = al.main(['run', '--kinds', 'airl', '--seeds', '0', '--dry_run',
                '--runs_root', str(tmp_path / 'r'), '--records_dir', '',
                '--set', 'ail.bc_weight=0', '--set', 'ail.gradient_penalty=0'])
  out = capsys.readouterr().out
  assert rc == 0
  assert '--ail.bc_weight=0 --ail.gradient_penalty=0' in out, out
  with pytest.raises(SystemExit) as e:
    al.main(['run', '--kinds', 'airl', '--seeds', '0', '--dry_run',
             '--set', 'bc_weight'])
  assert e.value.code == 2
  assert 'FIELD=VALUE' in capsys.readouterr().err


def test_the_summary_holds_tandem_compares_table_against_the_expert(study,
                                                                     capsys):
  al.summarise(str(study), ['gail', 'airl'], DEMOS, records_dir=None)
  out = capsys.readouterr().out
  section = out[out.index('tandem compare --reference'):]
  # 50% of 869.36: gail_s0 at 1000, gail_s1 at 2000 -> 1,500; 90% (782.4):
  # both at 2000. Finals 800 and 790.
  assert '| gail | 2 | 795.0 [792.5, 797.5] | 1,500 |' in section, section
  assert '| 2,000 |' in section
  # Finished runs only: the unfinished airl cell's last evaluation is no
  # final return.
  assert '| airl |' not in section
  assert "of 869.4, the expert's mean return" in section


def test_the_figure_names_the_runs_task(tmp_path, monkeypatch):
  runs = tmp_path / 'runs'
  _write_run(runs, 'gail', 0, [0.0, 500.0], env='point_mass:easy')
  titles = []
  real = al.harness.save_figure

  def keep_titles(fig, path):
    titles.extend(ax.get_title() for ax in fig.axes if ax.get_title())
    real(fig, path)
  monkeypatch.setattr(al.harness, 'save_figure', keep_titles)
  al.summarise(str(runs), ['gail'], DEMOS, png=str(tmp_path / 'x.png'),
               records_dir=None)
  assert titles == ['GAIL — point_mass:easy']


def test_a_named_config_starts_its_kinds_cells(tmp_path, capsys):
  runs = tmp_path / 'runs'
  assert al.main(['run', '--kinds', 'gail,airl', '--seeds', '0', '--dry_run',
                  '--runs_root', str(runs), '--records_dir', '',
                  '--config', 'gail_point_mass', '--set', 'seed=3']) == 0
  out = capsys.readouterr().out
  assert '--config configs/ail.py:gail_point_mass ' in out
  # The other kind keeps its default; the overrides go to both.
  assert '--config configs/ail.py:airl_cartpole ' in out
  assert out.count('--seed=3') == 2


@pytest.mark.parametrize('configs, error', [
    (['nope'], '--config nope: not a config of configs/ail.py (one of '
               'gail_cartpole'),
    (['gail_point_mass', 'gail_cartpole'],
     '--config gail_cartpole: gail_point_mass is already the gail config'),
])
def test_a_config_that_is_not_one_per_kind_is_refused(tmp_path, capsys,
                                                      configs, error):
  argv = ['run', '--kinds', 'gail', '--seeds', '0', '--dry_run',
          '--runs_root', str(tmp_path)]
  for name in configs:
    argv += ['--config', name]
  with pytest.raises(SystemExit) as e:
    al.main(argv)
  assert e.value.code == 2
  assert error in capsys.readouterr().err


def test_held_by_chance_is_the_evaluations_noise_alone():
  # Episodes return 0 or 100 alike; one 1-episode evaluation, then a
  # 1-episode final: the final holds unless it is 0 after a 100, so 3/4.
  assert al.held_by_chance([0.0, 100.0], 1, 1, 1) == pytest.approx(0.75,
                                                                    abs=0.02)
  # An expert whose episodes all return alike always holds.
  assert al.held_by_chance([869.0, 869.0], 10, 2, 5) == 1.0
  # More evaluations after reaching the expert: more chances of a lucky
  # peak that the final falls 5% below.
  spread = [850.0, 880.0, 930.0, 700.0]
  chances = [al.held_by_chance(spread, n, 2, 5) for n in (0, 3, 30)]
  assert chances[0] == 1.0 and chances[0] > chances[1] > chances[2]


def test_the_summary_gives_each_seeds_chance_of_holding_if_steady(tmp_path,
                                                                 capsys):
  import numpy as np
  demos = tmp_path / 'demos.npz'
  np.savez(demos, episode_returns=np.array([700.0, 900.0, 1000.0, 800.0]))
  runs = tmp_path / 'runs'
  # The expert's mean is 850: 90% is 765. Seed 0 reaches it at the third
  # evaluation (two periodic evaluations from there on), seed 1 never.
  for seed, returns in ((0, [50.0, 500.0, 800.0, 850.0, 810.0]),
                        (1, [50.0, 300.0, 400.0])):
    run = _write_run(runs, 'gail', seed, returns)
    config = json.loads((run / 'config.json').read_text())
    config.update(eval_episodes=2, final_eval_episodes=5)
    (run / 'config.json').write_text(json.dumps(config))
  # Seed 2's config does not say how many episodes it evaluated.
  _write_run(runs, 'gail', 2, [50.0, 800.0, 790.0])
  got = al.summarise(str(runs), ['gail'], str(demos), records_dir=None)
  out = capsys.readouterr().out
  chance = got['runs']['gail_s0']['held_if_steady']
  assert chance == round(al.held_by_chance([700.0, 900.0, 1000.0, 800.0],
                                           2, 2, 5), 3)
  assert 0.0 < chance < 1.0
  assert got['runs']['gail_s1']['held_if_steady'] is None
  assert got['runs']['gail_s2']['held_if_steady'] is None
  assert got['gail.seeds_holding_if_steady'] == f'{chance:.1f}/1'
  assert 'P(held) if steady' in out
  assert f'a policy as steady as the expert: {chance:.1f}/1' in out


def test_a_dip_late_in_the_run_shows_though_the_final_holds(tmp_path, capsys):
  runs = tmp_path / 'runs'
  # Budget 5000, an evaluation every 1000: the last 20% is 4000 on. Both
  # finals hold (800 >= 95% of 820); seed 1 fell to 700 at 4000, seed 0 at
  # 3000, before the window.
  _write_run(runs, 'gail', 0, [50.0, 800.0, 820.0, 700.0, 810.0, 800.0],
             budget=5000)
  _write_run(runs, 'gail', 1, [50.0, 800.0, 820.0, 810.0, 700.0, 800.0],
             budget=5000)
  _write_run(runs, 'gail', 2, [50.0, 800.0], finished=False, budget=5000)
  got = al.summarise(str(runs), ['gail'], DEMOS, records_dir=None)
  out = capsys.readouterr().out
  cells = [got['runs'][f'gail_s{s}'] for s in range(3)]
  assert [c['held'] for c in cells] == [True, True, None]
  assert [c['lowest_late_return'] for c in cells] == [800.0, 700.0, None]
  assert [c['held_late'] for c in cells] == [True, False, None]
  assert got['gail.seeds_reaching_90pct_and_holding'] == '2/3'
  assert got['gail.seeds_reaching_90pct_and_holding_late'] == '1/3'
  assert '700.0 **below 95%**' in out
  assert 'at every evaluation of the last 20% of the budget: 1/3' in out


def test_a_panel_says_whether_its_runs_cloned_the_experts_actions(tmp_path):
  runs = tmp_path / 'runs'
  _write_run(runs, 'airl', 0, [50.0, 800.0], env='walker:walk',
             bc_weight=1.0)
  _write_run(runs, 'airl', 1, [50.0, 700.0], env='walker:walk',
             bc_weight=1.0)
  _write_run(runs, 'gail', 0, [50.0, 800.0], env='walker:walk')
  _write_run(runs, 'gail', 1, [50.0, 700.0], env='walker:walk',
             bc_weight=0.5)
  cells = al.read_cells(str(runs), ['gail', 'airl'], 869.36)
  assert al.panel_title('airl', cells['airl']) == 'AIRL with BC — walker:walk'
  assert al.panel_title('gail', cells['gail'][:1]) == 'GAIL — walker:walk'
  assert al.panel_title('gail', cells['gail']) == (
      'GAIL, BC weight mixed — walker:walk')


def test_records_of_other_folders_join_the_summary(tmp_path):
  first, second = tmp_path / 'first', tmp_path / 'second'
  _write_run(first, 'gail', 0, [50.0, 800.0])
  _write_run(first, 'gail', 1, [50.0, 300.0])
  _write_run(second, 'gail', 2, [50.0, 810.0])
  al.summarise(str(second), ['gail'], DEMOS,
               records_dir=str(tmp_path / 'rec_second'))
  got = al.summarise(str(first), ['gail'], DEMOS, records_dir=None,
                     also_records=[str(tmp_path / 'rec_second')])
  assert sorted(got['runs']) == ['gail_s0', 'gail_s1', 'gail_s2']
  assert got['gail.seeds'] == 3
  assert got['gail.seeds_reaching_90pct'] == '2/3'
  assert got['runs']['gail_s2']['final_return'] == 810.0
  only = al.summarise(str(first), ['gail'], DEMOS, records_dir=None,
                      seeds=[1, 2],
                      also_records=[str(tmp_path / 'rec_second')])
  assert sorted(only['runs']) == ['gail_s1', 'gail_s2']
  assert only['gail.seeds_reaching_90pct'] == '1/2'


def test_a_cell_found_in_two_places_is_refused_naming_both(tmp_path):
  runs = tmp_path / 'runs'
  _write_run(runs, 'gail', 0, [50.0, 800.0])
  records = tmp_path / 'records'
  al.summarise(str(runs), ['gail'], DEMOS, records_dir=str(records))
  with pytest.raises(al.harness.Refusal, match='gail seed 0 is both') as e:
    al.summarise(str(runs), ['gail'], DEMOS, records_dir=None,
                 also_records=[str(records)])
  assert str(runs / 'gail_s0') in str(e.value)
  assert str(records / 'gail_s0.json') in str(e.value)
  with pytest.raises(al.harness.Refusal, match='--also_records'):
    al.main(['summary', '--runs_root', str(runs), '--records_dir', '',
             '--also_records', str(tmp_path / 'missing')])
