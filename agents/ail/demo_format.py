"""Expert demonstrations: Tandem's file format.

A demonstration file is a `.npz` archive (numpy's uncompressed or compressed
zip of `.npy` arrays, no pickled objects) holding T transitions, one per row.
Row i is one step of one episode: the observation *before* action i, the
action, and what the environment returned after it. With O the flat
observation size, D the action size and E the number of episodes:

* observations, in one of two layouts:
  - `observations` [T, O] float: the flat observation (gymnasium envs, or any
    env when the writer flattened it already);
  - `observations_<key>` [T, k] float, one array per entry of the
    environment's observation dict (dm_control). The flat observation the
    agent sees is their concatenation in the environment's observation-spec
    key order, which `observation_keys` reports;
* `next_observations` [T, O] or `next_observations_<key>` [T, k] float: the
  observation after action i, in the same layouts;
* `actions` [T, D] float, in [-1, 1]: Tandem's normalised action box
  (`wrappers.NormalizedEnvironment`), not the native bounds;
* `rewards` [T] float: the reward after action i;
* `discounts` [T] float, 0 or 1: the environment's discount after action i
  (0 where the episode terminated, 1 otherwise, time limits included), not
  the agent's γ: every environment Tandem runs gives 0 or 1;
* `episode_index` [T] int: which episode the row belongs to. Each episode's
  rows are contiguous; episodes may be numbered freely (e.g. by seed);
* `step_index` [T] int: 0, 1, 2, ... within each episode;
* `episode_returns` [E] float, optional: the sum of rewards of each episode,
  in order of first appearance. When present it is checked against the
  rewards; when absent it is computed from them.

Consecutive rows of one episode must chain: `next_observations[t]` equals
`observations[t + 1]`. A file whose arrays are shifted against one another
fails that check, instead of silently teaching a discriminator the wrong
transitions.

`shared/demos/cartpole_swingup_expert.npz` (beside the checkout) (dm_control
cartpole:swingup, per-key layout with keys `position` then `velocity`) is the
reference file of this format.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

OBSERVATIONS = 'observations'
NEXT_OBSERVATIONS = 'next_observations'
ACTIONS = 'actions'
REWARDS = 'rewards'
DISCOUNTS = 'discounts'
EPISODE_INDEX = 'episode_index'
STEP_INDEX = 'step_index'
EPISODE_RETURNS = 'episode_returns'


class DemoError(ValueError):
  """Bad demonstration file; message names the file and the array."""


class Demonstrations(NamedTuple):
  """T transitions from E episodes, as `load` returns and `save` takes."""
  observation: np.ndarray       # [T, O] float32, flat
  action: np.ndarray            # [T, D] float32, in [-1, 1]
  reward: np.ndarray            # [T] float32
  discount: np.ndarray          # [T] float32, 0 or 1
  next_observation: np.ndarray  # [T, O] float32, flat
  episode_index: np.ndarray     # [T] int32
  step_index: np.ndarray        # [T] int32
  episode_returns: np.ndarray   # [E] float32, in order of first appearance

  @property
  def num_transitions(self) -> int:
    return int(np.shape(self.observation)[0])

  @property
  def num_episodes(self) -> int:
    return int(np.shape(self.episode_returns)[0])

