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


def _step(carry, x):
  """A loop step with metrics of every kind a learner step has: float,
  int and bool scalars (one a Python-typed constant) and a vector."""
  carry = carry + x
  return carry, {'loss': jnp.sum(carry) * 0.5, 'steps': jnp.int32(3) + 1,
                 'finite': jnp.all(jnp.isfinite(carry)),
                 'epsilon_used': jnp.float32(0.1), 'per_dim': carry * 2.0,
                 'big_count': jnp.int32(2**30) + jnp.int32(x[0] > 0)}


def test_scan_stacked_gives_what_scan_gives():
  xs = jnp.asarray(np.random.default_rng(0).normal(size=(5, 3)), jnp.float32)
  state0 = jnp.zeros(3, jnp.float32)
  want_state, want = jax.lax.scan(_step, state0, xs)
  got_state, got = jax.jit(lambda s, x: trees.scan_stacked(_step, s, x))(
      state0, xs)
  np.testing.assert_array_equal(got_state, want_state)
  assert set(got) == set(want)
  for name in want:  # same values, bit for bit, and the same dtypes
    assert got[name].dtype == want[name].dtype, name
    assert got[name].shape == want[name].shape, name
    np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_scan_stacked_writes_one_output_per_dtype():
  xs = jnp.ones((4, 3), jnp.float32)

  def updates(scan):
    text = jax.jit(lambda s, x: scan(_step, s, x)).lower(
        jnp.zeros(3), xs).as_text()
    return text.count('dynamic_update_slice')
  # float32, int32, bool and the vector: four, where scan writes six.
  assert updates(trees.scan_stacked) == 4
  assert updates(jax.lax.scan) == 6
