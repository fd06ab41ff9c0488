"""Environments by name, behind one `dm_env.Environment` interface
(wrappers.py holds the wrappers).

Two backends are supported, chosen by name:

* dm_control suite tasks as `"domain:task"`, e.g. `"cartpole:swingup"`;
* gymnasium environments with continuous (`Box`) actions as `"gym:<id>"`,
  e.g. `"gym:Pendulum-v1"`, where `<id>` is an id of gymnasium's registry.

Whatever the backend, the environment returned by `make_environment`:

* emits observations as flat float32 vectors (a dict observation is
  concatenated in the dict's order, each entry flattened; scalars become
  length 1);
* takes actions in [-1, 1]^action_dim, checks them, and rescales them linearly
  to the underlying environment's bounds, so that agents never need to know
  the native action range;
* emits float32 rewards and discounts (both `None` on FIRST steps, as in
  `dm_env.restart`);
* starts a new episode when `step` is called after a LAST step.

dm_control and gymnasium are imported inside functions, so that importing this
module (e.g. for config validation in a launcher) stays cheap.

Why not Acme's wrappers (CanonicalSpecWrapper, SinglePrecisionWrapper,
ConcatObservationWrapper, GymWrapper), which do much the same: `acme.wrappers`
imports `gym` at import time, which this stack does not install (it installs
gymnasium instead), so none of them can be imported; and the actors' per-step
wrapper cost matters (8 µs here, bench/actor.py). The result is still a plain
`dm_env.Environment`: `acme.specs.make_environment_spec(env)` gives Acme's
EnvironmentSpec of it (tests/test_acme_interfaces.py).
"""

import os
from typing import Any, Sequence

import dm_env
import numpy as np

from tandem.agents.core.specs import Dims
from tandem.agents.envs.wrappers import (GymnasiumAdapter,
                                         NormalizedEnvironment, flat_size)

# The prefix that selects the gymnasium backend.
GYM_PREFIX = 'gym'


# ---------------------------------------------------------------------------
# Names.
# ---------------------------------------------------------------------------


def _quiet_rendering() -> None:
  # Tandem never renders; without this dm_control probes GLFW on import and
  # warns on headless machines. An explicit MUJOCO_GL still wins.
  os.environ.setdefault('MUJOCO_GL', 'disable')


def _split_name(name: str) -> tuple[str, str]:
  """Splits `"prefix:rest"` at the first colon."""
  if not isinstance(name, str) or ':' not in name:
    raise ValueError(
        f'Environment name {name!r} is not of the form "domain:task" '
        '(a dm_control suite task, e.g. "cartpole:swingup") or "gym:<id>" '
        '(a gymnasium id with Box actions, e.g. "gym:Pendulum-v1").')
  prefix, rest = name.split(':', 1)
  return prefix, rest


def dm_control_task_names() -> Sequence[str]:
  """All dm_control suite tasks, as `"domain:task"` names."""
  _quiet_rendering()
  from dm_control import suite
  return [f'{domain}:{task}' for domain, task in suite.ALL_TASKS]


def _check_dm_control_name(domain: str, task: str) -> None:
  name = f'{domain}:{task}'
  valid = dm_control_task_names()
  if name not in valid:
    raise ValueError(
        f'Unknown environment {name!r}. Valid dm_control names are: '
        f'{", ".join(valid)}; or use "gym:<id>" for a gymnasium environment '
        'with Box actions.')


