"""Environment faults: an exception from an environment costs an episode, not
the program.

dm_control raises PhysicsError when a simulation goes unstable, and any
environment may raise for reasons of its own; a run of millions of steps
meets such things. A node therefore holds each of its environments in a
`RebuildingEnv`: when `reset` or `step` raises, the environment is closed and
rebuilt with a fresh seed, the fault is counted and recorded (`EnvFaults`:
the global `env_faults` count, a traceback under errors/env_faults/), and the
caller learns that the episode in progress is lost, so it drops what it holds
of it (an adder's unfinished n-step windows, an evaluator's partial return).

A slot that faults more than `max_consecutive` times in a row is broken, not
unlucky: the node fails with `EnvFaultLimitExceeded`, naming itself and the
environment, and the launcher reports it like any crash.

Tracebacks go under errors/env_faults/ rather than errors/<node>.txt: the
launcher names crashed nodes from the reports at the top of errors/, and a
node that recovered did not crash.
"""

from __future__ import annotations

import logging
import os
import traceback
from typing import Callable, Optional

import dm_env

from tandem.agents.envs import wrappers

PHASES = ('reset', 'step', 'rebuild')


# errors/<this>/ of a run directory holds the environment faults its nodes
# survived; rundir.read_errors never reports them, as the nodes did not crash.
ENV_FAULTS = 'env_faults'


class EnvFaultLimitExceeded(RuntimeError):
  """An environment kept raising: the node gives up on it."""


class EnvFaults:
  """One node's environment faults: counted, recorded and bounded.

  node: the node's name (e.g. actor_0), for file names and errors.
  env_name: the environment's name, for errors.
  max_consecutive: faults one slot may have in a row; one more fails the node.
  errors_dir: the run directory's errors/; tracebacks go to
    errors/env_faults/<node>-<k>.txt for the node's k-th fault.
  report: called once per fault to count it globally (an increment of the
    counter's `env_faults`); may return the global counts.
  """

  def __init__(self, node: str, env_name: str, max_consecutive: int,
               errors_dir: str,
               report: Optional[Callable[[], Optional[dict]]] = None):
    self.node = node
    self.env_name = env_name
    self._max = max_consecutive
    self._dir = os.path.join(errors_dir, ENV_FAULTS)
    self._report = report
    self.total = 0          # this node's faults since it started
    self.global_count = 0   # the program's, as of this node's last report
    self._in_a_row: dict = {}

  def in_a_row(self, slot: int) -> int:
    return self._in_a_row.get(slot, 0)

  def record(self, slot: int, phase: str, error: BaseException) -> int:
    """Counts a fault of environment `slot` raised in `phase` (one of
    PHASES). Returns the node's fault index k (1, 2, ...), from which the
    replacement's seed is drawn. Raises EnvFaultLimitExceeded once the slot
    has faulted more than `max_consecutive` times in a row; the fault is
    counted and recorded first, so the count matches the files."""
    if phase not in PHASES:
      raise ValueError(f'phase {phase!r} is not one of {PHASES}')
    self.total += 1
    in_a_row = self._in_a_row[slot] = self.in_a_row(slot) + 1
    path = self._write(self.total, slot, phase, in_a_row, error)
    counts = self._report() if self._report is not None else None
    if counts:
      self.global_count = int(counts.get('env_faults', self.global_count))
    logging.warning('%s: environment %s (slot %d) raised in %s: %r; '
                    'episode discarded (fault %d, %d in a row); traceback '
                    'in %s', self.node, self.env_name, slot, phase, error,
                    self.total, in_a_row, path)
    if in_a_row > self._max:
      raise EnvFaultLimitExceeded(
          f'{self.node}: environment {self.env_name!r} (slot {slot}) raised '
          f'{in_a_row} times in a row, more than max_consecutive_env_faults'
          f'={self._max}; last in {phase}: {type(error).__name__}: {error} '
          f'(tracebacks under {self._dir})') from error
    return self.total

  def recovered(self, slot: int) -> None:
    """The slot made progress: its next fault starts a new run of them."""
    self._in_a_row[slot] = 0

  def _write(self, k, slot, phase, in_a_row, error) -> str:
    os.makedirs(self._dir, exist_ok=True)
    path = os.path.join(self._dir, f'{self.node}-{k}.txt')
    with open(path, 'w') as f:
      f.write(f'{type(error).__name__}: {error}\n\n'
              f'node {self.node}, environment {self.env_name}, slot {slot}, '
              f'in {phase}; {in_a_row} in a row (at most {self._max})\n\n')
      f.write(''.join(traceback.format_exception(
          type(error), error, error.__traceback__)))
    return path


