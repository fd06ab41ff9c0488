"""Checks of a resumed run's replay buffer before launch: a restored Reverb
table keeps the settings it was created with, and a damaged checkpoint would
kill the replay node after every other node had started."""

from __future__ import annotations

import os
from typing import Optional

from tandem.launch.errors import UsageError


# A restored Reverb table keeps the settings it was created with.
REPLAY_TABLE_FIELDS = ('replay_max_size', 'replay_min_size',
                       'samples_per_insert', 'replay_error_buffer')


def replay_checkpoint_exists(run_dir: str) -> bool:
  from tandem.agents.runtime.rundir import RunDir
  path = RunDir(run_dir).replay_checkpoints
  return os.path.isdir(path) and bool(os.listdir(path))


def check_replay_changes(changed: dict, cfg, run_dir: str,
                          drop_replay: bool) -> None:
  """Refuses a resume that changes the replay table's settings while the
  run's buffer would be restored with the old ones."""
  fields = [f for f in REPLAY_TABLE_FIELDS if f in changed]
  if (fields and cfg.replay_checkpoints and not drop_replay and
      replay_checkpoint_exists(run_dir)):
    raise UsageError(
        f'--resume {run_dir}: {", ".join(fields)} changed, but the run\'s '
        'replay buffer (checkpoints/replay/) is restored with the settings it '
        'was created with; resume without changing them, or add '
        '--drop_replay to start from an empty buffer (refilled to '
        'replay_min_size)')


def check_replay_checkpoint(cfg, run_dir: str, drop_replay: bool) -> None:
  """Refuses a resume whose replay checkpoint (the one Reverb would load)
  is incomplete or damaged in its framing (replay_checkpoints.check): the
  replay node would die at start, after every other node was launched, or
  Reverb would start from an empty buffer without a word."""
  from tandem.agents.replay import replay_checkpoints
  from tandem.agents.runtime.rundir import RunDir
  if not cfg.replay_checkpoints or drop_replay:
    return
  try:
    path = replay_checkpoints.latest(RunDir(run_dir).replay_checkpoints)
    if path is not None:
      replay_checkpoints.check(path)
  except (OSError, replay_checkpoints.ReplayCheckpointError) as e:
    raise UsageError(
        f'--resume {run_dir}: the replay buffer\'s checkpoint is incomplete '
        f'or damaged: {e}. Restore that file, or add --drop_replay to move '
        'checkpoints/replay/ aside (kept, not deleted) and start from an '
        'empty buffer (refilled to replay_min_size)') from e


def drop_replay(rd, segment: int) -> Optional[str]:
  """Moves the replay checkpoint aside (never deletes it); returns where."""
  if not replay_checkpoint_exists(rd.root):
    return None
  dest = rd.dropped_replay(segment)
  os.replace(rd.replay_checkpoints, dest)
  return dest
