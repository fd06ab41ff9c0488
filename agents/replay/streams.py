"""Reading replay rows back as the learner's [K, B] batches.

Why not Acme's dataset: `acme.datasets.reverb.make_reverb_dataset` gives a
tf.data pipeline whose sampling blocks in the rate limiter with no way to give
up, where BatchStream must notice a stop request within a second (Launchpad
kills nodes that do not stop in time) and convert packed rows.
"""

from __future__ import annotations

import queue
import threading
from typing import Any, Callable, Optional

import numpy as np

from tandem.agents.replay import layouts
from tandem.agents.replay.layouts import COLUMN, TABLE

class ReplayUnavailable(RuntimeError):
  """Sampling from the replay server failed: it died, or stopped first."""


class BatchStream:
  """Background thread reading [K, B] batches from a Reverb table.

  `get(timeout)` returns a Batch, or None if none arrived in time (for
  example because actors stopped and the rate limiter blocks sampling), so
  the caller can keep checking for a stop request. Sampling waits on the rate
  limiter in short slices, so `close()` ends the thread promptly instead of
  leaving it blocked inside Reverb when the process exits.
  """

  def __init__(self, server_address: str, convert: Callable[[np.ndarray], Any],
               *, rows_per_call: int, table: str = TABLE, prefetch: int = 2):
    """convert: packed rows [rows_per_call, width] -> what get() returns
    (e.g. `functools.partial(layouts.to_batch, layout=..., discount=...,
    k=..., b=...)`). prefetch: calls read ahead of use, both queued and
    requested from Reverb (which samples a row when it is requested), >= 1;
    a table of the newest rows is best read with 1."""
    if prefetch < 1:
      raise ValueError(f'prefetch must be >= 1, got {prefetch}')
    self._convert = convert
    self._args = (server_address, rows_per_call, table, prefetch)
    self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
    self._error: Optional[BaseException] = None
    self._closed = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name='reverb-batches')
    self._thread.start()

  def _run(self):
    try:
      import reverb
      address, rows, table, prefetch = self._args
      # Rows sampled but not yet delivered, kept across datasets: the rate
      # limiter has counted them, so dropping them would lose that much of
      # the learner's allowance (with inserts slower than the timeout and a
      # large call, every sample). Reverb 0.7.0 still loses the samples its
      # sampler holds when a timeout reaches it before they were taken
      # (README).
      carry: list = []
      while not self._closed.is_set():
        # A rate-limiter timeout ends the dataset (with a partial last
        # batch); make a new one and go on.
        dataset = reverb.TrajectoryDataset.from_table_signature(
            server_address=address, table=table,
            max_in_flight_samples_per_worker=prefetch * rows,
            rate_limiter_timeout_ms=layouts.POLL_MS)
        dataset = dataset.batch(rows, drop_remainder=False)
        for sample in dataset.as_numpy_iterator():
          data = sample.data[COLUMN]
          if carry or len(data) < rows:
            carry.append(data)
            data = np.concatenate(carry)
            if len(data) < rows:
              carry = [data]
              continue
            carry = [data[rows:]] if len(data) > rows else []
            data = data[:rows]
          if not self._put(self._convert(data)):
            break
    except BaseException as e:  # noqa: BLE001  (surfaced to the learner by get())
      if not self._closed.is_set():
        self._error = e

  def _put(self, batch) -> bool:
    """Queues `batch`, waiting for room; False if closed meanwhile."""
    while not self._closed.is_set():
      try:
        self._queue.put(batch, timeout=layouts.POLL_MS / 1000)
        return True
      except queue.Full:
        pass
    return False

  def get(self, timeout: float):
    if self._error is not None:
      raise ReplayUnavailable(
          f'replay sampling failed: {self._error!r}') from self._error
    try:
      return self._queue.get(timeout=timeout)
    except queue.Empty:
      return None

  def close(self, timeout: float = 1.0) -> None:
    """Ends the thread: within layouts.POLL_MS while the server answers. At a
    program's stop the replay node usually goes first, and the thread then
    stays blocked in Reverb's client however long it is given (it is a
    daemon: the process exits regardless); a 5 s wait here was 5 s added to
    every learner's stop."""
    self._closed.set()
    self._thread.join(timeout)
