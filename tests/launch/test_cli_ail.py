"""`tandem train-ail` and `collect-demos` reject bad input before launch."""

import dataclasses
import json
import os

import numpy as np
import pytest

from tandem.launch import cli
from tandem.launch import config as config_lib
from tandem.launch import demos as demos_lib
from tandem.launch import errors
from tandem.launch import horizons
from tandem.launch import notes
from tandem.launch import programs
from tandem.launch import report
from tandem.launch import resolve
from tandem.launch import supervise
from tests.integration.demo_data import write_cartpole_demos
from tests.launch import make_config_stale


@pytest.fixture(scope='module')
def demos(tmp_path_factory):
  return write_cartpole_demos(
      str(tmp_path_factory.mktemp('demos') / 'demos.npz'), episodes=1)


def _main(capsys, *argv):
  rc = cli.main(list(argv))
  return rc, capsys.readouterr().err


def _rewrite(src, dst, **changes):
  data = dict(np.load(src))
  for k, v in changes.items():
    if v is None:
      del data[k]
    else:
      data[k] = v
  np.savez(dst, **data)
  return str(dst)


def _train_ail(capsys, tmp_path, demos, *extra):
  return _main(capsys, 'train-ail', '--config', 'configs/ail.py:tiny',
               '--runs_root', str(tmp_path / 'runs'), '--demos', demos, *extra)


def test_demos_that_do_not_fit_the_environment_fail_with_exit_2(
    capsys, tmp_path, demos):
  data = np.load(demos)
  actions = data['actions'].copy()
  actions[3, 0] = 1.5
  cases = {
      'actions': _rewrite(demos, tmp_path / 'a.npz', actions=actions),
      'observations_position': _rewrite(
          demos, tmp_path / 'b.npz',
          observations_position=data['observations_position'][:, :2]),
      'rewards': _rewrite(demos, tmp_path / 'c.npz', rewards=None),
  }
  for array, path in cases.items():
    rc, err = _train_ail(capsys, tmp_path, path)
    assert rc == errors.EXIT_BAD_INPUT, err
    assert path in err and array in err, err
  assert not os.path.exists(tmp_path / 'runs')  # nothing started or written


def test_missing_demos_and_wrong_program_are_refused(capsys, tmp_path, demos):
  rc, err = _main(capsys, 'train-ail', '--config', 'configs/ail.py:tiny',
                  '--runs_root', str(tmp_path))
  assert rc == errors.EXIT_BAD_INPUT and '--demos' in err
  rc, err = _train_ail(capsys, tmp_path, str(tmp_path / 'nope.npz'))
  assert rc == errors.EXIT_BAD_INPUT and 'nope.npz' in err
  rc, err = _main(capsys, 'train', '--config', 'configs/ail.py:tiny')
  assert rc == errors.EXIT_BAD_INPUT and 'train-ail' in err
  rc, err = _main(capsys, 'train-ail', '--config', 'configs/mpo.py:tiny',
                  '--demos', demos)
  assert rc == errors.EXIT_BAD_INPUT and 'tandem train' in err


@pytest.mark.parametrize('override, message', [
    ('--ail.kind=wgan', 'AILConfig.kind'),
    ('--ail.kind=airl', 'AILConfig.reward'),
    ('--ail.gradient_penalty=-1', 'AILConfig.gradient_penalty'),
    ('--ail.gradient_penalty_target=-1', 'AILConfig.gradient_penalty_target'),
    ('--ail.gradient_penalty_on=h', 'AILConfig.gradient_penalty_on'),
    ('--ail.gradient_penalty_at=agent', 'AILConfig.gradient_penalty_at'),
    # configs/ail.py:tiny is GAIL, which has no g.
    ('--ail.gradient_penalty_on=g', 'AILConfig.gradient_penalty_on'),
    ('--ail.discriminator_optimizer.name=lion',
     'AILConfig.discriminator_optimizer.name'),
    ('--ail.generator_steps_per_round=3', 'ail.generator_steps_per_round'),
    ('--ail.input=pixels', 'AILConfig.input'),
    # Step counts the learner keeps in int32: a larger one would wrap.
    ('--ail.schedule_horizon=3000000000', 'AILConfig.schedule_horizon'),
    ('--ail.bc_decay_steps=2147483648', 'AILConfig.bc_decay_steps'),
    ('--ail.discriminator_steps_per_round=2147483648',
     'AILConfig.discriminator_steps_per_round'),
    ('--mpo.schedule_horizon=3000000000', 'MPOConfig.schedule_horizon'),
])
def test_bad_ail_config_values_name_the_field(capsys, tmp_path, demos,
                                              override, message):
  rc, err = _train_ail(capsys, tmp_path, demos, override)
  assert rc == errors.EXIT_BAD_INPUT and message in err, err


