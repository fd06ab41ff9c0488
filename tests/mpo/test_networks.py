"""Networks: where they differ from a plain MLP on purpose."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.mpo import config
from tandem.agents.mpo import learner
from tandem.agents.mpo import networks

# numpy 2 renamed trapz to trapezoid and later removed trapz; the accelerator
# image runs numpy 2.
_trapezoid = getattr(np, 'trapezoid', None) or np.trapz


def _critic(seed=0, obs_dim=3, action_dim=2):
  return networks.init_critic(jax.random.PRNGKey(seed), obs_dim, action_dim,
                              (16, 16))


def test_critic_sees_actions_clipped_to_the_box():
  # Acme's JAX MPO clips the critic's action input: replay never holds an
  # action outside [-1, 1], so Q there would be an extrapolation.
  critic = _critic()
  obs = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
  action = 3.0 * jax.random.normal(jax.random.PRNGKey(2), (64, 2))
  assert float(jnp.mean(jnp.abs(action) > 1)) > 0.3
  np.testing.assert_array_equal(
      networks.apply_critic(critic, obs, action),
      networks.apply_critic(critic, obs, jnp.clip(action, -1.0, 1.0)))


def test_critic_still_distinguishes_actions_inside_the_box():
  critic = _critic()
  obs = jnp.zeros((1, 3))
  q = [float(networks.apply_critic(critic, obs, jnp.full((1, 2), a))[0])
       for a in (-0.9, 0.0, 0.9)]
  assert len(set(q)) == 3


def test_estep_queries_the_critic_at_clipped_samples_and_penalises_unclipped():
  dims = learner.Dims(observation=3, action=2)
  cfg = config.replace(config.MPOConfig(), dict(
      policy_layers=(16,), critic_layers=(16,), num_samples=64,
      policy_init_scale=3.0))  # wide policy: many samples leave the box
  state = learner.init(cfg, dims, seed=0)
  rng = np.random.default_rng(0)
  batch = learner.Batch(
      jnp.asarray(rng.normal(size=(8, 3)), jnp.float32),
      jnp.zeros((8, 2)), jnp.zeros((8,)), jnp.ones((8,)),
      jnp.asarray(rng.normal(size=(8, 3)), jnp.float32))
  e = learner.estep_inputs(cfg, state, batch, jax.random.PRNGKey(3),
                           jax.random.PRNGKey(4))
  outside = jnp.any(jnp.abs(e.actions) > 1, axis=-1)       # [N, B]
  assert float(jnp.mean(outside)) > 0.3
  obs = jnp.broadcast_to(batch.observation, e.actions.shape[:2] + (3,))
  expected = networks.apply_critic(state.target_critic, obs,
                                   jnp.clip(e.actions, -1.0, 1.0))
  np.testing.assert_allclose(e.q, expected, rtol=1e-6, atol=1e-6)
  # The action penalty acts on the unclipped samples: negative exactly where
  # a sample left the box.
  np.testing.assert_array_equal(np.asarray(e.penalty_q < 0),
                                np.asarray(outside))


def test_clipped_gaussian_log_prob_is_the_density_of_clipped_actions():
  mean = jnp.array([[0.2], [1.6], [-2.5]])
  std = jnp.array([[0.5], [0.5], [0.8]])
  dist = networks.GaussianParams(mean, std)
  inside = jnp.linspace(-0.999, 0.999, 4001)[None, :, None]
  d = networks.GaussianParams(mean[:, None], std[:, None])
  density = np.exp(np.asarray(networks.clipped_gaussian_log_prob(d, inside)))
  # Interior: the Gaussian's own density.
  np.testing.assert_allclose(
      np.log(density), networks.gaussian_log_prob(d, inside), rtol=1e-5)
  edges = np.exp(np.asarray(networks.clipped_gaussian_log_prob(
      dist, jnp.full((3, 1), -1.0))))[:, 0] + np.exp(np.asarray(
          networks.clipped_gaussian_log_prob(dist, jnp.full((3, 1), 1.0))))[
              :, 0]
  # Interior density plus the two edge masses is a distribution: it sums
  # to one only if the edges carry exactly the mass the clip moves there.
  total = _trapezoid(density[..., 0], np.asarray(inside)[0, :, 0]) + edges
  np.testing.assert_allclose(total, 1.0, atol=2e-3)
  # A mean beyond the upper edge makes the edge action near certain, where
  # the unclipped density would call it rare.
  at_edge = networks.clipped_gaussian_log_prob(dist, jnp.ones((3, 1)))
  assert float(at_edge[1, 0]) > np.log(0.85)
  assert float(networks.gaussian_log_prob(dist, jnp.ones((3, 1)))[1, 0]) < \
      np.log(0.5)


# --------------------------------------------------------------------------
# Initialisation schemes (MPOConfig.init).

def _leaves(tree):
  return {jax.tree_util.keystr(p): np.asarray(x)
          for p, x in jax.tree_util.tree_leaves_with_path(tree)}


def _small_cfg(**kw):
  return config.replace(config.MPOConfig(), dict(
      policy_layers=(32, 32), critic_layers=(32, 32), batch_size=16,
      num_samples=8, **kw))


def test_tandem_init_is_the_init_from_before_schemes():
  state = learner.init(_small_cfg(), learner.Dims(5, 2), seed=0)
  assert config.MPOConfig().init == 'tandem'
  got = _leaves((state.policy, state.critic))
  # Tandem's construction written out by hand, key for key: lecun-normal
  # torso layers, heads at scale 1e-4 (policy) and 1e-2 (critic).
  _, kp, kc = jax.random.split(jax.random.PRNGKey(0), 3)

  def old_torso(key, n_in):
    k = jax.random.split(key, 2)
    return {'dense': [networks.dense_init(k[0], n_in, 32),
                      networks.dense_init(k[1], 32, 32)],
            'ln': {'scale': jnp.ones((32,)), 'offset': jnp.zeros((32,))}}
  k1, k2, k3 = jax.random.split(kp, 3)
  old_policy = {'torso': old_torso(k1, 5),
                'mean': networks.dense_init(k2, 32, 2, scale=1e-4),
                'stddev': networks.dense_init(k3, 32, 2, scale=1e-4)}
  k1, k2 = jax.random.split(kc)
  old_critic = {'torso': old_torso(k1, 7),
                'head': networks.dense_init(k2, 32, 1, scale=1e-2)}
  want = _leaves((old_policy, old_critic))
  assert got.keys() == want.keys()
  for path in want:
    np.testing.assert_array_equal(got[path], want[path], err_msg=path)


def test_scheme_names_match_the_config_choices():
  assert set(networks.SCHEMES) == set(config.INIT_SCHEMES)
  with pytest.raises(ValueError, match='tandem'):
    networks.init_policy(jax.random.PRNGKey(0), 3, 2, (8,), scheme='xavier')


def test_learner_init_uses_the_configured_scheme():
  cfg = _small_cfg(init='acme')
  state = learner.init(cfg, learner.Dims(5, 2), seed=0)
  _, kp, kc = jax.random.split(jax.random.PRNGKey(0), 3)
  want = (networks.init_policy(kp, 5, 2, (32, 32), scheme='acme'),
          networks.init_critic(kc, 5, 2, (32, 32), scheme='acme'))
  got = _leaves((state.policy, state.critic))
  for path, w in _leaves(want).items():
    np.testing.assert_array_equal(got[path], w, err_msg=path)


# Tolerances: each test pools >= 8k weights, so an empirical stddev is within
# ~1.5% of the truth (1/sqrt(2n)); 5% passes every seed, and every wrong
# scale in question (tandem's, 3x to 100x away) fails by far.
_STD_TOL = 0.05


def _check_uniform(w, limit):
  """U(-limit, limit): inside the bound, reaching near it, std limit/√3."""
  w = np.asarray(w, np.float64)
  assert np.max(np.abs(w)) <= limit
  assert np.max(np.abs(w)) > 0.99 * limit  # a normal would not fill it
  assert np.std(w) == pytest.approx(limit / np.sqrt(3), rel=_STD_TOL)


def _check_truncated_normal(w, std_before_truncation):
  """σ·N(0, 1) cut at ±2σ: inside ±2σ, std 0.8796σ, mean 0."""
  w = np.asarray(w, np.float64)
  s = std_before_truncation
  assert np.max(np.abs(w)) <= 2 * s * (1 + 1e-6)
  assert np.max(np.abs(w)) > 1.9 * s
  assert np.std(w) == pytest.approx(0.87962566 * s, rel=_STD_TOL)
  assert abs(np.mean(w)) < 0.05 * s


def test_tandem_torso_is_lecun_normal_truncated_at_two_sigma():
  # Haiku's VarianceScaling(1.0) (fan-in, truncated normal): stddev
  # 1/sqrt(fan_in) after the cut at ±2σ, so σ before it is that / 0.8796.
  n_in, layers = 96, (256, 128)
  p = networks.init_torso(jax.random.PRNGKey(0), n_in, layers, 'tandem')
  for layer, fan_in in zip(p['dense'], (n_in,) + layers[:-1]):
    _check_truncated_normal(layer['w'], 1 / np.sqrt(fan_in) / 0.87962566)
    np.testing.assert_array_equal(layer['b'], 0.0)


def test_tandem_heads_are_lecun_normal_scaled_down():
  # Policy heads at scale 1e-4, the critic's at 1e-2, both fan-in scaled
  # (unlike Acme's critic head, whose σ ignores the fan-in).
  fan_in, d = 256, 48
  p = networks.init_policy(jax.random.PRNGKey(1), 10, d, (fan_in,), 'tandem')
  for head in ('mean', 'stddev'):
    _check_truncated_normal(p[head]['w'],
                            1e-4 / np.sqrt(fan_in) / 0.87962566)
    np.testing.assert_array_equal(p[head]['b'], 0.0)
  for fan_in in (64, 1024):
    w = np.concatenate([
        np.asarray(networks.init_critic(jax.random.PRNGKey(s), 4, 2,
                                        (fan_in,), 'tandem')['head']['w'])
        for s in range(8192 // fan_in)])
    _check_truncated_normal(w, 1e-2 / np.sqrt(fan_in) / 0.87962566)


def test_acme_torso_is_haiku_uniform_scaling_0333():
  # acme/jax/networks/continuous.py:23: UniformScaling(0.333), i.e.
  # U(±0.333·sqrt(3/fan_in)), on every LayerNormMLP layer.
  n_in, layers = 96, (256, 128)
  p = networks.init_torso(jax.random.PRNGKey(0), n_in, layers, 'acme')
  for layer, fan_in in zip(p['dense'], (n_in,) + layers[:-1]):
    _check_uniform(layer['w'], 0.333 * np.sqrt(3.0 / fan_in))
    np.testing.assert_array_equal(layer['b'], 0.0)
  np.testing.assert_array_equal(p['ln']['scale'], 1.0)
  np.testing.assert_array_equal(p['ln']['offset'], 0.0)


def test_acme_policy_head_is_variance_scaling_1e4():
  # acme/jax/networks/distributional.py:275: VarianceScaling(1e-4), fan-in,
  # truncated normal: variance 1e-4/fan_in after truncation, so the
  # pre-truncation σ is 0.01/sqrt(fan_in)/0.8796. Both the loc and the scale
  # layer (ibid. 289-290).
  fan_in, d = 256, 48
  p = networks.init_policy(jax.random.PRNGKey(1), 10, d, (fan_in,), 'acme')
  for head in ('mean', 'stddev'):
    _check_truncated_normal(p[head]['w'],
                            0.01 / np.sqrt(fan_in) / 0.87962566)
    np.testing.assert_array_equal(p[head]['b'], 0.0)


def test_acme_critic_head_is_truncated_normal_001_whatever_the_fan_in():
  # acme/agents/jax/mpo/networks.py:245-247: hk.Linear(1,
  # w_init=TruncatedNormal(0.01)); Haiku's σ is the pre-truncation one and
  # does not depend on the fan-in.
  for fan_in in (64, 1024):
    w = np.concatenate([
        np.asarray(networks.init_critic(jax.random.PRNGKey(s), 4, 2,
                                        (fan_in,), 'acme')['head']['w'])
        for s in range(8192 // fan_in)])
    _check_truncated_normal(w, 0.01)


def test_acme_initial_policy_is_near_zero_mean_with_init_scale_stddev():
  p = networks.init_policy(jax.random.PRNGKey(2), 6, 3, (256, 256), 'acme')
  obs = jax.random.normal(jax.random.PRNGKey(3), (128, 6))
  pi = networks.apply_policy(p, obs, init_scale=0.5, min_scale=1e-6)
  assert float(jnp.max(jnp.abs(pi.mean))) < 0.05
  np.testing.assert_allclose(pi.stddev, 0.5, rtol=0.05)


def test_tanh_mean_is_the_bounded_linear_mean_and_leaves_the_stddev():
  p = networks.init_policy(jax.random.PRNGKey(0), 3, 2, (8,))
  p['mean'] = dict(p['mean'], b=jnp.array([3.0, -0.2]))
  obs = jax.random.normal(jax.random.PRNGKey(1), (5, 3))
  scales = dict(init_scale=0.5, min_scale=1e-6)
  linear = networks.apply_policy(p, obs, **scales)
  squashed = networks.apply_policy(p, obs, **scales, tanh_mean=True)
  assert np.all(np.abs(np.asarray(linear.mean[:, 0])) > 2.9)
  assert np.all(np.abs(np.asarray(squashed.mean)) < 1.0)
  np.testing.assert_allclose(squashed.mean, jnp.tanh(linear.mean), rtol=1e-6)
  np.testing.assert_array_equal(squashed.stddev, linear.stddev)


def test_learner_policy_follows_the_configured_policy_mean():
  params = learner.init(_small_cfg(), learner.Dims(5, 2), seed=0).policy
  params = dict(params, mean=dict(params['mean'], b=jnp.full((2,), 2.5)))
  obs = jnp.ones((4, 5))
  linear = learner.apply_policy(_small_cfg(), params, obs)
  squashed = learner.apply_policy(_small_cfg(policy_mean='tanh'), params, obs)
  assert np.all(np.asarray(linear.mean) > 2.4)
  np.testing.assert_allclose(squashed.mean, jnp.tanh(linear.mean), rtol=1e-6)


# --------------------------------------------------------------------------
# The mixture-of-Gaussians critic head (MPOConfig.critic_type='mog').


def _mog_critic(seed=0, obs_dim=3, action_dim=2, components=5):
  return networks.init_critic(jax.random.PRNGKey(seed), obs_dim, action_dim,
                              (16, 16), head='mog',
                              num_components=components)


def test_mixture_critic_clips_actions_and_its_q_is_the_mixture_mean():
  critic = _mog_critic()
  obs = jax.random.normal(jax.random.PRNGKey(1), (64, 3))
  action = 3.0 * jax.random.normal(jax.random.PRNGKey(2), (64, 2))
  z = networks.apply_critic_distribution(critic, obs, action, init_scale=1e-3)
  z_clipped = networks.apply_critic_distribution(
      critic, obs, jnp.clip(action, -1, 1), init_scale=1e-3)
  for a, b in zip(z, z_clipped):
    np.testing.assert_array_equal(a, b)
  w = np.exp(z.logits) / np.exp(z.logits).sum(-1, keepdims=True)
  np.testing.assert_allclose(networks.apply_critic(critic, obs, action),
                             (w * np.asarray(z.loc)).sum(-1), rtol=1e-5,
                             atol=1e-9)


def test_mixture_head_starts_as_acmes():
  # GaussianMixture(init_scale=1e-3): VarianceScaling(1e-5) layers, so
  # near-equal weights, means near 0 and stddevs at init_scale + 1e-4.
  critic = _mog_critic(components=5)
  z = networks.apply_critic_distribution(
      critic, jax.random.normal(jax.random.PRNGKey(1), (32, 3)),
      jax.random.uniform(jax.random.PRNGKey(2), (32, 2), minval=-1, maxval=1),
      init_scale=1e-3)
  assert z.logits.shape == z.loc.shape == z.scale.shape == (32, 5)
  assert float(jnp.max(jnp.abs(z.logits))) < 0.05
  assert float(jnp.max(jnp.abs(z.loc))) < 0.05
  np.testing.assert_allclose(z.scale, 1.1e-3, rtol=0.05)


def test_mixture_distribution_needs_a_mixture_head():
  with pytest.raises(ValueError, match='scalar head'):
    networks.apply_critic_distribution(_critic(), jnp.zeros((1, 3)),
                                       jnp.zeros((1, 2)), init_scale=1e-3)
  with pytest.raises(ValueError, match="critic head: expected one of"):
    networks.init_critic(jax.random.PRNGKey(0), 3, 2, (16,), head='c51')


def _mixture(weights, locs, scales):
  return networks.Mixture(jnp.log(jnp.asarray(weights, jnp.float32)),
                          jnp.asarray(locs, jnp.float32),
                          jnp.asarray(scales, jnp.float32))


def test_mixture_log_prob_is_the_log_of_the_weighted_densities():
  m = _mixture([0.2, 0.5, 0.3], [-2.0, 0.0, 3.0], [0.5, 1.0, 2.0])
  z = np.linspace(-4, 6, 11)
  dens = sum(w * np.exp(-0.5 * ((z - mu) / s) ** 2) / (s * np.sqrt(2 * np.pi))
             for w, mu, s in zip([0.2, 0.5, 0.3], [-2.0, 0.0, 3.0],
                                 [0.5, 1.0, 2.0]))
  np.testing.assert_allclose(networks.mixture_log_prob(m, jnp.asarray(z)),
                             np.log(dens), rtol=1e-5)
  assert float(networks.mixture_mean(m)) == pytest.approx(
      0.2 * -2 + 0.3 * 3, abs=1e-6)


def test_mixture_samples_have_the_mixtures_moments():
  weights, locs, scales = [0.2, 0.5, 0.3], [-2.0, 0.0, 3.0], [0.5, 1.0, 2.0]
  m = _mixture(weights, locs, scales)
  # A batch of two identical mixtures: samples [num, 2].
  m2 = networks.Mixture(*(jnp.stack([x, x]) for x in m))
  s = np.asarray(networks.mixture_sample(jax.random.PRNGKey(0), m2, 200_000))
  assert s.shape == (200_000, 2)
  mean = sum(w * mu for w, mu in zip(weights, locs))
  var = sum(w * (sd ** 2 + mu ** 2) for w, mu, sd in
            zip(weights, locs, scales)) - mean ** 2
  np.testing.assert_allclose(s.mean(0), mean, atol=0.02)
  np.testing.assert_allclose(s.var(0), var, rtol=0.02)
  # The component weights: about 20% of samples below -1.
  assert abs(float(np.mean(s < -1.0)) - 0.2 * 0.977 - 0.5 * 0.159
             - 0.3 * 0.023) < 0.01


@pytest.mark.parametrize('mean, stddev', [
    (0.0, 0.05), (0.3, 0.5), (0.9, 0.4), (1.5, 0.3), (-2.0, 1.0)])
def test_clipped_gaussian_entropy_is_the_mean_negative_log_prob(mean, stddev):
  rng = np.random.default_rng(0)
  dist = networks.GaussianParams(jnp.array([mean]), jnp.array([stddev]))
  got = float(networks.clipped_gaussian_entropy(dist)[0])
  a = np.clip(mean + stddev * rng.standard_normal((400_000, 1)), -1, 1)
  many = networks.GaussianParams(jnp.full(a.shape, mean),
                                 jnp.full(a.shape, stddev))
  mc = -float(jnp.mean(networks.clipped_gaussian_log_prob(
      many, jnp.asarray(a, jnp.float32))))
  assert got == pytest.approx(mc, abs=5e-3)
  if abs(mean) + 5 * stddev < 1:  # clipping negligible: the Gaussian's own
    assert got == pytest.approx(0.5 * np.log(2 * np.pi * np.e * stddev ** 2),
                                abs=1e-4)