def _make_gym_env(env_id: str, render: bool = False) -> Any:
  """Builds a registered gymnasium env after checking it can be adapted.

  Only exact registry ids are accepted (no "module:Env" imports, no
  version-less ids), so a name means one environment.
  """
  import gymnasium

  if env_id not in gymnasium.registry:
    raise ValueError(
        f'Unknown gymnasium environment id {env_id!r} (name '
        f'"{GYM_PREFIX}:{env_id}"); it is not in gymnasium.registry. '
        'Registered ids (only those with Box action spaces can be used): '
        f'{", ".join(sorted(gymnasium.registry))}.')
  try:
    gym_env = gymnasium.make(
        env_id, **({'render_mode': 'rgb_array'} if render else {}))
  except (gymnasium.error.Error, ImportError) as e:
    # E.g. Box2D or MuJoCo extras missing: a config error, not a crash later.
    raise ValueError(
        f'Could not build gymnasium environment {env_id!r}: {e}') from e
  space = gym_env.action_space
  if not isinstance(space, gymnasium.spaces.Box):
    gym_env.close()
    raise ValueError(
        f'Gymnasium environment {env_id!r} has action space {space}; '
        'continuous Box actions are required.')
  if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
    gym_env.close()
    raise ValueError(
        f'Gymnasium environment {env_id!r} has unbounded actions {space}; '
        'finite Box bounds are required to rescale from [-1, 1].')
  return gym_env


# dm_control domains whose tasks have no time limit of their own: LQR's end
# only near the origin, so a policy that never gets there would run one
# endless episode (an evaluator would never finish). They get the suite's
# usual 1000 control steps (LQR's control step is 0.03 s).
TIME_LIMITS_S = {'lqr': 1000 * 0.03}


def may_terminate(name: str) -> bool:
  """Whether an environment of this name can end an episode in a terminal
  state (discount 0), as far as is known without running it. dm_control's
  suite tasks end only at their time limits (discount 1), except LQR's,
  which terminate near the origin; a gymnasium id may (Hopper, Walker2d)
  or may not (Pendulum), and nothing in its registry entry says which."""
  prefix, _ = _split_name(name)
  return prefix in (GYM_PREFIX, 'lqr')


def validate_environment_name(name: str) -> None:
  """Checks that `make_environment(name)` would succeed, cheaply.

  dm_control names are checked against `suite.ALL_TASKS` without building
  anything; gymnasium ids are built once (cheap) and closed, since the action
  space type is only known from an instance.

  Args:
    name: `"domain:task"` or `"gym:<id>"`.

  Raises:
    ValueError: with the list of valid names where one is known.
  """
  prefix, rest = _split_name(name)
  if prefix == GYM_PREFIX:
    _make_gym_env(rest).close()
  else:
    _check_dm_control_name(prefix, rest)


def make_environment(name: str, seed: int | None = None,
                     render: bool = False) -> dm_env.Environment:
  """Builds an environment with flat float32 observations and [-1, 1] actions.

  Args:
    name: a dm_control suite task as `"domain:task"` (any pair of
      `suite.ALL_TASKS`, e.g. `"cartpole:swingup"`, `"walker:walk"`), or
      `"gym:<id>"` for a gymnasium environment with Box actions
      (e.g. `"gym:Pendulum-v1"`).
    seed: seeds the task's RNG (dm_control) or the first reset (gymnasium);
      `None` draws fresh entropy.
    render: a gymnasium environment is made with render_mode='rgb_array'
      (dm_control renders without asking); see agents/envs/rendering.py.

  Returns:
    A `NormalizedEnvironment`.

  Raises:
    ValueError: for a malformed or unknown name, or an environment without
      bounded continuous actions.
  """
  prefix, rest = _split_name(name)
  if prefix == GYM_PREFIX:
    return NormalizedEnvironment(GymnasiumAdapter(_make_gym_env(rest, render),
                                                  seed))
  _check_dm_control_name(prefix, rest)
  _quiet_rendering()
  from dm_control import suite
  task_kwargs = {'random': seed}
  if prefix in TIME_LIMITS_S:
    task_kwargs['time_limit'] = TIME_LIMITS_S[prefix]
  return NormalizedEnvironment(suite.load(prefix, rest,
                                          task_kwargs=task_kwargs))


def env_dims(env: dm_env.Environment) -> Dims:
  """Flat observation and action sizes of an environment."""
  return Dims(
      observation=flat_size(env.observation_spec()),
      action=flat_size(env.action_spec()))
