"""EnvGroup steps K environments in lockstep: episodes end and restart per
environment, each adder sees its own environment's steps, and the shared
actor counts every env step."""

import dm_env
from dm_env import specs
import numpy as np
import pytest

from tandem.agents.nodes import acting

from tandem.agents.nodes import node_envs


class _Episodic(dm_env.Environment):
  """Episodes of `length` steps; reward = 1 + the action's first entry;
  the observation counts steps within the episode."""

  def __init__(self, length):
    self._length, self._t = length, 0

  def reset(self):
    self._t = 0
    return dm_env.restart(np.zeros(2, np.float32))

  def step(self, action):
    self._t += 1
    obs = np.full(2, self._t, np.float32)
    reward = np.float32(1.0 + action[0])
    if self._t == self._length:
      return dm_env.termination(reward, obs)
    return dm_env.transition(reward, obs, np.float32(1.0))

  def observation_spec(self):
    return specs.Array((2,), np.float32)

  def action_spec(self):
    return specs.BoundedArray((1,), np.float32, -1.0, 1.0)


class _ConstantActor:
  def __init__(self, value):
    self.value, self.steps, self.batches = value, 0, []

  def select_action(self, observations):
    self.batches.append(np.array(observations))
    return np.full((len(observations), 1), self.value, np.float32)

  def update(self, steps=1, wait=False):
    self.steps += steps


class _RecordingAdder:
  def __init__(self):
    self.calls = []

  def add_first(self, timestep):
    self.calls.append(('first', float(timestep.observation[0])))

  def add(self, action, timestep):
    self.calls.append(('add', float(timestep.observation[0]),
                       bool(timestep.last())))

  def reset(self):
    self.calls.append(('reset',))


def test_episodes_end_and_restart_per_environment():
  actor = _ConstantActor(0.5)
  adders = [_RecordingAdder(), _RecordingAdder()]
  group = acting.EnvGroup([_Episodic(2), _Episodic(3)], actor, adders)
  ended = [group.step() for _ in range(6)]
  # env 0 ends at steps 2, 4, 6; env 1 at 3, 6; return = 1.5 per step.
  assert ended == [[], [(3.0, 2)], [(4.5, 3)], [(3.0, 2)], [],
                   [(3.0, 2), (4.5, 3)]]
  assert actor.steps == 12 and len(group) == 2
  assert adders[0].calls[:5] == [('first', 0), ('add', 1, False),
                                 ('add', 2, True), ('first', 0),
                                 ('add', 1, False)]
  assert [c for c in adders[1].calls if c[0] == 'first'] == [('first', 0)] * 3
  # The policy saw both environments' observations in one batch per step,
  # and each restart's first observation after an episode ended.
  np.testing.assert_array_equal(actor.batches[2][:, 0], [0, 2])
  np.testing.assert_array_equal(actor.batches[3][:, 0], [1, 0])


class _FaultsOnStep(_Episodic):
  """As RebuildingEnv after a fault it survived: `step` returns None."""

  def __init__(self, length, fail_at):
    super().__init__(length)
    self._calls, self._fail_at = 0, fail_at

  def step(self, action):
    self._calls += 1
    return None if self._calls == self._fail_at else super().step(action)


def test_a_faulted_env_step_is_not_counted_as_one():
  actor = _ConstantActor(0.0)
  adders = [_RecordingAdder(), _RecordingAdder()]
  group = acting.EnvGroup([_Episodic(5), _FaultsOnStep(5, fail_at=2)],
                          actor, adders)
  completed = []
  for _ in range(3):
    group.step()
    completed.append(group.completed)
  assert completed == [2, 1, 2]
  assert actor.steps == 5  # the refresh period counts real steps only
  # The faulted episode was dropped and a new one begun.
  assert [c[0] for c in adders[1].calls] == ['first', 'add', 'reset',
                                             'first', 'add']


def test_works_without_adders():
  group = acting.EnvGroup([_Episodic(1)], _ConstantActor(0.0))
  assert group.step() == [(1.0, 1)]


def test_adders_must_match_environments():
  with pytest.raises(ValueError, match='1 adders for 2 environments'):
    acting.EnvGroup([_Episodic(2), _Episodic(2)], _ConstantActor(0.0),
                    [_RecordingAdder()])


def test_seeds_differ_across_actors_environments_and_roles():
  seeds = {node_envs.seed_for(0, node_envs.ACTOR_ENVS, a, k)
           for a in range(50) for k in range(8)}
  seeds.add(node_envs.seed_for(0, node_envs.EVALUATOR_ENV))
  seeds.add(node_envs.seed_for(1, node_envs.ACTOR_ENVS, 0, 0))
  assert len(seeds) == 50 * 8 + 2
  assert node_envs.seed_for(3, node_envs.ACTOR_POLICY, 1) == \
      node_envs.seed_for(3, node_envs.ACTOR_POLICY, 1)
  assert all(0 <= s < 2**32 for s in seeds)


