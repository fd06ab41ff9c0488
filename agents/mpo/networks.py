"""Policy and critic networks as pure functions of explicit parameter pytrees.

Plain JAX (no Flax, no Haiku) so the learner core runs wherever jax and optax
do, including accelerator images without the rest of the stack.

Both networks are layer-normed MLPs: the first hidden layer is followed by
LayerNorm and tanh (it keeps the input scale of unnormalised observations in
check), later layers by ELU. The policy is a diagonal Gaussian whose mean
is linear in the last hidden layer or, with tanh_mean, its tanh (bounded to
(-1, 1); the Gaussian itself is never squashed). Actions are clipped to
[-1, 1] only when sent to the environment; MPO's action penalisation pulls
an unbounded mean back towards the box (how firmly depends on
epsilon_penalty: BENCHMARKS.md, Adversarial imitation).

Initial weights follow one of two schemes (MPOConfig.init, SCHEMES below):
'tandem' (lecun-normal torso, near-zero heads) or 'acme' (the initialisers of
Acme's JAX MPO control networks). Biases and LayerNorm offsets start at 0 and
LayerNorm scales at 1 in both, as in Haiku's defaults.
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import jax.scipy.stats

Params = dict


class GaussianParams(NamedTuple):
  """A diagonal Gaussian; both fields [..., D]."""
  mean: jax.Array
  stddev: jax.Array


# The stddev of a standard normal truncated to [-2, 2]
# (scipy.stats.truncnorm.std(-2, 2)); Haiku's VarianceScaling divides by it
# so the truncated samples have the intended stddev.
_TRUNCATED_STD = 0.87962566


def dense_init(key, n_in: int, n_out: int, scale: float = 1.0) -> Params:
  """w [n_in, n_out]: normal truncated to ±2 stddevs, with stddev (after the
  truncation) scale / sqrt(n_in); b [n_out] zeros.

  scale=1 is Haiku's VarianceScaling(1.0) (lecun normal); note that `scale`
  multiplies the stddev, where VarianceScaling's argument multiplies the
  variance: VarianceScaling(v) is scale=sqrt(v).
  """
  std = scale * jnp.sqrt(1.0 / n_in) / _TRUNCATED_STD
  w = std * jax.random.truncated_normal(key, -2.0, 2.0, (n_in, n_out),
                                        jnp.float32)
  return {'w': w, 'b': jnp.zeros((n_out,), jnp.float32)}


def _uniform_scaling_init(key, n_in: int, n_out: int, scale: float) -> Params:
  """Haiku's UniformScaling(scale): w [n_in, n_out] ~ U(-L, L) with
  L = scale * sqrt(3 / n_in) (stddev scale / sqrt(n_in)); b [n_out] zeros."""
  limit = scale * jnp.sqrt(3.0 / n_in)
  w = jax.random.uniform(key, (n_in, n_out), jnp.float32, -limit, limit)
  return {'w': w, 'b': jnp.zeros((n_out,), jnp.float32)}


def _truncated_normal_init(key, n_in: int, n_out: int,
                           stddev: float) -> Params:
  """Haiku's TruncatedNormal(stddev): w [n_in, n_out] = stddev · z, z a
  standard normal truncated to [-2, 2], whatever n_in (so the samples'
  stddev is 0.88 · stddev and |w| < 2 · stddev); b [n_out] zeros."""
  w = stddev * jax.random.truncated_normal(key, -2.0, 2.0, (n_in, n_out),
                                           jnp.float32)
  return {'w': w, 'b': jnp.zeros((n_out,), jnp.float32)}


LayerInit = Callable[..., Params]  # (key, n_in, n_out) -> {'w', 'b'}


class InitScheme(NamedTuple):
  """Weight initialisers for each kind of dense layer."""
  torso: LayerInit        # every torso layer, the first one included
  policy_head: LayerInit  # the mean and the stddev pre-activation layers
  critic_head: LayerInit  # the scalar Q output


SCHEMES = {
    # Tandem's own: lecun-normal torso; heads small enough that the initial
    # policy is N(≈0, init_scale) and Q ≈ 0 for every state.
    'tandem': InitScheme(
        torso=dense_init,
        policy_head=functools.partial(dense_init, scale=1e-4),
        critic_head=functools.partial(dense_init, scale=1e-2)),
    # Acme's JAX MPO control networks (acme/agents/jax/mpo/networks.py,
    # make_control_networks): LayerNormMLP's default w_init is
    # UniformScaling(0.333) (acme/jax/networks/continuous.py:23,45);
    # MultivariateNormalDiagHead's loc and scale layers use
    # VarianceScaling(1e-4), fan-in truncated normal, i.e. stddev
    # 0.01/sqrt(n_in) (acme/jax/networks/distributional.py:275,289-290); the
    # non-distributional critic's output layer TruncatedNormal(0.01)
    # (acme/agents/jax/mpo/networks.py:245-247). The policy's initial stddev
    # (init_scale) is not part of a scheme: see MPOConfig.policy_init_scale.
    'acme': InitScheme(
        torso=functools.partial(_uniform_scaling_init, scale=0.333),
        policy_head=functools.partial(dense_init, scale=1e-2),
        critic_head=functools.partial(_truncated_normal_init, stddev=0.01)),
}


def _scheme(name: str) -> InitScheme:
  if name not in SCHEMES:
    raise ValueError(f'init scheme: expected one of {sorted(SCHEMES)}, '
                     f'got {name!r}')
  return SCHEMES[name]


def dense(p: Params, x: jax.Array) -> jax.Array:
  return x @ p['w'] + p['b']


def _layer_norm(p: Params, x: jax.Array) -> jax.Array:
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.var(x, axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p['scale'] + p['offset']


def init_torso(key, n_in: int, layers: Sequence[int],
               scheme: str = 'tandem') -> Params:
  """Dense layers n_in -> layers[0] -> ... -> layers[-1], LayerNorm on the
  first."""
  layer_init = _scheme(scheme).torso
  keys = jax.random.split(key, len(layers))
  dense, sizes = [], (n_in,) + tuple(layers)
  for k, a, b in zip(keys, sizes[:-1], sizes[1:]):
    dense.append(layer_init(k, a, b))
  ln = {'scale': jnp.ones((layers[0],), jnp.float32),
        'offset': jnp.zeros((layers[0],), jnp.float32)}
  return {'dense': dense, 'ln': ln}


def apply_torso(p: Params, x: jax.Array) -> jax.Array:
  """x: [..., n_in] -> [..., layers[-1]]."""
  h = jnp.tanh(_layer_norm(p['ln'], dense(p['dense'][0], x)))
  for layer in p['dense'][1:]:
    h = jax.nn.elu(dense(layer, h))
  return h


def init_policy(key, obs_dim: int, action_dim: int, layers: Sequence[int],
                scheme: str = 'tandem') -> Params:
  head = _scheme(scheme).policy_head
  k1, k2, k3 = jax.random.split(key, 3)
  return {'torso': init_torso(k1, obs_dim, layers, scheme),
          # Small init keeps the initial mean near 0 and the initial stddev
          # near init_scale for every state.
          'mean': head(k2, layers[-1], action_dim),
          'stddev': head(k3, layers[-1], action_dim)}


def apply_policy(p: Params, obs: jax.Array, *, init_scale: float,
                 min_scale: float, tanh_mean: bool = False) -> GaussianParams:
  """obs: [..., O] -> Gaussian over actions with fields [..., D].

  stddev = softplus(x) * init_scale / softplus(0) + min_scale, so a zero
  pre-activation gives init_scale and the stddev never reaches zero. With
  tanh_mean the mean is tanh of its pre-activation (MPOConfig.policy_mean).
  """
  h = apply_torso(p['torso'], obs)
  mean = dense(p['mean'], h)
  if tanh_mean:
    mean = jnp.tanh(mean)
  raw = dense(p['stddev'], h)
  stddev = jax.nn.softplus(raw) * (init_scale / jnp.log(2.0)) + min_scale
  return GaussianParams(mean, stddev)


class Mixture(NamedTuple):
  """A mixture of C univariate Gaussians (a distribution over returns):
  mixing logits, component means and stddevs, each [..., C]."""
  logits: jax.Array
  loc: jax.Array
  scale: jax.Array


CRITIC_HEADS = ('scalar', 'mog')
# Acme's GaussianMixture floor on component stddevs
# (acme/jax/networks/distributional.py, _MIN_SCALE).
_MOG_MIN_SCALE = 1e-4
# Acme's GaussianMixture initialises all three of its layers with
# VarianceScaling(1e-5) (fan-in truncated normal): stddev sqrt(1e-5/n_in).
# math, not jnp: a jnp operation here would start a JAX backend at import,
# before the launcher can keep its own JAX off the accelerators (launch/train.py).
_mog_layer_init = functools.partial(dense_init, scale=math.sqrt(1e-5))


def init_critic(key, obs_dim: int, action_dim: int, layers: Sequence[int],
                scheme: str = 'tandem', head: str = 'scalar',
                num_components: int = 5) -> Params:
  """The critic's parameters: a torso and a scalar Q head (`head='scalar'`)
  or a mixture-of-Gaussians return head with `num_components` components
  (`head='mog'`, under the key 'mog'). The mixture head uses Acme's
  initialiser whatever the torso scheme: it is Acme's head, and no other
  scheme has one."""
  if head not in CRITIC_HEADS:
    raise ValueError(f'critic head: expected one of {CRITIC_HEADS}, '
                     f'got {head!r}')
  k1, k2 = jax.random.split(key)
  torso = init_torso(k1, obs_dim + action_dim, layers, scheme)
  if head == 'scalar':
    return {'torso': torso,
            'head': _scheme(scheme).critic_head(k2, layers[-1], 1)}
  kl, km, ks = jax.random.split(k2, 3)
  return {'torso': torso,
          'mog': {'logits': _mog_layer_init(kl, layers[-1], num_components),
                  'loc': _mog_layer_init(km, layers[-1], num_components),
                  'scale': _mog_layer_init(ks, layers[-1], num_components)}}


def _critic_features(p: Params, obs: jax.Array, action: jax.Array):
  # The action is clipped to the normalised box [-1, 1] first, as in Acme's
  # JAX MPO networks ("to avoid critic extrapolations outside the spec
  # range"): replay only holds clipped actions (actors clip what they send
  # to the environment), so an unclipped Gaussian sample would query the
  # critic where it was never trained, and an extrapolating critic biases
  # both the E-step weights and the bootstrap upward. The E-step and M-step
  # still use the unclipped samples; only the critic's view of them is
  # clipped, and the action penalty (losses.action_penalty_q) sees them
  # unclipped.
  x = jnp.concatenate([obs, jnp.clip(action, -1.0, 1.0)], axis=-1)
  return apply_torso(p['torso'], x)


def apply_critic_distribution(p: Params, obs: jax.Array, action: jax.Array,
                              *, init_scale: float) -> Mixture:
  """A mixture critic's return distribution: obs [..., O], action [..., D]
  -> Mixture with fields [..., C] (a 'mog' critic's params only).

  Component stddevs are softplus(x) · init_scale / softplus(0) + 1e-4, so a
  zero pre-activation gives init_scale (+ the floor), as Acme's
  GaussianMixture(init_scale=mog_init_scale).
  """
  if 'mog' not in p:
    raise ValueError("apply_critic_distribution: these critic params have a "
                     "scalar head; a mixture needs init_critic(head='mog')")
  h = _critic_features(p, obs, action)
  m = p['mog']
  scale = (jax.nn.softplus(dense(m['scale'], h)) * (init_scale / jnp.log(2.0))
           + _MOG_MIN_SCALE)
  return Mixture(dense(m['logits'], h), dense(m['loc'], h), scale)


def apply_critic(p: Params, obs: jax.Array, action: jax.Array) -> jax.Array:
  """obs [..., O], action [..., D] -> Q [...], the expected return: the
  scalar head's output, or a mixture head's mean (which does not depend on
  the components' stddevs, so needs no init_scale). Actions are clipped to
  the box first (_critic_features says why)."""
  if 'mog' in p:
    # The mean ignores the stddevs, so any init_scale gives the same Q.
    return mixture_mean(apply_critic_distribution(p, obs, action,
                                                  init_scale=1.0))
  return dense(p['head'], _critic_features(p, obs, action))[..., 0]


def mixture_mean(m: Mixture) -> jax.Array:
  """E[z]: fields [..., C] -> [...]."""
  return jnp.sum(jax.nn.softmax(m.logits, axis=-1) * m.loc, axis=-1)


def mixture_log_prob(m: Mixture, z: jax.Array) -> jax.Array:
  """log p(z): fields [..., C], z broadcastable to [...] -> [...]."""
  z = z[..., None]
  comp = (-0.5 * jnp.square((z - m.loc) / m.scale) - jnp.log(m.scale)
          - 0.5 * jnp.log(2 * jnp.pi))
  return jax.nn.logsumexp(jax.nn.log_softmax(m.logits, axis=-1) + comp,
                          axis=-1)


def mixture_sample(key, m: Mixture, num: int) -> jax.Array:
  """num samples of each mixture: fields [..., C] -> [num, ...]: a component
  drawn by its weight, then a draw from that component."""
  k_comp, k_noise = jax.random.split(key)
  shape = (num,) + m.loc.shape[:-1]
  comp = jax.random.categorical(k_comp, m.logits, axis=-1, shape=shape)
  pick = lambda x: jnp.take_along_axis(
      jnp.broadcast_to(x, (num,) + x.shape), comp[..., None], axis=-1)[..., 0]
  eps = jax.random.normal(k_noise, shape, m.loc.dtype)
  return pick(m.loc) + pick(m.scale) * eps


def gaussian_sample(key, dist: GaussianParams, num: int) -> jax.Array:
  """[..., D] Gaussian -> [num, ..., D] samples."""
  eps = jax.random.normal(key, (num,) + dist.mean.shape, dist.mean.dtype)
  return dist.mean + dist.stddev * eps


def gaussian_log_prob(dist: GaussianParams, x: jax.Array) -> jax.Array:
  """Per-dimension log density: dist [..., D], x [..., D] -> [..., D]."""
  z = (x - dist.mean) / dist.stddev
  return -0.5 * z * z - jnp.log(dist.stddev) - 0.5 * jnp.log(2 * jnp.pi)


def clipped_gaussian_log_prob(dist: GaussianParams, x: jax.Array,
                              low: float = -1.0,
                              high: float = 1.0) -> jax.Array:
  """Per-dimension log-likelihood of x under clip(N(mean, stddev), low,
  high), the distribution of the actions actors execute and replay stores:
  dist [..., D], x [..., D] -> [..., D].

  Inside the box it is the Gaussian's log density; on an edge it is the log
  of the mass the clip puts there, log Φ((low - μ)/σ) or log Φ((μ - high)/σ)
  (a censored likelihood). The unclipped density at a = ±1 would call an
  edge action unlikely under a policy whose mean lies beyond that edge,
  where the acting policy takes it almost surely.
  """
  z_low = (low - dist.mean) / dist.stddev
  z_high = (dist.mean - high) / dist.stddev
  # Compared in float32 with a margin: replay holds np.clip's exact ±1.0,
  # demonstrations may hold 0.9999999.
  edge = 1e-6 * (high - low)
  return jnp.where(
      x <= low + edge, jax.scipy.stats.norm.logcdf(z_low),
      jnp.where(x >= high - edge, jax.scipy.stats.norm.logcdf(z_high),
                gaussian_log_prob(dist, x)))


def clipped_gaussian_entropy(dist: GaussianParams, low: float = -1.0,
                             high: float = 1.0) -> jax.Array:
  """Per-dimension entropy E[-log p(a)] of clip(N(mean, stddev), low, high)
  with p as `clipped_gaussian_log_prob` defines it (density inside the box,
  mass on an edge): dist [..., D] -> [..., D]. Closed form, with
  z_a = (low - μ)/σ, z_b = (high - μ)/σ, φ and Φ the standard normal's
  density and distribution:

    inside: (Φ(z_b) - Φ(z_a)) (log σ + ½ log 2π)
            + ½ [Φ(z) - z φ(z)] from z_a to z_b     (∫ z² φ = Φ - z φ)
    edges:  -Φ(z_a) log Φ(z_a) - Φ(-z_b) log Φ(-z_b)

  Without clipping (z_a → -∞, z_b → ∞) it is ½ log(2πe σ²).
  """
  norm = jax.scipy.stats.norm
  z_a = (low - dist.mean) / dist.stddev
  z_b = (high - dist.mean) / dist.stddev
  inside_mass = norm.cdf(z_b) - norm.cdf(z_a)
  second_moment = ((norm.cdf(z_b) - z_b * norm.pdf(z_b)) -
                   (norm.cdf(z_a) - z_a * norm.pdf(z_a)))
  inside = (inside_mass * (jnp.log(dist.stddev) + 0.5 * jnp.log(2 * jnp.pi))
            + 0.5 * second_moment)
  p_low, p_high = norm.cdf(z_a), norm.cdf(-z_b)
  edges = -(jax.scipy.special.xlogy(p_low, p_low) +
            jax.scipy.special.xlogy(p_high, p_high))
  return inside + edges


def gaussian_kl(p: GaussianParams, q: GaussianParams) -> jax.Array:
  """Per-dimension KL(p || q): [..., D]."""
  var_ratio = jnp.square(p.stddev / q.stddev)
  t = jnp.square((p.mean - q.mean) / q.stddev)
  return 0.5 * (var_ratio + t - 1.0 - jnp.log(var_ratio))
