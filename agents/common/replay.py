"""Reverb replay for n-step transitions: table, adder, and learner batches.

The table samples uniformly, removes FIFO, and is rate-limited by a
SampleToInsertRatio: the learner cannot sample faster than
`samples_per_insert` per inserted item (± error_buffer), and actors block on
insert when the learner falls behind, so a slow learner throttles the actors.

Each item is one n-step transition packed into one float32 row
(`TransitionLayout`): one column to append, chunk, compress and decode
instead of five, which is most of what an actor spends per step on replay
(bench/actor.py). The values follow Acme's NStepTransitionAdder convention
(tests/common/test_replay.py compares them side by side): `discount` holds
one factor of γ fewer than the bootstrap needs (Γ = d₀·γd₁·…·γ^{n-1}d_{n-1});
`to_batch` multiplies by γ once, giving the learner the whole multiplier.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Callable, NamedTuple, Optional

import dm_env
import numpy as np

from agents.common import lifecycle
from agents.mpo import learner as learner_lib

TABLE = 'transitions'
COLUMN = 'transition'


class TransitionLayout(NamedTuple):
  """Where each field sits in a packed transition row of `width` float32s:

    [observation (O) | action (D) | reward | discount | next_observation (O)]
  """
  observation_dim: int
  action_dim: int

  @property
  def width(self) -> int:
    return 2 * self.observation_dim + self.action_dim + 2

  def pack(self, observation, action, reward, discount,
           next_observation) -> np.ndarray:
    """Fields of one transition -> row [width] float32."""
    o, d = self.observation_dim, self.action_dim
    row = np.empty((self.width,), np.float32)
    row[:o] = observation
    row[o:o + d] = action
    row[o + d] = reward
    row[o + d + 1] = discount
    row[o + d + 2:] = next_observation
    return row

  def unpack(self, rows: np.ndarray) -> dict:
    """rows [..., width] -> dict of observation [..., O], action [..., D],
    reward [...], discount [...], next_observation [..., O] (views)."""
    o, d = self.observation_dim, self.action_dim
    if rows.shape[-1] != self.width:
      raise ValueError(f'transition rows have width {rows.shape[-1]}; this '
                       f'layout (O={o}, D={d}) needs {self.width}')
    return dict(observation=rows[..., :o], action=rows[..., o:o + d],
                reward=rows[..., o + d], discount=rows[..., o + d + 1],
                next_observation=rows[..., o + d + 2:])


def make_table(layout: TransitionLayout, *, max_size: int, min_size: int,
               samples_per_insert: float, error_buffer: float,
               name: str = TABLE):
  """A Reverb table of packed n-step transitions."""
  import reverb
  import tensorflow as tf
  limiter = reverb.rate_limiters.SampleToInsertRatio(
      min_size_to_sample=min_size, samples_per_insert=samples_per_insert,
      error_buffer=error_buffer)
  return reverb.Table(
      name=name, sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=max_size,
      rate_limiter=limiter,
      signature={COLUMN: tf.TensorSpec([layout.width], tf.float32)})


# Raised inside a blocked replay write once the program asked to stop.
Stopped = lifecycle.Stopping


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


class _RowWriter:
  """Appends packed rows to a Reverb writer, one item per row.

  Rows go straight to reverb's C++ TrajectoryWriter (the pybind object
  behind `reverb.TrajectoryWriter`, in the reverb 0.7.0 that
  requirements.lock pins). The Python wrapper re-derives the data's
  structure and wraps every reference on each `append` and `create_item`,
  about 10 µs per transition, half of what writing costs (bench/actor.py);
  a single packed column needs none of it. Flush and end-of-episode keep the
  wrapper's calls, for their timeout errors.
  """

  def __init__(self, client, table: str, chunk_length: int):
    from reverb import pybind
    self.writer = client.trajectory_writer(num_keep_alive_refs=chunk_length)
    self._cpp = self.writer._writer  # pylint: disable=protected-access
    # Fixed-length chunks: the auto-tuner's bookkeeping costs more than it
    # saves for rows of a few hundred bytes.
    self._cpp.ConfigureChunker(0, pybind.ConstantChunkerOptions(
        max_chunk_length=chunk_length, num_keep_alive_refs=chunk_length))
    self._table = table

  def write(self, row: np.ndarray) -> None:
    (ref,) = self._cpp.Append([row])
    self._cpp.CreateItem(self._table, 1.0, [[ref]], [True])


class NStepAdder:
  """Writes one actor's episodes to a Reverb table as n-step transitions.

  The transitions of Acme's NStepTransitionAdder, except that Acme also
  writes shorter transitions (1…n-1 steps) from each episode's first state;
  here every start state gets one transition, so initial states are not
  oversampled. The n-step return is accumulated incrementally and each
  transition is one packed row and one item. For a start step t with
  m = min(n, steps left) steps:
    reward   R = r_t + γ d_t r_{t+1} + … + γ^{m-1} d_t…d_{t+m-2} r_{t+m-1}
    discount Γ = γ^{m-1} d_t…d_{t+m-1}   (the learner multiplies by γ once)
  Every `flush_every` steps the writer's flush waits until at most
  `max_in_flight_items` items are unconfirmed (this is where the rate
  limiter blocks an actor); it waits in short slices and gives up with
  `Stopped` once `should_stop()` is true. Flushing rarely matters: each
  flush waits for a server round trip.
  """

  def __init__(self, client, layout: TransitionLayout, *, n_step: int,
               discount: float, table: str = TABLE,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 50, max_in_flight_items: int = 25,
               chunk_length: int = 16):
    self._client = client
    self._layout = layout
    self._n = n_step
    self._gamma = float(discount)
    self._table = table
    self._should_stop = should_stop
    self._flush_every = flush_every
    self._max_in_flight = max_in_flight_items
    self._chunk_length = chunk_length
    self._rows: Optional[_RowWriter] = None
    # Python floats: scalar arithmetic on numpy scalars costs several times
    # more, and the sums are rounded to float32 once, when packed.
    self._pending: list = []   # [obs, action, return, coef, gamma_prod]
    self._obs = None
    self._since_flush = 0

  def _ensure_writer(self):
    if self._rows is None:
      self._rows = _RowWriter(self._client, self._table, self._chunk_length)
      self._flush = _interruptible(self._rows.writer.flush, self._should_stop)
      self._end = _interruptible(self._rows.writer.end_episode,
                                 self._should_stop)

  def add_first(self, timestep: dm_env.TimeStep) -> None:
    self._ensure_writer()
    if self._pending:
      raise ValueError('add_first called before the previous episode ended')
    self._obs = np.asarray(timestep.observation)

  def add(self, action, next_timestep: dm_env.TimeStep, extras=()) -> None:
    del extras
    if self._obs is None:
      raise ValueError('add called before add_first')
    r = float(next_timestep.reward)
    d = float(next_timestep.discount)
    self._pending.append([self._obs, action, 0.0, 1.0, 1.0])
    for p in self._pending:
      p[2] += p[3] * r              # return
      p[4] = p[3] * d               # γ^{k} d_t…d_{t+k}
      p[3] *= d * self._gamma       # weight of the next reward
    next_obs = np.asarray(next_timestep.observation)
    if len(self._pending) == self._n:
      self._write(self._pending.pop(0), next_obs)
    if next_timestep.last():
      while self._pending:
        self._write(self._pending.pop(0), next_obs)
      self._end(clear_buffers=True)
      self._obs, self._since_flush = None, 0
    else:
      self._obs = next_obs
      self._since_flush += 1
      if self._since_flush >= self._flush_every:
        self._flush(self._max_in_flight)
        self._since_flush = 0

  def _write(self, p, next_obs) -> None:
    obs, action, ret, _, gamma_prod = p
    self._rows.write(
        self._layout.pack(obs, action, ret, gamma_prod, next_obs))

  def reset(self) -> None:
    self._pending, self._obs = [], None
    if self._rows is not None:
      self._end(clear_buffers=True)

  def close(self) -> None:
    """Drops an unfinished episode's pending transitions and closes the
    writer's stream (a server stops promptly only once streams are closed).
    Never raises: it runs on the way down, after whatever stopped the actor,
    and must not mask that error."""
    self._pending, self._obs = [], None
    rows, self._rows = self._rows, None
    if rows is not None:
      try:
        rows.writer.close()
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('replay writer did not close cleanly: %r', e)


def make_adder(server_address: str, layout: TransitionLayout, *,
               n_step: int, discount: float,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 50, table: str = TABLE) -> NStepAdder:
  import reverb
  return NStepAdder(reverb.Client(server_address), layout, n_step=n_step,
                    discount=discount, table=table, should_stop=should_stop,
                    flush_every=flush_every)


def to_batch(rows: np.ndarray, layout: TransitionLayout, discount: float,
             k: int, b: int) -> learner_lib.Batch:
  """Packed rows [k·b, width] -> Batch of [k, b, ...] float32 arrays, with
  the discount multiplied by γ once (see the module docstring)."""
  rows = np.asarray(rows, np.float32).reshape((k, b, layout.width))
  f = layout.unpack(rows)
  return learner_lib.Batch(
      observation=np.ascontiguousarray(f['observation']),
      action=np.ascontiguousarray(f['action']),
      reward=np.ascontiguousarray(f['reward']),
      discount=(np.float32(discount) * f['discount']).astype(np.float32),
      next_observation=np.ascontiguousarray(f['next_observation']))


class BatchStream:
  """Background thread reading [K, B] batches from a Reverb table.

  `get(timeout)` returns a Batch, or None if none arrived in time (for
  example because actors stopped and the rate limiter blocks sampling), so
  the caller can keep checking for a stop request. Sampling waits on the rate
  limiter in short slices, so `close()` ends the thread promptly instead of
  leaving it blocked inside Reverb when the process exits.
  """

  def __init__(self, server_address: str, layout: TransitionLayout, *,
               batch_size: int, steps_per_call: int, discount: float,
               table: str = TABLE, prefetch: int = 2):
    self._layout = layout
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
          batch = to_batch(sample.data[COLUMN], self._layout, discount,
                           k, b)
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
