"""Config validation: every bad value names its field and the accepted range."""

import pytest

from tandem.agents.mpo import config

BAD = [
    ('epsilon', 0.0, 'MPOConfig.epsilon'),
    ('epsilon', -0.1, 'MPOConfig.epsilon'),
    ('epsilon', 5.0, 'log\\(num_samples\\)'),
    ('epsilon_mean', 0, 'MPOConfig.epsilon_mean'),
    ('epsilon_stddev', float('nan'), 'MPOConfig.epsilon_stddev'),
    ('epsilon_penalty', -1.0, 'MPOConfig.epsilon_penalty'),
    ('epsilon_penalty', 3.0, 'epsilon_penalty: expected a value < '
     'log\\(num_samples\\)'),
    ('num_samples', 1, 'MPOConfig.num_samples'),
    ('batch_size', 0, 'MPOConfig.batch_size'),
    ('batch_size', 2.5, 'MPOConfig.batch_size'),
    ('discount', 1.5, 'MPOConfig.discount'),
    ('n_step', 0, 'MPOConfig.n_step'),
    ('policy_layers', (), 'MPOConfig.policy_layers'),
    ('critic_layers', (256, 0), 'MPOConfig.critic_layers'),
    ('target_update', 'sometimes', 'MPOConfig.target_update'),
    ('target_update_period', 0, 'MPOConfig.target_update_period'),
    ('target_update_period', 2**31, 'MPOConfig.target_update_period'),
    ('schedule_horizon', -1, 'MPOConfig.schedule_horizon'),
    ('schedule_horizon', 2.5, 'MPOConfig.schedule_horizon'),
    # Wider than the int32 the learner stores it in: would wrap negative.
    ('schedule_horizon', 3_000_000_000, r'MPOConfig.schedule_horizon.*'
     r'\[0, 2147483647\].*0: the steps the budget pays for'),
    ('acting_policy', 'behaviour', 'MPOConfig.acting_policy'),
    ('target_polyak_tau', 0.0, 'MPOConfig.target_polyak_tau'),
    ('sgd_steps_per_call', 0, 'MPOConfig.sgd_steps_per_call'),
    ('max_grad_norm', 0.0, 'MPOConfig.max_grad_norm'),
    ('init', 'xavier', 'MPOConfig.init'),
    ('policy_mean', 'sigmoid', 'MPOConfig.policy_mean'),
    ('grad_clip_mode', 'global', 'MPOConfig.grad_clip_mode'),
    ('critic_type', 'categorical', 'MPOConfig.critic_type'),
    ('mog_num_components', 0, 'MPOConfig.mog_num_components'),
    ('mog_init_scale', 0.0, 'MPOConfig.mog_init_scale'),
    ('mog_num_value_samples', 0, 'MPOConfig.mog_num_value_samples'),
    ('policy_optimizer.name', 'lbfgs', 'MPOConfig.policy_optimizer.name'),
    ('policy_optimizer.learning_rate', 0.0,
     'MPOConfig.policy_optimizer.learning_rate'),
    ('critic_optimizer.learning_rate', -1e-4,
     'MPOConfig.critic_optimizer.learning_rate'),
    ('critic_optimizer.schedule', 'exp', 'MPOConfig.critic_optimizer.schedule'),
    # 1 would hold the rate over the whole horizon and end it with a jump.
    ('policy_optimizer.hold_fraction', 1.0,
     'MPOConfig.policy_optimizer.hold_fraction'),
    ('critic_optimizer.hold_fraction', -0.1,
     r'MPOConfig.critic_optimizer.hold_fraction: expected a number in \[0, 1\)'),
    ('duals.num_steps', 0, 'DualConfig.num_steps'),
    ('duals.num_steps', 1.5, 'DualConfig.num_steps'),
    # Finite in Python, but 0 or inf in the learner's float32: every update
    # skipped (1e39) or the E-step's bound gone (1e-300).
    ('epsilon', 1e-300, 'MPOConfig.epsilon'),
    ('duals.init_temperature', 1e39, 'DualConfig.init_temperature'),
    ('policy_optimizer.learning_rate', 1e39,
     'MPOConfig.policy_optimizer.learning_rate'),
    # Within float32, but a step that large can write an infinite state the
    # learner's guard (which tests gradients, not written parameters) lets in.
    ('policy_optimizer.learning_rate', 1e37,
     r'MPOConfig.policy_optimizer.learning_rate: expected a number > 0 and '
     r'<= 1000 \(bounded so that an accepted step cannot write'),
    ('critic_optimizer.learning_rate', 1001.0,
     'MPOConfig.critic_optimizer.learning_rate'),
    ('max_grad_norm', 1e13, r'MPOConfig.max_grad_norm: expected a number > 0 '
     r'and <= 1e\+12'),
    ('duals.temperature_optimizer.name', 'lion',
     'DualConfig.temperature_optimizer.name'),
    ('duals.alpha_optimizer.name', 'nadam', 'DualConfig.alpha_optimizer.name'),
    ('duals.alpha_optimizer.learning_rate', 0.0,
     'DualConfig.alpha_optimizer.learning_rate'),
    ('duals.temperature_for_weights', 'during',
     'DualConfig.temperature_for_weights'),
    ('duals.solver', 'newton', 'DualConfig.solver'),
    ('duals.exact_tolerance', 0.0, 'DualConfig.exact_tolerance'),
    ('duals.exact_max_iterations', 0, 'DualConfig.exact_max_iterations'),
    ('duals.exact_max_iterations', 3_000_000_000,
     'DualConfig.exact_max_iterations'),
    ('duals.init_temperature', -1.0, 'DualConfig.init_temperature'),
    ('duals.init_penalty_temperature', -1.0,
     'DualConfig.init_penalty_temperature'),
    ('duals.init_penalty_temperature', 1e-9,
     'DualConfig.init_penalty_temperature'),
    ('duals.init_penalty_temperature', float('nan'),
     'DualConfig.init_penalty_temperature'),
    ('duals.init_penalty_temperature', True,
     'DualConfig.init_penalty_temperature'),
    ('duals.floor', 0.0, 'DualConfig.floor'),
]


