"""The program's global counts, owned by one Counter and checkpointed.

Counts: env_steps (actors), episodes, learner_steps, discriminator_steps,
rounds, env_faults (environment exceptions the actors and the evaluator
survived, agents/envs/env_faults.py), and elapsed_s, the wall time the
program has run, summed over its launches (carried across restarts; the time
between a stop and a resume is not counted). Every rate, schedule, log row
and budget in Tandem is keyed to these, never to how long the current call
or process has run.

Why not `acme.utils.counting.Counter`: Acme's counter keeps counts in memory
(its save/restore hand a dict to a checkpointer) and its time is per process;
Tandem needs the wall time the program has run to survive a
restart (every fps figure is over it), and the counts written atomically to a
JSON file that a resume validates before launch. Acme's counter can still
count an `acme.EnvironmentLoop` that runs a Tandem actor.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from typing import Mapping, Optional

from tandem.agents.core.files import write_json_atomic

COUNT_KEYS = ('env_steps', 'episodes', 'learner_steps', 'discriminator_steps',
              'rounds', 'env_faults')


class CounterStateError(ValueError):
  """The counter file is missing, unreadable, or not a Tandem counter."""


def is_seconds(v) -> bool:
  """A finite number of seconds >= 0 (bool is not one)."""
  return (isinstance(v, (int, float)) and not isinstance(v, bool) and
          math.isfinite(v) and v >= 0)


def is_count(v) -> bool:
  """A non-negative whole number JSON can hold exactly (bool is not one)."""
  return (isinstance(v, (int, float)) and not isinstance(v, bool) and
          math.isfinite(v) and 0 <= v < 2**53 and float(v).is_integer())


class Counter:
  """Thread-safe global counts with a wall clock that survives restarts."""

  def __init__(self, path: Optional[str] = None, restore: bool = False,
               clock=time.monotonic):
    self._path = path
    self._clock = clock
    self._lock = threading.Lock()
    self._counts = {k: 0 for k in COUNT_KEYS}
    self._elapsed_before = 0.0
    self._started = clock()
    self._extra: dict = {}
    if restore:
      if path is None or not os.path.exists(path):
        raise CounterStateError(f'counter state {path}: no such file')
      self._load(path)

  def _load(self, path):
    try:
      with open(path) as f:
        state = json.load(f)
      raw, elapsed = state['counts'], state['elapsed_s']
      extra = dict(state.get('extra', {}))
      items = list(raw.items())
    except (OSError, ValueError, RecursionError, KeyError, TypeError,
            AttributeError) as e:
      raise CounterStateError(f'counter state {path}: unreadable ({e})') from e
    # Wrong values would be carried on: a NaN elapsed_s into every later
    # rate, a negative or fractional count into budgets and schedules.
    for k, v in items:
      if k not in COUNT_KEYS:
        raise CounterStateError(
            f'counter state {path}: unknown count {k!r}; counts are '
            f'{list(COUNT_KEYS)}')
      if not is_count(v):
        raise CounterStateError(
            f'counter state {path}: counts.{k} is {v!r}; expected a '
            'non-negative whole number')
    if not is_seconds(elapsed):
      raise CounterStateError(
          f'counter state {path}: elapsed_s is {elapsed!r}; expected a '
          'finite number of seconds >= 0')
    self._elapsed_before = float(elapsed)
    self._counts.update({k: int(v) for k, v in items})
    self._extra = extra

  def increment(self, **deltas: int) -> dict:
    """Adds to the named counts and returns all counts (with elapsed_s)."""
    with self._lock:
      for k, v in deltas.items():
        if k not in self._counts:
          raise KeyError(f'unknown count {k!r}; counts are {list(COUNT_KEYS)}')
        self._counts[k] += int(v)
      return self._snapshot()

  def set_counts(self, **counts: int) -> dict:
    """Sets the named counts (the learner's restored state is the authority
    for its own step counts on a resume); returns all counts."""
    with self._lock:
      for k, v in counts.items():
        if k not in self._counts:
          raise KeyError(f'unknown count {k!r}; counts are {list(COUNT_KEYS)}')
        self._counts[k] = int(v)
      return self._snapshot()

  def get_counts(self) -> dict:
    with self._lock:
      return self._snapshot()

  def set_extra(self, **values) -> None:
    """Stores small JSON-able facts (e.g. last evaluation) with the counts."""
    with self._lock:
      self._extra.update(values)

  def get_extra(self) -> dict:
    with self._lock:
      return dict(self._extra)

  def _snapshot(self) -> dict:
    out = dict(self._counts)
    out['elapsed_s'] = self._elapsed_before + (self._clock() - self._started)
    return out

  def state(self) -> dict:
    with self._lock:
      snap = self._snapshot()
      return {'counts': {k: snap[k] for k in COUNT_KEYS},
              'elapsed_s': snap['elapsed_s'], 'extra': dict(self._extra)}

  def save(self, path: Optional[str] = None) -> str:
    """Atomically writes the counts to `path` (default: the constructor's)."""
    path = path or self._path
    if path is None:
      raise ValueError('Counter.save: no path given')
    write_json_atomic(path, self.state())
    return path


def rates(previous: Mapping[str, float], current: Mapping[str, float],
          keys=('env_steps', 'learner_steps', 'discriminator_steps')) -> dict:
  """Per-second rates of `keys` between two snapshots (by elapsed_s)."""
  dt = current['elapsed_s'] - previous['elapsed_s']
  return {f'{k}_per_s': (current[k] - previous[k]) / dt if dt > 0 else 0.0
          for k in keys}


def since_start(counts: Mapping[str, float],
                keys=('env_steps', 'learner_steps',
                      'discriminator_steps')) -> dict:
  """Throughput over the whole run: each count over the wall time the program
  has run, all its launches (rounds and discriminator time included, the
  time between a stop and a resume not). `rates` gives the recent rate
  between two snapshots."""
  t = counts['elapsed_s']
  return {f'{k}_per_s_since_start': (counts.get(k, 0) / t if t > 0 else 0.0)
          for k in keys}
