"""Program-level nodes shared by Tandem's programs: the counter and the limiter.

CounterNode owns the global counts, checkpoints them to counter.json, and
publishes progress.json (what the launcher's status line reads). The
StepsLimiter stops the program cleanly at the global env-step budget: the
learner stops updating and checkpoints (`finish`), the final evaluation of
those parameters, the counter's checkpoint, final.json, then lp.stop().
"""

from __future__ import annotations

import collections
import logging
import math
import os
import time

from tandem.agents.runtime import counting
from tandem.agents.core import files
from tandem.agents.runtime.lifecycle import Stopping, call, stop_requested
from tandem.agents.runtime.rundir import RunDir, capture_errors


def _finite_or_none(value):
  """`value` where it is a finite number, else None (JSON's null)."""
  finite = (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value))
  return value if finite else None


class CounterNode(counting.Counter):
  """The global Counter, served over Courier, with periodic checkpoints."""

  def __init__(self, run_dir: str, budget: int, resume: bool = False,
               checkpoint_period_s: float = 30.0):
    self._rd = RunDir(run_dir)
    super().__init__(self._rd.counter, restore=resume)
    self._budget = budget
    self._period = checkpoint_period_s
    self._window = collections.deque(maxlen=30)

  def run(self):
    with capture_errors(self._rd, 'counter'):
      last_save = time.monotonic()
      try:
        while not stop_requested(1.0):
          self._publish_progress()
          if time.monotonic() - last_save > self._period:
            self.save()
            last_save = time.monotonic()
      finally:
        self.save()  # the counts survive a stop, and an error here too
        self._publish_progress()

  def _publish_progress(self):
    snap = self.get_counts()
    self._window.append(snap)
    first = self._window[0]
    r = counting.rates(first, snap)
    extra = self.get_extra()
    left = max(0, self._budget - snap['env_steps'])
    eta = left / r['env_steps_per_s'] if r['env_steps_per_s'] > 0 else None
    files.write_json_atomic(self._rd.progress, {
        'counts': snap, 'budget': self._budget, **r,
        **counting.since_start(snap), 'eta_s': eta,
        'last_eval_return': extra.get('last_eval_return'),
        'learner_device': extra.get('learner_device'),
        'time': time.time()})


class StepsLimiter:
  """Polls the counter; at the budget, finishes the run cleanly and stops."""

  def __init__(self, counter, learner, evaluator, budget: int, run_dir: str,
               final_eval_episodes: int):
    self._counter = counter
    self._learner = learner
    self._evaluator = evaluator
    self._budget = budget
    self._rd = RunDir(run_dir)
    self._episodes = final_eval_episodes

  def run(self):
    import launchpad as lp
    with capture_errors(self._rd, 'limiter'):
      try:
        while not stop_requested(1.0):
          if call(self._counter, 'get_counts')['env_steps'] >= self._budget:
            break
        else:
          return  # someone else stopped the program
      except Stopping:
        return
      logging.info('limiter: budget of %d env steps reached', self._budget)
      try:
        # The learner stops updating first, so what is evaluated is what
        # the checkpoint holds; the evaluation's row carries the counts the
        # checkpoint holds, so a resume past the budget keeps it.
        done = call(self._learner, 'finish')
        checkpoint = done['checkpoint']
        # Until final.json exists: a resume sets a final row logged at
        # these counts aside (resume.set_aside_unfinished_final) rather
        # than keep it beside the one its own final evaluation logs.
        files.write_json_atomic(self._rd.final_pending,
                                {'counts': done['counts']})
        final = call(self._evaluator, 'evaluate_now', self._episodes, 'final',
                     done['counts'])
        call(self._counter, 'set_extra', finished=True)
        call(self._counter, 'save')
        counts = call(self._counter, 'get_counts')
      except Stopping:
        return  # stopped during the final steps: no final.json
      files.write_json_atomic(self._rd.final, {
          'final_eval_return': final['eval_return'],
          'final_eval_returns_min_max': [final['eval_return_min'],
                                         final['eval_return_max']],
          # NaN (null) unless the run evaluates its samples too.
          'final_eval_sampled_return': _finite_or_none(
              final.get('eval_sampled_return')),
          # The counter's after the final evaluation (its time and faults
          # included), and those the checkpoint and the final row hold.
          'counts': counts, 'checkpoint_counts': done['counts'],
          'budget': self._budget, 'learner_checkpoint': checkpoint,
          # When the stop began: each node's stop path is timed from here.
          'stop_time': time.time()})
      try:
        os.remove(self._rd.final_pending)
      except OSError as e:  # the run finished; a resume removes it
        logging.warning('limiter: could not remove %s: %r',
                        self._rd.final_pending, e)
    lp.stop()
