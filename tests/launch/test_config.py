"""TrainConfig: validation, dotted overrides, JSON round trip."""

import dataclasses
import json

import pytest

from tandem.agents.envs import environments
from tandem.agents.core.fields import ConfigError
from tandem.configs import mpo as named
from tandem.launch import config as config_lib
from tandem.launch import resuming


def test_every_named_config_builds_and_names_a_known_task():
  for name in named.CONFIGS:
    cfg = getattr(named, name)()
    assert isinstance(cfg, config_lib.TrainConfig), name
    assert cfg.env in environments.dm_control_task_names(), name
  assert named.walker_stand().env == 'walker:stand'


def test_json_round_trip_is_exact():
  for name in named.CONFIGS:
    cfg = config_lib.apply_overrides(getattr(named, name)(), {
        'mpo.duals.num_steps': '5', 'mpo.policy_layers': '64,64',
        'mpo.duals.alpha_optimizer.name': 'rmsprop'})
    again = config_lib.from_dict(json.loads(json.dumps(
        config_lib.to_dict(cfg))))
    assert again == cfg


def test_a_schedule_stored_without_a_hold_reads_as_the_one_it_ran():
  # A stored config.json without hold_fraction ran its schedules unheld.
  cfg = config_lib.apply_overrides(config_lib.TrainConfig(), {
      'mpo.policy_optimizer.schedule': 'linear',
      'mpo.policy_optimizer.hold_fraction': '0.25'})
  assert cfg.mpo.policy_optimizer.hold_fraction == 0.25
  data = config_lib.to_dict(cfg)
  del data['mpo']['policy_optimizer']['hold_fraction']
  assert config_lib.from_dict(data).mpo.policy_optimizer.hold_fraction == 0.0
  assert config_lib.stored_fields(data)[
      'mpo.policy_optimizer.hold_fraction'] == 0.0


@pytest.mark.parametrize('data', [[1], None, 'cartpole'])
def test_from_dict_refuses_what_is_not_an_object(data):
  with pytest.raises(ConfigError, match='JSON object'):
    config_lib.from_dict(data)


def test_overrides_parse_types():
  cfg = config_lib.apply_overrides(config_lib.TrainConfig(), {
      'tensorboard': 'false', 'samples_per_insert': '64',
      'mpo.critic_layers': '128 128', 'mpo.duals.log_residual': 'no'})
  assert cfg.tensorboard is False and cfg.samples_per_insert == 64.0
  assert cfg.mpo.critic_layers == (128, 128)
  assert cfg.mpo.duals.log_residual is False
  with pytest.raises(ConfigError, match='tensorboard'):
    config_lib.apply_overrides(cfg, {'tensorboard': 'maybe'})


@pytest.mark.parametrize('field, value', [
    ('name', '../escape'), ('env', 'cartpole'), ('seed', -1),
    ('replay_min_size', 10**9), ('replay_min_size', 8),
    ('env_step_budget', 0), ('checkpoint_period_s', 0.0),
    # Not above replay_min_size (1000): the learner would never sample.
    ('env_step_budget', 1000), ('env_step_budget', 999),
    ('envs_per_actor', 0), ('envs_per_actor', 65),
    ('fault_injection_actor_crash_after', -1),
    ('max_consecutive_env_faults', -1), ('max_consecutive_env_faults', 1.5),
    ('eval_sampled', 1)])
def test_train_config_rejects(field, value):
  with pytest.raises(ConfigError, match=f'TrainConfig.{field}'):
    config_lib.apply_overrides(config_lib.TrainConfig(), {field: value})


def test_a_budget_too_small_for_one_learner_call_is_refused():
  # cartpole: 8 SGD steps of 256 per call; 10 env steps past the minimum
  # let the limiter release 10·48 + 1000 = 1480 rows, never a 2048-row call.
  from tandem.configs import mpo as named_mpo
  cartpole = named_mpo.cartpole()
  with pytest.raises(ConfigError, match='TrainConfig.env_step_budget.*2048.*'
                     '1480'):
    config_lib.apply_overrides(cartpole, {'env_step_budget': '1010'})
  ok = config_lib.apply_overrides(cartpole, {'env_step_budget': '1022'})
  assert (ok.env_step_budget - ok.replay_min_size) * 48 + 1000 >= 2048


