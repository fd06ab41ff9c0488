"""Dual optimisation for MPO, configured by `DualConfig`.

The duals are the E-step temperature η (constraint ε), the penalty
temperature (ε_penalty, with action penalisation) and the M-step multipliers
α_mean, α_stddev (ε_mean, ε_stddev; one per action dimension when
per-dimension constraining is on). Each is stored as an unconstrained value u
with dual = softplus(u) + floor, so it is positive by construction.

Strategies (Abdolmaleki et al. 2018a, b describe "a few steps of gradient
descent on η for each batch"; Acme takes one joint Adam step):
  * gradient: `num_steps` optimizer steps per SGD step on statistics computed
    once per batch, looped with `lax.scan` so that the optimizer state (Adam's
    moments, its count) is carried exactly as if stepped eagerly.
  * exact: the temperature dual g(η) is convex and one-dimensional; it is
    minimised in-graph by bracketed Newton on log η (bisection whenever the
    Newton step leaves the bracket), with no host round trip.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import optax

from tandem.agents.core import optimizers
from tandem.agents.mpo import losses
from tandem.agents.mpo.config import DualConfig


# The lowest unconstrained value kept after each dual step, as Acme's
# clip_mpo_params (acme/jax/losses/mpo.py, -18 for the log-temperatures and
# log-alphas): a dual whose constraint stays slack keeps drifting down, and
# the further it drifts the longer it takes to act once the constraint
# binds again. The smallest dual is then softplus(-18) + floor ≈ 2.5e-8
# (an exact solve at the floor reports that value too).
# Acme's clip drops the penalty temperature from its params without
# per-dimension constraining; here all four are clamped alike.
MIN_UNCONSTRAINED = -18.0


def _clamp(group):
  return jax.tree_util.tree_map(
      lambda u: jnp.maximum(u, MIN_UNCONSTRAINED), group)


class DualParams(NamedTuple):
  """Unconstrained dual values; map through `positive` to use them."""
  temperature: jax.Array            # []
  penalty_temperature: jax.Array    # []
  alpha_mean: jax.Array             # [D] per-dimension, else [1]
  alpha_stddev: jax.Array           # [D] per-dimension, else [1]


class DualState(NamedTuple):
  params: DualParams
  temperature_opt: optax.OptState   # over (temperature, penalty_temperature)
  alpha_opt: optax.OptState         # over (alpha_mean, alpha_stddev)


def positive(u: jax.Array, floor: float) -> jax.Array:
  return jax.nn.softplus(u) + floor


def inverse_positive(value: jax.Array, floor: float) -> jax.Array:
  """u such that positive(u, floor) == value, for value > floor."""
  x = jnp.maximum(value - floor, 1e-30)
  # log(expm1(x)) without overflow for large x.
  return jnp.where(x > 20.0, x + jnp.log1p(-jnp.exp(-x)),
                   jnp.log(jnp.expm1(jnp.minimum(x, 20.0))))


def _temperature_group(p: DualParams):
  return (p.temperature, p.penalty_temperature)


def _alpha_group(p: DualParams):
  return (p.alpha_mean, p.alpha_stddev)


def init(cfg: DualConfig, num_alphas: int) -> DualState:
  """num_alphas: the action dimension when per-dimension, else 1."""
  f = cfg.floor
  params = DualParams(
      temperature=inverse_positive(jnp.float32(cfg.init_temperature), f),
      penalty_temperature=inverse_positive(
          jnp.float32(cfg.penalty_temperature_start), f),
      alpha_mean=jnp.full((num_alphas,), inverse_positive(
          jnp.float32(cfg.init_alpha_mean), f), jnp.float32),
      alpha_stddev=jnp.full((num_alphas,), inverse_positive(
          jnp.float32(cfg.init_alpha_stddev), f), jnp.float32))
  t_opt = _make(cfg.temperature_optimizer)
  a_opt = _make(cfg.alpha_optimizer)
  return DualState(params, t_opt.init(_temperature_group(params)),
                   a_opt.init(_alpha_group(params)))


def _make(opt_cfg) -> optax.GradientTransformation:
  return optimizers.make(opt_cfg.name, opt_cfg.learning_rate)


def _scan_steps(opt, opt_state, group, loss_fn, num_steps: int):
  """num_steps optimizer steps on loss_fn(group), in-graph, each followed by
  the clamp at MIN_UNCONSTRAINED."""
  grad_fn = jax.grad(loss_fn)

  def body(carry, _):
    g, s = carry
    updates, s = opt.update(grad_fn(g), s, g)
    return (_clamp(optax.apply_updates(g, updates)), s), None

  (group, opt_state), _ = jax.lax.scan(body, (group, opt_state), None,
                                       length=num_steps)
  return group, opt_state


# --------------------------------------------------------------------------
# Exact solve of the temperature dual.


class SolveInfo(NamedTuple):
  temperature: jax.Array   # [] the minimiser η*
  iterations: jax.Array    # [] Newton/bisection iterations taken
  dual_grad: jax.Array     # [] g'(η*) = ε - mean KL (0 at an interior optimum)


def _dual_derivatives(q, epsilon, u):
  """h(u) = g(e^u): returns (g'(η), h'(u), h''(u)) at u = log η.

  g'(η) = ε - mean_b KL(w_b || U),  g''(η) = mean_b Var_w(Q) / η³,
  h'(u) = η g'(η),  h''(u) = η g'(η) + mean_b Var_w(Q) / η.
  """
  eta = jnp.exp(u)
  w = losses.estep_weights(q, eta)
  g1 = epsilon - jnp.mean(losses.kl_to_uniform(w))
  mean_q = jnp.sum(w * q, axis=0)
  var_q = jnp.mean(jnp.sum(w * jnp.square(q - mean_q), axis=0))
  return g1, eta * g1, eta * g1 + var_q / eta


def solve_temperature(q: jax.Array, epsilon: float, *, floor: float,
                      tolerance: float, max_iterations: int,
                      init: Optional[jax.Array] = None) -> SolveInfo:
  """argmin_{η ≥ floor} g(η) for q: [N, B], to `tolerance` in log η.

  The bracket: at η = floor g' is most negative; KL(w || U) ≤ range(Q)/η, so
  at η_hi = 2·max_b range_b(Q)/ε we have KL ≤ ε/2 and g' > 0. If g'(floor) ≥ 0
  the constrained minimum is the floor itself.
  """
  q = jax.lax.stop_gradient(q).astype(jnp.float32)
  spread = jnp.max(jnp.max(q, axis=0) - jnp.min(q, axis=0))
  lo = jnp.log(jnp.float32(floor))
  hi = jnp.log(jnp.maximum(2.0 * spread / epsilon, 4.0 * floor))
  g_lo, _, _ = _dual_derivatives(q, epsilon, lo)
  u0 = 0.5 * (lo + hi) if init is None else jnp.clip(jnp.log(init), lo, hi)

  def cond(c):
    lo_, hi_, u, step, it = c
    return (it < max_iterations) & (hi_ - lo_ > tolerance) & (
        jnp.abs(step) > tolerance)

  def body(c):
    lo_, hi_, u, _, it = c
    g1, h1, h2 = _dual_derivatives(q, epsilon, u)
    # g' > 0: the minimiser is below u.
    hi_ = jnp.where(g1 > 0, u, hi_)
    lo_ = jnp.where(g1 > 0, lo_, u)
    newton = u - h1 / jnp.where(h2 > 0, h2, 1.0)
    ok = (h2 > 0) & (newton > lo_) & (newton < hi_) & jnp.isfinite(newton)
    u_new = jnp.where(ok, newton, 0.5 * (lo_ + hi_))
    return lo_, hi_, u_new, u_new - u, it + 1

  init_c = (lo, hi, u0, jnp.float32(jnp.inf), jnp.int32(0))
  _, _, u, _, iterations = jax.lax.while_loop(cond, body, init_c)
  u = jnp.where(g_lo >= 0, lo, u)
  g1, _, _ = _dual_derivatives(q, epsilon, u)
  return SolveInfo(jnp.maximum(jnp.exp(u), floor), iterations, g1)


# --------------------------------------------------------------------------
# Updates, one per dual group.


class TemperatureInfo(NamedTuple):
  temperature_before: jax.Array          # []
  temperature_after: jax.Array           # []
  penalty_temperature_before: jax.Array  # []
  penalty_temperature_after: jax.Array   # []
  residual: jax.Array                    # [] g(η_after) - min g (nan if off)
  solver_iterations: jax.Array           # [] 0 unless solver == 'exact'


def update_temperatures(cfg: DualConfig, state: DualState, q: jax.Array,
                        epsilon: float, penalty_q: Optional[jax.Array],
                        epsilon_penalty: float,
                        learning_rate: jax.Array) -> tuple[DualState,
                                                            TemperatureInfo]:
  """Optimises η (and the penalty temperature) on fixed Q-values.

  q, penalty_q: [N, B] (penalty_q None without action penalisation).
  learning_rate: the temperature group's scheduled rate at this global step.
  """
  f = cfg.floor
  p = state.params
  before = positive(p.temperature, f), positive(p.penalty_temperature, f)
  opt_state, iterations = state.temperature_opt, jnp.int32(0)
  best = None  # the dual's minimiser, when this step already solved for it

  def solve(values, eps, init_t):
    return solve_temperature(values, eps, floor=f,
                             tolerance=cfg.exact_tolerance,
                             max_iterations=cfg.exact_max_iterations,
                             init=init_t)

  if cfg.solver == 'exact':
    info = solve(q, epsilon, before[0])
    new_t, iterations = inverse_positive(info.temperature, f), info.iterations
    best = info.temperature
    new_pt = p.penalty_temperature
    if penalty_q is not None:
      new_pt = inverse_positive(solve(penalty_q, epsilon_penalty,
                                      before[1]).temperature, f)
    new_t, new_pt = _clamp((new_t, new_pt))
  else:
    def loss(group):
      t, pt = group
      total = losses.temperature_dual(q, epsilon, positive(t, f))
      if penalty_q is not None:
        total += losses.temperature_dual(penalty_q, epsilon_penalty,
                                         positive(pt, f))
      return total

    opt = _make(cfg.temperature_optimizer)
    opt_state = optimizers.with_learning_rate(opt_state, learning_rate)
    (new_t, new_pt), opt_state = _scan_steps(
        opt, opt_state, _temperature_group(p), loss, cfg.num_steps)

  after = positive(new_t, f), positive(new_pt, f)
  if cfg.log_residual:
    if best is None:
      best = solve(q, epsilon, after[0]).temperature
    residual = (losses.temperature_dual(q, epsilon, after[0]) -
                losses.temperature_dual(q, epsilon, best))
  else:
    residual = jnp.float32(jnp.nan)
  new_state = state._replace(
      params=p._replace(temperature=new_t, penalty_temperature=new_pt),
      temperature_opt=opt_state)
  return new_state, TemperatureInfo(before[0], after[0], before[1], after[1],
                                    residual, iterations)


def update_alphas(cfg: DualConfig, state: DualState, kl_mean: jax.Array,
                  kl_stddev: jax.Array, epsilon_mean: float,
                  epsilon_stddev: float, learning_rate: jax.Array) -> DualState:
  """num_steps optimizer steps on α_mean, α_stddev with the batch's KLs fixed.

  kl_mean, kl_stddev: [D] or [1], matching the alphas.
  """
  f = cfg.floor
  kl_mean = jax.lax.stop_gradient(kl_mean)
  kl_stddev = jax.lax.stop_gradient(kl_stddev)

  def loss(group):
    a_mean, a_std = group
    return (losses.alpha_dual(positive(a_mean, f), epsilon_mean, kl_mean) +
            losses.alpha_dual(positive(a_std, f), epsilon_stddev, kl_stddev))

  opt = _make(cfg.alpha_optimizer)
  opt_state = optimizers.with_learning_rate(state.alpha_opt, learning_rate)
  (a_mean, a_std), opt_state = _scan_steps(
      opt, opt_state, _alpha_group(state.params), loss, cfg.num_steps)
  return state._replace(
      params=state.params._replace(alpha_mean=a_mean, alpha_stddev=a_std),
      alpha_opt=opt_state)
