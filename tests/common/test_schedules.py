"""Schedules depend on the global count only: rounds and restarts change nothing."""

import numpy as np
import pytest

from agents.common import schedules


@pytest.mark.parametrize('kind', ['constant', 'linear', 'cosine'])
def test_rounds_equal_one_long_run_exactly(kind):
  horizon, rounds, per_round = 1000, 7, 150
  long_run = [float(schedules.value(kind, 1e-3, 0.1, c, horizon))
              for c in range(rounds * per_round)]
  count, split = 0, []
  for _ in range(rounds):            # each round continues the global count
    for _ in range(per_round):
      split.append(float(schedules.value(kind, 1e-3, 0.1, count, horizon)))
      count += 1
  assert split == long_run


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
