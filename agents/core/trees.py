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


def scan_stacked(step, state, xs):
  """`jax.lax.scan(step, state, xs)` for a step returning (state, metrics:
  {name: array}): the same (state, {name: [K, ...]}), with the scalar
  metrics carried out of the loop as one [K, n] array per dtype instead of
  one [K] array each.

  A loop's per-step outputs are written into its stacked results one
  update at a time, an update (a kernel on an accelerator) per output per
  step; thirty scalar metrics made thirty. Stacked by dtype (float32,
  int32, bool: no value changes type) they make one each, and the columns
  are split out once per call, after the loop.
  """
  columns: dict = {}  # dtype -> names, filled when `body` is traced

  def body(carry, x):
    carry, metrics = step(carry, x)
    scalars = {k: jnp.asarray(v) for k, v in metrics.items()
               if jnp.ndim(v) == 0}
    columns.clear()
    for name in sorted(scalars):
      columns.setdefault(scalars[name].dtype.name, []).append(name)
    packed = {dtype: jnp.stack([scalars[n] for n in names])
              for dtype, names in columns.items()}
    rest = {k: v for k, v in metrics.items() if k not in scalars}
    return carry, (packed, rest)

  state, (packed, rest) = jax.lax.scan(body, state, xs)
  metrics = dict(rest)
  for dtype, names in columns.items():
    for i, name in enumerate(names):
      metrics[name] = packed[dtype][:, i]
  return state, metrics
