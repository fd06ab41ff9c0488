"""E-step and M-step losses against hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.mpo import losses
from tandem.agents.mpo import networks


def test_estep_weights_hand_computed():
  q = jnp.array([[1.0, 2.0], [0.0, 2.0]])  # N=2 samples, B=2 states
  w = np.asarray(losses.estep_weights(q, jnp.float32(1.0)))
  e = math.e
  np.testing.assert_allclose(w[:, 0], [e / (e + 1), 1 / (e + 1)], rtol=1e-6)
  np.testing.assert_allclose(w[:, 1], [0.5, 0.5], rtol=1e-6)
  # Halving the temperature sharpens: weights ∝ exp(2q).
  w2 = np.asarray(losses.estep_weights(q, jnp.float32(0.5)))
  np.testing.assert_allclose(w2[0, 0], e**2 / (e**2 + 1), rtol=1e-6)


def test_temperature_dual_hand_computed():
  q = jnp.array([[1.0, 2.0], [0.0, 2.0]])
  eps = 0.1
  # g(η=1) = ε + mean_b log mean_n exp(q)
  expected = eps + 0.5 * (math.log((math.e + 1) / 2) + 2.0)
  got = float(losses.temperature_dual(q, eps, jnp.float32(1.0)))
  assert got == pytest.approx(expected, rel=1e-6)
  # g(η=2) = 2ε + 2·mean_b log mean_n exp(q/2)
  expected2 = 2 * eps + 2 * 0.5 * (math.log((math.exp(0.5) + 1) / 2) + 1.0)
  assert float(losses.temperature_dual(q, eps, jnp.float32(2.0))) == \
      pytest.approx(expected2, rel=1e-6)


def test_kl_to_uniform():
  w = jnp.array([[0.5, 1.0], [0.5, 0.0]])
  kl = np.asarray(losses.kl_to_uniform(w))
  np.testing.assert_allclose(kl, [0.0, math.log(2)], atol=1e-6)


def test_action_penalty_is_zero_inside_box_and_norm_outside():
  a = jnp.array([[[0.5, -1.0], [2.0, -3.0]]])  # [N=1, B=2, D=2]
  np.testing.assert_allclose(np.asarray(losses.action_penalty_q(a)),
                             [[0.0, -math.sqrt(1.0 + 4.0)]], rtol=1e-6)


def _dist(b, d, seed=0):
  rng = np.random.default_rng(seed)
  return networks.GaussianParams(
      jnp.asarray(rng.normal(size=(b, d)), jnp.float32),
      jnp.asarray(rng.uniform(0.2, 1.0, size=(b, d)), jnp.float32))


@pytest.mark.parametrize('per_dim, shape', [(True, (3,)), (False, (1,))])
def test_mstep_kls_zero_when_online_equals_target(per_dim, shape):
  target = _dist(4, 3)
  actions = jnp.zeros((5, 4, 3))
  weights = jnp.full((5, 4), 0.2)
  terms = losses.mstep_terms(target, target, actions, weights, per_dim)
  assert terms.kl_mean.shape == shape and terms.kl_stddev.shape == shape
  np.testing.assert_allclose(np.asarray(terms.kl_mean), 0.0, atol=1e-7)
  np.testing.assert_allclose(np.asarray(terms.kl_stddev), 0.0, atol=1e-7)
  alpha = jnp.full(shape, 3.0)
  assert float(losses.kl_penalty(alpha, terms.kl_mean)) == pytest.approx(0.0)


def test_mstep_kls_decoupled_and_per_dim_sums_to_joint():
  target = _dist(4, 3, seed=0)
  online = _dist(4, 3, seed=1)
  actions = jnp.zeros((5, 4, 3))
  weights = jnp.full((5, 4), 0.2)
  per = losses.mstep_terms(online, target, actions, weights, True)
  joint = losses.mstep_terms(online, target, actions, weights, False)
  np.testing.assert_allclose(float(jnp.sum(per.kl_mean)),
                             float(joint.kl_mean[0]), rtol=1e-5)
  # KL_mean only sees the mean: an online policy with the target's mean has
  # zero KL_mean whatever its stddev, and vice versa.
  same_mean = networks.GaussianParams(target.mean, online.stddev)
  t = losses.mstep_terms(same_mean, target, actions, weights, True)
  np.testing.assert_allclose(np.asarray(t.kl_mean), 0.0, atol=1e-7)
  assert float(jnp.min(t.kl_stddev)) > 0


def test_cross_entropy_matches_weighted_log_likelihood():
  target = _dist(2, 1, seed=0)
  online = _dist(2, 1, seed=1)
  actions = jnp.array([[[0.1], [0.2]], [[-0.3], [0.4]]])  # [N=2, B=2, D=1]
  weights = jnp.array([[0.25, 0.5], [0.75, 0.5]])
  terms = losses.mstep_terms(online, target, actions, weights, True)
  mu, sd = np.asarray(online.mean), np.asarray(target.stddev)
  a = np.asarray(actions)
  logp = -0.5 * ((a - mu) / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi)
  expected = -np.mean(np.sum(np.asarray(weights) * logp[..., 0], axis=0))
  assert float(terms.cross_entropy_mean) == pytest.approx(expected, rel=1e-5)


def test_mstep_kls_are_kl_target_to_online_and_cross_entropies_decoupled():
  # Hand-computed for one state, one dimension (Abdolmaleki et al. 2018b,
  # Sec. 4.2): target N(0, 1), online N(1, 2).
  one = lambda m, s: networks.GaussianParams(jnp.full((1, 1), m),
                                             jnp.full((1, 1), s))
  target, online = one(0.0, 1.0), one(1.0, 2.0)
  a = jnp.array([[[0.5]], [[-1.0]]])                       # [N=2, B=1, D=1]
  w = jnp.array([[0.25], [0.75]])
  t = losses.mstep_terms(online, target, a, w, True)
  # KL_mean = KL(N(0,1) || N(1,1)) = 1/2.
  assert float(t.kl_mean[0]) == pytest.approx(0.5, rel=1e-6)
  # KL_stddev = KL(N(0,1) || N(0,2)) = (1/4 - 1 + ln 4) / 2; the other
  # direction, KL(N(0,2) || N(0,1)) = (4 - 1 - ln 4) / 2, is 0.807.
  assert float(t.kl_stddev[0]) == pytest.approx(
      0.5 * (0.25 - 1 + math.log(4)), rel=1e-6)
  log_n = lambda x, m, s: (-0.5 * ((x - m) / s) ** 2 - math.log(s)
                           - 0.5 * math.log(2 * math.pi))
  xs, ws = (0.5, -1.0), (0.25, 0.75)
  # CE_mean with N(μ_online, σ_target), CE_stddev with N(μ_target, σ_online).
  assert float(t.cross_entropy_mean) == pytest.approx(
      -sum(wi * log_n(x, 1.0, 1.0) for x, wi in zip(xs, ws)), rel=1e-6)
  assert float(t.cross_entropy_stddev) == pytest.approx(
      -sum(wi * log_n(x, 0.0, 2.0) for x, wi in zip(xs, ws)), rel=1e-6)


def test_kl_penalty_adds_alpha_times_kl_and_alpha_dual_its_slack():
  alpha, kl = jnp.array([2.0, 3.0]), jnp.array([0.5, 1.0])
  assert float(losses.kl_penalty(alpha, kl)) == pytest.approx(4.0)
  # The policy's side moves the KL only; the multiplier's side α only, with
  # gradient ε - KL (α shrinks where the bound is slack).
  assert np.all(np.asarray(jax.grad(losses.kl_penalty)(alpha, kl)) == 0)
  np.testing.assert_allclose(
      np.asarray(jax.grad(losses.kl_penalty, argnums=1)(alpha, kl)), alpha)
  np.testing.assert_allclose(
      np.asarray(jax.grad(losses.alpha_dual)(alpha, 0.75, kl)),
      [0.25, -0.25])
  assert np.all(np.asarray(jax.grad(losses.alpha_dual, argnums=2)(
      alpha, 0.75, kl)) == 0)


def test_mog_critic_loss_is_the_mean_negative_log_likelihood():
  one = networks.Mixture(jnp.zeros((2, 1)), jnp.asarray([[0.0], [1.0]]),
                         jnp.asarray([[1.0], [2.0]]))
  target = jnp.asarray([[0.5, 1.0], [-1.0, 3.0], [2.0, 0.0]])   # [M=3, B=2]
  nll = lambda z, mu, s: 0.5 * ((z - mu) / s) ** 2 + math.log(s) + 0.5 * \
      math.log(2 * math.pi)
  want = np.mean([[nll(z, 0.0, 1.0), nll(w, 1.0, 2.0)]
                  for z, w in np.asarray(target)])
  assert float(losses.mog_critic_loss(one, target)) == pytest.approx(
      want, rel=1e-5)


def test_mog_critic_loss_is_lowest_at_the_targets_distribution_and_stops_its_gradient():
  rng = np.random.default_rng(0)
  target = jnp.asarray(rng.normal(3.0, 0.5, size=(4000, 1)), jnp.float32)
  loss = lambda mu, s: float(losses.mog_critic_loss(networks.Mixture(
      jnp.zeros((1, 1)), jnp.full((1, 1), mu), jnp.full((1, 1), s)), target))
  best = loss(3.0, 0.5)
  assert best < loss(2.5, 0.5) and best < loss(3.0, 0.25) and (
      best < loss(3.0, 1.0))
  m = networks.Mixture(jnp.zeros((1, 1)), jnp.ones((1, 1)), jnp.ones((1, 1)))
  g = jax.grad(lambda t: losses.mog_critic_loss(m, t))(target)
  np.testing.assert_array_equal(g, 0.0)
