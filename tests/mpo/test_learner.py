"""The jitted MPO update: weights choice, guard, checkpoints, K steps."""


import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.core import trees
from tandem.agents.core.fields import ConfigError
from tandem.agents.mpo import config
from tandem.agents.mpo import duals as duals_lib
from tandem.agents.mpo import learner
from tandem.agents.mpo import losses

DIMS = learner.Dims(observation=5, action=2)
SMALL = dict(policy_layers=(32, 32), critic_layers=(32, 32), batch_size=16,
             num_samples=8, target_update_period=3)


def _cfg(**overrides):
  flat = dict(SMALL)
  flat.update(overrides)
  return config.replace(config.MPOConfig(), flat)


def _batch(k=None, seed=0, b=16):
  rng = np.random.default_rng(seed)
  lead = (b,) if k is None else (k, b)
  f = lambda *s: jnp.asarray(rng.normal(size=lead + s), jnp.float32)
  return learner.Batch(f(DIMS.observation),
                       jnp.clip(f(DIMS.action), -1, 1), f()[...],
                       jnp.full(lead, 0.9, jnp.float32), f(DIMS.observation))


def _copy(tree):
  return jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), tree)


def _assert_trees_equal(a, b):
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _assert_trees_close(a, b, rtol, atol):
  la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
  assert len(la) == len(lb)
  for x, y in zip(la, lb):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol,
                               atol=atol)


def _train(cfg, batches):
  """The state after one jitted update call per batch, from init."""
  state = learner.init(cfg, DIMS, 0)
  update = learner.make_update(cfg)
  for b in batches:
    state, _ = update(state, b)
  return state


@pytest.mark.parametrize('mode', ['before_update', 'after_update'])
def test_weights_use_the_configured_temperature(mode):
  cfg = _cfg(**{'duals.temperature_for_weights': mode,
                'duals.init_temperature': 2.0,
                'duals.temperature_optimizer.learning_rate': 0.5})
  state = learner.init(cfg, DIMS, seed=0)
  batch = _batch()
  _, k_e, k_b = jax.random.split(state.key, 3)
  e = learner.estep_inputs(cfg, state, batch, k_e, k_b)
  _, m = jax.jit(lambda s, b: learner.sgd_step(cfg, s, b))(state, batch)
  before = 2.0
  after = float(m['temperature'])
  assert abs(after - before) > 1e-3  # the dual step moved η
  used = before if mode == 'before_update' else after
  assert float(m['temperature_used']) == pytest.approx(used, rel=1e-5)
  kl = jnp.mean(losses.kl_to_uniform(losses.estep_weights(e.q, used)))
  assert float(m['kl_q_rel']) == pytest.approx(float(kl) / cfg.epsilon,
                                               rel=1e-4)
  other = after if mode == 'before_update' else before
  kl_other = jnp.mean(losses.kl_to_uniform(losses.estep_weights(e.q, other)))
  assert abs(float(kl_other) - float(kl)) > 0.05 * float(kl)


