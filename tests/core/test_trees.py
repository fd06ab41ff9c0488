"""agents/core/trees.py: the non-finite guard's test, one reduction over
every floating leaf, against the per-leaf test it stands for."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.core import trees


def per_leaf_all_finite(tree):
  """The guard as a test per leaf: the definition all_finite must equal."""
  leaves = [jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)
            if jnp.issubdtype(jnp.asarray(x).dtype, jnp.floating)]
  return jnp.stack(leaves).all() if leaves else jnp.bool_(True)


def _tree(dtype=jnp.float32):
  return {'w': jnp.ones((3, 4), dtype), 'b': jnp.zeros((4,), dtype),
          'scalar': jnp.asarray(2.0, dtype), 'count': jnp.int32(7),
          'nested': [jnp.full((2,), 3e38 if dtype == jnp.float32 else 6e4,
                              dtype)]}


@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
def test_any_non_finite_element_of_any_leaf_fails_the_guard(dtype, bad):
  check = jax.jit(trees.all_finite)
  tree = _tree(dtype)
  # Values near the type's largest are finite: nothing may overflow.
  assert bool(check(tree)) and bool(trees.all_finite(tree))
  for path in (('w',), ('b',), ('scalar',), ('nested', 0)):
    bent = jax.tree_util.tree_map(lambda x: x, tree)
    if path == ('scalar',):
      bent['scalar'] = jnp.asarray(bad, dtype)
    elif path == ('nested', 0):
      bent['nested'] = [bent['nested'][0].at[1].set(bad)]
    else:
      bent[path[0]] = bent[path[0]].at[(0,) * bent[path[0]].ndim].set(bad)
    assert not bool(check(bent)), path
    assert bool(check(bent)) == bool(per_leaf_all_finite(bent))


def test_integer_leaves_and_empty_trees_pass():
  assert bool(trees.all_finite({'n': jnp.int32(3)}))
  assert bool(trees.all_finite(()))
  assert bool(trees.all_finite((jnp.float32(1.0), jnp.zeros((0, 3)))))


def test_one_reduction_where_the_per_leaf_test_has_one_per_leaf():
  tree = [jnp.ones((i + 1, 3)) for i in range(12)]

  def reductions(fn):
    text = jax.jit(fn).lower(tree).compile().as_text()
    return sum(' reduce(' in line for line in text.splitlines())
  assert reductions(trees.all_finite) == 1
  assert reductions(per_leaf_all_finite) >= 12
