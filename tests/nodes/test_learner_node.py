"""The MPO learner node's checkpoints (agents/nodes/learner_node.py)."""

import jax
import numpy as np
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.runtime.rundir import RunDir
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.nodes.learner_node import LearnerNode
from tandem.configs import mpo as named
from tandem.launch import config as config_lib
from tandem.launch import mpo as mpo_program
from tests.fakes import CourierClient, UncontactedReplay


def test_resumed_learner_stopped_before_any_step_keeps_its_counts(tmp_path):
  # A resumed learner stopped before its first counter call saves a stop
  # checkpoint; it must carry the restored counts, not an empty dict (a
  # later resume would then fall back to counter.json).
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  counts = {'env_steps': 1234, 'learner_steps': 0, 'actor_episodes': 3}
  directory = RunDir(str(tmp_path)).learner_checkpoints
  checkpointing.save_numbered(
      directory, 0, learner_lib.init(tc.mpo, dims, seed=tc.seed),
      metadata={'counts': counts, 'env': tc.env})
  node = LearnerNode(tc, dims, UncontactedReplay(), None, str(tmp_path),
                     resume=True)
  path = node.save_checkpoint()
  assert checkpointing.read_metadata(path)['counts'] == counts


def test_fresh_learner_checkpoint_before_any_step_has_no_counts(tmp_path):
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(), None, str(tmp_path))
  assert checkpointing.read_metadata(node.save_checkpoint())['counts'] == {}


@pytest.mark.parametrize('acting', ['online', 'target'])
def test_actors_get_the_policy_acting_policy_names(tmp_path, acting):
  # Acme's MPO serves the target policy; Tandem's default the online one.
  tc = config_lib.apply_overrides(named.tiny(), {'mpo.acting_policy': acting})
  dims = learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(), None, str(tmp_path))
  state = learner_lib.init(tc.mpo, dims, seed=0)
  moved = learner_lib.init(tc.mpo, dims, seed=7).policy  # an online step on
  state = learner_lib.to_numpy(state._replace(policy=moved))
  node.restore(state)
  want = state.target_policy if acting == 'target' else state.policy
  (served,) = node.get_variables(['policy'])
  for got, expected in ((served, want), (node.get_variables(), want),
                        (mpo_program.policy_of(tc, state), want)):
    # tree_map also fails on a differing structure (an empty tree too).
    jax.tree_util.tree_map(np.testing.assert_array_equal, got, expected)
  assert not np.array_equal(state.policy['mean']['w'],
                            state.target_policy['mean']['w'])


def test_a_checkpoint_between_an_update_and_its_counts_holds_the_states_steps(
    tmp_path):
  # The limiter's save can land after an update call and before the counter
  # answered for it: the learner steps saved are the state's, not the
  # previous call's (a resume would cut that call's log rows).
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(), None, str(tmp_path))
  state = learner_lib.init(tc.mpo, dims, seed=0)
  node.restore(learner_lib.to_numpy(state._replace(steps=state.steps + 8)))
  node._counts = {'env_steps': 500, 'learner_steps': 0, 'episodes': 1}
  counts = checkpointing.read_metadata(node.save_checkpoint())['counts']
  assert counts == {'env_steps': 500, 'learner_steps': 8, 'episodes': 1}


class _Stream:
  """Stands in for streams.BatchStream: a batch whenever asked."""

  def __init__(self, tc, dims):
    from tandem.agents.replay import layouts
    self._layout = layouts.TransitionLayout(dims.observation, dims.action)
    self._tc, self.taken, self.closed = tc, 0, False

  def get(self, timeout):
    from tandem.agents.replay import layouts
    del timeout
    self.taken += 1
    k, b = self._tc.mpo.sgd_steps_per_call, self._tc.mpo.batch_size
    rows = np.random.default_rng(self.taken).normal(
        size=(k * b, self._layout.width)).astype(np.float32)
    rows[:, -1] = 1.0  # the discount column: a mid-episode step
    return layouts.to_batch(rows, self._layout, 0.99, k, b)

  def close(self):
    self.closed = True


