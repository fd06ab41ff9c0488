"""The learner as a program node: replay in, updates, variables and checkpoints out.

An algorithm (`Algorithm`: its state, its kinds of update call, what it
serves and counts) is wrapped by what every learner node does: it serves
`get_variables` (the policy, as numpy) to actors and the evaluator, reports
each call's steps to the global counter, logs every `learner_log_every`
steps with the global counts, stops on a stall, and checkpoints
periodically and when the program stops (the stop handler path: it checks
the stop event between updates, so a checkpoint is never taken mid-update).
`mpo_algorithm` is MPO's; agents/nodes/ail_learner_node.py the adversarial one.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import threading
import time
from typing import Any, Callable, NamedTuple, Optional

import acme.core
import jax
import numpy as np

from tandem.agents.core import checkpointing
from tandem.agents.mpo import learner as learner_lib
from tandem.agents.replay import layouts
from tandem.agents.replay import streams
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import logs
from tandem.agents.runtime import stall
from tandem.agents.runtime.lifecycle import Stopping, call, stop_requested
from tandem.agents.runtime.rundir import RunDir, capture_errors


class Update(NamedTuple):
  """One kind of update call a learner makes: the jitted function, the replay
  rows it reads, and the count, log and stall check it advances."""
  log: str              # its log, logs/<log>.csv
  count: str            # the global count each of its SGD steps adds one to
  steps_per_call: int   # K: SGD steps per call
  batch_size: int       # B
  # K·B replay rows -> the call's batch ([K, B, ...] leaves).
  rows_to_batch: Callable[[np.ndarray], Any]
  # (state, batch) -> (state, metrics); metrics hold [K] per-step values.
  apply: Callable[[Any, Any], tuple]
  finite: str           # the metric that says which steps were finite
  what: str             # how a stall names these updates
  table: str = layouts.TABLE   # the replay table its batches come from
  # Calls' batches read ahead of use (streams.BatchStream): 1 for a table of
  # the newest rows, whose rows age while they wait.
  prefetch: int = 2


@dataclasses.dataclass(frozen=True)
class Algorithm:
  """What an algorithm gives the learner node; the node adds what every
  learner needs (the lock, published variables, counts, checkpoints, logs,
  the stall check)."""
  # The fresh state, also a restore's template: read once, when the node is
  # built (the first update donates its buffers).
  state: Any
  updates: tuple                        # its kinds of update call (Update)
  # state -> (index of the next call's Update, what `increments` needs to
  # know of the state before the call: the call donates that state's
  # buffers, so nothing may read it afterwards).
  next_update: Callable[[Any], tuple]
  # state -> the counts the state owns; after a restore they overwrite the
  # counter's, which is checkpointed on its own timer.
  owned_counts: Callable[[Any], dict]
  # (next_update's note on the state before, state after, update) -> what
  # one call adds to the global counts.
  increments: Callable[[Any, Any, Update], dict]
  variables: Callable[[Any], dict]      # state -> the groups get_variables serves
  checkpoint_step: Callable[[Any], int]  # state -> its checkpoints' file number
  # What a checkpoint records besides its counts, for a resume to check
  # against its config (launch/programs.py: Program.checkpoint_mismatch).
  checkpoint_metadata: dict
  log_columns: tuple = logs.REQUIRED    # the counts every log row carries


def mpo_algorithm(train_config, dims: learner_lib.Dims) -> Algorithm:
  """The MPO learner: one update call, sgd_steps_per_call SGD steps on
  n-step transitions, serving the acting policy."""
  cfg = train_config.mpo
  k, b = cfg.sgd_steps_per_call, cfg.batch_size
  layout = layouts.TransitionLayout(dims.observation, dims.action)
  update = Update(
      log='learner', count='learner_steps', steps_per_call=k, batch_size=b,
      rows_to_batch=functools.partial(layouts.to_batch, layout=layout,
                                      discount=cfg.discount, k=k, b=b),
      apply=learner_lib.make_update(cfg, all_steps_metrics=True),
      finite='finite', what='learner updates')
  return Algorithm(
      state=learner_lib.init(cfg, dims, seed=train_config.seed),
      updates=(update,), next_update=lambda state: (0, None),
      owned_counts=lambda state: {'learner_steps': int(state.steps)},
      increments=steps_of_the_call,
      variables=lambda state: {'policy': jax.device_get(
          learner_lib.acting_policy(cfg, state))},
      checkpoint_step=lambda state: int(state.steps),
      checkpoint_metadata={'env': train_config.env})


def steps_of_the_call(note, after, update: Update) -> dict:
  """A call's increments: its SGD steps, to its count."""
  del note, after
  return {update.count: update.steps_per_call}


