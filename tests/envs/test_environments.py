"""Tests for tandem.agents.envs.environments."""

import subprocess
import sys

import dm_env
import gymnasium
import numpy as np
import pytest

from tandem.agents.core.specs import Dims
from tandem.agents.envs import environments
from tandem.agents.envs import wrappers


def _fresh(name, seed=0):
  return environments.make_environment(name, seed=seed)


class _CountdownEnv(gymnasium.Env):
  """A tiny gymnasium env that terminates (or truncates) after 3 steps."""

  def __init__(self, terminate=True, truncate=False):
    self.observation_space = gymnasium.spaces.Box(
        -np.inf, np.inf, (2,), np.float64)
    # Asymmetric bounds, so that rescaling mistakes (e.g. symmetric scaling)
    # show up.
    self.action_space = gymnasium.spaces.Box(
        np.array([-3.0, 0.0], np.float32), np.array([1.0, 10.0], np.float32))
    self._terminate = terminate
    self._truncate = truncate
    self.resets = 0
    self.actions = []
    self._t = 0

  def reset(self, *, seed=None, options=None):
    super().reset(seed=seed)
    self.resets += 1
    self._t = 0
    return np.array([0.5, -0.25]), {}

  def step(self, action):
    self.actions.append(np.array(action))
    self._t += 1
    done = self._t >= 3
    obs = np.array([self._t, 2.0 * self._t])
    return obs, 1.5, done and self._terminate, done and self._truncate, {}


# ---------------------------------------------------------------------------
# Specs and observations.
# ---------------------------------------------------------------------------


def test_cartpole_specs():
  env = _fresh('cartpole:swingup')
  obs_spec = env.observation_spec()
  act_spec = env.action_spec()
  assert obs_spec.shape == (5,) and obs_spec.dtype == np.float32
  assert act_spec.shape == (1,) and act_spec.dtype == np.float32
  assert isinstance(act_spec, dm_env.specs.BoundedArray)
  np.testing.assert_array_equal(act_spec.minimum, [-1.0])
  np.testing.assert_array_equal(act_spec.maximum, [1.0])
  assert environments.env_dims(env) == Dims(observation=5, action=1)


def test_cartpole_timesteps_are_flat_float32():
  env = _fresh('cartpole:swingup')
  first = env.reset()
  assert first.first()
  assert first.reward is None and first.discount is None
  assert first.observation.shape == (5,)
  assert first.observation.dtype == np.float32
  mid = env.step(np.array([0.3], np.float32))
  assert mid.mid()
  assert mid.observation.shape == (5,)
  assert mid.observation.dtype == np.float32
  assert isinstance(mid.reward, np.float32)
  assert isinstance(mid.discount, np.float32)
  env.observation_spec().validate(mid.observation)


def test_dm_control_observation_concatenated_in_dict_order():
  from dm_control import suite
  native = suite.load('cartpole', 'swingup', task_kwargs={'random': 7})
  native_obs = native.reset().observation
  assert list(native_obs) == ['position', 'velocity']
  expected = np.concatenate(
      [native_obs['position'], native_obs['velocity']]).astype(np.float32)
  got = _fresh('cartpole:swingup', seed=7).reset().observation
  np.testing.assert_array_equal(got, expected)


def test_flatten_observation_keeps_mapping_order_and_scalars():
  # 'z' before 'a': sorted flattening (as dm-tree does) would give [2, 3, 1].
  obs = {'z': 1.0, 'a': np.array([[2.0], [3.0]])}
  got = wrappers.flatten_observation(obs)
  np.testing.assert_array_equal(got, [1.0, 2.0, 3.0])
  assert got.dtype == np.float32
  spec = {'z': dm_env.specs.Array((), np.float64),
          'a': dm_env.specs.Array((2, 1), np.float64)}
  assert wrappers.flat_size(spec) == 3


# ---------------------------------------------------------------------------
# Action checks and rescaling.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    'action, match',
    [
        (np.zeros((2,)), r'shape \(2,\).*expected shape \(1,\)'),
        (np.zeros((1, 1)), r'shape \(1, 1\)'),
        (np.float32(0.0), r'shape \(\)'),
        (np.array([np.nan]), 'non-finite'),
        (np.array([np.inf]), 'non-finite'),
        (np.array([1.01]), 'outside'),
        (np.array([-1.5]), 'outside'),
    ])
def test_invalid_actions_raise(action, match):
  env = _fresh('cartpole:swingup')
  env.reset()
  with pytest.raises(ValueError, match=match):
    env.step(action)


