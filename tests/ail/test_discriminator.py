"""GAIL / AIRL discriminator: losses, rewards, updates against hand values."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.ail import discriminator as disc
from tandem.agents.ail.config import AILConfig, discriminator_optimizer
from tandem.agents.core.fields import ConfigError

OBS, D = 2, 1  # observation and action dims of the hand-built cases


def _softplus(z):
  # The naive form is exact enough for |z| <= 30 in float64.
  return math.log1p(math.exp(z))


def _tree_equal(a, b):
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  return len(la) == len(lb) and all(
      np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def _batch(key, n, obs_mean, obs_dim=3, act_dim=2, std=0.3):
  k1, k2, k3 = jax.random.split(key, 3)
  return disc.Transitions(
      observation=obs_mean + std * jax.random.normal(k1, (n, obs_dim)),
      action=jax.random.uniform(k2, (n, act_dim), minval=-1, maxval=1),
      next_observation=obs_mean + std * jax.random.normal(k3, (n, obs_dim)),
      discount=jnp.ones((n,)))


def _hand_mlp(w_in, bias):
  """Params of a one-hidden-layer (2 units) MLP with a known output.

  The first layer makes units (u, -u), u = x·w_in; LayerNorm maps them to
  ±u / sqrt(u² + 1e-5), tanh follows, and the head reads the first unit:
  out = bias + tanh(u / sqrt(u² + 1e-5)).
  """
  w_in = jnp.asarray(w_in, jnp.float32)[:, None]
  return {'torso': {'dense': [{'w': jnp.concatenate([w_in, -w_in], 1),
                               'b': jnp.zeros((2,))}],
                    'ln': {'scale': jnp.ones((2,)), 'offset': jnp.zeros((2,))}},
          'head': {'w': jnp.array([[1.0], [0.0]]), 'b': jnp.array([bias])}}


def _hand_value(x, w_in, bias):
  u = float(np.dot(x, w_in))
  return bias + math.tanh(u / math.sqrt(u * u + 1e-5))


def _constant_mlp(n_in, layers, value):
  p = disc._mlp_init(jax.random.PRNGKey(0), n_in, layers)
  p['head'] = {'w': jnp.zeros_like(p['head']['w']),
               'b': jnp.full((1,), value, jnp.float32)}
  return p


# ---------------------------------------------------------------------------
# GAIL: loss and rewards.


def test_logistic_loss_hand_computed():
  expert = jnp.array([0.0, 2.0, -1.0])
  agent = jnp.array([1.0, -3.0])
  expected = ((_softplus(0.0) + _softplus(-2.0) + _softplus(1.0)) / 3 +
              (_softplus(1.0) + _softplus(-3.0)) / 2)
  assert float(disc.logistic_loss(expert, agent)) == pytest.approx(
      expected, rel=1e-6)
  # = -E_e log D - E_a log(1 - D), D = σ(z).
  sig = lambda z: 1 / (1 + math.exp(-z))
  alt = (-(math.log(sig(0)) + math.log(sig(2)) + math.log(sig(-1))) / 3 -
         (math.log(1 - sig(1)) + math.log(1 - sig(-3))) / 2)
  assert expected == pytest.approx(alt, rel=1e-12)


def test_logistic_loss_stable_at_extreme_logits():
  loss = float(disc.logistic_loss(jnp.array([-200.0]), jnp.array([200.0])))
  assert loss == pytest.approx(400.0, rel=1e-6)


@pytest.mark.parametrize('z', [0.0, 2.0, -1.0, 25.0, -200.0])
def test_gail_rewards_hand_computed(z):
  t = disc.Transitions(jnp.ones((3, OBS)), jnp.ones((3, D)), jnp.ones((3, OBS)),
                       jnp.ones((3,)))
  norm = disc.init_normalizer(OBS)
  expected = {
      'neg_log_one_minus_d': (math.exp(z) if z < -50 else _softplus(z)),
      'log_d': (z if z < -50 else -_softplus(-z)),
      'logit': z,
  }
  for reward, want in expected.items():
    cfg = AILConfig(kind='gail', reward=reward, layers=(4,))
    params = {'d': _constant_mlp(OBS + D, cfg.layers, z)}
    got = np.asarray(disc.rewards(cfg, params, norm, t, 0.99))
    assert got.shape == (3,)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5, err_msg=reward)
  # The hand-computed values themselves, for the three named logits.
  if z == 0.0:
    assert expected['neg_log_one_minus_d'] == pytest.approx(math.log(2))
    assert expected['log_d'] == pytest.approx(-math.log(2))
  if z == 2.0:
    assert expected['neg_log_one_minus_d'] == pytest.approx(
        math.log(1 + math.exp(2)))
  if z == -1.0:
    assert expected['log_d'] == pytest.approx(-math.log(1 + math.e))


def test_gail_logit_is_score():
  cfg = AILConfig(kind='gail', reward='logit', layers=(8, 8))
  params = disc.init_params(jax.random.PRNGKey(1), cfg, 3, 2)
  t = _batch(jax.random.PRNGKey(2), 5, 0.0)
  norm = disc.update_normalizer(disc.init_normalizer(3), t.observation)
  s = disc.score(cfg, params, norm, t, 0.9)
  np.testing.assert_array_equal(
      disc.logits(cfg, params, norm, t, jnp.zeros(5), 0.9), s)
  np.testing.assert_array_equal(disc.rewards(cfg, params, norm, t, 0.9), s)


# ---------------------------------------------------------------------------
# AIRL.


def _airl_case(reward='f'):
  cfg = AILConfig(kind='airl', reward=reward, input='state_action',
                  layers=(2,), normalize_inputs=False)
  w_g, b_g = [0.0, 0.0, 1.0], 0.5     # g reads the action only
  w_h, b_h = [1.0, 0.0], -0.25        # h reads the first observation dim
  params = {'g': _hand_mlp(w_g, b_g), 'h': _hand_mlp(w_h, b_h)}
  s = np.array([[1.0, 3.0], [-2.0, 0.0], [0.5, 1.0]], np.float32)
  a = np.array([[0.7], [-0.3], [0.0]], np.float32)
  s2 = np.array([[-1.0, 0.0], [4.0, 1.0], [2.0, 2.0]], np.float32)
  d = np.array([1.0, 1.0, 0.0], np.float32)   # last: terminal
  t = disc.Transitions(jnp.asarray(s), jnp.asarray(a), jnp.asarray(s2),
                       jnp.asarray(d))
  g = [_hand_value(np.concatenate([s[i], a[i]]), w_g, b_g) for i in range(3)]
  h = [_hand_value(s[i], w_h, b_h) for i in range(3)]
  h2 = [_hand_value(s2[i], w_h, b_h) for i in range(3)]
  return cfg, params, t, np.array(g), np.array(h), np.array(h2), d


def test_airl_score_rewards_and_logits_hand_computed():
  gamma = 0.9
  cfg, params, t, g, h, h2, d = _airl_case('f')
  # Sanity of the hand net: distinct values, so each term is visible.
  assert g[0] > g[2] > g[1] and h2[0] < h[0]
  f = g + gamma * d * h2 - h
  # The terminal row has no h(s') term.
  assert f[2] == pytest.approx(g[2] - h[2])
  norm = disc.init_normalizer(OBS)
  np.testing.assert_allclose(disc.score(cfg, params, norm, t, gamma), f,
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(disc.rewards(cfg, params, norm, t, gamma), f,
                             rtol=1e-5, atol=1e-6)
  log_pi = jnp.array([-1.0, 0.5, -3.0])
  np.testing.assert_allclose(
      disc.logits(cfg, params, norm, t, log_pi, gamma), f - np.asarray(log_pi),
      rtol=1e-5, atol=1e-6)
  cfg_g, *_ = _airl_case('g')
  np.testing.assert_allclose(disc.rewards(cfg_g, params, norm, t, gamma), g,
                             rtol=1e-5, atol=1e-6)
  # Fu et al.'s generator reward: the logit itself, f - log π.
  cfg_l, *_ = _airl_case('logit')
  np.testing.assert_allclose(
      disc.rewards(cfg_l, params, norm, t, gamma, log_pi=log_pi),
      f - np.asarray(log_pi), rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match='log_pi'):
    disc.rewards(cfg_l, params, norm, t, gamma)


def test_airl_constant_nets():
  cfg = AILConfig(kind='airl', reward='f', layers=(4, 4))
  params = {'g': _constant_mlp(OBS + D, cfg.layers, 0.5),
            'h': _constant_mlp(OBS, cfg.layers, 2.0)}
  t = disc.Transitions(jnp.zeros((2, OBS)), jnp.zeros((2, D)),
                       jnp.ones((2, OBS)), jnp.array([1.0, 0.0]))
  f = disc.score(cfg, params, disc.init_normalizer(OBS), t, 0.9)
  np.testing.assert_allclose(f, [0.5 + 0.9 * 2.0 - 2.0, 0.5 - 2.0],
                             rtol=1e-6)


@pytest.mark.parametrize('kind,reward', [('gail', 'logit'), ('airl', 'f')])
def test_logit_depends_on_log_pi_as_minus_log_pi(kind, reward):
  cfg = AILConfig(kind=kind, reward=reward, layers=(8,))
  params = disc.init_params(jax.random.PRNGKey(3), cfg, 3, 2)
  t = _batch(jax.random.PRNGKey(4), 4, 0.0)
  norm = disc.update_normalizer(disc.init_normalizer(3), t.observation)
  log_pi = jnp.array([-1.0, -2.0, 0.3, -5.0])
  delta = jnp.array([0.5, -1.5, 2.0, 0.0])
  z0 = disc.logits(cfg, params, norm, t, log_pi, 0.99)
  z1 = disc.logits(cfg, params, norm, t, log_pi + delta, 0.99)
  want = -delta if kind == 'airl' else jnp.zeros(4)
  np.testing.assert_allclose(z1 - z0, want, atol=1e-5)
  # log π is data to the discriminator: no gradient flows into it.
  grad = jax.grad(lambda lp: jnp.sum(
      disc.logits(cfg, params, norm, t, lp, 0.99)))(log_pi)
  np.testing.assert_array_equal(grad, jnp.zeros(4))


# ---------------------------------------------------------------------------
# Inputs.


def _logits_with_actions(cfg, action_scale):
  params = disc.init_params(jax.random.PRNGKey(5), cfg, 3, 2)
  t = _batch(jax.random.PRNGKey(6), 6, 0.0)
  t = t._replace(action=t.action * action_scale + 0.3 * (1 - action_scale))
  norm = disc.update_normalizer(disc.init_normalizer(3), t.observation)
  return (np.asarray(disc.logits(cfg, params, norm, t, jnp.zeros(6), 0.99)),
          np.asarray(disc.rewards(cfg, params, norm, t, 0.99)))


@pytest.mark.parametrize('kind,reward', [('gail', 'logit'), ('airl', 'g')])
def test_state_next_state_ignores_actions(kind, reward):
  cfg = AILConfig(kind=kind, reward=reward, input='state_next_state',
                  layers=(8,))
  z0, r0 = _logits_with_actions(cfg, 1.0)
  z1, r1 = _logits_with_actions(cfg, -1.0)
  np.testing.assert_array_equal(z0, z1)
  np.testing.assert_array_equal(r0, r1)


@pytest.mark.parametrize('kind,reward', [('gail', 'logit'), ('airl', 'g')])
def test_state_action_uses_actions(kind, reward):
  cfg = AILConfig(kind=kind, reward=reward, input='state_action', layers=(8,))
  z0, r0 = _logits_with_actions(cfg, 1.0)
  z1, r1 = _logits_with_actions(cfg, -1.0)
  assert np.max(np.abs(z0 - z1)) > 1e-3
  assert np.max(np.abs(r0 - r1)) > 1e-3


def test_state_next_state_gail_uses_next_state():
  cfg = AILConfig(kind='gail', reward='logit', input='state_next_state',
                  layers=(8,))
  params = disc.init_params(jax.random.PRNGKey(5), cfg, 3, 2)
  t = _batch(jax.random.PRNGKey(6), 6, 0.0)
  norm = disc.init_normalizer(3)
  z0 = disc.logits(cfg, params, norm, t, jnp.zeros(6), 0.99)
  t1 = t._replace(next_observation=-t.next_observation)
  z1 = disc.logits(cfg, params, norm, t1, jnp.zeros(6), 0.99)
  assert np.max(np.abs(np.asarray(z0 - z1))) > 1e-3


def test_param_shapes():
  for kind, reward in (('gail', 'logit'), ('airl', 'f')):
    for inp in ('state_action', 'state_next_state'):
      cfg = AILConfig(kind=kind, reward=reward, input=inp, layers=(5, 7))
      p = disc.init_params(jax.random.PRNGKey(0), cfg, 3, 2)
      n_in = {('gail', 'state_action'): 5, ('gail', 'state_next_state'): 6,
              ('airl', 'state_action'): 5, ('airl', 'state_next_state'): 3}
      first = p['d' if kind == 'gail' else 'g']['torso']['dense'][0]['w']
      assert first.shape == (n_in[kind, inp], 5)
      if kind == 'airl':
        assert p['h']['torso']['dense'][0]['w'].shape == (3, 5)
      head = p['d' if kind == 'gail' else 'g']['head']['w']
      assert head.shape == (7, 1)


# ---------------------------------------------------------------------------
# Gradient penalty.


def test_gradient_penalty_linear():
  w = jnp.array([3.0, 4.0])
  x_e = jax.random.normal(jax.random.PRNGKey(0), (6, 2))
  x_a = jax.random.normal(jax.random.PRNGKey(1), (6, 2))
  gp = disc.gradient_penalty(lambda x: x @ w, x_e, x_a, jax.random.PRNGKey(2))
  assert float(gp) == pytest.approx((5.0 - 1.0) ** 2, rel=1e-5)


def test_gradient_penalty_zero_centred():
  # Target 0: the mean squared gradient norm, (5 - 0)² for a linear fn.
  w = jnp.array([3.0, 4.0])
  x_e = jax.random.normal(jax.random.PRNGKey(0), (6, 2))
  x_a = jax.random.normal(jax.random.PRNGKey(1), (6, 2))
  gp = disc.gradient_penalty(lambda x: x @ w, x_e, x_a, jax.random.PRNGKey(2),
                             target=0.0)
  assert float(gp) == pytest.approx(25.0, rel=1e-5)


def test_gradient_penalty_quadratic_depends_on_interpolation():
  c = 0.75
  fn = lambda x: c * jnp.sum(jnp.square(x), axis=-1)   # ∇ = 2c x
  x_e = jnp.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5], [-2.0, 2.0]])
  x_a = jnp.array([[-1.0, 0.0], [2.0, 2.0], [0.0, 0.0], [1.0, -1.0]])
  key = jax.random.PRNGKey(7)
  u = np.asarray(jax.random.uniform(key, (4, 1), jnp.float32))
  assert not np.allclose(u, u[0])   # rows get their own u
  x_hat = u * np.asarray(x_e) + (1 - u) * np.asarray(x_a)
  want = np.mean((2 * c * np.linalg.norm(x_hat, axis=-1) - 1.0) ** 2)
  got = float(disc.gradient_penalty(fn, x_e, x_a, key))
  assert got == pytest.approx(want, rel=1e-5)
  # At the endpoints u would be 0 or 1; a random u is visibly different.
  at_agent = np.mean((2 * c * np.linalg.norm(x_a, axis=-1) - 1.0) ** 2)
  assert abs(got - at_agent) > 1e-2
  other = float(disc.gradient_penalty(fn, x_e, x_a, jax.random.PRNGKey(8)))
  assert other != pytest.approx(got, rel=1e-4)


def test_gradient_penalty_at_the_experts_inputs_is_r1():
  # At 'expert' the gradients are taken at the expert's inputs alone: the
  # agent's inputs and the key change nothing; with target 0 it is the mean
  # squared gradient norm there (R1).
  c = 0.75
  fn = lambda x: c * jnp.sum(jnp.square(x), axis=-1)   # ∇ = 2c x
  x_e = jnp.array([[1.0, 2.0], [0.0, -1.0], [3.0, 0.5], [-2.0, 2.0]])
  x_a = jnp.array([[-1.0, 0.0], [2.0, 2.0], [0.0, 0.0], [1.0, -1.0]])
  r1 = lambda x_agent, key: float(disc.gradient_penalty(
      fn, x_e, x_agent, key, target=0.0, at='expert'))
  want = np.mean(np.square(2 * c * np.linalg.norm(x_e, axis=-1)))
  assert r1(x_a, jax.random.PRNGKey(7)) == pytest.approx(want, rel=1e-5)
  assert r1(-3.0 * x_a, jax.random.PRNGKey(8)) == pytest.approx(want,
                                                                rel=1e-5)
  # The interpolates' penalty differs on the same inputs.
  assert float(disc.gradient_penalty(fn, x_e, x_a, jax.random.PRNGKey(7),
                                     target=0.0)) != pytest.approx(want,
                                                                   rel=1e-3)


def test_gradient_penalty_finite_gradient_at_zero_slope():
  # A flat fn has ∇ = 0, where the norm's derivative would be 0/0.
  fn = lambda x, s: s * jnp.sum(x, -1)
  x = jnp.ones((3, 2))
  g = jax.grad(lambda s: disc.gradient_penalty(
      lambda y: fn(y, s), x, -x, jax.random.PRNGKey(0)))(0.0)
  assert np.isfinite(float(g))


# ---------------------------------------------------------------------------
# Normalizer.


def test_normalizer_merge_is_exact():
  rng = np.random.default_rng(0)
  a = rng.normal(3.0, 2.0, (5, 3)).astype(np.float32)
  b = rng.normal(-1.0, 0.5, (2, 4, 3)).astype(np.float32)
  n = disc.init_normalizer(3)
  assert float(n.count) == 0.0
  np.testing.assert_array_equal(n.mean, np.zeros(3))
  np.testing.assert_array_equal(n.var, np.ones(3))
  n_ab = disc.update_normalizer(disc.update_normalizer(n, a), b)
  allx = np.concatenate([a, b.reshape(-1, 3)], 0).astype(np.float64)
  assert float(n_ab.count) == 13.0
  np.testing.assert_allclose(n_ab.mean, allx.mean(0), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(n_ab.var, allx.var(0), rtol=1e-5)
  n_once = disc.update_normalizer(n, jnp.asarray(allx, jnp.float32))
  np.testing.assert_allclose(n_ab.mean, n_once.mean, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(n_ab.var, n_once.var, rtol=1e-5)


def test_normalize_and_clip():
  n = disc.Normalizer(jnp.float32(10.0), jnp.array([1.0, -2.0]),
                      jnp.array([4.0, 0.25]))
  x = jnp.array([[3.0, -2.5], [101.0, -1000.0]])
  z = np.asarray(disc.normalize(n, x, 5.0))
  np.testing.assert_allclose(z[0], [1.0, -1.0], rtol=1e-5)
  np.testing.assert_array_equal(z[1], [5.0, -5.0])
  # At init the map is (to float32 precision) the identity inside the clip.
  x0 = jnp.array([0.3, -4.0])
  np.testing.assert_allclose(disc.normalize(disc.init_normalizer(2), x0, 5.0),
                             x0, rtol=1e-6)


# ---------------------------------------------------------------------------
# update().


def _np_batch(rng, n, obs_mean, obs_dim=3, act_dim=2, std=0.3):
  f32 = lambda x: x.astype(np.float32)
  return disc.Transitions(
      observation=f32(obs_mean + std * rng.normal(size=(n, obs_dim))),
      action=f32(rng.uniform(-1, 1, (n, act_dim))),
      next_observation=f32(obs_mean + std * rng.normal(size=(n, obs_dim))),
      discount=np.ones((n,), np.float32))


def _train(cfg, steps, seed=0):
  # A jitted step in a Python loop: on CPU it compiles several times faster
  # than the same step inside lax.scan.
  rng = np.random.default_rng(seed)
  zeros = np.zeros((64,), np.float32)
  step = jax.jit(lambda s, e, a: disc.update(cfg, s, e, a, zeros, zeros,
                                             0.99))
  state, history = disc.init(cfg, 3, 2, seed), []
  for _ in range(steps):
    state, m = step(state, _np_batch(rng, 64, 1.0), _np_batch(rng, 64, -1.0))
    history.append(m)
  return state, jax.tree_util.tree_map(lambda *x: np.stack(x), *history)


@pytest.mark.parametrize('kind,reward', [('gail', 'neg_log_one_minus_d'),
                                         ('airl', 'f')])
def test_update_learns_separable_data(kind, reward):
  cfg = AILConfig(kind=kind, reward=reward, layers=(32, 32),
                  gradient_penalty=1.0,
                  discriminator_optimizer=discriminator_optimizer(
                      'adam', 1e-3))
  state, m = _train(cfg, 200)
  loss = np.asarray(m['discriminator_loss'])
  assert np.all(np.isfinite(loss))
  assert loss[-10:].mean() < 0.6 * loss[:10].mean()
  assert np.asarray(m['logistic_loss'])[-10:].mean() < 0.7  # chance: 1.39
  assert np.asarray(m['expert_accuracy'])[-10:].mean() > 0.95
  assert np.asarray(m['agent_accuracy'])[-10:].mean() > 0.95
  assert np.asarray(m['d_expert'])[-1] > np.asarray(m['d_agent'])[-1] + 0.4
  assert np.all(np.asarray(m['gradient_penalty']) >= 0)
  assert int(state.steps) == 200 and int(state.skipped) == 0
  np.testing.assert_array_equal(m['discriminator_steps'], np.arange(1, 201))
  assert np.all(np.asarray(m['discriminator_finite']))
  # The normalizer saw s and s' of both sides: 4 × 64 per step.
  assert float(state.normalizer.count) == 200 * 4 * 64
  # The learned reward ranks expert-like transitions higher.
  expert = _batch(jax.random.PRNGKey(9), 32, 1.0)
  agent = _batch(jax.random.PRNGKey(10), 32, -1.0)
  r_e = disc.rewards(cfg, state.params, state.normalizer, expert, 0.99)
  r_a = disc.rewards(cfg, state.params, state.normalizer, agent, 0.99)
  assert float(jnp.mean(r_e)) > float(jnp.mean(r_a))


def _plain_cfg(**kw):
  base = dict(kind='gail', reward='logit', layers=(8,), gradient_penalty=0.0,
              normalize_inputs=False)
  base.update(kw)
  return AILConfig(**base)


def test_learning_rate_follows_linear_schedule_over_global_steps():
  lr0, final, horizon = 0.1, 0.1, 10
  cfg = _plain_cfg(schedule_horizon=horizon,
                   discriminator_optimizer=discriminator_optimizer(
                       'sgd', lr0, schedule='linear', final_fraction=final))
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  zeros = jnp.zeros((8,))
  step = jax.jit(lambda s: disc.update(cfg, s, expert, agent, zeros, zeros,
                                       0.99))

  def grad_at(params):
    norm = disc.init_normalizer(3)
    return jax.grad(lambda p: disc.logistic_loss(
        disc.logits(cfg, p, norm, expert, zeros, 0.99),
        disc.logits(cfg, p, norm, agent, zeros, 0.99)))(params)

  state = disc.init(cfg, 3, 2, 0)
  assert int(state.horizon) == horizon
  for k in range(13):
    p = min(k / horizon, 1.0)
    want = lr0 * (1 - p + p * final)
    old = state.params
    state, m = step(state)
    assert float(m['learning_rate_discriminator']) == pytest.approx(
        want, rel=1e-5)
    # SGD: the step actually taken used that rate.
    expected = jax.tree_util.tree_map(lambda w, g, want=want: w - want * g, old,
                                      grad_at(old))
    for got, exp in zip(jax.tree_util.tree_leaves(state.params),
                        jax.tree_util.tree_leaves(expected)):
      np.testing.assert_allclose(got, exp, rtol=1e-4, atol=1e-6)
  # A state resumed at step 5 gets step 5's rate, whatever its optimizer saw.
  resumed = disc.init(cfg, 3, 2, 1)._replace(steps=jnp.int32(5))
  _, m = step(resumed)
  assert float(m['learning_rate_discriminator']) == pytest.approx(
      lr0 * (1 - 0.5 + 0.5 * final), rel=1e-5)
  assert int(m['discriminator_steps']) == 6


def test_learning_rate_holds_for_the_configured_share_of_its_horizon():
  # The discriminator's schedule reads the hold from its optimizer config.
  cfg = _plain_cfg(schedule_horizon=10,
                   discriminator_optimizer=discriminator_optimizer(
                       'sgd', 0.1, schedule='linear', final_fraction=0.0,
                       hold_fraction=0.5))
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  zeros = jnp.zeros((8,))
  step = jax.jit(lambda s: disc.update(cfg, s, expert, agent, zeros, zeros,
                                       0.99))
  state, rates = disc.init(cfg, 3, 2, 0), []
  for _ in range(11):
    state, m = step(state)
    rates.append(float(m['learning_rate_discriminator']))
  np.testing.assert_allclose(rates, [0.1] * 6 + [0.08, 0.06, 0.04, 0.02, 0.0],
                             atol=1e-6)


def test_nan_batch_skips_step():
  cfg = _plain_cfg(normalize_inputs=True, gradient_penalty=10.0)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  zeros = jnp.zeros((8,))
  bad = expert._replace(observation=expert.observation.at[3, 1].set(jnp.nan))
  step = jax.jit(lambda s, e: disc.update(cfg, s, e, agent, zeros, zeros,
                                          0.99))
  new, m = step(state, bad)
  assert not bool(m['discriminator_finite'])
  assert _tree_equal(new.params, state.params)
  assert _tree_equal(new.opt_state, state.opt_state)
  assert _tree_equal(new.normalizer, state.normalizer)
  assert int(new.skipped) == 1 and int(new.steps) == 1
  assert int(m['discriminator_steps']) == 1
  # A clean batch afterwards goes through.
  newer, m = step(new, expert)
  assert bool(m['discriminator_finite'])
  assert not _tree_equal(newer.params, new.params)
  assert int(newer.skipped) == 1 and int(newer.steps) == 2
  assert float(newer.normalizer.count) == 32.0


def test_nan_log_pi_skips_airl_step():
  cfg = _plain_cfg(kind='airl', reward='f')
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  lp = jnp.zeros((8,)).at[0].set(jnp.nan)
  new, m = disc.update(cfg, state, expert, agent, jnp.zeros((8,)), lp, 0.99)
  assert not bool(m['discriminator_finite'])
  assert _tree_equal(new.params, state.params)
  assert int(new.skipped) == 1


def test_zero_penalty_is_the_logistic_loss_and_left_out_of_the_graph():
  cfg = _plain_cfg(normalize_inputs=True)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  zeros = jnp.zeros((8,))
  new, m = disc.update(cfg, state, expert, agent, zeros, zeros, 0.99)
  assert float(m['gradient_penalty']) == 0.0
  assert float(m['discriminator_loss']) == float(m['logistic_loss'])
  # Against the logits under the statistics updated with this batch.
  norm = disc.update_normalizer(disc.init_normalizer(3), jnp.concatenate(
      [expert.observation, expert.next_observation, agent.observation,
       agent.next_observation]))
  z_e = disc.logits(cfg, state.params, norm, expert, zeros, 0.99)
  z_a = disc.logits(cfg, state.params, norm, agent, zeros, 0.99)
  assert float(m['logistic_loss']) == pytest.approx(
      float(disc.logistic_loss(z_e, z_a)), rel=1e-6)
  np.testing.assert_allclose(new.normalizer.mean, norm.mean, rtol=1e-6)
  assert float(m['expert_accuracy']) == pytest.approx(
      float(jnp.mean(z_e > 0)))
  assert float(m['d_agent']) == pytest.approx(
      float(jnp.mean(jax.nn.sigmoid(z_a))), rel=1e-6)

  def jaxpr(c):
    return str(jax.make_jaxpr(lambda s: disc.update(
        c, s, expert, agent, zeros, zeros, 0.99))(state))
  assert 'random_bits' not in jaxpr(cfg)
  assert 'random_bits' in jaxpr(_plain_cfg(gradient_penalty=1.0))


def test_normalizer_stays_at_init_when_off():
  cfg = _plain_cfg(normalize_inputs=False)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 100.0)
  zeros = jnp.zeros((8,))
  new, _ = disc.update(cfg, state, expert, expert, zeros, zeros, 0.99)
  assert _tree_equal(new.normalizer, disc.init_normalizer(3))
  # Raw observations far outside ±normalizer_clip are not clipped.
  t = expert
  moved = t._replace(observation=t.observation + 50.0)
  z0 = disc.score(cfg, state.params, new.normalizer, t, 0.99)
  z1 = disc.score(cfg, state.params, new.normalizer, moved, 0.99)
  assert not np.allclose(z0, z1)


@pytest.mark.parametrize('kind,reward,inp', [
    ('gail', 'logit', 'state_action'),
    ('gail', 'logit', 'state_next_state'),
    ('airl', 'f', 'state_action'),
])
def test_update_penalty_is_on_score_of_flat_inputs(kind, reward, inp):
  lam = 2.0
  cfg = _plain_cfg(kind=kind, reward=reward, input=inp, gradient_penalty=lam)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  # Terminal agent rows: the penalty still counts h(s') (discount 1).
  agent = agent._replace(discount=jnp.zeros((8,)))
  log_pi = jnp.linspace(-2.0, 0.0, 8)
  new, m = disc.update(cfg, state, expert, agent, log_pi, log_pi, 0.99)

  norm = disc.init_normalizer(3)   # normalisation off: flat = raw inputs

  def fn(x):
    t = disc.Transitions(x[:, :3], x[:, 3:5], x[:, 5:], jnp.ones(x.shape[0]))
    return disc.score(cfg, state.params, norm, t, 0.99)

  flat = lambda t: jnp.concatenate(
      [t.observation, t.action, t.next_observation], -1)
  _, key_penalty = jax.random.split(state.key)
  want = disc.gradient_penalty(fn, flat(expert), flat(agent), key_penalty)
  assert float(m['gradient_penalty']) == pytest.approx(float(want), rel=1e-5)
  assert float(m['gradient_penalty']) > 0
  assert float(m['discriminator_loss']) == pytest.approx(
      float(m['logistic_loss']) + lam * float(want), rel=1e-5)
  # The key advances, so the next step interpolates elsewhere.
  assert not np.array_equal(new.key, state.key)


@pytest.mark.parametrize('on, target', [('score', 0.0), ('g', 1.0),
                                        ('g', 0.0)])
def test_update_penalty_target_and_airl_g_only(on, target):
  lam = 2.0
  cfg = _plain_cfg(kind='airl', reward='f', input='state_next_state',
                   gradient_penalty=lam, gradient_penalty_on=on,
                   gradient_penalty_target=target)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  log_pi = jnp.linspace(-2.0, 0.0, 8)
  new, m = disc.update(cfg, state, expert, agent, log_pi, log_pi, 0.99)
  norm = disc.init_normalizer(3)   # normalisation off: flat = raw inputs

  def score(params, x):
    t = disc.Transitions(x[:, :3], x[:, 3:5], x[:, 5:], jnp.ones(x.shape[0]))
    if on == 'g':
      return disc._mlp(params['g'], t.observation)   # g(s), the state-only g
    return disc.score(cfg, params, norm, t, 0.99)

  flat = lambda t: jnp.concatenate(
      [t.observation, t.action, t.next_observation], -1)
  _, key = jax.random.split(state.key)
  penalty = lambda params: disc.gradient_penalty(
      lambda x: score(params, x), flat(expert), flat(agent), key, target)
  want = penalty(state.params)
  assert float(m['gradient_penalty']) == pytest.approx(float(want), rel=1e-5)
  other = disc.gradient_penalty(lambda x: score(state.params, x),
                                flat(expert), flat(agent), key, 1.0 - target)
  assert abs(float(other) - float(want)) > 1e-3
  # On g alone, the penalty leaves h's step to the logistic loss: h moves
  # as with no penalty (Adam steps each parameter on its own gradient),
  # while g moves otherwise; on the whole score both move otherwise.
  unpenalised, _ = disc.update(
      dataclasses.replace(cfg, gradient_penalty=0.0), state, expert, agent,
      log_pi, log_pi, 0.99)
  same = lambda part: _tree_equal(new.params[part],
                                  unpenalised.params[part])
  assert same('h') == (on == 'g')
  assert not same('g')


def test_update_penalty_at_the_expert_takes_the_experts_inputs():
  lam = 2.0
  cfg = _plain_cfg(kind='airl', reward='f', input='state_next_state',
                   gradient_penalty=lam, gradient_penalty_target=0.0,
                   gradient_penalty_at='expert')
  state = disc.init(cfg, 3, 2, 0)
  # Half the expert's rows terminal (no absorbing states): each is
  # penalised as it is scored, without h(s') there.
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)._replace(
      discount=jnp.array([1.0, 0.0] * 4))
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)
  log_pi = jnp.linspace(-2.0, 0.0, 8)
  _, m = disc.update(cfg, state, expert, agent, log_pi, log_pi, 0.99)
  norm = disc.init_normalizer(3)   # normalisation off: flat = raw inputs

  def fn(x):
    t = disc.Transitions(x[:, :3], x[:, 3:5], x[:, 5:], expert.discount)
    return disc.score(cfg, state.params, norm, t, 0.99)

  x_e = jnp.concatenate(
      [expert.observation, expert.action, expert.next_observation], -1)
  grads = jax.grad(lambda x: jnp.sum(fn(x)))(x_e)
  want = float(jnp.mean(jnp.sum(jnp.square(grads), -1)))
  assert want > 0
  assert float(m['gradient_penalty']) == pytest.approx(want, rel=1e-4)
  assert float(m['discriminator_loss']) == pytest.approx(
      float(m['logistic_loss']) + lam * want, rel=1e-5)
  # The agent's inputs do not enter the penalty.
  _, m_far = disc.update(cfg, state, expert,
                         agent._replace(observation=agent.observation * 4.0),
                         log_pi, log_pi, 0.99)
  assert float(m_far['gradient_penalty']) == pytest.approx(want, rel=1e-4)
  with pytest.raises(ConfigError, match='gradient_penalty_at'):
    _plain_cfg(kind='airl', reward='f', gradient_penalty_at='agent')


def test_penalty_on_g_is_refused_for_gail():
  with pytest.raises(ConfigError, match='gradient_penalty_on'):
    _plain_cfg(kind='gail', reward='logit', gradient_penalty_on='g')


def test_penalty_with_normalisation_is_in_the_normalised_coordinates():
  # The score sees normalised, clipped observations under the normaliser
  # updated with this batch; the penalty's interpolation and gradient norm
  # are taken there, where a unit gradient means the same for every task.
  cfg = _plain_cfg(kind='airl', reward='f', input='state_action',
                   gradient_penalty=1.0, normalize_inputs=True,
                   normalizer_clip=5.0)
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 10.0, std=4.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -10.0, std=4.0)
  log_pi = jnp.zeros((8,))
  new, m = disc.update(cfg, state, expert, agent, log_pi, log_pi, 0.99)
  plain = dataclasses.replace(cfg, normalize_inputs=False)

  def fn(x):
    t = disc.Transitions(x[:, :3], x[:, 3:5], x[:, 5:], jnp.ones(x.shape[0]))
    return disc.score(plain, state.params, None, t, 0.99)

  def flat(t, norm):
    scale = (lambda o: disc.normalize(norm, o, 5.0)) if norm else (
        lambda o: o)
    return jnp.concatenate(
        [scale(t.observation), t.action, scale(t.next_observation)], -1)
  _, key = jax.random.split(state.key)
  want = disc.gradient_penalty(fn, flat(expert, new.normalizer),
                               flat(agent, new.normalizer), key)
  raw = disc.gradient_penalty(fn, flat(expert, None), flat(agent, None), key)
  assert float(m['gradient_penalty']) == pytest.approx(float(want), rel=1e-5)
  assert abs(float(raw) - float(want)) > 0.05 * float(want)


def test_score_sees_clipped_normalised_observations():
  cfg = _plain_cfg(normalize_inputs=True, normalizer_clip=3.0,
                   input='state_next_state')
  params = disc.init_params(jax.random.PRNGKey(0), cfg, 3, 2)
  norm = disc.Normalizer(jnp.float32(10.0), jnp.full((3,), 1.0),
                         jnp.full((3,), 4.0))
  t = _batch(jax.random.PRNGKey(1), 4, 0.0)
  far = t._replace(next_observation=t.next_observation.at[:, 0].set(1e3))
  edge = t._replace(next_observation=t.next_observation.at[:, 0].set(7.0))
  np.testing.assert_allclose(disc.score(cfg, params, norm, far, 0.99),
                             disc.score(cfg, params, norm, edge, 0.99),
                             rtol=1e-6)


def test_state_input_gail_sees_neither_actions_nor_next_states():
  cfg = AILConfig(kind='gail', reward='logit', input='state', layers=(8,))
  params = disc.init_params(jax.random.PRNGKey(5), cfg, 3, 2)
  assert params['d']['torso']['dense'][0]['w'].shape == (3, 8)
  t = _batch(jax.random.PRNGKey(6), 6, 0.0)
  norm = disc.init_normalizer(3)
  z = lambda t: np.asarray(disc.logits(cfg, params, norm, t, jnp.zeros(6),
                                       0.99))
  np.testing.assert_array_equal(
      z(t), z(t._replace(action=-t.action,
                         next_observation=-t.next_observation)))
  assert np.max(np.abs(z(t) - z(t._replace(observation=-t.observation)))) \
      > 1e-3


# ---------------------------------------------------------------------------
# Absorbing states (DAC, Kostrikov et al. 2019, Sec. 4.2).


def _absorbing_airl_case():
  """_airl_case's transitions with absorbing states on: each state has an
  indicator column, and h reads it with weight 2."""
  cfg = AILConfig(kind='airl', reward='f', input='state_action', layers=(2,),
                  normalize_inputs=False, absorbing_states='on')
  w_g, b_g = [0.0, 0.0, 0.0, 1.0], 0.5     # g reads the action only
  w_h, b_h = [1.0, 0.0, 2.0], -0.25        # h: first dim and indicator
  params = {'g': _hand_mlp(w_g, b_g), 'h': _hand_mlp(w_h, b_h)}
  return cfg, params, (w_g, b_g), (w_h, b_h)


def test_absorbing_states_send_a_terminal_transition_into_the_absorbing_state():
  gamma = 0.9
  cfg, params, (w_g, b_g), (w_h, b_h) = _absorbing_airl_case()
  _, _, t, _, _, _, d = _airl_case('f')
  assert list(d) == [1.0, 1.0, 0.0]
  s, a, s2 = (np.asarray(x) for x in (t.observation, t.action,
                                      t.next_observation))
  flag = lambda x, v: np.concatenate([x, [v]])
  absorbing = np.array([0.0, 0.0, 1.0])
  g = [_hand_value(np.concatenate([flag(s[i], 0), a[i]]), w_g, b_g)
       for i in range(3)]
  h = [_hand_value(flag(s[i], 0), w_h, b_h) for i in range(3)]
  h2 = [_hand_value(flag(s2[0], 0), w_h, b_h),
        _hand_value(flag(s2[1], 0), w_h, b_h),
        _hand_value(absorbing, w_h, b_h)]   # terminal: the absorbing state
  f = np.array(g) + gamma * np.array(h2) - np.array(h)   # every future counts
  norm = disc.init_normalizer(OBS)
  np.testing.assert_allclose(disc.score(cfg, params, norm, t, gamma), f,
                             rtol=1e-5, atol=1e-6)
  # Without absorbing states the terminal row has no h(s') at all.
  off = dataclasses.replace(cfg, absorbing_states='off')
  _, off_params, *_ = _airl_case('f')
  assert float(disc.score(off, off_params, norm, t, gamma)[2]) != \
      pytest.approx(f[2], abs=1e-3)
  # The absorbing state's own transition: zero action, absorbing both ends.
  g_abs = _hand_value(np.concatenate([absorbing, [0.0]]), w_g, b_g)
  h_abs = _hand_value(absorbing, w_h, b_h)
  want = g_abs + gamma * h_abs - h_abs
  assert float(disc.absorbing_score(cfg, params, OBS, D, gamma)) == \
      pytest.approx(want, rel=1e-5)
  # AIRL's log π is 0 there: the reward is f for 'f' and 'logit' alike.
  for reward in ('f', 'logit'):
    c = dataclasses.replace(cfg, reward=reward)
    assert float(disc.absorbing_reward(c, params, OBS, D, gamma)) == \
        pytest.approx(want, rel=1e-5)
  c = dataclasses.replace(cfg, reward='g')
  assert float(disc.absorbing_reward(c, params, OBS, D, gamma)) == \
      pytest.approx(g_abs, rel=1e-5)


@pytest.mark.parametrize('reward', ['neg_log_one_minus_d', 'log_d', 'logit'])
def test_gail_absorbing_reward_is_the_reward_of_its_logit(reward):
  cfg = AILConfig(kind='gail', reward=reward, input='state_next_state',
                  layers=(2,), normalize_inputs=False, absorbing_states='on')
  w = [0.0, 0.0, 0.5, 0.0, 0.0, -3.0]   # both indicators, s' weighted more
  params = {'d': _hand_mlp(w, 0.1)}
  z = _hand_value([0.0, 0.0, 1.0, 0.0, 0.0, 1.0], w, 0.1)
  want = {'neg_log_one_minus_d': _softplus(z), 'log_d': -_softplus(-z),
          'logit': z}[reward]
  assert float(disc.absorbing_reward(cfg, params, OBS, D, 0.99)) == \
      pytest.approx(want, rel=1e-5)
  assert int(params['d']['torso']['dense'][0]['w'].shape[0]) == 2 * (OBS + 1)
  shapes = jax.tree_util.tree_map(jnp.shape, disc.init_params(
      jax.random.PRNGKey(0), cfg, OBS, D))
  assert shapes['d']['torso']['dense'][0]['w'] == (2 * (OBS + 1), 2)


def test_absorbing_rows_enter_the_loss_once_per_terminal_transition():
  # GAIL on (s, a) with a hand net reading s's first dim and the
  # indicator: expert 1 terminal row of 4, agent 3 of 4.
  cfg = AILConfig(kind='gail', reward='logit', input='state_action',
                  layers=(2,), normalize_inputs=False, gradient_penalty=0.0,
                  absorbing_states='on')
  w, b = [0.5, 0.0, 1.5, 0.0], -0.2
  state = disc.init(cfg, OBS, D, 0)
  params = {'d': _hand_mlp(w, b)}
  assert jax.tree_util.tree_structure(params) == \
      jax.tree_util.tree_structure(state.params)
  state = state._replace(params=params,
                         opt_state=disc._optimizer(cfg).init(params))
  rng = np.random.default_rng(0)

  def batch(discount):
    n = len(discount)
    return disc.Transitions(
        jnp.asarray(rng.normal(size=(n, OBS)), jnp.float32),
        jnp.asarray(rng.uniform(-1, 1, (n, D)), jnp.float32),
        jnp.asarray(rng.normal(size=(n, OBS)), jnp.float32),
        jnp.asarray(discount, jnp.float32))
  expert, agent = batch([1, 1, 0, 1]), batch([0, 0, 1, 0])
  zeros = jnp.zeros((4,))
  _, m = disc.update(cfg, state, expert, agent, zeros, zeros, 0.99)

  z = lambda t: [_hand_value(np.concatenate([np.asarray(t.observation[i]),
                                             [0.0],
                                             np.asarray(t.action[i])]), w, b)
                 for i in range(4)]
  z_abs = _hand_value([0.0, 0.0, 1.0, 0.0], w, b)
  want = ((sum(_softplus(-x) for x in z(expert)) + _softplus(-z_abs)) / 5 +
          (sum(_softplus(x) for x in z(agent)) + 3 * _softplus(z_abs)) / 7)
  assert float(m['logistic_loss']) == pytest.approx(want, rel=1e-5)
  assert float(m['d_absorbing']) == pytest.approx(
      1 / (1 + math.exp(-z_abs)), rel=1e-5)
  # Off, the same batches' loss has no absorbing rows.
  off = dataclasses.replace(cfg, absorbing_states='off')
  s_off = disc.init(off, OBS, D, 0)
  p_off = {'d': _hand_mlp([0.5, 0.0, 0.0], b)}
  s_off = s_off._replace(params=p_off,
                         opt_state=disc._optimizer(off).init(p_off))
  _, m_off = disc.update(off, s_off, expert, agent, zeros, zeros, 0.99)
  plain = (sum(_softplus(-x) for x in z(expert)) / 4 +
           sum(_softplus(x) for x in z(agent)) / 4)
  assert float(m_off['logistic_loss']) == pytest.approx(plain, rel=1e-5)
  assert 'd_absorbing' not in m_off


def test_absorbing_states_penalty_interpolates_the_indicator_too():
  lam = 2.0
  cfg = AILConfig(kind='airl', reward='f', input='state_action', layers=(4,),
                  normalize_inputs=False, gradient_penalty=lam,
                  absorbing_states='on')
  state = disc.init(cfg, 3, 2, 0)
  expert = _batch(jax.random.PRNGKey(0), 8, 1.0)
  agent = _batch(jax.random.PRNGKey(1), 8, -1.0)._replace(
      discount=jnp.asarray([0.0, 1.0] * 4))
  zeros = jnp.zeros((8,))
  _, m = disc.update(cfg, state, expert, agent, zeros, zeros, 0.99)

  def fn(x):   # x: [s (3 + 1), a (2), s' (3 + 1)], futures counted
    return disc._score_normalized(cfg, state.params, x[:, :4], x[:, 4:6],
                                  x[:, 6:], jnp.ones(x.shape[0]), 0.99)

  def flat(t):
    one = lambda v: jnp.full((t.observation.shape[0], 1), v)
    terminal = (t.discount == 0)[:, None]
    nxt = jnp.where(terminal,
                    jnp.concatenate([jnp.zeros_like(t.next_observation),
                                     one(1.0)], -1),
                    jnp.concatenate([t.next_observation, one(0.0)], -1))
    return jnp.concatenate([t.observation, one(0.0), t.action, nxt], -1)
  _, key_penalty = jax.random.split(state.key)
  want = disc.gradient_penalty(fn, flat(expert), flat(agent), key_penalty)
  assert float(m['gradient_penalty']) == pytest.approx(float(want), rel=1e-5)


def test_a_discriminator_refuses_a_horizon_the_launch_has_not_set():
  with pytest.raises(ConfigError, match=r'AILConfig.schedule_horizon.*'
                     r'over_the_budget'):
    disc.init(_plain_cfg(schedule_horizon=0), 3, 2, 0)
