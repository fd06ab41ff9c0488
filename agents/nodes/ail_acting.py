"""The adversarial program's evaluator: the MPO evaluator, plus the learned
reward of its episodes under the learner's current discriminator (AIRL's
disentangled g: see evaluation_reward), so the true return and the learned
one share one x-axis."""

from __future__ import annotations

import dataclasses

import numpy as np

from tandem.agents.ail import discriminator as disc
from tandem.agents.runtime.lifecycle import call
from tandem.agents.nodes import acting


class AILEvaluatorNode(acting.EvaluatorNode):

  records_episodes = True

  def __init__(self, train_config, counter, learner, run_dir: str,
               segment: int = 1):
    super().__init__(train_config, counter, learner, run_dir, segment)
    self._rewards_fn = None
    self._discriminator = None

  def _fetch_policy(self):
    # The discriminator with the policy, in one call: both of one learner
    # update, before the episodes (fetched after them, it would be the
    # learner's of minutes later, newer than the row's counts say).
    policy, self._discriminator = call(self._learner, 'get_variables',
                                       ['policy', 'discriminator'])
    return policy

  def _episode_metrics(self, episodes: list) -> dict:
    import jax  # on this node's CPU (launch/mpo.py's CPU_ONLY)
    if self._rewards_fn is None:
      cfg, gamma = evaluation_reward(self._tc.ail), self._tc.mpo.discount
      self._rewards_fn = jax.jit(
          lambda params, norm, t: disc.rewards(cfg, params, norm, t, gamma))
    params, normalizer = self._discriminator
    learned = learned_rewards(self._rewards_fn, params, normalizer, episodes)
    return {'learned_return': float(np.mean([r.sum() for r in learned])),
            'learned_reward_mean': float(np.mean(np.concatenate(learned)))}


def evaluation_reward(cfg):
  """The AILConfig whose reward scores evaluation episodes.

  GAIL: the generator's own reward. AIRL: g, the disentangled reward Fu et
  al. 2018 (Sec. 5) recover (imitation's `reward_test` likewise), whatever
  the generator trains on. Its shaped f = g + γ h(s') - h(s) telescopes only
  under γ^t weights: an episode's plain sum of f is Σg - h(s_0) + γ h(s_T)
  - (1 - γ) Σ_{0<t<T} h(s_t), and at AIRL's optimum h ≈ V, so the last term
  (~ -10 mean h over 1000 steps at γ = 0.99) swamps Σg and ranks policies by
  the states they visit. The logit reward (f - log π) needs the acting
  policy's log π, which the evaluator's mean action does not have.
  """
  if cfg.kind == 'airl':
    return dataclasses.replace(cfg, reward='g')
  return cfg


def padded_size(n: int) -> int:
  """The batch a reward call pads n transitions to: a power of two, at
  least 64. Episodes that end early (gymnasium terminations) have many
  lengths; padding to few sizes compiles the reward function a few times
  rather than once per length."""
  return max(64, 1 << max(n - 1, 0).bit_length())


def learned_rewards(rewards_fn, params, normalizer,
                    episodes: list) -> list[np.ndarray]:
  """Each episode's learned rewards, [T_i], from one call of `rewards_fn`
  on all their transitions, padded to padded_size(ΣT_i) with copies of the
  last one (rewards are per transition, so padding changes no real row)."""
  lengths = [len(ep['action']) for ep in episodes]
  n = sum(lengths)
  if n == 0:
    return [np.zeros(0, np.float32) for _ in episodes]
  pad = padded_size(n) - n

  def stacked(key):
    x = np.concatenate([ep[key] for ep in episodes])
    return np.concatenate([x, np.repeat(x[-1:], pad, axis=0)])
  t = disc.Transitions(stacked('observation'), stacked('action'),
                       stacked('next_observation'), stacked('discount'))
  r = np.asarray(rewards_fn(params, normalizer, t))[:n]
  return np.split(r, np.cumsum(lengths)[:-1])
