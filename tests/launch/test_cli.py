"""`tandem train` rejects bad input before any process starts."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.runtime.rundir import Lock, RunDir
from tandem.configs import mpo as named
from tandem.launch import cli
from tandem.launch import config as config_lib
from tandem.launch import errors
from tandem.launch import horizons
from tandem.launch import notes
from tandem.launch import prepare
from tandem.launch import replay_checks
from tandem.launch import report
from tandem.launch import resolve
from tests import REPO_ROOT
from tests.launch import make_config_stale


def _main(capsys, *argv):
  rc = cli.main(list(argv))
  return rc, capsys.readouterr().err


@pytest.mark.parametrize('override, message', [
    ('--mpo.epsilon=-1', 'MPOConfig.epsilon'),
    ('--mpo.duals.num_steps=0', 'DualConfig.num_steps'),
    ('--mpo.duals.temperature_optimizer.name=lion',
     'DualConfig.temperature_optimizer.name'),
    ('--mpo.duals.solver=newton', 'DualConfig.solver'),
    ('--num_actors=0', 'TrainConfig.num_actors'),
    ('--samples_per_insert=0', 'TrainConfig.samples_per_insert'),
    ('--replay_error_buffer=1', 'TrainConfig.replay_error_buffer'),
    ('--mpo.batch_size=abc', 'mpo.batch_size'),
    ('--mpo.duals.num_step=3', "unknown config field 'mpo.duals.num_step'"),
    ('--env=cartpole:jump', 'cartpole:swingup'),
    ('--env=gym:CartPole-v1', 'Box'),
    ('--env=nonsense', 'env'),
])
def test_bad_config_values_fail_before_launch(capsys, tmp_path, override,
                                              message):
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                  '--runs_root', str(tmp_path), override)
  assert rc == errors.EXIT_BAD_INPUT
  assert message in err
  assert not os.path.exists(tmp_path / 'tiny')  # nothing started or written


def test_unknown_named_config_lists_the_available_ones(capsys, tmp_path):
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:cartpol')
  assert rc == errors.EXIT_BAD_INPUT and 'cartpole' in err and 'tiny' in err
  rc, err = _main(capsys, 'train', '--config', 'configs/nope.py:x')
  assert rc == errors.EXIT_BAD_INPUT and 'no such file' in err


def _fake_run(tmp_path, with_checkpoint=None):
  """A run directory as a previous program would have left it."""
  cfg = config_lib.apply_overrides(named.tiny(), {'runs_root': str(tmp_path)})
  rd = RunDir(str(tmp_path / 'tiny')).make()
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  with open(rd.counter, 'w') as f:
    json.dump({'counts': {'env_steps': 10}, 'elapsed_s': 1.0}, f)
  if with_checkpoint is not None:
    path = checkpointing.numbered_path(rd.learner_checkpoints, 10)
    with open(path, 'wb') as f:
      f.write(with_checkpoint)
  return rd


def test_resume_without_checkpoint_is_refused(capsys, tmp_path):
  rd = _fake_run(tmp_path)
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT and 'no learner checkpoint' in err


def test_resume_with_corrupt_checkpoint_names_the_file(capsys, tmp_path):
  rd = _fake_run(tmp_path, with_checkpoint=b'PK\x03\x04 garbage')
  before = open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT and 'ckpt-000000000010.npz' in err
  assert 'the one before it' not in err  # there is none
  assert open(rd.config).read() == before  # nothing overwritten
  # An older checkpoint of another shape would fail the same way: no hint
  # (and the refused call above released the directory's lock).
  older = checkpointing.numbered_path(rd.learner_checkpoints, 5)
  checkpointing.save_tree(older, {'w': np.zeros(1)})
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT and 'the one before it' not in err, err
  # One that loads: the error says how to resume from it.
  from tandem.launch import mpo as program
  checkpointing.save_tree(older, program.learner_template(named.tiny()))
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT
  assert f'the one before it, {older}, loads' in err, err
  assert os.path.exists(checkpointing.numbered_path(
      rd.learner_checkpoints, 10))  # not moved for the user


def test_resume_with_checkpoint_counts_that_are_not_counts_names_the_file(
    capsys, tmp_path):
  from tandem.launch import mpo as program
  rd = _fake_run(tmp_path)
  path = checkpointing.save_numbered(
      rd.learner_checkpoints, 10, program.learner_template(named.tiny()),
      metadata={'counts': {'env_steps': 'lots'}})
  before = open(rd.counter).read(), open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert path in err and "env_steps='lots'" in err, err
  assert (open(rd.counter).read(), open(rd.config).read()) == before


@pytest.mark.parametrize('damage', [
    b'1,2\x00\x00\x003\n4,5\n',  # the zero-filled stretch of a power cut
    b'1,\xff\xfe\n',               # bytes no Logger writes
])
def test_resume_with_an_unreadable_log_names_it_before_writing(
    capsys, tmp_path, monkeypatch, damage):
  from tandem.launch import mpo as program
  rd = _fake_run(tmp_path)
  checkpointing.save_numbered(
      rd.learner_checkpoints, 10, program.learner_template(named.tiny()),
      metadata={'counts': {'env_steps': 10}})
  os.makedirs(rd.logs, exist_ok=True)
  log = os.path.join(rd.logs, 'evaluator.csv')
  with open(log, 'wb') as f:
    f.write(b'env_steps,x\n' + damage)

  def launched(*_):
    raise AssertionError('the program was launched')
  monkeypatch.setattr(prepare, 'record_config_history', launched)
  before = [open(p, 'rb').read() for p in (rd.config, rd.counter, log)]
  rc, err = _main(capsys, 'train', '--resume', rd.root,
                  '--env_step_budget=9000')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert log in err and 'move it out of' in err, err
  assert [open(p, 'rb').read() for p in (rd.config, rd.counter, log)] == (
      before)


def test_a_torn_last_log_line_is_not_an_unreadable_log(tmp_path):
  from tandem.agents.runtime import resume
  path = tmp_path / 'actor.csv'
  path.write_bytes(b'env_steps,x\n1,2\n3,\xe2\x82')  # cut mid-character
  assert resume.read_log(str(path)) == (['env_steps', 'x'], [['1', '2']])


@pytest.mark.parametrize('left, named_as', [
    ('counter.json', 'counter.json'),
    ('checkpoints/learner/ckpt-000000000010.npz',
     'checkpoints/learner/ckpt-000000000010.npz'),
    ('logs/learner.csv', 'logs/learner.csv'),
])
def test_a_fresh_launch_refuses_a_directory_a_run_left_without_config(
    capsys, tmp_path, left, named_as):
  # A new counter would restart at 0 over counter.json, new rows go under
  # the old header, and new low-step checkpoints be the ones pruned.
  root = tmp_path / 'tiny'
  path = root / left
  os.makedirs(path.parent, exist_ok=True)
  path.write_bytes(b'left by a run')
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                  '--runs_root', str(tmp_path))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert named_as in err and 'no config.json' in err, err
  assert path.read_bytes() == b'left by a run'
  assert not (root / 'config_history.jsonl').exists()


def test_a_resume_with_too_little_budget_to_refill_replay_says_so(tmp_path):
  rd = _fake_run(tmp_path)  # counter.json at 10 env steps
  cfg = named.tiny()        # replay_min_size 64
  near = config_lib.apply_overrides(cfg, {'env_step_budget': '70'})
  note = notes.empty_replay_note(near, rd)
  assert '60 env steps' in note and 'replay_min_size=64' in note, note
  # 65 left: more than replay_min_size, so the learner will sample.
  assert notes.empty_replay_note(
      config_lib.apply_overrides(cfg, {'env_step_budget': '75'}), rd) is None


def test_the_closing_hint_names_drop_replay_only_for_a_replay_load(tmp_path):
  # The hint train() prints after a failed launch; end to end (a real
  # damaged replay checkpoint) in tests/integration/test_local_mp.py (slow).
  from tandem.agents.nodes.replay_node import ReplayCheckpointLoadError
  from tandem.agents.runtime.rundir import capture_errors, read_errors
  cfg = named.tiny()
  rd = RunDir(str(tmp_path / 'run')).make()
  plain = report.failure_resume_command(read_errors(rd), cfg, rd.root)
  assert plain == f'tandem train --resume {rd.root}'
  with pytest.raises(RuntimeError):  # another node's crash
    with capture_errors(rd, 'learner'):
      raise RuntimeError('loss is nan')
  assert report.failure_resume_command(read_errors(rd), cfg, rd.root) == plain
  with pytest.raises(ReplayCheckpointLoadError):  # as the replay node fails
    with capture_errors(rd, 'replay'):
      raise ReplayCheckpointLoadError('did not start while loading ...')
  hint = report.failure_resume_command(read_errors(rd), cfg, rd.root)
  assert hint.startswith(f'{plain} --drop_replay'), hint


def test_a_run_path_reverb_would_glob_is_refused_with_replay_checkpoints(
    capsys, tmp_path):
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                  '--runs_root', str(tmp_path / 'runs[1]'))
  assert rc == errors.EXIT_BAD_INPUT and '--replay_checkpoints=false' in err, err
  assert not os.path.exists(tmp_path / 'runs[1]')  # nothing written


def test_resume_of_a_non_run_directory_is_refused(capsys, tmp_path):
  rc, err = _main(capsys, 'train', '--resume', str(tmp_path))
  assert rc == errors.EXIT_BAD_INPUT and 'config.json' in err


@pytest.mark.parametrize('text', ['[1]', 'null', '{"env": '])
def test_resume_with_a_config_json_that_is_not_a_config_names_it(
    capsys, tmp_path, text):
  (tmp_path / 'config.json').write_text(text)
  rc, err = _main(capsys, 'train', '--resume', str(tmp_path))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'config.json is unreadable or invalid' in err, err
  assert (tmp_path / 'config.json').read_text() == text


def test_a_runs_root_that_cannot_be_created_is_named(capsys, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                  '--runs_root', str(blocker / 'runs'), '--name', 'x')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'cannot be created or locked' in err and '--runs_root' in err, err
  assert blocker.read_text() == 'not a directory'


def test_existing_run_is_not_silently_reused(capsys, tmp_path):
  _fake_run(tmp_path)
  rc, err = _main(capsys, 'train', '--config', 'configs/mpo.py:tiny',
                  '--runs_root', str(tmp_path))
  assert rc == errors.EXIT_BAD_INPUT and '--resume' in err


def test_second_program_on_same_run_directory_is_refused(capsys, tmp_path):
  rd = _fake_run(tmp_path)
  lock = Lock(rd)
  lock.acquire()
  try:
    rc, err = _main(capsys, 'train', '--resume', rd.root)
    assert rc == errors.EXIT_BAD_INPUT and 'in use by another program' in err
  finally:
    lock.release()


def test_help_lists_every_config_field(capsys):
  with pytest.raises(SystemExit):
    cli.main(['train', '--help'])
  out = capsys.readouterr().out
  for path in config_lib.leaf_fields(config_lib.TrainConfig()):
    assert f'--{path}=' in out, path


def test_show_config_prints_the_named_config_with_overrides(capsys,
                                                           tmp_path):
  rc = cli.main(['train', '--config', 'configs/mpo.py:cartpole',
                 '--runs_root', str(tmp_path), '--show_config',
                 '--mpo.duals.num_steps=3'])
  out = capsys.readouterr().out
  assert rc == errors.EXIT_OK
  cfg = config_lib.apply_overrides(
      named.cartpole(), {'runs_root': str(tmp_path),
                         'mpo.duals.num_steps': '3'})
  assert out.rstrip() == config_lib.describe(cfg)
  # The named config's own values, not TrainConfig's defaults.
  assert named.cartpole().mpo.estep_states != (
      config_lib.TrainConfig().mpo.estep_states)
  assert f'--mpo.estep_states={named.cartpole().mpo.estep_states}' in out
  assert '--mpo.duals.num_steps=3' in out
  assert os.listdir(tmp_path) == []  # nothing started or written


def test_show_config_of_a_run_shows_its_config_and_refuses_bad_overrides(
    capsys, tmp_path):
  rd = _fake_run(tmp_path)
  before = open(rd.config).read()
  rc = cli.main(['train', '--resume', rd.root, '--show_config',
                 '--env_step_budget=12345'])
  assert rc == errors.EXIT_OK
  assert '--env_step_budget=12345' in capsys.readouterr().out
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--show_config',
                  '--seed=3')
  assert rc == errors.EXIT_BAD_INPUT and "'seed'" in err, err
  assert open(rd.config).read() == before


def test_an_override_mends_a_stored_config_that_a_newer_check_refuses(
    capsys, tmp_path):
  rd = _fake_run(tmp_path)
  data = make_config_stale(rd.config)
  before = open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--show_config')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'TrainConfig.actor_update_period' in err, err
  assert '--<field>=<value>' in err, err
  rc = cli.main(['train', '--resume', rd.root, '--show_config',
                 '--actor_update_period=100'])
  assert rc == errors.EXIT_OK
  assert '--actor_update_period=100' in capsys.readouterr().out
  # A field a resume may not change is still refused by name, before the
  # stored values are validated together.
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--seed=3')
  assert rc == errors.EXIT_BAD_INPUT and "'seed'" in err, err
  assert open(rd.config).read() == before
  # A stored value that a newer check refuses, in a field a resume may not
  # change: no override can mend it, and the error says so.
  data = json.load(open(rd.config))
  data['mpo']['epsilon_penalty'] = 5.0  # above log(num_samples)
  with open(rd.config, 'w') as f:
    json.dump(data, f)
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--show_config',
                  '--actor_update_period=100')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'MPOConfig.epsilon_penalty' in err, err
  assert 'the code the run was started with' in err, err
  # An override that is itself bad is named as such, not blamed on the file.
  data['mpo']['epsilon_penalty'] = 0.001
  with open(rd.config, 'w') as f:
    json.dump(data, f)
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--show_config',
                  '--actor_update_period=0')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'TrainConfig.actor_update_period: expected an integer >= 1, got 0' \
      in err, err
  assert 'config.json alone fails' in err, err
  assert 'fails a check of this version' not in err, err
  # The wrong command is named before any field is.
  rc, err = _main(capsys, 'train-ail', '--resume', rd.root, '--show_config',
                  '--demos', 'x.npz')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'an MPO config; train it with tandem train' in err, err
  # The launch's history names the change from the stored value.
  cfg = config_lib.from_dict(data, {'actor_update_period': '100'})
  prepare.record_config_history(rd, cfg, resume=True)
  line = json.loads(open(os.path.join(rd.root,
                                      'config_history.jsonl')).read())
  assert line['changed'] == {'actor_update_period': {
      'from': data['env_step_budget'] + 1, 'to': 100}}


@pytest.mark.parametrize('override, field', [
    ('--env=walker:walk', 'env'),
    ('--seed=3', 'seed'),
    ('--mpo.policy_layers=64,64', 'mpo.policy_layers'),
    ('--mpo.schedule_horizon=10', 'mpo.schedule_horizon'),
    ('--mpo.policy_optimizer.learning_rate=0.1',
     'mpo.policy_optimizer.learning_rate'),
])
def test_resume_refuses_overrides_that_change_the_run(capsys, tmp_path,
                                                      override, field):
  rd = _fake_run(tmp_path)
  before = open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root, override)
  assert rc == errors.EXIT_BAD_INPUT and f"'{field}'" in err, err
  assert 'env_step_budget' in err  # says what a resume may change
  assert open(rd.config).read() == before


def test_a_moved_run_resumes_with_the_folder_it_is_in_as_its_runs_root(
    capsys, tmp_path, monkeypatch):
  import shutil
  rd = _fake_run(tmp_path / 'first')
  moved = tmp_path / 'elsewhere'
  moved.mkdir()
  shutil.copytree(rd.root, moved / 'tiny')
  rc = cli.main(['train', '--resume', str(moved / 'tiny'), '--show_config'])
  assert rc == errors.EXIT_OK
  assert f'--runs_root={moved}' in capsys.readouterr().out
  # The history names the move as a change of the resume's own.
  cfg = config_lib.from_dict(json.load(open(rd.config)))
  copied = RunDir(str(moved / 'tiny'))
  prepare.record_config_history(copied, resolve.in_its_folder(
      cfg, copied.root), resume=True)
  line = json.loads(open(os.path.join(copied.root,
                                      'config_history.jsonl')).read())
  assert line['changed'] == {'runs_root': {'from': str(tmp_path / 'first'),
                                           'to': str(moved)}}
  # Resumed where it is, a stored path that leads there is kept as written.
  monkeypatch.chdir(tmp_path)
  relative = config_lib.apply_overrides(cfg, {'runs_root': 'first'})
  assert resolve.in_its_folder(relative, rd.root) is relative
  # A flag cannot move it: refused by name, nothing written.
  before = open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root, '--runs_root',
                  str(moved))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert '--runs_root cannot be given with --resume' in err, err
  assert open(rd.config).read() == before


def test_config_history_records_what_a_resume_changed(tmp_path):
  cfg = config_lib.apply_overrides(named.tiny(), {'runs_root': str(tmp_path)})
  rd = RunDir(str(tmp_path / 'tiny')).make()
  prepare.record_config_history(rd, cfg, resume=False)
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  longer = config_lib.apply_overrides(cfg, {'env_step_budget': '9000',
                                            'num_actors': '3'})
  prepare.record_config_history(rd, longer, resume=True)
  lines = [json.loads(line) for line in
           open(os.path.join(rd.root, 'config_history.jsonl'))]
  assert [line['resume'] for line in lines] == [False, True]
  assert lines[1]['changed'] == {
      'env_step_budget': {'from': 3000, 'to': 9000},
      'num_actors': {'from': 1, 'to': 3}}


def test_segment_numbers_are_never_reused_after_a_torn_history_line(
    tmp_path):
  # A launch's node logs, crash reports and discarded rows live under
  # segment-<k> folders; a reused k would overwrite the earlier launch's.
  cfg = named.tiny()
  rd = RunDir(str(tmp_path / 'tiny')).make()
  assert prepare.record_config_history(rd, cfg, resume=False) == 1
  path = os.path.join(rd.root, 'config_history.jsonl')
  with open(path, 'a') as f:
    f.write('{"time": 17')  # a write cut short: no line end
  assert prepare.record_config_history(rd, cfg, resume=True) == 3
  assert prepare.record_config_history(rd, cfg, resume=True) == 4
  lines = open(path).read().splitlines()
  assert lines[1] == '{"time": 17'
  assert [json.loads(line)['segment'] for line in lines[2:]] == [3, 4]


def test_segment_numbers_stay_above_every_segment_folder_on_disk(tmp_path):
  cfg = named.tiny()
  rd = RunDir(str(tmp_path / 'tiny')).make()
  assert prepare.record_config_history(rd, cfg, resume=False) == 1
  os.makedirs(os.path.join(rd.errors, 'segment-6'))
  assert prepare.record_config_history(rd, cfg, resume=True) == 7
  os.makedirs(rd.replay_checkpoints + '-dropped-segment-9')
  assert prepare.record_config_history(rd, cfg, resume=True) == 10
  os.makedirs(os.path.join(rd.logs, 'discarded', 'segment-12'))
  os.makedirs(rd.segment_nodes(11))
  assert prepare.record_config_history(rd, cfg, resume=True) == 13


def test_config_history_records_the_code_commit(tmp_path):
  rd = RunDir(str(tmp_path / 'tiny')).make()
  prepare.record_config_history(rd, named.tiny(), resume=False)
  line = json.loads(open(os.path.join(rd.root, 'config_history.jsonl')).read())
  # The tests run from a git checkout (CI clones one).
  head = subprocess.run(['git', '-C', os.path.dirname(cli.__file__),
                         'rev-parse', 'HEAD'], capture_output=True,
                        text=True, check=True).stdout.strip()
  assert line['code']['commit'] == head
  assert isinstance(line['code']['dirty'], bool)


@pytest.fixture
def isolated_git(monkeypatch, tmp_path):
  # Neither a checkout around tmp_path nor the caller's git environment
  # (GIT_DIR in a hook, say) may leak into these tests.
  for name in [k for k in os.environ if k.startswith('GIT_')]:
    monkeypatch.delenv(name)
  monkeypatch.setenv('GIT_CEILING_DIRECTORIES', str(tmp_path.parent))


def test_code_version_outside_a_git_checkout_is_none(tmp_path,
                                                     isolated_git):
  assert prepare.code_version(str(tmp_path)) is None


def test_code_version_sees_a_changed_tracked_file(tmp_path, isolated_git):
  def git(*args):
    subprocess.run(['git', '-C', str(tmp_path), '-c', 'user.name=t', '-c',
                    'user.email=t@t', '-c', 'commit.gpgsign=false',
                    '-c', 'core.hooksPath=/dev/null', *args],
                   check=True, capture_output=True)
  git('init', '-q')
  (tmp_path / 'a.py').write_text('x = 1\n')
  git('add', 'a.py')
  git('commit', '-qm', 'a')
  clean = prepare.code_version(str(tmp_path))
  assert len(clean['commit']) == 40 and clean['dirty'] is False
  (tmp_path / 'a.py').write_text('x = 2\n')
  assert prepare.code_version(str(tmp_path)) == {'commit': clean['commit'],
                                              'dirty': True}


@pytest.mark.parametrize('override, field', [
    ('--replay_max_size=5000', 'replay_max_size'),
    ('--samples_per_insert=4', 'samples_per_insert'),
])
def test_resume_changing_a_restored_replay_table_needs_drop_replay(
    capsys, tmp_path, override, field):
  rd = _fake_run(tmp_path)
  # Without a replay checkpoint the buffer is refilled anyway: allowed.
  cfg, _, _ = resolve.resolve_train_config(
      cli.make_parser().parse_args(['train', '--resume', rd.root]),
      [override])
  os.makedirs(os.path.join(rd.replay_checkpoints, '2026-01-01T00:00:00'))
  before = open(rd.config).read()
  rc, err = _main(capsys, 'train', '--resume', rd.root, override)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert field in err and '--drop_replay' in err
  assert open(rd.config).read() == before
  # With --drop_replay the check passes, and the buffer is moved aside,
  # never deleted.
  args = cli.make_parser().parse_args(['train', '--resume', rd.root,
                                       '--drop_replay'])
  resolve.resolve_train_config(args, [override])
  dest = replay_checks.drop_replay(rd, 2)
  assert os.listdir(dest) == ['2026-01-01T00:00:00']
  assert not os.path.exists(rd.replay_checkpoints)


def test_resume_with_a_replay_checkpoint_cut_short_names_the_file(
    capsys, tmp_path, monkeypatch):
  import tensorflow as tf
  rd = _fake_run(tmp_path)
  path = os.path.join(rd.replay_checkpoints, '2026-01-01T00:00:00')
  os.makedirs(path)
  for name in ('tables.tfrecord', 'chunks.tfrecord'):
    with tf.io.TFRecordWriter(os.path.join(path, name)) as w:
      w.write(b'x' * 100)
  open(os.path.join(path, 'DONE'), 'w').close()
  from tandem.launch import mpo as program
  cfg = named.tiny()
  # A learner checkpoint that loads, so the replay check is what refuses.
  checkpointing.save_numbered(rd.learner_checkpoints, 10,
                              program.learner_template(cfg))
  check = replay_checks.check_replay_checkpoint
  check(cfg, rd.root, False)  # sound: passes
  os.truncate(os.path.join(path, 'chunks.tfrecord'), 50)

  def launched(*_):
    raise AssertionError('the program was launched')
  monkeypatch.setattr(prepare, 'record_config_history', launched)
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'chunks.tfrecord: cut short' in err and '--drop_replay' in err, err
  assert os.path.getsize(os.path.join(path, 'chunks.tfrecord')) == 50
  # --drop_replay moves it aside instead: the check does not apply.
  check(cfg, rd.root, True)


def test_a_resume_past_the_budget_keeps_the_earlier_final_json(tmp_path):
  rd = _fake_run(tmp_path)
  assert prepare.archive_final(rd, 2) is None
  with open(rd.final, 'w') as f:
    json.dump({'final_return': 812.5}, f)
  dest = prepare.archive_final(rd, 2)
  assert dest == os.path.join(rd.segment_nodes(1), 'final.json')
  assert not os.path.exists(rd.final)
  assert json.load(open(dest)) == {'final_return': 812.5}


def _fresh_python(code, timeout):
  """Runs `code` in a new interpreter at the repository root, where no JAX
  backend is up yet and JAX_PLATFORMS is unset."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  return subprocess.run([sys.executable, '-c', code], cwd=REPO_ROOT, env=env,
                        capture_output=True, text=True, timeout=timeout)


