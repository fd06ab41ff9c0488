"""studies/harness.py, the studies' shared harness, on a toy study and run
directories written by hand (no training): reading runs, committed
records, the grid's plan and runner, statistics and reports."""

import argparse
import csv
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from tandem.launch import config as config_lib
from tandem.launch import resolve
from tests import REPO_ROOT, load_script

hs = load_script('studies', 'harness')

TINY = os.path.join(REPO_ROOT, 'configs', 'mpo.py') + ':tiny'
FORMAT = 'tests.toy_study.cell/1'


# ---------------------------------------------------------------- a toy study


def _read_run(run_dir):
  return {'final': hs.read_json(os.path.join(run_dir, 'final.json')),
          'config': hs.read_json(os.path.join(run_dir, 'config.json')),
          'curve': [(r['env_steps'], r['eval_return'])
                    for r in hs.read_evaluations(run_dir)]}


def _parts_of_record(rec):
  if not isinstance(rec['final'], dict):
    raise TypeError('final must be an object')
  return {'final': rec['final'], 'config': rec['config'],
          'curve': [(int(s), float(r)) for s, r in rec['curve']]}


def _study(**changes):
  fields = dict(name='toy', role='variant', record_format=FORMAT,
                subcommand='train', read_run=_read_run,
                parts_of_record=_parts_of_record)
  return hs.Study(**dict(fields, **changes))


def _write_run(root, variant, seed, returns, finished=True, budget=1000,
               config=None):
  """A run directory: config.json, evaluations every 500 env steps and,
  where finished, final.json."""
  run = root / hs.cell_name(variant, seed)
  (run / 'logs').mkdir(parents=True)
  (run / 'config.json').write_text(json.dumps(
      config or {'seed': seed, 'variant': variant}))
  lines = ['env_steps,elapsed_s,eval_return,final']
  lines += [f'{500 * i},{i},{r},0' for i, r in enumerate(returns)]
  (run / 'logs' / 'evaluator.csv').write_text('\n'.join(lines) + '\n')
  if finished:
    (run / 'final.json').write_text(json.dumps(
        {'budget': budget, 'final_eval_return': returns[-1]}))
  return str(run)


def _record(study, records, variant, seed, returns, budget=1000):
  """Records a finished cell as the study does; returns its path."""
  parts = {'final': {'budget': budget, 'final_eval_return': returns[-1]},
           'config': {'seed': seed},
           'curve': [(500 * i, r) for i, r in enumerate(returns)]}
  path, stored = study.store(str(records), variant, seed, parts, 'elsewhere')
  assert stored
  return path


# ---------------------------------------------------------------- command line


def test_seeds_and_budget_types():
  assert hs.parse_seeds('3,1,3, 0') == [3, 1, 0]
  for bad in ('', 'a', '1,-2', ','):
    with pytest.raises(argparse.ArgumentTypeError):
      hs.parse_seeds(bad)
  assert hs.parse_budget('150000') == 150_000
  for bad in ('0', '-5', '1e5', 'x'):
    with pytest.raises(argparse.ArgumentTypeError, match='integer >= 1'):
      hs.parse_budget(bad)


def test_names_type_keeps_the_order_given_without_repeats():
  parse = hs.names_type(('gail', 'airl'))
  assert parse('airl, gail,airl') == ['airl', 'gail']
  with pytest.raises(argparse.ArgumentTypeError,
                     match="subset of gail,airl, got 'gail,sail'"):
    parse('gail,sail')
  with pytest.raises(argparse.ArgumentTypeError):
    parse(' , ')


def test_an_os_error_naming_a_path_ends_the_script_naming_it():
  with pytest.raises(hs.Refusal, match='^toy: /no/where: No such file'):
    with hs.paths_named('toy'):
      os.listdir('/no/where')
  with pytest.raises(BrokenPipeError):
    with hs.paths_named('toy'):
      raise BrokenPipeError(32, 'Broken pipe')


def test_a_refusal_prints_its_line_and_exits_2(capsys):
  def refuses():
    raise hs.Refusal('toy: --demos x.npz: no such file')

  def has_a_defect():
    raise RuntimeError('bug')

  with pytest.raises(SystemExit) as e:
    hs.run_tool(refuses)
  assert e.value.code == 2
  assert capsys.readouterr().err == 'toy: --demos x.npz: no such file\n'
  with pytest.raises(SystemExit) as e:
    hs.run_tool(lambda: 3)
  assert e.value.code == 3
  with pytest.raises(RuntimeError):  # a defect keeps its traceback
    hs.run_tool(has_a_defect)


# ------------------------------------------------------------- run directories


def test_numbers_are_finite_floats_or_none():
  assert hs.finite(3) == 3.0 and isinstance(hs.finite(3), float)
  assert [hs.finite(v) for v in (True, math.inf, math.nan, '1', None)] == [
      None] * 5
  assert hs.parse_number(' 2.5') == 2.5
  assert [hs.parse_number(v) for v in ('', 'nan', 'inf', None, '1x')] == [
      None] * 5


def test_read_json_is_none_where_absent_or_torn(tmp_path):
  (tmp_path / 'torn.json').write_text('{"a": ')
  (tmp_path / 'ok.json').write_text('{"a": 1}')
  assert hs.read_json(str(tmp_path / 'ok.json')) == {'a': 1}
  assert hs.read_json(str(tmp_path / 'torn.json')) is None
  assert hs.read_json(str(tmp_path / 'absent.json')) is None


