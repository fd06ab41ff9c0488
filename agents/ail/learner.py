"""The adversarial imitation learner: a discriminator and an MPO generator.

Imports nothing from TensorFlow, Reverb or Launchpad (like agents/mpo's
learner core), so it runs and is benchmarked with jax and optax alone.

A round is `discriminator_steps_per_round` discriminator steps (agent
transitions from replay against expert transitions from the demonstrations)
followed by `generator_steps_per_round` MPO steps whose rewards the current
discriminator computes at the moment the batch is used: replay stores
n-step windows (`batches.Windows`) and every step inside the n-step sum is
relabelled (`relabel`), so no reward a discriminator computed earlier is
ever reused. Where a run stands in its rounds is a function of the two
global step counts alone (`RoundPlan`), and every learning rate is a
function of a global step count and a horizon stored in the state, so a run
split into rounds, stopped or resumed sees exactly the values of one run.

Papers: GAIL (Ho & Ermon 2016), AIRL (Fu et al. 2018), off-policy
adversarial imitation with replay and relabelled rewards (DAC, Kostrikov et
al. 2019), MPO (Abdolmaleki et al. 2018a, b).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from tandem.agents.ail import bc
from tandem.agents.ail import discriminator as disc
from tandem.agents.ail.config import AILConfig
from tandem.agents.core import checkpointing
from tandem.agents.core.batches import Batch, Windows
from tandem.agents.core import trees
from tandem.agents.mpo import learner as mpo_learner
from tandem.agents.mpo import networks
from tandem.agents.mpo.config import MPOConfig


class AILState(NamedTuple):
  generator: mpo_learner.LearnerState
  discriminator: disc.DiscriminatorState
  key: jax.Array   # uint32[2]: draws the expert batches


# --------------------------------------------------------------------------
# Rounds.


class Position(NamedTuple):
  round: int    # rounds completed
  phase: str    # 'discriminator' or 'generator': what the next step is
  left: int     # steps of that phase left in this round


@dataclasses.dataclass(frozen=True)
class RoundPlan:
  """Where a run stands, from its global discriminator and generator step
  counts alone: nothing about a round is state that a restart could lose."""
  discriminator_steps: int   # per round
  generator_steps: int       # per round

  def position(self, discriminator_steps: int,
               generator_steps: int) -> Position:
    done = min(discriminator_steps // self.discriminator_steps,
               generator_steps // self.generator_steps)
    if discriminator_steps < (done + 1) * self.discriminator_steps:
      return Position(done, 'discriminator',
                      (done + 1) * self.discriminator_steps -
                      discriminator_steps)
    return Position(done, 'generator',
                    (done + 1) * self.generator_steps - generator_steps)


def plan_record(ail_cfg: AILConfig) -> dict:
  """The round plan as a checkpoint's metadata records it: `position` reads
  a state's counts through it, so a state resumed under another plan would
  be placed in another round (its rounds count could even go back)."""
  return {'discriminator_steps_per_round':
              ail_cfg.discriminator_steps_per_round,
          'generator_steps_per_round': ail_cfg.generator_steps_per_round}


def position(ail_cfg: AILConfig, state: AILState) -> Position:
  plan = RoundPlan(ail_cfg.discriminator_steps_per_round,
                   ail_cfg.generator_steps_per_round)
  return plan.position(int(state.discriminator.steps),
                       int(state.generator.steps))


# --------------------------------------------------------------------------
# State.


def init(mpo_cfg: MPOConfig, ail_cfg: AILConfig, dims: mpo_learner.Dims,
         seed: int) -> AILState:
  key = jax.random.fold_in(jax.random.PRNGKey(seed), 0xA11)
  return AILState(
      generator=mpo_learner.init(mpo_cfg, dims, seed),
      discriminator=disc.init(ail_cfg, dims.observation, dims.action,
                              seed + 1),
      key=key)


def policy_log_prob(mpo_cfg: MPOConfig, policy, observation: jax.Array,
                    action: jax.Array) -> jax.Array:
  """log π(a|s) of the acting policy: obs [..., O], action [..., D] -> [...].
  AIRL's logit subtracts it (Fu et al. 2018, Eq. 3).

  The acting policy is the Gaussian clipped to the box (actors clip, replay
  holds clipped actions, 8% of the cartpole expert's actions sit on an
  edge), so an action on an edge counts with the mass beyond it
  (`networks.clipped_gaussian_log_prob`). With the unclipped density a
  policy whose mean sits beyond an edge would score its own edge actions
  as rare, and an entropy reward (`reward='logit'`) would pay it to push its
  mean further out.
  """
  dist = mpo_learner.apply_policy(mpo_cfg, policy, observation)
  return jnp.sum(networks.clipped_gaussian_log_prob(dist, action), axis=-1)


def window_steps(windows: Windows) -> disc.Transitions:
  """Every step of every window as a transition: leading dims [..., n]."""
  obs = windows.observations
  return disc.Transitions(observation=obs[..., :-1, :],
                          action=windows.actions,
                          next_observation=obs[..., 1:, :],
                          discount=windows.discounts)


def first_steps(windows: Windows) -> disc.Transitions:
  """The first step of each window ([...]): each start state is written
  once, so these are replay's transitions, sampled uniformly."""
  obs = windows.observations
  return disc.Transitions(observation=obs[..., 0, :],
                          action=windows.actions[..., 0, :],
                          next_observation=obs[..., 1, :],
                          discount=windows.discounts[..., 0])