def test_run_episodes_returns_and_optionally_records():
  import jax
  from tandem.agents.envs import environments
  from tandem.agents.mpo import actor as actor_lib
  from tandem.agents.mpo import networks
  from tandem.agents.mpo.config import MPOConfig
  env = environments.make_environment('cartpole:balance', seed=0)
  cfg = MPOConfig(policy_layers=(8,))
  params = networks.init_policy(jax.random.PRNGKey(0), 5, 1, (8,))
  actor = actor_lib.Actor(cfg, params, seed=0, deterministic=True)
  returns, recorded = acting.run_episodes(env, actor, 1)
  assert len(returns) == 1 and recorded == []
  returns2, recorded = acting.run_episodes(env, actor, 1, record=True)
  (ep,) = recorded
  assert ep['observation'].shape == (1000, 5) and ep['action'].shape == (
      1000, 1)
  assert returns2[0] == pytest.approx(float(ep['reward'].sum()), rel=1e-5)
  np.testing.assert_array_equal(ep['observation'][1:],
                                ep['next_observation'][:-1])


def test_each_resume_draws_new_actor_and_evaluator_streams_reproducibly():
  # The first launch keeps the run seed's own paths.
  assert node_envs.launch_seed_path(5, 1) == (5,)
  paths = lambda seg: (
      [(*node_envs.launch_seed_path(5, seg), node_envs.ACTOR_ENVS, a, k)
       for a in range(3) for k in range(4)] +
      [(*node_envs.launch_seed_path(5, seg), node_envs.ACTOR_POLICY, a)
       for a in range(3)] +
      [(*node_envs.launch_seed_path(5, seg), node_envs.EVALUATOR_ENV)])
  seeds = {seg: [node_envs.seed_for(*p) for p in paths(seg)]
           for seg in (1, 2, 3)}
  # Distinct streams within a launch and across launches ...
  everything = [s for seg in seeds.values() for s in seg]
  assert len(set(everything)) == len(everything)
  # ... and a repeated resume draws the same ones.
  assert seeds[2] == [node_envs.seed_for(*p) for p in paths(2)]
  with pytest.raises(ValueError, match='segment'):
    node_envs.launch_seed_path(5, 0)
  # The nodes take their root from the segment they are launched in.
  from tandem.configs import mpo as named
  tc = named.tiny()

  class _Replay:
    server_address = 'localhost:0'  # never contacted
  node = acting.ActorNode(tc, 0, _Replay(), None, None, '/tmp/x', segment=3)
  assert node._root == node_envs.launch_seed_path(tc.seed, 3)
  ev = acting.EvaluatorNode(tc, None, None, '/tmp/x', segment=2)
  assert ev._root == node_envs.launch_seed_path(tc.seed, 2)


@pytest.mark.parametrize('env_steps, expected', [
    (0, 0), (1, 0), (1_400, 0), (9_999, 0), (10_000, 20_000),
    (55_000, 60_000)])
def test_first_evaluation_is_at_once_in_the_first_period(env_steps, expected):
  # A fresh run evaluates its initial policy however many env steps the
  # actors counted before the evaluator started; a resumed one waits for
  # its next multiple of the period.
  assert acting.first_evaluation_at(env_steps, 10_000) == expected


@pytest.mark.parametrize('stop_after_s, crashes', [(0.1, False), (None, True)])
def test_an_actor_write_failing_as_the_program_stops_is_the_stop(
    tmp_path, monkeypatch, stop_after_s, crashes):
  # Replay stopping first cancels the writes blocked on its rate limiter
  # (Reverb raises RuntimeError); the actor's own stop comes a moment later.
  # Without a stop the error is the actor's crash, written to errors/.
  import threading

  from tandem.agents.runtime import lifecycle
  from tandem.configs import mpo as named
  monkeypatch.setattr(lifecycle, '_captured', [])
  stop = threading.Event()
  lifecycle.capture_stop_event(stop)
  # Long for the stop half (the wait ends when the stop comes), short for
  # the other.
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S',
                      10.0 if stop_after_s else 0.2)

  class _Replay:
    server_address = 'localhost:0'  # never contacted
  node = acting.ActorNode(named.tiny(), 0, _Replay(), None, None,
                          str(tmp_path), segment=1)

  def cancelled():
    raise RuntimeError('Cancelled: RateLimiter has been cancelled')
  monkeypatch.setattr(node, '_run', cancelled)
  if stop_after_s:
    threading.Timer(stop_after_s, stop.set).start()
    node.run()
    assert not (tmp_path / 'errors' / 'actor_0.txt').exists()
  else:
    with pytest.raises(RuntimeError, match='Cancelled'):
      node.run()
    assert 'Cancelled' in (tmp_path / 'errors' / 'actor_0.txt').read_text()


def test_an_injected_actor_crash_is_reported_at_once(tmp_path, monkeypatch):
  from tandem.agents.runtime import lifecycle
  from tandem.configs import mpo as named
  monkeypatch.setattr(lifecycle, '_captured', [])
  lifecycle.capture_stop_event(__import__('threading').Event())
  waits = []
  monkeypatch.setattr(lifecycle, 'stop_requested',
                      lambda timeout=0.0: waits.append(timeout) or False)

  class _Replay:
    server_address = 'localhost:0'
  node = acting.ActorNode(named.tiny(), 0, _Replay(), None, None,
                          str(tmp_path), segment=1)

  def crash():
    raise acting.InjectedCrash('injected')
  monkeypatch.setattr(node, '_run', crash)
  with pytest.raises(acting.InjectedCrash):
    node.run()
  assert waits == []  # no grace waited for
