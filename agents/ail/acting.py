"""The adversarial program's evaluator: the MPO evaluator, plus the learned
reward of its episodes under the learner's current discriminator, so the
true return and what the generator is optimising share one x-axis."""

from __future__ import annotations

import dataclasses

import numpy as np

from agents.ail import discriminator as disc
from agents.common.lifecycle import call
from agents.mpo import acting


class AILEvaluatorNode(acting.EvaluatorNode):

  records_episodes = True

  def __init__(self, train_config, counter, learner, run_dir: str,
               segment: int = 1):
    super().__init__(train_config, counter, learner, run_dir, segment)
    self._rewards_fn = None

  def _episode_metrics(self, episodes: list) -> dict:
    import jax  # on this node's CPU (launch/mpo.py's CPU_ONLY)
    if self._rewards_fn is None:
      cfg, gamma = self._tc.ail, self._tc.mpo.discount
      if disc.needs_log_pi(cfg):
        # AIRL's 'logit' reward is f plus the acting policy's entropy bonus;
        # the evaluator acts with the mean action, which has no log π, so
        # its episodes are scored by f, the learned reward proper.
        cfg = dataclasses.replace(cfg, reward='f')
      self._rewards_fn = jax.jit(
          lambda params, norm, t: disc.rewards(cfg, params, norm, t, gamma))
    params, normalizer = call(self._learner, 'get_discriminator')
    learned = []
    for ep in episodes:
      t = disc.Transitions(ep['observation'], ep['action'],
                           ep['next_observation'], ep['discount'])
      learned.append(np.asarray(self._rewards_fn(params, normalizer, t)))
    return {'learned_return': float(np.mean([r.sum() for r in learned])),
            'learned_reward_mean': float(np.mean(np.concatenate(learned)))}
