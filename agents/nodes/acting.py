"""Actor and evaluator nodes: environment loops on the CPU.

Each actor steps `envs_per_actor` environments in lockstep (EnvGroup), adds
n-step transitions to replay and reports env steps to the global counter
every `counter_sync_period` steps and at every episode end; it stops acting
once the global env-step budget is reached (so the program overshoots by at
most num_actors × (counter_sync_period + envs_per_actor) steps) and waits for
the program to stop.
The evaluator runs the mean action and logs its return against global env
steps; `evaluate_now` serves the final evaluation.

Both survive exceptions from their environments (agents/envs/env_faults.py):
the episode in progress is dropped (an actor's unfinished n-step windows with
it, an evaluation's partial return with it), the environment is rebuilt with
a seed drawn from the node's seed path and fault index, and the fault counts
in the global `env_faults` count, which every row of their CSVs carries.
"""

from __future__ import annotations

import logging
import threading
from typing import Optional

import numpy as np

from tandem.agents.envs import environments
from tandem.agents.mpo import actor as actor_lib
from tandem.agents.nodes.node_envs import (ACTOR_ENVS, ACTOR_POLICY,
                                           EVALUATOR_ENV, EVALUATOR_POLICY,
                                           EVALUATOR_SAMPLED_ENV,
                                           launch_seed_path,
                                           node_env_faults, rebuilding_env,
                                           seed_for)
from tandem.agents.replay import adders
from tandem.agents.replay import layouts
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import logs
from tandem.agents.runtime.lifecycle import Stopping, call, stop_requested
from tandem.agents.runtime.rundir import RunDir, capture_errors


class InjectedCrash(RuntimeError):
  """Raised by the fault-injection test hook."""


class EnvGroup:
  """K environments stepped in lockstep by one actor, one phase at a time.

  `step()` runs K policy calls, then K environment steps, then K replay
  writes, rather than policy-env-write per environment: each phase's code and
  data stay in cache, which is worth ~15% env steps/s per process at K=4 on
  walker (bench/actor.py). Each environment has its own n-step adder; the
  policy (and its parameter refresh) is shared.

  An environment whose `step` returns None (a RebuildingEnv that raised and
  was rebuilt) loses its episode: its adder drops the unfinished windows,
  its partial return is not reported, and it restarts from a reset while
  the others carry on.
  """

  def __init__(self, envs, actor: actor_lib.Actor, replay_adders=None):
    self._envs = list(envs)
    self._actor = actor
    self._adders = list(replay_adders) if replay_adders is not None else \
        [None] * len(self._envs)
    if len(self._adders) != len(self._envs):
      raise ValueError(f'{len(self._adders)} adders for {len(self._envs)} '
                       'environments')
    self._timesteps = [self._first(i) for i in range(len(self._envs))]
    self._returns = [0.0] * len(self._envs)
    self._lengths = [0] * len(self._envs)
    # Env steps the last `step` completed: a faulted one made no transition
    # and counts toward no budget, rate or refresh period.
    self.completed = 0

  def __len__(self) -> int:
    return len(self._envs)

  def _first(self, i: int):
    timestep = self._envs[i].reset()
    if self._adders[i] is not None:
      self._adders[i].add_first(timestep)
    return timestep

  def _discard(self, i: int):
    """Drops environment i's episode in progress; returns the first
    timestep of its next one."""
    if self._adders[i] is not None:
      self._adders[i].reset()
    self._returns[i], self._lengths[i] = 0.0, 0
    return self._first(i)

  def step(self) -> list[tuple[float, int]]:
    """One step of every environment. Returns (return, length) of each
    episode that ended in it; those environments start a new one, as do
    those that faulted (whose episodes are not returned)."""
    actions = self._actor.select_action(
        np.stack([ts.observation for ts in self._timesteps]))
    timesteps = [env.step(a) for env, a in zip(self._envs, actions)]
    self.completed = sum(t is not None for t in timesteps)
    ended = []
    for i, (action, timestep) in enumerate(zip(actions, timesteps)):
      if timestep is None:
        timesteps[i] = self._discard(i)
        continue
      if self._adders[i] is not None:
        self._adders[i].add(action, timestep)
      self._returns[i] += float(timestep.reward)
      self._lengths[i] += 1
      if timestep.last():
        ended.append((self._returns[i], self._lengths[i]))
        self._returns[i], self._lengths[i] = 0.0, 0
        timesteps[i] = self._first(i)
    self._timesteps = timesteps
    self._actor.update(steps=self.completed)
    return ended


