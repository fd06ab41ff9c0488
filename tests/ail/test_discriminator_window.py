"""The discriminator window: the discriminator's agent batches from the
newest N transitions (a second replay table), the generator's from the whole
agent table at the replay ratio it has without the window."""

import dataclasses
import os

import numpy as np
import pytest

from tandem.agents.ail.config import AILConfig
from tandem.agents.core.fields import ConfigError
from tandem.agents.nodes import ail_learner_node
from tandem.agents.replay import adders
from tandem.agents.replay import layouts
from tandem.configs import ail as named
from tandem.launch import ail as ail_program
from tandem.launch import config as config_lib
from tests import REPO_ROOT


@pytest.mark.parametrize('window', [-1, 1, 255, 2.5, True])
def test_a_window_is_zero_or_at_least_one_batch(window):
  with pytest.raises(ConfigError, match='discriminator_window'):
    AILConfig(batch_size=256, discriminator_window=window)
  assert AILConfig(batch_size=256,
                   discriminator_window=256).discriminator_window == 256


def test_a_window_larger_than_the_replay_is_refused_by_name():
  with pytest.raises(ConfigError, match='discriminator_window.*replay_max_size'):
    config_lib.apply_overrides(named.airl_cartpole(), {
        'ail.discriminator_window': 20_000, 'replay_max_size': 10_000})


def test_without_a_window_there_is_one_table_at_the_runs_ratio():
  tc = named.airl_cartpole()
  assert tc.ail.discriminator_window == 0
  (agent,) = ail_program.replay_tables(tc)
  assert agent == layouts.TableSpec(
      layouts.TABLE, tc.replay_max_size, tc.replay_min_size,
      tc.samples_per_insert, tc.replay_error_buffer)
  assert [u.table for u in _updates(tc)] == [layouts.TABLE, layouts.TABLE]


def test_a_window_adds_the_recent_table_and_keeps_the_generators_ratio():
  tc = config_lib.apply_overrides(named.airl_cartpole(), {
      'ail.discriminator_window': 5000, 'ail.discriminator_steps_per_round': 2,
      'ail.discriminator_steps_per_call': 1, 'ail.batch_size': 128,
      'samples_per_insert': 48.0})
  agent, recent = ail_program.replay_tables(tc)
  # A round draws D·B_disc = 2·128 = 256 and G·B_gen = 8·256 = 2048 rows:
  # the generator's share is 2048 / 2304, and its 48 · 2048/2304 samples
  # per insert are what it drew when both shared the agent table.
  assert agent.samples_per_insert == pytest.approx(48.0 * 2048 / 2304)
  # The same share of the error buffer: actors lead the learner by as many
  # env steps as they do without the window.
  assert agent.error_buffer == pytest.approx(tc.replay_error_buffer * 2048
                                             / 2304)
  assert (agent.name, agent.max_size, agent.min_size) == (
      layouts.TABLE, tc.replay_max_size, tc.replay_min_size)
  assert recent == layouts.TableSpec(layouts.RECENT_TABLE, 5000, 1000, None)
  # The discriminator's stream reads that table, one call ahead (its rows
  # age while they wait); the generator's the agent table, as before.
  discriminator, generator = _updates(tc)
  assert (discriminator.table, discriminator.prefetch) == (
      layouts.RECENT_TABLE, 1)
  assert (generator.table, generator.prefetch) == (layouts.TABLE, 2)
  # A window smaller than replay_min_size can be sampled once it is full.
  small = dataclasses.replace(tc, ail=dataclasses.replace(
      tc.ail, discriminator_window=256))
  assert ail_program.replay_tables(small)[1].min_size == 256


