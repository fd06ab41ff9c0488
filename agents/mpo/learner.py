"""The MPO learner: state, one jitted update of K SGD steps, checkpoints.

Imports nothing from TensorFlow, Reverb or Launchpad, so it runs (and is
benchmarked) on any machine with jax and optax.

One SGD step (Abdolmaleki et al. 2018a, b):
  1. Sample N actions per state from the target policy at s' (bootstrap) and,
     unless `estep_states` is 'next', at s (E-step), with separate PRNG keys;
     evaluate the target critic (on actions clipped to the box). A mixture
     critic (`critic_type='mog'`) also gives return samples at s' for its
     distributional target; its mean is Q everywhere else.
  2. Update the temperatures on those fixed Q-values (duals.py).
  3. Weight the samples with η before or after that update (config).
  4. Gradient step on critic (n-step TD) and policy (weighted ML + KL terms),
     gradients clipped per network or jointly (`grad_clip_mode`).
  5. Update the alphas on this batch's KLs.
  6. Skip everything if anything is non-finite; update the target networks.
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tandem.agents.core import checkpointing
from tandem.agents.core.batches import Batch  # re-exported: learner.Batch
from tandem.agents.core import fields
from tandem.agents.core import optimizers
from tandem.agents.core import schedules
from tandem.agents.core.specs import Dims  # re-exported: learner.Dims
from tandem.agents.core import trees
from tandem.agents.mpo import duals as duals_lib
from tandem.agents.mpo import losses
from tandem.agents.mpo import networks
from tandem.agents.mpo.config import MPOConfig


class LearnerState(NamedTuple):
  policy: dict
  critic: dict
  target_policy: dict
  target_critic: dict
  duals: duals_lib.DualState
  policy_opt: optax.OptState
  critic_opt: optax.OptState
  key: jax.Array        # uint32[2]
  steps: jax.Array      # int32: global learner steps (batches consumed)
  skipped: jax.Array    # int32: steps skipped for non-finite values
  horizon: jax.Array    # int32: learner steps over which schedules run


def _own_clip(cfg: MPOConfig) -> Optional[float]:
  # Per network, each optimizer clips its own gradient; jointly, sgd_step
  # clips both before the optimizers (clip_jointly), which then must not.
  return cfg.max_grad_norm if cfg.grad_clip_mode == 'per_network' else None


def policy_optimizer(cfg: MPOConfig):
  """The policy's optax optimizer, clipping its own gradient unless the
  step clips both networks jointly."""
  return optimizers.make(cfg.policy_optimizer.name,
                         cfg.policy_optimizer.learning_rate, _own_clip(cfg))


def critic_optimizer(cfg: MPOConfig):
  """The critic's optax optimizer, clipped as policy_optimizer's."""
  return optimizers.make(cfg.critic_optimizer.name,
                         cfg.critic_optimizer.learning_rate, _own_clip(cfg))


def clip_jointly(grads, max_norm: float):
  """Scales every leaf of `grads` (e.g. (g_policy, g_critic)) by one factor
  min(1, max_norm / global norm of all leaves together), exactly as optax's
  clip_by_global_norm does for one tree."""
  clipped, _ = optax.clip_by_global_norm(max_norm).update(
      grads, optax.EmptyState())
  return clipped


def kl_bounds(cfg: MPOConfig, action_dim: int) -> tuple[float, float]:
  """(ε_mean, ε_stddev) that each alpha enforces on its KL: the configured
  bounds divided by the action dimension when per-dimension constraining
  (the configured values budget the whole action; see MPOConfig)."""
  share = action_dim if cfg.per_dim_constraining else 1
  return cfg.epsilon_mean / share, cfg.epsilon_stddev / share


def acting_policy(cfg: MPOConfig, state: LearnerState) -> dict:
  """The policy params actors and the evaluator act with (and collect-demos
  records): cfg.acting_policy picks the online or the target policy."""
  return state.target_policy if cfg.acting_policy == 'target' else state.policy


def init(cfg: MPOConfig, dims: Dims, seed: int) -> LearnerState:
  key = jax.random.PRNGKey(seed)
  key, kp, kc = jax.random.split(key, 3)
  policy = networks.init_policy(kp, dims.observation, dims.action,
                                cfg.policy_layers, cfg.init)
  critic = networks.init_critic(kc, dims.observation, dims.action,
                                cfg.critic_layers, cfg.init, cfg.critic_type,
                                cfg.mog_num_components)
  num_alphas = dims.action if cfg.per_dim_constraining else 1
  copy = lambda t: jax.tree_util.tree_map(jnp.array, t)
  return LearnerState(
      policy=policy, critic=critic,
      target_policy=copy(policy), target_critic=copy(critic),
      duals=duals_lib.init(cfg.duals, num_alphas),
      policy_opt=policy_optimizer(cfg).init(policy),
      critic_opt=critic_optimizer(cfg).init(critic),
      key=key, steps=jnp.int32(0), skipped=jnp.int32(0),
      horizon=jnp.int32(fields.fixed_horizon(cfg)))


class EStepInputs(NamedTuple):
  """B' = B states for estep_states 'current' (s) or 'next' (s'), 2B for
  'current_and_next' (s then s')."""
  states: jax.Array                   # [B', O] where the policy is improved
  target_pi: networks.GaussianParams  # fields [B', D]
  actions: jax.Array                  # [N, B', D] samples of π_target there
  q: jax.Array                        # [N, B'] target-critic values
  penalty_q: Optional[jax.Array]      # [N, B'] or None
  td_target: jax.Array                # [B] n-step TD target, or [Z·N, B]
                                      # samples of it (critic_type 'mog')


def apply_policy(cfg: MPOConfig, params, obs) -> networks.GaussianParams:
  """The policy `cfg` describes at obs [..., O]: fields [..., D]."""
  return networks.apply_policy(params, obs, **cfg.policy_head_kwargs)


def estep_inputs(cfg: MPOConfig, state: LearnerState, batch: Batch,
                 key_estep: jax.Array, key_bootstrap: jax.Array) -> EStepInputs:
  """Target-network quantities of one step, at the states
  `cfg.estep_states` names; separate keys for the E-step samples at s and
  the bootstrap samples at s' (which 'current_and_next' and 'next' reuse
  for the E-step at s')."""
  n = cfg.num_samples
  tile = lambda o: jnp.broadcast_to(o, (n,) + o.shape)
  target_pi_next = apply_policy(cfg, state.target_policy,
                                batch.next_observation)
  next_actions = networks.gaussian_sample(key_bootstrap, target_pi_next, n)
  if cfg.critic_type == 'mog':
    z_next = networks.apply_critic_distribution(
        state.target_critic, tile(batch.next_observation), next_actions,
        init_scale=cfg.mog_init_scale)                       # fields [N, B, C]
    q_next = networks.mixture_mean(z_next)
    # A key of its own, so the bootstrap's action samples are those of the
    # scalar critic under the same key.
    z = networks.mixture_sample(jax.random.fold_in(key_bootstrap, 1), z_next,
                                cfg.mog_num_value_samples)   # [Z, N, B]
    z = z.reshape((-1,) + z.shape[2:])                       # [Z·N, B]
    td_target = batch.reward + batch.discount * z
  else:
    q_next = networks.apply_critic(state.target_critic,
                                   tile(batch.next_observation), next_actions)
    td_target = batch.reward + batch.discount * jnp.mean(q_next, axis=0)
  states, target_pi, actions, q = (batch.next_observation, target_pi_next,
                                   next_actions, q_next)
  if cfg.estep_states != 'next':
    target_pi = apply_policy(cfg, state.target_policy, batch.observation)
    actions = networks.gaussian_sample(key_estep, target_pi, n)
    q = networks.apply_critic(state.target_critic, tile(batch.observation),
                              actions)
    states = batch.observation
    if cfg.estep_states == 'current_and_next':
      cat = lambda a, b, axis: jnp.concatenate([a, b], axis=axis)
      states = cat(states, batch.next_observation, 0)
      target_pi = jax.tree_util.tree_map(lambda a, b: cat(a, b, 0),
                                         target_pi, target_pi_next)
      actions = cat(actions, next_actions, 1)
      q = cat(q, q_next, 1)
  penalty_q = (losses.action_penalty_q(actions) if cfg.action_penalization
               else None)
  return EStepInputs(states, target_pi, jax.lax.stop_gradient(actions),
                     jax.lax.stop_gradient(q), penalty_q,
                     jax.lax.stop_gradient(td_target))


def sgd_step(cfg: MPOConfig, state: LearnerState, batch: Batch,
             policy_regulariser: Optional[
                 Callable[[networks.Params], tuple[jax.Array, dict]]] = None
             ) -> tuple[LearnerState, dict]:
  """One MPO SGD step (pure; jit or scan it). Returns (state, metrics).

  policy_regulariser: optional `policy params -> (scalar loss, metrics)`,
  added to the M-step's policy loss (the adversarial program's behaviour
  cloning, agents/ail/bc.py); its metrics join this step's.
  """
  dcfg = cfg.duals
  eps_mean, eps_stddev = kl_bounds(cfg, batch.action.shape[-1])

  key, k_estep, k_boot = jax.random.split(state.key, 3)
  count, horizon = state.steps, state.horizon
  lr = lambda o: schedules.from_config(o, count, horizon)

  # 1. Target quantities, fixed for this step.
  e = estep_inputs(cfg, state, batch, k_estep, k_boot)
  target_pi, actions, q_estep, penalty_q = (e.target_pi, e.actions, e.q,
                                            e.penalty_q)
  td_target = e.td_target

  # 2-3. Temperatures, then the E-step weights.
  dual_state, t_info = duals_lib.update_temperatures(
      dcfg, state.duals, q_estep, cfg.epsilon, penalty_q, cfg.epsilon_penalty,
      lr(dcfg.temperature_optimizer))
  after = dcfg.temperature_for_weights == 'after_update'
  temperature = t_info.temperature_after if after else t_info.temperature_before
  weights = losses.estep_weights(q_estep, temperature)
  if penalty_q is not None:
    penalty_t = (t_info.penalty_temperature_after if after
                 else t_info.penalty_temperature_before)
    weights_penalty = losses.estep_weights(penalty_q, penalty_t)
  alpha_mean = duals_lib.positive(state.duals.params.alpha_mean, dcfg.floor)
  alpha_stddev = duals_lib.positive(state.duals.params.alpha_stddev,
                                    dcfg.floor)

  # 4. Networks.
  def loss_fn(policy, critic):
    if cfg.critic_type == 'mog':
      loss_critic = losses.mog_critic_loss(
          networks.apply_critic_distribution(critic, batch.observation,
                                             batch.action,
                                             init_scale=cfg.mog_init_scale),
          td_target)
    else:
      q = networks.apply_critic(critic, batch.observation, batch.action)
      loss_critic = losses.critic_loss(q, td_target)
    online = apply_policy(cfg, policy, e.states)
    terms = losses.mstep_terms(online, target_pi, actions, weights,
                               cfg.per_dim_constraining)
    loss_policy = terms.cross_entropy_mean + terms.cross_entropy_stddev
    if penalty_q is not None:
      pen = losses.mstep_terms(online, target_pi, actions, weights_penalty,
                               cfg.per_dim_constraining)
      loss_policy += pen.cross_entropy_mean + pen.cross_entropy_stddev
    loss_policy += losses.kl_penalty(alpha_mean, terms.kl_mean)
    loss_policy += losses.kl_penalty(alpha_stddev, terms.kl_stddev)
    extra = {}
    if policy_regulariser is not None:
      loss_extra, extra = policy_regulariser(policy)
      loss_policy += loss_extra
    aux = dict(loss_critic=loss_critic, loss_policy=loss_policy, terms=terms,
               online_stddev=online.stddev, extra=extra)
    return loss_policy + loss_critic, aux

  (_, aux), (g_policy, g_critic) = jax.value_and_grad(
      loss_fn, argnums=(0, 1), has_aux=True)(state.policy, state.critic)
  terms = aux['terms']
  grad_norms = (optax.tree.norm(g_policy), optax.tree.norm(g_critic))
  if cfg.grad_clip_mode == 'joint':
    g_policy, g_critic = clip_jointly((g_policy, g_critic), cfg.max_grad_norm)
  p_upd, policy_opt = policy_optimizer(cfg).update(
      g_policy, optimizers.with_learning_rate(state.policy_opt,
                                              lr(cfg.policy_optimizer)),
      state.policy)
  c_upd, critic_opt = critic_optimizer(cfg).update(
      g_critic, optimizers.with_learning_rate(state.critic_opt,
                                              lr(cfg.critic_optimizer)),
      state.critic)
  policy = optax.apply_updates(state.policy, p_upd)
  critic = optax.apply_updates(state.critic, c_upd)

  # 5. Alphas, on this batch's KLs.
  dual_state = duals_lib.update_alphas(
      dcfg, dual_state, terms.kl_mean, terms.kl_stddev, eps_mean, eps_stddev,
      lr(dcfg.alpha_optimizer))

  # 6. Guard, then targets. The test reads what this batch brings into the
  # state (the losses, the gradients, the new duals), not the parameters the
  # optimizers write from it: the state a step starts from is finite (from
  # init, from accepted steps, and a resume refuses a checkpoint that is
  # not), and from a finite state and finite, clipped gradients every network
  # optimizer here writes finite parameters: the config's bounds on learning
  # rates and max_grad_norm (config.MAX_LEARNING_RATE, MAX_GRAD_NORM) keep one
  # step far below float32's largest value. A test of the written parameters
  # would make each leaf's select wait for a reduction over all of them; a
  # test of the gradients leaves XLA free to fuse each select into its leaf's
  # update.
  finite = trees.all_finite((aux['loss_critic'], aux['loss_policy'], g_policy,
                             g_critic, dual_state.params))
  new = (policy, critic, dual_state, policy_opt, critic_opt)
  old = (state.policy, state.critic, state.duals, state.policy_opt,
         state.critic_opt)
  policy, critic, dual_state, policy_opt, critic_opt = trees.select(finite, new, old)

  steps = state.steps + 1
  if cfg.target_update == 'polyak':
    tau = cfg.target_polyak_tau
    mix = lambda t, o: jax.tree_util.tree_map(
        lambda a, b: (1 - tau) * a + tau * b, t, o)
    target_policy = mix(state.target_policy, policy)
    target_critic = mix(state.target_critic, critic)
  else:
    copy_now = steps % cfg.target_update_period == 0
    target_policy = trees.select(copy_now, policy, state.target_policy)
    target_critic = trees.select(copy_now, critic, state.target_critic)

  new_state = LearnerState(policy, critic, target_policy, target_critic,
                           dual_state, policy_opt, critic_opt, key, steps,
                           state.skipped + jnp.where(finite, 0, 1).astype(
                               jnp.int32), state.horizon)

  kl_q = jnp.mean(losses.kl_to_uniform(weights))
  metrics = {
      'loss_critic': aux['loss_critic'],
      'loss_policy': aux['loss_policy'],
      'kl_q_rel': kl_q / cfg.epsilon,
      # The action penalty's E-step KL over its bound (1 when its
      # temperature is solved exactly); NaN with the penalty off.
      'penalty_kl_q_rel': (
          jnp.mean(losses.kl_to_uniform(weights_penalty)) /
          cfg.epsilon_penalty if penalty_q is not None
          else jnp.float32(jnp.nan)),
      'kl_mean_rel': jnp.mean(terms.kl_mean) / eps_mean,
      'kl_stddev_rel': jnp.mean(terms.kl_stddev) / eps_stddev,
      # The bounds the duals enforced this step (kl_bounds), so a log says
      # which ε a run used whatever the per-dimension convention.
      'epsilon_used': jnp.float32(cfg.epsilon),
      'epsilon_mean_used': jnp.float32(eps_mean),
      'epsilon_stddev_used': jnp.float32(eps_stddev),
      'epsilon_penalty_used': jnp.float32(cfg.epsilon_penalty),
      # The duals the state holds after this step (a skipped step's: those
      # it kept). NaN for the penalty's temperature with the penalty off
      # (its unused start value otherwise).
      'temperature': duals_lib.positive(dual_state.params.temperature,
                                        dcfg.floor),
      'temperature_used': temperature,
      'penalty_temperature': (
          duals_lib.positive(dual_state.params.penalty_temperature,
                             dcfg.floor) if penalty_q is not None
          else jnp.float32(jnp.nan)),
      'alpha_mean': jnp.mean(duals_lib.positive(
          dual_state.params.alpha_mean, dcfg.floor)),
      'alpha_stddev': jnp.mean(duals_lib.positive(
          dual_state.params.alpha_stddev, dcfg.floor)),
      'temperature_dual_residual': t_info.residual,
      'solver_iterations': t_info.solver_iterations,
      # Extremes over all N×B E-step values, where Acme logs the batch mean
      # of each state's min/max: one sample far out (an extrapolating or
      # diverging critic) shows here and averages away there.
      'q_min': jnp.min(q_estep),
      'q_max': jnp.max(q_estep),
      'policy_stddev_min': jnp.min(aux['online_stddev']),
      'policy_stddev_max': jnp.max(aux['online_stddev']),
      # Before any clipping: above max_grad_norm means clipping acted.
      'grad_norm_policy': grad_norms[0],
      'grad_norm_critic': grad_norms[1],
      'learning_rate_policy': lr(cfg.policy_optimizer),
      'learning_rate_critic': lr(cfg.critic_optimizer),
      'learning_rate_temperature': lr(dcfg.temperature_optimizer),
      'learning_rate_alpha': lr(dcfg.alpha_optimizer),
      'finite': finite,
      'skipped': new_state.skipped,
      'learner_steps': steps,
      **aux['extra'],
  }
  return new_state, metrics


def make_update(cfg: MPOConfig, all_steps_metrics: bool = False):
  """A jitted update(state, batches) running K = batches' leading dim steps.

  batches: a Batch whose fields have shape [K, B, ...]. Returns the new state
  and the last step's metrics (with 'skipped_in_call' over all K); with
  `all_steps_metrics`, every metric has a leading [K] axis instead, so a
  caller can log every learner step.
  """
  def update(state: LearnerState, batches: Batch):
    skipped0 = state.skipped
    state, metrics = trees.scan_stacked(lambda s, b: sgd_step(cfg, s, b),
                                        state, batches)
    if not all_steps_metrics:
      metrics = jax.tree_util.tree_map(lambda x: x[-1], metrics)
    metrics['skipped_in_call'] = state.skipped - skipped0
    return state, metrics

  return jax.jit(update, donate_argnums=(0,))


# --------------------------------------------------------------------------
# Checkpoints: a flat .npz of leaves named by their tree paths, no pickle.


def save(path: str, state: LearnerState, metadata: Optional[dict] = None):
  checkpointing.save_tree(path, state, metadata)


def restore(path: str, template: LearnerState) -> LearnerState:
  """Restores into `template`'s structure (build it with `init`)."""
  return checkpointing.restore_tree(path, template)


def to_numpy(tree):
  return jax.tree_util.tree_map(np.asarray, tree)
