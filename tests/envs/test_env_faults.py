"""RebuildingEnv and EnvFaults: an environment that raises is rebuilt with a
fresh seed, the fault is counted and its traceback filed outside the crash
reports, and a slot that keeps raising fails loudly."""

import os

import dm_env
from dm_env import specs
import numpy as np
import pytest

from tandem.agents.envs import env_faults
from tandem.agents.envs import wrappers
from tandem.agents.envs.env_faults import ENV_FAULTS
from tandem.agents.runtime.rundir import RunDir, read_errors


class ScriptedEnv(dm_env.Environment):
  """Episodes of `length` steps with reward 1 per step; the observation is
  [instance, episode, t], so a transition shows which environment object and
  episode each of its ends came from. Raises on its `fail_step`-th step
  (counted over its whole life) or on its `fail_reset`-th reset."""

  def __init__(self, instance, length=5, fail_step=None, fail_reset=None,
               always_fail=False):
    self.instance, self.length = instance, length
    self.fail_step, self.fail_reset = fail_step, fail_reset
    self.always_fail = always_fail
    self.steps = self.resets = 0
    self.episode, self.t = -1, 0
    self.closed = False

  def _obs(self):
    return np.array([self.instance, self.episode, self.t], np.float32)

  def reset(self):
    self.resets += 1
    if self.resets == self.fail_reset:
      raise RuntimeError(f'injected reset fault (instance {self.instance})')
    self.episode, self.t = self.episode + 1, 0
    return dm_env.restart(self._obs())

  def step(self, action):
    self.steps += 1
    if self.always_fail or self.steps == self.fail_step:
      raise RuntimeError(f'injected step fault (instance {self.instance})')
    self.t += 1
    if self.t == self.length:
      return dm_env.termination(np.float32(1.0), self._obs())
    return dm_env.transition(np.float32(1.0), self._obs(), np.float32(1.0))

  def observation_spec(self):
    return specs.Array((3,), np.float32)

  def action_spec(self):
    return specs.BoundedArray((1,), np.float32, -1.0, 1.0)

  def close(self):
    self.closed = True


class ScriptedFactory:
  """Builds ScriptedEnvs from a list of plans, one per build in order
  (kwargs of ScriptedEnv; builds past the list are healthy), recording the
  seeds it was given. `make_environment`'s signature, for monkeypatching."""

  def __init__(self, plans=(), length=5):
    self.plans, self.length = list(plans), length
    self.seeds, self.built = [], []

  def __call__(self, name=None, seed=None):
    del name
    n = len(self.built)
    plan = self.plans[n] if n < len(self.plans) else {}
    env = ScriptedEnv(n, **{'length': self.length, **plan})
    self.seeds.append(seed)
    self.built.append(env)
    return env


def _faults(tmp_path, max_consecutive=3, reports=None):
  rd = RunDir(str(tmp_path / 'run')).make()
  report = None
  if reports is not None:
    report = lambda: reports.append(1) or {'env_faults': len(reports)}
  return rd, env_faults.EnvFaults('actor_3', 'fake:task', max_consecutive,
                                  rd.errors, report=report)


def _slot(factory, faults, **kwargs):
  return env_faults.RebuildingEnv(lambda seed: factory(seed=seed),
                                  lambda k: 100 + k, faults, **kwargs)


def test_a_step_fault_rebuilds_with_a_fresh_seed_and_is_recorded(tmp_path):
  reports = []
  rd, faults = _faults(tmp_path, reports=reports)
  factory = ScriptedFactory([{'fail_step': 2}])
  env = _slot(factory, faults)
  env.reset()
  assert env.step([0.0]).observation.tolist() == [0, 0, 1]
  assert env.step([0.0]) is None  # the episode is lost
  assert factory.seeds == [100, 101] and factory.built[0].closed
  assert env.environment is factory.built[1]
  assert env.reset().observation.tolist() == [1, 0, 0]
  assert faults.total == 1 and reports == [1] and faults.global_count == 1
  text = open(os.path.join(rd.errors, ENV_FAULTS, 'actor_3-1.txt')).read()
  assert 'injected step fault (instance 0)' in text and 'in step' in text
  assert 'Traceback' in text
  # Not a crash report: the launcher must not name this node as crashed.
  assert read_errors(rd) == {}


