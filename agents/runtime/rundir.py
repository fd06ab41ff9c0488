"""The run directory: where a program's config, logs, checkpoints and errors live.

runs/<name>/
  config.json               the resolved config (what --resume reads)
  counter.json              global counts, checkpointed by the counter node
  progress.json             the live status line's source
  final.json                written once the budget is reached (a resume
                            past it moves the earlier one to
                            nodes/segment-<k>/final.json)
  checkpoints/learner/      ckpt-<learner steps>.npz, newest few kept
  checkpoints/replay/       Reverb's newest replay checkpoint (restored on
                            resume); replay_checkpoint.json: its size, time
  logs/<node>.csv, logs/tb/ every row keyed by global env and learner steps
  errors/<node>.txt         the traceback of a node that crashed (this launch;
                            earlier launches' under errors/segment-<k>/)
  errors/env_faults/        <node>-<k>.txt: the k-th environment exception a
                            node survived (agents/envs/env_faults.py)
  nodes/segment-<k>/        each node's stdout/stderr, per launch
  config_history.jsonl      one line per launch: resume or not, what changed,
                            the code's git commit (launch/prepare.py)
  .lock                     held by the launcher while the program runs
  .nodes.lock               held (shared) by every node process while it runs
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import os
import sys
import traceback

from tandem.agents.core import files
from tandem.agents.envs.env_faults import ENV_FAULTS
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import supervision


@dataclasses.dataclass(frozen=True)
class RunDir:
  root: str

  @property
  def config(self): return os.path.join(self.root, 'config.json')
  @property
  def counter(self): return os.path.join(self.root, 'counter.json')
  @property
  def progress(self): return os.path.join(self.root, 'progress.json')
  @property
  def final(self): return os.path.join(self.root, 'final.json')
  @property
  def final_pending(self):
    """Exists from the final evaluation's start until final.json does."""
    return os.path.join(self.root, 'final.pending.json')
  @property
  def learner_checkpoints(self):
    return os.path.join(self.root, 'checkpoints', 'learner')
  @property
  def replay_checkpoints(self):
    return os.path.join(self.root, 'checkpoints', 'replay')
  @property
  def replay_checkpoint_record(self):
    return os.path.join(self.root, 'checkpoints', 'replay_checkpoint.json')
  @property
  def replay_restored(self):
    return os.path.join(self.root, 'checkpoints', 'replay_restored.json')
  @property
  def logs(self): return os.path.join(self.root, 'logs')
  @property
  def errors(self): return os.path.join(self.root, 'errors')
  @property
  def nodes(self): return os.path.join(self.root, 'nodes')
  @property
  def lock(self): return os.path.join(self.root, '.lock')
  @property
  def stopped(self):
    """Markers of the nodes of the current launch that finished."""
    return os.path.join(self.root, '.stopped')

  def segment_nodes(self, segment: int) -> str:
    """nodes/segment-<k>/: the node logs of the k-th launch of this run."""
    return os.path.join(self.nodes, f'segment-{segment}')

  def dropped_replay(self, segment: int) -> str:
    """checkpoints/replay-dropped-segment-<k>: where --drop_replay moves
    the replay checkpoints aside in the k-th launch."""
    return f'{self.replay_checkpoints}-dropped-segment-{segment}'

  def highest_segment(self) -> int:
    """The largest k of any per-launch folder an earlier launch left
    (nodes/segment-<k>, errors/segment-<k>, logs/discarded/segment-<k>,
    checkpoints/replay-dropped-segment-<k>); 0 if none."""
    found = 0
    places = ((self.nodes, 'segment-'), (self.errors, 'segment-'),
              (os.path.join(self.logs, 'discarded'), 'segment-'),
              (os.path.dirname(self.replay_checkpoints),
               os.path.basename(self.dropped_replay(0))[:-1]))
    for parent, prefix in places:
      try:
        names = os.listdir(parent)
      except OSError:
        continue
      for name in names:
        k = name[len(prefix):]
        if name.startswith(prefix) and k.isdigit():
          found = max(found, int(k))
    return found

  def archive_errors(self, segment: int) -> None:
    """Moves the crash reports at the top of errors/ and the environment
    fault reports of errors/env_faults/ (a previous launch's) into
    errors/segment-<segment>/, so a resume neither loses them nor mistakes
    them for its own (nor overwrites them: fault indices restart at 1)."""
    if not os.path.isdir(self.errors):
      return
    dest = os.path.join(self.errors, f'segment-{max(segment, 0)}')
    _move_files(self.errors, dest, lambda n: n.endswith('.txt'))
    faults = os.path.join(self.errors, ENV_FAULTS)
    _move_files(faults, os.path.join(dest, ENV_FAULTS), lambda n: True)
    if os.path.isdir(faults) and not os.listdir(faults):
      os.rmdir(faults)  # the new launch has survived no fault yet

  def remove_stray_temporaries(self) -> list:
    """Deletes `.tmp-*` files (files.write_atomic's, left by a process
    killed mid-write) in the run directory and its checkpoint folder;
    returns their names. Only called while this launcher holds the lock."""
    removed = []
    for d in (self.root, self.learner_checkpoints, self.logs):
      if os.path.isdir(d):
        for name in os.listdir(d):
          if name.startswith('.tmp-'):
            os.unlink(os.path.join(d, name))
            removed.append(name)
    return removed

  def links(self) -> list:
    """Every symbolic link inside the run directory (not the directory
    itself, which may be a link to a larger disk), sorted. Tandem makes
    none: one found here was planted, and a write through it would land on
    its target."""
    found = []
    for parent, dirs, names in os.walk(self.root):
      found += [os.path.join(parent, n) for n in dirs + names
                if os.path.islink(os.path.join(parent, n))]
    return sorted(found)

  def make(self) -> 'RunDir':
    for d in (self.root, self.learner_checkpoints, self.logs, self.errors,
              self.nodes):
      os.makedirs(d, exist_ok=True)
    return self


