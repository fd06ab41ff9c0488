"""Tandem's MPO losses against Acme's JAX MPO loss functions
(acme/jax/losses/mpo.py of the installed dm-acme), on the same inputs.

Acme's module imports tensorflow_probability, which this stack does not
install, for the distributions its MPO class takes; the functions compared
here compute with jax alone. The test loads the installed file with a
placeholder for that import (distribution classes that are never used), so
the oracle is Acme's own code, unmodified. The cross-entropy takes a
distribution object: it gets a diagonal Gaussian written here with
jax.scipy.stats, not Tandem's density.
"""

import importlib.util
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.mpo import losses
from tandem.agents.mpo import networks


def _acme_mpo_losses():
  spec = importlib.util.find_spec('acme')
  if spec is None:
    pytest.skip('dm-acme is not installed (the learner-core-only stack)')
  path = spec.submodule_search_locations[0] + '/jax/losses/mpo.py'
  placeholder = type('Distribution', (), {})
  distributions = types.SimpleNamespace(
      Distribution=placeholder, MultivariateNormalDiag=placeholder,
      Independent=placeholder, Normal=placeholder)
  tfp = types.ModuleType('tensorflow_probability')
  tfp.substrates = types.SimpleNamespace(
      jax=types.SimpleNamespace(distributions=distributions))
  saved = sys.modules.get('tensorflow_probability')
  sys.modules['tensorflow_probability'] = tfp
  try:
    module = importlib.util.module_from_spec(
        importlib.util.spec_from_file_location('acme_jax_mpo_losses', path))
    module.__spec__.loader.exec_module(module)
  finally:
    if saved is None:
      del sys.modules['tensorflow_probability']
    else:
      sys.modules['tensorflow_probability'] = saved
  return module


acme = _acme_mpo_losses()
N, B, D = 20, 16, 3


def _q(seed=0, scale=5.0):
  return jnp.asarray(np.random.default_rng(seed).normal(size=(N, B)) * scale,
                     jnp.float32)


@pytest.mark.parametrize('temperature', [0.05, 1.0, 20.0])
def test_estep_weights_and_temperature_dual_are_acmes(temperature):
  q, epsilon, t = _q(), 0.1, jnp.float32(temperature)
  weights, acme_dual = acme.compute_weights_and_temperature_loss(q, epsilon, t)
  np.testing.assert_allclose(losses.estep_weights(q, t), weights, rtol=1e-5,
                             atol=1e-7)
  np.testing.assert_allclose(losses.temperature_dual(q, epsilon, t),
                             acme_dual, rtol=1e-5)
  # And its gradient in η, which is what trains the temperature.
  ours = jax.grad(lambda t: losses.temperature_dual(q, epsilon, t))(t)
  theirs = jax.grad(
      lambda t: acme.compute_weights_and_temperature_loss(q, epsilon, t)[1])(t)
  np.testing.assert_allclose(ours, theirs, rtol=1e-4)


def test_nonparametric_kl_is_acmes_up_to_its_log_offset():
  # A deliberate difference: Acme adds 1e-8 inside the log, Tandem floors
  # the weight at 1e-30, so Tandem's KL is exact where weights are not tiny
  # and the two differ by at most about N·1e-8 in the log's argument.
  weights = losses.estep_weights(_q(1), jnp.float32(2.0))
  ours = losses.kl_to_uniform(weights)
  theirs = acme.compute_nonparametric_kl_from_normalized_weights(weights)
  np.testing.assert_allclose(ours, theirs, atol=1e-5)
  # The floor matters where Acme's offset would: a one-hot column.
  one_hot = jnp.zeros((N, 1)).at[0, 0].set(1.0)
  assert float(losses.kl_to_uniform(one_hot)[0]) == pytest.approx(np.log(N))


class _Diagonal:
  """A diagonal Gaussian with the `log_prob` Acme's cross-entropy calls:
  the sum over action dimensions of jax.scipy.stats.norm.logpdf."""

  def __init__(self, mean, stddev):
    self.mean, self.stddev = mean, stddev

  def log_prob(self, x):
    return jnp.sum(jax.scipy.stats.norm.logpdf(x, self.mean, self.stddev),
                   axis=-1)


@pytest.mark.parametrize('per_dim', [True, False])
def test_mstep_cross_entropies_and_kl_terms_are_acmes(per_dim):
  rng = np.random.default_rng(2)
  f = lambda *s: jnp.asarray(rng.normal(size=s), jnp.float32)
  online = networks.GaussianParams(f(B, D), jnp.exp(0.3 * f(B, D)))
  target = networks.GaussianParams(f(B, D), jnp.exp(0.3 * f(B, D)))
  actions = f(N, B, D)
  weights = losses.estep_weights(_q(3), jnp.float32(1.5))
  terms = losses.mstep_terms(online, target, actions, weights, per_dim)
  # Decoupled as in Acme's MPO: the mean fitted with the target's stddev,
  # the stddev with the target's mean.
  ce_mean = acme.compute_cross_entropy_loss(
      actions, weights, _Diagonal(online.mean, target.stddev))
  ce_stddev = acme.compute_cross_entropy_loss(
      actions, weights, _Diagonal(target.mean, online.stddev))
  np.testing.assert_allclose(terms.cross_entropy_mean, ce_mean, rtol=1e-5)
  np.testing.assert_allclose(terms.cross_entropy_stddev, ce_stddev, rtol=1e-5)
  # Acme passes per-state KLs, [B, D] (per dimension) or [B, 1], and means
  # them over the batch itself; Tandem's terms are that mean already.
  kl = networks.gaussian_kl(target, networks.GaussianParams(online.mean,
                                                            target.stddev))
  kl = kl if per_dim else jnp.sum(kl, axis=-1, keepdims=True)
  alpha = jnp.full(kl.shape[-1:], 0.7, jnp.float32)
  penalty, dual = acme.compute_parametric_kl_penalty_and_dual_loss(
      kl, alpha, 0.01)
  np.testing.assert_allclose(losses.kl_penalty(alpha, terms.kl_mean),
                             penalty, rtol=1e-5)
  np.testing.assert_allclose(losses.alpha_dual(alpha, 0.01, terms.kl_mean),
                             dual, rtol=1e-5)


def test_critic_loss_is_half_the_mean_squared_td_error_through_q_alone():
  q = jnp.asarray([1.0, -2.0, 0.5], jnp.float32)
  target = jnp.asarray([0.0, 1.0, 0.5], jnp.float32)
  assert float(losses.critic_loss(q, target)) == pytest.approx(
      0.5 * (1.0 + 9.0 + 0.0) / 3)
  grad_q, grad_target = jax.grad(losses.critic_loss, argnums=(0, 1))(
      q, target)
  # d/dq = (q - target) / B: a step down the gradient moves q toward the
  # target; the target is held (a semi-gradient TD loss).
  np.testing.assert_allclose(grad_q, (q - target) / 3, rtol=1e-6)
  np.testing.assert_array_equal(grad_target, jnp.zeros(3))