def test_find_runs_reads_names_with_underscores_in_study_order(tmp_path):
  for name in ('exact_before_s3', 'exact_after_s10', 'adam1_s0', 'other_s1',
               'adam1_sx', 'adam1_s2'):
    (tmp_path / name).mkdir()
  (tmp_path / 'adam1_s1').write_text('a log, not a run directory')
  found = hs.find_runs(str(tmp_path), ['adam1', 'exact_before',
                                       'exact_after'])
  assert [(v, seed) for v, seed, _ in found] == [
      ('adam1', 0), ('adam1', 2), ('exact_before', 3), ('exact_after', 10)]
  assert found[0][2] == str(tmp_path / 'adam1_s0')
  assert [(v, seed) for v, seed, _ in hs.find_runs(
      str(tmp_path), ['exact_after', 'adam1'], seeds=[2, 10])] == [
          ('exact_after', 10), ('adam1', 2)]
  assert hs.find_runs(str(tmp_path / 'absent'), ['adam1']) == []


def test_read_evaluations_orders_rows_and_skips_torn_ones(tmp_path):
  (tmp_path / 'logs').mkdir()
  (tmp_path / 'logs' / 'evaluator.csv').write_text(
      'env_steps,elapsed_s,eval_return,learned_return,final\n'
      '1000,10,5.0,nan,0\n'
      '0,1,1.0,,0\n'          # a restart appended an earlier count
      '1000,11,6.0,0.5,1\n'   # the final row of the same count: after
      '1500,15,nan,1,0\n'     # no return: skipped
      '2000,2')               # torn: skipped
  rows = hs.read_evaluations(str(tmp_path), ('learned_return', 'final'))
  assert [(r['env_steps'], r['eval_return']) for r in rows] == [
      (0, 1.0), (1000, 5.0), (1000, 6.0)]
  assert [(r['learned_return'], r['final']) for r in rows] == [
      (None, 0.0), (None, 0.0), (0.5, 1.0)]
  assert isinstance(rows[0]['env_steps'], int)
  assert hs.read_evaluations(str(tmp_path / 'absent')) == []


def test_read_learner_columns_keeps_finite_values_only(tmp_path):
  (tmp_path / 'logs').mkdir()
  (tmp_path / 'logs' / 'learner.csv').write_text(
      'env_steps,temperature,kl\n100,10,0.5\n,5,nan\n300,,1.0\n')
  cols = hs.read_learner_columns(str(tmp_path), ('temperature', 'kl'))
  assert cols == {'temperature': [(100, 10.0), (None, 5.0)],
                  'kl': [(100, 0.5), (300, 1.0)]}
  assert hs.read_learner_columns(str(tmp_path / 'absent'), ('kl',)) == {
      'kl': []}


def test_read_code_lists_each_launch_commit_once(tmp_path):
  assert hs.read_code(str(tmp_path)) == []
  a, b = 'a' * 40, 'b' * 40
  lines = [{'code': {'commit': a, 'dirty': False}}, {'code': None},
           {'code': {'commit': b, 'dirty': True}},
           {'code': {'commit': a, 'dirty': False}}]
  (tmp_path / 'config_history.jsonl').write_text(
      '\n'.join(json.dumps(x) for x in lines) + '\nnot json\n[1]\n')
  assert hs.read_code(str(tmp_path)) == [a[:12], b[:12] + '+dirty']


def test_thin_keeps_at_most_the_limit_and_the_last_point():
  points = list(range(10))
  assert hs.thin(points, 10) == points
  assert hs.thin(points, 4) == [0, 3, 6, 9]
  assert hs.thin(points, 3) == [0, 4, 8, 9]


# ------------------------------------------------------- variants as configs


def test_config_specs_are_made_absolute_and_checked():
  assert hs.resolve_config_spec('configs/mpo.py:tiny', 'toy', 'x:y') == TINY
  with pytest.raises(hs.Refusal, match="toy: --config 'mpo.py': expected "
                     ".*e.g. x:y"):
    hs.resolve_config_spec('mpo.py', 'toy', 'x:y')
  with pytest.raises(hs.Refusal, match='^toy: '):
    hs.load_named_config(TINY.replace(':tiny', ':no_such_config'), 'toy')


def test_config_mismatches_name_what_defines_the_run():
  base = resolve.load_named_config(TINY)
  same = config_lib.apply_overrides(base, {
      'name': 'x_s0', 'runs_root': '/elsewhere', 'env_step_budget': '700',
      'checkpoint_period_s': '99'})  # where and how long, and plumbing
  assert hs.config_mismatches(config_lib.to_dict(same), base) == []
  other = config_lib.apply_overrides(base, {'seed': '5',
                                            'mpo.num_samples': '7'})
  wrong = hs.config_mismatches(config_lib.to_dict(other), base)
  assert len(wrong) == 2 and wrong[0].startswith('mpo.num_samples: got 7')
  assert wrong[1] == f'seed: got 5, expected {base.seed}'
  assert hs.config_mismatches(None, base) == ['no readable config.json']
  assert hs.config_mismatches({'mpo': 3}, base)[0].startswith(
      'config.json is not a valid config')


# ---------------------------------------------------------------- records


def test_write_record_is_sorted_and_replaces_whole(tmp_path):
  path = str(tmp_path / 'sub' / 'a_s0.json')
  hs.write_record(path, {'b': 1, 'a': [1, 2]})
  assert open(path).read() == '{\n "a": [\n  1,\n  2\n ],\n "b": 1\n}\n'
  hs.write_record(path, {'c': 2})
  assert json.load(open(path)) == {'c': 2}
  assert os.listdir(tmp_path / 'sub') == ['a_s0.json']  # no temp file left


