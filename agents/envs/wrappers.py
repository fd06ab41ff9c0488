"""The wrappers that put every environment behind one interface: flat
float32 observations, actions in [-1, 1] checked and rescaled to the task's
bounds, float32 rewards and discounts, a new episode after a LAST step
(`NormalizedEnvironment`), and gymnasium's API as dm_env's
(`GymnasiumAdapter`). environments.py picks a backend by name and wraps it.
"""

from typing import Any, Mapping

import dm_env
from dm_env import specs
import numpy as np

# Actions may exceed [-1, 1] by this much (e.g. float32 rounding in the actor)
# before they are rejected; anything beyond it is a bug upstream.
ACTION_TOLERANCE = 1e-6


class ActionError(ValueError):
  """An action no correct agent produces (wrong shape, non-finite, out of
  [-1, 1]): a bug upstream of the environment, which rebuilding the
  environment after a fault (agents/envs/env_faults.py) would not cure."""


# ---------------------------------------------------------------------------
# Pure helpers.
# ---------------------------------------------------------------------------


def flat_size(spec: Any) -> int:
  """Number of scalars in a spec, or in a (nested) mapping of specs.

  Args:
    spec: a `dm_env.specs.Array` or a mapping (possibly nested) of them.

  Returns:
    The length of the vector that `flatten_observation` makes of a value of
    this spec; a scalar spec counts as 1.
  """
  if isinstance(spec, Mapping):
    return sum(flat_size(s) for s in spec.values())
  return int(np.prod(spec.shape, dtype=np.int64))


def flatten_observation(observation: Any) -> np.ndarray:
  """Flattens an observation into one float32 vector.

  Mappings are concatenated in their iteration order (not sorted, unlike
  `tree.flatten`), because dm_control's observation dicts are ordered and
  that order is the one the task documents.

  Args:
    observation: an array-like, scalar, or (nested) mapping of them.

  Returns:
    A 1-D float32 array.
  """
  if isinstance(observation, Mapping):
    # Ravel the leaves and cast once: one concatenate, one conversion.
    parts = [flatten_observation(v) if isinstance(v, Mapping) else np.ravel(v)
             for v in observation.values()]
    if not parts:
      return np.zeros((0,), np.float32)
    return np.concatenate(parts).astype(np.float32, copy=False)
  return np.asarray(observation, dtype=np.float32).reshape(-1)


