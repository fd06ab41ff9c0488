"""Tests for agents.ail.demonstrations."""

import os

import jax
import numpy as np
import pytest

from tandem.agents.ail import demonstrations
from tandem.agents.envs import environments
from tandem.agents.mpo import config as mpo_config
from tandem.agents.mpo import networks
from tests import REPO_ROOT

DemoError = demonstrations.DemoError

EXPERT_PATH = os.path.join(REPO_ROOT, '..', 'shared', 'demos',
                           'cartpole_swingup_expert.npz')
# Its first two episodes, in the repository (tests/data/make_cartpole_expert_2ep.py).
SMALL_EXPERT_PATH = os.path.join(REPO_ROOT, 'tests', 'data',
                                 'cartpole_swingup_expert_2ep.npz')

# A dm_control-like layout, with two action dims so that width errors show.
KEYS = [('position', 3), ('velocity', 2)]
OBS_DIM, ACT_DIM = 5, 2


def _demos(episodes=2, steps=5, seed=0):
  """Valid synthetic Demonstrations: each episode a chain of observations."""
  rng = np.random.default_rng(seed)
  rows = {name: [] for name in demonstrations.Demonstrations._fields}
  for e in range(episodes):
    chain = rng.standard_normal((steps + 1, OBS_DIM)).astype(np.float32)
    rewards = rng.uniform(0, 1, steps).astype(np.float32)
    rows['observation'].append(chain[:-1])
    rows['next_observation'].append(chain[1:])
    rows['action'].append(
        rng.uniform(-1, 1, (steps, ACT_DIM)).astype(np.float32))
    rows['reward'].append(rewards)
    rows['discount'].append(np.ones(steps, np.float32))
    # Not 0..E-1, as in the expert file (numbered by seed).
    rows['episode_index'].append(np.full(steps, 10 + e, np.int32))
    rows['step_index'].append(np.arange(steps, dtype=np.int32))
    rows['episode_returns'].append(
        np.array([rewards.sum(dtype=np.float64)], np.float32))
  return demonstrations.Demonstrations(
      **{k: np.concatenate(v) for k, v in rows.items()})


def _arrays(demos=None, layout='keys'):
  """The file arrays of `demos`, as a dict to corrupt before writing."""
  demos = _demos() if demos is None else demos
  arrays = {
      'actions': demos.action, 'rewards': demos.reward,
      'discounts': demos.discount, 'episode_index': demos.episode_index,
      'step_index': demos.step_index,
      'episode_returns': demos.episode_returns}
  for prefix, obs in (('observations', demos.observation),
                      ('next_observations', demos.next_observation)):
    if layout == 'flat':
      arrays[prefix] = obs
    else:
      arrays[f'{prefix}_position'] = obs[:, :3]
      arrays[f'{prefix}_velocity'] = obs[:, 3:]
  return {k: np.array(v) for k, v in arrays.items()}


def _write(tmp_path, arrays, name='demos.npz'):
  path = str(tmp_path / name)
  with open(path, 'wb') as f:
    np.savez(f, **arrays)
  return path


def _load(path, keys=KEYS):
  return demonstrations.load(path, observation_dim=OBS_DIM,
                             action_dim=ACT_DIM, observation_keys=keys)


def _assert_equal(a, b):
  for field in demonstrations.Demonstrations._fields:
    x, y = getattr(a, field), getattr(b, field)
    assert x.dtype == y.dtype, field
    np.testing.assert_array_equal(x, y, err_msg=field)


def _error(path, keys=KEYS) -> str:
  """Loads a bad file; returns the error message with the path cut out.

  The path is cut because pytest names tmp_path after the test, so words
  such as 'missing' would otherwise match the path rather than the message.
  """
  with pytest.raises(DemoError) as info:
    _load(path, keys)
  message = str(info.value)
  assert path in message
  return message.replace(path, '<path>')


# ---------------------------------------------------------------------------
# The shared expert file and environments.
# ---------------------------------------------------------------------------


def test_expert_file_loads_for_cartpole_swingup():
  if not os.path.exists(EXPERT_PATH):
    pytest.skip(f'shared expert demos not present at {EXPERT_PATH}')
  demos = demonstrations.load_for_environment(EXPERT_PATH, 'cartpole:swingup')
  assert demos.num_transitions == 20000
  assert demos.num_episodes == 20
  assert demos.observation.shape == (20000, 5)
  assert demos.next_observation.shape == (20000, 5)
  assert demos.action.shape == (20000, 1)
  assert demos.observation.dtype == np.float32
  assert demos.episode_index.dtype == np.int32
  assert demos.episode_returns.mean() == pytest.approx(869.36, abs=0.01)
  # Flattened in spec order: position (x, cos, sin) before velocity.
  with np.load(EXPERT_PATH) as raw:
    np.testing.assert_array_equal(demos.observation[:, :3],
                                  raw['observations_position'])
    np.testing.assert_array_equal(demos.observation[:, 3:],
                                  raw['observations_velocity'])