class ActorNode:

  def __init__(self, train_config, actor_id: int, replay_client, counter,
               learner, run_dir: str, window_steps: bool = False,
               segment: int = 1, tables: tuple = (layouts.TABLE,)):
    """window_steps: write n-step windows (layouts.WindowLayout) instead of
    summed n-step transitions, for learners that relabel rewards.
    segment: which launch of the run this is (`launch_seed_path`).
    tables: the replay tables each row goes to (an item of each)."""
    self._tc = train_config
    self._root = launch_seed_path(train_config.seed, segment)
    self._window_steps = window_steps
    self._tables = tuple(tables)
    self._id = actor_id
    self._replay_address = replay_client.server_address
    self._counter = counter
    self._learner = learner
    self._run_dir = RunDir(run_dir)

  def run(self):
    with capture_errors(self._run_dir, f'actor_{self._id}'):
      try:
        self._run()
      except Stopping:
        logging.info('actor_%d: stopped mid-call (replay or RPC)', self._id)
      except InjectedCrash:
        raise  # a crash by definition: waiting would only delay its report
      except Exception as e:  # noqa: BLE001  (re-raised unless stopping)
        # A replay server that stops first cancels the writes blocked on
        # its rate limiter (Reverb: RuntimeError "Cancelled"), and this
        # node's own stop may arrive a moment later: that is the stop, not
        # a crash (as for Courier calls: lifecycle.call).
        if not lifecycle.stop_requested(lifecycle.STOP_GRACE_S):
          raise
        # Any error, so logged whole: one of the actor's own that happened
        # to coincide with the stop stays readable in its node log.
        logging.warning('actor_%d: stopped; an error came with the stop: '
                        '%r', self._id, e, exc_info=True)

  def _run(self):
    tc, cfg = self._tc, self._tc.mpo
    faults = node_env_faults(tc, f'actor_{self._id}', self._run_dir,
                             self._counter)
    fault_every = tc.fault_injection_env_fault_every if self._id == 0 else 0
    envs = [rebuilding_env(tc.env, (*self._root, ACTOR_ENVS, self._id, k),
                           faults, slot=k, fault_every=fault_every)
            for k in range(tc.envs_per_actor)]
    dims = environments.env_dims(envs[0])
    layout = layouts.layout_for(dims.observation, dims.action,
                                cfg.n_step, self._window_steps)
    writers = [adders.make_adder(self._replay_address, layout,
                                 n_step=cfg.n_step, discount=cfg.discount,
                                 should_stop=stop_requested,
                                 table=self._tables) for _ in envs]
    get_variables = lambda: call(self._learner, 'get_variables')
    actor = actor_lib.Actor(
        cfg, get_variables(),
        seed=seed_for(*self._root, ACTOR_POLICY, self._id),
        variable_source=get_variables, update_period=tc.actor_update_period)
    logger = logs.Logger(self._run_dir.logs, f'actor_{self._id}',
                         tensorboard=tc.tensorboard)
    try:
      self._act(EnvGroup(envs, actor, writers), logger)
    finally:
      # Closes the writers' streams, so the replay server can stop promptly.
      for writer in writers:
        writer.close()

  def _act(self, group: EnvGroup, logger):
    tc = self._tc
    crash_after = tc.fault_injection_actor_crash_after if self._id == 0 else 0
    unsynced, total = 0, 0
    counts = call(self._counter, 'get_counts')
    while counts['env_steps'] < tc.env_step_budget and not stop_requested():
      ended = group.step()
      unsynced += group.completed
      total += group.completed
      if crash_after and total >= crash_after:
        raise InjectedCrash(f'actor_{self._id}: injected crash after '
                            f'{total} env steps (fault_injection_actor_'
                            'crash_after)')
      if ended or unsynced >= tc.counter_sync_period:
        counts = call(self._counter, 'increment', env_steps=unsynced,
                      episodes=len(ended))
        unsynced = 0
        for episode_return, episode_steps in ended:
          logger.write({**logs.count_columns(counts),
                        'env_faults': int(counts.get('env_faults', 0)),
                        'episode_return': episode_return,
                        'episode_steps': episode_steps})
    if unsynced:
      call(self._counter, 'increment', env_steps=unsynced)
    logging.info('actor_%d: budget reached or stop requested; idle', self._id)
    while not stop_requested(1.0):
      pass