def test_store_record_never_overwrites_another_run(tmp_path, capsys):
  path = str(tmp_path / 'a_s0.json')
  record = {'curve': [(0, 1.0)], 'final': {'x': 1}}
  assert hs.store_record(path, record, 'toy', '/runs/a_s0')
  written = open(path, 'rb').read()
  assert hs.store_record(path, record, 'toy', '/runs/a_s0')  # the same run
  assert open(path, 'rb').read() == written
  other = dict(record, final={'x': 2})
  assert not hs.store_record(path, other, 'toy', '/other/a_s0')
  assert open(path, 'rb').read() == written
  err = capsys.readouterr().err
  assert f'toy: {path} records another run of this cell than /other/a_s0' in (
      err)
  # Unless the study says the file is this run in an older form.
  assert hs.store_record(path, other, 'toy', '/other/a_s0',
                         older_form=lambda old, new: old['final']['x'] == 1)
  assert json.load(open(path))['final'] == {'x': 2}
  # An unreadable file is replaced.
  open(path, 'w').write('{"torn')
  assert hs.store_record(path, record, 'toy', '/runs/a_s0')
  assert json.load(open(path))['final'] == {'x': 1}


def test_find_records_lists_the_cells_asked_for(tmp_path):
  for name in ('adam1_s0.json', 'adam1_s3.json', 'exact_after_s1.json',
               'other_s0.json', 'adam1_s1.json.tmp7', 'adam1_s2.txt'):
    (tmp_path / name).write_text('{}')
  found = sorted(hs.find_records(str(tmp_path), ['adam1', 'exact_after']))
  assert found == [('adam1', 0, str(tmp_path / 'adam1_s0.json')),
                   ('adam1', 3, str(tmp_path / 'adam1_s3.json')),
                   ('exact_after', 1, str(tmp_path / 'exact_after_s1.json'))]
  assert [s for _, s, _ in hs.find_records(str(tmp_path), ['adam1'],
                                           [3])] == [3]
  assert hs.find_records(None, ['adam1']) == []
  assert hs.find_records(str(tmp_path / 'absent'), ['adam1']) == []


def test_a_record_of_another_cell_or_format_is_refused(tmp_path):
  study = _study()
  path = tmp_path / 'a_s0.json'
  path.write_text(json.dumps({'format': FORMAT, 'variant': 'b', 'seed': 0}))
  with pytest.raises(hs.RecordError, match="records 'b' seed 0, expected "
                     "'a' seed 0"):
    study.read_record(str(path), 'a', 0)
  path.write_text(json.dumps({'variant': 'a', 'seed': 0}))
  with pytest.raises(hs.RecordError, match=f"format '{FORMAT}'"):
    study.read_record(str(path), 'a', 0)
  path.write_text('[not json')
  with pytest.raises(hs.RecordError, match='not a readable JSON record'):
    study.read_record(str(path), 'a', 0)
  path.write_text(json.dumps({'format': FORMAT, 'variant': 'a', 'seed': 0,
                              'final': [], 'config': None, 'curve': []}))
  with pytest.raises(hs.RecordError, match=f'{path}: malformed record'):
    study.read_record(str(path), 'a', 0)


def test_a_record_reads_back_as_the_parts_it_was_made_from(tmp_path):
  study = _study()
  run = _write_run(tmp_path / 'runs', 'a', 2, [0.0, 10.0, 20.0])
  parts = study.read_run(run)
  path, stored = study.store(str(tmp_path / 'rec'), 'a', 2, parts, run)
  assert stored and path == str(tmp_path / 'rec' / 'a_s2.json')
  rec = json.load(open(path))
  assert (rec['format'], rec['variant'], rec['seed']) == (FORMAT, 'a', 2)
  assert study.read_record(path, 'a', 2) == parts
  assert study.command('--resume', run) == [
      sys.executable, '-m', 'tandem.launch.cli', 'train', '--resume', run]


# ------------------------------------------------------------ finding cells


def test_collect_takes_each_cell_from_where_it_finished(tmp_path):
  runs, records = tmp_path / 'runs', tmp_path / 'records'
  study = _study()
  _write_run(runs, 'a', 0, [0.0, 5.0])                  # finished here
  _record(study, records, 'a', 0, [0.0, 1.0])           # ... and elsewhere
  _write_run(runs, 'a', 1, [0.0], finished=False)       # restarted here
  _record(study, records, 'a', 1, [0.0, 7.0])           # finished elsewhere
  _write_run(runs, 'b', 0, [0.0], finished=False)       # only here
  _record(study, records, 'b', 3, [9.0])                # only recorded
  (records / 'b_s4.json').write_text('{"torn')          # unreadable
  torn = _write_run(runs, 'b', 5, [1.0])
  open(os.path.join(torn, 'final.json'), 'w').write('{')
  _record(study, records, 'b', 5, [2.0])                # final.json torn
  read = []
  study = _study(read_run=lambda d: read.append(d) or _read_run(d))
  found = study.collect(str(runs), str(records), ['b', 'a'])
  assert [(f.variant, f.seed, f.recorded) for f in found] == [
      ('b', 0, False), ('b', 3, True), ('b', 4, True), ('b', 5, True),
      ('a', 0, False), ('a', 1, True)]
  by = {(f.variant, f.seed): f for f in found}
  assert by[('a', 0)].parts['final']['final_eval_return'] == 5.0
  assert by[('a', 0)].source == str(runs / 'a_s0')
  assert by[('a', 1)].parts['final']['final_eval_return'] == 7.0
  assert by[('a', 1)].source == str(records / 'a_s1.json')
  assert by[('b', 0)].parts['final'] is None
  assert isinstance(by[('b', 4)].parts, hs.RecordError)
  assert by[('b', 5)].parts['curve'] == [(0, 2.0)]
  # The unfinished run directory beside a record is never read.
  assert str(runs / 'a_s1') not in read
  assert [(f.variant, f.seed) for f in study.collect(
      str(runs), str(records), ['a', 'b'], seeds=[1, 3])] == [
          ('a', 1), ('b', 3)]