def test_small_expert_file_loads_in_spec_order():
  # The expert's own episodes, read as the learner reads them: per-key
  # arrays flattened in the observation spec's order, returns summed.
  demos = demonstrations.load_for_environment(SMALL_EXPERT_PATH,
                                              'cartpole:swingup')
  assert (demos.num_transitions, demos.num_episodes) == (2000, 2)
  assert demos.observation.shape == demos.next_observation.shape == (2000, 5)
  with np.load(SMALL_EXPERT_PATH) as raw:
    np.testing.assert_array_equal(demos.observation[:, :3],
                                  raw['observations_position'])
    np.testing.assert_array_equal(demos.observation[:, 3:],
                                  raw['observations_velocity'])
    for e, start in enumerate((0, 1000)):
      assert demos.episode_returns[e] == pytest.approx(
          raw['rewards'][start:start + 1000].sum(dtype=np.float64), rel=1e-5)
  # An expert's episodes: both above 800 of the task's 1,000.
  assert demos.episode_returns.min() > 800


@pytest.mark.parametrize('name, task, obs_dim, act_dim, mean, lowest', [
    ('point_mass_easy_expert.npz', 'point_mass:easy', 4, 2, 886.56, 851.4),
    ('walker_walk_expert.npz', 'walker:walk', 24, 6, 923.18, 891.9),
])
def test_tandems_own_experts_load_for_their_tasks(name, task, obs_dim,
                                                  act_dim, mean, lowest):
  # tests/data/README.md's figures, and each episode's start where its
  # numbered seed resets (what `render --beside_expert` relies on).
  path = os.path.join(os.path.dirname(SMALL_EXPERT_PATH), name)
  demos = demonstrations.load_for_environment(path, task)
  assert (demos.num_transitions, demos.num_episodes) == (10000, 10)
  assert demos.observation.shape == (10000, obs_dim)
  assert demos.action.shape == (10000, act_dim)
  assert demos.episode_returns.mean() == pytest.approx(mean, abs=0.01)
  assert demos.episode_returns.min() >= lowest
  for k in (0, 9):
    env = environments.make_environment(task, seed=k)
    first = np.asarray(env.reset().observation, np.float32)
    env.close()
    row = np.flatnonzero((demos.episode_index == k) & (demos.step_index == 0))
    np.testing.assert_allclose(demos.observation[row[0]], first, atol=1e-6)


def test_observation_keys():
  env = environments.make_environment('cartpole:swingup', seed=0)
  try:
    assert demonstrations.observation_keys(env) == [('position', 3),
                                                    ('velocity', 2)]
  finally:
    env.close()
  env = environments.make_environment('gym:Pendulum-v1', seed=0)
  try:
    assert demonstrations.observation_keys(env) is None
  finally:
    env.close()


# ---------------------------------------------------------------------------
# Round trips and layouts.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize('keys', [KEYS, None], ids=['per_key', 'flat'])
def test_save_load_round_trip(tmp_path, keys):
  demos = _demos()
  path = str(tmp_path / 'out.npz')
  demonstrations.save(path, demos, observation_keys=keys)
  with np.load(path) as raw:
    names = set(raw.files)
  if keys is None:
    assert {'observations', 'next_observations'} <= names
    assert 'observations_position' not in names
  else:
    assert 'observations' not in names
    assert {'observations_position', 'next_observations_velocity'} <= names
  loaded = _load(path, keys)
  _assert_equal(loaded, demos)
  assert loaded.num_transitions == 10 and loaded.num_episodes == 2


def test_flat_observations_win_over_keys(tmp_path):
  demos = _demos()
  path = _write(tmp_path, _arrays(demos, layout='flat'))
  # Keys that match nothing in the file: the flat array is used anyway.
  loaded = demonstrations.load(path, observation_dim=OBS_DIM,
                               action_dim=ACT_DIM,
                               observation_keys=[('other', 5)])
  _assert_equal(loaded, demos)


