"""Actor and evaluator nodes: environment loops on the CPU.

Actors add n-step transitions to replay and report env steps to the global
counter every `counter_sync_period` steps; they stop acting once the global
env-step budget is reached (so the program overshoots by at most
num_actors × counter_sync_period steps) and wait for the program to stop.
The evaluator runs the mean action and logs its return against global env
steps; `evaluate_now` serves the final evaluation.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np

from agents.common import environments
from agents.common import logs
from agents.common import replay
from agents.common.lifecycle import Stopping, call, stop_requested
from agents.common.rundir import RunDir, capture_errors
from agents.mpo import actor as actor_lib


class InjectedCrash(RuntimeError):
  """Raised by the fault-injection test hook."""


class ActorNode:

  def __init__(self, train_config, actor_id: int, replay_client, counter,
               learner, run_dir: str):
    self._tc = train_config
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

  def _run(self):
    tc, cfg = self._tc, self._tc.mpo
    env = environments.make_environment(tc.env, seed=tc.seed * 1000 +
                                        self._id + 1)
    dims = environments.env_dims(env)
    adder = replay.make_adder(
        self._replay_address,
        replay.TransitionLayout(dims.observation_dim, dims.action_dim),
        n_step=cfg.n_step, discount=cfg.discount, should_stop=stop_requested)
    get_variables = lambda: call(self._learner, 'get_variables')
    actor = actor_lib.Actor(
        cfg, get_variables(), seed=tc.seed * 1000 + self._id,
        variable_source=get_variables,
        update_period=tc.actor_update_period, adder=adder)
    logger = logs.Logger(self._run_dir.logs, f'actor_{self._id}',
                         tensorboard=False)
    try:
      self._act(env, actor, logger)
    finally:
      # Closes the writer's stream, so the replay server can stop promptly.
      adder.close()

  def _act(self, env, actor, logger):
    tc = self._tc
    crash_after = tc.fault_injection_actor_crash_after if self._id == 0 else 0
    unsynced, total, counts = 0, 0, call(self._counter, 'get_counts')
    while counts['env_steps'] < tc.env_step_budget and not stop_requested():
      timestep = env.reset()
      actor.observe_first(timestep)
      episode_return, episode_steps = 0.0, 0
      while not timestep.last():
        action = actor.select_action(timestep.observation)
        timestep = env.step(action)
        actor.observe(action, timestep)
        actor.update()
        episode_return += float(timestep.reward)
        episode_steps += 1
        unsynced += 1
        total += 1
        if crash_after and total >= crash_after:
          raise InjectedCrash(f'actor_{self._id}: injected crash after '
                              f'{total} env steps (fault_injection_actor_'
                              'crash_after)')
        if unsynced >= tc.counter_sync_period:
          counts = call(self._counter, 'increment', env_steps=unsynced)
          unsynced = 0
          if counts['env_steps'] >= tc.env_step_budget or stop_requested():
            break
      counts = call(self._counter, 'increment', env_steps=unsynced,
                    episodes=int(timestep.last()))
      unsynced = 0
      if timestep.last():
        logger.write({'env_steps': counts['env_steps'],
                      'learner_steps': counts['learner_steps'],
                      'episode_return': episode_return,
                      'episode_steps': episode_steps,
                      'elapsed_s': counts['elapsed_s']})
    logging.info('actor_%d: budget reached or stop requested; idle', self._id)
    while not stop_requested(1.0):
      pass


def run_episodes(env, actor: actor_lib.Actor, episodes: int) -> list[float]:
  """Returns of `episodes` episodes of `actor` (deterministic for eval)."""
  returns = []
  for _ in range(episodes):
    timestep = env.reset()
    total = 0.0
    while not timestep.last():
      timestep = env.step(actor.select_action(timestep.observation))
      total += float(timestep.reward)
    returns.append(total)
  return returns


class EvaluatorNode:

  def __init__(self, train_config, counter, learner, run_dir: str):
    self._tc = train_config
    self._counter = counter
    self._learner = learner
    self._run_dir = RunDir(run_dir)
    self._lock = threading.Lock()
    self._env = None
    self._logger = None
    self._actor = None

  def _setup(self):
    if self._env is None:
      self._env = environments.make_environment(
          self._tc.env, seed=self._tc.seed * 1000 + 999)
      self._logger = logs.Logger(self._run_dir.logs, 'evaluator',
                                 tensorboard=self._tc.tensorboard)
      get_variables = lambda: call(self._learner, 'get_variables')
      self._actor = actor_lib.Actor(self._tc.mpo, get_variables(), seed=0,
                                    variable_source=get_variables,
                                    deterministic=True)

  def evaluate_now(self, episodes: int = 0, label: str = 'periodic') -> dict:
    """Evaluates the learner's latest policy; logs and returns the result."""
    with self._lock:
      self._setup()
      counts = call(self._counter, 'get_counts')
      self._actor.update(wait=True)  # the learner's latest policy
      returns = run_episodes(self._env, self._actor,
                             episodes or self._tc.eval_episodes)
      row = {'env_steps': counts['env_steps'],
             'learner_steps': counts['learner_steps'],
             'elapsed_s': counts['elapsed_s'],
             'eval_return': float(np.mean(returns)),
             'eval_return_min': float(np.min(returns)),
             'eval_return_max': float(np.max(returns)),
             'final': int(label == 'final')}
      self._logger.write(row)
      call(self._counter, 'set_extra', last_eval_return=row['eval_return'],
           last_eval_env_steps=counts['env_steps'])
      return row

  def run(self):
    with capture_errors(self._run_dir, 'evaluator'):
      try:
        self._loop()
      except Stopping:
        pass

  def _loop(self):
    period = self._tc.eval_period_env_steps
    counts = call(self._counter, 'get_counts')
    next_eval = (counts['env_steps'] // period + 1) * period \
        if counts['env_steps'] else 0
    while not stop_requested(1.0):
      counts = call(self._counter, 'get_counts')
      if counts['env_steps'] >= self._tc.env_step_budget:
        continue  # the steps limiter runs the final evaluation
      if counts['env_steps'] >= next_eval:
        self.evaluate_now()
        next_eval = (counts['env_steps'] // period + 1) * period
