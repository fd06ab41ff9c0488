"""The adversarial learner: rounds from global counts, the schedule contract,
fresh rewards for every n-step, AIRL's current-policy log-probabilities,
behaviour cloning of the generator's mean."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.ail import bc
from tandem.agents.ail import discriminator as disc
from tandem.agents.ail import learner
from tandem.agents.ail.config import AILConfig, discriminator_optimizer
from tandem.agents.core import checkpointing
from tandem.agents.replay import layouts
from tandem.agents.mpo import config as mpo_config
from tandem.agents.mpo import learner as mpo_learner
from tandem.agents.mpo import networks
from tandem.agents.mpo.learner import Dims

DIMS = Dims(observation=3, action=2)
N_STEP = 3
LAYOUT = layouts.WindowLayout(DIMS.observation, DIMS.action, N_STEP)


def _mpo(**kw):
  flat = dict(policy_layers=(16,), critic_layers=(16,), batch_size=8,
              num_samples=4, n_step=N_STEP, sgd_steps_per_call=2,
              schedule_horizon=40)
  for group in ('policy_optimizer', 'critic_optimizer',
                'duals.temperature_optimizer', 'duals.alpha_optimizer'):
    flat[f'{group}.schedule'] = 'linear'
    flat[f'{group}.final_fraction'] = 0.1
  flat.update(kw)
  return mpo_config.replace(mpo_config.MPOConfig(), flat)


def _ail(**kw):
  base = dict(layers=(8,), batch_size=8, discriminator_steps_per_round=2,
              discriminator_steps_per_call=1, generator_steps_per_round=4,
              schedule_horizon=12,
              discriminator_optimizer=discriminator_optimizer(
                  schedule='linear', final_fraction=0.1))
  base.update(kw)
  return AILConfig(**base)


def _windows(rng, k, b, short=False, gamma=0.9):
  rows = []
  for _ in range(k * b):
    m = int(rng.integers(1, N_STEP + 1)) if short else N_STEP
    steps = [(rng.normal(size=DIMS.observation), rng.uniform(-1, 1, 2),
              rng.normal(), float(rng.choice([1.0, 1.0, 0.0])))
             for _ in range(m)]
    rows.append(LAYOUT.pack(steps, rng.normal(size=DIMS.observation), gamma))
  return layouts.to_windows(np.stack(rows), LAYOUT, k, b)


def _expert(rng, t=64):
  f = lambda *s: jnp.asarray(rng.normal(size=(t,) + s), jnp.float32)
  return disc.Transitions(f(DIMS.observation),
                          jnp.clip(f(DIMS.action), -1, 1),
                          f(DIMS.observation), jnp.ones((t,), jnp.float32))


def test_round_plan_is_a_function_of_global_counts():
  plan = learner.RoundPlan(discriminator_steps=2, generator_steps=4)
  d = g = 0
  seen = []
  for _ in range(3 * 6):
    pos = plan.position(d, g)
    seen.append((pos.round, pos.phase[0]))
    if pos.phase == 'discriminator':
      d += 1
    else:
      g += 1
  assert seen == [(r, p) for r in range(3) for p in 'ddgggg']
  assert plan.position(d, g) == learner.Position(3, 'discriminator', 2)
  # Mid-phase positions say how much of the phase is left.
  assert plan.position(7, 9) == learner.Position(2, 'generator', 3)


LR_KEYS = ('learning_rate_policy', 'learning_rate_critic',
           'learning_rate_temperature', 'learning_rate_alpha')


@functools.lru_cache(maxsize=None)
def _updates(mpo, ail):
  """Compiled once per config pair: compiling dominates these tests."""
  return (learner.make_generator_update(mpo, ail),
          learner.make_discriminator_update(mpo, ail))


class _Driver:
  """Drives the learner the way its node does: one call of whichever phase
  the round plan says is next; records the rates each step used."""

  def __init__(self, mpo, ail, seed=0):
    self.mpo, self.ail = mpo, ail
    self.gen, self.dis = _updates(mpo, ail)
    rng = np.random.default_rng(seed)
    self.expert = _expert(rng)
    self.gen_batches = [_windows(rng, mpo.sgd_steps_per_call, 8)
                        for _ in range(40)]
    self.dis_batches = [_windows(rng, ail.discriminator_steps_per_call, 8)
                        for _ in range(40)]
    self.lrs = {'generator': [], 'discriminator': []}

  def call(self, state, phase=None):
    phase = phase or learner.position(self.ail, state).phase
    if phase == 'discriminator':
      i = int(state.discriminator.steps) // self.ail.discriminator_steps_per_call
      state, m = self.dis(state, self.dis_batches[i], self.expert)
      self.lrs['discriminator'] += list(np.asarray(
          m['learning_rate_discriminator']))
    else:
      i = int(state.generator.steps) // self.mpo.sgd_steps_per_call
      state, m = self.gen(state, self.gen_batches[i], self.expert)
      keys = LR_KEYS + (('bc_weight',) if self.ail.bc_weight > 0 else ())
      self.lrs['generator'] += list(zip(*[np.asarray(m[k]) for k in keys]))
    return state


@pytest.mark.parametrize('bc', [{}, dict(bc_weight=0.5, bc_decay_steps=16,
                                              bc_final_weight=0.1)],
                         ids=['no_bc', 'bc'])
def test_schedules_over_rounds_equal_one_run_and_survive_restore(tmp_path,
                                                                 bc):
  # With behaviour cloning its decaying weight is one more schedule.
  mpo, ail = _mpo(), _ail(**bc)
  rounds = 3
  # R rounds of D discriminator and G generator steps...
  a = _Driver(mpo, ail)
  state = learner.init(mpo, ail, DIMS, seed=0)
  while learner.position(ail, state).round < rounds:
    state = a.call(state)
  final_rounds = state
  # ... against one run of R·G generator steps, then R·D discriminator steps.
  b = _Driver(mpo, ail)
  state = learner.init(mpo, ail, DIMS, seed=0)
  for _ in range(rounds * ail.generator_steps_per_round //
                 mpo.sgd_steps_per_call):
    state = b.call(state, 'generator')
  for _ in range(rounds * ail.discriminator_steps_per_round):
    state = b.call(state, 'discriminator')
  assert len(a.lrs['generator']) == rounds * ail.generator_steps_per_round
  assert a.lrs == b.lrs  # exactly, every group
  # The schedules really move: a reset per round would repeat values.
  assert len(set(a.lrs['generator'])) == len(a.lrs['generator'])
  assert len(set(a.lrs['discriminator'])) == len(a.lrs['discriminator'])

  # Save in the middle of a round's generator phase, restore into a fresh
  # state, go on: same rates and the same final state, bit for bit.
  c = _Driver(mpo, ail)
  state = learner.init(mpo, ail, DIMS, seed=0)
  while not (learner.position(ail, state) ==
             learner.Position(1, 'generator', 2)):
    state = c.call(state)
  path = str(tmp_path / 'mid_round.npz')
  learner.save(path, learner.to_numpy(state))
  del state
  state = learner.restore(path, learner.init(mpo, ail, DIMS, seed=123))
  while learner.position(ail, state).round < rounds:
    state = c.call(state)
  assert c.lrs == a.lrs
  for x, y in zip(jax.tree_util.tree_leaves(state),
                  jax.tree_util.tree_leaves(final_rounds)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize('kind, reward', [('gail', 'neg_log_one_minus_d'),
                                          ('airl', 'f'), ('airl', 'logit')])
def test_generator_rewards_are_fresh_for_every_step_of_the_sum(kind, reward):
  mpo, ail = _mpo(), _ail(kind=kind, reward=reward)
  rng = np.random.default_rng(1)
  state = learner.init(mpo, ail, DIMS, seed=0)
  windows = jax.tree_util.tree_map(lambda x: x[0],
                                   _windows(rng, 1, 8, short=True))
  steps = learner.window_steps(windows)
  valid = np.asarray(windows.weights) > 0
  assert valid.sum() > valid.shape[0]  # more than one step per window

  def step_rewards(s):
    d = s.discriminator
    log_pi = learner.policy_log_prob(mpo, s.generator.policy,
                                     steps.observation, steps.action)
    # The soft form: the first step's own -log π is not in its Q-value.
    log_pi = log_pi.at[..., 0].set(0.0)
    return np.asarray(disc.rewards(ail, d.params, d.normalizer, steps,
                                   mpo.discount, log_pi=log_pi))

  def entropy_bonus(s):
    if reward != 'logit':
      return 0.0
    dist = mpo_learner.apply_policy(mpo, s.generator.policy,
                                    windows.observations[..., -1, :])
    return np.asarray(windows.bootstrap) * np.asarray(jnp.sum(
        networks.clipped_gaussian_entropy(dist), axis=-1))

  batch_before, r_before = learner.relabel(mpo, ail, state.discriminator,
                                           windows, state.generator.policy)
  _, dis = _updates(mpo, ail)
  state, _ = dis(state, _windows(rng, 1, 8), _expert(rng))
  batch_after, r_after = learner.relabel(mpo, ail, state.discriminator,
                                         windows, state.generator.policy)
  # Every step inside every n-step sum was recomputed by the new
  # discriminator, and the batch's return is their weighted sum.
  np.testing.assert_allclose(r_after, step_rewards(state), rtol=1e-6)
  assert np.all(np.asarray(r_after)[valid] != np.asarray(r_before)[valid])
  np.testing.assert_allclose(
      batch_after.reward,
      np.sum(np.asarray(windows.weights) * step_rewards(state), axis=-1)
      + entropy_bonus(state), rtol=1e-5, atol=1e-5)
  assert not np.allclose(batch_after.reward, batch_before.reward)
  # The generator step uses exactly these rewards.
  _, m = jax.jit(lambda s, w: learner.generator_step(mpo, ail, s, w, None))(
      state, windows)
  np.testing.assert_allclose(m['learned_reward_mean'],
                             step_rewards(state)[valid].mean(), rtol=1e-5)
  if reward == 'logit':
    # AIRL's logit reward holds -log π of the policy at the moment of use:
    # a changed policy changes every step's reward, the discriminator alone
    # unchanged.
    moved = _scaled_policy(state, 0.7)
    _, r_moved = learner.relabel(mpo, ail, moved.discriminator, windows,
                                 moved.generator.policy)
    np.testing.assert_allclose(r_moved, step_rewards(moved), rtol=1e-5,
                               atol=1e-5)
    later = valid.copy()
    later[..., 0] = False  # the first step's reward is f alone
    assert later.any()
    assert np.all(np.asarray(r_moved)[later] != np.asarray(r_after)[later])
    np.testing.assert_array_equal(np.asarray(r_moved)[..., 0],
                                  np.asarray(r_after)[..., 0])


def _scaled_policy(state, factor):
  policy = jax.tree_util.tree_map(lambda x: x, state.generator.policy)
  policy['mean'] = dict(policy['mean'],
                        b=policy['mean']['b'] + factor)
  return state._replace(generator=state.generator._replace(policy=policy))


@pytest.mark.parametrize('kind, reward', [('gail', 'neg_log_one_minus_d'),
                                          ('airl', 'f')])
def test_airl_discriminator_uses_the_current_policy(kind, reward):
  mpo, ail = _mpo(), _ail(kind=kind, reward=reward, gradient_penalty=0.0)
  rng = np.random.default_rng(2)
  windows = jax.tree_util.tree_map(lambda x: x[0], _windows(rng, 1, 8))
  expert = _expert(rng)
  state = learner.init(mpo, ail, DIMS, seed=0)
  step = jax.jit(lambda s: learner.discriminator_step(mpo, ail, s, windows,
                                                      expert))
  losses = [float(step(_scaled_policy(state, f))[1]['logistic_loss'])
            for f in (0.0, 0.7)]
  if kind == 'airl':
    assert losses[0] != losses[1]
    # ... and exactly through log π: the loss computed by hand with the
    # moved policy's log-probabilities.
    moved = _scaled_policy(state, 0.7)
    _, k_expert = jax.random.split(moved.key)
    idx = jax.random.randint(k_expert, (ail.batch_size,), 0, 64)
    e = jax.tree_util.tree_map(lambda x: x[idx], expert)
    a = learner.first_steps(windows)
    norm = disc.update_normalizer(
        moved.discriminator.normalizer,
        jnp.concatenate([e.observation, a.observation, e.next_observation,
                         a.next_observation]))
    lp = lambda t: learner.policy_log_prob(mpo, moved.generator.policy,
                                           t.observation, t.action)
    params = moved.discriminator.params
    want = disc.logistic_loss(
        disc.logits(ail, params, norm, e, lp(e), mpo.discount),
        disc.logits(ail, params, norm, a, lp(a), mpo.discount))
    assert losses[1] == pytest.approx(float(want), rel=1e-5)
  else:
    assert losses[0] == losses[1]


def test_airl_log_pi_is_that_of_the_policy_the_actors_act_with():
  # mpo.acting_policy='target': the actors act with the target policy, so
  # AIRL's π (discriminator logit and the generator's 'logit' reward) is it.
  mpo = _mpo(acting_policy='target')
  ail = _ail(kind='airl', reward='logit', gradient_penalty=0.0)
  rng = np.random.default_rng(2)
  windows = jax.tree_util.tree_map(lambda x: x[0], _windows(rng, 1, 8))
  expert = _expert(rng)
  state = learner.init(mpo, ail, DIMS, seed=0)
  disc_loss = jax.jit(lambda s: learner.discriminator_step(
      mpo, ail, s, windows, expert)[1]['logistic_loss'])
  reward = jax.jit(lambda s: learner.relabel(
      mpo, ail, s.discriminator, windows,
      mpo_learner.acting_policy(mpo, s.generator))[1])
  online_moved = _scaled_policy(state, 0.7)
  g = state.generator
  target_moved = state._replace(generator=g._replace(
      target_policy=online_moved.generator.policy))
  assert float(disc_loss(online_moved)) == float(disc_loss(state))
  assert float(disc_loss(target_moved)) != float(disc_loss(state))
  np.testing.assert_array_equal(reward(online_moved), reward(state))
  assert not np.array_equal(reward(target_moved), reward(state))
  # The generator step relabels with that same policy.
  step = jax.jit(lambda s: learner.generator_step(mpo, ail, s, windows,
                                                  expert)[1])
  assert float(step(online_moved)['learned_reward_mean']) == float(
      step(state)['learned_reward_mean'])


def test_checkpoint_holds_every_part_of_the_state(tmp_path):
  mpo, ail = _mpo(), _ail()
  d = _Driver(mpo, ail)
  state = learner.init(mpo, ail, DIMS, seed=0)
  for _ in range(4):
    state = d.call(state)
  path = str(tmp_path / 'ckpt.npz')
  learner.save(path, learner.to_numpy(state))
  names = set(np.load(path).files)
  for part in ('generator', 'discriminator', 'normalizer', 'opt_state',
               'policy_opt', 'critic_opt', 'temperature_opt', 'alpha_opt',
               'key', 'horizon'):
    assert any(part in n for n in names), part
  restored = learner.restore(path, learner.init(mpo, ail, DIMS, seed=9))
  for x, y in zip(jax.tree_util.tree_leaves(restored),
                  jax.tree_util.tree_leaves(state)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  other = learner.init(mpo, dataclasses.replace(ail, layers=(4,)), DIMS, 0)
  with pytest.raises(checkpointing.CheckpointError,
                     match=r'discriminator\.params.*expected \(4, 1\)'):
    learner.restore(path, other)


def test_airl_log_pi_uses_the_configured_policy_mean():
  # A mean pushed beyond the box makes interior (expert-like) actions far
  # less likely than edge ones under a linear mean; a tanh mean keeps them
  # within a few nats (MPOConfig.policy_mean).
  linear, squashed = _mpo(), _mpo(policy_mean='tanh')
  policy = learner.init(linear, _ail(kind='airl', reward='f'), DIMS,
                        seed=0).generator.policy
  policy = dict(policy, mean=dict(policy['mean'],
                                  b=jnp.full((DIMS.action,), 3.0)))
  obs = jnp.zeros((4, DIMS.observation))
  interior, edge = jnp.full((4, DIMS.action), 0.3), jnp.ones((4, DIMS.action))
  gap = lambda cfg: np.asarray(
      learner.policy_log_prob(cfg, policy, obs, edge)
      - learner.policy_log_prob(cfg, policy, obs, interior))
  assert np.all(gap(linear) > 20.0)
  assert np.all(gap(squashed) < 10.0)
  dist = mpo_learner.apply_policy(squashed, policy, obs)
  want = jnp.sum(networks.clipped_gaussian_log_prob(dist, interior), axis=-1)
  np.testing.assert_allclose(
      learner.policy_log_prob(squashed, policy, obs, interior), want,
      rtol=1e-6)


@pytest.mark.parametrize('kind, reward', [('airl', 'f'),
                                          ('gail', 'neg_log_one_minus_d')])
def test_behaviour_cloning_pulls_the_mean_towards_expert_actions(kind, reward):
  # One generator step on the same state and batch with and without the BC
  # term: with it, the mean on the drawn expert states moves towards the
  # expert's actions and the step logs the scheduled weight, whichever
  # discriminator rewards the generator. BC adds no gradient to the stddev
  # head (bc.mean_loss), so the stddev moves as without it: a gradient clip
  # may rescale the whole policy gradient, but Adam's first update,
  # g / (|g| + eps) per parameter, does not see scale.
  mpo = _mpo(sgd_steps_per_call=1)
  rng = np.random.default_rng(3)
  expert = _expert(rng)
  windows = jax.tree_util.tree_map(lambda x: x[0], _windows(rng, 1, 8))
  off = _ail(kind=kind, reward=reward)
  on = dataclasses.replace(off, bc_weight=50.0, bc_decay_steps=4)
  state = learner.init(mpo, off, DIMS, seed=0)
  state = state._replace(generator=state.generator._replace(
      steps=jnp.asarray(1, state.generator.steps.dtype)))
  step = lambda ail: jax.jit(
      lambda s: learner.generator_step(mpo, ail, s, windows, expert))(state)
  (s_off, m_off), (s_on, m_on) = step(off), step(on)
  assert 'bc_weight' not in m_off
  assert float(m_on['bc_weight']) == pytest.approx(50.0 * 0.75)
  # The batch the BC term drew, scored with the stddev it held.
  _, drawn = learner.draw_expert(state, expert, 8)
  held = mpo_learner.apply_policy(mpo, state.generator.policy,
                                  drawn.observation).stddev
  gap = lambda s: float(bc.mean_loss(networks.GaussianParams(
      mpo_learner.apply_policy(mpo, s.generator.policy,
                               drawn.observation).mean, held), drawn.action))
  assert gap(s_on) < gap(state) and gap(s_on) < gap(s_off)
  np.testing.assert_allclose(s_on.generator.policy['stddev']['w'],
                             s_off.generator.policy['stddev']['w'],
                             rtol=1e-5, atol=1e-7)
  # Only the BC draw spends the expert key here.
  assert not np.array_equal(s_on.key, s_off.key)
  np.testing.assert_array_equal(s_off.key, state.key)


def test_discriminator_rows_show_how_often_each_side_terminates():
  # No absorbing states (DAC): these fractions are how a user sees the
  # survival bias a fixed-sign reward brings to a terminating task.
  mpo, ail = _mpo(), _ail(gradient_penalty=0.0)
  rng = np.random.default_rng(3)
  windows = jax.tree_util.tree_map(lambda x: x[0], _windows(rng, 1, 8))
  expert = _expert(rng)._replace(
      discount=jnp.asarray(np.arange(64) % 4 != 0, jnp.float32))
  state = learner.init(mpo, ail, DIMS, seed=0)
  _, metrics = learner.discriminator_step(mpo, ail, state, windows, expert)
  first = np.asarray(windows.discounts)[:, 0]
  assert 0 < (first == 0).sum() < 8  # both kinds in the agent batch
  assert float(metrics['agent_terminal_fraction']) == pytest.approx(
      np.mean(first == 0))
  _, k_expert = jax.random.split(state.key)
  idx = jax.random.randint(k_expert, (ail.batch_size,), 0, 64)
  want = np.mean(np.asarray(idx) % 4 == 0)
  assert 0 < want < 1
  assert float(metrics['expert_terminal_fraction']) == pytest.approx(want)


@pytest.mark.parametrize('terminal', [False, True])
def test_relabelled_batches_bootstrap_with_gamma_m_times_the_env_discounts(
    terminal):
  # The generator's TD target is reward + discount · Q(s_m, ·): discount
  # γ^m ∏ d_k over the m steps actually taken (short windows at an
  # episode's end), s_m the window's last observation, s_0 and a_0 its
  # first. That the windows' bootstrap is NStepAdder's discount after
  # to_batch (the MPO path) is tests/replay/test_replay.py's.
  mpo, ail = _mpo(), _ail()
  state = learner.init(mpo, ail, DIMS, seed=0)
  rng = np.random.default_rng(3)
  rows, expected = [], []
  for m in range(1, N_STEP + 1):
    steps = [(rng.normal(size=DIMS.observation), rng.uniform(-1, 1, 2),
              rng.normal(), 0.0 if terminal and k == m - 1 else 1.0)
             for k in range(m)]
    final = rng.normal(size=DIMS.observation)
    rows.append(LAYOUT.pack(steps, final, mpo.discount))
    expected.append((steps[0][0], steps[0][1], final,
                     mpo.discount ** m * float(np.prod([s[3] for s in steps]))))
  windows = jax.tree_util.tree_map(
      lambda x: x[0], layouts.to_windows(np.stack(rows), LAYOUT, 1, N_STEP))
  batch, _ = learner.relabel(mpo, ail, state.discriminator, windows,
                             state.generator.policy)
  obs, act, nxt, disc_ = (np.array(x, np.float32) for x in zip(*expected))
  np.testing.assert_allclose(batch.discount, disc_, rtol=1e-6)
  if not terminal:
    assert np.all(np.asarray(batch.discount) > 0)
  np.testing.assert_allclose(batch.observation, obs, rtol=1e-6)
  np.testing.assert_allclose(batch.action, act, rtol=1e-6)
  np.testing.assert_allclose(batch.next_observation, nxt, rtol=1e-6)


def test_airl_logit_reward_has_soft_actor_critics_form_on_a_hand_window():
  """One window of m = 2 real steps out of n = 3, every term by hand:
  Q target = f_0 + γ d_0 (f_1 - log π(a_1|s_1)) + γ² d_0 d_1 (V + H(s_2))."""
  mpo, ail = _mpo(), _ail(kind='airl', reward='logit')
  state = learner.init(mpo, ail, DIMS, seed=0)
  o = DIMS.observation
  rng = np.random.default_rng(5)
  obs = rng.standard_normal((4, o)).astype(np.float32)
  obs[3] = obs[2]  # past m the observations repeat o_m
  actions = np.array([[0.2] * DIMS.action, [-0.4] * DIMS.action,
                      [0.0] * DIMS.action], np.float32)
  gamma = mpo.discount
  from tandem.agents.core.batches import Windows
  window = Windows(
      observations=jnp.asarray(obs), actions=jnp.asarray(actions),
      discounts=jnp.array([1.0, 1.0, 0.0]),
      weights=jnp.array([1.0, gamma, 0.0]),
      bootstrap=jnp.float32(gamma ** 2), rewards=jnp.zeros(3))
  batch, r = learner.relabel(mpo, ail, state.discriminator, window,
                             state.generator.policy)
  d = state.discriminator
  policy = state.generator.policy

  def f(k):
    t = disc.Transitions(obs[k][None], actions[k][None], obs[k + 1][None],
                         jnp.ones(1))
    return float(disc.score(ail, d.params, d.normalizer, t, gamma)[0])

  log_pi_1 = float(learner.policy_log_prob(mpo, policy, obs[1][None],
                                           actions[1][None])[0])
  # The entropy of the acting (clipped) policy at s_2, by Monte Carlo.
  dist = mpo_learner.apply_policy(mpo, policy, obs[2][None])
  samples = np.clip(np.asarray(dist.mean) + np.asarray(dist.stddev) *
                    rng.standard_normal((200_000, DIMS.action)), -1, 1)
  entropy_2 = -float(np.mean(np.asarray(learner.policy_log_prob(
      mpo, policy, np.repeat(obs[2][None], len(samples), 0),
      samples.astype(np.float32)))))
  want = f(0) + gamma * (f(1) - log_pi_1) + gamma ** 2 * entropy_2
  assert float(batch.reward) == pytest.approx(want, rel=2e-3, abs=2e-3)
  # The step rewards: f_0 alone, then f_1 - log π(a_1|s_1).
  assert float(r[0]) == pytest.approx(f(0), rel=1e-5, abs=1e-5)
  assert float(r[1]) == pytest.approx(f(1) - log_pi_1, rel=1e-5, abs=1e-5)
  # 'f' has none of the entropy terms.
  ail_f = _ail(kind='airl', reward='f')
  batch_f, _ = learner.relabel(mpo, ail_f, state.discriminator, window,
                               policy)
  assert float(batch_f.reward) == pytest.approx(f(0) + gamma * f(1),
                                                rel=1e-5, abs=1e-5)


@pytest.mark.parametrize('terminal', [False, True])
def test_absorbing_states_add_the_absorbing_value_after_a_terminal_step(
    terminal):
  """One window of m = 2 real steps out of n = 3, by hand. A hand GAIL net
  on s alone reads only the indicator: r = b in every ordinary state, r_abs
  = b + tanh(1) (nearly) in the absorbing one. Ending in a terminal state,
  Q target = b + γ b + γ² r_abs / (1 - γ), bootstrap 0; not ending there,
  b + γ b + γ² V(s_2), nothing added."""
  from tests.ail.test_discriminator import _hand_mlp, _hand_value
  mpo = _mpo()
  ail = _ail(kind='gail', reward='logit', input='state', layers=(2,),
             normalize_inputs=False, absorbing_states='on')
  state = learner.init(mpo, ail, DIMS, seed=0)
  w, b = [0.0] * DIMS.observation + [2.0], -0.3
  d_state = state.discriminator._replace(params={'d': _hand_mlp(w, b)})
  r_abs = _hand_value([0.0] * DIMS.observation + [1.0], w, b)
  assert r_abs == pytest.approx(b + np.tanh(1.0), rel=1e-4)
  gamma = mpo.discount
  rng = np.random.default_rng(5)
  obs = rng.standard_normal((4, DIMS.observation)).astype(np.float32)
  obs[3] = obs[2]
  from tandem.agents.core.batches import Windows
  d1 = 0.0 if terminal else 1.0
  window = Windows(
      observations=jnp.asarray(obs), actions=jnp.zeros((3, DIMS.action)),
      discounts=jnp.array([1.0, d1, 0.0]),
      weights=jnp.array([1.0, gamma, 0.0]),
      bootstrap=jnp.float32(gamma ** 2 * d1), rewards=jnp.zeros(3))
  batch, r = learner.relabel(mpo, ail, d_state, window)
  np.testing.assert_allclose(np.asarray(r)[:2], [b, b], rtol=1e-5)
  tail = gamma ** 2 * r_abs / (1 - gamma) if terminal else 0.0
  assert float(batch.reward) == pytest.approx(b + gamma * b + tail, rel=1e-5)
  assert float(batch.discount) == pytest.approx(gamma ** 2 * d1)
  # Off, a terminal window's return stops at its last step.
  off = dataclasses.replace(ail, absorbing_states='off')
  d_off = d_state._replace(params={'d': _hand_mlp(w[:-1], b)})
  batch_off, _ = learner.relabel(mpo, off, d_off, window)
  assert float(batch_off.reward) == pytest.approx(b + gamma * b, rel=1e-5)


def test_absorbing_states_apply_to_a_whole_batch_of_windows_in_graph():
  # Random short windows, some terminal: the tail is γ^m V_abs exactly on
  # the windows whose last real step is terminal.
  mpo = _mpo()
  ail = _ail(absorbing_states='on')
  state = learner.init(mpo, ail, DIMS, seed=0)
  windows = jax.tree_util.tree_map(
      lambda x: x[0], _windows(np.random.default_rng(2), 1, 16, short=True,
                               gamma=mpo.discount))
  on, _ = jax.jit(lambda d, w: learner.relabel(mpo, ail, d, w))(
      state.discriminator, windows)
  off_cfg = dataclasses.replace(ail, absorbing_states='off')
  # The same network with the indicator column's weights dropped: ordinary
  # states score alike, so the returns differ by the tail alone.
  p = jax.tree_util.tree_map(lambda x: x, state.discriminator.params)
  w0 = p['d']['torso']['dense'][0]['w']
  o, a = DIMS.observation, DIMS.action
  p['d']['torso']['dense'][0]['w'] = jnp.concatenate([w0[:o], w0[o + 1:]])
  assert p['d']['torso']['dense'][0]['w'].shape[0] == o + a
  off, _ = learner.relabel(mpo, off_cfg,
                           state.discriminator._replace(params=p), windows)
  weights = np.asarray(windows.weights)
  discounts = np.asarray(windows.discounts)
  m = (weights > 0).sum(-1)
  ended = discounts[np.arange(16), m - 1] == 0
  assert 0 < ended.sum() < 16
  v_abs = float(disc.absorbing_reward(ail, state.discriminator.params,
                                      o, a, mpo.discount)) / (1 - mpo.discount)
  want = np.where(ended, mpo.discount ** m * v_abs, 0.0)
  np.testing.assert_allclose(np.asarray(on.reward) - np.asarray(off.reward),
                             want, rtol=1e-4, atol=1e-5)
