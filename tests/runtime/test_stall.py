"""StallMonitor: a run of skipped updates becomes a named error."""

import numpy as np

from tandem.agents.runtime.stall import StallMonitor


def test_healthy_and_sparse_skips_pass():
  m = StallMonitor(window=10, max_fraction=0.5)
  for i in range(0, 100, 2):
    # One update in four skipped: well under half.
    assert m.observe([i % 4 != 0, True], [i, i + 1]) is None
  assert m.last_finite_step == 99


def test_a_full_window_of_mostly_skipped_updates_is_reported():
  m = StallMonitor(window=10, max_fraction=0.5, what='generator updates')
  assert m.observe(np.ones(4, bool), np.arange(4)) is None
  # Five skipped of the last ten is not more than half ...
  assert m.observe(np.zeros(5, bool), np.arange(4, 9)) is None
  assert m.observe([True], [9]) is None
  # ... six is: the window is now T T T F F F F F T F.
  msg = m.observe([False], [10])
  assert msg is not None
  assert '6 of the last 10 generator updates' in msg
  assert 'at step 9' in msg


def test_judged_only_on_a_full_window():
  m = StallMonitor(window=100, max_fraction=0.1)
  assert m.observe(np.zeros(50, bool), np.arange(50)) is None
  assert m.last_finite_step is None
  msg = m.observe(np.zeros(50, bool), np.arange(50, 100))
  assert 'none in this launch' in msg
