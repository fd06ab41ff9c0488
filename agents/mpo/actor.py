"""The MPO actor: actions from the numpy policy, parameters from the learner.

Actors act on the CPU whatever the machine has, one observation per call, so
the policy runs in numpy (agents/mpo/numpy_policy.py says why) and an actor
process never starts an XLA runtime or touches an accelerator. Environments
and replay writes are the acting loop's business (agents/nodes/acting.py).
"""

from __future__ import annotations

from typing import Any, Callable, Union

import acme.core
import dm_env
import numpy as np

from tandem.agents.mpo import numpy_policy
from tandem.agents.mpo.config import MPOConfig


class Actor(acme.core.Actor):
  """An `acme.core.Actor`: drop it into `acme.EnvironmentLoop`.

  Samples a ~ N(mean, stddev) clipped to the normalised box [-1, 1], or with
  `deterministic` the clipped mean (evaluation).

  variable_source: the latest policy params come from it: an
    `acme.core.VariableSource` (asked for ['policy'], e.g. Tandem's learner
    node), a callable returning them (a courier call to the learner in the
    distributed program), or None for fixed params.
  update_period: env steps between parameter refreshes.
  adder: optional; `observe_first`/`observe` pass timesteps to it (an Acme
    adder or Tandem's replay adders). Tandem's own actor nodes step several
    environments per policy call (acting.EnvGroup) and add per environment,
    so they leave it None.
  """

  def __init__(self, cfg: MPOConfig, params, *, seed: int,
               variable_source: Union[None, Callable[[], dict],
                                      acme.core.VariableSource] = None,
               update_period: int = 100, deterministic: bool = False,
               adder: Any = None):
    self._scales = cfg.policy_head_kwargs
    self._params = numpy_policy.from_params(params)
    d = self._params.heads_b.shape[0] // 2
    self._low, self._high = -np.ones(d, np.float32), np.ones(d, np.float32)
    self._rng = np.random.default_rng(seed)
    # Duck-typed, so a Courier client of a learner node serves too.
    if hasattr(variable_source, 'get_variables'):
      source = variable_source
      variable_source = lambda: source.get_variables(['policy'])[0]
    self._source = variable_source
    self._adder = adder
    self._period = update_period
    self._deterministic = deterministic
    self._steps_since_update = 0

  @property
  def params(self) -> numpy_policy.NumpyParams:
    return self._params

  def select_action(self, observation: np.ndarray) -> np.ndarray:
    """observation [O] -> action [D], or a batch [K, O] -> [K, D]; float32
    in [-1, 1]."""
    obs = np.asarray(observation, np.float32)
    mean, stddev = numpy_policy.apply_policy(self._params, obs,
                                             **self._scales)
    if not self._deterministic:
      noise = self._rng.standard_normal(mean.shape, np.float32)
      noise *= stddev
      mean += noise
    # minimum/maximum with array bounds: a fraction of np.clip's overhead.
    return np.minimum(np.maximum(mean, self._low), self._high)

  def observe_first(self, timestep: dm_env.TimeStep) -> None:
    if self._adder is not None:
      self._adder.add_first(timestep)

  def observe(self, action, next_timestep: dm_env.TimeStep) -> None:
    if self._adder is not None:
      self._adder.add(action, next_timestep)

  def update(self, wait: bool = False, steps: int = 1) -> None:
    """Counts `steps` env steps (Acme's loop calls this once per step);
    refreshes the params once `update_period` have passed since the last
    refresh (or now, if wait)."""
    self._steps_since_update += steps
    if self._source is None:
      return
    if wait or self._steps_since_update >= self._period:
      self._params = numpy_policy.from_params(self._source())
      self._steps_since_update = 0