def test_actors_rows_reach_both_tables_and_the_window_keeps_the_newest():
  import reverb
  layout = layouts.WindowLayout(observation_dim=2, action_dim=1, n_step=1)
  specs = (layouts.TableSpec(layouts.TABLE, 1000, 1, 100.0, 1000.0),
           layouts.TableSpec(layouts.RECENT_TABLE, 4, 4))
  server = reverb.Server([layouts.table_of(layout, s) for s in specs])
  try:
    client = reverb.Client(f'localhost:{server.port}')
    adder = adders.WindowAdder(client, layout, discount=0.99,
                               table=(layouts.TABLE, layouts.RECENT_TABLE))
    import dm_env
    adder.add_first(dm_env.restart(np.zeros(2, np.float32)))
    for t in range(1, 11):   # ten steps: observations 1..10, then the end
      step = dm_env.truncation if t == 10 else dm_env.transition
      adder.add(np.array([0.5], np.float32),
                step(1.0, np.full(2, t, np.float32)))
    adder.close()
    sizes = {name: info.current_size
             for name, info in client.server_info().items()}
    assert sizes == {layouts.TABLE: 10, layouts.RECENT_TABLE: 4}
    stream = reverb.TrajectoryDataset.from_table_signature(
        server_address=f'localhost:{server.port}',
        table=layouts.RECENT_TABLE, max_in_flight_samples_per_worker=1,
        rate_limiter_timeout_ms=1000)
    rows = np.stack([s.data[layouts.COLUMN] for s in
                     stream.take(200).as_numpy_iterator()])
    windows = layout.unpack(rows)
    # Each row's next observation: the newest four steps only (7..10), each
    # drawn (200 uniform draws miss one with probability 4·0.75^200).
    nexts = {int(w) for w in windows.observations[:, 1, 0]}
    assert nexts == {7, 8, 9, 10}
  finally:
    server.stop()


def _updates(tc):
  """The learner node's two kinds of update call for tc (its learner
  state is built; nothing is started)."""
  dims = ail_program.mpo.env_dims(tc.env)
  tc = dataclasses.replace(tc, demos=_demos())
  return ail_learner_node.ail_algorithm(tc, dims).updates


def _demos():
  return os.path.join(REPO_ROOT, 'tests', 'data',
                      'cartpole_swingup_expert_2ep.npz')


def test_the_learner_node_opens_each_stream_on_its_updates_table(
    tmp_path, monkeypatch):
  """LearnerNode hands each update's table and read-ahead to its stream
  (the stream itself is recorded, not started)."""
  import types
  from tandem.agents.nodes import learner_node
  opened = []

  class Recorded:
    def __init__(self, address, convert, **kwargs):
      opened.append(dict(kwargs, address=address))

  monkeypatch.setattr(learner_node.streams, 'BatchStream', Recorded)
  tc = config_lib.apply_overrides(named.tiny(), {
      'ail.discriminator_window': 64, 'demos': _demos(),
      'runs_root': str(tmp_path), 'tensorboard': False})
  node = learner_node.LearnerNode(
      tc, ail_program.mpo.env_dims(tc.env),
      types.SimpleNamespace(server_address='localhost:1'), None,
      str(tmp_path / 'run'), algorithm=ail_learner_node.ail_algorithm)
  node._stream(0)
  node._stream(1)
  ail = tc.ail
  assert opened == [
      {'address': 'localhost:1', 'table': layouts.RECENT_TABLE,
       'prefetch': 1, 'rows_per_call': ail.discriminator_steps_per_call *
       ail.batch_size},
      {'address': 'localhost:1', 'table': layouts.TABLE, 'prefetch': 2,
       'rows_per_call': tc.mpo.sgd_steps_per_call * tc.mpo.batch_size}]


def test_resume_refuses_a_changed_window():
  """The tables a run's replay checkpoint holds are the ones it started
  with; a resume that changed the window would restore another program."""
  from tandem.launch import resuming
  old = named.airl_cartpole()
  new = config_lib.apply_overrides(old, {'ail.discriminator_window': 5000})
  assert 'ail.discriminator_window' not in resuming.RESUMABLE_FIELDS
  with pytest.raises(ValueError, match='ail\\.discriminator_window'):
    resuming.check_resume_overrides(old, new)
