"""Expert demonstrations for a task: loading a file for an environment,
saving, and collecting episodes of a policy. The file format, and what
`Demonstrations` holds, is demo_format.py's."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tandem.agents.ail import demo_checks
from tandem.agents.ail.demo_format import (  # re-exported: the module's API
    ACTIONS, DISCOUNTS, EPISODE_INDEX, EPISODE_RETURNS, NEXT_OBSERVATIONS,
    OBSERVATIONS, REWARDS, STEP_INDEX, DemoError, Demonstrations)
from tandem.agents.core import files
from tandem.agents.envs import environments
from tandem.agents.envs import wrappers
from tandem.agents.mpo import actor as actor_lib

__all__ = ['DemoError', 'Demonstrations', 'observation_keys', 'load',
           'load_for_environment', 'flat_order_note', 'save', 'collect']

# ---------------------------------------------------------------------------
# Environments.
# ---------------------------------------------------------------------------


def observation_keys(env) -> Optional[list[tuple[str, int]]]:
  """The per-key observation layout of an environment, if it has one.

  Args:
    env: a Tandem environment (`wrappers.NormalizedEnvironment`, whose
      `.environment` is the wrapped one); any other `dm_env.Environment` is
      inspected directly.

  Returns:
    [(key, flat size), ...] in the order `NormalizedEnvironment` concatenates
    them, when the wrapped env's observation spec is a flat mapping of arrays
    (dm_control); None when it is one array (the gymnasium adapter) or a
    nested mapping, whose files must use the flat `observations` layout.
  """
  inner = (env.environment
           if isinstance(env, wrappers.NormalizedEnvironment) else env)
  spec = inner.observation_spec()
  if not isinstance(spec, Mapping) or any(
      isinstance(s, Mapping) for s in spec.values()):
    return None
  return [(str(key), wrappers.flat_size(s)) for key, s in spec.items()]


# ---------------------------------------------------------------------------
# Public API.
# ---------------------------------------------------------------------------


def load(path: str, *, observation_dim: int, action_dim: int,
         observation_keys: Optional[Sequence[tuple[str, int]]] = None
         ) -> Demonstrations:
  """Loads and validates a demonstration file (format: demo_format.py).

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
  with demo_checks.open_archive(path) as npz:
    names = demo_checks.needed_names(set(npz.files), observation_keys, path)
    demo_checks.check_headers(npz, names, path)
    arrays = {name: demo_checks.read_array(npz, name, path) for name in names}
  return demo_checks.validate(arrays, path, observation_dim=observation_dim,
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
  return load(path, observation_dim=dims.observation,
              action_dim=dims.action, observation_keys=keys)


def flat_order_note(path: str, env_name: str) -> Optional[str]:
  """A warning for a file whose observations are one flat array, for an
  environment whose observation-spec order is not its keys' sorted order
  (walker: orientations, height, velocity). The loader cannot tell a flat
  array's column order; Tandem's is the spec order, while writers that
  flatten with `tree.flatten` (Acme's ConcatObservationWrapper among them)
  sort the keys, so such a file loads with its columns silently permuted.
  None for per-key arrays (observations_<key>), which carry their names."""
  with demo_checks.open_archive(path) as npz:
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
  demo_checks.check_shape(observation, source, prefix, (sum(widths),))
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
         ) -> None:
  """Writes demonstrations in demo_format.py's format, atomically.

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
  checked = demo_checks.validate(
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
    episodes: how many episodes to run, >= 1. Episode k runs on an
      environment of its own seeded `seed + k` and gets episode_index
      `seed + k`, so its start state can be set up again from the file
      (`tandem render --beside_expert` does).
    seed: seeds the first episode's environment and the actor.
    deterministic: act at the mean (demonstrations) or sample as the actors
      do (a diagnostic's agent episodes).

  Returns:
    Demonstrations of every transition, in the order they happened.
  """
  if not isinstance(episodes, int) or isinstance(episodes, bool) or (
      episodes < 1):
    raise ValueError(f'episodes: expected an integer >= 1, got {episodes!r}.')
  if not isinstance(seed, int) or seed < 0 or seed + episodes > 2**31 - 1:
    raise ValueError(f'seed: expected an integer >= 0 with seed + episodes '
                     f'below 2**31 (episode k runs on seed + k), got {seed!r}.')
  actor = actor_lib.Actor(mpo_config, policy_params, seed=seed,
                          deterministic=deterministic)
  rows = {name: [] for name in Demonstrations._fields
          if name != 'episode_returns'}
  for episode in range(seed, seed + episodes):
    env = environments.make_environment(env_name, seed=episode)
    try:
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