def test_help_lists_every_ail_field(capsys):
  with pytest.raises(SystemExit):
    cli.main(['train-ail', '--help'])
  out = capsys.readouterr().out
  for path in config_lib.leaf_fields(config_lib.AILTrainConfig()):
    assert f'--{path}=' in out, path


def test_collect_demos_needs_a_run_with_a_checkpoint(capsys, tmp_path):
  rc, err = _main(capsys, 'collect-demos', '--run', str(tmp_path),
                  '--episodes', '1', '--out', str(tmp_path / 'x.npz'))
  assert rc == errors.EXIT_BAD_INPUT and 'config.json' in err


@pytest.mark.parametrize('seed', ['-1', str(2**31 - 1)])
def test_collect_demos_refuses_a_seed_its_episodes_cannot_take(
    capsys, tmp_path, seed):
  (tmp_path / 'config.json').write_text('{}')
  rc, err = _main(capsys, 'collect-demos', '--run', str(tmp_path),
                  '--episodes', '2', '--seed', seed,
                  '--out', str(tmp_path / 'x.npz'))
  assert rc == errors.EXIT_BAD_INPUT and '--seed:' in err, err


@pytest.mark.parametrize('text', ['[1]', '{"env": '])
def test_collect_demos_names_a_config_json_that_is_not_a_config(
    capsys, tmp_path, text):
  (tmp_path / 'config.json').write_text(text)
  rc, err = _main(capsys, 'collect-demos', '--run', str(tmp_path),
                  '--episodes', '1', '--out', str(tmp_path / 'x.npz'))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert f'--run {tmp_path}: config.json is unreadable or invalid' in err, err


def _run_with_checkpoint(tmp_path, monkeypatch):
  """A run directory holding a config and a learner checkpoint; collecting
  is replaced by a recorder, so a test sees whether it would have run."""
  import json
  from tandem.agents.ail import demonstrations
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime.rundir import RunDir
  from tandem.configs import mpo as named
  from tandem.launch import mpo as program
  cfg = config_lib.apply_overrides(named.tiny(), {'runs_root': str(tmp_path)})
  rd = RunDir(str(tmp_path / cfg.name)).make()
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  checkpointing.save_numbered(rd.learner_checkpoints, 0,
                              program.learner_template(cfg))
  calls = []

  def collect(*a, **k):
    calls.append(a)
    raise RuntimeError('collect was called')
  monkeypatch.setattr(demonstrations, 'collect', collect)
  return rd, calls


def test_collect_demos_checks_out_before_collecting(capsys, tmp_path,
                                                  monkeypatch):
  rd, calls = _run_with_checkpoint(tmp_path, monkeypatch)
  rc, err = _main(capsys, 'collect-demos', '--run', rd.root, '--episodes',
                  '1', '--out', str(tmp_path / 'no_such_dir' / 'x.npz'))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'no_such_dir' in err and 'not writable' in err, err
  assert calls == []


def test_collect_demos_names_an_environment_this_machine_lacks(
    capsys, tmp_path, monkeypatch):
  rd, calls = _run_with_checkpoint(tmp_path, monkeypatch)
  with open(rd.config) as f:
    config = json.load(f)
  config['env'] = 'gym:NoSuchTask-v0'  # made elsewhere, say
  with open(rd.config, 'w') as f:
    json.dump(config, f)
  rc, err = _main(capsys, 'collect-demos', '--run', rd.root, '--episodes',
                  '1', '--out', str(tmp_path / 'x.npz'))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'gym:NoSuchTask-v0 cannot be made on this machine' in err, err
  assert 'Registered ids' not in err  # not every id this machine has
  assert calls == []