def test_actions_within_tolerance_are_accepted():
  env = _fresh('cartpole:swingup')
  env.reset()
  assert env.step(np.array([1.0 + 1e-7])).mid()
  assert env.step(np.array([-1.0 - 1e-7])).mid()


def test_pendulum_actions_rescaled_to_native_bounds(monkeypatch):
  env = _fresh('gym:Pendulum-v1')
  gym_env = env.environment.gym_env
  np.testing.assert_array_equal(gym_env.action_space.low, [-2.0])
  np.testing.assert_array_equal(gym_env.action_space.high, [2.0])

  received = []
  unwrapped = gym_env.unwrapped
  original_step = unwrapped.step

  def recording_step(action):
    received.append(np.array(action))
    return original_step(action)

  monkeypatch.setattr(unwrapped, 'step', recording_step)
  env.reset()
  for a in (-1.0, 0.0, 1.0, 0.5):
    env.step(np.array([a], np.float32))
  np.testing.assert_allclose(
      np.concatenate(received), [-2.0, 0.0, 2.0, 1.0], atol=1e-7)
  assert all(a.dtype == np.float32 and a.shape == (1,) for a in received)


def test_rescale_action_asymmetric_bounds():
  minimum = np.array([0.0, -3.0])
  maximum = np.array([10.0, 1.0])
  for action, expected in [([-1.0, -1.0], [0.0, -3.0]),
                           ([1.0, 1.0], [10.0, 1.0]),
                           ([0.0, 0.0], [5.0, -1.0]),
                           ([0.5, -0.5], [7.5, -2.0])]:
    np.testing.assert_allclose(
        wrappers.rescale_action(np.array(action), minimum, maximum),
        expected)


def test_gym_adapter_rescales_per_dimension():
  fake = _CountdownEnv()
  env = wrappers.NormalizedEnvironment(
      wrappers.GymnasiumAdapter(fake, seed=0))
  assert env.action_spec().shape == (2,)
  env.reset()
  env.step(np.array([-1.0, 1.0]))
  env.step(np.array([1.0, -1.0]))
  np.testing.assert_allclose(fake.actions[0], [-3.0, 10.0])
  np.testing.assert_allclose(fake.actions[1], [1.0, 0.0])


# ---------------------------------------------------------------------------
# Names.
# ---------------------------------------------------------------------------


_BUILD_AND_VALIDATE = [environments.make_environment,
                       environments.validate_environment_name]


@pytest.mark.parametrize('fn', _BUILD_AND_VALIDATE)
@pytest.mark.parametrize('name', ['cartpole:nope', 'nodomain:walk'])
def test_unknown_dm_control_name_lists_valid_names(fn, name):
  with pytest.raises(ValueError) as info:
    fn(name)
  message = str(info.value)
  assert name in message
  assert 'cartpole:swingup' in message and 'walker:walk' in message


@pytest.mark.parametrize('fn', _BUILD_AND_VALIDATE)
def test_unknown_gym_id_rejected(fn):
  with pytest.raises(ValueError) as info:
    fn('gym:NoSuchEnv-v0')
  message = str(info.value)
  assert 'NoSuchEnv-v0' in message
  assert 'Pendulum-v1' in message  # Registered ids are listed.


@pytest.mark.parametrize('fn', _BUILD_AND_VALIDATE)
def test_discrete_gym_env_rejected(fn):
  with pytest.raises(ValueError, match='continuous Box actions are required'):
    fn('gym:CartPole-v1')


@pytest.mark.parametrize('fn', _BUILD_AND_VALIDATE)
@pytest.mark.parametrize('name', ['cartpole', '', 'Pendulum-v1'])
def test_name_without_colon_explains_format(fn, name):
  with pytest.raises(ValueError, match='domain:task'):
    fn(name)


@pytest.mark.parametrize(
    'name', ['cartpole:swingup', 'walker:walk', 'gym:Pendulum-v1',
             'gym:MountainCarContinuous-v0'])
def test_valid_names_pass_validation(name):
  environments.validate_environment_name(name)


def test_import_is_lazy():
  code = ('import sys, tandem.agents.envs.environments; '
          'print(sorted(m for m in ("dm_control", "gymnasium", "mujoco") '
          'if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], check=True,
                       capture_output=True, text=True).stdout
  assert out.strip() == '[]'


# ---------------------------------------------------------------------------
# Episode boundaries.
# ---------------------------------------------------------------------------


