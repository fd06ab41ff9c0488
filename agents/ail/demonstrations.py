"""Expert demonstrations: Tandem's file format, loading, saving, collecting.

A demonstration file is a `.npz` archive (numpy's uncompressed or compressed
zip of `.npy` arrays, no pickled objects) holding T transitions, one per row.
Row i is one step of one episode: the observation *before* action i, the
action, and what the environment returned after it. With O the flat
observation size, D the action size and E the number of episodes:

* observations, in one of two layouts:
  - `observations` [T, O] float: the flat observation (gymnasium envs, or any
    env when the writer flattened it already);
  - `observations_<key>` [T, k] float, one array per entry of the
    environment's observation dict (dm_control). The flat observation the
    agent sees is their concatenation in the environment's observation-spec
    key order, which `observation_keys` reports;
* `next_observations` [T, O] or `next_observations_<key>` [T, k] float: the
  observation after action i, in the same layouts;
* `actions` [T, D] float, in [-1, 1]: Tandem's normalised action box
  (`environments.NormalizedEnvironment`), not the native bounds;
* `rewards` [T] float: the reward after action i;
* `discounts` [T] float, 0 or 1: the environment's discount after action i
  (0 where the episode terminated, 1 otherwise, time limits included), not
  the agent's γ: every environment Tandem runs gives 0 or 1;
* `episode_index` [T] int: which episode the row belongs to. Each episode's
  rows are contiguous; episodes may be numbered freely (e.g. by seed);
* `step_index` [T] int: 0, 1, 2, ... within each episode;
* `episode_returns` [E] float, optional: the sum of rewards of each episode,
  in order of first appearance. When present it is checked against the
  rewards; when absent it is computed from them.

Consecutive rows of one episode must chain: `next_observations[t]` equals
`observations[t + 1]`. A file whose arrays are shifted against one another
fails that check, instead of silently teaching a discriminator the wrong
transitions.

`shared/demos/cartpole_swingup_expert.npz` (beside the checkout) (dm_control
cartpole:swingup, per-key layout with keys `position` then `velocity`) is the
reference file of this format.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, NamedTuple, Optional, Sequence
import zipfile
import zlib

import numpy as np

from tandem.agents.envs import environments
from tandem.agents.core import files
from tandem.agents.mpo import actor as actor_lib

OBSERVATIONS = 'observations'
NEXT_OBSERVATIONS = 'next_observations'
ACTIONS = 'actions'
REWARDS = 'rewards'
DISCOUNTS = 'discounts'
EPISODE_INDEX = 'episode_index'
STEP_INDEX = 'step_index'
EPISODE_RETURNS = 'episode_returns'

# Arrays every file holds whatever its observation layout.
_REQUIRED = (ACTIONS, REWARDS, DISCOUNTS, EPISODE_INDEX, STEP_INDEX)

# Observations are copied from one timestep to the next; anything beyond
# float32 rounding means the arrays are not aligned.
_CHAIN_ATOL = 1e-5
# Returns may have been summed in float32 by the writer over 1000s of steps.
_RETURN_RTOL = 1e-4
_RETURN_ATOL = 1e-3

_INT32 = np.iinfo(np.int32)


class DemoError(ValueError):
  """Bad demonstration file; message names the file and the array."""


class Demonstrations(NamedTuple):
  """T transitions from E episodes, as `load` returns and `save` takes."""
  observation: np.ndarray       # [T, O] float32, flat
  action: np.ndarray            # [T, D] float32, in [-1, 1]
  reward: np.ndarray            # [T] float32
  discount: np.ndarray          # [T] float32, 0 or 1
  next_observation: np.ndarray  # [T, O] float32, flat
  episode_index: np.ndarray     # [T] int32
  step_index: np.ndarray        # [T] int32
  episode_returns: np.ndarray   # [E] float32, in order of first appearance

  @property
  def num_transitions(self) -> int:
    return int(np.shape(self.observation)[0])

  @property
  def num_episodes(self) -> int:
    return int(np.shape(self.episode_returns)[0])


# ---------------------------------------------------------------------------
# Environments.
# ---------------------------------------------------------------------------


def observation_keys(env) -> Optional[list[tuple[str, int]]]:
  """The per-key observation layout of an environment, if it has one.

  Args:
    env: a Tandem environment (`environments.NormalizedEnvironment`, whose
      `.environment` is the wrapped one); any other `dm_env.Environment` is
      inspected directly.

  Returns:
    [(key, flat size), ...] in the order `NormalizedEnvironment` concatenates
    them, when the wrapped env's observation spec is a flat mapping of arrays
    (dm_control); None when it is one array (the gymnasium adapter) or a
    nested mapping, whose files must use the flat `observations` layout.
  """
  inner = (env.environment
           if isinstance(env, environments.NormalizedEnvironment) else env)
  spec = inner.observation_spec()
  if not isinstance(spec, Mapping) or any(
      isinstance(s, Mapping) for s in spec.values()):
    return None
  return [(str(key), environments.flat_size(s)) for key, s in spec.items()]


# ---------------------------------------------------------------------------
# Reading.
# ---------------------------------------------------------------------------


def _fail(source: str, name: str, message: str):
  raise DemoError(f'{source}: array {name!r}: {message}')


def _open(path: str):
  """np.load of an .npz, or a DemoError naming the file."""
  try:
    npz = np.load(path, allow_pickle=False)
  except FileNotFoundError as e:
    raise DemoError(f'{path}: demonstration file not found.') from e
  except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
    raise DemoError(
        f'{path}: not a readable .npz demonstration file (truncated or '
        f'corrupt?): {type(e).__name__}: {e}') from e
  if not isinstance(npz, np.lib.npyio.NpzFile):
    # A bare .npy loads as one array: a file, but not this format.
    raise DemoError(
        f'{path}: expected an .npz archive of named arrays, found a single '
        f'{type(npz).__name__} (a .npy file?).')
  return npz


def _read(npz, name: str, source: str) -> np.ndarray:
  """One array of an open archive, or a DemoError naming it."""
  try:
    return npz[name]
  except ValueError as e:
    if 'allow_pickle' in str(e):
      _fail(source, name,
            'expected a numeric array, found a pickled object array '
            '(demo files are loaded with allow_pickle=False).')
    _fail(source, name, f'could not be read: {e}')
  except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
    _fail(source, name,
          f'could not be read (corrupt archive member?): '
          f'{type(e).__name__}: {e}')


def _missing(source: str, name: str, available) -> DemoError:
  return DemoError(
      f'{source}: array {name!r}: required but missing; the file has '
      f'{sorted(available)}.')


def _observation_names(available, prefix: str,
                       keys: Optional[Sequence[tuple[str, int]]],
                       source: str) -> list[str]:
  """The arrays holding one observation field, flat or per key.

  A flat array wins whatever `keys` says: it is already the vector the agent
  sees, and gymnasium-style writers produce only that.
  """
  if prefix in available:
    return [prefix]
  per_key = sorted(n for n in available if n.startswith(prefix + '_'))
  if keys is None:
    if per_key:
      raise DemoError(
          f'{source}: array {prefix!r}: missing, and the per-key arrays '
          f'{per_key} cannot be flattened without observation_keys (their '
          'order is the environment\'s observation-spec order).')
    raise _missing(source, prefix, available)
  names = [f'{prefix}_{key}' for key, _ in keys]
  for name in names:
    if name not in available:
      raise DemoError(
          f'{source}: array {name!r}: required but missing (the file has '
          f'neither {prefix!r} nor all of {names}); the file has '
          f'{sorted(available)}.')
  return names


def _needed_names(available, keys, source) -> list[str]:
  names = (_observation_names(available, OBSERVATIONS, keys, source) +
           _observation_names(available, NEXT_OBSERVATIONS, keys, source))
  for name in _REQUIRED:
    if name not in available:
      raise _missing(source, name, available)
  names += list(_REQUIRED)
  if EPISODE_RETURNS in available:
    names.append(EPISODE_RETURNS)
  return names


# ---------------------------------------------------------------------------
# Validation: pure functions of arrays; `source` only labels the messages.
# ---------------------------------------------------------------------------


def _check_shape(a: np.ndarray, source: str, name: str,
                 trailing: tuple[int, ...]) -> None:
  """a must be [N, *trailing] for some N."""
  if a.ndim != 1 + len(trailing) or a.shape[1:] != trailing:
    expected = '[' + ', '.join(['N'] + [str(t) for t in trailing]) + ']'
    _fail(source, name, f'expected shape {expected}, found {a.shape}.')


def _first_bad_row(bad: np.ndarray) -> Optional[int]:
  """bad: [N, ...] bool -> the first row with any True, or None."""
  if not bad.shape[0]:
    return None
  rows = np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))
  return int(rows[0]) if rows.size else None


def _as_float32(a: np.ndarray, source: str, name: str) -> np.ndarray:
  if not np.issubdtype(a.dtype, np.floating):
    _fail(source, name, f'expected a floating dtype, found {a.dtype}.')
  a = a.astype(np.float32)
  # After the cast, so float64 values beyond float32's range are caught too.
  row = _first_bad_row(~np.isfinite(a))
  if row is not None:
    _fail(source, name, f'expected finite values, found {a[row]} at row {row}.')
  return a


def _as_int32(a: np.ndarray, source: str, name: str) -> np.ndarray:
  if not np.issubdtype(a.dtype, np.integer):
    _fail(source, name, f'expected an integer dtype, found {a.dtype}.')
  if a.size and (a.min() < _INT32.min or a.max() > _INT32.max):
    _fail(source, name,
          f'expected values within int32, found [{a.min()}, {a.max()}].')
  return a.astype(np.int32)


def _float_field(arrays, source, name, trailing=()) -> np.ndarray:
  a = np.asarray(arrays[name])
  _check_shape(a, source, name, trailing)
  return _as_float32(a, source, name)


def _same_length(named: Sequence[tuple[str, np.ndarray]], source: str) -> int:
  """All arrays have as many rows as the first; returns that count."""
  ref_name, ref = named[0]
  for name, a in named[1:]:
    if len(a) != len(ref):
      _fail(source, name,
            f'expected {len(ref)} rows (as {ref_name!r}), found {len(a)}.')
  return len(ref)


def _observations(arrays, prefix: str, source: str, observation_dim: int,
                  keys) -> tuple[np.ndarray, list[tuple[str, int]]]:
  """The flat [T, O] float32 observations of one field.

  Returns:
    The observations, and [(array name, width), ...] of the arrays they came
    from, so later errors can name the array a column belongs to.
  """
  names = _observation_names(arrays, prefix, keys, source)
  if names == [prefix]:
    return _float_field(arrays, source, prefix, (observation_dim,)), [
        (prefix, observation_dim)]
  widths = [int(w) for _, w in keys]
  if sum(widths) != observation_dim:
    _fail(source, prefix + '_*',
          f'the observation keys {list(keys)} have widths summing to '
          f'{sum(widths)}; expected observation_dim {observation_dim}.')
  parts = [(n, _float_field(arrays, source, n, (w,)))
           for n, w in zip(names, widths)]
  _same_length(parts, source)
  flat = np.concatenate([p for _, p in parts], axis=1)
  return flat, list(zip(names, widths))


def _array_for_column(layout: Sequence[tuple[str, int]], column: int) -> str:
  """The array of a layout [(name, width), ...] holding a flat column."""
  for name, width in layout:
    if column < width:
      return name
    column -= width
  return layout[-1][0]


def _check_range(a: np.ndarray, low: float, high: float, source: str,
                 name: str, tolerance: float = 0.0) -> None:
  """Every value of a within [low - tolerance, high + tolerance]."""
  bad = (a < low - tolerance) | (a > high + tolerance)
  row = _first_bad_row(bad)
  if row is not None:
    value = np.ravel(a[row])[np.flatnonzero(np.ravel(bad[row]))[0]]
    slack = f' (tolerance {tolerance:g})' if tolerance else ''
    _fail(source, name,
          f'expected values in [{low:g}, {high:g}]{slack}, found {value:g} '
          f'at row {row}.')


def _episode_starts(episode_index: np.ndarray, step_index: np.ndarray,
                    source: str) -> np.ndarray:
  """Checks the episode structure; returns each episode's first row [E].

  Args:
    episode_index: [T] int32, T >= 1.
    step_index: [T] int32.
    source: names the file in errors.
  """
  starts = np.concatenate(
      [[0], np.flatnonzero(episode_index[1:] != episode_index[:-1]) + 1])
  ids = episode_index[starts]
  unique, counts = np.unique(ids, return_counts=True)
  if np.any(counts > 1):
    split = unique[counts > 1][0]
    rows = starts[ids == split]
    _fail(source, EPISODE_INDEX,
          f'expected each episode\'s rows to be contiguous, found episode '
          f'{split} at rows starting {rows[0]} and again at {rows[1]}.')
  lengths = np.diff(np.append(starts, len(episode_index)))
  expected = np.arange(len(episode_index)) - np.repeat(starts, lengths)
  bad = np.flatnonzero(step_index != expected)
  if bad.size:
    row = int(bad[0])
    _fail(source, STEP_INDEX,
          f'expected {expected[row]} at row {row} (episode '
          f'{episode_index[row]}: steps count 0, 1, 2, ... within an '
          f'episode), found {step_index[row]}.')
  return starts


def _check_chain(observation, next_observation, episode_index,
                 next_layout, source) -> None:
  """next_observation[t] == observation[t + 1] within each episode."""
  same = episode_index[1:] == episode_index[:-1]
  off = np.abs(next_observation[:-1] - observation[1:]) > _CHAIN_ATOL
  row = _first_bad_row(off & same[:, None])
  if row is not None:
    column = int(np.flatnonzero(off[row])[0])
    _fail(source, _array_for_column(next_layout, column),
          f'expected row {row} to equal the observation of row {row + 1} '
          f'(same episode {episode_index[row]}), found next observation '
          f'{next_observation[row]} vs observation {observation[row + 1]} '
          '(arrays misaligned?).')


def _returns(arrays, reward, starts, episode_index, source) -> np.ndarray:
  """The [E] episode returns: checked when the file has them, else summed."""
  # float64 sums: float32 accumulation over 1000s of steps drifts.
  sums = np.add.reduceat(reward.astype(np.float64), starts)
  if EPISODE_RETURNS not in arrays:
    return sums.astype(np.float32)
  returns = _float_field(arrays, source, EPISODE_RETURNS)
  if len(returns) != len(starts):
    _fail(source, EPISODE_RETURNS,
          f'expected one entry per episode ({len(starts)} episodes in '
          f'{EPISODE_INDEX!r}), found {len(returns)}.')
  bad = np.flatnonzero(~np.isclose(returns, sums, rtol=_RETURN_RTOL,
                                   atol=_RETURN_ATOL))
  if bad.size:
    j = int(bad[0])
    _fail(source, EPISODE_RETURNS,
          f'expected entry {j} (episode {episode_index[starts[j]]}) to be '
          f'its sum of {REWARDS!r}, {sums[j]:.6g}; found {returns[j]:.6g}.')
  return returns


def _check_discounts_are_the_environments(discount: np.ndarray,
                                          episode_index: np.ndarray,
                                          source: str) -> None:
  """Every environment Tandem runs gives discount 1, or 0 at a terminal
  state; the generator's windows carry those. A file holding the agent's γ
  (0.99 on every row) would give AIRL's h(s') a factor the generator's
  transitions never have: a cue that is not behaviour."""
  bad = np.flatnonzero((discount != 0) & (discount != 1))
  if bad.size:
    row = int(bad[0])
    _fail(source, DISCOUNTS,
          f'expected the environment\'s discount, 1 or 0 (a terminal state), '
          f'on every row; found {float(discount[row]):.6g} at row {row} '
          f'(episode {episode_index[row]}), and {bad.size} such rows in all. '
          'A discount factor γ belongs in the config (mpo.discount), not in '
          'the file.')


def _check_terminals_end_episodes(discount: np.ndarray, starts: np.ndarray,
                                  episode_index: np.ndarray,
                                  source: str) -> None:
  """A discount of 0 marks a terminal state: nothing follows it in its
  episode. Mid-episode, it would silently drop AIRL's h(s') and the
  bootstrap of that step."""
  last = np.zeros(len(discount), bool)
  last[np.append(starts[1:], len(discount)) - 1] = True
  bad = np.flatnonzero((discount == 0) & ~last)
  if bad.size:
    row = int(bad[0])
    _fail(source, DISCOUNTS,
          f'expected 0 (a terminal state) only on an episode\'s last row, '
          f'found it at row {row}, mid-way through episode '
          f'{episode_index[row]}.')


def _validate(arrays: Mapping[str, np.ndarray], source: str, *,
              observation_dim: int, action_dim: int,
              keys: Optional[Sequence[tuple[str, int]]]) -> Demonstrations:
  """Checks arrays named as in a file and converts them to Demonstrations.

  Per-array checks (shape, dtype, finiteness) come first, so that a NaN or a
  wrong width is reported as such rather than as a misaligned chain.
  """
  observation, obs_layout = _observations(
      arrays, OBSERVATIONS, source, observation_dim, keys)
  next_observation, next_layout = _observations(
      arrays, NEXT_OBSERVATIONS, source, observation_dim, keys)
  action = _float_field(arrays, source, ACTIONS, (action_dim,))
  reward = _float_field(arrays, source, REWARDS)
  discount = _float_field(arrays, source, DISCOUNTS)
  indices = {}
  for name in (EPISODE_INDEX, STEP_INDEX):
    a = np.asarray(arrays[name])
    _check_shape(a, source, name, ())
    indices[name] = _as_int32(a, source, name)
  num = _same_length(
      [(obs_layout[0][0], observation), (next_layout[0][0], next_observation),
       (ACTIONS, action), (REWARDS, reward), (DISCOUNTS, discount),
       (EPISODE_INDEX, indices[EPISODE_INDEX]),
       (STEP_INDEX, indices[STEP_INDEX])], source)
  if num == 0:
    _fail(source, obs_layout[0][0],
          'expected at least one transition, found 0 rows (empty file).')
  # The environment tolerates this much float32 slack in actions; so do we.
  _check_range(action, -1.0, 1.0, source, ACTIONS,
               tolerance=environments.ACTION_TOLERANCE)
  episode_index, step_index = indices[EPISODE_INDEX], indices[STEP_INDEX]
  _check_discounts_are_the_environments(discount, episode_index, source)
  starts = _episode_starts(episode_index, step_index, source)
  _check_terminals_end_episodes(discount, starts, episode_index, source)
  _check_chain(observation, next_observation, episode_index, next_layout,
               source)
  returns = _returns(arrays, reward, starts, episode_index, source)
  return Demonstrations(
      observation=observation, action=action, reward=reward,
      discount=discount, next_observation=next_observation,
      episode_index=episode_index, step_index=step_index,
      episode_returns=returns)


# ---------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------


def load(path: str, *, observation_dim: int, action_dim: int,
         observation_keys: Optional[Sequence[tuple[str, int]]] = None
         ) -> Demonstrations:  # pylint: disable=redefined-outer-name
  """Loads and validates a demonstration file (format: module docstring).

  Args:
    path: the .npz file.
    observation_dim: O, the flat observation size the agent expects.
    action_dim: D, the action size the agent expects.
    observation_keys: [(key, width), ...] in flattening order, as
      `observation_keys(env)` returns; needed only for per-key files. A file
      with a flat `observations` array is read from it whatever this says.

  Returns:
    Demonstrations with float arrays as float32 and indices as int32.

  Raises:
    DemoError: naming the file and the offending array, with what was
      expected and what was found.
  """
  with _open(path) as npz:
    available = set(npz.files)
    arrays = {name: _read(npz, name, path)
              for name in _needed_names(available, observation_keys, path)}
  return _validate(arrays, path, observation_dim=observation_dim,
                   action_dim=action_dim, keys=observation_keys)


def load_for_environment(path: str, env_name: str) -> Demonstrations:
  """Loads a file with the dims and observation keys of an environment.

  Args:
    path: the .npz file.
    env_name: a name for `environments.make_environment`, e.g.
      "cartpole:swingup".

  Returns:
    The validated Demonstrations.
  """
  env = environments.make_environment(env_name, seed=0)
  try:
    dims = environments.env_dims(env)
    keys = observation_keys(env)
  finally:
    env.close()
  return load(path, observation_dim=dims.observation_dim,
              action_dim=dims.action_dim, observation_keys=keys)


def flat_order_note(path: str, env_name: str) -> Optional[str]:
  """A warning for a file whose observations are one flat array, for an
  environment whose observation-spec order is not its keys' sorted order
  (walker: orientations, height, velocity). The loader cannot tell a flat
  array's column order; Tandem's is the spec order, while writers that
  flatten with `tree.flatten` (Acme's ConcatObservationWrapper among them)
  sort the keys, so such a file loads with its columns silently permuted.
  None for per-key arrays (observations_<key>), which carry their names."""
  with _open(path) as npz:
    if OBSERVATIONS not in npz.files:
      return None
  env = environments.make_environment(env_name, seed=0)
  try:
    keys = observation_keys(env)
  finally:
    env.close()
  order = [k for k, _ in keys or []]
  if order == sorted(order):
    return None
  return (f'note: {path} holds flat observations; for {env_name} their '
          f'columns must be in the observation-spec order {order}, not the '
          f'sorted order {sorted(order)} that tree.flatten-based writers '
          '(Acme\'s ConcatObservationWrapper) produce; the loader cannot '
          'tell them apart. Per-key arrays (observations_<key>, as '
          '`tandem collect-demos` writes) carry their names.')


def _split(observation: np.ndarray, prefix: str,
           keys: Optional[Sequence[tuple[str, int]]],
           source: str) -> dict[str, np.ndarray]:
  """[T, O] flat observations -> {array name: [T, k]} for a file."""
  if keys is None:
    return {prefix: observation}
  widths = [int(w) for _, w in keys]
  _check_shape(observation, source, prefix, (sum(widths),))
  bounds = np.cumsum([0] + widths)
  return {f'{prefix}_{key}': observation[:, lo:hi]
          for (key, _), lo, hi in zip(keys, bounds[:-1], bounds[1:])}


def _to_arrays(demos: Demonstrations, keys, source) -> dict[str, np.ndarray]:
  arrays = _split(np.asarray(demos.observation), OBSERVATIONS, keys, source)
  arrays[ACTIONS] = np.asarray(demos.action)
  arrays[REWARDS] = np.asarray(demos.reward)
  arrays[DISCOUNTS] = np.asarray(demos.discount)
  arrays[EPISODE_INDEX] = np.asarray(demos.episode_index)
  arrays[STEP_INDEX] = np.asarray(demos.step_index)
  arrays.update(_split(np.asarray(demos.next_observation), NEXT_OBSERVATIONS,
                       keys, source))
  arrays[EPISODE_RETURNS] = np.asarray(demos.episode_returns)
  return arrays


def _width(a: Any) -> int:
  return int(np.shape(a)[-1]) if np.ndim(a) else 0


def save(path: str, demos: Demonstrations,
         observation_keys: Optional[Sequence[tuple[str, int]]] = None
         ) -> None:  # pylint: disable=redefined-outer-name
  """Writes demonstrations in the format of the module docstring, atomically.

  The arrays are validated as `load` would, before anything is written, so a
  file `save` produces always loads, to the same bits.

  Args:
    path: the file to write (replaced atomically if it exists); written at
      exactly this name, whatever its suffix.
    demos: the transitions; float arrays are stored as float32 and indices
      as int32.
    observation_keys: [(key, width), ...] to store one array per key (the
      dm_control layout); None stores the flat `observations`.

  Raises:
    DemoError: naming `path` and the offending array, if `load` would reject
      the result.
  """
  observation_dim = (sum(int(w) for _, w in observation_keys)
                     if observation_keys is not None
                     else _width(demos.observation))
  checked = _validate(
      _to_arrays(demos, observation_keys, path), path,
      observation_dim=observation_dim, action_dim=_width(demos.action),
      keys=observation_keys)
  arrays = _to_arrays(checked, observation_keys, path)
  # Slices of the flat observation are views; savez writes them contiguous.
  files.write_atomic(path, lambda f: np.savez(f, **arrays))


def collect(env_name: str, policy_params, mpo_config, *, episodes: int,
            seed: int, deterministic: bool = True) -> Demonstrations:
  """Records episodes of the deterministic (mean-action) MPO policy, or with
  deterministic=False of the sampling policy the actors run (clipped).

  Args:
    env_name: a name for `environments.make_environment`.
    policy_params: a `networks.init_policy` pytree (e.g. a learner's policy).
    mpo_config: the `MPOConfig` the params belong to (its policy scales).
    episodes: how many episodes to run, >= 1, on one environment reset
      between episodes; they get episode_index 0 .. episodes - 1.
    seed: seeds the environment and the actor.
    deterministic: act at the mean (demonstrations) or sample as the actors
      do (a diagnostic's agent episodes).

  Returns:
    Demonstrations of every transition, in the order they happened.
  """
  if not isinstance(episodes, int) or isinstance(episodes, bool) or (
      episodes < 1):
    raise ValueError(f'episodes: expected an integer >= 1, got {episodes!r}.')
  actor = actor_lib.Actor(mpo_config, policy_params, seed=seed,
                          deterministic=deterministic)
  rows = {name: [] for name in Demonstrations._fields
          if name != 'episode_returns'}
  env = environments.make_environment(env_name, seed=seed)
  try:
    for episode in range(episodes):
      timestep = env.reset()
      step = 0
      while not timestep.last():
        # Copies: an environment may reuse its observation buffer.
        observation = np.array(timestep.observation, np.float32)
        action = np.array(actor.select_action(observation), np.float32)
        timestep = env.step(action)
        rows['observation'].append(observation)
        rows['action'].append(action)
        rows['reward'].append(timestep.reward)
        rows['discount'].append(timestep.discount)
        rows['next_observation'].append(
            np.array(timestep.observation, np.float32))
        rows['episode_index'].append(episode)
        rows['step_index'].append(step)
        step += 1
  finally:
    env.close()
  fields = {name: np.asarray(values) for name, values in rows.items()}
  for name in ('observation', 'action', 'reward', 'discount',
               'next_observation'):
    fields[name] = fields[name].astype(np.float32)
  for name in ('episode_index', 'step_index'):
    fields[name] = fields[name].astype(np.int32)
  starts = np.flatnonzero(fields['step_index'] == 0)
  fields['episode_returns'] = np.add.reduceat(
      fields['reward'].astype(np.float64), starts).astype(np.float32)
  return Demonstrations(**fields)
