"""MPO losses: the E-step (nonparametric reweighting) and the M-step.

Papers:
  Abdolmaleki et al. 2018a, "Maximum a Posteriori Policy Optimisation".
  Abdolmaleki et al. 2018b, "Relative Entropy Regularized Policy Iteration"
    (decoupled mean/covariance KL constraints, Sec. 4; per-dimension form).
  Abdolmaleki et al. 2020, "A Distributional View on Multi-Objective Policy
    Optimization" (MO-MPO; action penalisation as a second objective).
  Shahriari et al. 2022, "Revisiting Gaussian mixture critics in off-policy
    reinforcement learning: a sample-based approach" (the mixture critic).

Notation: N sampled actions per state, B states, D action dimensions.
q: [N, B] Q-values of actions a_{n,b} ~ π_target(·|s_b).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from tandem.agents.mpo import networks


def estep_weights(q: jax.Array, temperature: jax.Array) -> jax.Array:
  """E-step weights q(a|s) ∝ π(a|s) exp(Q(s,a)/η), over the N samples.

  Eq. (7) of 2018b with the prior's density absorbed by sampling from it.
  q: [N, B]; temperature: scalar > 0. Returns [N, B], each column sums to 1.
  """
  return jax.nn.softmax(q / temperature, axis=0)


def temperature_dual(q: jax.Array, epsilon: float,
                     temperature: jax.Array) -> jax.Array:
  """The convex dual of the E-step KL constraint, g(η).

  g(η) = η ε + η · mean_b log mean_n exp(Q_{n,b} / η)     (2018b, Eq. 9)
  q: [N, B]; returns a scalar.
  """
  num = q.shape[0]
  log_mean_exp = jax.nn.logsumexp(q / temperature, axis=0) - jnp.log(num)
  return temperature * epsilon + temperature * jnp.mean(log_mean_exp)


def kl_to_uniform(weights: jax.Array) -> jax.Array:
  """KL(w_b || uniform over N) for each state: [N, B] -> [B].

  This is the nonparametric E-step KL to the sampling policy; the dual's
  derivative is g'(η) = ε - mean_b KL, so at the optimum the mean KL is ε.
  """
  num = weights.shape[0]
  return jnp.sum(weights * (jnp.log(jnp.maximum(weights, 1e-30)) +
                            jnp.log(num)), axis=0)


def action_penalty_q(actions: jax.Array) -> jax.Array:
  """MO-MPO's penalty objective: -‖a - clip(a, -1, 1)‖₂; [N, B, D] -> [N, B]."""
  return -jnp.linalg.norm(actions - jnp.clip(actions, -1.0, 1.0), axis=-1)


def critic_loss(q: jax.Array, target: jax.Array) -> jax.Array:
  """Half squared n-step TD error; q, target: [B] -> scalar."""
  return 0.5 * jnp.mean(jnp.square(q - jax.lax.stop_gradient(target)))


def mog_critic_loss(online: networks.Mixture, target: jax.Array) -> jax.Array:
  """Sample-based cross-entropy of a mixture critic (Shahriari et al. 2022):

    L = -mean_{m,b} log Z(r_b + γⁿ z_{m,b} | s_b, a_b),
    z_{m,b} ~ Z_target(· | s'_b, a'_{n,b}) for every bootstrap action a'_n,

  a Monte-Carlo estimate of the cross-entropy of the online return
  distribution Z to the distributional n-step target (Bellemare et al. 2017).
  online: fields [B, C]; target: [M, B] samples of the target. Scalar.
  """
  target = jax.lax.stop_gradient(target)
  return -jnp.mean(networks.mixture_log_prob(online, target))


class MStepTerms(NamedTuple):
  """Per-term M-step quantities; kl_* are [D] (per-dimension) or [1]."""
  cross_entropy_mean: jax.Array
  cross_entropy_stddev: jax.Array
  kl_mean: jax.Array
  kl_stddev: jax.Array


def mstep_terms(online: networks.GaussianParams,
                target: networks.GaussianParams, actions: jax.Array,
                weights: jax.Array, per_dim: bool) -> MStepTerms:
  """Decoupled weighted maximum likelihood and KLs (2018b, Sec. 4.2).

  Fitting the mean with the target's stddev and the stddev with the target's
  mean lets each get its own trust region (ε_mean, ε_stddev):
    π_mean   = N(μ_online, σ_target),   π_stddev = N(μ_target, σ_online)
    CE_x     = -mean_b Σ_n w_{n,b} log π_x(a_{n,b} | s_b)
    KL_mean  = mean_b KL(π_target || π_mean),  likewise KL_stddev.

  online, target: fields [B, D]; actions: [N, B, D]; weights: [N, B].
  """
  pi_mean = networks.GaussianParams(online.mean, target.stddev)
  pi_stddev = networks.GaussianParams(target.mean, online.stddev)
  weights = jax.lax.stop_gradient(weights)
  actions = jax.lax.stop_gradient(actions)

  def cross_entropy(dist):
    log_prob = jnp.sum(networks.gaussian_log_prob(dist, actions), axis=-1)
    return -jnp.mean(jnp.sum(weights * log_prob, axis=0))

  def kl(dist):
    per_dim_kl = networks.gaussian_kl(target, dist)          # [B, D]
    if per_dim:
      return jnp.mean(per_dim_kl, axis=0)                    # [D]
    return jnp.mean(jnp.sum(per_dim_kl, axis=-1), keepdims=True)  # [1]

  return MStepTerms(cross_entropy(pi_mean), cross_entropy(pi_stddev),
                    kl(pi_mean), kl(pi_stddev))


def kl_penalty(alpha: jax.Array, kl: jax.Array) -> jax.Array:
  """The policy's side of the Lagrangian: Σ sg(α) · KL; α and kl same shape."""
  return jnp.sum(jax.lax.stop_gradient(alpha) * kl)


def alpha_dual(alpha: jax.Array, epsilon: float, kl: jax.Array) -> jax.Array:
  """The multiplier's side: Σ α · (ε - sg(KL)); minimised over α ≥ 0."""
  return jnp.sum(alpha * (epsilon - jax.lax.stop_gradient(kl)))