# ------------------------------------------------------------------ the plan


def _plan(study, tmp_path, variant='a', seed=0, budget=1000, problems=None):
  return hs.plan_cell(study, str(tmp_path / 'runs'),
                      str(tmp_path / 'records'), variant, seed, budget,
                      ['start', variant], problems or (lambda config: []))


def test_plan_starts_skips_and_resumes(tmp_path):
  study = _study()
  assert _plan(study, tmp_path) == ('start', ['start', 'a'], 'new')
  run = _write_run(tmp_path / 'runs', 'a', 0, [1.0], finished=False)
  assert _plan(study, tmp_path, budget=2000) == (
      'resume', study.command('--resume', run, '--env_step_budget=2000'),
      'interrupted; continuing it')
  _write_run(tmp_path / 'runs', 'b', 0, [1.0])
  assert _plan(study, tmp_path, 'b') == ('skip', None, 'finished')
  # Another budget is still skipped (never redone silently) but said.
  assert _plan(study, tmp_path, 'b', budget=800) == (
      'skip', None, 'finished; budget 1000, not 800; delete the run '
      'directory to redo it')


def test_plan_checks_the_cells_config(tmp_path):
  seen = []

  def problems(config):
    seen.append(config)
    return [] if config and config.get('seed') == 0 else ['seed: wrong']
  study, lenient = _study(), _study(strict=False)
  _write_run(tmp_path / 'runs', 'a', 0, [1.0], finished=False,
             config={'seed': 4})
  action, command, note = _plan(study, tmp_path, problems=problems)
  assert (action, command) == ('refuse', None)
  assert note == ("interrupted, but its config is not this variant's "
                  '(seed: wrong); delete the run directory to redo it')
  action, command, note = _plan(lenient, tmp_path, problems=problems)
  assert action == 'resume' and command[4] == '--resume'
  assert note == 'interrupted; continuing it (warning: seed: wrong)'
  assert seen == [{'seed': 4}, {'seed': 4}]
  _write_run(tmp_path / 'runs', 'b', 0, [1.0], config={'seed': 9})
  assert _plan(study, tmp_path, 'b', problems=problems)[2] == (
      "finished; NOT this variant's config (seed: wrong); delete the run "
      'directory to redo it')
  (tmp_path / 'runs' / 'b_s0' / 'config.json').write_text('{')
  _plan(study, tmp_path, 'b', problems=problems)
  assert seen[-1] is None  # unreadable: the study says what that means


def test_plan_skips_a_recorded_cell_and_refuses_a_bad_record(tmp_path):
  study = _study()
  path = _record(study, tmp_path / 'records', 'a', 0, [1.0])
  assert _plan(study, tmp_path) == (
      'skip', None, f'finished (recorded in {path})')
  # An interrupted run directory of a recorded cell is not resumed over it.
  _write_run(tmp_path / 'runs', 'a', 0, [1.0], finished=False)
  assert _plan(study, tmp_path)[0] == 'skip'
  assert _plan(study, tmp_path, budget=5)[2] == (
      f'finished (recorded in {path}); budget 1000, not 5; delete the '
      'record to redo it')
  assert "NOT this variant's config (x)" in _plan(
      study, tmp_path, problems=lambda config: ['x'])[2]
  open(path, 'w').write('{"torn')
  action, command, note = _plan(study, tmp_path)
  assert (action, command) == ('refuse', None)
  assert note.startswith(f'{path}: not a readable JSON record')
  assert note.endswith('restore it (git checkout) or delete it to redo the '
                       'cell')
  # Without a records directory the record is not looked for.
  assert hs.plan_cell(study, str(tmp_path / 'runs'), None, 'a', 0, 1000,
                      ['start'], lambda c: [])[0] == 'resume'