def relabel(mpo_cfg: MPOConfig, ail_cfg: AILConfig,
            d_state: disc.DiscriminatorState,
            windows: Windows, policy=None) -> tuple[Batch, jax.Array]:
  """The n-step batch with every step's reward from the discriminator now.

  windows: leading dims [B]. Returns (Batch [B], rewards [B, n]) with
  Batch.reward = Σ_k weights_k · r_k, r_k = reward(s_k, a_k, s_{k+1}).
  policy: the generator's current policy, needed (and only used) by AIRL's
  `reward='logit'`, whose -log π terms are then as fresh as f; that reward
  takes the soft form of `soft_terms` (r_0 = f_0, and the bootstrap
  state's entropy added to the return).
  """
  steps = window_steps(windows)
  log_pi, entropy = None, 0.0
  if disc.needs_log_pi(ail_cfg):
    log_pi, entropy = soft_terms(mpo_cfg, policy, windows, steps)
  r = disc.rewards(ail_cfg, d_state.params, d_state.normalizer, steps,
                   mpo_cfg.discount, log_pi=log_pi)
  r = jax.lax.stop_gradient(r)
  ret = jnp.sum(windows.weights * r, axis=-1) + jax.lax.stop_gradient(
      windows.bootstrap * entropy)
  if ail_cfg.absorbing:
    ret = ret + jax.lax.stop_gradient(absorbing_tail(mpo_cfg, ail_cfg,
                                                     d_state, windows))
  batch = Batch(observation=windows.observations[..., 0, :],
                action=windows.actions[..., 0, :],
                reward=ret,
                discount=windows.bootstrap,
                next_observation=windows.observations[..., -1, :])
  return batch, r


def absorbing_tail(mpo_cfg: MPOConfig, ail_cfg: AILConfig,
                   d_state: disc.DiscriminatorState,
                   windows: Windows) -> jax.Array:
  """The return after a window's terminal step, [...]: from the absorbing
  state, whose every step pays r_abs (`disc.absorbing_reward`) for ever,

    γ^m · V_abs,  V_abs = r_abs / (1 - γ),

  where the window's m real steps end in a terminal state (d_{m-1} = 0),
  and 0 where they do not (the critic bootstraps V(s_m) there). The
  absorbing state's value is exact in closed form: nothing is chosen there,
  so it is the same for every policy; DAC's critic learns it instead, by
  bootstrapping through absorbing transitions stored in replay. γ^m =
  γ · weights_{m-1} (every discount before a terminal step is 1).
  """
  gamma = mpo_cfg.discount
  terminal = (windows.weights > 0) & (windows.discounts == 0)
  obs_dim = windows.observations.shape[-1]
  act_dim = windows.actions.shape[-1]
  v_abs = disc.absorbing_reward(ail_cfg, d_state.params, obs_dim, act_dim,
                                gamma) / (1.0 - gamma)
  return gamma * v_abs * jnp.sum(jnp.where(terminal, windows.weights, 0.0),
                                 axis=-1)