def run_episodes(env, actor: actor_lib.Actor, episodes: int,
                 record: bool = False) -> tuple[list, list]:
  """(returns, recorded) of `episodes` episodes of `actor` (deterministic
  for eval). With `record`, each recorded episode is a dict of arrays
  observation [T, O], action [T, D], reward [T], discount [T],
  next_observation [T, O]; without it, recorded is empty.

  An episode whose `env.step` returns None (a RebuildingEnv that raised) is
  dropped and run again: a partial return would read as a bad policy. The
  environment's fault limit bounds the retries.
  """
  returns, recorded = [], []
  while len(returns) < episodes:
    episode = _run_episode(env, actor, record)
    if episode is None:
      continue
    total, steps = episode
    returns.append(total)
    if record:
      names = ('observation', 'action', 'reward', 'discount',
               'next_observation')
      recorded.append({name: np.asarray([s[i] for s in steps], np.float32)
                       for i, name in enumerate(names)})
  return returns, recorded


def _run_episode(env, actor, record: bool):
  """(return, recorded steps) of one episode, or None if it faulted."""
  timestep = env.reset()
  total = 0.0
  steps = []
  while not timestep.last():
    obs = timestep.observation
    action = actor.select_action(obs)
    timestep = env.step(action)
    if timestep is None:
      return None
    total += float(timestep.reward)
    if record:  # copies: an environment may refill one buffer in place
      steps.append((np.array(obs), action, timestep.reward,
                    timestep.discount, np.array(timestep.observation)))
  return total, steps