def test_a_local_mp_launcher_keeps_its_own_jax_on_the_cpu():
  # In a fresh process: once a backend is up, jax_platforms is fixed.
  code = ('import jax\n'
          'from tandem.launch import train\n'
          'train.keep_off_accelerators("local_mt")\n'
          'assert jax.config.jax_platforms in (None, ""), '
          'jax.config.jax_platforms\n'
          'train.keep_off_accelerators("local_mp")\n'
          'assert jax.config.jax_platforms == "cpu"\n'
          'assert {d.platform for d in jax.devices()} == {"cpu"}\n'
          'import os; assert "JAX_PLATFORMS" not in os.environ\n')
  r = _fresh_python(code, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]


def test_importing_the_code_starts_no_jax_backend():
  # The launcher imports a program module (and through it the learner and
  # networks) before keep_off_accelerators runs: one jnp operation at
  # import would start a backend there and claim a GPU's memory in the
  # launcher. In a fresh process, module by module, so the culprit is named.
  code = ('import importlib, pkgutil, sys\n'
          'from jax._src import xla_bridge\n'
          'from tandem import agents, configs, launch\n'
          'from tandem.launch import programs\n'
          'programs.for_command("train"); programs.for_command("train-ail")\n'
          'assert not xla_bridge.backends_are_initialized(), "programs"\n'
          'for pkg in (agents, configs, launch):\n'
          '  for m in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):\n'
          '    importlib.import_module(m.name)\n'
          '    assert not xla_bridge.backends_are_initialized(), m.name\n'
          'print("ok")\n')
  r = _fresh_python(code, timeout=180)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.strip().endswith('ok')


