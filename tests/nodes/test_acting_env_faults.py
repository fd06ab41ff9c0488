"""Actors and the evaluator survive environment faults: the actor reaches its
budget with nothing in replay that crosses a fault, the evaluator reports
only whole episodes, every fault is counted globally, and an environment
that never works fails the node by name.

The nodes run without Launchpad: Courier clients are replaced by objects
answering `client.futures.<method>()` with finished futures, and replay by
Tandem's real NStepAdder writing into a list instead of a Reverb stream.
"""

import os
import threading

import jax
import numpy as np
import pytest

from tandem.agents.runtime import counting
from tandem.agents.envs import env_faults
from tandem.agents.envs import environments
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import logs
from tandem.agents.replay import adders
from tandem.agents.replay import layouts
from tandem.agents.envs.env_faults import ENV_FAULTS
from tandem.agents.runtime.rundir import RunDir, read_errors
from tandem.agents.nodes import acting
from tandem.agents.nodes import node_envs
from tandem.agents.mpo import networks
from tandem.agents.mpo.config import MPOConfig
from tandem.launch.config import TrainConfig
from tests.envs.test_env_faults import ScriptedEnv, ScriptedFactory
from tests.fakes import CourierClient

OBS, ACT = 3, 1
ENV = 'fake:task'


class _Learner:
  def __init__(self):
    self.params = jax.device_get(
        networks.init_policy(jax.random.PRNGKey(0), OBS, ACT, (8,)))

  discriminator = None  # an adversarial test's

  def get_variables(self, names=None):
    if names is None:
      return self.params
    return [{'policy': self.params,
             'discriminator': self.discriminator}[n] for n in names]


class _Rows:
  """Stands in for adders._RowWriter: keeps the packed rows."""
  made = []

  def __init__(self, client, tables, chunk_length):
    del client, tables, chunk_length
    self.rows, self.episodes_ended = [], 0
    self.writer = self
    _Rows.made.append(self)

  def write(self, row):
    self.rows.append(np.array(row))

  def flush(self, *args, **kwargs):
    pass

  def end_episode(self, *args, **kwargs):
    self.episodes_ended += 1

  def close(self):
    pass


@pytest.fixture
def program(tmp_path, monkeypatch):
  """A run directory, a counter, a learner and fakes for the rest; the
  returned factory builds the environments (set its plans per test)."""
  factory = ScriptedFactory(length=5)
  monkeypatch.setattr(environments, 'make_environment', factory)
  _Rows.made = []
  monkeypatch.setattr(adders, '_RowWriter', _Rows)
  monkeypatch.setattr(adders, '_interruptible', lambda call, stop: call)
  monkeypatch.setattr(adders, '_wait_for_server', lambda client, stop: None)
  monkeypatch.setattr(
      adders, 'make_adder',
      lambda address, layout, *, n_step, discount, should_stop, table: \
          adders.NStepAdder(None, layout, n_step=n_step, discount=discount,
                            table=table))
  # The stop arrives as soon as an actor has spent its budget and waits.
  monkeypatch.setattr(acting, 'stop_requested', lambda timeout=0.0:
                      timeout > 0)
  # No stop comes after a crash (lifecycle's own stop_requested decides).
  monkeypatch.setattr(lifecycle, '_captured', [threading.Event()])
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.1)

  class Program:
    pass
  p = Program()
  p.factory, p.counter = factory, counting.Counter()
  p.rd = RunDir(str(tmp_path / 'run')).make()
  p.learner = _Learner()
  p.clients = dict(counter=CourierClient(p.counter),
                   learner=CourierClient(p.learner))
  return p


def _config(**kwargs):
  # A budget above replay_min_size and a refresh period within it, as
  # TrainConfig requires (no learner runs here).
  defaults = dict(env=ENV, seed=7, num_actors=1, envs_per_actor=2,
                  env_step_budget=80, counter_sync_period=4,
                  tensorboard=False, replay_min_size=16,
                  actor_update_period=20, mpo=MPOConfig(batch_size=16))
  return TrainConfig(**{**defaults, **kwargs})


def _actor(program, tc):
  replay_client = type('ReplayClient', (), {'server_address': 'nowhere'})()
  return acting.ActorNode(tc, 0, replay_client, program.clients['counter'],
                          program.clients['learner'], program.rd.root)


def _transitions():
  """(obs, next_obs) [N, 3] of every row written, as [instance, episode,
  t]."""
  layout = layouts.TransitionLayout(OBS, ACT)
  rows = np.stack([r for w in _Rows.made for r in w.rows])
  f = layout.unpack(rows)
  return f['observation'], f['next_observation']


