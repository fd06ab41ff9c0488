"""Dual optimisation strategies: exact solve, in-graph optimizer steps."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tandem.agents.mpo import config
from tandem.agents.mpo import duals
from tandem.agents.mpo import losses


def _q(n=20, b=64, seed=0, scale=3.0):
  rng = np.random.default_rng(seed)
  return jnp.asarray(scale * rng.normal(size=(n, b)), jnp.float32)


def test_positive_parameterisation_round_trips_and_has_floor():
  for v in [1e-3, 1.0, 10.0, 1000.0]:
    u = duals.inverse_positive(jnp.float32(v), 1e-8)
    assert float(duals.positive(u, 1e-8)) == pytest.approx(v, rel=1e-5)
  assert duals.positive(jnp.float32(-1e4), 1e-8) >= np.float32(1e-8)
  # Acme's parameterisation: softplus plus the floor (the dual dynamics
  # depend on it; exp would round-trip as well).
  for u in (-3.0, 0.0, 2.5):
    assert float(duals.positive(jnp.float32(u), 1e-3)) == pytest.approx(
        math.log1p(math.exp(u)) + 1e-3, rel=1e-6)


@pytest.mark.parametrize('penalty_start, want', [(0.0, 3.0), (7.0, 7.0)])
def test_init_starts_the_penalty_temperature_where_configured(penalty_start,
                                                              want):
  # 0 keeps Acme's one start for both temperatures.
  cfg = config.DualConfig(init_temperature=3.0,
                          init_penalty_temperature=penalty_start)
  p = duals.init(cfg, 2).params
  assert float(duals.positive(p.temperature, cfg.floor)) == pytest.approx(
      3.0, rel=1e-5)
  assert float(duals.positive(p.penalty_temperature, cfg.floor)) == (
      pytest.approx(want, rel=1e-5))


@pytest.mark.parametrize('seed, eps', [(0, 0.1), (1, 0.5), (2, 0.01)])
def test_exact_solver_reaches_dual_minimum_and_kl_equals_epsilon(seed, eps):
  q = _q(seed=seed)
  info = jax.jit(lambda q: duals.solve_temperature(
      q, eps, floor=1e-8, tolerance=1e-6, max_iterations=100))(q)
  eta = float(info.temperature)
  grid = np.exp(np.linspace(np.log(1e-3), np.log(1e3), 20001))
  g = np.asarray(jax.vmap(lambda t: losses.temperature_dual(q, eps, t))(
      jnp.asarray(grid, jnp.float32)))
  g_star = float(losses.temperature_dual(q, eps, jnp.float32(eta)))
  assert g_star <= g.min() + 1e-5 * abs(g.min())
  assert abs(np.log(eta) - np.log(grid[np.argmin(g)])) < 2e-3
  kl = float(jnp.mean(losses.kl_to_uniform(losses.estep_weights(q, eta))))
  assert kl == pytest.approx(eps, rel=1e-3)
  assert int(info.iterations) < 100


def test_exact_solver_returns_floor_when_constraint_cannot_bind():
  q = jnp.zeros((20, 8))  # all actions equal: any η satisfies the KL bound
  info = duals.solve_temperature(q, 0.1, floor=1e-6, tolerance=1e-6,
                                 max_iterations=100)
  assert float(info.temperature) == pytest.approx(1e-6, rel=1e-3)


def _eager_temperature_steps(q, eps, cfg, lr, k):
  f = cfg.floor
  t0 = duals.init(cfg, 1).params.temperature
  opt = {'adam': optax.adam, 'sgd': optax.sgd, 'rmsprop': optax.rmsprop}[
      cfg.temperature_optimizer.name](lr)
  loss = lambda t: losses.temperature_dual(q, eps, duals.positive(t, f))
  params, state = t0, opt.init(t0)
  for _ in range(k):
    g = jax.grad(loss)(params)
    upd, state = opt.update(g, state, params)
    params = optax.apply_updates(params, upd)
  return params


@pytest.mark.parametrize('name', ['adam', 'sgd', 'rmsprop'])
def test_k_in_graph_dual_steps_equal_k_eager_optax_steps(name):
  k, eps, lr = 7, 0.1, 0.05
  cfg = config.DualConfig(
      num_steps=k,
      temperature_optimizer=config.dual_optimizer(name, lr),
      init_temperature=3.0, log_residual=False)
  q = _q()
  state = duals.init(cfg, 1)
  fn = jax.jit(lambda s, q: duals.update_temperatures(
      cfg, s, q, eps, None, 0.0, jnp.float32(lr)))
  new_state, info = fn(state, q)
  expected = _eager_temperature_steps(q, eps, cfg, lr, k)
  np.testing.assert_allclose(float(new_state.params.temperature),
                             float(expected), rtol=1e-5)
  # The optimizer state is carried: Adam's count advanced by k.
  assert int(new_state.temperature_opt.count) == k
  # A second call continues from the carried state like 2k eager steps.
  new_state2, _ = fn(new_state, q)
  expected2 = _eager_temperature_steps(q, eps, cfg, lr, 2 * k)
  np.testing.assert_allclose(float(new_state2.params.temperature),
                             float(expected2), rtol=1e-5)
  assert float(info.temperature_before) == pytest.approx(3.0, rel=1e-5)


def test_alpha_steps_move_against_the_constraint_violation():
  cfg = config.DualConfig(num_steps=5, log_residual=False)
  state = duals.init(cfg, 2)
  before = np.asarray(duals.positive(state.params.alpha_mean, cfg.floor))
  # dim 0 violates its bound (KL > ε): α grows; dim 1 satisfies it: α shrinks.
  kl = jnp.array([1.0, 0.0])
  new = duals.update_alphas(cfg, state, kl, jnp.zeros(2), 0.1, 0.1,
                            jnp.float32(1e-2))
  after = np.asarray(duals.positive(new.params.alpha_mean, cfg.floor))
  assert after[0] > before[0] and after[1] < before[1]
  assert int(new.alpha_opt.count) == 5


def test_exact_solver_in_update_sets_temperature_to_solution():
  eps = 0.1
  cfg = config.DualConfig(solver='exact')
  q = _q(seed=3)
  new_state, info = duals.update_temperatures(
      cfg, duals.init(cfg, 1), q, eps, None, 0.0, jnp.float32(1e-2))
  w = losses.estep_weights(q, info.temperature_after)
  assert float(jnp.mean(losses.kl_to_uniform(w))) == pytest.approx(eps,
                                                                   rel=1e-3)
  assert abs(float(info.residual)) < 1e-5
  assert int(info.solver_iterations) > 0


def test_residual_is_positive_away_from_optimum():
  cfg = config.DualConfig(init_temperature=50.0)
  q = _q(seed=4)
  _, info = duals.update_temperatures(cfg, duals.init(cfg, 1), q, 0.1, None,
                                      0.0, jnp.float32(1e-2))
  assert float(info.residual) > 1e-3


def test_every_dual_stops_at_the_reference_clamp():
  # Slack constraints (all Q equal, KLs 0) push every dual down; these SGD
  # rates would take each unconstrained value hundreds below -18 at once.
  sgd = lambda group: config.dual_optimizer('sgd', 1e11, group)
  cfg = config.DualConfig(num_steps=2, temperature_optimizer=sgd('temperature'),
                          alpha_optimizer=sgd('alpha'), init_temperature=1e-7,
                          init_penalty_temperature=1e-7, init_alpha_mean=1e-7,
                          init_alpha_stddev=1e-7, log_residual=False)
  state = duals.init(cfg, 2)
  assert float(state.params.temperature) > duals.MIN_UNCONSTRAINED
  q = jnp.zeros((20, 8))
  new, _ = duals.update_temperatures(cfg, state, q, 0.1, q, 0.1,
                                     jnp.float32(1e11))
  new = duals.update_alphas(cfg, new, jnp.zeros(2), jnp.zeros(2), 0.1, 0.1,
                            jnp.float32(1e11))
  for u in jax.tree_util.tree_leaves(new.params):
    np.testing.assert_array_equal(u, duals.MIN_UNCONSTRAINED)
  # The exact solve puts η at the floor here (the constraint cannot bind):
  # its stored value is clamped the same way.
  exact = dataclasses.replace(cfg, solver='exact')
  new, info = duals.update_temperatures(exact, state, q, 0.1, q, 0.1,
                                        jnp.float32(1e-2))
  assert float(new.params.temperature) == duals.MIN_UNCONSTRAINED
  assert float(new.params.penalty_temperature) == duals.MIN_UNCONSTRAINED
  assert float(info.temperature_after) == pytest.approx(
      float(duals.positive(jnp.float32(duals.MIN_UNCONSTRAINED), cfg.floor)))
