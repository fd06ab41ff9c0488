"""The expert beside the agent: a demonstration episode replayed in the
environment, from the start state it had, for `tandem render --beside_expert`.

A demonstration file holds observations and actions, not simulator states,
so an episode can be shown only where its start can be found again: the
environment is built with the episode's own number as seed, then with seeds
0, 1, ..., until one resets to the episode's first observation
(`collect-demos` runs each episode on the seed it numbers it by; the
reference cartpole file's episode k started at seed k). The episode's actions are then replayed open-loop, and the replay
is held to the file: every observation it passes is compared with the one
the file holds (`drift`), so a task whose physics does not repeat is seen,
not hidden. The agent's side starts from the same seed.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tandem.launch.errors import UsageError

SEED_SEARCH = 100  # seeds tried for an episode's start
START_TOLERANCE = 1e-5


@dataclasses.dataclass(frozen=True)
class Episode:
  """One demonstration episode: its rows, in step order."""
  index: int
  observations: np.ndarray   # [T, O]
  actions: np.ndarray        # [T, D]
  rewards: np.ndarray        # [T]
  file_return: float


def episodes_of(demos, first: int, count: int) -> list[Episode]:
  """`count` episodes of the file from its `first`-th (0-based, in file
  order); a UsageError naming --expert_episode if the file has fewer."""
  order = list(dict.fromkeys(demos.episode_index.tolist()))
  if first < 0 or first + count > len(order):
    raise UsageError(f'--expert_episode {first}: the demonstrations hold '
                     f'{len(order)} episodes, and {count} from the '
                     f'{first}-th were asked for (--episodes)')
  out = []
  for k in range(first, first + count):
    rows = np.flatnonzero(demos.episode_index == order[k])
    rows = rows[np.argsort(demos.step_index[rows], kind='stable')]
    out.append(Episode(order[k], demos.observation[rows], demos.action[rows],
                       demos.reward[rows], float(demos.episode_returns[k])))
  return out


def start_seed(make_env, episode: Episode) -> int:
  """The first seed, of the episode's number then 0 .. SEED_SEARCH - 1,
  whose environment resets to the episode's first observation; a UsageError
  saying so if none does."""
  tried = [episode.index] if episode.index >= 0 else []
  for seed in dict.fromkeys(tried + list(range(SEED_SEARCH))):
    env = make_env(seed)
    try:
      first = np.asarray(env.reset().observation, np.float32)
    finally:
      env.close()
    if first.shape == episode.observations[0].shape and np.allclose(
        first, episode.observations[0], atol=START_TOLERANCE):
      return seed
  raise UsageError(
      f'--beside_expert: demonstration episode {episode.index} starts where '
      f'no environment seed (its number, 0..{SEED_SEARCH - 1}) resets to, so '
      'its start '
      'state cannot be set up again (the file holds observations, not '
      'simulator states); --no-beside_expert draws the agent alone')


@dataclasses.dataclass
class Replay:
  frames: list
  replay_return: float
  steps: int     # actions replayed (the episode's, or --steps of them)
  drift: float   # largest |observation - the file's| along the replay

  def file_return(self, episode: Episode) -> float:
    """The file's return over the steps replayed."""
    return float(np.sum(episode.rewards[:self.steps], dtype=np.float64))


def replay(env, episode: Episode, frame_of, *, every: int, steps) -> Replay:
  """The episode's actions from the environment's reset (seeded by
  start_seed), with a frame (`frame_of(env, step, return so far)`) at steps
  0, every, 2 every, ... and the last one taken."""
  timestep = env.reset()
  frames, total, drift = [], 0.0, 0.0
  length = len(episode.actions)
  for step in range(length + 1):
    last = step == length or timestep.last() or (
        steps is not None and step >= steps)
    if step < length:
      drift = max(drift, float(np.max(np.abs(
          np.asarray(timestep.observation, np.float32) -
          episode.observations[step]))))
    if step % every == 0 or last:
      frames.append(frame_of(env, step, total))
    if last:
      break
    timestep = env.step(episode.actions[step])
    total += float(timestep.reward or 0.0)
  return Replay(frames, total, step, drift)


def padded(agent: list, expert: list) -> tuple[list, list]:
  """Both sides as long as the longer, the shorter holding its last frame
  (an episode that ended sooner)."""
  n = max(len(agent), len(expert))
  pad = lambda f: f + [f[-1]] * (n - len(f))
  return pad(agent), pad(expert)


def pair(agent: list, expert: list) -> list:
  """Frames side by side (agent left), the shorter side holding its last."""
  return [np.concatenate([a, e], axis=1)
          for a, e in zip(*padded(agent, expert))]