def test_actor_survives_step_and_reset_faults_and_replay_never_crosses_one(
    program):
  tc = _config()
  # Builds in order: slot 0, slot 1, then slot 0's replacements. Slot 0's
  # first environment faults on its 7th step (2nd step of its 2nd episode),
  # the next one on its first reset; the third is healthy.
  program.factory.plans = [{'fail_step': 7}, {}, {'fail_reset': 1}]
  _actor(program, tc)._run()

  counts = program.counter.get_counts()
  assert counts['env_steps'] >= tc.env_step_budget  # the loop finished
  assert counts['env_faults'] == 2
  # Only steps that happened count: of every step call, the one that
  # raised made no transition.
  calls = sum(env.steps for env in program.factory.built)
  assert counts['env_steps'] == calls - 1
  assert len(program.factory.built) == 4
  # Rebuilt environments draw fresh, reproducible seeds.
  path = (7, node_envs.ACTOR_ENVS, 0, 0)
  assert program.factory.seeds == [
      node_envs.env_seed(path, 0), node_envs.env_seed((7, node_envs.ACTOR_ENVS, 0, 1),
                                                0),
      node_envs.env_seed(path, 1), node_envs.env_seed(path, 2)]
  assert len(set(program.factory.seeds)) == 4

  obs, next_obs = _transitions()
  # Every transition starts and ends in one environment object and one
  # episode: none spans the fault or the rebuild.
  np.testing.assert_array_equal(obs[:, :2], next_obs[:, :2])
  span = next_obs[:, 2] - obs[:, 2]
  assert span.min() >= 1 and span.max() <= tc.mpo.n_step
  # The faulted episode (instance 0, episode 1) completed one step before
  # the fault, less than an n-step window: its unfinished window is
  # dropped, not flushed as if the episode had ended there.
  assert tc.mpo.n_step > 1
  faulted = (obs[:, 0] == 0) & (obs[:, 1] == 1)
  assert not faulted.any()
  # Its first episode (five steps, ended normally) wrote every window.
  assert ((obs[:, 0] == 0) & (obs[:, 1] == 0)).sum() == 5
  # The healthy slot and the replacement both kept writing.
  assert {int(i) for i in obs[:, 0]} >= {1, 3}

  # Tracebacks are filed apart from crash reports.
  faults_dir = os.path.join(program.rd.errors, ENV_FAULTS)
  assert sorted(os.listdir(faults_dir)) == ['actor_0-1.txt', 'actor_0-2.txt']
  assert 'in step' in open(os.path.join(faults_dir, 'actor_0-1.txt')).read()
  assert 'in reset' in open(os.path.join(faults_dir, 'actor_0-2.txt')).read()
  assert read_errors(program.rd) == {}
  # The actor's rows carry the global fault count.
  rows = logs.read_csv(os.path.join(program.rd.logs, 'actor_0.csv'))
  assert rows[-1]['env_faults'] == 2
  assert all(r['episode_steps'] == 5 for r in rows)  # no partial episode


def test_actor_with_a_permanently_failing_environment_fails_by_name(program):
  tc = _config(envs_per_actor=1, max_consecutive_env_faults=2)
  program.factory.plans = [{'always_fail': True}] * 10
  with pytest.raises(env_faults.EnvFaultLimitExceeded) as e:
    _actor(program, tc).run()
  assert 'actor_0' in str(e.value) and repr(ENV) in str(e.value)
  assert program.counter.get_counts()['env_faults'] == 3
  # The node's crash report, which the launcher prints, names the error.
  crash = read_errors(program.rd)['actor_0']
  assert crash.startswith('EnvFaultLimitExceeded: actor_0')
  assert 'max_consecutive_env_faults=2' in crash


def _evaluator(program, tc):
  return acting.EvaluatorNode(tc, program.clients['counter'],
                              program.clients['learner'], program.rd.root)


def test_evaluator_reports_only_whole_episodes(program):
  tc = _config()
  # Episodes of 5 steps, reward 1: a whole one returns 5. The first
  # environment finishes one episode and faults 2 steps into its second;
  # the next one faults on its first reset.
  program.factory.plans = [{'fail_step': 8}, {'fail_reset': 1}]
  row = _evaluator(program, tc).evaluate_now(episodes=3)
  assert row['eval_return'] == row['eval_return_min'] == 5.0
  assert row['eval_env_faults'] == 2 and row['env_faults'] == 2
  assert program.counter.get_counts()['env_faults'] == 2
  # 3 whole episodes: one on the first environment, two on the third.
  built = program.factory.built
  assert len(built) == 3 and built[2].steps == 10
  assert program.factory.seeds[1:] == [
      node_envs.env_seed((7, node_envs.EVALUATOR_ENV), k) for k in (1, 2)]
  written = logs.read_csv(os.path.join(program.rd.logs, 'evaluator.csv'))
  assert written[-1]['env_faults'] == 2
  assert read_errors(program.rd) == {}


