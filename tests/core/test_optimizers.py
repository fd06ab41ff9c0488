"""Optimizers by name (agents/core/optimizers.py)."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tandem.agents.core import optimizers


def test_adamw_decays_no_weight_as_acme_configures_it():
  # optax.adamw's default weight_decay (1e-4) would move a parameter with a
  # zero gradient; Acme's builder passes weight_decay=0.0.
  params = {'w': jnp.full((3,), 1000.0)}
  opt = optimizers.make('adamw', 1e-2)
  state = opt.init(params)
  updates, _ = opt.update({'w': jnp.zeros(3)}, state, params)
  np.testing.assert_array_equal(optax.apply_updates(params, updates)['w'],
                                params['w'])
  # The same update as adam on a real gradient.
  grad = {'w': jnp.array([1.0, -2.0, 0.5])}
  adam = optimizers.make('adam', 1e-2)
  got, _ = opt.update(grad, opt.init(params), params)
  want, _ = adam.update(grad, adam.init(params), params)
  np.testing.assert_allclose(got['w'], want['w'], rtol=1e-6)


def test_an_unknown_name_is_refused_naming_the_choices():
  with pytest.raises(ValueError, match="expected one of .*'adam'"):
    optimizers.make('lion', 1e-3)
