"""Writing n-step rows to replay from an actor's environment loop.

Why not Acme's adder: `acme.adders.reverb.NStepTransitionAdder` costs ~138 µs
a write against 18–19 µs for NStepAdder at 4 environments per actor, 29–34 at
one (timed in the actor loop with perf_counter; BENCHMARKS.md, Actor
throughput: it re-derives the structure of five columns on every step); it
stays the test oracle.
"""

from __future__ import annotations

import logging
from typing import Callable, Optional, Sequence

import dm_env
import numpy as np

from tandem.agents.replay import layouts
from tandem.agents.replay.layouts import TABLE, TransitionLayout, WindowLayout
from tandem.agents.runtime import lifecycle

# Raised inside a blocked replay write once the program asked to stop.
Stopped = lifecycle.Stopping



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
        return call(*args, timeout_ms=layouts.POLL_MS, **kwargs)
      except reverb.errors.DeadlineExceededError:
        if should_stop():
          raise Stopped() from None
  return wrapped


def _wait_for_server(client, should_stop: Callable[[], bool]) -> None:
  """Blocks until the replay server answers, in polls of one second that
  give up with `Stopped` once `should_stop()` is true. A resumed server
  serves only once it has restored its checkpoint (longer for a fuller
  buffer, and on a busy machine), while Reverb gives a new writer 3 s to
  fetch the tables' signatures before it fails with "Deadline Exceeded"."""
  import reverb
  while True:
    try:
      client.server_info(timeout=1)
      return
    except reverb.errors.DeadlineExceededError:
      if should_stop():
        raise Stopped() from None


class _RowWriter:
  """Appends packed rows to a Reverb writer, one item per row.

  Rows go straight to reverb's C++ TrajectoryWriter (the pybind object
  behind `reverb.TrajectoryWriter`, in the reverb 0.7.0 that
  requirements.lock pins). The Python wrapper re-derives the data's
  structure and wraps every reference on each `append` and `create_item`,
  about 10 µs per transition, half of what writing costs (bench/actor.py);
  a single packed column needs none of it. Flush and end-of-episode keep the
  wrapper's calls, for their timeout errors. With several tables each row
  is an item of each, its data sent and stored once.
  """

  def __init__(self, client, tables: tuple, chunk_length: int):
    from reverb import pybind
    self.writer = client.trajectory_writer(num_keep_alive_refs=chunk_length)
    # Reverb 0.7 has no public handle on the C++ writer this drives directly.
    self._cpp = self.writer._writer  # noqa: SLF001
    # Fixed-length chunks: the auto-tuner's bookkeeping costs more than it
    # saves for rows of a few hundred bytes.
    self._cpp.ConfigureChunker(0, pybind.ConstantChunkerOptions(
        max_chunk_length=chunk_length, num_keep_alive_refs=chunk_length))
    self._tables = tables

  def write(self, row: np.ndarray) -> None:
    (ref,) = self._cpp.Append([row])
    for table in self._tables:
      self._cpp.CreateItem(table, 1.0, [[ref]], [True])


class _RowAdder:
  """Shared writer plumbing of Tandem's adders: one packed row per item,
  flushed every `flush_every` steps (where the rate limiter blocks an actor,
  in short slices that give up with `Stopped` once `should_stop()` is true;
  each flush waits for a server round trip, so rarely), episodes ended and
  streams closed. Subclasses turn steps into rows in `_on_step`. table: a
  table's name, or several names (each row an item of every one)."""

  def __init__(self, client, *, table: str | Sequence[str] = TABLE,
               should_stop: Callable[[], bool] = lambda: False,
               flush_every: int = 50, max_in_flight_rows: int = 25,
               chunk_length: int = 16):
    self._client = client
    self._tables = (table,) if isinstance(table, str) else tuple(table)
    self._should_stop = should_stop
    self._flush_every = flush_every
    self._max_in_flight = max_in_flight_rows
    self._chunk_length = chunk_length
    self._rows: Optional[_RowWriter] = None
    self._obs = None
    self._since_flush = 0

  def _ensure_writer(self):
    if self._rows is None:
      _wait_for_server(self._client, self._should_stop)
      self._rows = _RowWriter(self._client, self._tables,
                              self._chunk_length)
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
        # Items, not rows: each row is an item of every table.
        self._flush(self._max_in_flight * len(self._tables))
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
      except Exception as e:  # noqa: BLE001  (closing is best effort; logged)
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
               flush_every: int = 50,
               table: str | Sequence[str] = TABLE) -> _RowAdder:
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