class LearnerNode(acme.core.VariableSource, acme.core.Saveable):
  """Built inside its own process (or thread, under local_mt), around the
  `Algorithm` that `algorithm(train_config, dims)` builds there.

  An `acme.core.VariableSource` (`get_variables(['policy'])`, so Acme's
  variable clients and Tandem's actors can fetch the policy) and an
  `acme.core.Saveable` (`save()`/`restore()` the whole learner state).
  """

  def __init__(self, train_config, dims: learner_lib.Dims, replay_client,
               counter, run_dir: str, resume: bool = False, *,
               algorithm: Callable[..., Algorithm] = mpo_algorithm):
    self._tc = train_config
    self._run_dir = RunDir(run_dir)
    self._replay_address = replay_client.server_address
    self._counter = counter
    self._lock = threading.Lock()
    self._algorithm = algorithm(train_config, dims)
    state = self._algorithm.state
    latest = checkpointing.latest(self._run_dir.learner_checkpoints)
    # The counts a checkpoint records until the first counter call: a
    # resumed learner stopped before that call must not overwrite its newest
    # checkpoint with empty counts (resume would fall back to counter.json).
    self._counts: dict = {}
    if resume and latest is not None:
      state, meta = checkpointing.restore_with_metadata(latest, state)
      self._counts = dict(meta.get('counts') or {})
      logging.info('learner: restored %s (learner step %d)', latest,
                   self._algorithm.checkpoint_step(state))
    self._state = state
    # The state last written to (or read from) a checkpoint, or the initial
    # one: a crash saves only a state that is not already on disk.
    self._saved = state
    # Set by `finish`: no update after it, so the final evaluation, the
    # final checkpoint and final.json all describe one state.
    self._finished = False
    self._restored = resume and latest is not None
    updates = self._algorithm.updates
    # Each update's batch stream, opened at its first call.
    self._streams: list[Optional[streams.BatchStream]] = [None] * len(updates)
    self._publish()
    self._device = str(jax.devices()[0])
    self._loggers = [logs.Logger(self._run_dir.logs, u.log,
                                 tensorboard=train_config.tensorboard,
                                 required=self._algorithm.log_columns)
                     for u in updates]
    self._stalls = [stall.StallMonitor(train_config.stall_window,
                                       train_config.max_skipped_fraction,
                                       u.what) for u in updates]

  def _publish(self) -> None:
    """Copies what the Courier methods serve out of the current state, as
    one dict assigned at once (readers take no lock): a caller asking for
    several groups gets them all of one update."""
    self._served = self._algorithm.variables(self._state)

  def _close_streams(self) -> None:
    for stream in self._streams:
      if stream is not None:
        stream.close()

  # Courier methods -------------------------------------------------------

  def get_variables(self, names=None):
    """The latest policy params (numpy pytree); with `names` (Acme's
    VariableSource), a list of the named groups the algorithm serves, all
    of one update."""
    served = self._served
    if names is None:
      return served['policy']
    unknown = [n for n in names if n not in served]
    if unknown:
      raise KeyError(f'get_variables: unknown names {unknown}; this learner '
                     f'serves {list(served)}')
    return [served[n] for n in names]

  def save(self):
    """acme.core.Saveable: the whole learner state, as numpy."""
    with self._lock:
      return jax.device_get(self._state)

  def restore(self, state) -> None:
    """acme.core.Saveable: replaces the learner state (one from `save()`,
    or a checkpoint's tree) after checking its structure and shapes."""
    template = jax.tree_util.tree_structure(self._state)
    if jax.tree_util.tree_structure(state) != template:
      raise ValueError('restore: the state does not have this learner\'s '
                       'structure')
    for new, old in zip(jax.tree_util.tree_leaves(state),
                        jax.tree_util.tree_leaves(self._state)):
      if np.shape(new) != np.shape(old):
        raise ValueError(f'restore: a leaf has shape {np.shape(new)}, '
                         f'expected {np.shape(old)}')
    with self._lock:
      self._state = jax.tree_util.tree_map(jax.numpy.asarray, state)
      self._publish()

  def finish(self) -> dict:
    """Takes no more updates and saves a checkpoint; returns {'checkpoint':
    its path, 'counts': the global counts it holds}. The limiter calls it at
    the budget before the final evaluation: the learner would otherwise go
    on spending the rate limiter's remaining allowance while the evaluator
    runs, and the parameters evaluated, checkpointed and named in final.json
    would differ. The counts are read now (the counter is alive; actors may
    have added env steps since the last update) and the final evaluation
    logs them too, so a resume past the budget, which rolls the logs back
    to the checkpoint's counts, keeps that evaluation's row."""
    with self._lock:  # after an update in flight has landed its counts
      self._finished = True
      try:
        self._counts = call(self._counter, 'get_counts')
      except Stopping:
        pass  # the program is stopping anyway: the counts last seen
    path, counts = self._save_checkpoint()
    return {'checkpoint': path, 'counts': counts}

  def get_steps(self) -> int:
    with self._lock:
      return self._algorithm.checkpoint_step(self._state)

  def save_checkpoint(self) -> str:
    return self._save_checkpoint()[0]

  def _save_checkpoint(self) -> tuple[str, dict]:
    """(path, the global counts recorded with the state)."""
    # The counts last seen, not a fresh call: at stop time the counter's
    # server may already be gone, and a call would block.
    with self._lock:
      counts = dict(self._counts)
      if counts:
        # step() records an update's counts before it lets go of the lock,
        # so these are the state's; its own steps overwrite them anyway (a
        # state restored before any update carries the counter's).
        counts.update(self._algorithm.owned_counts(self._state))
      path = checkpointing.save_numbered(
          self._run_dir.learner_checkpoints,
          self._algorithm.checkpoint_step(self._state),
          self._state, metadata={'counts': counts,
                                 **self._algorithm.checkpoint_metadata},
          keep=self._tc.checkpoints_to_keep)
      self._saved = self._state
      return path, counts

  # ------------------------------------------------------------------------

  def run(self):
    with capture_errors(self._run_dir, 'learner'):
      self._run()

  def _stream(self, i: int) -> streams.BatchStream:
    if self._streams[i] is None:
      u = self._algorithm.updates[i]
      self._streams[i] = streams.BatchStream(
          self._replay_address, u.rows_to_batch,
          rows_per_call=u.steps_per_call * u.batch_size, table=u.table,
          prefetch=u.prefetch)
    return self._streams[i]

  def step(self, timeout: float = 1.0) -> Optional[dict]:
    """One update call, of the kind the algorithm says is next, if its batch
    arrives in `timeout` seconds; returns the counts after it, else None."""
    i, note = self._algorithm.next_update(self._state)
    update = self._algorithm.updates[i]
    batch = self._stream(i).get(timeout=timeout)
    if batch is None:
      return None
    with self._lock:
      if self._finished:
        return None
      self._state, metrics = update.apply(self._state, batch)
      self._publish()
      # Counted before the lock is let go: a checkpoint (finish() comes from
      # the limiter's thread) then never pairs this state with the previous
      # call's counts, which would put this call's log rows past it.
      self._counts = call(self._counter, 'increment',
                          **self._algorithm.increments(note, self._state,
                                                       update))
      counts = self._counts
    metrics = jax.device_get(metrics)
    self._log_call(self._loggers[i], metrics, counts, update.count)
    self._check_stalled(self._stalls[i], metrics[update.finite],
                        metrics[update.count])
    return counts

  def _check_stalled(self, monitor: stall.StallMonitor, finite,
                     steps) -> None:
    """Raises LearnerStalled (after a checkpoint: skipped updates leave
    the state as it was, so it is the last finite one) once `monitor` says
    the learner has stopped learning."""
    after = self._tc.fault_injection_nonfinite_after
    if after:
      finite = np.where(np.asarray(steps) >= after, False, finite)
    message = monitor.observe(finite, steps)
    if message is None:
      return
    self._close_streams()
    path = self.save_checkpoint()
    raise stall.LearnerStalled(
        f'learner: {message}. Its state is the last finite one, saved in '
        f'{path}; fix the cause (learning rates, rewards, observations) '
        'and continue with --resume')

  def _log_call(self, logger, metrics: dict, counts: dict,
                step_key: str) -> None:
    """One row per step of an update call (every `learner_log_every`-th),
    each with the global counts seen after the call and its own step count
    (`metrics[step_key]`, [K]); per-call scalars go into every row."""
    every = self._tc.learner_log_every
    steps = np.asarray(metrics[step_key])
    per_call = {name: float(v) for name, v in metrics.items()
                if np.ndim(v) == 0}
    for i, step in enumerate(steps.astype(int)):
      if step % every:
        continue
      row = {name: float(np.asarray(v)[i]) for name, v in metrics.items()
             if np.ndim(v) == 1}
      row.update(per_call)
      row.update(logs.count_columns(counts))
      row[step_key] = int(step)
      logger.write(row)

  def _save_before_crash(self, error: BaseException) -> None:
    """Best effort: a failing save (the same full disk) is logged, and the
    crash that called it is the one reported. A state already on disk (no
    update since the restore or the last save) is not written again."""
    try:
      self._close_streams()
      with self._lock:
        if self._state is self._saved:
          logging.error('learner: crashing (%r); no update since the last '
                        'checkpoint', error)
          return
      path = self.save_checkpoint()
    except Exception as save_error:  # noqa: BLE001  (reported below)
      logging.error('learner: crashing (%r); saving a checkpoint on the way '
                    'failed too: %r', error, save_error)
      return
    logging.error('learner: crashing (%r); saved %s first', error, path)

  def _run(self):
    logging.info('learner: JAX device %s, XLA_FLAGS=%s', self._device,
                 os.environ.get('XLA_FLAGS', ''))
    last_ckpt = time.monotonic()
    try:
      call(self._counter, 'set_extra', learner_device=self._device)
      if self._restored:
        # One owner of truth for the learner's counts: its checkpoint, not
        # counter.json (saved on its own timer, so it can be ahead of or
        # behind the state after a crash).
        self._counts = call(self._counter, 'set_counts',
                            **self._algorithm.owned_counts(self._state))
      while not stop_requested():
        if self._finished:  # the run is over: wait for the stop
          stop_requested(1.0)
          continue
        self.step(timeout=1.0)
        if time.monotonic() - last_ckpt > self._tc.checkpoint_period_s:
          self.save_checkpoint()
          last_ckpt = time.monotonic()
    except Stopping:
      pass
    except streams.ReplayUnavailable as e:
      # Replay died (or stopped before us): the state is intact, so leave
      # through the stop path's checkpoint, then fail naming replay.
      self._close_streams()
      path = self.save_checkpoint()
      # The replay node may stop a moment before this node hears of the
      # stop (lifecycle.call's grace, for the same reason).
      if stop_requested(lifecycle.STOP_GRACE_S):
        logging.info('learner: replay went away during the stop (%s); '
                     'checkpoint %s', e, path)
        return
      raise streams.ReplayUnavailable(
          f'learner: the replay server stopped answering ({e}); the replay '
          f'node died first. The learner saved {path}; continue with '
          '--resume') from e
    except stall.LearnerStalled:
      raise  # it saved the last finite state already
    except Exception as e:
      # A failed counter call, a full disk under the logs, a failed
      # compile: the state is the last update's (an update assigns it only
      # once it returned), so save it before the crash is reported rather
      # than lose up to checkpoint_period_s of learning. If the failure came
      # after that update but before its log rows (as on the stop path), a
      # resume continues past them: learner.csv skips those steps.
      self._save_before_crash(e)
      raise
    # Stop requested: the stop handler's work, done between updates.
    self._close_streams()
    if self._tc.fault_injection_slow_stop_s:
      time.sleep(self._tc.fault_injection_slow_stop_s)
    path = self.save_checkpoint()
    logging.info('learner: stopped, checkpoint %s', path)
