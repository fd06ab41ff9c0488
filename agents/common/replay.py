"""Reverb replay for n-step transitions: table, adder, and learner batches.

The table samples uniformly, removes FIFO, and is rate-limited by a
SampleToInsertRatio: the learner cannot sample faster than
`samples_per_insert` per inserted item (± error_buffer), and actors block on
insert when the learner falls behind, so a slow learner throttles the actors.

Transitions come from Acme's NStepTransitionAdder, whose `discount` holds one
factor of γ fewer than the bootstrap needs (Γ = d₀·γd₁·…·γ^{n-1}d_{n-1});
`to_batch` multiplies by γ once, giving the learner the whole multiplier.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Optional

import dm_env
import numpy as np

from agents.mpo import learner as learner_lib

TABLE = 'transitions'


def make_table(environment_spec, *, max_size: int, min_size: int,
               samples_per_insert: float, error_buffer: float,
               name: str = TABLE):
  """A Reverb table for n-step transitions of `environment_spec`."""
  import reverb
  from acme.adders.reverb import NStepTransitionAdder
  limiter = reverb.rate_limiters.SampleToInsertRatio(
      min_size_to_sample=min_size, samples_per_insert=samples_per_insert,
      error_buffer=error_buffer)
  return reverb.Table(
      name=name, sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=max_size,
      rate_limiter=limiter,
      signature=NStepTransitionAdder.signature(environment_spec))


def environment_spec(environment: dm_env.Environment):
  from acme import specs
  return specs.make_environment_spec(environment)


class Stopped(Exception):
  """Raised inside a blocked replay call once the program asked to stop."""


_POLL_MS = 500


def _interruptible(call, should_stop: Callable[[], bool]):
  """Wraps a Reverb writer call that may block on the rate limiter forever
  (flush/end_episode without a timeout) into a loop of short timeouts that
  gives up with `Stopped` once `should_stop()` is true."""
  import reverb

  def wrapped(*args, timeout_ms=None, **kwargs):
    if timeout_ms is not None:
      return call(*args, timeout_ms=timeout_ms, **kwargs)
    while True:
      try:
        return call(*args, timeout_ms=_POLL_MS, **kwargs)
      except reverb.errors.DeadlineExceededError:
        if should_stop():
          raise Stopped() from None
  return wrapped


def make_adder(server_address: str, *, n_step: int, discount: float,
               should_stop: Callable[[], bool] = lambda: False,
               table: str = TABLE):
  """An n-step transition adder whose blocking writes can be interrupted.

  When the learner stops sampling, SampleToInsertRatio blocks inserts, and
  Acme's adder would wait forever inside `flush`; here it raises `Stopped`
  once `should_stop()` says the program is stopping.
  """
  import reverb
  from acme.adders.reverb import NStepTransitionAdder

  class _Adder(NStepTransitionAdder):

    @property
    def _writer(self):
      writer = super()._writer
      if not getattr(writer, '_tandem_interruptible', False):
        writer.flush = _interruptible(writer.flush, should_stop)
        writer.end_episode = _interruptible(writer.end_episode, should_stop)
        writer._tandem_interruptible = True
      return writer

  client = reverb.Client(server_address)
  return _Adder(client, n_step=n_step, discount=discount,
                priority_fns={table: None})


def to_batch(data, discount: float, k: int, b: int) -> learner_lib.Batch:
  """An Acme Transition of [k·b, ...] numpy arrays -> Batch of [k, b, ...]."""
  shape = lambda x: np.asarray(x).reshape((k, b) + np.asarray(x).shape[1:])
  return learner_lib.Batch(
      observation=shape(data.observation).astype(np.float32),
      action=shape(data.action).astype(np.float32),
      reward=shape(data.reward).astype(np.float32),
      discount=(discount * shape(data.discount)).astype(np.float32),
      next_observation=shape(data.next_observation).astype(np.float32))


class BatchStream:
  """Background thread reading [K, B] batches from a Reverb table.

  `get(timeout)` returns a Batch, or None if none arrived in time (for
  example because actors stopped and the rate limiter blocks sampling), so
  the caller can keep checking for a stop request. Sampling waits on the rate
  limiter in short slices, so `close()` ends the thread promptly instead of
  leaving it blocked inside Reverb when the process exits.
  """

  def __init__(self, server_address: str, *, batch_size: int,
               steps_per_call: int, discount: float, table: str = TABLE,
               prefetch: int = 2):
    self._args = (server_address, batch_size, steps_per_call, discount, table)
    self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
    self._error: Optional[BaseException] = None
    self._closed = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name='reverb-batches')
    self._thread.start()

  def _run(self):
    try:
      import reverb
      address, b, k, discount, table = self._args
      while not self._closed.is_set():
        # A rate-limiter timeout ends the dataset; make a new one and go on.
        dataset = reverb.TrajectoryDataset.from_table_signature(
            server_address=address, table=table,
            max_in_flight_samples_per_worker=2 * b * k,
            rate_limiter_timeout_ms=_POLL_MS)
        dataset = dataset.batch(b * k, drop_remainder=True)
        for sample in dataset.as_numpy_iterator():
          batch = to_batch(sample.data, discount, k, b)
          while not self._closed.is_set():
            try:
              self._queue.put(batch, timeout=_POLL_MS / 1000)
              break
            except queue.Full:
              pass
          if self._closed.is_set():
            break
    except BaseException as e:  # surfaced to the learner by get()
      if not self._closed.is_set():
        self._error = e

  def get(self, timeout: float) -> Optional[learner_lib.Batch]:
    if self._error is not None:
      raise RuntimeError(f'replay sampling failed: {self._error!r}') from \
          self._error
    try:
      return self._queue.get(timeout=timeout)
    except queue.Empty:
      return None

  def close(self, timeout: float = 5.0) -> None:
    self._closed.set()
    self._thread.join(timeout)