def test_after_finish_the_learner_takes_no_update(tmp_path):
  # The limiter calls finish() before the final evaluation: what is
  # evaluated, the checkpoint final.json names and the stop path's
  # checkpoint are then one state.
  from tandem.agents.runtime import counting
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(), CourierClient(
      counting.Counter()), str(tmp_path))
  node._streams[0] = _Stream(tc, dims)
  assert node.step() is not None  # an update happens before finish
  k = tc.mpo.sgd_steps_per_call
  assert node.get_steps() == k
  path = node.finish()['checkpoint']
  served = node.get_variables()
  assert node.step() is None and node.get_steps() == k
  jax.tree_util.tree_map(np.testing.assert_array_equal, served,
                         node.get_variables())
  assert path == checkpointing.numbered_path(
      RunDir(str(tmp_path)).learner_checkpoints, k)
  assert node.save_checkpoint() == path  # the stop path's: the same step


def test_finish_during_an_update_checkpoints_that_updates_counts(tmp_path):
  # The limiter's finish() can arrive while an update's counter call is
  # out. Its checkpoint must hold that call's counts, not the previous
  # call's: the call's log rows would otherwise lie past the checkpoint on
  # the env-step axis, and a resume past the budget would set the counter
  # back behind them and discard the final evaluation's row.
  import threading

  from tandem.agents.runtime import counting
  from tandem.agents.runtime import logs
  counter = counting.Counter()
  entered, release = threading.Event(), threading.Event()

  class SlowCounter:
    """Actors add 500 env steps while each learner increment is out."""

    def increment(self, **deltas):
      entered.set()
      assert release.wait(20)
      counter.increment(env_steps=500)
      return counter.increment(**deltas)

    def __getattr__(self, name):
      return getattr(counter, name)

  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  tc = config_lib.apply_overrides(tc, {'learner_log_every': 1})
  node = LearnerNode(tc, dims, UncontactedReplay(),
                     CourierClient(SlowCounter()), str(tmp_path))
  node._streams[0] = _Stream(tc, dims)
  release.set()
  assert node.step()['env_steps'] == 500
  release.clear()
  entered.clear()
  stepping = threading.Thread(target=node.step)
  stepping.start()
  assert entered.wait(20)
  done = {}
  finishing = threading.Thread(target=lambda: done.update(node.finish()))
  finishing.start()
  finishing.join(0.5)  # unfixed, finish() saved the stale counts by now
  release.set()
  stepping.join(20)
  finishing.join(20)
  k = tc.mpo.sgd_steps_per_call
  rows = logs.read_csv(f'{RunDir(str(tmp_path)).logs}/learner.csv')
  assert [r['learner_steps'] for r in rows] == list(range(1, 2 * k + 1))
  assert done['counts']['learner_steps'] == 2 * k
  assert done['counts']['env_steps'] >= max(r['env_steps'] for r in rows) \
      == 1000
  assert checkpointing.read_metadata(done['checkpoint'])['counts'] == \
      done['counts']


def test_finish_checkpoints_the_counters_counts_of_that_moment(tmp_path):
  # Actors go on stepping after the learner's last update: the final
  # evaluation logs the counts of the moment the learner finished, and the
  # checkpoint must hold those (with its own steps), not the last update's.
  from tandem.agents.runtime import counting
  counter = counting.Counter()
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(), CourierClient(counter),
                     str(tmp_path))
  node._streams[0] = _Stream(tc, dims)
  assert node.step()['env_steps'] == 0
  counter.increment(env_steps=123, episodes=1)
  done = node.finish()
  saved = checkpointing.read_metadata(done['checkpoint'])['counts']
  assert saved == done['counts']
  assert (saved['env_steps'], saved['episodes'], saved['learner_steps']) == \
      (123, 1, tc.mpo.sgd_steps_per_call)


