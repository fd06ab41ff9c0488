"""Networks: where they differ from a plain MLP on purpose."""

import jax
import jax.numpy as jnp
import numpy as np

from agents.mpo import config
from agents.mpo import learner
from agents.mpo import networks


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
  total = np.trapz(density[..., 0], np.asarray(inside)[0, :, 0]) + edges
  np.testing.assert_allclose(total, 1.0, atol=2e-3)
  # A mean beyond the upper edge makes the edge action near certain, where
  # the unclipped density would call it rare.
  at_edge = networks.clipped_gaussian_log_prob(dist, jnp.ones((3, 1)))
  assert float(at_edge[1, 0]) > np.log(0.85)
  assert float(networks.gaussian_log_prob(dist, jnp.ones((3, 1)))[1, 0]) < \
      np.log(0.5)
