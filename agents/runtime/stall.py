"""Noticing a learner that has stopped learning.

The learner skips an update whose losses or gradients are not finite (the
state is left as it was), which protects the parameters from one bad batch.
A learner whose updates are all skipped, though, would go on "training"
until the budget while nothing changes: `StallMonitor` turns a run of
skipped updates into an error that names the last finite step.
"""

from __future__ import annotations

import collections
from typing import Optional

import numpy as np


class LearnerStalled(RuntimeError):
  """Too many of the learner's recent updates were skipped as non-finite."""


class StallMonitor:
  """Over the last `window` updates, fails once more than `max_fraction`
  of them were skipped (only when `window` updates have been seen, so a
  short bad patch at the start of a run is judged on a full window)."""

  def __init__(self, window: int, max_fraction: float, what: str = 'updates'):
    self._finite = collections.deque(maxlen=window)
    self._max_fraction = max_fraction
    self._what = what
    self.last_finite_step: Optional[int] = None

  def observe(self, finite, steps) -> Optional[str]:
    """finite: bool [K], steps: int [K] (each update's step count).
    Returns a description of the stall, or None while the learner is
    healthy."""
    finite = np.asarray(finite, bool).reshape(-1)
    steps = np.asarray(steps).reshape(-1)
    for ok, step in zip(finite, steps):
      self._finite.append(bool(ok))
      if ok:
        self.last_finite_step = int(step)
    full = len(self._finite) == self._finite.maxlen
    skipped = self._finite.maxlen - sum(self._finite) if full else 0
    if full and skipped > self._max_fraction * self._finite.maxlen:
      last = ('none in this launch' if self.last_finite_step is None
              else f'at step {self.last_finite_step}')
      return (f'{skipped} of the last {self._finite.maxlen} {self._what} '
              f'were skipped as non-finite (max_skipped_fraction='
              f'{self._max_fraction}); last finite update {last}')
    return None
