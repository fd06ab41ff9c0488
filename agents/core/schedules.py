"""Schedules as pure functions of a global count and a horizon.

A schedule never looks at how long the current call, round or process has
run: given the same (count, horizon) it returns the same value, so a run split
into rounds, or stopped and resumed, sees exactly the values of one long run.
"""

from __future__ import annotations

import jax.numpy as jnp


def progress(count, horizon, hold_fraction=0.0):
  """How far a schedule has moved, in [0, 1]; count and horizon are global.

  p = clip((count / horizon - h) / (1 - h), 0, 1), h = hold_fraction: 0 for
  the first h·horizon counts, then rising linearly to 1 at the horizon.
  """
  t = (jnp.asarray(count, jnp.float32) /
       jnp.maximum(jnp.asarray(horizon, jnp.float32), 1.0))
  return jnp.clip((t - hold_fraction) / (1.0 - hold_fraction), 0.0, 1.0)


def value(kind: str, init: float, final_fraction: float, count, horizon,
          hold_fraction: float = 0.0):
  """The scheduled value at a global count.

  kind: 'constant' -> init; 'linear' -> init·(1 - p + p·final_fraction);
  'cosine' -> init·(final + (1 - final)·(1 + cos πp)/2), p = progress.
  hold_fraction in [0, 1): the share of the horizon held at init before the
  value starts to move.
  """
  p = progress(count, horizon, hold_fraction)
  if kind == 'constant':
    return jnp.asarray(init, jnp.float32) + 0.0 * p
  if kind == 'linear':
    return init * (1.0 - p + p * final_fraction)
  if kind == 'cosine':
    return init * (final_fraction +
                   (1.0 - final_fraction) * 0.5 * (1.0 + jnp.cos(jnp.pi * p)))
  raise ValueError(f"schedule kind: expected 'constant', 'linear' or 'cosine', "
                   f'got {kind!r}')


def from_config(cfg, count, horizon):
  """Evaluates an OptimizerConfig's learning-rate schedule."""
  return value(cfg.schedule, cfg.learning_rate, cfg.final_fraction, count,
               horizon, cfg.hold_fraction)