class RunDirLocked(RuntimeError):
  """Another program is writing into this run directory."""


class Lock:
  """An exclusive flock on runs/<name>/.lock, released when the process ends.

  The OS drops the lock with the process, so a crashed launcher never leaves
  a stale lock behind.
  """

  def __init__(self, run_dir: RunDir):
    self._path = run_dir.lock
    self._fd = None

  def acquire(self) -> None:
    os.makedirs(os.path.dirname(self._path), exist_ok=True)
    # Never through a link planted as .lock: truncating it would truncate
    # the link's target (the pre-launch check refuses links by name first).
    fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
      os.close(fd)
      if e.errno in (errno.EAGAIN, errno.EACCES):
        holder = ''
        try:
          holder = open(self._path).read().strip()
        except OSError:
          pass
        raise RunDirLocked(
            f'run directory {os.path.dirname(self._path)} is in use by another '
            f'program ({holder or "unknown pid"}); stop it first or choose '
            'another --name') from None
      raise
    os.ftruncate(fd, 0)
    os.write(fd, f'pid {os.getpid()}\n'.encode())
    self._fd = fd

  def release(self) -> None:
    if self._fd is not None:
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None


@contextlib.contextmanager
def capture_errors(run_dir: RunDir, node: str):
  """Writes a crashing node's traceback to errors/<node>.txt, then re-raises,
  so the launcher can name the node and its error.

  Every node's run() starts here, in the node's main thread, so this is also
  where a node records its program's stop event for its other threads
  (lifecycle.capture_stop_event), ties its process to its launcher and takes
  the run directory's node lock (supervision.node_started).
  """
  lifecycle.capture_stop_event()
  supervision.node_started(run_dir.root)
  try:
    yield
    _mark_stopped(run_dir, node)
  except BaseException as e:
    if not isinstance(e, (KeyboardInterrupt, SystemExit)):
      _write_crash_report(run_dir, node, e)
    raise


def _write_crash_report(run_dir: RunDir, node: str, e: BaseException) -> None:
  """errors/<node>.txt: the error and its traceback, whole or not at all.
  Where it cannot be written (a full disk), the half-written file goes and
  the report goes to this node's stderr (its log) instead, and the error
  being reported stays the one that escapes."""
  path = os.path.join(run_dir.errors, f'{node}.txt')
  text = f'{type(e).__name__}: {e}\n\n{traceback.format_exc()}'
  try:
    os.makedirs(run_dir.errors, exist_ok=True)
    with files.open_to_write(path) as f:
      f.write(text)
  except OSError as write_error:
    with contextlib.suppress(OSError):
      if not os.path.islink(path):
        os.unlink(path)
    print(f'{node}: could not write {path} ({write_error}); the crash:\n'
          f'{text}', file=sys.stderr)


def _move_files(src: str, dest: str, keep) -> None:
  """Moves the plain files of `src` whose names satisfy `keep` to `dest`
  (created only if something moves)."""
  if not os.path.isdir(src):
    return
  names = [n for n in os.listdir(src)
           if keep(n) and os.path.isfile(os.path.join(src, n))]
  if names:
    os.makedirs(dest, exist_ok=True)
  for name in names:
    os.replace(os.path.join(src, name), os.path.join(dest, name))


def _mark_stopped(run_dir: RunDir, node: str) -> None:
  """A node that got to the end of its run() (its stop path included)
  says so, with the time: a node of the launch without such a marker and
  without a crash report was killed, typically by Launchpad's SIGKILL at
  the end of the stop's grace period."""
  import json
  import time
  os.makedirs(run_dir.stopped, exist_ok=True)
  with files.open_to_write(os.path.join(run_dir.stopped, node)) as f:
    json.dump({'node': node, 'time': time.time()}, f)


def read_stopped(run_dir: RunDir) -> dict[str, float]:
  """{node: time it finished} for the nodes of this launch that finished."""
  import json
  out = {}
  if os.path.isdir(run_dir.stopped):
    for name in os.listdir(run_dir.stopped):
      try:
        with open(os.path.join(run_dir.stopped, name)) as f:
          out[name] = float(json.load(f)['time'])
      except (OSError, ValueError, RecursionError, KeyError):
        pass
  return out


def read_errors(run_dir: RunDir) -> dict[str, str]:
  """{node: traceback} of this launch's crashed nodes: the files
  errors/<node>.txt, not the folders beside them (earlier segments,
  survived environment faults)."""
  if not os.path.isdir(run_dir.errors):
    return {}
  out = {}
  for name in sorted(os.listdir(run_dir.errors)):
    path = os.path.join(run_dir.errors, name)
    if name.endswith('.txt') and os.path.isfile(path):
      with open(path) as f:
        out[name[:-4]] = f.read()
  return out
