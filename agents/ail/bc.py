"""Behaviour cloning as a decaying regulariser of the generator's policy.

DAPG (Rajeswaran et al. 2018) and GAIL+BC (Jena et al. 2020) add a
behaviour-cloning term to the policy's loss with a weight that decays to
zero: the generator starts out pulled towards the expert's actions on the
expert's states and ends trained by the adversarial reward alone. A non-zero
final weight keeps a small pull for the rest of the run.

Only the policy's mean is cloned; its standard deviation is held, as MPO's
decoupled mean term holds it (Abdolmaleki et al. 2018b). The cartpole expert
is a deterministic controller: the maximum-likelihood stddev of its actions
is zero, so cloning the stddev would end the generator's exploration, and
AIRL's logit f − log π(a|s) (Fu et al. 2018) would then score every agent
action as far less likely than the expert's.
"""

import jax
import jax.numpy as jnp

from tandem.agents.ail.config import AILConfig
from tandem.agents.mpo import networks


def weight(ail_cfg: AILConfig, generator_steps: jax.Array) -> jax.Array:
  """λ(t) = λ_T + (bc_weight − λ_T) · max(0, 1 − t / bc_decay_steps), with
  λ_T = bc_final_weight and t the global generator step count before this
  step (as sgd_step's learning rates use it): a function of that count
  alone, so rounds, stops and resumes see the weights of one uninterrupted
  run. -> float32 []."""
  t = jnp.asarray(generator_steps, jnp.float32)
  left = jnp.clip(1.0 - t / ail_cfg.bc_decay_steps, 0.0, 1.0)
  final = jnp.float32(ail_cfg.bc_final_weight)
  return final + (jnp.float32(ail_cfg.bc_weight) - final) * left


def mean_loss(dist: networks.GaussianParams,
              expert_action: jax.Array) -> jax.Array:
  """−log N(a_E | μ(s_E), sg(σ(s_E))) up to a constant, summed over action
  dimensions and averaged over the batch.

  dist: the online policy at expert states, mean and stddev [B, D];
  expert_action: [B, D]. Returns a scalar whose gradient reaches the mean
  only: Σ_d (a_E − μ)² / (2 sg(σ)²).
  """
  stddev = jax.lax.stop_gradient(dist.stddev)
  z = (expert_action - dist.mean) / stddev
  return jnp.mean(jnp.sum(0.5 * jnp.square(z), axis=-1))
