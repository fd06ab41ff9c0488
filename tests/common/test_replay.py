"""NStepAdder writes Acme's n-step transitions (each start state once); batches
get γ once; blocked writes give up when the program stops."""

import dm_env
from dm_env import specs
import numpy as np
import pytest
import reverb

from agents.common import replay


def _spec():
  from acme import specs as acme_specs
  return acme_specs.EnvironmentSpec(
      observations=specs.Array((3,), np.float32),
      actions=specs.BoundedArray((2,), np.float32, -1.0, 1.0),
      rewards=specs.Array((), np.float32),
      discounts=specs.BoundedArray((), np.float32, 0.0, 1.0))


def _episode(rng, length, terminal):
  steps = [dm_env.restart(rng.normal(size=3).astype(np.float32))]
  for t in range(length):
    obs = rng.normal(size=3).astype(np.float32)
    r = np.float32(rng.normal())
    if t == length - 1:
      steps.append(dm_env.termination(r, obs)._replace(discount=np.float32(0))
                   if terminal else
                   dm_env.truncation(r, obs, np.float32(1.0)))
    else:
      d = np.float32(rng.choice([1.0, 0.5]))  # env discounts other than 1
      steps.append(dm_env.transition(r, obs, d))
  actions = rng.uniform(-1, 1, size=(length, 2)).astype(np.float32)
  return steps, actions


def _fifo_table(name):
  from acme.adders.reverb import NStepTransitionAdder
  return reverb.Table(
      name=name, sampler=reverb.selectors.Fifo(),
      remover=reverb.selectors.Fifo(), max_size=10_000, max_times_sampled=1,
      rate_limiter=reverb.rate_limiters.MinSize(1),
      signature=NStepTransitionAdder.signature(_spec()))


@pytest.mark.parametrize('n_step', [1, 3, 5])
def test_same_transitions_as_acme_adder(n_step):
  from acme.adders.reverb import NStepTransitionAdder
  server = reverb.Server([_fifo_table('ours'), _fifo_table('acme')])
  client = reverb.Client(f'localhost:{server.port}')
  ours = replay.NStepAdder(client, n_step=n_step, discount=0.9,
                           table='ours', flush_every=3)
  acme = NStepTransitionAdder(client, n_step=n_step, discount=0.9,
                              priority_fns={'acme': None})
  rng = np.random.default_rng(n_step)
  episodes = [(7, True), (4, False), (2, True)]
  for length, terminal in episodes:
    steps, actions = _episode(rng, length, terminal)
    for adder in (ours, acme):
      adder.add_first(steps[0])
      for a, ts in zip(actions, steps[1:]):
        adder.add(a, ts)
  del acme  # flushes
  ours.reset()
  # Acme also writes the shorter transitions (1..n-1 steps) from each
  # episode's first state, before the first full one; NStepAdder writes each
  # start state once. Those are the only differences.
  extra = [min(n_step - 1, length - 1) for length, _ in episodes]
  sizes = {t: client.server_info()[t].current_size for t in ('ours', 'acme')}
  assert sizes['ours'] == 13 and sizes['acme'] == 13 + sum(extra)
  def read(table):
    ds = reverb.TrajectoryDataset.from_table_signature(
        server_address=f'localhost:{server.port}', table=table,
        max_in_flight_samples_per_worker=1, rate_limiter_timeout_ms=1000)
    return [s.data for s in ds.take(sizes[table]).as_numpy_iterator()]
  got = {t: read(t) for t in ('ours', 'acme')}
  kept, i = [], 0
  for (length, _), skip in zip(episodes, extra):
    kept += got['acme'][i + skip:i + skip + length]
    i += skip + length
  got['acme'] = kept
  assert len(got['ours']) == len(got['acme']) == 13
  for a, b in zip(got['ours'], got['acme']):
    for field in ('observation', 'action', 'reward', 'discount',
                  'next_observation'):
      np.testing.assert_allclose(np.asarray(getattr(a, field)),
                                 np.asarray(getattr(b, field)), rtol=1e-6,
                                 err_msg=field)
  server.stop()


def test_to_batch_applies_gamma_once_and_reshapes():
  from acme import types
  k, b = 2, 3
  t = types.Transition(
      observation=np.zeros((k * b, 4)), action=np.zeros((k * b, 1)),
      reward=np.arange(k * b, dtype=np.float32),
      discount=np.full((k * b,), 0.5, np.float32),
      next_observation=np.ones((k * b, 4)), extras=())
  batch = replay.to_batch(t, 0.9, k, b)
  assert batch.observation.shape == (k, b, 4)
  np.testing.assert_allclose(batch.discount, 0.45)
  np.testing.assert_array_equal(batch.reward[1], [3, 4, 5])


def test_blocked_write_gives_up_when_stopping():
  from acme.adders.reverb import NStepTransitionAdder
  table = reverb.Table(
      name=replay.TABLE, sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=1000,
      # Nobody samples: inserts block after the error buffer is used up.
      rate_limiter=reverb.rate_limiters.SampleToInsertRatio(1.0, 2, 2.0),
      signature=NStepTransitionAdder.signature(_spec()))
  server = reverb.Server([table])
  stop = {'now': False}
  adder = replay.make_adder(f'localhost:{server.port}', n_step=1,
                            discount=0.9, should_stop=lambda: stop['now'],
                            flush_every=1)
  rng = np.random.default_rng(0)
  steps, actions = _episode(rng, 50, True)
  adder.add_first(steps[0])
  stop['now'] = True
  with pytest.raises(replay.Stopped):
    for a, ts in zip(actions, steps[1:]):
      adder.add(a, ts)
  server.stop()