def test_the_final_evaluation_logs_the_counts_it_is_given(program):
  # The limiter passes the counts of the learner's final checkpoint: a
  # resume past the budget rolls the logs back to them and keeps the row.
  program.counter.increment(env_steps=900)
  given = dict(program.counter.get_counts(), env_steps=700)
  row = _evaluator(program, _config()).evaluate_now(1, 'final', given)
  assert row['env_steps'] == 700 and row['final'] == 1
  row = _evaluator(program, _config()).evaluate_now(1)
  assert row['env_steps'] == 900 and row['final'] == 0


def test_evaluator_gives_up_on_an_environment_that_never_finishes(program):
  tc = _config(max_consecutive_env_faults=1)
  # Every environment faults on its 3rd step: no episode ever completes.
  program.factory.plans = [{'fail_step': 3}] * 10
  with pytest.raises(env_faults.EnvFaultLimitExceeded, match='evaluator'):
    _evaluator(program, tc).evaluate_now(episodes=2)
  assert program.counter.get_counts()['env_faults'] == 2


def test_recorded_episodes_exclude_faulted_ones(program, tmp_path):
  """The adversarial evaluator scores recorded episodes: a faulted one must
  not be among them."""
  faults = env_faults.EnvFaults('evaluator', ENV, 3, str(tmp_path))
  program.factory.plans = [{'fail_step': 8}]
  env = node_envs.rebuilding_env(ENV, (7, node_envs.EVALUATOR_ENV), faults,
                              recover_on='episode')
  actor = type('Zero', (), {'select_action':
                            staticmethod(lambda o: np.zeros(ACT,
                                                            np.float32))})()
  returns, recorded = acting.run_episodes(env, actor, 2, record=True)
  assert returns == [5.0, 5.0] and len(recorded) == 2
  for ep in recorded:
    assert ep['observation'].shape == (5, OBS)
    # One environment object and episode per recording.
    assert len({tuple(o[:2]) for o in ep['next_observation']}) == 1
  assert recorded[1]['observation'][0, 0] == 1  # the rebuilt environment
  assert faults.total == 1


def test_adversarial_evaluator_scores_only_whole_episodes(program):
  from tandem.agents.nodes import ail_acting
  from tandem.agents.ail import discriminator as disc
  from tandem.launch.config import AILTrainConfig
  tc = AILTrainConfig(env=ENV, seed=7, tensorboard=False)
  program.learner.discriminator = jax.device_get(
      (disc.init_params(jax.random.PRNGKey(1), tc.ail, OBS, ACT),
       disc.init_normalizer(OBS)))
  scored, fetched = [], []
  get_variables = program.learner.get_variables

  def spied(names=None):
    if names is not None and 'discriminator' in names:
      fetched.append((tuple(names), program.factory.built[-1].steps))
    return get_variables(names)
  program.learner.get_variables = spied

  class Spy(ail_acting.AILEvaluatorNode):
    def _episode_metrics(self, episodes):
      scored.extend(episodes)
      return super()._episode_metrics(episodes)

  program.factory.plans = [{'fail_step': 8}]
  row = Spy(tc, program.clients['counter'], program.clients['learner'],
            program.rd.root).evaluate_now(episodes=2)
  assert row['eval_return_min'] == 5.0 and row['eval_env_faults'] == 1
  assert [len(ep['reward']) for ep in scored] == [5, 5]
  assert np.isfinite(row['learned_return'])
  # The discriminator scoring the row is the one of the row's counts,
  # fetched with the policy, in one call, before any episode step.
  assert fetched and fetched[-1] == (('policy', 'discriminator'), 0)


class _RewardsAbsAction(ScriptedEnv):
  """Reward |a| per step: a mean action of 0 scores 0, the policy's
  samples around it score above 0."""

  def step(self, action):
    timestep = super().step(action)
    return timestep._replace(reward=np.float32(abs(float(action[0]))))