def test_collect_demos_names_a_failed_write(capsys, tmp_path, monkeypatch):
  from tandem.agents.ail import demonstrations
  rd, calls = _run_with_checkpoint(tmp_path, monkeypatch)
  monkeypatch.setattr(demonstrations, 'collect', lambda *a, **k: None)

  def full_disk(*args, **kwargs):
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(demonstrations, 'save', full_disk)
  out = tmp_path / 'x.npz'
  rc, err = _main(capsys, 'collect-demos', '--run', rd.root, '--episodes',
                  '1', '--out', str(out))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'No space left on device' in err and str(out) in err, err
  assert not out.exists()


def test_collect_demos_keeps_an_existing_out_file_unless_told(
    capsys, tmp_path, monkeypatch):
  rd, calls = _run_with_checkpoint(tmp_path, monkeypatch)
  out = tmp_path / 'expert.npz'
  out.write_bytes(b'the only copy')
  rc, err = _main(capsys, 'collect-demos', '--run', rd.root, '--episodes',
                  '1', '--out', str(out))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert f'--out {out}: the file exists' in err and '--overwrite' in err, err
  assert calls == [] and out.read_bytes() == b'the only copy'
  with pytest.raises(RuntimeError, match='collect was called'):
    cli.main(['collect-demos', '--run', rd.root, '--episodes', '1', '--out',
              str(out), '--overwrite'])
  assert len(calls) == 1 and out.read_bytes() == b'the only copy'


def _ail_run_dir(tmp_path, demos):
  """(config, run directory) of an adversarial run as a launch leaves it
  before any node ran: config.json and demos.json."""
  import json
  from tandem.agents.runtime.rundir import RunDir
  from tandem.configs import ail as named
  cfg = config_lib.apply_overrides(named.tiny(), {
      'runs_root': str(tmp_path), 'demos': demos})
  rd = RunDir(str(tmp_path / cfg.name)).make()
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  with open(os.path.join(rd.root, 'demos.json'), 'w') as f:
    json.dump(demos_lib.check_demonstrations(cfg), f)
  return cfg, rd


def test_resume_refuses_changed_demonstrations_and_round_sizes(
    capsys, tmp_path, demos):
  _, rd = _ail_run_dir(tmp_path, demos)
  rc, err = _main(capsys, 'train-ail', '--resume', rd.root,
                  '--ail.generator_steps_per_round=8')
  assert rc == errors.EXIT_BAD_INPUT
  assert "'ail.generator_steps_per_round'" in err, err
  other = write_cartpole_demos(str(tmp_path / 'other.npz'), episodes=2)
  rc, err = _main(capsys, 'train-ail', '--resume', rd.root, '--demos', other)
  assert rc == errors.EXIT_BAD_INPUT
  assert 'other.npz' in err and 'not the file this run started with' in err