def test_gym_truncation_has_discount_one_and_step_after_last_restarts():
  env = _fresh('gym:Pendulum-v1')  # TimeLimit of 200 steps.
  assert env.reset().first()
  action = np.zeros((1,), np.float32)
  for _ in range(199):
    ts = env.step(action)
    assert ts.mid() and ts.discount == 1.0
  last = env.step(action)
  assert last.last()
  assert last.discount == 1.0 and isinstance(last.discount, np.float32)
  assert isinstance(last.reward, np.float32)
  restarted = env.step(action)
  assert restarted.first()
  assert restarted.reward is None and restarted.discount is None
  assert env.step(action).mid()


@pytest.mark.parametrize('truncate', [False, True])
def test_gym_termination_has_discount_zero(truncate):
  fake = _CountdownEnv(terminate=True, truncate=truncate)
  env = wrappers.NormalizedEnvironment(
      wrappers.GymnasiumAdapter(fake, seed=0))
  env.reset()
  action = np.zeros((2,))
  steps = [env.step(action) for _ in range(3)]
  assert [ts.step_type for ts in steps] == [
      dm_env.StepType.MID, dm_env.StepType.MID, dm_env.StepType.LAST]
  # Termination wins over a simultaneous truncation: the state is terminal.
  assert steps[-1].discount == 0.0
  np.testing.assert_array_equal(steps[-1].observation, [3.0, 6.0])
  assert steps[-1].observation.dtype == np.float32
  assert fake.resets == 1
  assert env.step(action).first()
  assert fake.resets == 2
  assert len(fake.actions) == 3  # The action after LAST is not applied.


def test_gym_step_before_reset_starts_an_episode():
  fake = _CountdownEnv()
  env = wrappers.NormalizedEnvironment(
      wrappers.GymnasiumAdapter(fake, seed=0))
  assert env.step(np.zeros((2,))).first()
  assert fake.resets == 1 and not fake.actions


def test_dm_control_step_after_last_restarts():
  env = _fresh('cartpole:swingup')  # 1000 control steps per episode.
  env.reset()
  action = np.zeros((1,))
  ts = env.step(action)
  while not ts.last():
    ts = env.step(action)
  assert ts.discount == 1.0  # A time limit, not a terminal state.
  assert env.step(action).first()


# ---------------------------------------------------------------------------
# Seeding.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('name', ['cartpole:swingup', 'gym:Pendulum-v1'])
def test_same_seed_same_episodes(name):
  a, b, c = (_fresh(name, seed=s) for s in (3, 3, 4))
  first_a, first_b, first_c = (e.reset().observation for e in (a, b, c))
  np.testing.assert_array_equal(first_a, first_b)
  assert not np.array_equal(first_a, first_c)
  # Later resets continue the RNG: a new start state, still reproducible.
  second_a, second_b = a.reset().observation, b.reset().observation
  np.testing.assert_array_equal(second_a, second_b)
  assert not np.array_equal(first_a, second_a)


def test_only_lqr_among_dm_control_tasks_may_terminate():
  # may_terminate's list holds against the installed suite: a task class
  # that overrides get_termination can end an episode with discount 0.
  # (Classes are read from each domain's module; nothing is loaded.)
  import inspect
  from dm_control import suite
  from dm_control.rl import control
  overriding = {
      domain for domain, module in suite._DOMAINS.items()
      for _, cls in inspect.getmembers(module, inspect.isclass)
      if issubclass(cls, control.Task)
      and cls.get_termination is not control.Task.get_termination}
  assert overriding == {'lqr'}
  for domain, task in suite.ALL_TASKS:
    assert environments.may_terminate(f'{domain}:{task}') == (
        domain in overriding), (domain, task)
  assert environments.may_terminate('gym:Pendulum-v1')


@pytest.mark.parametrize('name', ['lqr:lqr_2_1', 'lqr:lqr_6_2'])
def test_lqr_episodes_end_at_the_suites_usual_1000_steps(name):
  # dm_control's LQR has no time limit of its own: a policy that never
  # reaches the origin (here, zero actions) would step for ever.
  env = environments.make_environment(name, seed=0)
  timestep, steps = env.reset(), 0
  zeros = np.zeros(env.action_spec().shape, np.float32)
  while not timestep.last() and steps <= 1000:
    timestep = env.step(zeros)
    steps += 1
  assert steps == 1000 and timestep.last()
  assert timestep.discount == 1.0   # a time limit, not a terminal state
  assert environments.may_terminate(name)   # it still may, near the origin
