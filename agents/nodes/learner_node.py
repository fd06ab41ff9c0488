"""The learner as a program node: replay in, updates, variables and checkpoints out.

Serves `get_variables` (the policy, as numpy) to actors and the evaluator,
reports learner steps to the global counter, logs every
`learner_log_every` learner steps with the global counts, and checkpoints
periodically and when the program stops (the stop handler path: it checks
the stop event between updates, so a checkpoint is never taken mid-update).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Optional

import acme.core
import jax
import numpy as np

from tandem.agents.core import checkpointing
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import logs
from tandem.agents.replay import replay
from tandem.agents.runtime import stall
from tandem.agents.runtime.lifecycle import Stopping, call, stop_requested
from tandem.agents.runtime.rundir import RunDir, capture_errors
from tandem.agents.mpo import learner as learner_lib



class LearnerNode(acme.core.VariableSource, acme.core.Saveable):
  """Built inside its own process (or thread, under local_mt).

  An `acme.core.VariableSource` (`get_variables(['policy'])`, so Acme's
  variable clients and Tandem's actors can fetch the policy) and an
  `acme.core.Saveable` (`save()`/`restore()` the whole learner state).
  """

  # Named variable groups `get_variables` serves; a subclass may add some.
  VARIABLES = ('policy',)

  def __init__(self, train_config, dims: learner_lib.Dims, replay_client,
               counter, run_dir: str, resume: bool = False):
    self._tc = train_config
    self._cfg = train_config.mpo
    self._run_dir = RunDir(run_dir)
    self._replay_address = replay_client.server_address
    self._layout = replay.TransitionLayout(dims.observation, dims.action)
    self._counter = counter
    self._lock = threading.Lock()
    state = self._init_state(dims)
    latest = checkpointing.latest(self._run_dir.learner_checkpoints)
    # The counts a checkpoint records until the first counter call: a
    # resumed learner stopped before that call must not overwrite its newest
    # checkpoint with empty counts (resume would fall back to counter.json).
    self._counts: dict = {}
    if resume and latest is not None:
      state, meta = checkpointing.restore_with_metadata(latest, state)
      self._counts = dict(meta.get('counts') or {})
      logging.info('learner: restored %s (learner step %d)', latest,
                   self._checkpoint_step(state))
    self._state = state
    # The state last written to (or read from) a checkpoint, or the initial
    # one: a crash saves only a state that is not already on disk.
    self._saved = state
    # Set by `finish`: no update after it, so the final evaluation, the
    # final checkpoint and final.json all describe one state.
    self._finished = False
    self._restored = resume and latest is not None
    self._batches: Optional[replay.BatchStream] = None
    self._publish()
    self._device = str(jax.devices()[0])
    self._logger = logs.Logger(self._run_dir.logs, 'learner',
                               tensorboard=train_config.tensorboard)
    # TensorBoard gets every 100th row: per-step event writes cost more
    # than the CSV rows do.
    self._tb_every = 100 * train_config.learner_log_every
    self._stall = stall.StallMonitor(train_config.stall_window,
                                     train_config.max_skipped_fraction,
                                     'learner updates')

  # What a learner of another algorithm changes ---------------------------

  def _init_state(self, dims: learner_lib.Dims):
    """Builds the jitted update(s) and returns a freshly initialised state
    (also the template a checkpoint is restored into)."""
    self._update = learner_lib.make_update(self._cfg, all_steps_metrics=True)
    return learner_lib.init(self._cfg, dims, seed=self._tc.seed)

  def _mpo_state(self, state):
    """The MPO learner state inside this learner's state."""
    return state

  def _policy(self, state):
    return learner_lib.acting_policy(self._cfg, self._mpo_state(state))

  def _variables(self, state) -> dict:
    """The groups `get_variables` serves (`VARIABLES`), as numpy."""
    return {'policy': jax.device_get(self._policy(state))}

  def _publish(self) -> None:
    """Copies what the Courier methods serve out of the current state, as
    one dict assigned at once (readers take no lock): a caller asking for
    several groups gets them all of one update."""
    self._served = self._variables(self._state)

  def _own_counts(self, state) -> dict:
    """The counts this learner's state owns; after a restore they overwrite
    the counter's, which is checkpointed on its own timer."""
    return {'learner_steps': int(state.steps)}

  def _checkpoint_metadata(self) -> dict:
    """What a checkpoint records besides its counts, for a resume to check
    against its config (launch/<program>.checkpoint_mismatch)."""
    return {'env': self._tc.env}

  def _checkpoint_step(self, state) -> int:
    """The number in the checkpoint's file name: the MPO learner's step."""
    return int(self._mpo_state(state).steps)

  def _close_streams(self) -> None:
    if self._batches is not None:
      self._batches.close()

  # Courier methods -------------------------------------------------------

  def get_variables(self, names=None):
    """The latest policy params (numpy pytree); with `names` (Acme's
    VariableSource), a list of the named groups from `VARIABLES`, all of
    one update."""
    served = self._served
    if names is None:
      return served['policy']
    unknown = [n for n in names if n not in self.VARIABLES]
    if unknown:
      raise KeyError(f'get_variables: unknown names {unknown}; this learner '
                     f'serves {list(self.VARIABLES)}')
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
      return self._checkpoint_step(self._state)

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
        counts.update(self._own_counts(self._state))
      path = checkpointing.save_numbered(
          self._run_dir.learner_checkpoints,
          self._checkpoint_step(self._state),
          self._state, metadata={'counts': counts,
                                 **self._checkpoint_metadata()},
          keep=self._tc.checkpoints_to_keep)
      self._saved = self._state
      return path, counts

  # ------------------------------------------------------------------------

  def run(self):
    with capture_errors(self._run_dir, 'learner'):
      self._run()

  def _stream(self) -> replay.BatchStream:
    if self._batches is None:
      k, b = self._cfg.sgd_steps_per_call, self._cfg.batch_size
      self._batches = replay.BatchStream(
          self._replay_address, functools.partial(
              replay.to_batch, layout=self._layout,
              discount=self._cfg.discount, k=k, b=b), rows_per_call=k * b)
    return self._batches

  def step(self, timeout: float = 1.0) -> Optional[dict]:
    """One update call (sgd_steps_per_call SGD steps) if a batch arrives in
    `timeout` seconds; returns the counts after it, else None."""
    batch = self._stream().get(timeout=timeout)
    if batch is None:
      return None
    k = self._cfg.sgd_steps_per_call
    with self._lock:
      if self._finished:
        return None
      self._state, metrics = self._update(self._state, batch)
      self._publish()
      # Counted before the lock is let go: a checkpoint (finish() comes from
      # the limiter's thread) then never pairs this state with the previous
      # call's counts, which would put this call's log rows past it.
      counts = call(self._counter, 'increment', learner_steps=k)
      self._counts = counts
    metrics = jax.device_get(metrics)
    self._log_call(self._logger, metrics, counts, 'learner_steps')
    self._check_stalled(self._stall, metrics['finite'],
                        metrics['learner_steps'])
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
      logger.write(row, tensorboard=step % self._tb_every == 0)

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
    except Exception as save_error:  # noqa: BLE001 - reported below
      logging.error('learner: crashing (%r); saving a checkpoint on the way '
                    'failed too: %r', error, save_error)
      return
    logging.error('learner: crashing (%r); saved %s first', error, path)

  def _run(self):
    logging.info('learner: JAX device %s', self._device)
    last_ckpt = time.monotonic()
    try:
      call(self._counter, 'set_extra', learner_device=self._device)
      if self._restored:
        # One owner of truth for the learner's counts: its checkpoint, not
        # counter.json (saved on its own timer, so it can be ahead of or
        # behind the state after a crash).
        self._counts = call(self._counter, 'set_counts',
                            **self._own_counts(self._state))
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
    except replay.ReplayUnavailable as e:
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
      raise replay.ReplayUnavailable(
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
