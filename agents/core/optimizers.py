"""optax optimizers by name, with the learning rate set from outside.

The learning rate is an injected hyperparameter that the caller sets on every
update from a global count (see schedules.py); the optimizer's own step count
is never used for scheduling, since it restarts whenever a component is
rebuilt and counts dual sub-steps.
"""

from __future__ import annotations

from typing import Optional

import jax.numpy as jnp
import optax

_FACTORIES = {
    'adam': optax.adam,
    # Acme's MPO builder uses adamw with its config's weight_decay, 0.0 by
    # default; optax's own default of 1e-4 would pull every network weight
    # and dual toward 0 with nothing in the config saying so.
    'adamw': lambda learning_rate: optax.adamw(learning_rate,
                                               weight_decay=0.0),
    'sgd': optax.sgd,
    'rmsprop': optax.rmsprop,
    'adagrad': optax.adagrad,
    'adabelief': optax.adabelief,
}


def make(name: str, learning_rate: float,
         max_grad_norm: Optional[float] = None) -> optax.GradientTransformation:
  """An optimizer whose state holds an injectable 'learning_rate'."""
  if name not in _FACTORIES:
    raise ValueError(f'optimizer name: expected one of {sorted(_FACTORIES)}, '
                     f'got {name!r}')
  factory = _FACTORIES[name]

  def build(learning_rate):
    opt = factory(learning_rate)
    if max_grad_norm is not None:
      opt = optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)
    return opt

  return optax.inject_hyperparams(build)(learning_rate=learning_rate)


def with_learning_rate(opt_state, learning_rate):
  """Returns opt_state (from `make`) with its learning rate replaced."""
  hyper = dict(opt_state.hyperparams)
  hyper['learning_rate'] = jnp.asarray(learning_rate,
                                      hyper['learning_rate'].dtype)
  return opt_state._replace(hyperparams=hyper)