def soft_terms(mpo_cfg: MPOConfig, policy, windows: Windows,
               steps: disc.Transitions) -> tuple[jax.Array, jax.Array]:
  """AIRL's 'logit' reward f - log π as an off-policy critic can learn it:
  the soft Q-value of soft actor-critic (Haarnoja et al. 2018),

    Q(s_0, a_0) = f_0 + Σ_{k=1}^{m-1} γ^k (f_k - log π(a_k|s_k))
                  + γ^m (V(s_m) + H(π(·|s_m))).

  Q conditions on a_0, so a_0's own -log π is not in it (inside an MPO
  E-step it would favour the unlikely samples and widen the policy every
  step); each later step's is, and the bootstrap state's entropy stands
  for the -log π of the action taken there. Returns (log π per step
  [..., n], 0 at k = 0; H(π(·|s_m)) [...]), under `policy`, the acting
  policy (clipped to the box: networks.clipped_gaussian_entropy)."""
  log_pi = policy_log_prob(mpo_cfg, policy, steps.observation, steps.action)
  log_pi = log_pi.at[..., 0].set(0.0)
  dist = mpo_learner.apply_policy(mpo_cfg, policy,
                                  windows.observations[..., -1, :])
  return log_pi, jnp.sum(networks.clipped_gaussian_entropy(dist), axis=-1)


def draw_expert(state: AILState, expert_data: disc.Transitions,
                size: int) -> tuple[AILState, disc.Transitions]:
  """`size` expert transitions drawn uniformly from expert_data ([T]) in
  graph with the state's key (so a restored run draws the same ones)."""
  key, k_expert = jax.random.split(state.key)
  idx = jax.random.randint(k_expert, (size,), 0,
                           expert_data.discount.shape[0])
  return (state._replace(key=key),
          jax.tree_util.tree_map(lambda x: x[idx], expert_data))


def generator_step(mpo_cfg: MPOConfig, ail_cfg: AILConfig, state: AILState,
                   windows: Windows,
                   expert_data: disc.Transitions) -> tuple[AILState, dict]:
  """One MPO step on relabelled rewards; windows: leading dims [B].

  With `ail_cfg.bc_weight` > 0 the policy loss also clones the policy mean
  on B expert transitions (agents/ail/bc.py), weighted by the schedule of
  the global generator step count; otherwise expert_data is unused.
  """
  batch, r = relabel(mpo_cfg, ail_cfg, state.discriminator, windows,
                     mpo_learner.acting_policy(mpo_cfg, state.generator))
  regulariser = None
  # Off, BC draws nothing: the key, and so the discriminator's expert
  # batches, stay those of a run without it.
  if ail_cfg.bc_weight > 0:
    state, expert = draw_expert(state, expert_data, batch.reward.shape[0])
    w = bc.weight(ail_cfg, state.generator.steps)

    def regulariser(policy):
      dist = mpo_learner.apply_policy(mpo_cfg, policy, expert.observation)
      loss = bc.mean_loss(dist, expert.action)
      return w * loss, {'bc_weight': w, 'bc_loss': loss}

  generator, metrics = mpo_learner.sgd_step(mpo_cfg, state.generator, batch,
                                            regulariser)
  valid = (windows.weights > 0).astype(jnp.float32)
  count = jnp.maximum(jnp.sum(valid), 1.0)
  metrics['learned_reward_mean'] = jnp.sum(valid * r) / count
  metrics['env_reward_mean'] = jnp.sum(valid * windows.rewards) / count
  metrics['discriminator_steps'] = state.discriminator.steps
  return state._replace(generator=generator), metrics


