"""The MPO actor: a jitted policy on the CPU, and the acting loop's agent.

Actors run on CPU only, whatever the machine has: the program also hides
accelerators from their processes (launch/mpo.py), and every jitted call
here is pinned to the CPU device, which matters under local_mt where all
nodes share one process.
"""

from __future__ import annotations

from typing import Callable, Optional

import dm_env
import jax
import jax.numpy as jnp
import numpy as np

from agents.mpo import networks
from agents.mpo.config import MPOConfig


def cpu_device():
  return jax.devices('cpu')[0]


def make_policy_fns(cfg: MPOConfig):
  """Returns jitted (sample, mean) policies for a single observation.

  sample(params, key, obs[O]) -> (action[D], next key): a draw from π(·|s),
  clipped to [-1, 1] (the environment's normalised box) for acting; the key
  is split inside, so acting costs one dispatch per step.
  mean(params, obs[O]) -> action[D]: the clipped mean, for evaluation.
  """
  def dist(params, obs):
    return networks.apply_policy(params, obs, init_scale=cfg.policy_init_scale,
                                 min_scale=cfg.policy_min_scale)

  def sample(params, key, obs):
    key, sub = jax.random.split(key)
    d = dist(params, obs)
    a = d.mean + d.stddev * jax.random.normal(sub, d.mean.shape)
    return jnp.clip(a, -1.0, 1.0), key

  def mean(params, obs):
    return jnp.clip(dist(params, obs).mean, -1.0, 1.0)

  return jax.jit(sample), jax.jit(mean)


class Actor:
  """Acme's Actor interface: select_action, observe_first, observe, update.

  variable_source: a callable returning the latest policy params (a courier
    call to the learner in the distributed program), or None for fixed params.
  update_period: env steps between parameter refreshes.
  """

  def __init__(self, cfg: MPOConfig, params, *, seed: int,
               variable_source: Optional[Callable[[], dict]] = None,
               update_period: int = 100, adder=None,
               deterministic: bool = False):
    self._sample, self._mean = make_policy_fns(cfg)
    self._device = cpu_device()
    self._params = jax.device_put(params, self._device)
    self._key = jax.device_put(jax.random.PRNGKey(seed), self._device)
    self._source = variable_source
    self._period = update_period
    self._adder = adder
    self._deterministic = deterministic
    self._steps_since_update = 0

  @property
  def params(self):
    return self._params

  def select_action(self, observation: np.ndarray) -> np.ndarray:
    # Params and key are committed to the CPU device, so the call runs there
    # and the numpy observation follows them without an explicit transfer.
    obs = np.asarray(observation, np.float32)
    if self._deterministic:
      action = self._mean(self._params, obs)
    else:
      action, self._key = self._sample(self._params, self._key, obs)
    return np.asarray(action)

  def observe_first(self, timestep: dm_env.TimeStep) -> None:
    if self._adder is not None:
      self._adder.add_first(timestep)

  def observe(self, action: np.ndarray, next_timestep: dm_env.TimeStep) -> None:
    if self._adder is not None:
      self._adder.add(action, next_timestep)

  def update(self, wait: bool = False) -> None:
    """Refreshes params every `update_period` calls (or now if wait)."""
    self._steps_since_update += 1
    if self._source is None:
      return
    if wait or self._steps_since_update >= self._period:
      self._params = jax.device_put(self._source(), self._device)
      self._steps_since_update = 0