def check_action(action: Any, action_dim: int) -> np.ndarray:
  """Checks a normalized action and returns it as a float64 vector.

  The actor clips its actions to [-1, 1] before stepping, so a violation here
  means a bug (wrong head size, NaN from a diverged network, missing clip);
  failing loudly beats silently clipping it away.

  Args:
    action: the action passed to `step`.
    action_dim: the expected length of the action vector.

  Returns:
    The action as a float64 array of shape `(action_dim,)`, unclipped:
    within `ACTION_TOLERANCE` of [-1, 1]; rescaling clips to the bounds.

  Raises:
    ActionError (a ValueError): on a wrong shape, a non-numeric or
      non-finite value, or a value outside [-1, 1] by more than
      `ACTION_TOLERANCE`.
  """
  try:
    action = np.asarray(action, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise ActionError(f'Action is not a numeric array: {e}') from e
  if action.shape != (action_dim,):
    raise ActionError(
        f'Action has shape {action.shape}; expected shape ({action_dim},).')
  # This runs on every environment step. Python's max over a short list is
  # several times cheaper than a numpy reduction; max may skip a NaN, so the sum
  # (NaN if any entry is NaN, or holds both infinities) catches those.
  values = action.tolist()
  if values and not (max(map(abs, values)) <= 1.0 + ACTION_TOLERANCE
                     and sum(values) == sum(values)):
    if not np.all(np.isfinite(action)):
      raise ActionError(f'Action has non-finite values: {action}.')
    raise ActionError(
        f'Action {action} is outside [-1, 1] (tolerance {ACTION_TOLERANCE}).')
  return action


def rescale_action(action: np.ndarray, minimum: np.ndarray,
                   maximum: np.ndarray) -> np.ndarray:
  """Maps an action linearly from [-1, 1] to [minimum, maximum].

  -1 maps to `minimum`, 1 to `maximum`, 0 to the midpoint. The result is
  clipped to the bounds, so floating-point rounding can never push an
  endpoint just outside them.

  Args:
    action: values in [-1, 1].
    minimum: finite lower bounds, broadcastable against `action`.
    maximum: finite upper bounds, broadcastable against `action`.

  Returns:
    The rescaled action, float64.
  """
  minimum = np.asarray(minimum, np.float64)
  maximum = np.asarray(maximum, np.float64)
  scaled = minimum + (np.asarray(action, np.float64) + 1.0) * 0.5 * (
      maximum - minimum)
  # np.minimum/np.maximum rather than np.clip: a fraction of its call cost.
  return np.minimum(np.maximum(scaled, minimum), maximum)


# ---------------------------------------------------------------------------
# Wrappers.
# ---------------------------------------------------------------------------


class NormalizedEnvironment(dm_env.Environment):
  """Flat float32 observations and checked actions in [-1, 1].

  Wraps any `dm_env.Environment` whose action spec is a `BoundedArray` with
  finite bounds. Relies on the wrapped environment for "step after LAST
  resets" (dm_control does it; `GymnasiumAdapter` does it).
  """

  def __init__(self, environment: dm_env.Environment):
    self._environment = environment
    native = environment.action_spec()
    if not isinstance(native, specs.BoundedArray):
      raise ValueError(
          f'Action spec must be a BoundedArray, got {native!r}.')
    self._native_action_spec = native
    # Broadcast scalar bounds once, so rescaling is elementwise per dimension.
    self._minimum = np.array(
        np.broadcast_to(native.minimum, native.shape).reshape(-1), np.float64)
    self._maximum = np.array(
        np.broadcast_to(native.maximum, native.shape).reshape(-1), np.float64)
    if not (np.all(np.isfinite(self._minimum)) and
            np.all(np.isfinite(self._maximum))):
      raise ValueError(
          'Continuous actions with finite bounds are required to rescale '
          f'from [-1, 1]; got minimum={native.minimum}, '
          f'maximum={native.maximum}.')
    if np.any(self._minimum > self._maximum):
      raise ValueError(
          f'Action minimum {native.minimum} exceeds maximum {native.maximum}.')
    self._action_dim = int(self._minimum.size)
    obs_spec = environment.observation_spec()
    self._observation_dim = flat_size(obs_spec)
    # For a flat dict of arrays (every dm_control task), where each entry
    # lands in the flat vector: filling one preallocated vector costs a
    # third of flatten_observation's ravel-and-concatenate.
    self._obs_slices = None
    if isinstance(obs_spec, Mapping) and not any(
        isinstance(v, Mapping) for v in obs_spec.values()):
      self._obs_slices, start = [], 0
      for key, spec in obs_spec.items():
        size = flat_size(spec)
        self._obs_slices.append((key, start, start + size, len(spec.shape) > 1))
        start += size

  @property
  def environment(self) -> dm_env.Environment:
    """The wrapped environment (native observations and action bounds)."""
    return self._environment

  def observation_spec(self) -> specs.Array:
    return specs.Array(
        shape=(self._observation_dim,), dtype=np.float32, name='observation')

  def action_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(
        shape=(self._action_dim,),
        dtype=np.float32,
        minimum=-np.ones((self._action_dim,), np.float32),
        maximum=np.ones((self._action_dim,), np.float32),
        name='action')

  def reward_spec(self) -> specs.Array:
    # float32, matching what _convert emits, so replay signatures agree.
    return specs.Array(shape=(), dtype=np.float32, name='reward')

  def discount_spec(self) -> specs.BoundedArray:
    return specs.BoundedArray(shape=(), dtype=np.float32, minimum=0.0,
                              maximum=1.0, name='discount')

  @property
  def wrapped(self) -> dm_env.Environment:
    """The environment inside (for rendering: its physics or gym env)."""
    return self._environment

  def reset(self) -> dm_env.TimeStep:
    return self._convert(self._environment.reset())

  def step(self, action) -> dm_env.TimeStep:
    action = check_action(action, self._action_dim)
    native = rescale_action(action, self._minimum, self._maximum)
    native = native.reshape(self._native_action_spec.shape).astype(
        self._native_action_spec.dtype, copy=False)
    return self._convert(self._environment.step(native))

  def close(self) -> None:
    self._environment.close()

  def _flatten(self, observation) -> np.ndarray:
    if self._obs_slices is None or not isinstance(observation, Mapping):
      return flatten_observation(observation)
    flat = np.empty((self._observation_dim,), np.float32)
    for key, start, stop, multi_dim in self._obs_slices:
      value = observation[key]
      flat[start:stop] = np.ravel(value) if multi_dim else value
    return flat

  def _convert(self, timestep: dm_env.TimeStep) -> dm_env.TimeStep:
    # None stays None: dm_env uses it for reward and discount on FIRST steps.
    reward = None if timestep.reward is None else np.float32(timestep.reward)
    discount = (None if timestep.discount is None
                else np.float32(timestep.discount))
    return timestep._replace(
        observation=self._flatten(timestep.observation),
        reward=reward,
        discount=discount)


class GymnasiumAdapter(dm_env.Environment):
  """A gymnasium (1.x API) environment as a `dm_env.Environment`.

  Observations are gymnasium-flattened (`gymnasium.spaces.flatten`); actions
  keep the native `Box` bounds (use `NormalizedEnvironment` on top).

  Episode ends: `terminated` becomes `dm_env.termination` (discount 0), a
  `truncated`-only end becomes `dm_env.truncation` (discount 1), so that
  bootstrapping continues through time limits. If both flags are set, the
  termination wins: the state really is terminal.

  Seeding: the first reset (explicit, or implicit through `step`) passes
  `seed` to gymnasium; later resets pass none, so episodes continue the
  environment's RNG stream rather than repeating the first episode.
  """

  def __init__(self, gym_env: Any, seed: int | None = None):
    import gymnasium

    if not isinstance(gym_env.action_space, gymnasium.spaces.Box):
      raise ValueError(
          'Continuous Box actions are required; this environment has '
          f'action space {gym_env.action_space}.')
    self._gym_env = gym_env
    self._spaces = gymnasium.spaces
    self._seed = seed
    self._seed_used = False
    self._reset_next_step = True

  @property
  def gym_env(self) -> Any:
    """The wrapped gymnasium environment."""
    return self._gym_env

  def observation_spec(self) -> specs.Array:
    space = self._gym_env.observation_space
    return specs.Array(
        shape=(self._spaces.flatdim(space),),
        dtype=self._spaces.flatten_space(space).dtype,
        name='observation')

  def action_spec(self) -> specs.BoundedArray:
    space = self._gym_env.action_space
    return specs.BoundedArray(
        shape=space.shape,
        dtype=space.dtype,
        minimum=space.low,
        maximum=space.high,
        name='action')

  def reset(self) -> dm_env.TimeStep:
    if self._seed_used:
      observation, _ = self._gym_env.reset()
    else:
      observation, _ = self._gym_env.reset(seed=self._seed)
      self._seed_used = True
    self._reset_next_step = False
    return dm_env.restart(self._flatten(observation))

  def step(self, action) -> dm_env.TimeStep:
    # dm_env convention: the action passed after a LAST step is ignored and
    # a new episode starts.
    if self._reset_next_step:
      return self.reset()
    observation, reward, terminated, truncated, _ = self._gym_env.step(action)
    observation = self._flatten(observation)
    if terminated:
      self._reset_next_step = True
      return dm_env.termination(reward, observation)
    if truncated:
      self._reset_next_step = True
      return dm_env.truncation(reward, observation)
    return dm_env.transition(reward, observation)

  def close(self) -> None:
    self._gym_env.close()

  def _flatten(self, observation: Any) -> np.ndarray:
    return self._spaces.flatten(self._gym_env.observation_space, observation)
