"""Small pytree helpers the jitted updates share (pure JAX)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def all_finite(tree) -> jax.Array:
  """True iff every floating leaf of `tree` is finite everywhere: the guard
  that skips an update rather than let one NaN spread into the state.

  One test over all leaves raveled together, which XLA fuses into a single
  reduction: a test per leaf would be a reduction per leaf (and a kernel
  each on an accelerator), plus the stack that joins them.
  """
  leaves = [jnp.ravel(x).astype(jnp.float32)
            for x in jax.tree_util.tree_leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
  if not leaves:
    return jnp.bool_(True)
  return jnp.all(jnp.isfinite(jnp.concatenate(leaves)))


def select(pred, new, old):
  """`new` where the scalar `pred` holds, else `old`, leaf by leaf."""
  return jax.tree_util.tree_map(lambda a, b: jnp.where(pred, a, b), new, old)
