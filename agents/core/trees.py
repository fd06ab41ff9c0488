"""Small pytree helpers the jitted updates share (pure JAX)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def all_finite(tree) -> jax.Array:
  """True iff every floating leaf of `tree` is finite everywhere: the guard
  that skips an update rather than let one NaN spread into the state."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
  return jnp.stack(leaves).all()


def select(pred, new, old):
  """`new` where the scalar `pred` holds, else `old`, leaf by leaf."""
  return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)
