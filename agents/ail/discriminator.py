"""The adversarial-imitation discriminator: GAIL and AIRL, as pure functions.

Papers:
  Ho & Ermon 2016, "Generative Adversarial Imitation Learning" (GAIL).
  Fu et al. 2018, "Learning Robust Rewards with Adversarial Inverse
    Reinforcement Learning" (AIRL; Eq. 3 for D, Sec. 5 for the state-only
    reward g and the shaping term h).
  Gulrajani et al. 2017, "Improved Training of Wasserstein GANs" (the
    gradient penalty), as used for imitation in Kostrikov et al. 2019,
    "Discriminator-Actor-Critic" (DAC, Sec. 4.2).

Convention: D = σ(logit) is the probability that a transition is the
expert's, and the discriminator minimises the logistic loss
  L = mean_expert softplus(-logit) + mean_agent softplus(logit)
    = -E_expert log D - E_agent log(1 - D).

Notation: leading dims [...] (usually [B]); O observation and D action
dimensions. Imports nothing from TensorFlow, Reverb or Launchpad.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from tandem.agents.ail.config import AILConfig
from tandem.agents.core import fields
from tandem.agents.core import optimizers
from tandem.agents.core import schedules
from tandem.agents.core import trees
from tandem.agents.mpo import networks


class Transitions(NamedTuple):
  """One batch of transitions; leading dims [...] (usually [B])."""
  observation: jax.Array       # [..., O]
  action: jax.Array            # [..., D]
  next_observation: jax.Array  # [..., O]
  # Environment discount: 1 mid-episode, 0 at a terminal state (AIRL's
  # 1 - done). Not γ: that is passed separately.
  discount: jax.Array          # [...]


# ---------------------------------------------------------------------------
# Observation normalisation.


class Normalizer(NamedTuple):
  """Running statistics of observations (s and s' both feed it)."""
  count: jax.Array  # [] float32
  mean: jax.Array   # [O]
  var: jax.Array    # [O] population variance


def init_normalizer(observation_dim: int) -> Normalizer:
  # mean 0 / var 1 makes `normalize` (nearly) the identity before any data.
  return Normalizer(jnp.float32(0.0),
                    jnp.zeros((observation_dim,), jnp.float32),
                    jnp.ones((observation_dim,), jnp.float32))


def update_normalizer(n: Normalizer, x: jax.Array) -> Normalizer:
  """Merges the statistics of x [..., O] into n.

  Chan, Golub & LeVeque's pairwise merge of (count, mean, M2) is exact, so
  updating with A then B equals updating with concat(A, B): no batch is
  weighted more than its size says, however the stream is split. The
  initial var of 1 carries no weight, since it enters as M2 = var · 0.
  """
  x = jnp.asarray(x, jnp.float32).reshape(-1, n.mean.shape[-1])
  if x.shape[0] == 0:
    return n
  n_b = jnp.float32(x.shape[0])
  mean_b = jnp.mean(x, axis=0)
  var_b = jnp.var(x, axis=0)
  count = n.count + n_b
  delta = mean_b - n.mean
  mean = n.mean + delta * (n_b / count)
  m2 = n.var * n.count + var_b * n_b + jnp.square(delta) * (n.count * n_b /
                                                            count)
  return Normalizer(count, mean, m2 / count)


def normalize(n: Normalizer, x: jax.Array, clip: float) -> jax.Array:
  """(x - mean) / sqrt(var + 1e-8), clipped to ±clip; x [..., O]."""
  z = (x - n.mean) * jax.lax.rsqrt(n.var + 1e-8)
  return jnp.clip(z, -clip, clip)


def _norm_obs(cfg: AILConfig, n: Normalizer, x: jax.Array) -> jax.Array:
  # With normalisation off, observations go in untouched: clipping raw
  # observations to ±normalizer_clip would silently lose information.
  if not cfg.normalize_inputs:
    return x
  return normalize(n, x, cfg.normalizer_clip)


# ---------------------------------------------------------------------------
# Networks.


def _mlp_init(key, n_in: int, layers) -> dict:
  k1, k2 = jax.random.split(key)
  return {'torso': networks.init_torso(k1, n_in, layers),
          'head': networks.dense_init(k2, layers[-1], 1)}


def _mlp(p: dict, x: jax.Array) -> jax.Array:
  """x [..., n_in] -> [...]."""
  h = networks.apply_torso(p['torso'], x)
  return networks.dense(p['head'], h)[..., 0]


def init_params(key, cfg: AILConfig, observation_dim: int,
                action_dim: int) -> dict:
  """GAIL: {'d'}; AIRL: {'g', 'h'}; each an MLP {'torso', 'head'}. With
  absorbing states every state input has one more column (`_inputs`)."""
  o, a = observation_dim + int(cfg.absorbing), action_dim
  if cfg.kind == 'gail':
    n_in = {'state_action': o + a, 'state_next_state': 2 * o,
            'state': o}[cfg.input]
    return {'d': _mlp_init(key, n_in, cfg.layers)}
  kg, kh = jax.random.split(key)
  n_g = o + a if cfg.input == 'state_action' else o
  return {'g': _mlp_init(kg, n_g, cfg.layers),
          'h': _mlp_init(kh, o, cfg.layers)}


def _g_airl(cfg: AILConfig, params: dict, s: jax.Array,
            a: jax.Array) -> jax.Array:
  # 'state_next_state' and 'state' give AIRL's state-only reward g(s) (Fu et
  # al. Sec. 5): the one that is disentangled from the dynamics.
  x = jnp.concatenate([s, a], -1) if cfg.input == 'state_action' else s
  return _mlp(params['g'], x)


def _score_normalized(cfg: AILConfig, params: dict, s: jax.Array,
                      a: jax.Array, s_next: jax.Array, discount: jax.Array,
                      gamma: float) -> jax.Array:
  """`score` on already normalised observations; s, s_next [..., O]."""
  if cfg.kind == 'gail':
    if cfg.input == 'state':
      return _mlp(params['d'], s)
    second = a if cfg.input == 'state_action' else s_next
    return _mlp(params['d'], jnp.concatenate([s, second], -1))
  # f = g + γ h(s') - h(s) (Fu et al. Eq. 4); a terminal s' has no future, so
  # the env discount drops h(s') there instead of bootstrapping a value.
  h = _mlp(params['h'], s)
  h_next = _mlp(params['h'], s_next)
  return _g_airl(cfg, params, s, a) + gamma * discount * h_next - h


# ---------------------------------------------------------------------------
# Absorbing states (DAC, Kostrikov et al. 2019, Sec. 4.2).


def _absorbing_state(like: jax.Array) -> jax.Array:
  """The absorbing state as the networks see it: [..., O] -> [..., O + 1],
  zeros (the mean state, where inputs are normalised) with the indicator 1."""
  return jnp.concatenate([jnp.zeros_like(like),
                          jnp.ones_like(like[..., :1])], -1)


def _ordinary_state(s: jax.Array) -> jax.Array:
  """[..., O] -> [..., O + 1]: the indicator column, 0."""
  return jnp.concatenate([s, jnp.zeros_like(s[..., :1])], -1)


def _inputs(cfg: AILConfig, norm: Normalizer, t: Transitions):
  """(s, a, s', discount) as the networks take them.

  Observations are normalised. With absorbing states each state gets an
  indicator column (0), a terminal transition's s' becomes the absorbing
  state (indicator 1), and its future counts (discount 1): after a terminal
  step the episode stays in the absorbing state for ever, with a reward of
  its own that the discriminator learns. Without them a terminal s' has no
  future (AIRL's h(s') is dropped there).
  """
  s = _norm_obs(cfg, norm, t.observation)
  s_next = _norm_obs(cfg, norm, t.next_observation)
  if not cfg.absorbing:
    return s, t.action, s_next, t.discount
  terminal = (t.discount == 0)[..., None]
  s_next = jnp.where(terminal, _absorbing_state(s_next),
                     _ordinary_state(s_next))
  return _ordinary_state(s), t.action, s_next, jnp.ones_like(t.discount)


def absorbing_score(cfg: AILConfig, params: dict, observation_dim: int,
                    action_dim: int, gamma: float) -> jax.Array:
  """The score of the absorbing state's own transition (absorbing, zero
  action, absorbing), a scalar. The agent does not act there, so the action
  is the same fixed zeros for expert and agent, and AIRL's log π there is 0
  (the one action has all the mass): its logit is f alone."""
  s = _absorbing_state(jnp.zeros((observation_dim,), jnp.float32))
  return _score_normalized(cfg, params, s,
                           jnp.zeros((action_dim,), jnp.float32), s,
                           jnp.float32(1.0), gamma)


def absorbing_reward(cfg: AILConfig, params: dict, observation_dim: int,
                     action_dim: int, gamma: float) -> jax.Array:
  """The generator's reward for each step in the absorbing state, a scalar:
  `rewards` of its transition, with log π = 0 (see `absorbing_score`)."""
  if cfg.kind == 'airl' and cfg.reward == 'g':
    s = _absorbing_state(jnp.zeros((observation_dim,), jnp.float32))
    return _g_airl(cfg, params, s, jnp.zeros((action_dim,), jnp.float32))
  z = absorbing_score(cfg, params, observation_dim, action_dim, gamma)
  return _gail_reward(cfg, z) if cfg.kind == 'gail' else z


def score(cfg: AILConfig, params: dict, norm: Normalizer, t: Transitions,
          gamma: float) -> jax.Array:
  """The learned part of the logit, [...].

  GAIL: D's logit. AIRL: f(s,a,s') = g(·) + γ · discount · h(s') - h(s).
  """
  return _score_normalized(cfg, params, *_inputs(cfg, norm, t), gamma)


def logits(cfg: AILConfig, params: dict, norm: Normalizer, t: Transitions,
           log_pi: jax.Array, gamma: float) -> jax.Array:
  """logit(D) = log D - log(1 - D), [...].

  GAIL: the score (log_pi ignored). AIRL: D = exp f / (exp f + π(a|s))
  (Fu et al. Eq. 3), so logit = f - log π(a|s); log_pi [...] is under the
  current policy, and is data to the discriminator, not something it trains.
  """
  f = score(cfg, params, norm, t, gamma)
  if cfg.kind == 'gail':
    return f
  return f - jax.lax.stop_gradient(log_pi)


def needs_log_pi(cfg: AILConfig) -> bool:
  """Whether `rewards` needs the generator's log π (AIRL's 'logit')."""
  return cfg.kind == 'airl' and cfg.reward == 'logit'


def rewards(cfg: AILConfig, params: dict, norm: Normalizer, t: Transitions,
            gamma: float, log_pi: jax.Array | None = None) -> jax.Array:
  """The generator's reward, [...].

  GAIL, with z the logit: neg_log_one_minus_d = -log(1 - D) = softplus(z);
  log_d = log D = -softplus(-z); logit = z. AIRL: f, g alone, or
  logit = log D - log(1 - D) = f - log π(a|s), the reward of Fu et al.
  2018 (Sec. 4); log_pi [...] is then the current policy's (required), and
  its -log π an entropy bonus on the agent's own actions. The MPO generator
  takes it in the critic's soft form only (ail/learner.py, soft_terms): its
  policy update adds no entropy of the state it improves, so it does not
  solve the entropy-regularised problem exactly.
  """
  if cfg.kind == 'gail':
    return _gail_reward(cfg, score(cfg, params, norm, t, gamma))
  if cfg.reward == 'f':
    return score(cfg, params, norm, t, gamma)
  if cfg.reward == 'logit':
    if log_pi is None:
      raise ValueError("AIRL's reward 'logit' needs the policy's log_pi")
    return score(cfg, params, norm, t, gamma) - log_pi
  s, a, _, _ = _inputs(cfg, norm, t)
  return _g_airl(cfg, params, s, a)


def _gail_reward(cfg: AILConfig, z: jax.Array) -> jax.Array:
  """GAIL's reward from D's logit z, [...] -> [...]."""
  if cfg.reward == 'neg_log_one_minus_d':
    return jax.nn.softplus(z)
  if cfg.reward == 'log_d':
    return -jax.nn.softplus(-z)
  return z


# ---------------------------------------------------------------------------
# Losses.


def logistic_loss(expert_logits: jax.Array, agent_logits: jax.Array,
                  expert_weights: jax.Array | None = None,
                  agent_weights: jax.Array | None = None) -> jax.Array:
  """mean softplus(-z_expert) + mean softplus(z_agent); a scalar.

  softplus keeps it finite for any logit, where log σ(z) underflows. With
  weights [N] (≥ 0, not all 0) each side's mean is weighted: Σ w l / Σ w.
  """
  def mean(x, w):
    return jnp.mean(x) if w is None else jnp.sum(w * x) / jnp.sum(w)
  return (mean(jax.nn.softplus(-expert_logits), expert_weights) +
          mean(jax.nn.softplus(agent_logits), agent_weights))


def with_absorbing_rows(logits_: jax.Array, t: Transitions,
                        z_absorbing: jax.Array):
  """A batch's logits [B] with one absorbing row per terminal transition:
  (logits [2B], weights [2B]); row B + i is the absorbing state's own
  transition, weight 1 where transition i is terminal, else 0.

  DAC's replay holds one (absorbing, ·, absorbing) transition per episode
  that ended in a terminal state; a uniform batch then holds as many of
  them, in expectation, as terminal transitions. The weights keep the
  batch's shape fixed where a variable count of extra rows would not.
  """
  terminal = (t.discount == 0).astype(logits_.dtype)
  return (jnp.concatenate([logits_, jnp.broadcast_to(z_absorbing,
                                                     logits_.shape)]),
          jnp.concatenate([jnp.ones_like(terminal), terminal]))


def gradient_penalty(fn, x_expert: jax.Array, x_agent: jax.Array,
                     key, target: float = 1.0,
                     at: str = 'interpolates') -> jax.Array:
  """mean_b (‖∇_x fn(x̂)_b‖₂ - target)², x̂ = u x_expert + (1 - u) x_agent.

  Gulrajani et al. 2017, Eq. 3 (target 1); target 0 is the zero-centred
  form. u = jax.random.uniform(key, [B, 1]) at 'interpolates'; u = 1 at
  'expert', where target 0 is Mescheder et al. 2018's R1 (their γ/2 is the
  caller's weight). fn: [B, X] -> [B] with rows independent, so the
  gradient of the sum is each row's own gradient. x_expert, x_agent:
  [B, X]; returns a scalar.
  """
  if at == 'expert':
    x_hat = x_expert
  else:
    u = jax.random.uniform(key, (x_expert.shape[0], 1), x_expert.dtype)
    x_hat = u * x_expert + (1.0 - u) * x_agent
  g = jax.grad(lambda x: jnp.sum(fn(x)))(x_hat)
  # The epsilon keeps the norm's own gradient finite where ∇fn = 0 (e.g. a
  # zero-initialised head), since the loss differentiates through it.
  norm = jnp.sqrt(jnp.sum(jnp.square(g), axis=-1) + 1e-12)
  return jnp.mean(jnp.square(norm - target))


def _flat_inputs(cfg: AILConfig, norm: Normalizer,
                 t: Transitions) -> tuple[jax.Array, jax.Array]:
  """concat(s, a, s') and the discount as `_inputs` gives them: [..., 2O' +
  D] -> [N, 2O' + D] and [...] -> [N], O' = O (+ 1 with absorbing
  states)."""
  s, a, s_next, d = _inputs(cfg, norm, t)
  x = jnp.concatenate([s, a, s_next], -1)
  return x.reshape(-1, x.shape[-1]), d.reshape(-1)


def _split_inputs(x: jax.Array, observation_dim: int, action_dim: int):
  """Inverse of `_flat_inputs`: [N, 2O' + D] -> (s [N, O'], a [N, D], s'),
  observation_dim being O'."""
  o, a = observation_dim, action_dim
  return x[..., :o], x[..., o:o + a], x[..., o + a:]


# ---------------------------------------------------------------------------
# Training state and one step.


class DiscriminatorState(NamedTuple):
  params: dict
  opt_state: optax.OptState
  normalizer: Normalizer
  key: jax.Array        # uint32[2], for the penalty's interpolation
  steps: jax.Array      # int32: global discriminator steps
  skipped: jax.Array    # int32: steps skipped for non-finite values
  horizon: jax.Array    # int32: discriminator steps its schedule runs over


def _optimizer(cfg: AILConfig) -> optax.GradientTransformation:
  return optimizers.make(cfg.discriminator_optimizer.name,
                         cfg.discriminator_optimizer.learning_rate)


def init(cfg: AILConfig, observation_dim: int, action_dim: int,
         seed: int) -> DiscriminatorState:
  key, kp = jax.random.split(jax.random.PRNGKey(seed))
  params = init_params(kp, cfg, observation_dim, action_dim)
  return DiscriminatorState(
      params=params, opt_state=_optimizer(cfg).init(params),
      normalizer=init_normalizer(observation_dim), key=key,
      steps=jnp.int32(0), skipped=jnp.int32(0),
      horizon=jnp.int32(fields.fixed_horizon(cfg)))


def update(cfg: AILConfig, state: DiscriminatorState, expert: Transitions,
           agent: Transitions, log_pi_expert: jax.Array,
           log_pi_agent: jax.Array,
           gamma: float) -> tuple[DiscriminatorState, dict]:
  """One discriminator step; pure, so the caller jits or scans it.

  expert, agent: Transitions with the same leading dims (the penalty pairs
  their rows); log_pi_*: [...] log π(a|s) under the current policy (AIRL
  only; GAIL ignores them). Skips the step, keeping params, optimizer and
  normalizer, if the loss, gradients or new params are non-finite.
  """
  obs_dim = expert.observation.shape[-1]
  act_dim = expert.action.shape[-1]
  in_dim = obs_dim + int(cfg.absorbing)  # a state as the networks see it

  # 1. Normalise with statistics that include this batch, so a shift in the
  # agent's state distribution is seen by the step it arrives in.
  normalizer = state.normalizer
  if cfg.normalize_inputs:
    normalizer = update_normalizer(normalizer, jnp.concatenate([
        x.reshape(-1, obs_dim) for x in
        (expert.observation, expert.next_observation,
         agent.observation, agent.next_observation)], 0))

  key = state.key
  use_penalty = cfg.gradient_penalty > 0
  if use_penalty:
    key, key_penalty = jax.random.split(key)
    x_expert, d_expert = _flat_inputs(cfg, normalizer, expert)
    x_agent, _ = _flat_inputs(cfg, normalizer, agent)
    d_penalty = (d_expert if cfg.gradient_penalty_at == 'expert'
                 else jnp.ones_like(d_expert))

  # 2. Loss.
  def loss_fn(params):
    z_e = logits(cfg, params, normalizer, expert, log_pi_expert, gamma)
    z_a = logits(cfg, params, normalizer, agent, log_pi_agent, gamma)
    if cfg.absorbing:
      z_abs = absorbing_score(cfg, params, obs_dim, act_dim, gamma)
      z_e_all, w_e = with_absorbing_rows(z_e, expert, z_abs)
      z_a_all, w_a = with_absorbing_rows(z_a, agent, z_abs)
      ll = logistic_loss(z_e_all, z_a_all, w_e, w_a)
    else:
      z_abs = jnp.float32(0.0)
      ll = logistic_loss(z_e, z_a)
    if use_penalty:
      # On the score (or AIRL's g alone), not the logit: the penalty
      # regularises the discriminator's parameters, and log π has none
      # (Acme differentiates the whole logit, log π's input gradient
      # included). Interpolated pairs of unrelated transitions have no
      # terminal flag of their own, so on the whole score h(s') always
      # counts (d = 1), which keeps h smooth at every s' the penalty visits;
      # at the expert's inputs each row keeps its own, as it is scored.
      def fn(x):
        s, a, s_next = _split_inputs(x, in_dim, act_dim)
        if cfg.gradient_penalty_on == 'g':
          return _g_airl(cfg, params, s, a)
        return _score_normalized(cfg, params, s, a, s_next, d_penalty, gamma)
      gp = gradient_penalty(fn, x_expert, x_agent, key_penalty,
                            cfg.gradient_penalty_target,
                            cfg.gradient_penalty_at)
    else:
      gp = jnp.float32(0.0)
    total = ll + cfg.gradient_penalty * gp
    return total, (ll, gp, z_e, z_a, z_abs)

  (loss, (ll, gp, z_e, z_a, z_abs)), grads = jax.value_and_grad(
      loss_fn, has_aux=True)(state.params)

  # 3. Learning rate from the global step count, never the optimizer's.
  lr = schedules.from_config(cfg.discriminator_optimizer, state.steps,
                             state.horizon)
  opt_state = optimizers.with_learning_rate(state.opt_state, lr)
  upd, opt_state = _optimizer(cfg).update(grads, opt_state, state.params)
  params = optax.apply_updates(state.params, upd)

  # 4. Guard.
  finite = trees.all_finite((loss, grads, params, normalizer))
  params, opt_state, normalizer = trees.select(
      finite, (params, opt_state, normalizer),
      (state.params, state.opt_state, state.normalizer))
  steps = state.steps + 1
  new_state = DiscriminatorState(
      params=params, opt_state=opt_state, normalizer=normalizer, key=key,
      steps=steps,
      skipped=state.skipped + jnp.where(finite, 0, 1).astype(jnp.int32),
      horizon=state.horizon)

  metrics = {
      'discriminator_loss': loss,
      'logistic_loss': ll,
      'gradient_penalty': gp,
      'expert_accuracy': jnp.mean((z_e > 0).astype(jnp.float32)),
      'agent_accuracy': jnp.mean((z_a < 0).astype(jnp.float32)),
      'd_expert': jnp.mean(jax.nn.sigmoid(z_e)),
      'd_agent': jnp.mean(jax.nn.sigmoid(z_a)),
      'learning_rate_discriminator': lr,
      'discriminator_steps': steps,
      'discriminator_finite': finite,
  }
  if cfg.absorbing:
    metrics['d_absorbing'] = jax.nn.sigmoid(z_abs)
  return new_state, metrics