def test_the_evaluator_scores_the_policys_samples_beside_its_mean(
    program, monkeypatch):
  monkeypatch.setattr(environments, 'make_environment',
                      lambda name=None, seed=None: _RewardsAbsAction(0))
  # Every parameter 0: the mean action is 0 for every observation and the
  # stddev the head's initial 0.5, so |a| of a sample is 0.4 on average.
  program.learner.params = jax.tree.map(np.zeros_like, program.learner.params)
  off = _evaluator(program, _config(tensorboard=True)).evaluate_now(
      episodes=4)
  assert off['eval_return'] == 0.0
  assert all(np.isnan(off[c]) for c in acting.SAMPLED_COLUMNS)
  # Unmeasured: NaN in the CSV's columns, no series in TensorBoard.
  from tensorboard.backend.event_processing import event_accumulator
  tb = event_accumulator.EventAccumulator(
      os.path.join(program.rd.logs, 'tb', 'evaluator'))
  tb.Reload()
  shown = {t.split('/', 1)[1] for t in tb.Tags()['scalars']}
  assert 'eval_return' in shown and not shown & set(acting.SAMPLED_COLUMNS)
  rows = [_evaluator(program, _config(eval_sampled=True)).evaluate_now(
      episodes=4) for _ in range(2)]
  for row in rows:
    assert row['eval_return'] == 0.0  # the mean action's, as before
    # 4 episodes of 5 steps: 20 samples of |N(0, 0.5²)|, mean 2.0 per
    # episode (each episode's sum has stddev ~0.67).
    assert 0.5 < row['eval_sampled_return_min'] <= row['eval_sampled_return']
    assert row['eval_sampled_return'] <= row['eval_sampled_return_max'] < 5.0
    assert 1.0 < row['eval_sampled_return'] < 3.0
  # Its own seed, from the run's: the same samples whenever the run is
  # repeated, others in a run of another seed (the environment here is
  # the same whatever its seed).
  assert rows[0]['eval_sampled_return'] == rows[1]['eval_sampled_return']
  other = _evaluator(program, _config(eval_sampled=True, seed=8))
  assert other.evaluate_now(episodes=4)['eval_sampled_return'] != (
      rows[0]['eval_sampled_return'])
  written = logs.read_csv(os.path.join(program.rd.logs, 'evaluator.csv'))
  assert [r['eval_sampled_return'] for r in written[1:3]] == [
      r['eval_sampled_return'] for r in rows]


class _RandomStarts(ScriptedEnv):
  """Each episode starts at a value drawn from its seed's stream and is
  rewarded that value per step: a return says which start it had."""

  def __init__(self, seed):
    super().__init__(0)
    self._rng = np.random.default_rng(seed)
    self._start = 0.0

  def reset(self):
    self._start = float(self._rng.uniform())
    return super().reset()

  def step(self, action):
    timestep = super().step(action)
    return timestep._replace(reward=np.float32(self._start))


def test_the_samples_leave_the_mean_actions_episodes_as_they_were(
    program, monkeypatch):
  monkeypatch.setattr(environments, 'make_environment',
                      lambda name=None, seed=None: _RandomStarts(seed))
  returns = {}
  for sampled in (False, True):
    evaluator = _evaluator(program, _config(eval_sampled=sampled))
    returns[sampled] = [evaluator.evaluate_now(episodes=2)
                        for _ in range(3)]
  # The mean action's episodes start from the same states, evaluation
  # after evaluation, whether samples ran between them or not.
  assert [r['eval_return'] for r in returns[True]] == [
      r['eval_return'] for r in returns[False]]
  # The samples' episodes start from their own stream.
  assert [r['eval_sampled_return'] for r in returns[True]] != [
      r['eval_return'] for r in returns[True]]


def test_a_fault_in_the_samples_episodes_is_counted_and_discarded(program):
  # Built in order: the mean action's environment, then the samples'; the
  # samples' faults 3 steps into its first episode and is rebuilt.
  program.factory.plans = [{}, {'fail_step': 3}]
  row = _evaluator(program, _config(eval_sampled=True)).evaluate_now(
      episodes=2)
  assert row['eval_return'] == 5.0
  assert row['eval_sampled_return'] == row['eval_sampled_return_min'] == 5.0
  assert row['eval_env_faults'] == 1 and row['env_faults'] == 1
  assert program.counter.get_counts()['env_faults'] == 1
  assert len(program.factory.built) == 3
  assert program.factory.seeds[2] == node_envs.env_seed(
      (7, node_envs.EVALUATOR_SAMPLED_ENV), 1)


def test_a_log_begun_without_the_samples_columns_is_warned_about(program,
                                                                 caplog):
  # An evaluator.csv from a version without eval_sampled: its header stays.
  path = os.path.join(program.rd.logs, 'evaluator.csv')
  with open(path, 'w') as f:
    f.write('env_steps,learner_steps,elapsed_s,eval_return\n0,0,0.0,1.0\n')
  with caplog.at_level('WARNING'):
    row = _evaluator(program, _config(eval_sampled=True)).evaluate_now(
        episodes=1)
  assert row['eval_sampled_return'] == 5.0
  assert 'began without the columns eval_sampled_return' in caplog.text
  assert 'eval_sampled_return' not in logs.read_csv(path)[-1]