def test_a_learner_crashing_mid_run_saves_its_state_first(tmp_path,
                                                          monkeypatch):
  # A counter call that fails with no stop behind it (the counter died) is
  # a crash of the learner, reported as one; the learning done since the
  # last periodic checkpoint is saved on the way, not lost.
  import threading

  from tandem.agents.runtime import counting
  from tandem.agents.runtime import lifecycle
  monkeypatch.setattr(lifecycle, '_captured', [])
  lifecycle.capture_stop_event(threading.Event())  # never set
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.1)
  counter = counting.Counter()

  class DyingCounter:
    """Answers the first update's increment, fails the second's."""

    def increment(self, **deltas):
      if counter.get_counts().get('learner_steps', 0):
        raise RuntimeError('Unavailable: the counter is gone')
      return counter.increment(**deltas)

    def __getattr__(self, name):
      return getattr(counter, name)

  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  tc = config_lib.apply_overrides(tc, {'checkpoint_period_s': 1000.0})
  node = LearnerNode(tc, dims, UncontactedReplay(),
                     CourierClient(DyingCounter()), str(tmp_path))
  stream = node._streams[0] = _Stream(tc, dims)
  with pytest.raises(RuntimeError, match='counter is gone'):
    node._run()
  k = tc.mpo.sgd_steps_per_call
  directory = RunDir(str(tmp_path)).learner_checkpoints
  latest = checkpointing.latest(directory)
  assert latest == checkpointing.numbered_path(directory, 2 * k)
  assert checkpointing.read_metadata(latest)['counts']['learner_steps'] == \
      2 * k
  assert stream.closed


def test_a_learner_whose_crash_save_fails_reports_the_crash(tmp_path,
                                                            monkeypatch):
  import threading

  from tandem.agents.runtime import counting
  from tandem.agents.runtime import lifecycle
  monkeypatch.setattr(lifecycle, '_captured', [])
  lifecycle.capture_stop_event(threading.Event())
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.1)
  counter = counting.Counter()

  class DyingCounter:
    def increment(self, **deltas):
      raise RuntimeError('the original failure')

    def __getattr__(self, name):
      return getattr(counter, name)

  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(),
                     CourierClient(DyingCounter()), str(tmp_path))
  node._streams[0] = _Stream(tc, dims)
  tried = []

  def full_disk():
    tried.append(1)
    raise OSError(28, 'No space left on device')
  monkeypatch.setattr(node, 'save_checkpoint', full_disk)
  with pytest.raises(RuntimeError, match='the original failure'):
    node._run()
  assert tried  # the save was tried; its error did not replace the crash's


def test_a_learner_crashing_before_any_update_writes_no_checkpoint(
    tmp_path, monkeypatch):
  # Its state is the initial one (or the checkpoint it was restored from):
  # a checkpoint of it would add nothing, and a fresh run's would carry no
  # counts.
  import threading

  from tandem.agents.runtime import lifecycle
  monkeypatch.setattr(lifecycle, '_captured', [])
  lifecycle.capture_stop_event(threading.Event())
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.1)

  class BrokenCounter:
    def set_extra(self, **values):
      raise RuntimeError('the counter is gone')

  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  node = LearnerNode(tc, dims, UncontactedReplay(),
                     CourierClient(BrokenCounter()), str(tmp_path))
  with pytest.raises(RuntimeError, match='counter is gone'):
    node._run()
  assert checkpointing.latest(
      RunDir(str(tmp_path)).learner_checkpoints) is None


def test_a_restored_learner_gives_the_counter_its_checkpoints_steps(
    tmp_path, monkeypatch):
  # After a crash counter.json may be ahead of (or behind) the learner's
  # newest checkpoint; the restored learner's steps are the truth, and it
  # tells the counter so before its first update.
  import threading

  import jax.numpy as jnp

  from tandem.agents.runtime import counting
  from tandem.agents.runtime import lifecycle
  monkeypatch.setattr(lifecycle, '_captured', [])
  lifecycle.capture_stop_event(threading.Event())
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.1)
  tc, dims = named.tiny(), learner_lib.Dims(5, 1)
  state = learner_lib.init(tc.mpo, dims, seed=tc.seed)._replace(
      steps=jnp.int32(40))
  checkpointing.save_numbered(
      RunDir(str(tmp_path)).learner_checkpoints, 40, state,
      metadata={'counts': {'env_steps': 3000, 'learner_steps': 40},
                'env': tc.env})
  counter = counting.Counter()
  counter.increment(env_steps=5000, learner_steps=999)

  class StopsAtTheFirstUpdate:
    def increment(self, **deltas):
      raise RuntimeError('stop here')

    def __getattr__(self, name):
      return getattr(counter, name)

  node = LearnerNode(tc, dims, UncontactedReplay(),
                     CourierClient(StopsAtTheFirstUpdate()), str(tmp_path),
                     resume=True)
  node._streams[0] = _Stream(tc, dims)
  with pytest.raises(RuntimeError, match='stop here'):
    node._run()
  assert counter.get_counts()['learner_steps'] == 40