@pytest.mark.parametrize('path, value, message', BAD)
def test_bad_values_are_rejected_naming_the_field(path, value, message):
  with pytest.raises(config.ConfigError, match=message):
    config.replace(config.MPOConfig(), {path: value})


def test_the_largest_learning_rate_and_clip_bound_are_accepted():
  cfg = config.replace(config.MPOConfig(), {
      'policy_optimizer.learning_rate': config.MAX_LEARNING_RATE,
      'duals.temperature_optimizer.learning_rate': config.MAX_LEARNING_RATE,
      'max_grad_norm': config.MAX_GRAD_NORM})
  assert cfg.policy_optimizer.learning_rate == 1e3
  assert cfg.max_grad_norm == 1e12


def test_dual_rates_are_not_held_to_the_network_bound():
  # The duals are clamped to a reference range whatever their step
  # (tests/mpo/test_duals.py drives them there at rate 1e11).
  cfg = config.replace(config.MPOConfig(), {
      'duals.alpha_optimizer.learning_rate': 1e11})
  assert cfg.duals.alpha_optimizer.learning_rate == 1e11


def test_error_says_what_was_expected():
  with pytest.raises(config.ConfigError) as e:
    config.replace(config.MPOConfig(), {'duals.solver': 'newton'})
  assert "'gradient'" in str(e.value) and "'exact'" in str(e.value)
  with pytest.raises(config.ConfigError) as e:
    config.replace(config.MPOConfig(), {'duals.temperature_optimizer.name': 'x'})
  assert 'adam' in str(e.value) and 'rmsprop' in str(e.value)


def test_unknown_override_path_is_rejected():
  with pytest.raises(config.ConfigError, match="unknown field 'num_step'"):
    config.replace(config.MPOConfig(), {'duals.num_step': 3})


def test_defaults_are_in_acme_range_and_overrides_apply():
  c = config.MPOConfig()
  assert (c.epsilon, c.epsilon_mean, c.epsilon_stddev, c.epsilon_penalty) == (
      0.1, 0.0025, 1e-6, 0.001)
  assert (c.num_samples, c.batch_size, c.discount, c.n_step) == (20, 256, 0.99,
                                                                 5)
  assert c.policy_optimizer.learning_rate == 1e-4
  assert c.duals.temperature_optimizer.learning_rate == 1e-2
  c2 = config.replace(c, {'duals.num_steps': 10,
                          'duals.alpha_optimizer.name': 'sgd'})
  assert c2.duals.num_steps == 10 and c2.duals.alpha_optimizer.name == 'sgd'
  assert c.duals.num_steps == 1  # frozen original untouched


def test_unknown_init_and_clip_mode_name_the_choices():
  with pytest.raises(config.ConfigError) as e:
    config.replace(config.MPOConfig(), {'init': 'haiku'})
  assert "'tandem'" in str(e.value) and "'acme'" in str(e.value)
  with pytest.raises(config.ConfigError) as e:
    config.replace(config.MPOConfig(), {'grad_clip_mode': 'both'})
  assert "'per_network'" in str(e.value) and "'joint'" in str(e.value)


def test_init_and_clipping_default_to_the_behaviour_before_they_existed():
  c = config.MPOConfig()
  assert (c.init, c.grad_clip_mode) == ('tandem', 'per_network')
  assert c.policy_mean == 'linear'  # Acme's networks: an unbounded mean
  assert c.policy_init_scale == 0.5  # outside `init`: actors read it


@pytest.mark.parametrize('path, value', [('mpo.init', 'acme'),
                                         ('mpo.grad_clip_mode', 'joint'),
                                         ('mpo.policy_mean', 'tanh')])
def test_resume_refuses_a_changed_init_clip_mode_or_policy_mean(path, value):
  # They change what the checkpoint's run means (and `grad_clip_mode` the
  # optimizer state's structure), so they are not RESUMABLE_FIELDS.
  from tandem.launch import config as launch_config
  from tandem.launch import resuming
  old = launch_config.TrainConfig()
  new = launch_config.apply_overrides(old, {path: value})
  assert path not in resuming.RESUMABLE_FIELDS
  with pytest.raises(config.ConfigError, match=path.replace('.', '\\.')):
    resuming.check_resume_overrides(old, new)
  # A config file without these fields loads with the defaults: the
  # behaviour of a run that has none of them.
  data = launch_config.to_dict(old)
  del data['mpo']['init'], data['mpo']['grad_clip_mode']
  del data['mpo']['policy_mean']
  assert launch_config.from_dict(data) == old


def test_epsilon_penalty_is_bounded_only_when_the_penalty_acts():
  with pytest.raises(config.ConfigError, match='epsilon_penalty'):
    config.replace(config.MPOConfig(), {'epsilon_penalty': 3.5})
  off = config.replace(config.MPOConfig(), {'action_penalization': False,
                                            'epsilon_penalty': 3.5})
  assert off.epsilon_penalty == 3.5
