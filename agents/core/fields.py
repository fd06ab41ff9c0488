"""Checks of config fields: each failure names the field, what it expects
and what it got, so a bad value stops before any process starts."""

from __future__ import annotations

import math
from typing import Any


class ConfigError(ValueError):
  """A config field holds a value outside its accepted range."""


def fail(owner: str, field: str, expected: str, got: Any) -> None:
  raise ConfigError(f'{owner}.{field}: expected {expected}, got {got!r}')


# The learner computes in float32: a value outside its normal range becomes
# inf or 0 in-graph (an epsilon of 1e-300 is 0, a temperature of 1e39 inf),
# and every update is then skipped or meaningless.
FLOAT32_TINY, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e+38


def positive(owner, field, value):
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
      math.isfinite(value) and FLOAT32_TINY <= value <= FLOAT32_MAX):
    fail(owner, field, 'a finite number > 0 that float32 holds '
          f'({FLOAT32_TINY:.3g} to {FLOAT32_MAX:.3g})', value)


def positive_at_most(owner, field, value, high, why):
  """A finite number > 0 that float32 holds, no larger than `high`; `why`:
  what the upper bound protects, for the message."""
  positive(owner, field, value)
  if value > high:
    fail(owner, field, f'a number > 0 and <= {high:g} ({why})', value)


def non_negative(owner, field, value):
  if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
      math.isfinite(value) and (value == 0 or
                                FLOAT32_TINY <= value <= FLOAT32_MAX)):
    fail(owner, field, 'a finite number >= 0 that float32 holds '
          f'(0, or {FLOAT32_TINY:.3g} to {FLOAT32_MAX:.3g})', value)


# The largest learner-step count: steps, horizons and periods meet the
# learner's int32 step counters in-graph, where a larger one would wrap.
MAX_STEP_COUNT = 2**31 - 1


def int_at_least(owner, field, value, low):
  if not isinstance(value, int) or isinstance(value, bool) or value < low:
    fail(owner, field, f'an integer >= {low}', value)


def step_count(owner, field, value, low=1, zero=''):
  """A count of learner (or discriminator) steps: an int32 in-graph. `zero`:
  what 0 means, where low is 0 and 0 stands for something else."""
  if (not isinstance(value, int) or isinstance(value, bool) or
      not low <= value <= MAX_STEP_COUNT):
    meaning = f'; 0: {zero}' if zero else ''
    fail(owner, field, f'an integer in [{low}, {MAX_STEP_COUNT}] (a step '
          f'count, int32 in the learner{meaning})', value)


def schedule_horizon(owner, value):
  """A schedule's horizon in its group's steps, or 0 for the steps the run's
  budget pays for (launch/horizons.py sets that count at launch)."""
  step_count(owner, 'schedule_horizon', value, low=0,
             zero='the steps the budget pays for')


def fixed_horizon(config) -> int:
  """The horizon a learner's state holds: a count, never 0, which only a
  launch can turn into one (it knows the budget)."""
  if config.schedule_horizon == 0:
    fail(type(config).__name__, 'schedule_horizon',
         "a step count for the learner; 0 (the budget's) is set by the "
         'launch, launch/horizons.over_the_budget', 0)
  return config.schedule_horizon


def one_of(owner, field, value, choices):
  if value not in choices:
    fail(owner, field, f'one of {list(choices)}', value)


def unit_interval(owner, field, value, *, open_low=True, open_high=False):
  """A number in (0, 1], or [0, ...) / ..., 1) as the flags open its ends."""
  ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
      (0 < value if open_low else 0 <= value) and
      (value < 1 if open_high else value <= 1))
  if not ok:
    fail(owner, field, f"a number in {'(' if open_low else '['}0, "
         f"1{')' if open_high else ']'}", value)


def layers(owner, field, value) -> tuple:
  """Checks a tuple of hidden-layer sizes; returns it as a tuple."""
  if (not isinstance(value, (tuple, list)) or not value or
      not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1
              for x in value)):
    fail(owner, field, 'a non-empty tuple of integers >= 1', value)
  return tuple(value)
