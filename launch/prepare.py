"""The run directory before a launch: refuse what cannot be resumed or would
be written over, lock it, check what a resume loads, then set it up (config
history, archived reports of the last launch, counts and logs rolled back to
the checkpoint, the replay buffer kept or dropped, config.json)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from typing import Iterator, Optional

from tandem.agents.core import files
from tandem.agents.core.fields import ConfigError
from tandem.agents.runtime.rundir import Lock, RunDir
from tandem.launch import config as config_lib
from tandem.launch import notes
from tandem.launch import programs
from tandem.launch import replay_checks
from tandem.launch import resolve
from tandem.launch import resuming
from tandem.launch.errors import UsageError


def refuse_to_overwrite(rd: RunDir, cfg, resume: bool) -> None:
  """A fresh launch never writes over what a run left; a run directory that
  holds a symbolic link is refused, naming it, before anything is written;
  a run directory whose path Reverb cannot glob never holds replay
  checkpoints."""
  links = rd.links()
  if links:
    shown = ', '.join(links[:3]) + (f' and {len(links) - 3} more'
                                    if len(links) > 3 else '')
    raise UsageError(
        f'run directory {rd.root} holds a symbolic link where Tandem writes '
        f'({shown}); Tandem never makes one and never writes through one: '
        'move it out of the run directory (or replace it with the file it '
        'points to)')
  left = None if resume else _left_by_a_run(rd)
  if left == 'config.json':
    raise UsageError(f'run directory {rd.root} already holds a run; continue '
                     f'it with --resume {rd.root}, or pick another --name')
  if left:
    raise UsageError(f'run directory {rd.root} holds what a run left ({left}) '
                     'but no config.json, so it cannot be resumed; pick '
                     'another --name, or move that out of the directory')
  if cfg.replay_checkpoints and any(c in rd.root for c in '*?['):
    # Reverb finds (and prunes) its checkpoints by globbing <dir>/*, so such
    # a path matches nothing: a table saved under /tmp/g[2]/replay came
    # back with 0 of its 10 items (the same code under /tmp/g1x: 10).
    raise UsageError(
        f'run directory {rd.root}: holds one of * ? [, which break how Reverb '
        'finds its replay checkpoints (nothing would be restored or pruned); '
        'pick a --name or --runs_root without them, or add '
        '--replay_checkpoints=false')


@contextlib.contextmanager
def locked(rd: RunDir, resume: bool) -> Iterator[Lock]:
  """Holds the run directory's lock (a second program on it is refused with
  RunDirLocked) until the block ends, however it ends."""
  lock = Lock(rd)
  try:
    lock.acquire()
  except OSError as e:  # RunDirLocked is not one: main() reports it
    flag = '--resume' if resume else '--runs_root'
    raise UsageError(f'run directory {rd.root}: cannot be created or locked '
                     f'({e}); check {flag}') from e
  try:
    yield lock
  finally:
    lock.release()


@contextlib.contextmanager
def prepared(rd: RunDir, cfg, program: programs.Program, *, resume: bool,
             drop_replay: bool, demos_record: Optional[dict]) -> Iterator[int]:
  """A launch's run directory, step by step: the refusals, the lock, the
  resume checks, then this launch's files; yields its segment number with
  the lock held until the block ends."""
  refuse_to_overwrite(rd, cfg, resume)
  with locked(rd, resume):
    latest = check_launchable(rd, cfg, program, resume=resume,
                              drop_replay=drop_replay)
    yield set_up(rd, cfg, latest=latest, demos_record=demos_record,
                 drop_replay=drop_replay)


def check_launchable(rd: RunDir, cfg, program: programs.Program, *,
                     resume: bool, drop_replay: bool) -> Optional[str]:
  """Under the lock: no node of an earlier launch still writes here, and a
  resume's checkpoints load. Returns the learner checkpoint a resume starts
  from (None for a fresh run)."""
  refuse_if_nodes_alive(rd.root)
  if not resume:
    return None
  latest = check_resumable(cfg, rd.root, program)
  # After the check that no node of an earlier launch is alive: such a
  # replay node may still be writing (and pruning) its checkpoints.
  replay_checks.check_replay_checkpoint(cfg, rd.root, drop_replay)
  print(f'resuming from {latest}')
  return latest


def set_up(rd: RunDir, cfg, *, latest: Optional[str],
           demos_record: Optional[dict], drop_replay: bool) -> int:
  """Writes the run directory for this launch; returns its segment number
  (1 for a run's first launch). `latest`: the checkpoint a resume starts
  from, None for a fresh run."""
  from tandem.agents.core.files import write_json_atomic
  resume = latest is not None
  rd.make()
  segment = record_config_history(rd, cfg, resume)
  demos_json = os.path.join(rd.root, 'demos.json')
  if demos_record is not None and not os.path.exists(demos_json):
    write_json_atomic(demos_json, demos_record)
  # The previous launch's crash reports stay, under errors/segment-<k>/.
  rd.archive_errors(segment - 1)
  if os.path.isdir(rd.stopped):  # the previous launch's stop markers
    shutil.rmtree(rd.stopped)
  if resume:
    _set_aside_unfinished_final(rd, segment)
  archive_final(rd, segment)
  removed = rd.remove_stray_temporaries()
  if resume:
    _reconcile(rd, latest, segment)
    _keep_or_drop_replay(rd, cfg, segment, drop_replay)
  # Last: the next --resume compares its overrides with this file, so it
  # must not hold new replay settings unless the old buffer was moved aside.
  write_json_atomic(rd.config, config_lib.to_dict(cfg))
  if removed:
    print(f'removed {len(removed)} unfinished temporary file(s) a killed '
          f'program left: {removed}')
  return segment


def _keep_or_drop_replay(rd: RunDir, cfg, segment: int,
                         drop_replay: bool) -> None:
  """A resume's replay buffer: moved aside (--drop_replay) or restored from
  its latest complete checkpoint; a note when it starts empty too late."""
  refilled = True
  if drop_replay:
    dropped = replay_checks.drop_replay(rd, segment)
    if dropped:
      print(f'replay buffer dropped (moved to {dropped}); delete it when '
            'no longer wanted')
  elif cfg.replay_checkpoints and replay_checks.replay_checkpoint_exists(
      rd.root):
    from tandem.agents.replay import replay_checkpoints
    latest_replay = replay_checkpoints.latest(rd.replay_checkpoints)
    refilled = not latest_replay
    print(f'replay buffer: restored from {latest_replay}' if latest_replay
          else 'replay buffer: no complete checkpoint in '
          'checkpoints/replay/; starting from an empty buffer')
  note = refilled and notes.empty_replay_note(cfg, rd)
  if note:
    print(note)


def _left_by_a_run(rd) -> Optional[str]:
  """What a run left in `rd` that a fresh launch would write over, named,
  or None. Not only config.json: a new counter would restart at 0 over
  counter.json, new rows go under the old header, and the new low-step
  checkpoints be the ones pruned."""
  from tandem.agents.core import checkpointing
  if os.path.exists(rd.config):
    return 'config.json'
  if os.path.exists(rd.counter):
    return 'counter.json'
  found = checkpointing.list_checkpoints(rd.learner_checkpoints)
  if found:
    return os.path.relpath(found[-1], rd.root)
  logs = sorted(os.listdir(rd.logs)) if os.path.isdir(rd.logs) else []
  csvs = [n for n in logs if n.endswith('.csv')]
  return os.path.join('logs', csvs[0]) if csvs else None


def refuse_if_nodes_alive(run_dir: str) -> None:
  """A launcher killed hard leaves its nodes to stop on their own (they
  poll it, then checkpoint and exit); until the last has, they still write
  into the run directory, so no new program may start there."""
  from tandem.agents.runtime import supervision
  if not supervision.nodes_running(run_dir):
    return
  pids = supervision.program_processes(run_dir)
  raise UsageError(
      f'run directory {run_dir}: processes of an earlier program on it are '
      f'still running ({", ".join(map(str, pids)) or "pids unknown"}); they '
      'stop by themselves within stop_grace_s of their launcher\'s death. '
      'Wait for them (or kill them), then retry')


def _load_for_resume(checkpoint: str, template) -> None:
  """Reads what a resume reads from `checkpoint` (the learner's state and
  the counts reconcile rolls back to); raises CheckpointError."""
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime import resume as resume_lib
  tree, meta = checkpointing.restore_with_metadata(checkpoint, template)
  bad = checkpointing.non_finite_entries(tree)
  if bad:
    raise checkpointing.CheckpointError(
        f'checkpoint {checkpoint}: entry {bad[0]} holds non-finite values '
        f'({len(bad)} entries do); a learner never saves one')
  resume_lib.checkpoint_counts(checkpoint, meta)


def _older_checkpoint_hint(rd, latest: str, template) -> str:
  """How to resume from the checkpoint before a damaged `latest`, where
  that one loads (one that does not fit this config fails the same way)."""
  from tandem.agents.core import checkpointing
  older = checkpointing.list_checkpoints(rd.learner_checkpoints)[:-1]
  if not older:
    return ''
  try:
    _load_for_resume(older[-1], template)
  except checkpointing.CheckpointError:
    return ''
  return (f'; the one before it, {older[-1]}, loads: move {latest} out of '
          f'{rd.learner_checkpoints} to resume from that one (counts and '
          'logs roll back to it)')


def check_resumable(cfg, run_dir: str,
                    program: Optional[programs.Program] = None) -> str:
  """Loads what --resume will load, so a bad file fails before launch;
  returns the learner checkpoint the resume starts from."""
  from tandem.agents.core import checkpointing
  from tandem.agents.runtime import counting
  from tandem.agents.runtime import resume as resume_lib
  from tandem.agents.runtime.rundir import RunDir
  program = program or programs.for_config(cfg)
  rd = RunDir(run_dir)
  latest = checkpointing.latest(rd.learner_checkpoints)
  if latest is None:
    raise UsageError(f'--resume {run_dir}: no learner checkpoint in '
                     f'{rd.learner_checkpoints}')
  template = program.learner_template(cfg)
  try:
    _load_for_resume(latest, template)
  except checkpointing.CheckpointError as e:
    raise UsageError(f'--resume {run_dir}: {e}'
                     f'{_older_checkpoint_hint(rd, latest, template)}') from e
  why = program.checkpoint_mismatch(cfg, checkpointing.read_metadata(latest))
  if why:
    raise UsageError(f'--resume {run_dir}: checkpoint {latest}: {why}')
  try:
    counting.Counter(rd.counter, restore=True)
  except counting.CounterStateError as e:
    raise UsageError(f'--resume {run_dir}: {e}') from e
  try:
    resume_lib.check_logs(rd)  # reconcile reads them after writing begins
  except resume_lib.LogFileError as e:
    raise UsageError(f'--resume {run_dir}: {e}') from e
  return latest


# The checkout the code runs from (launch/ is one of its folders).
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def code_version(root: str = CODE_ROOT) -> Optional[dict]:
  """The git commit the code under `root` was checked out at, and whether
  tracked files differed from it; None outside a git checkout (a Docker
  image built without .git) or without git. A figure in BENCHMARKS.md can
  then be traced to the code that produced it."""
  def git(*args):
    # --no-optional-locks: status must not take the index lock from under
    # a git command the user runs at the same moment.
    return subprocess.run(['git', '--no-optional-locks', '-C', root, *args],
                          capture_output=True, text=True, errors='replace',
                          timeout=10, check=True).stdout.strip()
  try:
    commit = git('rev-parse', 'HEAD')
    dirty = bool(git('status', '--porcelain', '--untracked-files=no'))
  except (OSError, subprocess.SubprocessError):
    return None
  return {'commit': commit, 'dirty': dirty}


def _history_path(rd) -> str:
  return os.path.join(rd.root, 'config_history.jsonl')


def _next_segment(rd) -> tuple[int, bool]:
  """(the segment number the next launch of rd gets, whether
  config_history.jsonl ends in a line cut short), read without writing."""
  path = _history_path(rd)
  lines, torn = 0, False
  if os.path.isfile(path):
    with open(path, 'rb') as f:
      data = f.read()
    lines = sum(1 for line in data.splitlines() if line.strip())
    torn = bool(data) and not data.endswith(b'\n')
  # Never a number an earlier launch used: its node logs, crash reports and
  # discarded rows live under segment-<k> folders a reuse would overwrite.
  # A line cut short (disk full, power cut) would otherwise swallow the
  # following ones and stop the count.
  highest = rd.highest_segment() if os.path.isdir(rd.root) else 0
  return 1 + max(lines, highest), torn


def next_segment(rd) -> int:
  """The segment number the next launch of rd gets (1 for a new run)."""
  return _next_segment(rd)[0]


def record_config_history(rd, cfg, resume: bool) -> int:
  """Appends one line per launch to config_history.jsonl: when, whether it
  was a resume, the fields that differ from the previous config, and the
  code's commit (`code_version`). Returns this launch's segment number (1
  for the first launch)."""
  changed = {}
  if resume and os.path.isfile(rd.config):
    try:
      old = config_lib.stored_fields(
          resolve.read_run_json(rd.config, f'--resume {rd.root}'))
    except ConfigError as e:
      raise UsageError(f'--resume {rd.root}: config.json: {e}') from e
    changed = {p: {'from': a, 'to': b} for p, (a, b) in
               resuming.check_resume_overrides(old, cfg).items()}
  path = _history_path(rd)
  segment, torn = _next_segment(rd)
  with files.open_to_write(path, 'a') as f:
    if torn:
      f.write('\n')
    f.write(json.dumps({'time': time.time(), 'resume': resume,
                        'segment': segment, 'changed': changed,
                        'code': code_version()},
                       default=list) + '\n')
  return segment


def _reconcile(rd, checkpoint: str, segment: int) -> None:
  """Counter and logs continue from the learner checkpoint's counts."""
  from tandem.agents.runtime import resume as resume_lib
  done = resume_lib.reconcile(rd, checkpoint, segment)
  if done is None:
    print('the checkpoint carries no counts; counts continue from '
          'counter.json')
    return
  c, b = done['counts'], done['before']
  if c != {k: b.get(k, 0) for k in c} or done['discarded_rows']:
    print(f"counts continue from the checkpoint: env steps {c['env_steps']} "
          f"(counter.json had {b.get('env_steps')}), learner steps "
          f"{c['learner_steps']} (had {b.get('learner_steps')})")
  if done['discarded_rows']:
    print('log rows past the checkpoint moved to '
          f'{resume_lib.discarded_dir(rd, segment)}: {done["discarded_rows"]}')
  if done['torn_lines']:
    print('log lines cut short (no line end) moved to '
          f'{resume_lib.discarded_dir(rd, segment)}/torn: '
          f'{sorted(done["torn_lines"])}')


def _set_aside_unfinished_final(rd, segment: int) -> None:
  from tandem.agents.runtime import resume as resume_lib
  if resume_lib.set_aside_unfinished_final(rd, segment):
    print('the final evaluation of the stopped launch (no final.json) moved '
          f'to {resume_lib.discarded_dir(rd, segment)}: this launch evaluates '
          'that checkpoint again')


def archive_final(rd, segment: int) -> Optional[str]:
  """Moves a previous launch's final.json (a run resumed past its budget)
  beside that launch's node logs, nodes/segment-<k-1>/final.json, so the
  run directory's final.json always belongs to this launch and the earlier
  final evaluation is kept. Returns where it went, or None."""
  if not os.path.exists(rd.final):
    return None
  kept = rd.segment_nodes(segment - 1)
  os.makedirs(kept, exist_ok=True)
  dest = os.path.join(kept, 'final.json')
  os.replace(rd.final, dest)
  return dest