def discriminator_step(mpo_cfg: MPOConfig, ail_cfg: AILConfig,
                       state: AILState, windows: Windows,
                       expert_data: disc.Transitions) -> tuple[AILState, dict]:
  """One discriminator step: the first steps of `windows` ([B]) against B
  expert transitions drawn uniformly from expert_data ([T]) in-graph, with
  the state's key, so a restored run draws the same expert batches."""
  state, expert = draw_expert(state, expert_data, ail_cfg.batch_size)
  agent = first_steps(windows)
  if ail_cfg.kind == 'airl':
    # The current policy's log-probabilities (Fu et al. 2018): the policy
    # the actors act with at this moment (mpo.acting_policy: the online one
    # by default, the target with 'target'), not a stored one.
    policy = mpo_learner.acting_policy(mpo_cfg, state.generator)
    lp_expert = policy_log_prob(mpo_cfg, policy, expert.observation,
                                expert.action)
    lp_agent = policy_log_prob(mpo_cfg, policy, agent.observation,
                               agent.action)
  else:
    lp_expert = jnp.zeros_like(expert.discount)
    lp_agent = jnp.zeros_like(agent.discount)
  d_state, metrics = disc.update(ail_cfg, state.discriminator, expert, agent,
                                 jax.lax.stop_gradient(lp_expert),
                                 jax.lax.stop_gradient(lp_agent),
                                 mpo_cfg.discount)
  metrics['learner_steps'] = state.generator.steps
  # Whether the generator ends episodes (discount 0) more or less often
  # than the expert: without absorbing states a fixed-sign reward biases
  # episode length (DAC, Kostrikov et al. 2019, Sec. 4.2).
  metrics['agent_terminal_fraction'] = jnp.mean(agent.discount == 0)
  metrics['expert_terminal_fraction'] = jnp.mean(expert.discount == 0)
  return state._replace(discriminator=d_state), metrics


def make_generator_update(mpo_cfg: MPOConfig, ail_cfg: AILConfig):
  """jit(update(state, windows [K, B, ...], expert_data [T])) -> (state,
  metrics [K])."""
  def update(state, windows, expert_data):
    return trees.scan_stacked(
        lambda s, w: generator_step(mpo_cfg, ail_cfg, s, w, expert_data),
        state, windows)
  return jax.jit(update, donate_argnums=(0,))


def make_discriminator_update(mpo_cfg: MPOConfig, ail_cfg: AILConfig):
  """jit(update(state, windows [K, B, ...], expert_data [T])) -> (state,
  metrics [K])."""
  def update(state, windows, expert_data):
    return trees.scan_stacked(
        lambda s, w: discriminator_step(mpo_cfg, ail_cfg, s, w, expert_data),
        state, windows)
  return jax.jit(update, donate_argnums=(0,))


def expert_transitions(demos) -> disc.Transitions:
  """agents.ail.demonstrations.Demonstrations -> device Transitions [T]."""
  return disc.Transitions(
      observation=jnp.asarray(demos.observation, jnp.float32),
      action=jnp.asarray(demos.action, jnp.float32),
      next_observation=jnp.asarray(demos.next_observation, jnp.float32),
      discount=jnp.asarray(demos.discount, jnp.float32))


# --------------------------------------------------------------------------
# Checkpoints: every leaf of AILState (both networks' optimizer states with
# their counts, duals, normaliser statistics, PRNG keys, step counts and
# horizons) by its tree path, no pickle.


def save(path: str, state: AILState, metadata=None) -> None:
  checkpointing.save_tree(path, state, metadata)


def restore(path: str, template: AILState) -> AILState:
  return checkpointing.restore_tree(path, template)


def to_numpy(tree):
  return jax.tree_util.tree_map(np.asarray, tree)
