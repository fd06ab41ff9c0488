"""Schedules are pure functions of a global count and a horizon."""

import numpy as np
import pytest

from tandem.agents.core import schedules


@pytest.mark.parametrize('kind, want', [
    ('constant', 1e-3),
    ('linear', 1e-3 * (1 - 0.25 + 0.25 * 0.1)),
    ('cosine', 1e-3 * (0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * 0.25))))])
def test_value_is_a_function_of_the_global_count_and_horizon(kind, want):
  # A quarter of the horizon, however that count was reached. That rounds
  # and resumes reach it with the global count is tested where the counts
  # are kept (tests/ail/test_learner.py::test_schedules_over_rounds_...).
  assert float(schedules.value(kind, 1e-3, 0.1, 250, 1000)) == \
      pytest.approx(want, rel=1e-6)
  assert float(schedules.value(kind, 1e-3, 0.1, np.int32(250),
                               np.int32(1000))) == pytest.approx(want, rel=1e-6)


def test_endpoints_and_clipping():
  assert float(schedules.value('linear', 1.0, 0.1, 0, 100)) == 1.0
  assert float(schedules.value('linear', 1.0, 0.1, 100, 100)) == \
      pytest.approx(0.1)
  assert float(schedules.value('linear', 1.0, 0.1, 10**6, 100)) == \
      pytest.approx(0.1)
  assert float(schedules.value('cosine', 1.0, 0.0, 50, 100)) == \
      pytest.approx(0.5, abs=1e-6)
  v = [float(schedules.value('cosine', 1.0, 0.0, c, 100)) for c in range(101)]
  assert np.all(np.diff(v) <= 1e-7)
  with pytest.raises(ValueError, match='schedule kind'):
    schedules.value('exp', 1.0, 0.1, 0, 10)


@pytest.mark.parametrize('kind', ['linear', 'cosine'])
def test_a_hold_keeps_the_initial_value_then_runs_over_the_rest(kind):
  # Held for the first 60 of 100 counts, then the schedule over 60..100:
  # at 80 it is where an unheld one is half way, at 100 at its final value.
  held = lambda c: float(schedules.value(kind, 1.0, 0.1, c, 100, 0.6))
  plain = lambda c: float(schedules.value(kind, 1.0, 0.1, c, 100))
  assert [held(c) for c in (0, 30, 60)] == [1.0, 1.0, 1.0]
  assert held(61) < 1.0
  assert held(80) == pytest.approx(plain(50), rel=1e-6)
  assert held(100) == pytest.approx(0.1) and held(10**6) == pytest.approx(0.1)
  assert held(90) == pytest.approx(plain(75), rel=1e-6)