def test_k_steps_per_call_equal_k_single_calls():
  cfg = _cfg()
  batches = _batch(k=3)
  update = learner.make_update(cfg)
  s_multi, m = update(learner.init(cfg, DIMS, 0), batches)
  _, every = learner.make_update(cfg, all_steps_metrics=True)(
      learner.init(cfg, DIMS, 0), batches)
  s_single = learner.init(cfg, DIMS, 0)
  step = jax.jit(lambda s, b: learner.sgd_step(cfg, s, b))
  singles = []
  for i in range(3):
    s_single, m_i = step(s_single, jax.tree_util.tree_map(
        lambda x, i=i: x[i], batches))
    singles.append(m_i)
  assert int(s_multi.steps) == 3 and int(m['learner_steps']) == 3
  _assert_trees_close(s_multi, s_single, rtol=2e-5, atol=1e-6)
  # Every step's metrics, as the loop hands them out (stacked by dtype
  # inside it): each name, dtype and value of the single steps'.
  assert set(every) == set(singles[0]) | {'skipped_in_call'}
  for name in singles[0]:
    assert every[name].dtype == singles[0][name].dtype, name
    np.testing.assert_allclose(
        np.asarray(every[name], np.float64),
        np.stack([np.asarray(m_i[name], np.float64) for m_i in singles]),
        rtol=2e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(np.asarray(m[name]),
                                  np.asarray(every[name][-1]), err_msg=name)


@pytest.mark.parametrize('solver', ['gradient', 'exact'])
def test_non_finite_batch_leaves_params_unchanged_and_is_counted(solver):
  cfg = _cfg(**{'duals.solver': solver})
  state = learner.init(cfg, DIMS, 0)
  before = _copy(state)
  bad = _batch(k=1)._replace(reward=jnp.full((1, 16), jnp.nan))
  state, m = learner.make_update(cfg)(state, bad)
  assert int(m['skipped_in_call']) == 1 and int(state.skipped) == 1
  assert not bool(m['finite'])
  _assert_trees_equal((state.policy, state.critic, state.duals,
                       state.policy_opt, state.critic_opt),
                      (before.policy, before.critic, before.duals,
                       before.policy_opt, before.critic_opt))
  # The logged duals are those the state kept, not the discarded update's
  # (the temperature's own update saw finite Q-values and moved).
  kept = jax.tree_util.tree_map(
      lambda u: duals_lib.positive(u, cfg.duals.floor), state.duals.params)
  for name, value in [('temperature', kept.temperature),
                      ('penalty_temperature', kept.penalty_temperature),
                      ('alpha_mean', jnp.mean(kept.alpha_mean))]:
    np.testing.assert_allclose(m[name], value, rtol=1e-6, err_msg=name)
  # The following good batch trains normally.
  state, m = learner.make_update(cfg)(state, _batch(k=1, seed=1))
  assert bool(m['finite']) and int(state.skipped) == 1
  assert not np.array_equal(np.asarray(state.critic['head']['w']),
                            np.asarray(before.critic['head']['w']))


@pytest.mark.parametrize('critic_type', ['scalar', 'mog'])
def test_checkpoint_round_trip_is_bit_identical_and_resumes_exactly(
    tmp_path, critic_type):
  cfg = _cfg(critic_type=critic_type, **{'policy_optimizer.schedule': 'linear',
                'policy_optimizer.final_fraction': 0.1,
                'schedule_horizon': 10})
  update = learner.make_update(cfg)
  state, _ = update(learner.init(cfg, DIMS, 0), _batch(k=2, seed=0))
  path = str(tmp_path / 'ckpt.npz')
  learner.save(path, state, {'note': 'test'})
  saved = _copy(state)
  restored = learner.restore(path, learner.init(cfg, DIMS, 123))
  _assert_trees_equal(restored, saved)
  uninterrupted, m1 = update(state, _batch(k=2, seed=1))
  resumed, m2 = update(restored, _batch(k=2, seed=1))
  _assert_trees_equal(resumed, uninterrupted)
  assert float(m1['learning_rate_policy']) == float(m2['learning_rate_policy'])
  assert checkpointing.read_metadata(path)['note'] == 'test'


def test_restore_rejects_missing_corrupt_and_mismatched(tmp_path):
  cfg = _cfg()
  template = learner.init(cfg, DIMS, 0)
  with pytest.raises(checkpointing.CheckpointError, match='no such file'):
    learner.restore(str(tmp_path / 'nope.npz'), template)
  corrupt = tmp_path / 'corrupt.npz'
  corrupt.write_bytes(b'not a zip file at all')
  with pytest.raises(checkpointing.CheckpointError, match='corrupt.npz'):
    learner.restore(str(corrupt), template)
  path = str(tmp_path / 'ok.npz')
  learner.save(path, template)
  other = learner.init(_cfg(policy_layers=(16, 16)), DIMS, 0)
  with pytest.raises(checkpointing.CheckpointError, match='shape'):
    learner.restore(path, other)
  # A scalar critic's checkpoint does not load into a mixture critic.
  with pytest.raises(checkpointing.CheckpointError, match='mog'):
    learner.restore(path, learner.init(_cfg(critic_type='mog'), DIMS, 0))
  # Truncated file: an interrupted copy must not load.
  data = open(path, 'rb').read()
  trunc = tmp_path / 'trunc.npz'
  trunc.write_bytes(data[: len(data) // 2])
  with pytest.raises(checkpointing.CheckpointError, match='trunc.npz'):
    learner.restore(str(trunc), template)


def test_metrics_hold_the_logged_diagnostics():
  cfg = _cfg(**{'duals.solver': 'exact'})
  _, m = learner.make_update(cfg)(learner.init(cfg, DIMS, 0), _batch(k=1))
  for key in ['kl_q_rel', 'kl_mean_rel', 'kl_stddev_rel', 'temperature',
              'penalty_temperature', 'alpha_mean', 'alpha_stddev',
              'temperature_dual_residual', 'q_min', 'q_max',
              'policy_stddev_min', 'policy_stddev_max', 'skipped']:
    assert key in m and np.isfinite(float(m[key])), key
  # Exact solve with weights after the update: the E-step KL is ε.
  cfg2 = _cfg(**{'duals.solver': 'exact',
                 'duals.temperature_for_weights': 'after_update'})
  _, m2 = learner.make_update(cfg2)(learner.init(cfg2, DIMS, 0), _batch(k=1))
  assert float(m2['kl_q_rel']) == pytest.approx(1.0, rel=1e-2)
  # The action penalty's E-step KL: at its bound when solved exactly (its
  # samples leave the box here: the test batch's policy is wide), its own
  # quantity rather than a copy of the task's.
  assert float(m2['penalty_kl_q_rel']) == pytest.approx(1.0, rel=1e-2)
  assert np.isfinite(float(m['penalty_kl_q_rel']))
  assert float(m['penalty_kl_q_rel']) != pytest.approx(float(m['kl_q_rel']))
  off = _cfg(action_penalization=False)
  _, m3 = learner.make_update(off)(learner.init(off, DIMS, 0), _batch(k=1))
  assert np.isnan(float(m3['penalty_kl_q_rel']))
  assert np.isnan(float(m3['penalty_temperature']))


@pytest.mark.parametrize('kind', ['periodic', 'polyak'])
def test_target_networks_update(kind):
  cfg = _cfg(target_update=kind, target_update_period=2,
             target_polyak_tau=0.5)
  update = learner.make_update(cfg)
  state = learner.init(cfg, DIMS, 0)
  targets = lambda s: (s.target_policy, s.target_critic)
  t0 = _copy(targets(state))
  state, _ = update(state, _batch(k=1))
  t1 = _copy(targets(state))
  online = (state.policy, state.critic)
  moved = [not np.array_equal(a, b) for a, b in zip(
      jax.tree_util.tree_leaves(online), jax.tree_util.tree_leaves(t0))]
  assert all(moved)  # every online leaf moved in the step
  if kind == 'periodic':
    _assert_trees_equal(t1, t0)  # not yet copied at step 1
    state, _ = update(state, _batch(k=1, seed=2))
    _assert_trees_equal(targets(state), (state.policy, state.critic))
  else:
    for a, b, c in zip(*(jax.tree_util.tree_leaves(t) for t in
                         (t1, t0, online))):
      np.testing.assert_allclose(a, 0.5 * b + 0.5 * c, rtol=1e-6, atol=1e-7)


def _critic_calls(cfg, state, batch):
  """The target/online critic evaluations sgd_step traces, with the number
  of (state, action) pairs each one scores (a mixture critic's mean goes
  through apply_critic_distribution, so that is counted once, not twice)."""
  from tandem.agents.mpo import networks
  calls = []
  real_q, real_z = networks.apply_critic, networks.apply_critic_distribution
  depth = [0]

  def counted(real):
    def call(p, obs, action, **kw):
      if depth[0] == 0:
        calls.append(int(np.prod(action.shape[:-1])))
      depth[0] += 1
      try:
        return real(p, obs, action, **kw)
      finally:
        depth[0] -= 1
    return call
  networks.apply_critic = counted(real_q)
  networks.apply_critic_distribution = counted(real_z)
  try:
    jax.make_jaxpr(lambda s, b: learner.sgd_step(cfg, s, b))(state, batch)
  finally:
    networks.apply_critic = real_q
    networks.apply_critic_distribution = real_z
  return calls


@pytest.mark.parametrize('critic_type', ['scalar', 'mog'])
@pytest.mark.parametrize('where, width', [('current', 16),
                                          ('current_and_next', 32),
                                          ('next', 16)])
def test_estep_states_shapes_and_critic_work(where, width, critic_type):
  cfg = _cfg(estep_states=where, critic_type=critic_type,
             mog_num_value_samples=4)
  state = learner.init(cfg, DIMS, seed=0)
  batch = _batch()
  e = learner.estep_inputs(cfg, state, batch, jax.random.PRNGKey(1),
                           jax.random.PRNGKey(2))
  assert e.q.shape == (cfg.num_samples, width)
  assert e.actions.shape == (cfg.num_samples, width, DIMS.action)
  assert e.states.shape == (width, DIMS.observation)
  assert e.target_pi.mean.shape == (width, DIMS.action)
  # The mixture critic's target: Z return samples at each of the N
  # bootstrap actions.
  assert e.td_target.shape == ((16,) if critic_type == 'scalar' else
                               (4 * cfg.num_samples, 16))
  n, b = cfg.num_samples, 16
  calls = sorted(_critic_calls(cfg, state, batch))
  if where == 'next':
    # One sample set at s' serves the bootstrap and the E-step: one target
    # critic evaluation of N·B, plus the online critic at (s, a).
    assert calls == [b, n * b]
  else:
    assert calls == [b, n * b, n * b]


def test_estep_states_reuse_the_bootstrap_samples_at_next_states():
  batch = _batch()
  keys = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
  got = {}
  for where in ('current', 'current_and_next', 'next'):
    cfg = _cfg(estep_states=where)
    state = learner.init(cfg, DIMS, seed=0)
    got[where] = learner.estep_inputs(cfg, state, batch, *keys)
  cur, both, nxt = got['current'], got['current_and_next'], got['next']
  np.testing.assert_array_equal(both.q[:, :16], cur.q)
  np.testing.assert_array_equal(both.q[:, 16:], nxt.q)
  np.testing.assert_array_equal(nxt.states, batch.next_observation)
  np.testing.assert_array_equal(both.states[16:], batch.next_observation)
  # The E-step samples at s' are the bootstrap's: the TD target is their
  # mean Q.
  np.testing.assert_allclose(
      nxt.td_target, batch.reward + batch.discount * np.mean(nxt.q, axis=0),
      rtol=1e-5, atol=1e-5)
  for e in got.values():
    np.testing.assert_array_equal(e.td_target, cur.td_target)



@pytest.mark.parametrize('critic_type', ['scalar', 'mog'])
@pytest.mark.parametrize('where', ['current', 'current_and_next', 'next'])
def test_estep_inputs_come_from_the_target_networks_only(where, critic_type):
  # At init the online and target networks are equal, so a test run there
  # cannot tell which one a quantity came from: move the online ones.
  cfg = _cfg(estep_states=where, critic_type=critic_type,
             mog_num_value_samples=4)
  state = learner.init(cfg, DIMS, seed=0)
  batch = _batch()
  keys = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
  before = learner.estep_inputs(cfg, state, batch, *keys)
  shift = lambda t: jax.tree_util.tree_map(lambda x: x + 0.5, t)
  moved = state._replace(policy=shift(state.policy),
                         critic=shift(state.critic))
  after = learner.estep_inputs(cfg, moved, batch, *keys)
  _assert_trees_equal(after, before)
  # ... and they do follow the target networks.
  moved = state._replace(target_policy=shift(state.target_policy),
                         target_critic=shift(state.target_critic))
  after = learner.estep_inputs(cfg, moved, batch, *keys)
  for got, was in ((after.q, before.q), (after.td_target, before.td_target),
                   (after.target_pi.mean, before.target_pi.mean)):
    assert not np.allclose(np.asarray(got), np.asarray(was))

# --------------------------------------------------------------------------
# Gradient clipping (grad_clip_mode) and the logged KL bounds.

def _tree_norm(a, b):
  """Global norm of the difference of two trees."""
  return float(jnp.sqrt(sum(jnp.sum(jnp.square(x - y)) for x, y in zip(
      jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))))


def test_clip_jointly_scales_all_trees_by_one_factor():
  g = ({'w': jnp.array([3.0])}, {'w': jnp.array([4.0])})   # joint norm 5
  p, c = learner.clip_jointly(g, 1.0)
  np.testing.assert_allclose([p['w'][0], c['w'][0]], [0.6, 0.8], rtol=1e-6)
  p, c = learner.clip_jointly(g, 10.0)                        # inactive
  np.testing.assert_array_equal([p['w'][0], c['w'][0]], [3.0, 4.0])


def _sgd_step_deltas(mode, max_norm):
  """One plain-SGD (lr 1) step: the policy's and the critic's parameter
  changes, which are minus their (clipped) gradients, and the metrics."""
  cfg = _cfg(grad_clip_mode=mode, max_grad_norm=max_norm,
             **{'policy_optimizer.name': 'sgd',
                'policy_optimizer.learning_rate': 1.0,
                'critic_optimizer.name': 'sgd',
                'critic_optimizer.learning_rate': 1.0})
  state = learner.init(cfg, DIMS, seed=0)
  before = _copy((state.policy, state.critic))
  new, m = jax.jit(lambda s, b: learner.sgd_step(cfg, s, b))(state, _batch())
  assert bool(m['finite'])
  return (_tree_norm(new.policy, before[0]),
          _tree_norm(new.critic, before[1]), m)


def test_per_network_clips_each_gradient_and_joint_clips_them_together():
  bound = 1e-3
  d_pol, d_crit, m = _sgd_step_deltas('per_network', bound)
  g_pol, g_crit = float(m['grad_norm_policy']), float(m['grad_norm_critic'])
  assert min(g_pol, g_crit) > 10 * bound  # both clipped, whichever mode
  assert d_pol == pytest.approx(bound, rel=1e-3)
  assert d_crit == pytest.approx(bound, rel=1e-3)
  j_pol, j_crit, m_joint = _sgd_step_deltas('joint', bound)
  assert float(m_joint['grad_norm_policy']) == pytest.approx(g_pol, rel=1e-6)
  # One factor for both: the joint step has norm `bound` and each network
  # keeps its share of the raw gradient.
  total = np.hypot(g_pol, g_crit)
  assert np.hypot(j_pol, j_crit) == pytest.approx(bound, rel=1e-3)
  assert j_pol == pytest.approx(bound * g_pol / total, rel=1e-3)
  assert j_crit == pytest.approx(bound * g_crit / total, rel=1e-3)


def test_joint_and_per_network_are_identical_while_clipping_is_inactive():
  # Adam steps, as in the default config; two, so the second sees moments.
  batches = _batch(k=2)
  states, metrics = {}, {}
  for mode in ('per_network', 'joint'):
    cfg = _cfg(grad_clip_mode=mode, max_grad_norm=1e9)
    states[mode], metrics[mode] = learner.make_update(cfg)(
        learner.init(cfg, DIMS, 0), batches)
  assert float(metrics['joint']['grad_norm_critic']) < 1e9
  a, b = states['per_network'], states['joint']
  # Equal in exact arithmetic (both scales are 1); the two programs are
  # fused differently by XLA, so a last-bit difference is allowed. An
  # active clip changes the parameters by far more (below).
  _assert_trees_close((a.policy, a.critic, a.duals),
                      (b.policy, b.critic, b.duals), rtol=1e-6, atol=1e-9)
  clip = _cfg(grad_clip_mode='joint', max_grad_norm=1e-3)
  clipped, _ = learner.make_update(clip)(learner.init(clip, DIMS, 0), batches)
  head = lambda s: np.asarray(s.critic['head']['w'])
  # (Adam divides most of the clip's scale back out: still ~1e-2 relative.)
  relative = np.abs(head(clipped) - head(a)) / (np.abs(head(a)) + 1e-9)
  assert np.max(relative) > 1e-4


@pytest.mark.parametrize('per_dim', [True, False])
def test_metrics_log_the_kl_bounds_used(per_dim):
  cfg = _cfg(per_dim_constraining=per_dim, epsilon=0.2, epsilon_mean=0.01,
             epsilon_stddev=1e-4, epsilon_penalty=0.002)
  state = learner.init(cfg, DIMS, 0)
  _, m = learner.make_update(cfg)(state, _batch(k=1))
  share = DIMS.action if per_dim else 1   # the per-dimension convention
  assert float(m['epsilon_mean_used']) == pytest.approx(0.01 / share)
  assert float(m['epsilon_stddev_used']) == pytest.approx(1e-4 / share)
  assert float(m['epsilon_used']) == pytest.approx(0.2)      # never divided
  assert float(m['epsilon_penalty_used']) == pytest.approx(0.002)
  assert learner.kl_bounds(cfg, DIMS.action) == pytest.approx(
      (0.01 / share, 1e-4 / share))


@pytest.mark.parametrize('per_dim', [True, False])
def test_the_alphas_are_stepped_on_the_bounds_logged(per_dim, monkeypatch):
  # What update_alphas receives, not only what the log says.
  from tandem.agents.mpo import duals as duals_lib
  seen = []
  real = duals_lib.update_alphas

  def spy(cfg, state, kl_mean, kl_stddev, eps_mean, eps_stddev, lr):
    seen.append((eps_mean, eps_stddev))
    return real(cfg, state, kl_mean, kl_stddev, eps_mean, eps_stddev, lr)
  monkeypatch.setattr(duals_lib, 'update_alphas', spy)
  cfg = _cfg(per_dim_constraining=per_dim, epsilon_mean=0.01,
             epsilon_stddev=1e-4)
  _, m = learner.make_update(cfg)(learner.init(cfg, DIMS, 0), _batch(k=1))
  assert seen and all(e == pytest.approx(
      (float(m['epsilon_mean_used']), float(m['epsilon_stddev_used'])))
                      for e in seen), seen
  share = DIMS.action if per_dim else 1
  assert seen[0] == pytest.approx((0.01 / share, 1e-4 / share))


def test_policy_loss_is_the_papers_sum_with_the_action_penalty_term():
  # loss_policy = CE(w) + CE(w_penalty) + Σ α·KL (Abdolmaleki et al.
  # 2018b; Acme sums the two weights, the same since CE is linear in them),
  # rebuilt here from the step's own E-step inputs.
  from tandem.agents.mpo import duals as duals_lib
  cfg = _cfg(action_penalization=True)
  state = learner.init(cfg, DIMS, 0)
  # The online policy a step away from the target, so the KL terms count.
  state = state._replace(policy=jax.tree_util.tree_map(
      lambda x: x * 1.1 + 0.01, state.policy))
  batch = _batch(seed=3)
  _, metrics = learner.sgd_step(cfg, state, batch)
  _, k_estep, k_boot = jax.random.split(state.key, 3)
  e = learner.estep_inputs(cfg, state, batch, k_estep, k_boot)
  p, f = state.duals.params, cfg.duals.floor
  w = losses.estep_weights(e.q, duals_lib.positive(p.temperature, f))
  w_pen = losses.estep_weights(
      e.penalty_q, duals_lib.positive(p.penalty_temperature, f))
  online = learner.apply_policy(cfg, state.policy, e.states)
  terms = losses.mstep_terms(online, e.target_pi, e.actions, w, True)
  pen = losses.mstep_terms(online, e.target_pi, e.actions, w_pen, True)
  kl = (losses.kl_penalty(duals_lib.positive(p.alpha_mean, f), terms.kl_mean)
        + losses.kl_penalty(duals_lib.positive(p.alpha_stddev, f),
                            terms.kl_stddev))
  pen_ce = float(pen.cross_entropy_mean + pen.cross_entropy_stddev)
  want = float(terms.cross_entropy_mean + terms.cross_entropy_stddev) + (
      pen_ce + float(kl))
  assert float(metrics['loss_policy']) == pytest.approx(want, rel=1e-5)
  assert abs(pen_ce) > 1e-2 * abs(want) and float(kl) > 1e-2 * abs(want)


def test_tanh_policy_mean_feeds_the_estep_and_is_fitted_through_the_tanh():
  cfg = _cfg(policy_mean='tanh')
  state = learner.init(cfg, DIMS, seed=0)
  far = lambda p: dict(p, mean=dict(p['mean'],
                                    b=jnp.full_like(p['mean']['b'], 3.0)))
  state = state._replace(policy=far(state.policy),
                         target_policy=far(state.target_policy))
  batch = _batch()
  _, k_e, k_b = jax.random.split(state.key, 3)
  e = learner.estep_inputs(cfg, state, batch, k_e, k_b)
  # The linear mean would be ~3: the E-step's target policy is tanh's.
  np.testing.assert_allclose(e.target_pi.mean, np.tanh(3.0), atol=0.01)
  new, m = jax.jit(lambda s, b: learner.sgd_step(cfg, s, b))(state, batch)
  assert np.isfinite(float(m['loss_policy']))
  # The M-step still moves the mean head under the tanh (its slope at 3 is
  # 0.01, yet the gradient is not cut off).
  assert not np.allclose(np.asarray(new.policy['mean']['b']),
                         np.asarray(state.policy['mean']['b']))


# --------------------------------------------------------------------------
# The mixture-of-Gaussians critic (critic_type='mog').


def test_mog_bootstrap_uses_the_scalar_critics_action_samples_and_q_is_the_mean():
  batch = _batch()
  keys = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
  cfg_s, cfg_m = _cfg(estep_states='next'), _cfg(estep_states='next',
                                                 critic_type='mog')
  e_s = learner.estep_inputs(cfg_s, learner.init(cfg_s, DIMS, 0), batch, *keys)
  state = learner.init(cfg_m, DIMS, 0)
  e_m = learner.estep_inputs(cfg_m, state, batch, *keys)
  # Same policy init and keys: the same bootstrap actions whatever the head.
  np.testing.assert_array_equal(e_m.actions, e_s.actions)
  from tandem.agents.mpo import networks
  tile = lambda o: jnp.broadcast_to(o, (cfg_m.num_samples,) + o.shape)
  z = networks.apply_critic_distribution(
      state.target_critic, tile(batch.next_observation), e_m.actions,
      init_scale=cfg_m.mog_init_scale)
  np.testing.assert_allclose(e_m.q, networks.mixture_mean(z), rtol=1e-6)
  # The target samples are r + γⁿ z: their mean over the Z·N samples is the
  # scalar TD target of the mixture's mean to within the (tiny, at init)
  # spread of the components.
  np.testing.assert_allclose(
      jnp.mean(e_m.td_target, axis=0),
      batch.reward + batch.discount * jnp.mean(e_m.q, axis=0), atol=1e-3)
  assert float(jnp.std(e_m.td_target, axis=0).max()) > 0


def test_mog_critic_learns_a_two_valued_return():
  # A bandit whose reward is ±1 with equal odds whatever the state and
  # action (discount 0, so the target is the reward): the scalar critic can
  # only learn the mean 0; the mixture must also learn the spread (stddev 1).
  cfg = _cfg(critic_type='mog', discount=0.0, batch_size=64,
             **{'critic_optimizer.learning_rate': 3e-3})
  update = learner.make_update(cfg)
  state = learner.init(cfg, DIMS, 0)
  rng = np.random.default_rng(0)
  for _ in range(60):
    k, b = 10, 64
    f = lambda *s, k=k, b=b: jnp.asarray(rng.normal(size=(k, b) + s),
                                         jnp.float32)
    reward = jnp.asarray(rng.choice([-1.0, 1.0], size=(k, b)), jnp.float32)
    batch = learner.Batch(f(DIMS.observation),
                          jnp.clip(f(DIMS.action), -1, 1), reward,
                          jnp.zeros((k, b), jnp.float32), f(DIMS.observation))
    state, m = update(state, batch)
    assert bool(m['finite'])
  from tandem.agents.mpo import networks
  obs = jnp.asarray(rng.normal(size=(256, DIMS.observation)), jnp.float32)
  act = jnp.asarray(rng.uniform(-1, 1, size=(256, DIMS.action)), jnp.float32)
  z = networks.apply_critic_distribution(state.critic, obs, act,
                                         init_scale=cfg.mog_init_scale)
  mean = networks.mixture_mean(z)
  w = jax.nn.softmax(z.logits, axis=-1)
  var = jnp.sum(w * (z.scale ** 2 + z.loc ** 2), axis=-1) - mean ** 2
  # The average error, not the worst probe: over init/data seeds 0-7 the
  # worst of 256 probes reaches 0.45 (a seed-dependent statistic, so
  # fragile), while the average |mean| stays within 0.07-0.20 and the median
  # stddev within 0.97-1.01.
  assert float(jnp.mean(jnp.abs(mean))) < 0.3
  assert 0.8 < float(jnp.median(jnp.sqrt(var))) < 1.2


def test_the_one_reduction_guard_trains_as_the_per_leaf_guard(monkeypatch):
  """Same parameters after N steps, one batch of them non-finite (skipped
  by both), with trees.all_finite and with the per-leaf test it replaces."""
  from tests.core.test_trees import per_leaf_all_finite
  cfg = _cfg()
  batches = [_batch(k=2, seed=s) for s in range(4)]
  batches[2] = batches[2]._replace(
      reward=batches[2].reward.at[1, 3].set(jnp.inf))
  new = _train(cfg, batches)
  monkeypatch.setattr(trees, 'all_finite', per_leaf_all_finite)
  old = _train(cfg, batches)
  assert int(new.skipped) == int(old.skipped) == 1
  assert int(new.steps) == 8
  _assert_trees_close(new, old, rtol=1e-6, atol=1e-7)


def test_the_guard_on_the_optimizers_inputs_trains_as_on_their_outputs(
    monkeypatch):
  """Same parameters after N steps, one batch of them non-finite, with the
  guard's test on what the optimizers read and with a test that also reads
  the parameters they wrote."""
  cfg = _cfg()
  batches = [_batch(k=2, seed=s) for s in range(4)]
  batches[1] = batches[1]._replace(
      observation=batches[1].observation.at[0, 5, 1].set(jnp.nan))
  new = _train(cfg, batches)
  select = trees.select

  def select_also_testing_the_written_parameters(pred, new, old):
    # The guard's select is sgd_step's only one over the 5-tuple (policy,
    # critic, duals, policy_opt, critic_opt); the targets' are over dicts.
    if isinstance(new, tuple) and len(new) == 5:
      pred = jnp.logical_and(pred, trees.all_finite(new[:2]))
    return select(pred, new, old)
  monkeypatch.setattr(trees, 'select',
                      select_also_testing_the_written_parameters)
  old = _train(cfg, batches)
  assert int(new.skipped) == int(old.skipped) == 1
  assert int(new.steps) == 8
  # Not bit for bit: the two compile to different fusions.
  _assert_trees_close(new, old, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize('clip', config.GRAD_CLIP_MODES)
@pytest.mark.parametrize('name', config.NETWORK_OPTIMIZERS)
def test_huge_finite_gradients_write_finite_parameters(name, clip):
  """What the guard's test of the gradients (not of the parameters written
  from them) rests on: from a finite state, finite but huge gradients are
  clipped, and every network optimizer writes a finite state from them."""
  cfg = _cfg(**{'policy_optimizer.name': name, 'critic_optimizer.name': name,
                'grad_clip_mode': clip})
  state = learner.init(cfg, DIMS, 0)
  before = _copy(state)
  batch = _batch(k=1)._replace(reward=jnp.full((1, 16), 1e8, jnp.float32))
  state, m = learner.make_update(cfg)(state, batch)
  assert bool(m['finite'])
  assert float(m['grad_norm_critic']) > 1e6 * cfg.max_grad_norm
  assert bool(trees.all_finite(state))
  assert not np.array_equal(np.asarray(state.critic['head']['w']),
                            np.asarray(before.critic['head']['w']))


@pytest.mark.parametrize('clip', config.GRAD_CLIP_MODES)
def test_a_step_at_the_largest_rate_and_clip_bound_moves_at_most_their_product(
    clip):
  """The bounds MPOConfig accepts (MAX_LEARNING_RATE, MAX_GRAD_NORM) are what
  keep an accepted step finite: gradients larger than the clip bound move
  the critic by at most learning_rate · max_grad_norm (SGD), and the state
  written stays finite."""
  lr, bound = config.MAX_LEARNING_RATE, config.MAX_GRAD_NORM
  cfg = _cfg(**{'policy_optimizer.name': 'sgd', 'critic_optimizer.name': 'sgd',
                'policy_optimizer.learning_rate': lr,
                'critic_optimizer.learning_rate': lr,
                'max_grad_norm': bound, 'grad_clip_mode': clip})
  state = learner.init(cfg, DIMS, 0)
  before = _copy(state)
  batch = _batch(k=1)._replace(reward=jnp.full((1, 16), 1e14, jnp.float32))
  state, m = learner.make_update(cfg)(state, batch)
  assert bool(m['finite']) and int(state.skipped) == 0
  assert float(m['grad_norm_critic']) > 10 * bound
  moved = float(optax.global_norm(
      jax.tree_util.tree_map(jnp.subtract, state.critic, before.critic)))
  assert 0.5 * lr * bound < moved <= 1.0001 * lr * bound
  assert bool(trees.all_finite(state))


def test_a_learner_refuses_a_horizon_the_launch_has_not_set():
  # 0 means "the steps the budget pays for", which only a launch knows.
  with pytest.raises(ConfigError, match=r'MPOConfig.schedule_horizon.*'
                     r'over_the_budget'):
    learner.init(_cfg(schedule_horizon=0), DIMS, 0)
