"""The adversarial learner as a program node: rounds of discriminator and
generator updates, both fed from the agent replay table.

The MPO learner node with three changes: the state is an `AILState`, replay
rows are n-step windows (every step kept, so the generator's rewards are
recomputed by the current discriminator when a batch is used), and each
update call is a discriminator call or a generator call, as the round plan
(`learner.RoundPlan`, a function of the two global step counts) says.

Demonstrations live on the learner, as device arrays drawn from in-graph
with the learner's PRNG key, not in a Reverb table: they never change, a
file of a few MB (20k transitions: 0.9 MB) fits any accelerator many times
over, sampling costs no RPC and no rate-limiter interplay with the agent
table, and the draws are part of the checkpointed state, so a resumed run
draws exactly the expert batches an uninterrupted one would.

The agent table is sampled by both updates; `samples_per_insert` covers
both (per round: D·discriminator batch + G·generator batch samples).
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import jax
import numpy as np

from tandem.agents.ail import demonstrations
from tandem.agents.ail import learner as ail_learner
from tandem.agents.runtime import logs
from tandem.agents.replay import replay
from tandem.agents.runtime import stall
from tandem.agents.runtime.lifecycle import call
from tandem.agents.nodes import learner_node

ROW_COUNTS = ('env_steps', 'learner_steps', 'discriminator_steps', 'round')


class AILLearnerNode(learner_node.LearnerNode):

  VARIABLES = ('policy', 'discriminator')

  def __init__(self, train_config, dims, replay_client, counter, run_dir: str,
               resume: bool = False):
    self._ail = train_config.ail
    self._windows = replay.WindowLayout(dims.observation, dims.action,
                                        train_config.mpo.n_step)
    self._disc_batches: Optional[replay.BatchStream] = None
    super().__init__(train_config, dims, replay_client, counter, run_dir,
                     resume)
    self._logger = logs.Logger(self._run_dir.logs, 'learner',
                               tensorboard=train_config.tensorboard,
                               required=ROW_COUNTS)
    self._disc_logger = logs.Logger(self._run_dir.logs, 'discriminator',
                                    tensorboard=train_config.tensorboard,
                                    required=ROW_COUNTS)
    self._disc_stall = stall.StallMonitor(
        train_config.stall_window, train_config.max_skipped_fraction,
        'discriminator updates')

  # LearnerNode's hooks ------------------------------------------------------

  def _variables(self, state) -> dict:
    return {**super()._variables(state),
            'discriminator': jax.device_get(
                (state.discriminator.params, state.discriminator.normalizer))}

  def _own_counts(self, state) -> dict:
    return {'learner_steps': int(state.generator.steps),
            'discriminator_steps': int(state.discriminator.steps),
            'rounds': ail_learner.position(self._ail, state).round}

  def _checkpoint_metadata(self) -> dict:
    return {**super()._checkpoint_metadata(),
            'round_plan': ail_learner.plan_record(self._ail)}

  def _init_state(self, dims):
    demos = demonstrations.load_for_environment(self._tc.demos, self._tc.env)
    logging.info('learner: %d expert transitions (%d episodes) from %s',
                 demos.num_transitions, demos.num_episodes, self._tc.demos)
    self._expert = ail_learner.expert_transitions(demos)
    self._update_generator = ail_learner.make_generator_update(
        self._cfg, self._ail)
    self._update_discriminator = ail_learner.make_discriminator_update(
        self._cfg, self._ail)
    return ail_learner.init(self._cfg, self._ail, dims, seed=self._tc.seed)

  def _mpo_state(self, state):
    return state.generator

  def _close_streams(self) -> None:
    for stream in (self._batches, self._disc_batches):
      if stream is not None:
        stream.close()

  def _windows_stream(self, k: int, b: int) -> replay.BatchStream:
    return replay.BatchStream(
        self._replay_address, functools.partial(
            replay.to_windows, layout=self._windows, k=k, b=b),
        rows_per_call=k * b)

  def _count(self, before, **deltas) -> dict:
    """Adds an update call's steps (and the rounds it completed) to the
    global counts; called under the lock, as the MPO node's step() does."""
    deltas['rounds'] = ail_learner.position(
        self._ail, self._state).round - before.round
    self._counts = call(self._counter, 'increment', **deltas)
    return self._counts

  def step(self, timeout: float = 1.0) -> Optional[dict]:
    """One update call of the phase the round plan says is next; returns the
    counts after it, or None if no batch arrived in `timeout` seconds."""
    before = ail_learner.position(self._ail, self._state)
    if before.phase == 'discriminator':
      k = self._ail.discriminator_steps_per_call
      if self._disc_batches is None:
        self._disc_batches = self._windows_stream(k, self._ail.batch_size)
      windows = self._disc_batches.get(timeout=timeout)
      if windows is None:
        return None
      with self._lock:
        if self._finished:
          return None
        self._state, metrics = self._update_discriminator(
            self._state, windows, self._expert)
        self._publish()
        counts = self._count(before, discriminator_steps=k)
      logger, step_key = self._disc_logger, 'discriminator_steps'
    else:
      k = self._cfg.sgd_steps_per_call
      if self._batches is None:
        self._batches = self._windows_stream(k, self._cfg.batch_size)
      windows = self._batches.get(timeout=timeout)
      if windows is None:
        return None
      with self._lock:
        if self._finished:
          return None
        self._state, metrics = self._update_generator(
            self._state, windows, self._expert)
        self._publish()
        counts = self._count(before, learner_steps=k)
      logger, step_key = self._logger, 'learner_steps'
    metrics = jax.device_get(metrics)
    self._log_call(logger, metrics, counts, step_key)
    if step_key == 'learner_steps':
      self._check_stalled(self._stall, metrics['finite'], metrics[step_key])
    else:
      self._check_stalled(self._disc_stall, metrics['discriminator_finite'],
                          metrics[step_key])
    return counts
