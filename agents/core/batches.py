"""What replay hands a learner: algorithm-neutral batch structures.

Pure numpy/JAX-friendly NamedTuples, so replay (agents/replay) and learners
(agents/<algo>) share them without replay knowing any algorithm.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Batch(NamedTuple):
  """n-step transitions; leading dim B (or [K, B] for a multi-step call).

  reward: the discounted n-step return Σ_k γ^k r_k.
  discount: the whole bootstrap multiplier γ^n · Π env discounts (0 at a
    terminal state), so the target is reward + discount · V(next_observation).
  """
  observation: np.ndarray       # [B, O]
  action: np.ndarray            # [B, D]
  reward: np.ndarray            # [B]
  discount: np.ndarray          # [B]
  next_observation: np.ndarray  # [B, O]


class Windows(NamedTuple):
  """Up to n consecutive steps from one start state, every step kept, so a
  learner can compute each step's reward itself (adversarial imitation
  relabels them with the current discriminator). Leading dims [...] = [B] or
  [K, B]; m ≤ n is the number of real steps (fewer at an episode's end).

  observations: o_0 … o_n; entries past o_m repeat o_m, so observations[n]
    is always the bootstrap state o_m.
  actions: a_0 … a_{n-1}; zeros past m.
  discounts: d_k, the environment's discount after step k (0 at a terminal
    state; AIRL's 1 - done); zeros past m.
  weights: the n-step return's weight of step k's reward,
    γ^k · d_0 ⋯ d_{k-1} for k < m, 0 past m, so R = Σ_k weights_k · r_k.
  bootstrap: γ^m · d_0 ⋯ d_{m-1}, the multiplier of V(o_m).
  rewards: the environment's rewards r_k (zeros past m), for diagnostics.
  """
  observations: np.ndarray  # [..., n + 1, O]
  actions: np.ndarray       # [..., n, D]
  discounts: np.ndarray     # [..., n]
  weights: np.ndarray       # [..., n]
  bootstrap: np.ndarray     # [...]
  rewards: np.ndarray       # [..., n]