def first_evaluation_at(env_steps: int, period: int) -> int:
  """The global env step at which an evaluator that finds `env_steps` on
  the counter evaluates first.

  Within the first period it evaluates at once, so every run's curve starts
  with its initial policy whether the evaluator or the actors started
  first; later (a resume) at the next multiple of `period`.
  """
  return 0 if env_steps < period else (env_steps // period + 1) * period


def return_columns(name: str, returns) -> dict:
  """{name, name_min, name_max}: the mean, lowest and highest of episode
  `returns` (NaN each where there are none)."""
  if not len(returns):
    return dict.fromkeys((name, f'{name}_min', f'{name}_max'), float('nan'))
  return {name: float(np.mean(returns)), f'{name}_min': float(np.min(returns)),
          f'{name}_max': float(np.max(returns))}


SAMPLED_COLUMNS = tuple(return_columns('eval_sampled_return', ()))


class EvaluatorNode:

  def __init__(self, train_config, counter, learner, run_dir: str,
               segment: int = 1):
    self._tc = train_config
    self._root = launch_seed_path(train_config.seed, segment)
    self._counter = counter
    self._learner = learner
    self._run_dir = RunDir(run_dir)
    self._lock = threading.Lock()
    self._env = None
    self._faults = None
    self._logger = None
    self._actor = None
    self._sampling_actor = None
    self._sampling_env = None
    self._policy = None  # the params of the latest _fetch_policy

  def _setup(self):
    if self._env is None:
      self._faults = node_env_faults(self._tc, 'evaluator', self._run_dir,
                                     self._counter)
      # A run of faults ends with a completed episode, not a step: an
      # environment that faults in every episode must fail the node rather
      # than keep the evaluation (and the final one, the program) waiting.
      self._env = rebuilding_env(self._tc.env, (*self._root, EVALUATOR_ENV),
                                 self._faults, recover_on='episode')
      self._logger = logs.Logger(self._run_dir.logs, 'evaluator',
                                 tensorboard=self._tc.tensorboard,
                                 optional=SAMPLED_COLUMNS)
      self._actor = actor_lib.Actor(self._tc.mpo, self._latest_policy(),
                                    seed=0,
                                    variable_source=self._latest_policy,
                                    deterministic=True)
      if self._tc.eval_sampled:
        # The same params as the mean action's, refreshed after them, in an
        # environment of their own: the mean action's episodes start where
        # they would without the samples'.
        self._sampling_actor = actor_lib.Actor(
            self._tc.mpo, self._policy,
            seed=seed_for(*self._root, EVALUATOR_POLICY),
            variable_source=lambda: self._policy)
        self._sampling_env = rebuilding_env(
            self._tc.env, (*self._root, EVALUATOR_SAMPLED_ENV), self._faults,
            slot=1, recover_on='episode')
        header = self._logger.columns
        if header is not None and SAMPLED_COLUMNS[0] not in header:
          logging.warning(
              '%s began without the columns %s (a log written without '
              'them): they go to TensorBoard and final.json only',
              self._logger.path, ', '.join(SAMPLED_COLUMNS))

  def _latest_policy(self):
    """Fetches the learner's latest policy params and keeps them for the
    sampling actor."""
    self._policy = self._fetch_policy()
    return self._policy

  # Whether evaluate_now records its episodes' transitions for
  # `_episode_metrics` (an evaluator that scores them sets it).
  records_episodes = False

  def _episode_metrics(self, episodes: list) -> dict:
    """Extra columns of an evaluation row, from the recorded episodes."""
    del episodes
    return {}

  def evaluate_now(self, episodes: int = 0, label: str = 'periodic',
                   counts: Optional[dict] = None) -> dict:
    """Evaluates the learner's latest policy, its mean action (and its
    samples, with eval_sampled); logs and returns the result, under
    `counts` (the final evaluation's: those of the learner's last
    checkpoint) or the counter's now."""
    with self._lock:
      self._setup()
      if counts is None:
        counts = call(self._counter, 'get_counts')
      self._actor.update(wait=True)  # the learner's latest policy
      faults_before = self._faults.total
      episodes = episodes or self._tc.eval_episodes
      returns, recorded = run_episodes(
          self._env, self._actor, episodes, record=self.records_episodes)
      sampled = self._sampled_columns(episodes)
      row = {**logs.count_columns(counts),
             **sampled,
             **self._episode_metrics(recorded),
             # `counts` predates the episodes; a fault in them is newer.
             'env_faults': max(int(counts.get('env_faults', 0)),
                               self._faults.global_count),
             'eval_env_faults': self._faults.total - faults_before,
             **return_columns('eval_return', returns),
             'final': int(label == 'final')}
      self._logger.write(row)
      call(self._counter, 'set_extra', last_eval_return=row['eval_return'],
           last_eval_env_steps=counts['env_steps'])
      return row

  def _sampled_columns(self, episodes: int) -> dict:
    """The return of `episodes` episodes of the policy's samples, from
    the params the mean action's episodes ran (NaN where eval_sampled is
    off)."""
    returns = ()
    if self._sampling_actor is not None:
      self._sampling_actor.update(wait=True)
      returns, _ = run_episodes(self._sampling_env, self._sampling_actor,
                                episodes, record=False)
    return return_columns('eval_sampled_return', returns)

  def _fetch_policy(self):
    """The learner's latest policy params (a subclass also fetches what
    `_episode_metrics` needs, in the same call)."""
    return call(self._learner, 'get_variables')

  def run(self):
    with capture_errors(self._run_dir, 'evaluator'):
      try:
        self._loop()
      except Stopping:
        pass

  def _loop(self):
    period = self._tc.eval_period_env_steps
    counts = call(self._counter, 'get_counts')
    next_eval = first_evaluation_at(counts['env_steps'], period)
    while not stop_requested(1.0):
      counts = call(self._counter, 'get_counts')
      if counts['env_steps'] >= self._tc.env_step_budget:
        continue  # the steps limiter runs the final evaluation
      if counts['env_steps'] >= next_eval:
        # Under the counts checked against the budget: read again, they
        # could pass the final evaluation's (finish() reads in between).
        self.evaluate_now(counts=counts)
        next_eval = (counts['env_steps'] // period + 1) * period
