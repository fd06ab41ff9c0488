"""Reverb replay for n-step transitions: table, adder, and learner batches.

The table samples uniformly, removes FIFO, and is rate-limited by a
SampleToInsertRatio: the learner cannot sample faster than
`samples_per_insert` per inserted item (± error_buffer), and actors block on
insert when the learner falls behind, so a slow learner throttles the actors.

Transitions follow Acme's NStepTransitionAdder convention (and its table
signature): `discount` holds one factor of γ fewer than the bootstrap needs
(Γ = d₀·γd₁·…·γ^{n-1}d_{n-1}); `to_batch` multiplies by γ once, giving the
learner the whole multiplier. `NStepAdder` writes them at a fraction of
Acme's adder's per-step cost.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Optional

import dm_env
import numpy as np

from agents.common import lifecycle
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


class NStepAdder:
  """Writes n-step transitions of one actor's episodes to a Reverb table.

  The transitions of Acme's NStepTransitionAdder (tested side by side), for
  a fraction of its per-step cost, except that Acme also writes shorter
  transitions (1…n-1 steps) from each episode's first state; here every
  start state gets one transition, so initial states are not oversampled.
  The n-step return is accumulated incrementally in numpy and each
  transition is one `append` and one `create_item`. For a start step t with m = min(n, steps left) steps:
    reward   R = r_t + γ d_t r_{t+1} + … + γ^{m-1} d_t…d_{t+m-2} r_{t+m-1}
    discount Γ = γ^{m-1} d_t…d_{t+m-1}   (the learner multiplies by γ once)
  The writer's flush (which bounds items in flight, and blocks when the rate
  limiter does) runs every `flush_every` steps in short slices, giving up
  with `Stopped` once `should_stop()` is true.
  """

  def __init__(self, client, *, n_step: int, discount: float,
               table: str = TABLE, should_stop: Callable[[], bool] = lambda:
               False, flush_every: int = 10, max_in_flight_items: int = 5,
               keep_alive: int = 16):
    self._client = client
    self._n = n_step
    self._gamma = np.float32(discount)
    self._table = table
    self._should_stop = should_stop
    self._flush_every = flush_every
    self._max_in_flight = max_in_flight_items
    # Items reference only the last step, but a longer keep-alive lets Reverb
    # auto-tune chunks of several steps: fewer compressions and messages.
    self._keep_alive = keep_alive
    self._writer = None
    self._history = None
    self._pending: list = []   # [obs, action, return, coef, gamma_prod]
    self._obs = None
    self._since_flush = 0

  def _ensure_writer(self):
    if self._writer is None:
      self._writer = self._client.trajectory_writer(
          num_keep_alive_refs=self._keep_alive)
      self._flush = _interruptible(self._writer.flush, self._should_stop)
      self._end = _interruptible(self._writer.end_episode, self._should_stop)

  def add_first(self, timestep: dm_env.TimeStep) -> None:
    self._ensure_writer()
    if self._pending:
      raise ValueError('add_first called before the previous episode ended')
    self._obs = np.asarray(timestep.observation)

  def add(self, action, next_timestep: dm_env.TimeStep, extras=()) -> None:
    del extras
    if self._obs is None:
      raise ValueError('add called before add_first')
    r = np.float32(next_timestep.reward)
    d = np.float32(next_timestep.discount)
    self._pending.append([self._obs, np.asarray(action), np.float32(0.0),
                          np.float32(1.0), np.float32(1.0)])
    for p in self._pending:
      p[2] = p[2] + p[3] * r          # return
      p[4] = p[3] * d                 # γ^{k} d_t…d_{t+k}
      p[3] = p[3] * d * self._gamma   # weight of the next reward
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
    from acme import types
    obs, action, ret, _, gamma_prod = p
    self._writer.append(dict(observation=obs, action=action,
                             reward=np.asarray(ret, np.float32),
                             discount=np.asarray(gamma_prod, np.float32),
                             next_observation=next_obs))
    # The history's columns persist across appends; building the history
    # view costs a tree walk, so take it once per writer.
    if self._history is None:
      self._history = self._writer.history
    h = self._history
    self._writer.create_item(self._table, 1.0, types.Transition(
        observation=h['observation'][-1], action=h['action'][-1],
        reward=h['reward'][-1], discount=h['discount'][-1],
        next_observation=h['next_observation'][-1], extras=()))

  def reset(self) -> None:
    self._pending, self._obs = [], None
    if self._writer is not None:
      self._end(clear_buffers=True)


def make_adder(server_address: str, *, n_step: int, discount: float,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 10, table: str = TABLE) -> NStepAdder:
  import reverb
  return NStepAdder(reverb.Client(server_address), n_step=n_step,
                    discount=discount, table=table, should_stop=should_stop,
                    flush_every=flush_every)


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