def test_per_key_file_without_keys_is_an_error(tmp_path):
  message = _error(_write(tmp_path, _arrays()), keys=None)
  assert 'observations' in message and 'observation_keys' in message


def test_episode_returns_computed_when_absent(tmp_path):
  demos = _demos()
  arrays = _arrays(demos)
  del arrays['episode_returns']
  loaded = _load(_write(tmp_path, arrays))
  np.testing.assert_allclose(loaded.episode_returns, demos.episode_returns,
                             rtol=1e-6)
  assert loaded.episode_returns.dtype == np.float32


def test_float64_and_int64_are_cast(tmp_path):
  demos = _demos()
  arrays = {k: (v.astype(np.float64) if v.dtype == np.float32
                else v.astype(np.int64)) for k, v in _arrays(demos).items()}
  _assert_equal(_load(_write(tmp_path, arrays)), demos)


def test_save_refuses_invalid_demos(tmp_path):
  demos = _demos()
  action = demos.action.copy()
  action[3, 1] = 1.5
  path = str(tmp_path / 'bad.npz')
  with pytest.raises(DemoError, match='actions'):
    demonstrations.save(path, demos._replace(action=action))
  assert not os.path.exists(path)


# ---------------------------------------------------------------------------
# Bad inputs: one corruption each; the error names the file and the array.
# ---------------------------------------------------------------------------


def _put(name, value):
  """A corruption: array `name` replaced by `value` (a function of it)."""
  def corrupt(arrays):
    arrays[name] = value(arrays[name]) if callable(value) else value
  return corrupt


def _poke(name, index, value):
  """A corruption: one element (or slice) of array `name` set to `value`."""
  def corrupt(arrays):
    arrays[name][index] = value
  return corrupt


def _drop(name):
  return lambda arrays: arrays.pop(name)


def _both(*corruptions):
  def corrupt(arrays):
    for c in corruptions:
      c(arrays)
  return corrupt


def _empty(arrays):
  for name in arrays:
    arrays[name] = arrays[name][:0]


# (id, file layout, corruption of valid arrays, what the message must say).
# Two episodes of five rows: rows 0 to 4 are episode 10's steps 0 to 4, rows
# 5 to 9 episode 11's.
CORRUPTIONS = [
    ('observation width per key', 'keys',
     _put('observations_position', np.zeros((10, 4), np.float32)),
     ["'observations_position'", '(10, 4)']),
    ('observation width flat', 'flat',
     _put('observations', np.zeros((10, 6), np.float32)),
     ["'observations'", '(10, 6)']),
    ('action width', 'keys', _put('actions', lambda a: a[:, :1]),
     ["'actions'", '(10, 1)']),
    ('rows differ between arrays', 'keys', _put('rewards', lambda a: a[:9]),
     ["'rewards'", '10', '9']),
    ('no rows', 'keys', _empty, ['observations', 'empty']),
    ('integer observations', 'keys',
     _put('observations_velocity', np.zeros((10, 2), np.int32)),
     ["'observations_velocity'", 'floating']),
    ('float step index', 'keys',
     _put('step_index', lambda a: a.astype(np.float32)),
     ["'step_index'", 'integer']),
    ('NaN observation', 'keys', _poke('observations_velocity', (7, 1), np.nan),
     ["'observations_velocity'", 'row 7']),
    ('action out of range', 'keys', _poke('actions', (4, 0), -1.25),
     ["'actions'", 'row 4', '-1.25']),
    ('discount out of range', 'keys', _poke('discounts', 2, 1.5),
     ["'discounts'", 'row 2']),
    # A writer that stores the agent's γ on every row: AIRL would scale the
    # expert's h(s') by it and the generator's by the environment's 1.
    ('a discount factor for the environment\'s', 'keys',
     _poke('discounts', slice(None), 0.99),
     ["'discounts'", 'row 0', '0.99', '10 such rows', 'mpo.discount']),
    ('missing array', 'keys', _drop('rewards'),
     ["'rewards'", 'missing', 'discounts']),  # lists what the file has
    ('missing per-key array', 'keys', _drop('next_observations_velocity'),
     ["'next_observations_velocity'", 'missing']),
    ('pickled objects', 'keys',
     _put('rewards', np.array([object()] * 10, dtype=object)),
     ["'rewards'", 'pickled object array']),
    ('steps skip within an episode', 'keys', _poke('step_index', 7, 3),
     ["'step_index'", 'row 7']),  # episode 11 runs 0, 1, 3, ...
    # Rows 8-9 relabelled as episode 10, with steps fine on their own.
    ('episode not contiguous', 'keys',
     _both(_poke('episode_index', slice(8, None), 10),
           _poke('step_index', slice(8, None), [0, 1])),
     ["'episode_index'", 'contiguous']),
    ('next observation off its chain', 'flat',
     _poke('next_observations', (6, 4), 0.0),
     ["'next_observations'", 'row 6']),
    ('episode return off its rewards', 'keys',
     _poke('episode_returns', 1, 1e3), ["'episode_returns'", 'entry 1']),
    ('episode returns of another count', 'keys',
     _put('episode_returns', lambda a: a[:1]),
     ["'episode_returns'", '2 episodes']),
]