@pytest.mark.parametrize('text', ['{"sha256": ', '["x"]'])
def test_resume_refuses_an_unreadable_demos_record_and_keeps_it(
    capsys, tmp_path, demos, text):
  import json
  from tandem.agents.runtime.rundir import RunDir
  from tandem.configs import ail as named
  cfg = config_lib.apply_overrides(named.tiny(), {
      'runs_root': str(tmp_path), 'demos': demos})
  rd = RunDir(str(tmp_path / cfg.name)).make()
  with open(rd.config, 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  record = os.path.join(rd.root, 'demos.json')
  with open(record, 'w') as f:
    f.write(text)
  rc, err = _main(capsys, 'train-ail', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'demos.json: unreadable' in err, err
  with open(record) as f:
    assert f.read() == text


def test_resume_hints_name_the_adversarial_command():
  # The hints printed when a run stops or fails must name the command that
  # can resume it: `train` refuses an adversarial run directory.
  from tandem.configs import ail as ail_configs
  from tandem.configs import mpo as mpo_configs
  assert programs.command_of(type(ail_configs.tiny())) == 'train-ail'
  assert programs.command_of(type(mpo_configs.tiny())) == 'train'
  assert report.resume_command(ail_configs.tiny(), 'runs/x') == (
      'tandem train-ail --resume runs/x')


def test_a_launch_on_terminating_demonstrations_warns_of_the_reward_bias(
    tmp_path, demos):
  cfg = config_lib.apply_overrides(
      resolve.load_named_config('configs/ail.py:tiny'), {'demos': demos})
  record = demos_lib.check_demonstrations(cfg)
  assert record['terminal_transitions'] == 0  # cartpole never terminates
  assert demos_lib.terminal_note(record, cfg) is None
  discounts = np.load(demos)['discounts'].copy()
  discounts[-1] = 0.0  # the episode ends in a terminal state
  ended = _rewrite(demos, tmp_path / 'ended.npz', discounts=discounts)
  cfg = config_lib.apply_overrides(cfg, {'demos': ended})
  record = demos_lib.check_demonstrations(cfg)
  assert record['terminal_transitions'] == 1
  note = demos_lib.terminal_note(record, cfg)
  assert 'absorbing' in note and cfg.ail.reward in note, note
  assert 'agent_terminal_fraction' in note
  assert {cfg.ail.kind, cfg.ail.reward} == {'gail', 'neg_log_one_minus_d'}
  assert 'positive' in note and 'survive' in note
  for reward, says in [('log_d', 'end episodes early'),
                       ('logit', 'no fixed sign')]:
    other = config_lib.apply_overrides(cfg, {'ail.reward': reward})
    assert says in demos_lib.terminal_note(record, other)


def test_a_launch_on_a_task_that_may_terminate_warns_without_terminal_demos(
    demos):
  # The bias comes from the generator's episodes ending: demonstrations
  # that always reach the time limit do not rule it out (gym:Hopper with
  # log_d and no absorbing states pays the generator to fall).
  cfg = config_lib.apply_overrides(
      resolve.load_named_config('configs/ail.py:tiny'),
      {'demos': demos, 'ail.reward': 'log_d', 'ail.absorbing_states': 'off'})
  record = demos_lib.check_demonstrations(cfg)
  assert record['terminal_transitions'] == 0
  assert demos_lib.terminal_note(record, cfg) is None  # cartpole: time limits only
  for env in ('gym:Hopper-v4', 'lqr:lqr_2_1'):
    note = demos_lib.terminal_note(record, dataclasses.replace(cfg, env=env))
    assert note is not None and env in note, (env, note)
    assert 'none of the demonstrations' in note, note
    assert 'end episodes early' in note and 'absorbing' in note, note


def test_an_adversarial_budget_splits_its_updates_between_the_two_phases():
  from tandem.configs import ail as named_ail
  cfg = named_ail.gail_cartpole()
  got = horizons.expected_updates(cfg)
  rows = (cfg.env_step_budget - cfg.replay_min_size) * cfg.samples_per_insert
  assert got['mpo'] * cfg.mpo.batch_size + got['ail'] * cfg.ail.batch_size \
      == pytest.approx(rows)
  assert got['mpo'] / got['ail'] == pytest.approx(
      cfg.ail.generator_steps_per_round /
      cfg.ail.discriminator_steps_per_round)
  # A discriminator schedule is held against discriminator steps.
  sched = config_lib.apply_overrides(cfg, {
      'ail.discriminator_optimizer.schedule': 'linear',
      'ail.discriminator_optimizer.final_fraction': '0.5',
      'ail.schedule_horizon': str(int(got['ail'] * 3))})
  note = notes.schedule_note(sched)
  assert 'ail.discriminator_optimizer.schedule=linear' in note, note
  assert '33% of the way through it' in note, note


def test_collect_demos_reads_a_run_whose_stored_plumbing_a_newer_check_refuses(
    capsys, tmp_path, monkeypatch):
  # Collecting uses the environment, seed and networks; an actor refresh
  # period that TrainConfig now refuses (an older Tandem wrote it) does not
  # matter to it.
  import json
  rd, calls = _run_with_checkpoint(tmp_path, monkeypatch)
  data = make_config_stale(rd.config)
  with pytest.raises(RuntimeError, match='collect was called'):
    cli.main(['collect-demos', '--run', rd.root, '--episodes', '1',
              '--out', str(tmp_path / 'x.npz')])
  assert len(calls) == 1 and calls[0][0] == data['env']
  assert calls[0][2] == config_lib.from_dict(
      data, {'actor_update_period': '100'}).mpo  # the run's own networks
  # A refused value in what defines the run still stops it, by name.
  data['mpo']['epsilon'] = 50.0
  with open(rd.config, 'w') as f:
    json.dump(data, f)
  rc, err = _main(capsys, 'collect-demos', '--run', rd.root, '--episodes',
                  '1', '--out', str(tmp_path / 'y.npz'))
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'config.json is unreadable or invalid' in err, err
  assert 'MPOConfig.epsilon' in err, err
  assert len(calls) == 1


def _stored(tmp_path, cfg, **changes):
  import json
  data = config_lib.to_dict(cfg)
  for path, value in changes.items():
    d = data
    *parents, leaf = path.split('.')
    for p in parents:
      d = d[p]
    d[leaf] = value
  path = tmp_path / 'config.json'
  path.write_text(json.dumps(data))
  return str(path), data


def test_reading_a_run_sets_aside_stale_plumbing_whatever_its_batch_sizes(
    tmp_path):
  from tandem.configs import ail as named_ail
  from tandem.configs import mpo as named_mpo
  # Large batches with the replay sizes they need, and a stale refresh
  # period: the stand-ins must not trip the batch-size checks themselves.
  for cfg, changes in (
      (named_mpo.tiny(), {'mpo.batch_size': 2048}),
      (named_ail.tiny(), {'ail.batch_size': 2048})):
    path, data = _stored(tmp_path, cfg, replay_min_size=4096,
                         actor_update_period=10**9, **changes)
    with pytest.raises(config_lib.ConfigError):
      config_lib.from_dict(data)
    got = resolve.load_run_config_to_read(path, '--run x')
    assert type(got) is type(cfg)
    assert (got.env, got.seed) == (cfg.env, cfg.seed)
    assert config_lib.to_dict(got.mpo) == data['mpo']  # as stored
    if 'ail' in data:
      assert config_lib.to_dict(got.ail) == data['ail']


def test_reading_a_run_names_what_defines_it_when_that_fails(tmp_path):
  from tandem.configs import ail as named_ail
  # generator_steps_per_round must be a multiple of sgd_steps_per_call: a
  # check of the run itself, beside a stale refresh period.
  path, _ = _stored(tmp_path, named_ail.tiny(), actor_update_period=10**9,
                    **{'mpo.sgd_steps_per_call': 3})
  with pytest.raises(errors.UsageError) as err:
    resolve.load_run_config_to_read(path, '--run x')
  message = str(err.value)
  assert message.index('generator_steps_per_round') < message.index(
      'as stored'), message


def test_the_status_line_shows_the_discriminators_rate_where_it_steps():
  progress = {'counts': {'env_steps': 5000, 'discriminator_steps': 0},
              'budget': 10000, 'env_steps_per_s': 100.0,
              'learner_steps_per_s': 8.0, 'discriminator_steps_per_s': 0.0}
  assert 'discriminator/s' not in supervise.progress_line(progress)  # MPO
  progress['counts']['discriminator_steps'] = 640
  progress['discriminator_steps_per_s'] = 2.5
  line = supervise.progress_line(progress)
  assert '8.0 learner/s' in line and '2.5 discriminator/s' in line


def test_a_behaviour_cloning_decay_far_from_the_budget_is_noted():
  from tandem.configs import ail as named_ail
  cfg = named_ail.gail_cartpole()
  generator_steps = horizons.expected_updates(cfg)['mpo']
  bc = {'ail.bc_weight': '0.5', 'ail.bc_final_weight': '0.0'}
  long = config_lib.apply_overrides(cfg, {
      **bc, 'ail.bc_decay_steps': str(int(generator_steps * 4))})
  note = notes.schedule_note(long)
  assert 'ail.bc_weight runs over ail.bc_decay_steps=' in note, note
  assert '25% of the way through it' in note, note
  short = config_lib.apply_overrides(cfg, {
      **bc, 'ail.bc_decay_steps': str(int(generator_steps / 4))})
  assert 'ail.bc_weight reaches its final value' in notes.schedule_note(short)
  fits = config_lib.apply_overrides(cfg, {
      **bc, 'ail.bc_decay_steps': str(int(generator_steps))})
  assert notes.schedule_note(fits) is None
  # A fall to a floor above 0 that ends early is the design (airl_walker,
  # gail_bc_walker: 15k of about 62k generator steps), not a mismatch.
  floor = config_lib.apply_overrides(cfg, {
      'ail.bc_weight': '1.0', 'ail.bc_final_weight': '0.3',
      'ail.bc_decay_steps': str(int(generator_steps / 4))})
  assert notes.schedule_note(floor) is None
  for name in ('airl_walker', 'gail_bc_walker'):
    assert notes.schedule_note(getattr(named_ail, name)()) is None, name
  held = config_lib.apply_overrides(cfg, {  # a weight that does not anneal
      'ail.bc_weight': '0.5', 'ail.bc_final_weight': '0.5',
      'ail.bc_decay_steps': str(int(generator_steps * 4))})
  assert notes.schedule_note(held) is None


def test_resume_refuses_a_checkpoint_saved_under_another_round_plan(
    capsys, tmp_path, demos):
  # config.json is what a resume compares overrides with; the checkpoint
  # records the plan its counts were made under, so an edited config.json
  # cannot place the restored steps in other rounds.
  from tandem.agents.ail import learner as ail_learner
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime import counting
  from tandem.launch import ail as program
  cfg, rd = _ail_run_dir(tmp_path, demos)
  counting.Counter(rd.counter).save()
  plan = ail_learner.plan_record(cfg.ail)
  assert program.checkpoint_mismatch(cfg, {'round_plan': plan}) is None
  assert program.checkpoint_mismatch(cfg, {}) is None  # older checkpoints
  # A field the record gained later (or lost) refuses nothing.
  assert program.checkpoint_mismatch(
      cfg, {'round_plan': {'generator_steps_per_round':
                           plan['generator_steps_per_round'], 'new': 1}}) \
      is None
  other = dict(plan, generator_steps_per_round=8)
  checkpointing.save_numbered(rd.learner_checkpoints, 0,
                              program.learner_template(cfg),
                              metadata={'round_plan': other})
  rc, err = _main(capsys, 'train-ail', '--resume', rd.root)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'round plan differs' in err, err
  assert (f"generator_steps_per_round 8 there, "
          f"{plan['generator_steps_per_round']} here") in err, err


def test_absorbing_states_are_on_where_the_task_may_terminate(capsys, demos):
  cfg = resolve.load_named_config('configs/ail.py:tiny')
  assert cfg.env == 'cartpole:swingup'
  assert cfg.ail.absorbing_states == 'auto' and not cfg.ail.absorbing
  # An overridden env counts, with 'auto' kept as the user's choice.
  for env, want in [('gym:Pendulum-v1', True), ('lqr:lqr_2_1', True),
                    ('walker:walk', False)]:
    got = config_lib.apply_overrides(cfg, {'env': env})
    assert got.ail.absorbing is want, env
    stored = config_lib.to_dict(got)['ail']
    assert stored['absorbing_states'] == 'auto'
    assert 'task_may_terminate' not in stored   # bookkeeping, not a setting
    assert config_lib.from_dict(config_lib.to_dict(got)).ail.absorbing is want
  with pytest.raises(config_lib.ConfigError, match='unknown config field'):
    config_lib.apply_overrides(cfg, {'ail.task_may_terminate': True})
  # Chosen by the user, kept on any task.
  kept = config_lib.apply_overrides(cfg, {'env': 'gym:Pendulum-v1',
                                          'ail.absorbing_states': 'off'})
  assert not kept.ail.absorbing
  on = config_lib.apply_overrides(cfg, {'ail.absorbing_states': 'on'})
  assert on.ail.absorbing
  record = {'terminal_transitions': 3, 'episodes': 4}
  assert demos_lib.terminal_note(record, on) is None
  assert '--ail.absorbing_states=on' in demos_lib.terminal_note(record, cfg)
  auto = config_lib.apply_overrides(cfg, {'env': 'gym:Pendulum-v1'})
  note = demos_lib.terminal_note(record, auto)
  assert 'auto turns' in note and 'gym:Pendulum-v1' in note, note


def test_a_run_stored_before_absorbing_states_resumes_without_them():
  cfg = config_lib.apply_overrides(
      resolve.load_named_config('configs/ail.py:tiny'),
      {'env': 'gym:Pendulum-v1'})
  data = config_lib.to_dict(cfg)
  del data['ail']['absorbing_states']
  assert not config_lib.from_dict(data).ail.absorbing
  assert config_lib.stored_fields(data)['ail.absorbing_states'] == 'off'
  assert config_lib.from_dict(config_lib.to_dict(cfg)).ail.absorbing


@pytest.mark.parametrize('flags,says', [
    (('--ail.absorbing_states=maybe',), "one of ['auto', 'on', 'off']"),
    (('--ail.absorbing_states=on', '--mpo.discount=1'), 'discount < 1'),
])
def test_bad_absorbing_states_are_refused_by_name(capsys, tmp_path, demos,
                                                   flags, says):
  rc, err = _train_ail(capsys, tmp_path, demos, *flags)
  assert rc == errors.EXIT_BAD_INPUT, err
  assert 'absorbing_states' in err and says in err, err
  assert not os.path.exists(tmp_path / 'runs')


def test_a_horizon_of_0_is_set_to_the_budgets_steps_when_the_run_is_made(
    capsys, tmp_path, demos):
  # "Over the run": each group's horizon becomes the updates the budget
  # pays for, in the config a launch uses and shows.
  anneal = ['--ail.discriminator_optimizer.schedule=linear',
            '--ail.discriminator_optimizer.final_fraction=0',
            '--mpo.policy_optimizer.schedule=cosine',
            '--ail.schedule_horizon=0', '--mpo.schedule_horizon=0']
  args = cli.make_parser().parse_args(
      ['train-ail', '--config', 'configs/ail.py:tiny', '--demos', demos])
  cfg, run_dir, _ = resolve.resolve_train_config(
      args, anneal + [f'--runs_root={tmp_path}'], 'train-ail')
  paid = horizons.expected_updates(cfg)
  assert cfg.ail.schedule_horizon == round(paid['ail']) > 0
  assert cfg.mpo.schedule_horizon == round(paid['mpo']) > 0
  assert notes.schedule_note(cfg) is None
  rc = cli.main(['train-ail', '--config', 'configs/ail.py:gail_bc_walker',
                 '--demos', demos, '--show_config'])
  out = capsys.readouterr().out
  assert rc == 0
  walker = resolve.load_named_config('configs/ail.py:gail_bc_walker')
  assert walker.ail.schedule_horizon == 0
  assert (f'--ail.schedule_horizon='
          f'{round(horizons.expected_updates(walker)["ail"])}\n') in out
  # A resume keeps the count its run was created with, even when it raises
  # the budget (its schedule note says the anneal now ends a quarter of the
  # way through the run).
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, 'config.json'), 'w') as f:
    json.dump(config_lib.to_dict(cfg), f)
  resumed, _, _ = resolve.resolve_train_config(
      cli.make_parser().parse_args(['train-ail', '--resume', run_dir]),
      [f'--env_step_budget={4 * cfg.env_step_budget}'], 'train-ail')
  assert resumed.ail.schedule_horizon == cfg.ail.schedule_horizon
  assert resumed.mpo.schedule_horizon == cfg.mpo.schedule_horizon
  note = notes.schedule_note(resumed)
  assert ('reaches its final value at ail.schedule_horizon='
          f'{cfg.ail.schedule_horizon} steps, 25%') in note, note