def test_plan_extends_a_cell_that_finished_below_the_budget_elsewhere(
    tmp_path):
  study = _study()
  shorter = tmp_path / 'shorter'
  source = _write_run(shorter, 'a', 0, [1.0], budget=1000)

  def plan(budget=2000, problems=lambda config: [], variant='a'):
    return hs.plan_cell(study, str(tmp_path / 'runs'), None, variant, 0,
                        budget, ['start'], problems, str(shorter))
  run_dir = str(tmp_path / 'runs' / 'a_s0')
  assert plan() == (
      'extend', study.command('--resume', run_dir, '--env_step_budget=2000'),
      f'finished at a budget of 1000 in {source}; copying it here and '
      'continuing it to 2000')
  # Nothing to extend: refused, never started afresh in its place.
  assert plan(budget=1000) == ('refuse', None, (
      f'{source} ran to a budget of 1000, not below 1000: nothing to '
      'extend'))
  assert plan(variant='b') == ('refuse', None, (
      f'{shorter / "b_s0"}: no finished run to extend; drop --extend_from '
      'to start the cell afresh'))
  _write_run(shorter, 'c', 0, [1.0], finished=False)
  assert plan(variant='c')[0] == 'refuse'
  torn = _write_run(shorter, 'd', 0, [1.0])
  open(os.path.join(torn, 'final.json'), 'w').write('{"budget": "1k"}')
  assert plan(variant='d') == ('refuse', None, (
      f'{torn}/final.json: no readable budget (an integer); cannot tell '
      'what the run ran to'))
  assert plan(problems=lambda config: [f'seed {config["seed"]}']) == (
      'refuse', None, f"{source} is not this variant's run (seed 0)")
  # A program still writing into it (its nodes hold the lock) is waited for.
  from tandem.agents.runtime import supervision
  with open(os.path.join(source, supervision.NODES_LOCK), 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    assert plan() == ('refuse', None, (
        f'{source}: processes of its program are still running; wait for '
        'them to stop'))
  assert plan()[0] == 'extend'
  # A folder in the cell's place that holds no run is not copied over.
  os.makedirs(run_dir)
  assert plan() == ('refuse', None, (
      f'{run_dir} exists but holds no run (config.json); remove it to '
      f'extend the cell from {source}'))
  os.rmdir(run_dir)
  # Once copied, the cell is the runs root's: interrupted (its extension
  # not begun or cut short) until the extension finishes, then skipped.
  hs.copy_run(source, run_dir)
  assert plan() == ('resume', study.command(
      '--resume', run_dir, '--env_step_budget=2000'),
      'interrupted; continuing it')
  (tmp_path / 'runs' / 'a_s0' / 'final.json').write_text(
      json.dumps({'budget': 2000}))
  assert plan() == ('skip', None, 'finished')


def test_copy_run_copies_whole_or_not_at_all(tmp_path):
  source = _write_run(tmp_path / 'shorter', 'a', 0, [1.0, 2.0])
  # One launch so far: its node logs are nodes/segment-1.
  with open(os.path.join(source, 'config_history.jsonl'), 'w') as f:
    f.write(json.dumps({'segment': 1, 'resume': False}) + '\n')
  (tmp_path / 'shorter' / 'a_s0.log').write_text('the first 1000 steps\n')
  (tmp_path / 'runs').mkdir()
  dest = str(tmp_path / 'runs' / 'a_s0')
  # A copy cut short earlier left its partial folder: replaced, not kept.
  os.makedirs(dest + '.copying/stale')
  hs.copy_run(source, dest)
  # final.json goes where the resume past the budget would move it: the
  # copy is a run to continue, not a finished one.
  assert sorted(os.listdir(dest)) == sorted(
      set(os.listdir(source)) - {'final.json'} | {'nodes'})
  with open(os.path.join(dest, 'nodes', 'segment-1', 'final.json')) as f:
    assert json.load(f) == {'budget': 1000, 'final_eval_return': 2.0}
  with open(os.path.join(dest, 'logs', 'evaluator.csv')) as f:
    assert f.read().splitlines()[-1] == '500,1,2.0,0'
  assert not os.path.exists(dest + '.copying')
  assert open(dest + '.log').read() == 'the first 1000 steps\n'
  # Never over a run directory: the extension is that directory's now.
  with pytest.raises(FileExistsError, match='already exists'):
    hs.copy_run(source, dest)
  # The source is only read.
  assert json.loads(open(os.path.join(source, 'final.json')).read()) == {
      'budget': 1000, 'final_eval_return': 2.0}


def test_run_grid_copies_a_cell_before_extending_it(tmp_path, capsys):
  shorter, runs = tmp_path / 'shorter', str(tmp_path / 'runs')
  source = _write_run(shorter, 'a', 0, [1.0])
  (shorter / 'a_s0.log').write_text('shorter run\n')
  run_dir = os.path.join(runs, 'a_s0')
  # The command sees the copy (it fails where the copy is not there yet).
  check = [sys.executable, '-c',
           f'import os, sys; sys.exit(0 if os.path.isfile('
           f'{os.path.join(run_dir, "config.json")!r}) else 7)']
  summaries = []
  rc = hs.run_grid(_study(), [('a', 0)], runs,
                   lambda v, s: ('extend', check, 'extending'),
                   summaries.append, extend_from=str(shorter))
  assert rc == 0 and summaries == [True]
  log = open(run_dir + '.log').read()
  assert log.startswith('shorter run\n') and '=====' in log
  assert os.path.isfile(os.path.join(source, 'final.json'))
  with pytest.raises(ValueError, match='extend_from'):
    hs.run_grid(_study(), [('b', 0)], runs,
                lambda v, s: ('extend', check, 'extending'), summaries.append)
  capsys.readouterr()


# ------------------------------------------------------------------- the run


def _command(run_dir, rc=0, text='trained'):
  """A stand-in for `tandem train`: prints, finishes the run directory
  (final.json) where it exits 0, and exits with rc."""
  script = (f'import json, os, sys; print({text!r}); '
            f'os.makedirs({run_dir!r}, exist_ok=True); '
            f'rc = {rc}; '
            f'rc or json.dump({{"budget": 10, "final_eval_return": 1.0}}, '
            f'open(os.path.join({run_dir!r}, "final.json"), "w")); '
            'sys.exit(rc)')
  return [sys.executable, '-c', script]


def _grid_plan(runs_root, rcs):
  """plan() for run_grid: each cell whose run directory is unfinished
  starts with the exit status rcs gives it; 'x' cells are refused."""
  def plan(variant, seed):
    run_dir = os.path.join(runs_root, hs.cell_name(variant, seed))
    if variant == 'x':
      return 'refuse', None, 'not this cell'
    if os.path.isfile(os.path.join(run_dir, 'final.json')):
      return 'skip', None, 'finished'
    return 'start', _command(run_dir, rcs.get((variant, seed), 0),
                             f'trained {variant}_s{seed}'), 'new'
  return plan


def test_run_grid_runs_each_unfinished_cell_and_summarises(tmp_path,
                                                          capsys):
  runs = str(tmp_path / 'runs')
  _write_run(tmp_path / 'runs', 'a', 1, [1.0])
  summaries = []
  rc = hs.run_grid(_study(), [('a', 0), ('a', 1), ('b', 0), ('x', 0),
                              ('b', 1)],
                   runs, _grid_plan(runs, {('b', 0): 3}), summaries.append)
  out, err = capsys.readouterr()
  assert rc == 1
  assert '[2/5] a_s1: skip (finished)' in out
  assert 'trained a_s0' in out and 'trained b_s1' in out
  assert '--- summary after a_s0 ---' in out
  assert '--- summary after b_s1 ---' in out and '--- summary ---' not in out
  assert summaries == [False, False, True]  # after a_s0, b_s0, b_s1
  assert 'toy: b_s0 exited with status 3' in err
  assert 'toy: x_s0: not this cell' in err
  assert 'cells not finished: b_s0, x_s0' in err
  log = open(os.path.join(runs, 'a_s0.log')).read()
  assert log.startswith('\n===== ') and 'trained a_s0\n' in log
  assert os.path.isfile(os.path.join(runs, 'a_s0', 'final.json'))
  # Run again: the failed cell runs again, the finished ones are skipped,
  # and the summary of where the grid stands comes once, at the end.
  summaries.clear()
  rc = hs.run_grid(_study(), [('b', 0), ('a', 0)], runs,
                   _grid_plan(runs, {}), summaries.append)
  out = capsys.readouterr().out
  assert rc == 0 and summaries == [False, True]
  assert out.count('--- summary') == 2 and out.endswith(
      '\n--- summary ---\n')
  assert open(os.path.join(runs, 'b_s0.log')).read().count('=====') == 2


def test_run_grid_stops_at_an_interrupted_cell(tmp_path, capsys):
  runs = str(tmp_path / 'runs')
  summaries = []
  rc = hs.run_grid(_study(), [('a', 0), ('a', 1)], runs,
                   _grid_plan(runs, {('a', 0): hs.EXIT_INTERRUPTED}),
                   summaries.append)
  out, err = capsys.readouterr()
  assert rc == hs.EXIT_INTERRUPTED and summaries == []
  assert 'a_s1' not in out
  assert 'a_s0 interrupted; rerun the same command to continue it' in err


def test_a_dry_run_prints_the_plan_and_runs_nothing(tmp_path, capsys):
  runs = str(tmp_path / 'runs')
  summaries = []
  assert hs.run_grid(_study(), [('a', 0), ('x', 1)], runs,
                     _grid_plan(runs, {}), summaries.append,
                     dry_run=True) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == '[1/2] a_s0: start (new)'
  assert lines[1].startswith(f'  cd {REPO_ROOT} && {sys.executable} -c ')
  assert lines[2] == f'  log: {runs}/a_s0.log'
  assert lines[3] == '[2/2] x_s1: refuse (not this cell)'
  assert len(lines) == 4 and summaries == [] and not os.path.exists(runs)


# ---------------------------------------------------------------- statistics


def test_median_reached_counts_a_seed_that_never_reached_as_never():
  # The env steps by which half the seeds had reached the threshold.
  assert hs.median_reached([100, 300]) == 200
  assert hs.median_reached([100, 300, None]) == 300
  assert hs.median_reached([100, 200, 300, None]) == 250
  # Half or more never reached it: no median.
  assert hs.median_reached([100, None]) is None
  assert hs.median_reached([100, 300, None, None]) is None
  assert hs.median_reached([100, None, None]) is None
  assert hs.median_reached([]) is None


def test_spread_is_over_the_values_that_exist():
  assert hs.spread([3.0, None, 1.0, 2.0]) == {'median': 2.0, 'min': 1.0,
                                              'max': 3.0, 'n': 3}
  assert hs.spread([None]) == {'median': None, 'min': None, 'max': None,
                               'n': 0}


def test_auc_and_steps_edge_cases():
  assert hs.area_under_curve([], 100) is None
  assert hs.area_under_curve([(0, 1.0)], 0) is None
  # A constant return's AUC is that return.
  assert hs.area_under_curve([(0, 7.0), (100, 7.0)], 100) == pytest.approx(7)
  assert hs.steps_to([(0, 1.0), (10, 5.0), (20, 9.0)], 5.0) == 10
  assert hs.steps_to([(0, 1.0)], 5.0) is None
  assert hs.steps_to([(0, 1.0)], None) is None
  assert not math.isnan(hs.area_under_curve([(0, 1.0)], 100))
  # Every run spans [0, budget]: a first evaluation after step 0 (the
  # untrained policy's) holds from 0, so a late first point loses no area;
  # an evaluation past the budget counts as at the budget.
  assert hs.area_under_curve([(500, 80.0), (1000, 80.0)], 1000) == (
      pytest.approx(80.0))
  assert hs.area_under_curve([(200, 0.0), (1000, 100.0)], 1000) == (
      pytest.approx(40.0))
  assert hs.area_under_curve([(0, 0.0), (1000, 100.0), (1010, 0.0)],
                             1000) == pytest.approx(50.0)


def test_first_reaching_takes_a_key():
  points = [{'s': 0, 'r': 1.0}, {'s': 5, 'r': 4.0}, {'s': 9, 'r': 4.5}]
  assert hs.first_reaching(points, 4.0, lambda p: p['r']) == points[1]
  assert hs.first_reaching(points, 5.0, lambda p: p['r']) is None
  assert hs.pct(0.5) == '50pct' and hs.pct(0.9) == '90pct'


def test_paired_uses_only_shared_counted_seeds():
  def cell(seed, value, counted=True):
    return {'seed': seed, 'final_return': value, 'counted': counted}
  ref = [cell(0, 10.0), cell(1, 20.0), cell(2, 30.0, counted=False),
         cell(4, 1.0)]
  mine = [cell(0, 15.0), cell(2, 0.0), cell(3, 99.0), cell(1, 20.0),
          cell(4, 0.0)]
  p = hs.paired(mine, ref, 'final_return')
  assert p['seeds'] == [0, 1, 4] and p['differences'] == [5.0, 0.0, -1.0]
  assert (p['median'], p['better'], p['worse'], p['ties']) == (0.0, 1, 1, 1)


def test_the_budget_and_the_best_variant_come_from_counted_cells():
  assert hs.common_budget([{'budget': 5}, None, {'budget': 7},
                           {'budget': 7}, {}]) == 7
  assert hs.common_budget([None, {}]) is None
  cells = {'a': [{'counted': True, 'r': 1.0}, {'counted': True, 'r': 3.0}],
           'b': [{'counted': False, 'r': 9.0}, {'counted': True, 'r': 2.5}],
           'c': [{'counted': False, 'r': 99.0}]}
  assert hs.best_median(cells, 'r') == ('b', 2.5)
  assert hs.best_median({'c': cells['c']}, 'r') == (None, None)


def test_variant_stats_pair_every_variant_but_the_reference():
  def cell(seed, r, steps, counted=True):
    return {'seed': seed, 'r': r, 'steps': steps, 'counted': counted}
  ref = [cell(0, 1.0, 100), cell(1, 2.0, None)]
  mine = [cell(0, 3.0, None), cell(1, 1.0, None), cell(2, 9.0, 50, False)]
  st = hs.variant_stats(mine, ref, ['r'], ['steps'], ['r'])
  assert (st['cells'], st['counted'], st['seeds']) == (3, 2, [0, 1])
  assert st['r'] == {'median': 2.0, 'min': 1.0, 'max': 3.0, 'n': 2}
  assert st['steps'] == {'median': None, 'reached': 0, 'n': 2}
  assert st['paired_r']['differences'] == [2.0, -1.0]
  st = hs.variant_stats(ref, ref, ['r'], ['steps'], ['r'])
  assert st['steps'] == {'median': None, 'reached': 1, 'n': 2}
  assert 'paired_r' not in st


# ---------------------------------------------------------------- reports


def test_md_table_aligns_and_leaves_empty_cells_empty():
  columns = [('name', 'l', lambda r: r[0]), ('value', 'r', lambda r: r[1])]
  assert hs.md_table(columns, [('a', '1.0'), ('b', '')]) == [
      '| name | value |', '|:---|---:|', '| a | 1.0 |', '| b | |']
  assert hs.md_row(['**median**', '', '3']) == '| **median** | | 3 |'


def test_table_texts():
  assert hs.num(None) == '–' and hs.num(2.345) == '2.3'
  assert hs.num(1234.5, '{:.0f}') == '1234'
  assert hs.range_text({'median': 2.0, 'min': 1.0, 'max': 3.25}) == (
      '2.0 (1.0–3.2)')
  assert hs.range_text({'median': None}) == '–'
  assert hs.reached_text({'median': 750.0, 'reached': 2, 'n': 3}) == (
      '750 (2/3)')
  assert hs.paired_text(None) == 'reference'
  assert hs.paired_text({'seeds': []}) == '–'
  assert hs.paired_text({'seeds': [0, 1, 2], 'median': 0.0, 'better': 1,
                         'worse': 1, 'ties': 1}) == (
                             '+0.0 (1 better, 1 worse, 1 tied)')
  assert hs.paired_text({'seeds': [0], 'median': -5.0, 'better': 0,
                         'worse': 1, 'ties': 0}) == '-5.0 (0 better, 1 worse)'


def test_code_note_says_when_the_counted_cells_ran_different_code():
  assert hs.code_note([{'counted': False, 'code': ['a']}]) == (
      'Code: no counted cell.')
  assert hs.code_note([{'counted': True, 'code': ['a']}] * 2) == (
      'Code of the counted cells: a (2).')
  assert hs.code_note([{'counted': True, 'code': ['a', 'b']},
                       {'counted': True}]) == (
      'Code of the counted cells: 2 different versions, a → b (1); '
      'not recorded (records from before commits were kept) (1).')


def test_write_csv_blanks_what_does_not_exist(tmp_path):
  path = str(tmp_path / 'x.csv')
  hs.write_csv(path, ('a', 'b'), [{'a': 1.5, 'b': None, 'c': 'unused'},
                                  {'a': 0}])
  with open(path, newline='') as f:
    assert list(csv.reader(f)) == [['a', 'b'], ['1.5', ''], ['0', '']]


def test_quartile_curves_end_where_the_shortest_curve_ends():
  import numpy as np
  grid = np.array([0.0, 50.0, 100.0, 150.0])
  curves = [[(0, 0.0), (100, 100.0)], [(0, 10.0), (150, 160.0)],
            [(0, 20.0), (150, 20.0)]]
  x, low, mid, high = hs.quartile_curves(curves, grid)
  # At 150 the first curve has ended: no point there, rather than a
  # "median" of the other two.
  assert list(x) == [0.0, 50.0, 100.0]
  assert list(mid) == [10.0, 50.0, 100.0]
  assert list(low) == [5.0, 35.0, 60.0]
  assert list(high) == [15.0, 55.0, 105.0]
  x, _, mid, _ = hs.quartile_curves(curves[1:], grid)
  assert list(x) == list(grid) and list(mid) == [15.0, 40.0, 65.0, 90.0]


def test_median_curves_with_bands_and_seeds(tmp_path):
  import numpy as np
  plt = hs.pyplot()
  grid = np.linspace(0, 100, 11)
  curves = [[(0, 0.0), (100, 1.0)], [(0, 1.0), (100, 3.0)]]
  fig, (a, b) = plt.subplots(1, 2)
  hs.plot_medians(a, grid, [('x', curves), ('empty', []), ('y', curves)],
                  band=True, lw=2)
  hs.plot_medians(b, grid, [('x', curves)], seeds=True)
  assert [line.get_label() for line in a.get_lines()] == ['x', 'y']
  assert [line.get_color() for line in a.get_lines()] == ['C0', 'C2']
  assert a.get_lines()[0].get_linewidth() == 2
  assert len(a.collections) == 2  # one band per median
  assert len(b.get_lines()) == 3 and not b.collections  # 2 seeds, 1 median
  path = str(tmp_path / 'new' / 'x.png')
  hs.save_figure(fig, path)
  assert open(path, 'rb').read(8) == b'\x89PNG\r\n\x1a\n'
  assert not plt.fignum_exists(fig.number)


# A cell's run that stops on its first SIGINT, saying so, as `tandem` does.
_STOPS_ON_SIGINT = """
import signal, sys, time
def stop(*_):
  print('stopping: checkpointed', flush=True)
  sys.exit(130)
signal.signal(signal.SIGINT, stop)
print('ready', flush=True)
time.sleep(60)
"""

# The harness in a process of its own, running that cell. SIGINT as a
# foreground process has it: a test run started in the background (CI's,
# say) passes its children SIGINT ignored.
_HARNESS = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path.insert(0, sys.argv[1])
import harness
sys.exit(harness.run_cell([sys.executable, '-c', sys.argv[2], *sys.argv[4:]],
                          sys.argv[3], '.', 'toy'))
"""


def test_a_sigint_to_the_harness_alone_stops_the_run_once(tmp_path):
  # `kill -INT <harness>`: the run is not in the signalled group, and gets
  # the SIGINT from the harness, which then waits for its stop.
  log = tmp_path / 'cell.log'
  proc = subprocess.Popen(
      [sys.executable, '-c', _HARNESS, os.path.join(REPO_ROOT, 'studies'),
       _STOPS_ON_SIGINT, str(log)],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert proc.stdout.readline() == 'ready\n'
  proc.send_signal(signal.SIGINT)
  out, err = proc.communicate(timeout=30)
  assert proc.returncode == hs.EXIT_INTERRUPTED
  assert 'toy: interrupted; waiting for the run to stop' in err
  assert out == 'stopping: checkpointed\n'
  text = log.read_text()
  assert text.splitlines().count('stopping: checkpointed') == 1
  assert text.endswith('===== interrupted\n')


# A cell's run that, on SIGINT, leaves a file saying so: with its reader
# gone it cannot print.
# The marker is written under another name and renamed into place, so the
# test that polls for it never reads it half written.
_MARKS_SIGINT = """
import os, signal, sys, time
def stop(*_):
  with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write('stopped')
  os.replace(sys.argv[1] + '.tmp', sys.argv[1])
  sys.exit(130)
signal.signal(signal.SIGINT, stop)
print('ready', flush=True)
time.sleep(60)
sys.exit(0)
"""


@pytest.mark.skipif(not sys.platform.startswith('linux'),
                    reason='prctl(PR_SET_PDEATHSIG) is Linux-only')
def test_a_killed_harness_leaves_no_run_going(tmp_path):
  # SIGKILL cannot be caught: the run hears of it from the kernel, as a
  # SIGINT, and stops as on Ctrl-C rather than running on to its budget.
  marker = tmp_path / 'stopped'
  proc = subprocess.Popen(
      [sys.executable, '-c', _HARNESS, os.path.join(REPO_ROOT, 'studies'),
       _MARKS_SIGINT, str(tmp_path / 'cell.log'), str(marker)],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  assert proc.stdout.readline() == 'ready\n'
  proc.kill()
  proc.communicate(timeout=30)
  deadline = time.monotonic() + 30
  while not marker.exists() and time.monotonic() < deadline:
    time.sleep(0.05)
  assert marker.read_text() == 'stopped'
