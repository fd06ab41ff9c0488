"""The expert's start found again (`expert_replay.start_seed`), on a fake
environment whose reset observation is a function of its seed: fast, where
the command-line test of the same refusal searches 100 real environments
(`make test-slow`)."""

import types

import numpy as np
import pytest

from tandem.launch import expert_replay
from tandem.launch.errors import UsageError


class _Env:
  """Resets to [seed, 2 seed]; counts the environments made and closed."""
  made = closed = 0

  def __init__(self, seed):
    self._seed = seed
    _Env.made += 1

  def reset(self):
    return types.SimpleNamespace(
        observation=np.array([self._seed, 2 * self._seed], np.float64))

  def close(self):
    _Env.closed += 1


def _episode(index, start):
  return expert_replay.Episode(
      index=index, observations=np.array([start, start], np.float32),
      actions=np.zeros((2, 1), np.float32), rewards=np.zeros(2, np.float32),
      file_return=0.0)


@pytest.fixture(autouse=True)
def _counts():
  _Env.made = _Env.closed = 0


def test_the_episodes_own_number_is_tried_first():
  assert expert_replay.start_seed(_Env, _episode(7, [7.0, 14.0])) == 7
  assert _Env.made == 1 == _Env.closed


def test_then_seeds_from_zero_up():
  # Episode 3 of a file whose episodes started elsewhere: seed 5 fits.
  assert expert_replay.start_seed(_Env, _episode(3, [5.0, 10.0])) == 5
  # 3, then 0, 1, 2, 4, 5: a seed is not tried twice.
  assert _Env.made == 6 == _Env.closed


def test_a_start_no_seed_resets_to_is_a_named_refusal():
  with pytest.raises(UsageError, match=(
      r'episode 4 starts where no environment seed \(its number, '
      rf'0\.\.{expert_replay.SEED_SEARCH - 1}\) resets to.*'
      '--no-beside_expert')):
    expert_replay.start_seed(_Env, _episode(4, [4.0, 8.5]))
  # Every seed tried once (the episode's own among them), each closed.
  assert _Env.made == expert_replay.SEED_SEARCH == _Env.closed


def test_a_start_within_the_tolerance_is_found():
  near = 9.0 + expert_replay.START_TOLERANCE / 2
  assert expert_replay.start_seed(_Env, _episode(-1, [near, 18.0])) == 9
