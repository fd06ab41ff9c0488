"""MPO improves a policy on a problem whose optimum is known, in seconds.

The problem: a continuing two-state chain where a choice pays one step later,
so the critic must bootstrap and the policy must follow the critic's argmax.

  s0 = [1, 0] --a--> s1(a) = [0, a], reward 0
  s1(x)      --any--> s0,            reward -4 (x - 0.5)²
  every transition discounted by γ = 0.5.

Q(s0, a) = γ (-4 (a - 0.5)² + γ V(s0)), so the optimal mean action at s0 is
0.5 whatever the policy does elsewhere. s0 is also a next state (the chain
returns to it), so both E-step modes improve the policy there. Batches are
drawn off-policy (actions uniform in [-1, 1]), as replay would hand them.

Three seeds run side by side in one vmapped update per E-step mode. A policy
that follows a wrong sign (of the TD target, of Q in the E-step weights, of
the weighted log-likelihood) moves its mean away from 0.5, toward a box edge;
a critic that does not bootstrap has Q(s0, ·) flat up to its fitting noise,
which the KL-bounded E-step follows as a random walk, not to 0.5.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.mpo import config, learner

SEEDS = (0, 1, 2)
OPTIMUM = 0.5
GAMMA = 0.5
STEPS_PER_CALL = 20
BATCH = 64
CALLS = 125  # 2,500 SGD steps: the critic resolves the quadratic's top by ~1,500
TOLERANCE = 0.2  # observed |mean - 0.5| <= 0.08 on every seed, both modes
S0 = np.array([1., 0.], np.float32)


def chain_batch(rng: np.random.Generator) -> learner.Batch:
  """[seeds, K, B] transitions, half from s0 and half from s1(x)."""
  shape = (len(SEEDS), STEPS_PER_CALL, BATCH // 2)
  a = rng.uniform(-1, 1, size=shape[:2] + (BATCH, 1)).astype(np.float32)
  x = rng.uniform(-1, 1, size=shape).astype(np.float32)
  zeros = np.zeros(shape, np.float32)
  s0 = np.broadcast_to(S0, shape + (2,))
  s1 = np.stack([zeros, x], -1)
  return learner.Batch(
      observation=np.concatenate([s0, s1], 2),
      action=a,
      reward=np.concatenate([zeros, -4 * (x - OPTIMUM) ** 2], 2),
      discount=np.full(shape[:2] + (BATCH,), GAMMA, np.float32),
      next_observation=np.concatenate(
          [np.stack([zeros, a[..., :BATCH // 2, 0]], -1), s0], 2))


def small_config(estep_states: str) -> config.MPOConfig:
  cfg = config.replace(config.MPOConfig(), dict(
      policy_layers=(32, 32), critic_layers=(32, 32), batch_size=BATCH,
      num_samples=16, estep_states=estep_states,
      sgd_steps_per_call=STEPS_PER_CALL, target_update_period=5))
  return config.replace(cfg, {'policy_optimizer.learning_rate': 1e-3,
                              'critic_optimizer.learning_rate': 3e-3})


def mean_at_s0(cfg, policies) -> np.ndarray:
  """The policy mean at s0 of each seed: [seeds]."""
  params = jax.vmap(lambda p: learner.apply_policy(cfg, p, jnp.asarray(S0[None])))(
      policies)
  return np.asarray(params.mean[:, 0, 0])


def train_chain(estep_states: str):
  """Means at s0 before and after CALLS updates, one row per seed."""
  cfg = small_config(estep_states)
  dims = learner.Dims(observation=2, action=1)
  state = jax.tree.map(lambda *leaves: jnp.stack(leaves),
                       *[learner.init(cfg, dims, s) for s in SEEDS])
  update = jax.jit(jax.vmap(learner.make_update(cfg)))
  before = mean_at_s0(cfg, state.policy)
  rng = np.random.default_rng(0)
  for _ in range(CALLS):
    state, metrics = update(state, jax.tree.map(jnp.asarray, chain_batch(rng)))
  assert int(np.asarray(metrics['skipped']).max()) == 0
  return before, mean_at_s0(cfg, state.policy)


@pytest.mark.parametrize('estep_states', ['current', 'next'])
def test_mpo_moves_the_mean_to_the_known_optimum(estep_states):
  before, after = train_chain(estep_states)
  # The start is far from the optimum, so reaching it is learning.
  assert np.all(np.abs(before - OPTIMUM) > 0.35), before
  assert np.all(np.abs(after - OPTIMUM) < TOLERANCE), (before, after)