@pytest.mark.parametrize('layout,corrupt,expected',
                         [c[1:] for c in CORRUPTIONS],
                         ids=[c[0] for c in CORRUPTIONS])
def test_a_corrupt_file_is_refused_naming_the_array(tmp_path, layout, corrupt,
                                                    expected):
  arrays = _arrays(layout=layout)
  corrupt(arrays)
  message = _error(_write(tmp_path, arrays),
                   keys=KEYS if layout == 'keys' else None)
  for text in expected:
    assert text in message, (text, message)


def test_a_terminal_state_mid_episode_is_refused(tmp_path):
  arrays = _arrays()  # two episodes of five rows
  arrays['discounts'][[4, 9]] = 0.0  # each episode may end terminal
  _load(_write(tmp_path, arrays, 'ends.npz'))
  arrays['discounts'][6] = 0.0
  message = _error(_write(tmp_path, arrays))
  assert "'discounts'" in message and 'row 6' in message, message
  assert 'episode 11' in message, message


def test_truncated_file(tmp_path):
  path = _write(tmp_path, _arrays())
  with open(path, 'rb') as f:
    data = f.read()
  with open(path, 'wb') as f:
    f.write(data[:len(data) // 2])
  message = _error(path)
  assert 'not a readable .npz' in message


def test_missing_file(tmp_path):
  message = _error(str(tmp_path / 'nowhere.npz'))
  assert 'not found' in message


def test_misaligned_next_observations(tmp_path):
  demos = _demos()
  # Shifted by one row within the file: the classic off-by-one.
  arrays = _arrays(demos._replace(
      next_observation=np.roll(demos.next_observation, 1, axis=0)))
  message = _error(_write(tmp_path, arrays))
  assert "'next_observations_position'" in message and 'row 0' in message
  assert 'misaligned' in message


# ---------------------------------------------------------------------------
# Collecting.
# ---------------------------------------------------------------------------


def test_collect_save_load_round_trip(tmp_path):
  env_name = 'cartpole:swingup'
  cfg = mpo_config.MPOConfig(policy_layers=(8,))
  params = networks.init_policy(jax.random.PRNGKey(0), OBS_DIM, 1, (8,))
  demos = demonstrations.collect(env_name, params, cfg, episodes=1, seed=3)
  assert demos.num_transitions == 1000 and demos.num_episodes == 1
  np.testing.assert_array_equal(demos.step_index, np.arange(1000))
  # Episode k on an environment seeded seed + k, and so numbered.
  np.testing.assert_array_equal(demos.episode_index, np.full(1000, 3))
  assert np.all(np.abs(demos.action) <= 1.0)
  # The first observation is the reset one: the cart near the centre, the
  # pole hanging down (cos θ ≈ -1).
  assert demos.observation[0, 1] == pytest.approx(-1.0, abs=0.1)

  env = environments.make_environment(env_name, seed=0)
  keys = demonstrations.observation_keys(env)
  env.close()
  path = str(tmp_path / 'collected.npz')
  demonstrations.save(path, demos, observation_keys=keys)
  loaded = demonstrations.load_for_environment(path, env_name)
  _assert_equal(loaded, demos)
  np.testing.assert_array_equal(loaded.step_index, np.arange(1000))
  assert loaded.episode_returns[0] == pytest.approx(
      float(loaded.reward.sum(dtype=np.float64)), rel=1e-6)


def test_every_collected_episode_starts_where_its_seed_resets():
  cfg = mpo_config.MPOConfig(policy_layers=(8,))
  params = networks.init_policy(jax.random.PRNGKey(0), OBS_DIM, 1, (8,))
  demos = demonstrations.collect('cartpole:swingup', params, cfg, episodes=2,
                                 seed=5)
  starts = np.flatnonzero(demos.step_index == 0)
  assert demos.episode_index[starts].tolist() == [5, 6]
  for row in starts:
    env = environments.make_environment('cartpole:swingup',
                                        seed=int(demos.episode_index[row]))
    first = np.asarray(env.reset().observation, np.float32)
    env.close()
    np.testing.assert_array_equal(first, demos.observation[row])
  with pytest.raises(ValueError, match='seed'):
    demonstrations.collect('cartpole:swingup', params, cfg, episodes=1,
                           seed=-1)


def test_collect_samples_when_not_deterministic():
  cfg = mpo_config.MPOConfig(policy_layers=(8,))
  params = networks.init_policy(jax.random.PRNGKey(0), OBS_DIM, 1, (8,))
  run = lambda det: demonstrations.collect('cartpole:swingup', params, cfg,
                                           episodes=1, seed=3,
                                           deterministic=det)
  mean_actions, sampled = run(True), run(False)
  # The initial policy's mean is ~0 and its stddev init_scale (0.5): the
  # sampled actions spread, clipped to the box; the mean actions do not.
  assert np.std(mean_actions.action) < 0.05
  assert 0.3 < np.std(sampled.action) < 0.6
  assert np.all(np.abs(sampled.action) <= 1.0)


def test_flat_observations_for_an_unsorted_spec_get_a_note(tmp_path):
  # walker's spec order is orientations, height, velocity; a writer that
  # flattens with tree.flatten (Acme's ConcatObservationWrapper) sorts the
  # keys, and a flat array cannot show which order it holds.
  flat = str(tmp_path / 'flat.npz')
  np.savez(flat, observations=np.zeros((2, 24), np.float32))
  note = demonstrations.flat_order_note(flat, 'walker:walk')
  assert "['orientations', 'height', 'velocity']" in note, note
  assert "['height', 'orientations', 'velocity']" in note, note
  # Sorted spec order (cartpole: position, velocity): nothing to confuse.
  assert demonstrations.flat_order_note(flat, 'cartpole:swingup') is None
  per_key = str(tmp_path / 'per_key.npz')
  np.savez(per_key, observations_height=np.zeros((2, 1), np.float32))
  assert demonstrations.flat_order_note(per_key, 'walker:walk') is None


# ---------------------------------------------------------------------------
# Bounded reads: a member's header is checked before its data.
# ---------------------------------------------------------------------------


def _npy_header(shape, descr='<f4') -> bytes:
  """The .npy (1.0) bytes of an array declaring `shape`, without its data."""
  import io
  out = io.BytesIO()
  np.lib.format.write_array_header_1_0(
      out, {'descr': descr, 'fortran_order': False, 'shape': shape})
  return out.getvalue()


def _peak_bytes(fn):
  """(fn's error, the peak bytes Python and numpy allocated meanwhile)."""
  import tracemalloc
  tracemalloc.start()
  try:
    try:
      fn()
    except DemoError as e:
      error = e
    else:
      error = None
    return error, tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()


def test_a_member_claiming_a_trillion_elements_is_refused_by_its_header(
    tmp_path):
  import zipfile
  arrays = _arrays(layout='flat')
  del arrays['rewards']
  path = _write(tmp_path, arrays)
  with zipfile.ZipFile(path, 'a', zipfile.ZIP_DEFLATED) as z:
    z.writestr('rewards.npy', _npy_header((10**12,)) + b'\0' * 64)
  assert os.path.getsize(path) < 10_000
  error, peak = _peak_bytes(lambda: _load(path))
  assert error is not None and "'rewards'" in str(error)
  assert 'more than the' in str(error) and 'bytes allowed' in str(error)
  assert peak < 20 * 2**20, peak


def test_a_compressed_40m_row_member_is_refused_before_decompression(
    tmp_path):
  import zipfile
  rows = 40_000_000
  arrays = _arrays(layout='flat')
  del arrays['actions']
  path = _write(tmp_path, arrays)
  with zipfile.ZipFile(path, 'a', zipfile.ZIP_DEFLATED) as z:
    with z.open('actions.npy', 'w', force_zip64=True) as f:
      f.write(_npy_header((rows, ACT_DIM)))
      chunk = bytes(4 * ACT_DIM * 1_000_000)
      for _ in range(rows // 1_000_000):
        f.write(chunk)
  assert os.path.getsize(path) < 2 * 2**20  # zeros compress ~1000x
  error, peak = _peak_bytes(lambda: _load(path))
  assert error is not None and "'actions'" in str(error)
  assert f'found {rows}' in str(error) and 'nothing read' in str(error)
  assert peak < 20 * 2**20, peak  # the member holds 320 MB