def test_an_adversarial_round_samples_its_discriminator_steps_first():
  # The first generator call comes after a round's discriminator steps:
  # tiny needs 2·32 + 2·32 = 128 rows; a budget of 65 releases 108.
  from tandem.configs import ail as named_ail
  tiny = named_ail.tiny()
  need = (tiny.ail.discriminator_steps_per_round * tiny.ail.batch_size +
          tiny.mpo.sgd_steps_per_call * tiny.mpo.batch_size)
  allowed = lambda budget: ((budget - tiny.replay_min_size) *
                            tiny.samples_per_insert + tiny.replay_error_buffer)
  assert max(tiny.ail.discriminator_steps_per_round * tiny.ail.batch_size,
             tiny.mpo.sgd_steps_per_call * tiny.mpo.batch_size) <= (
                 allowed(65)) < need
  with pytest.raises(ConfigError, match=f'the {need} rows its first'):
    config_lib.apply_overrides(tiny, {'env_step_budget': '65'})
  budget = next(b for b in range(65, 200) if allowed(b) >= need)
  assert config_lib.apply_overrides(
      tiny, {'env_step_budget': str(budget)}).env_step_budget == budget


def test_an_actor_that_would_never_refresh_its_policy_is_refused():
  cfg = config_lib.TrainConfig()  # 100k env steps over 2 actors
  assert (cfg.env_step_budget, cfg.num_actors) == (100_000, 2)
  with pytest.raises(ConfigError, match='TrainConfig.actor_update_period'):
    config_lib.apply_overrides(cfg, {'actor_update_period': '50001'})
  assert config_lib.apply_overrides(
      cfg, {'actor_update_period': '50000'}).actor_update_period == 50000


def test_a_budget_just_above_replay_min_size_is_accepted():
  cfg = config_lib.apply_overrides(config_lib.TrainConfig(),
                                   {'env_step_budget': '1001'})
  assert cfg.env_step_budget == cfg.replay_min_size + 1


def test_max_consecutive_env_faults_defaults_to_5_and_may_change_on_resume():
  old = config_lib.TrainConfig()
  assert old.max_consecutive_env_faults == 5
  new = config_lib.apply_overrides(old, {'max_consecutive_env_faults': '0'})
  assert new.max_consecutive_env_faults == 0
  assert resuming.check_resume_overrides(old, new) == {
      'max_consecutive_env_faults': (5, 0)}


def test_named_mpo_configs_use_the_measured_learner_and_ail_keeps_its_own():
  # configs/mpo.py's learner uses 'next' and epsilon_mean 0.01, each measured
  # for MPO; the adversarial configs share it, but their learning checks
  # measure 'current' and 0.0025, which they must keep.
  from tandem.configs import ail as ail_named
  for name in ('cartpole', 'make_run', 'walker', 'walker_stand'):
    m = getattr(named, name)().mpo
    assert (m.estep_states, m.epsilon_mean, m.critic_type) == (
        'next', 0.01, 'scalar'), name
  for name in ('gail_cartpole', 'airl_cartpole'):
    m = getattr(ail_named, name)().mpo
    assert (m.estep_states, m.epsilon_mean) == ('current', 0.0025), name


