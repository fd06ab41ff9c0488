"""Reverb replay for n-step transitions: table, adder, and learner batches.

The table samples uniformly, removes FIFO, and is rate-limited by a
SampleToInsertRatio: the learner cannot sample faster than
`samples_per_insert` per inserted item (± error_buffer), and actors block on
insert when the learner falls behind, so a slow learner throttles the actors.

Each item is one n-step transition packed into one float32 row
(`TransitionLayout`): one column to append, chunk, compress and decode
instead of five, which is most of what an actor spends per step on replay
(bench/actor.py). The values follow Acme's NStepTransitionAdder convention
(tests/replay/test_replay.py compares them side by side): `discount` holds
one factor of γ fewer than the bootstrap needs (Γ = d₀·γd₁·…·γ^{n-1}d_{n-1});
`to_batch` multiplies by γ once, giving the learner the whole multiplier.

`WindowLayout` and `WindowAdder` keep every step of the n-step sum instead
(`batches.Windows`), for learners that compute rewards themselves.

Why not Acme's parts: `acme.adders.reverb.NStepTransitionAdder` costs ~138 µs
a write against 18–19 µs for NStepAdder at 4 environments per actor, 29–34 at
one (timed in the actor loop with perf_counter; BENCHMARKS.md, Actor
throughput: it re-derives the structure of five columns on every step); it
stays the test oracle. And
`acme.datasets.reverb.make_reverb_dataset` gives a tf.data pipeline whose
sampling blocks in the rate limiter with no way to give up, where BatchStream
must notice a stop request within a second (Launchpad kills nodes that do not
stop in time) and convert packed rows.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Callable, NamedTuple, Optional

import dm_env
import numpy as np

from tandem.agents.runtime import lifecycle
from tandem.agents.core.batches import Batch, Windows

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


class WindowLayout(NamedTuple):
  """A row holding one `batches.Windows` entry of up to n steps, float32:

    [observations ((n+1)·O) | actions (n·D) | discounts (n) | weights (n) |
     bootstrap (1) | rewards (n)]
  """
  observation_dim: int
  action_dim: int
  n_step: int

  @property
  def width(self) -> int:
    o, d, n = self.observation_dim, self.action_dim, self.n_step
    return (n + 1) * o + n * d + 3 * n + 1

  def _slices(self):
    o, d, n = self.observation_dim, self.action_dim, self.n_step
    ends = np.cumsum([(n + 1) * o, n * d, n, n, 1, n])
    starts = np.concatenate([[0], ends[:-1]])
    return [slice(a, b) for a, b in zip(starts, ends)]

  def pack(self, steps, final_observation, discount: float) -> np.ndarray:
    """steps: m ≤ n tuples (observation, action, reward, env discount) from
    one start state; final_observation: o_m. Returns row [width] float32."""
    o, d, n = self.observation_dim, self.action_dim, self.n_step
    m = len(steps)
    if not 1 <= m <= n:
      raise ValueError(f'a window holds 1..{n} steps, got {m}')
    obs = np.empty((n + 1, o), np.float32)
    actions = np.zeros((n, d), np.float32)
    discounts, weights, rewards = (np.zeros((n,), np.float32)
                                   for _ in range(3))
    coef = 1.0
    for k, (ob, action, reward, env_discount) in enumerate(steps):
      obs[k], actions[k] = ob, action
      rewards[k], discounts[k], weights[k] = reward, env_discount, coef
      coef *= float(env_discount) * discount
    obs[m:] = final_observation
    row = np.empty((self.width,), np.float32)
    for sl, part in zip(self._slices(), (obs, actions, discounts, weights,
                                         [coef], rewards)):
      row[sl] = np.ravel(part)
    return row

  def unpack(self, rows: np.ndarray) -> Windows:
    """rows [..., width] -> Windows with the same leading dims."""
    o, d, n = self.observation_dim, self.action_dim, self.n_step
    if rows.shape[-1] != self.width:
      raise ValueError(f'window rows have width {rows.shape[-1]}; this layout '
                       f'(O={o}, D={d}, n={n}) needs {self.width}')
    lead = rows.shape[:-1]
    obs, act, disc, w, boot, rew = (rows[..., sl] for sl in self._slices())
    return Windows(
        observations=np.ascontiguousarray(obs).reshape(lead + (n + 1, o)),
        actions=np.ascontiguousarray(act).reshape(lead + (n, d)),
        discounts=np.ascontiguousarray(disc),
        weights=np.ascontiguousarray(w),
        bootstrap=np.ascontiguousarray(boot[..., 0]),
        rewards=np.ascontiguousarray(rew))


def layout_for(observation_dim: int, action_dim: int, n_step: int,
               window_steps: bool):
  """The row layout of a table: summed n-step transitions, or windows."""
  if window_steps:
    return WindowLayout(observation_dim, action_dim, n_step)
  return TransitionLayout(observation_dim, action_dim)


def make_table(layout, *, max_size: int, min_size: int,
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


class _RowAdder:
  """Shared writer plumbing of Tandem's adders: one packed row per item,
  flushed every `flush_every` steps (where the rate limiter blocks an actor,
  in short slices that give up with `Stopped` once `should_stop()` is true;
  each flush waits for a server round trip, so rarely), episodes ended and
  streams closed. Subclasses turn steps into rows in `_on_step`."""

  def __init__(self, client, *, table: str = TABLE,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 50, max_in_flight_items: int = 25,
               chunk_length: int = 16):
    self._client = client
    self._table = table
    self._should_stop = should_stop
    self._flush_every = flush_every
    self._max_in_flight = max_in_flight_items
    self._chunk_length = chunk_length
    self._rows: Optional[_RowWriter] = None
    self._obs = None
    self._since_flush = 0

  def _ensure_writer(self):
    if self._rows is None:
      self._rows = _RowWriter(self._client, self._table, self._chunk_length)
      self._flush = _interruptible(self._rows.writer.flush, self._should_stop)
      self._end = _interruptible(self._rows.writer.end_episode,
                                 self._should_stop)

  def _has_pending(self) -> bool:
    raise NotImplementedError

  def _clear(self) -> None:
    raise NotImplementedError

  def _on_step(self, action, reward: float, discount: float,
               next_obs: np.ndarray, last: bool) -> None:
    """Records one step from self._obs; writes the rows it completes (all of
    the episode's remaining ones if `last`)."""
    raise NotImplementedError

  def add_first(self, timestep: dm_env.TimeStep) -> None:
    self._ensure_writer()
    if self._has_pending():
      raise ValueError('add_first called before the previous episode ended')
    # Copies: rows are written up to n steps later, and an environment may
    # reuse its observation buffer (flatten_observation returns a view).
    self._obs = np.array(timestep.observation)

  def add(self, action, next_timestep: dm_env.TimeStep, extras=()) -> None:
    del extras
    if self._obs is None:
      raise ValueError('add called before add_first')
    next_obs = np.array(next_timestep.observation)
    last = next_timestep.last()
    self._on_step(action, float(next_timestep.reward),
                  float(next_timestep.discount), next_obs, last)
    if last:
      self._end(clear_buffers=True)
      self._obs, self._since_flush = None, 0
    else:
      self._obs = next_obs
      self._since_flush += 1
      if self._since_flush >= self._flush_every:
        self._flush(self._max_in_flight)
        self._since_flush = 0

  def reset(self) -> None:
    """Abandons the episode in progress, e.g. after its environment raised:
    its unfinished n-step windows are dropped, so no item spans the break;
    rows already written stay (each ends before it). `add_first` starts the
    next episode."""
    self._clear()
    self._obs, self._since_flush = None, 0
    if self._rows is not None:
      self._end(clear_buffers=True)

  def close(self) -> None:
    """Drops an unfinished episode's pending rows and closes the writer's
    stream (a server stops promptly only once streams are closed). Never
    raises: it runs on the way down, after whatever stopped the actor, and
    must not mask that error."""
    self._clear()
    self._obs = None
    rows, self._rows = self._rows, None
    if rows is not None:
      try:
        rows.writer.close()
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('replay writer did not close cleanly: %r', e)


class NStepAdder(_RowAdder):
  """Writes one actor's episodes to a Reverb table as n-step transitions.

  The transitions of Acme's NStepTransitionAdder, except that Acme also
  writes shorter transitions (1…n-1 steps) from each episode's first state;
  here every start state gets one transition, so initial states are not
  oversampled. The n-step return is accumulated incrementally and each
  transition is one packed row and one item. For a start step t with
  m = min(n, steps left) steps:
    reward   R = r_t + γ d_t r_{t+1} + … + γ^{m-1} d_t…d_{t+m-2} r_{t+m-1}
    discount Γ = γ^{m-1} d_t…d_{t+m-1}   (the learner multiplies by γ once)

  Acme's adder costs ~138 µs a write on this stack against 18–34 µs here
  (module docstring), which is why this one exists; Acme's stays the test
  oracle (tests/replay/test_replay.py).
  """

  def __init__(self, client, layout: TransitionLayout, *, n_step: int,
               discount: float, **kwargs):
    super().__init__(client, **kwargs)
    self._layout = layout
    self._n = n_step
    self._gamma = float(discount)
    # Python floats: scalar arithmetic on numpy scalars costs several times
    # more, and the sums are rounded to float32 once, when packed.
    self._pending: list = []   # [obs, action, return, coef, gamma_prod]

  def _has_pending(self) -> bool:
    return bool(self._pending)

  def _clear(self) -> None:
    self._pending = []

  def _on_step(self, action, r, d, next_obs, last) -> None:
    self._pending.append([self._obs, action, 0.0, 1.0, 1.0])
    for p in self._pending:
      p[2] += p[3] * r              # return
      p[4] = p[3] * d               # γ^{k} d_t…d_{t+k}
      p[3] *= d * self._gamma       # weight of the next reward
    if len(self._pending) == self._n:
      self._write(self._pending.pop(0), next_obs)
    if last:
      while self._pending:
        self._write(self._pending.pop(0), next_obs)

  def _write(self, p, next_obs) -> None:
    obs, action, ret, _, gamma_prod = p
    self._rows.write(
        self._layout.pack(obs, action, ret, gamma_prod, next_obs))


class WindowAdder(_RowAdder):
  """Writes one actor's episodes as n-step windows (`WindowLayout`): for each
  start step, the m = min(n, steps left) steps themselves rather than their
  summed reward, so the learner can relabel every step of the n-step return.
  Each start state is written once, as NStepAdder does; the windows' weights
  and bootstrap reproduce NStepAdder's return and discount exactly
  (tests/replay/test_replay.py)."""

  def __init__(self, client, layout: WindowLayout, *, discount: float,
               **kwargs):
    super().__init__(client, **kwargs)
    self._layout = layout
    self._gamma = float(discount)
    self._steps: list = []   # (obs, action, reward, discount) since a start

  def _has_pending(self) -> bool:
    return bool(self._steps)

  def _clear(self) -> None:
    self._steps = []

  def _on_step(self, action, r, d, next_obs, last) -> None:
    self._steps.append((self._obs, action, r, d))
    if len(self._steps) == self._layout.n_step:
      self._write(next_obs)
    if last:
      while self._steps:
        self._write(next_obs)

  def _write(self, final_obs) -> None:
    self._rows.write(self._layout.pack(self._steps, final_obs, self._gamma))
    self._steps.pop(0)


def make_adder(server_address: str, layout, *, n_step: int, discount: float,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 50, table: str = TABLE) -> _RowAdder:
  """The adder for `layout`: NStepAdder for a TransitionLayout, WindowAdder
  (whose n is the layout's) for a WindowLayout."""
  import reverb
  client = reverb.Client(server_address)
  kwargs = dict(table=table, should_stop=should_stop, flush_every=flush_every)
  if isinstance(layout, WindowLayout):
    if layout.n_step != n_step:
      raise ValueError(f'window layout has n={layout.n_step}, adder asked '
                       f'for n_step={n_step}')
    return WindowAdder(client, layout, discount=discount, **kwargs)
  return NStepAdder(client, layout, n_step=n_step, discount=discount,
                    **kwargs)


def to_batch(rows: np.ndarray, layout: TransitionLayout, discount: float,
             k: int, b: int) -> Batch:
  """Packed rows [k·b, width] -> Batch of [k, b, ...] float32 arrays, with
  the discount multiplied by γ once (see the module docstring)."""
  rows = np.asarray(rows, np.float32).reshape((k, b, layout.width))
  f = layout.unpack(rows)
  return Batch(
      observation=np.ascontiguousarray(f['observation']),
      action=np.ascontiguousarray(f['action']),
      reward=np.ascontiguousarray(f['reward']),
      discount=(np.float32(discount) * f['discount']).astype(np.float32),
      next_observation=np.ascontiguousarray(f['next_observation']))


def to_windows(rows: np.ndarray, layout: WindowLayout, k: int,
               b: int) -> Windows:
  """Packed window rows [k·b, width] -> Windows with leading dims [k, b]."""
  rows = np.asarray(rows, np.float32).reshape((k, b, layout.width))
  return layout.unpack(rows)


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
    (e.g. `functools.partial(to_batch, layout=..., discount=..., k=, b=)`)."""
    self._convert = convert
    self._args = (server_address, rows_per_call, table)
    self._queue: queue.Queue = queue.Queue(maxsize=prefetch)
    self._error: Optional[BaseException] = None
    self._closed = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True,
                                    name='reverb-batches')
    self._thread.start()

  def _run(self):
    try:
      import reverb
      address, rows, table = self._args
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
            max_in_flight_samples_per_worker=2 * rows,
            rate_limiter_timeout_ms=_POLL_MS)
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
    except BaseException as e:  # surfaced to the learner by get()
      if not self._closed.is_set():
        self._error = e

  def _put(self, batch) -> bool:
    """Queues `batch`, waiting for room; False if closed meanwhile."""
    while not self._closed.is_set():
      try:
        self._queue.put(batch, timeout=_POLL_MS / 1000)
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
    """Ends the thread: within _POLL_MS while the server answers. At a
    program's stop the replay node usually goes first, and the thread then
    stays blocked in Reverb's client however long it is given (it is a
    daemon: the process exits regardless); a 5 s wait here was 5 s added to
    every learner's stop."""
    self._closed.set()
    self._thread.join(timeout)
