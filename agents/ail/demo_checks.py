"""Reading and checking a demonstration file (format: demo_format.py).

Every member is read and checked before any use; a failure names the file,
the array and what was expected, as a DemoError.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence
import zipfile
import zlib

import numpy as np

from tandem.agents.ail.demo_format import (ACTIONS, DISCOUNTS, EPISODE_INDEX,
                                           EPISODE_RETURNS, NEXT_OBSERVATIONS,
                                           OBSERVATIONS, REWARDS, STEP_INDEX,
                                           DemoError, Demonstrations)
from tandem.agents.core import npz as npz_members
from tandem.agents.envs import wrappers

# Arrays every file holds whatever its observation layout.
_REQUIRED = (ACTIONS, REWARDS, DISCOUNTS, EPISODE_INDEX, STEP_INDEX)

# Observations are copied from one timestep to the next; anything beyond
# float32 rounding means the arrays are not aligned.
_CHAIN_ATOL = 1e-5
# Returns may have been summed in float32 by the writer over 1000s of steps.
_RETURN_RTOL = 1e-4
_RETURN_ATOL = 1e-3

_INT32 = np.iinfo(np.int32)


# ---------------------------------------------------------------------------
# Reading.
# ---------------------------------------------------------------------------


def _fail(source: str, name: str, message: str):
  raise DemoError(f'{source}: array {name!r}: {message}')


def open_archive(path: str):
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


def read_array(npz, name: str, source: str) -> np.ndarray:
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


def check_headers(npz, names: Sequence[str], source: str) -> None:
  """Every member's declared shape and dtype, from its header alone (no
  data decompressed): numeric, at most npz_members.MAX_MEMBER_BYTES, at
  least one dimension, and the same row count in every per-step array; a
  DemoError naming the first that is not."""
  declared = {}
  for name in names:
    try:
      declared[name] = npz_members.header(npz, name)
    except npz_members.BadMember as e:
      _fail(source, name, f'{e}.')
    if not declared[name].shape:
      _fail(source, name, 'expected an array with a row per step, found a '
            'scalar.')
  per_step = [n for n in names if n != EPISODE_RETURNS]
  rows = declared[per_step[0]].shape[0]
  for name in per_step[1:]:
    if declared[name].shape[0] != rows:
      _fail(source, name, f'expected {rows} rows (as {per_step[0]!r}), found '
            f'{declared[name].shape[0]} (from its header; nothing read).')


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


def needed_names(available, keys, source) -> list[str]:
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


def check_shape(a: np.ndarray, source: str, name: str,
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
  check_shape(a, source, name, trailing)
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


def validate(arrays: Mapping[str, np.ndarray], source: str, *,
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
    check_shape(a, source, name, ())
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
               tolerance=wrappers.ACTION_TOLERANCE)
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