def test_an_annealed_named_config_anneals_over_the_updates_its_budget_pays_for():
  # A horizon is counted in updates, not env steps: one left behind when a
  # config's budget or replay ratio changes would end the anneal early or
  # never reach its end. 0 follows the budget, whatever it is.
  from tandem.configs import ail as ail_named
  from tandem.launch import horizons
  from tandem.launch import notes
  configs = [getattr(ail_named, name)() for name in ail_named.CONFIGS]
  annealed = [cfg for cfg in configs
              if cfg.ail.discriminator_optimizer.schedule != 'constant']
  assert annealed
  for cfg in annealed:
    assert cfg.ail.schedule_horizon == 0, cfg.name
    for budget in (cfg.env_step_budget, 3 * cfg.env_step_budget):
      run = horizons.over_the_budget(
          dataclasses.replace(cfg, env_step_budget=budget))
      paid = horizons.expected_updates(run)['ail']
      assert abs(run.ail.schedule_horizon - paid) <= 0.5, (cfg.name, budget)
      assert notes.schedule_note(run) is None, (cfg.name, budget)


_WALKER = {'env': 'walker:walk', 'mpo.estep_states': 'next',
           'mpo.epsilon_mean': '0.01', 'samples_per_insert': '36',
           'num_actors': '4', 'env_step_budget': '500000'}


# Each study ran a base config with `--set` overrides; the named config that
# records its cell must be those settings and nothing else, with the gradient
# penalty and BC weights the study's report names.
@pytest.mark.parametrize('name, base, overrides, penalty, bc', [
    ('gail_bc_cartpole', 'gail_cartpole',
     {'ail.bc_weight': '1.0', 'ail.bc_decay_steps': '15000',
      'ail.bc_final_weight': '0.3', 'env_step_budget': '150000',
      'ail.discriminator_optimizer.schedule': 'linear',
      'ail.discriminator_optimizer.final_fraction': '0',
      'ail.schedule_horizon': '3100'}, 10.0, 1.0),
    ('gail_point_mass', 'gail_cartpole',
     {'env': 'point_mass:easy', 'ail.gradient_penalty': '0',
      'ail.bc_weight': '1.0', 'ail.bc_decay_steps': '15000',
      'ail.bc_final_weight': '0.1', 'env_step_budget': '100000'}, 0.0, 1.0),
    ('airl_point_mass', 'airl_cartpole',
     {'env': 'point_mass:easy', 'ail.gradient_penalty': '0',
      'ail.bc_weight': '0', 'ail.bc_final_weight': '0',
      'ail.reward': 'logit', 'mpo.policy_init_scale': '1.0',
      'env_step_budget': '100000'}, 0.0, 0.0),
    ('gail_walker', 'gail_cartpole', _WALKER, 10.0, 0.0),
    ('gail_bc_walker', 'gail_walker',
     {'ail.bc_weight': '1.0', 'ail.bc_decay_steps': '15000',
      'ail.bc_final_weight': '0.3',
      'ail.discriminator_optimizer.schedule': 'linear',
      'ail.discriminator_optimizer.final_fraction': '0',
      'ail.schedule_horizon': '7800'}, 10.0, 1.0),
    ('airl_walker', 'airl_cartpole', _WALKER, 10.0, 1.0),
    ('airl_nobc_walker', 'airl_walker',
     {'ail.bc_weight': '0', 'ail.bc_final_weight': '0',
      'ail.reward': 'logit', 'mpo.policy_init_scale': '1.0'}, 10.0, 0.0),
])
def test_a_named_imitation_config_is_its_measured_study_cell(
    name, base, overrides, penalty, bc):
  # A named horizon of 0 is the budget's: set at launch, it may differ from
  # the count the study's runs were given by at most 0.2%.
  from tandem.configs import ail as ail_named
  from tandem.launch import horizons
  studied = config_lib.apply_overrides(getattr(ail_named, base)(),
                                       dict(overrides, name=name))
  named_cfg = horizons.over_the_budget(getattr(ail_named, name)())
  ran = studied.ail.schedule_horizon
  assert abs(named_cfg.ail.schedule_horizon - ran) <= 0.002 * ran
  same = dict(config_lib.to_dict(named_cfg),
              ail=dict(config_lib.to_dict(named_cfg.ail), schedule_horizon=ran))
  assert same == config_lib.to_dict(studied)
  assert (named_cfg.ail.gradient_penalty, named_cfg.ail.bc_weight) == (
      penalty, bc)

