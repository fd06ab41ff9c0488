"""Reverb replay's tables and rows: n-step transitions packed one per row.

A table samples uniformly, removes FIFO, and is rate-limited by a
SampleToInsertRatio: the learner cannot sample faster than
`samples_per_insert` per inserted item (± error_buffer), and actors block on
insert when the learner falls behind, so a slow learner throttles the actors.
A program's tables are `TableSpec` values; a second table of the newest rows
(`RECENT_TABLE`, an adversarial run's discriminator window) has only a
minimum size, the pace of its draws being set by the learner.

Each item is one n-step transition packed into one float32 row
(`TransitionLayout`): one column to append, chunk, compress and decode
instead of five, which is most of what an actor spends per step on replay
(bench/actor.py). The values follow Acme's NStepTransitionAdder convention
(tests/replay/test_replay.py compares them side by side): `discount` holds
one factor of γ fewer than the bootstrap needs (Γ = d₀·γd₁·…·γ^{n-1}d_{n-1});
`to_batch` multiplies by γ once, giving the learner the whole multiplier.

`WindowLayout` keeps every step of the n-step sum instead
(`batches.Windows`), for learners that compute rewards themselves.
`to_batch` and `to_windows` turn sampled rows into a learner's batch;
writing rows is adders.py's, sampling them streams.py's.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from tandem.agents.core.batches import Batch, Windows

# How long one Reverb call of the adders and streams waits (ms) before a
# stop request is checked; read at each call.
POLL_MS = 500

TABLE = 'transitions'
# The newest transitions alone, where a learner asks for them (an
# adversarial run's discriminator window): a copy of each item, not of its
# data, which the two tables share.
RECENT_TABLE = 'recent'
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


class TableSpec(NamedTuple):
  """One replay table, as data: what the replay node builds (`table_of`)
  and the actors write to.

  samples_per_insert None: no sample-to-insert ratio, only a minimum size
  before the first sample (a table drawn at a pace another table sets)."""
  name: str
  max_size: int
  min_size: int
  samples_per_insert: Optional[float] = None
  error_buffer: float = 0.0


def table_of(layout, spec: TableSpec):
  """The Reverb table `spec` describes: uniform sampling, FIFO removal."""
  if spec.samples_per_insert is not None:
    return make_table(layout, max_size=spec.max_size, min_size=spec.min_size,
                      samples_per_insert=spec.samples_per_insert,
                      error_buffer=spec.error_buffer, name=spec.name)
  import reverb
  return _table(layout, spec.name, spec.max_size,
                reverb.rate_limiters.MinSize(spec.min_size))


def make_table(layout, *, max_size: int, min_size: int,
               samples_per_insert: float, error_buffer: float,
               name: str = TABLE):
  """A Reverb table of packed n-step transitions."""
  import reverb
  limiter = reverb.rate_limiters.SampleToInsertRatio(
      min_size_to_sample=min_size, samples_per_insert=samples_per_insert,
      error_buffer=error_buffer)
  return _table(layout, name, max_size, limiter)


def _table(layout, name: str, max_size: int, limiter):
  import reverb
  import tensorflow as tf
  return reverb.Table(
      name=name, sampler=reverb.selectors.Uniform(),
      remover=reverb.selectors.Fifo(), max_size=max_size,
      rate_limiter=limiter,
      signature={COLUMN: tf.TensorSpec([layout.width], tf.float32)})


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