class RebuildingEnv:
  """An environment slot that replaces its environment when it raises.

  Deliberately not a `dm_env.Environment`: `step` returns None when the
  environment raised, which means the episode in progress is lost (the
  environment was rebuilt) and the caller must `reset` before stepping
  again. `reset` retries on fresh environments until one resets or the
  fault limit is passed.

  make: seed -> a new environment.
  seed_of: fault index k -> the seed of the environment built after the
    node's k-th fault; seed_of(0) seeds the first one.
  faults: the node's EnvFaults; `slot` names this environment in it.
  recover_on: what ends a run of faults: 'step' (any completed step: an
    actor's steps are data even if the episode later faults) or 'episode'
    (a completed episode: an evaluator gains nothing from part of one, so an
    environment that faults in every episode must not evaluate forever).
  """

  def __init__(self, make: Callable[[int], dm_env.Environment],
               seed_of: Callable[[int], int], faults: EnvFaults,
               slot: int = 0, recover_on: str = 'step'):
    if recover_on not in ('step', 'episode'):
      raise ValueError(f"recover_on must be 'step' or 'episode', got "
                       f'{recover_on!r}')
    self._make = make
    self._seed_of = seed_of
    self._faults = faults
    self._slot = slot
    self._every_step = recover_on == 'step'
    # The first build is not guarded: failing to build at all is a
    # configuration error, for the node to report as a crash.
    self._env = make(seed_of(0))

  @property
  def environment(self) -> dm_env.Environment:
    """The current environment (a new object after each fault)."""
    return self._env

  def observation_spec(self):
    return self._env.observation_spec()

  def action_spec(self):
    return self._env.action_spec()

  def reward_spec(self):
    return self._env.reward_spec()

  def discount_spec(self):
    return self._env.discount_spec()

  def reset(self) -> dm_env.TimeStep:
    while True:
      try:
        return self._env.reset()
      except Exception as e:  # noqa: BLE001  (any environment fault: counted, env rebuilt)
        self._replace('reset', e)

  def step(self, action) -> Optional[dm_env.TimeStep]:
    """The next timestep, or None if the environment raised (the episode is
    lost; call `reset`)."""
    try:
      timestep = self._env.step(action)
    except wrappers.ActionError:
      raise  # the agent's bug, not the environment's: a new one won't help
    except Exception as e:  # noqa: BLE001  (any environment fault: counted, env rebuilt)
      self._replace('step', e)
      return None
    if self._every_step or timestep.last():
      self._faults.recovered(self._slot)
    return timestep

  def close(self) -> None:
    self._env.close()

  def _replace(self, phase: str, error: BaseException) -> None:
    """Records the fault and builds a fresh environment (a failed build is
    one more fault of the slot)."""
    while True:
      k = self._faults.record(self._slot, phase, error)
      self._close_quietly()
      try:
        self._env = self._make(self._seed_of(k))
        return
      except Exception as e:  # noqa: BLE001  (a failed rebuild counts as a fault)
        phase, error = 'rebuild', e

  def _close_quietly(self) -> None:
    # A faulted environment may fail to close too; it is being dropped.
    try:
      self._env.close()
    except Exception as e:  # noqa: BLE001  (a faulted env's close is best effort)
      logging.info('%s: closing a faulted environment raised %r',
                   self._faults.node, e)
