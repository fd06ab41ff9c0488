"""Small demonstration files for program tests, made here rather than read
from ../shared, so the tests run on any checkout."""

import jax

from tandem.agents.ail import demonstrations
from tandem.agents.envs import environments
from tandem.agents.mpo import networks
from tandem.agents.mpo.config import MPOConfig


def write_cartpole_demos(path: str, episodes: int = 2) -> str:
  """A random small policy's mean actions on cartpole:swingup, in Tandem's
  demonstration format."""
  return write_demos(path, 'cartpole:swingup', episodes)


def write_demos(path: str, env_name: str, episodes: int = 2) -> str:
  """A random small policy's mean actions on env_name, in Tandem's
  demonstration format (on a terminating task, episodes that end in
  terminal states)."""
  env = environments.make_environment(env_name, seed=0)
  dims = environments.env_dims(env)
  keys = demonstrations.observation_keys(env)
  env.close()
  cfg = MPOConfig(policy_layers=(8,))
  params = networks.init_policy(jax.random.PRNGKey(0), dims.observation,
                                dims.action, cfg.policy_layers)
  demos = demonstrations.collect(env_name, params, cfg, episodes=episodes,
                                 seed=0)
  demonstrations.save(path, demos, keys)
  return path