def test_a_schedule_whose_horizon_misses_the_budget_gets_a_note(capsys,
                                                                 tmp_path):
  cfg = config_lib.apply_overrides(named.tiny(), {
      'mpo.policy_optimizer.schedule': 'cosine',
      'mpo.policy_optimizer.final_fraction': '0.1'})
  steps = horizons.expected_updates(cfg)['mpo']
  assert steps == pytest.approx(
      (cfg.env_step_budget - cfg.replay_min_size) * cfg.samples_per_insert /
      cfg.mpo.batch_size)
  assert cfg.mpo.schedule_horizon > 2 * steps
  note = notes.schedule_note(cfg)
  assert 'mpo.policy_optimizer.schedule=cosine' in note, note
  assert (f'{100 * steps / cfg.mpo.schedule_horizon:.0f}% of the way '
          'through it') in note
  flat = config_lib.apply_overrides(
      cfg, {'mpo.policy_optimizer.final_fraction': '1.0'})
  assert notes.schedule_note(flat) is None  # ends where it starts
  short = config_lib.apply_overrides(
      cfg, {'mpo.schedule_horizon': str(int(steps // 4))})
  assert 'reaches its final value' in notes.schedule_note(short)
  fits = config_lib.apply_overrides(
      cfg, {'mpo.schedule_horizon': str(int(steps))})
  assert notes.schedule_note(fits) is None
  assert notes.schedule_note(named.tiny()) is None  # constant rates
  # Printed by a launch, before anything is written.
  rc = cli.main(['train', '--config', 'configs/mpo.py:tiny', '--runs_root',
                 str(tmp_path), '--show_config',
                 '--mpo.policy_optimizer.schedule=cosine',
                 '--mpo.policy_optimizer.final_fraction=0.1'])
  assert rc == errors.EXIT_OK
  assert 'note: mpo.policy_optimizer.schedule=cosine' in (
      capsys.readouterr().err)


def test_a_missing_stack_is_named_before_anything_imports_it(capsys,
                                                             monkeypatch):
  # `pip install .` installs the learner core's dependencies only; a train
  # without Launchpad says what is missing and how to get it (exit 2).
  import importlib.util
  find_spec = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None
                      if name in ('launchpad', 'reverb') else find_spec(name, *a))
  assert cli.main(['train', '--config', 'configs/mpo.py:tiny']) == 2
  err = capsys.readouterr().err
  assert 'needs launchpad, reverb, not installed' in err, err
  assert 'make venv' in err and 'CPython 3.10' in err
  # collect-demos builds the program's learner template: it needs them too.
  assert cli.main(['collect-demos', '--run', '/nonexistent', '--episodes',
                   '1', '--out', '/tmp/x.npz']) == 2
  assert 'needs launchpad, reverb, not installed' in capsys.readouterr().err
  # Printing a config needs none of them.
  assert cli.main(['train', '--config', 'configs/mpo.py:tiny',
                   '--show_config']) == 0
  assert 'not installed' not in capsys.readouterr().err


def test_the_closing_line_puts_the_final_return_at_its_checkpoints_counts():
  # An actor synced 100 env steps after the learner stopped: final.json's
  # `counts` (read after the evaluation) hold them, the evaluated
  # checkpoint and its evaluator.csv row do not.
  final = {'final_eval_return': 851.25,
           'counts': {'env_steps': 100_100, 'learner_steps': 18_560,
                      'elapsed_s': 500.0},
           'checkpoint_counts': {'env_steps': 100_000,
                                 'learner_steps': 18_560, 'elapsed_s': 499.0}}
  text = report.final_summary(final)
  assert 'final evaluation return: 851.2 (env steps 100000, learner ' \
         'steps 18560)' in text, text
  assert 'throughput: 200.2 env steps/s' in text, text  # the counter's
  # final.json of a run finished before checkpoint_counts were recorded.
  del final['checkpoint_counts']
  assert '(env steps 100100, learner steps 18560)' in report.final_summary(final)
  assert 'samples' not in text
  final['final_eval_sampled_return'] = 902.04
  assert report.final_summary(final).endswith(
      "learner steps 18560)\nits policy's samples returned: 902.0")


@pytest.mark.parametrize('planted', [
    '.lock', 'errors', 'logs/evaluator.csv', 'config_history.jsonl'])
def test_a_symbolic_link_in_the_run_directory_is_refused_before_writing(
    capsys, tmp_path, monkeypatch, planted):
  import hashlib
  from tandem.launch import mpo as program
  rd = _fake_run(tmp_path / 'runs')
  checkpointing.save_numbered(
      rd.learner_checkpoints, 10, program.learner_template(named.tiny()),
      metadata={'counts': {'env_steps': 10}})
  outside = tmp_path / 'outside'
  outside.mkdir()
  target = outside / 'precious.txt'
  target.write_text('not Tandem\'s\n')
  link = os.path.join(rd.root, planted)
  os.makedirs(os.path.dirname(link), exist_ok=True)
  if os.path.isdir(link):
    os.rmdir(link)
  os.symlink(outside if planted == 'errors' else target, link)
  digest = lambda: hashlib.sha256(target.read_bytes()).hexdigest()
  before, listing = digest(), sorted(os.listdir(outside))

  def launched(*_):
    raise AssertionError('the program was launched')
  monkeypatch.setattr(prepare, 'record_config_history', launched)
  rc, err = _main(capsys, 'train', '--resume', rd.root,
                  '--env_step_budget=9000')
  assert rc == errors.EXIT_BAD_INPUT, err
  assert link in err and 'symbolic link' in err, err
  assert digest() == before and sorted(os.listdir(outside)) == listing


@pytest.mark.parametrize('source, line, error', [
    ('raise RuntimeError("boom")\n', 1, 'RuntimeError: boom'),
    ('def tiny(:\n', 1, 'SyntaxError'),
    ('import os\n\ndef tiny():\n  raise KeyError("seed")\n', 4,
     "KeyError: 'seed'"),
])
def test_a_config_file_that_fails_is_named_with_its_line(capsys, tmp_path,
                                                         source, line, error):
  path = tmp_path / 'mine.py'
  path.write_text(source)
  rc, err = _main(capsys, 'train', '--config', f'{path}:tiny',
                  '--runs_root', str(tmp_path / 'runs'))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert f'{path}, line {line}' in err and error in err, err
  assert 'Traceback' not in err
  assert not os.path.exists(tmp_path / 'runs')


@pytest.mark.parametrize('text, expected', [
    ('[' * 100_000 + ']' * 100_000, 'config.json is unreadable or invalid'),
    (None, 'NaN is not a valid value'),
])
def test_a_config_json_that_cannot_be_a_config_is_named(capsys, tmp_path,
                                                        text, expected):
  rd = _fake_run(tmp_path)
  if text is None:  # a valid config with one field NaN
    with open(rd.config) as f:
      data = json.load(f)
    data['mpo']['epsilon'] = float('nan')
    text = json.dumps(data)
  with open(rd.config, 'w') as f:
    f.write(text)
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert rd.config in err or 'config.json' in err
  assert expected in err and 'cannot change' not in err, err


def test_a_full_disk_during_the_stop_still_reports_it_and_the_resume(
    tmp_path, capsys, monkeypatch):
  import errno
  from tandem.agents.core import files
  from tandem.agents.runtime import rundir
  from tandem.launch import mpo as program_module
  from tandem.launch import supervise

  def full(*_, **__):
    raise OSError(errno.ENOSPC, 'No space left on device')
  cfg = config_lib.apply_overrides(named.tiny(),
                                   {'runs_root': str(tmp_path)})
  rd = RunDir(str(tmp_path / 'tiny')).make()
  monkeypatch.setattr(files, 'write_json_atomic', full)
  monkeypatch.setattr(files, 'open_to_write', full)
  # A node's crash report cannot be written: its node says so on stderr,
  # leaves no empty report, and the crash itself still escapes.
  with pytest.raises(RuntimeError, match='loss is nan'):
    with rundir.capture_errors(rd, 'learner'):
      raise RuntimeError('loss is nan')
  err = capsys.readouterr().err
  assert 'could not write' in err and 'loss is nan' in err
  assert rundir.read_errors(rd) == {}
  # The launcher's stop report: the warning, then the report and the hint.
  outcome = supervise.Outcome(interrupted=True, failed=False,
                              stop_time=None)
  code = report.conclude(outcome, rd, cfg, program_module.PROGRAM, 1)
  err = capsys.readouterr().err
  assert code == errors.EXIT_INTERRUPTED
  assert 'stop_times.json' in err and 'No space left' in err
  assert f'tandem train --resume {rd.root}' in err


def test_a_checkpoint_holding_a_nan_is_refused_before_launch(capsys,
                                                             tmp_path):
  import jax
  from tandem.launch import mpo as program
  rd = _fake_run(tmp_path)
  template = program.learner_template(named.tiny())
  checkpointing.save_numbered(rd.learner_checkpoints, 5, template,
                              metadata={'counts': {'env_steps': 5}})
  leaves, treedef = jax.tree_util.tree_flatten(template)
  first = next(i for i, leaf in enumerate(leaves)
               if np.issubdtype(np.asarray(leaf).dtype, np.floating))
  leaves[first] = np.full_like(np.asarray(leaves[first]), np.nan)
  checkpointing.save_numbered(
      rd.learner_checkpoints, 10, jax.tree_util.tree_unflatten(treedef, leaves),
      metadata={'counts': {'env_steps': 10}})
  rc, err = _main(capsys, 'train', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'ckpt-000000000010.npz' in err and 'non-finite' in err, err
  assert 'the one before it' in err and 'ckpt-000000000005.npz' in err, err


# A training command whose reader goes away: `train.train` stands in for a
# run that prints from two threads (the watcher's status lines, the
# launcher's report) and, at its end, leaves a file to show it got there.
_READER_GONE = """
import sys, threading, time
from tandem.launch import cli, train

def run(args, extra, command):
  def status():
    for k in range(40):
      print(f'status {k}', flush=True)
      time.sleep(0.01)
  watcher = threading.Thread(target=status)
  watcher.start()
  watcher.join()
  print('the report')
  open(sys.argv[1], 'w').write('ended')
  return 0

train.train = run
sys.exit(cli.main(['train', '--config', 'configs/mpo.py:tiny']))
"""


def test_a_training_run_whose_reader_goes_away_runs_to_its_end(tmp_path):
  ended = tmp_path / 'ended'
  proc = subprocess.Popen([sys.executable, '-c', _READER_GONE, str(ended)],
                          cwd=REPO_ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
  assert proc.stdout.readline() == b'status 0\n'
  proc.stdout.close()  # `| head -1`
  err = proc.stderr.read().decode()
  assert proc.wait(timeout=60) == 0, err
  assert ended.read_text() == 'ended'
  assert 'Traceback' not in err and 'BrokenPipe' not in err, err
  assert err.count('standard output was closed; the run goes on') == 1


def test_a_training_runs_display_in_a_log_has_no_carriage_returns():
  # Launchpad's stop countdown ends its lines with '\r' (print(end='\r')),
  # to rewrite one line on a terminal; in a log they would run together.
  log = io.StringIO()
  out = cli._DisplayOnly(log)
  print('Waiting for workers to stop for 2s.', end='\r', file=out)
  print('Waiting for workers to stop for 1s.', end='\r', file=out)
  print('a line\r\nstopped', file=out)
  assert log.getvalue() == ('Waiting for workers to stop for 2s.\n'
                            'Waiting for workers to stop for 1s.\n'
                            'a line\nstopped\n')

  class Terminal(io.StringIO):
    def isatty(self):
      return True

  terminal = Terminal()
  print('Waiting for workers to stop for 2s.', end='\r',
        file=cli._DisplayOnly(terminal))
  assert terminal.getvalue() == 'Waiting for workers to stop for 2s.\r'