def test_a_reset_fault_is_retried_on_a_new_environment(tmp_path):
  rd, faults = _faults(tmp_path)
  factory = ScriptedFactory([{'fail_reset': 1}, {'fail_reset': 1}])
  env = _slot(factory, faults)
  first = env.reset()
  assert first.first() and first.observation.tolist() == [2, 0, 0]
  assert factory.seeds == [100, 101, 102]
  assert sorted(os.listdir(os.path.join(rd.errors, ENV_FAULTS))) == [
      'actor_3-1.txt', 'actor_3-2.txt']
  assert faults.in_a_row(0) == 2


def test_a_failing_rebuild_is_one_more_fault(tmp_path):
  _, faults = _faults(tmp_path)
  calls = []

  def make(seed):
    calls.append(seed)
    if len(calls) == 2:
      raise OSError('no license server')
    return ScriptedEnv(len(calls), fail_step=1 if len(calls) == 1 else None)

  env = env_faults.RebuildingEnv(make, lambda k: k, faults)
  env.reset()
  assert env.step([0.0]) is None
  assert calls == [0, 1, 2] and faults.total == 2


def test_an_always_failing_environment_fails_the_node_by_name(tmp_path):
  rd, faults = _faults(tmp_path, max_consecutive=3)
  factory = ScriptedFactory([{'always_fail': True}] * 10)
  env = _slot(factory, faults)
  env.reset()
  for _ in range(3):
    assert env.step([0.0]) is None
    env.reset()
  with pytest.raises(env_faults.EnvFaultLimitExceeded) as e:
    env.step([0.0])
  message = str(e.value)
  assert 'actor_3' in message and "'fake:task'" in message
  assert '4 times in a row' in message
  assert 'max_consecutive_env_faults=3' in message
  assert isinstance(e.value.__cause__, RuntimeError)
  # The fault that failed the node is counted and filed like the others.
  assert faults.total == 4
  assert len(os.listdir(os.path.join(rd.errors, ENV_FAULTS))) == 4


def test_zero_tolerance_fails_on_the_first_fault(tmp_path):
  _, faults = _faults(tmp_path, max_consecutive=0)
  env = _slot(ScriptedFactory([{'fail_step': 1}]), faults)
  env.reset()
  with pytest.raises(env_faults.EnvFaultLimitExceeded, match='1 times'):
    env.step([0.0])


def test_a_completed_step_ends_a_run_of_faults(tmp_path):
  _, faults = _faults(tmp_path, max_consecutive=1)
  # Each environment manages one step, then faults: progress every time.
  factory = ScriptedFactory([{'fail_step': 2}] * 6)
  env = _slot(factory, faults)
  for _ in range(5):
    env.reset()
    assert env.step([0.0]) is not None
    assert env.step([0.0]) is None
  assert faults.total == 5 and faults.in_a_row(0) == 1


def _play(env) -> bool:
  """Runs one episode: True if it completed, False if it faulted."""
  timestep = env.reset()
  while not timestep.last():
    timestep = env.step([0.0])
    if timestep is None:
      return False
  return True


def test_with_recover_on_episode_only_a_whole_episode_ends_a_run(tmp_path):
  _, faults = _faults(tmp_path, max_consecutive=2)
  # Every environment faults on its 3rd step, inside its first episode:
  # steps are made, episodes never finish.
  factory = ScriptedFactory([{'fail_step': 3}] * 6, length=5)
  env = _slot(factory, faults, recover_on='episode')
  assert not _play(env) and not _play(env)
  with pytest.raises(env_faults.EnvFaultLimitExceeded):
    _play(env)
  # Faults with a completed episode between them are fine: each environment
  # finishes one episode, then faults in its second.
  _, faults = _faults(tmp_path / 'b', max_consecutive=1)
  factory = ScriptedFactory([{'fail_step': 7}] * 3, length=5)
  env = _slot(factory, faults, recover_on='episode')
  assert [_play(env) for _ in range(6)] == [True, False] * 3
  assert faults.total == 3 and faults.in_a_row(0) == 1


def test_a_bad_action_is_the_agents_bug_not_a_fault(tmp_path):
  _, faults = _faults(tmp_path)

  class Strict(ScriptedEnv):
    def step(self, action):
      wrappers.check_action(action, 1)
      return super().step(action)

  env = env_faults.RebuildingEnv(lambda seed: Strict(0), lambda k: k, faults)
  env.reset()
  with pytest.raises(wrappers.ActionError, match='non-finite'):
    env.step(np.array([np.nan]))
  assert faults.total == 0
  assert issubclass(wrappers.ActionError, ValueError)


def test_recover_on_is_checked(tmp_path):
  _, faults = _faults(tmp_path)
  with pytest.raises(ValueError, match='recover_on'):
    _slot(ScriptedFactory(), faults, recover_on='never')
