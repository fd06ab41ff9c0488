"""The seeds and environments of the acting nodes: one seed path per node
and launch (a resumed launch draws new streams, a repeated one the same),
one seed per rebuild of an environment after a fault, and the rebuilding,
fault-counting environment each actor and the evaluator steps."""

from __future__ import annotations

import numpy as np

from tandem.agents.envs import env_faults
from tandem.agents.envs import environments
from tandem.agents.runtime.lifecycle import call
from tandem.agents.runtime.rundir import RunDir


def seed_for(*path: int) -> int:
  """A 32-bit seed for the thing at `path`, e.g. (run seed, ACTOR_ENVS,
  actor id, env index): distinct paths give independent streams, which
  `run seed * 1000 + id` arithmetic does not once ids pass 1000."""
  return int(np.random.SeedSequence(list(path)).generate_state(1)[0])


ACTOR_ENVS, ACTOR_POLICY, EVALUATOR_ENV = 0, 1, 2
# Marks the seed path of a resumed launch (segment >= 2).
RESUMED = 4
# The evaluator's sampled actions and the environment they act in
# (TrainConfig.eval_sampled).
EVALUATOR_POLICY, EVALUATOR_SAMPLED_ENV = 5, 6


def launch_seed_path(seed: int, segment: int) -> tuple:
  """The root of every actor and evaluator seed path in the `segment`-th
  launch of a run (1 for the first, k for the (k-1)-th resume): the run's
  seed alone at first, so a run is reproducible from its seed; a new root
  per resume, so resumed actors and the evaluator draw new environment and
  exploration streams instead of replaying the first launch's, and the
  same ones whenever that resume is repeated."""
  if segment < 1:
    raise ValueError(f'segment: expected an integer >= 1, got {segment}')
  return (seed,) if segment == 1 else (seed, RESUMED, segment)
# Marks a rebuilt environment's seed path. Nonzero, and followed by a fault
# index >= 1: SeedSequence pads entropy with zeros, so a path ending in zeros
# would collide with its own prefix (seed_for(1, 2) == seed_for(1, 2, 0)).
ENV_REBUILT = 3


def env_seed(path: tuple, fault_index: int) -> int:
  """The seed of the environment at `path` (e.g. (run seed, ACTOR_ENVS,
  actor id, env index)): the path's own seed at first, a fresh one derived
  from the path and the node's fault index after its k-th fault, so a
  rebuilt environment neither replays the stream that faulted nor varies
  from one run of the same seed to another."""
  if fault_index == 0:
    return seed_for(*path)
  return seed_for(*path, ENV_REBUILT, fault_index)


def node_env_faults(train_config, node: str, run_dir: RunDir,
                    counter) -> env_faults.EnvFaults:
  """A node's fault bookkeeping, counting each fault in the global
  counter's `env_faults`."""
  return env_faults.EnvFaults(
      node, train_config.env, train_config.max_consecutive_env_faults,
      run_dir.errors,
      report=lambda: call(counter, 'increment', env_faults=1))


class InjectedEnvFault(RuntimeError):
  """Raised by the environment-fault test hook."""


class _FaultyEnv:
  """Test hook: an environment whose every `every`-th step raises (every=1:
  an environment that never takes a step)."""

  def __init__(self, env, every: int):
    self._env, self._every, self._steps = env, every, 0

  def step(self, action):
    self._steps += 1
    if self._steps % self._every == 0:
      raise InjectedEnvFault(f'injected environment fault at step '
                             f'{self._steps}')
    return self._env.step(action)

  def __getattr__(self, name):
    return getattr(self._env, name)


def rebuilding_env(env_name: str, seed_path: tuple,
                   faults: env_faults.EnvFaults, slot: int = 0,
                   recover_on: str = 'step',
                   fault_every: int = 0) -> env_faults.RebuildingEnv:
  """Environment `env_name` seeded from `seed_path`, rebuilt with a fresh
  seed whenever it raises. fault_every > 0: the test hook above."""
  def make(seed):
    env = environments.make_environment(env_name, seed=seed)
    return _FaultyEnv(env, fault_every) if fault_every else env
  return env_faults.RebuildingEnv(
      make, lambda k: env_seed(seed_path, k), faults, slot=slot,
      recover_on=recover_on)
