"""Before a resume: one owner of truth for where the run stands.

The learner checkpoint is that owner. Its metadata holds the global counts
the learner saw at its last update before the save (the learner's own step
count among them); counter.json and the logs are written on timers of their
own, so after a hard kill they can be ahead of the checkpoint (rows and env
steps whose learning was lost) or behind it. `reconcile` makes them agree
with the checkpoint before any node starts:

- counter.json takes the checkpoint's counts. Two things are kept from the
  counter instead: `elapsed_s` (wall time the program has run is spent,
  whatever was lost; the largest of counter.json's, the
  checkpoint's and the last progress.json's, which the counter publishes
  every second while counter.json is saved every checkpoint period) and
  `env_faults` (faults that happened);
- every CSV under logs/ loses the rows past the checkpoint (by
  learner_steps in learner.csv, discriminator_steps in discriminator.csv,
  env_steps elsewhere), so on every axis a resumed run continues without
  going back. Nothing is deleted: the removed rows and the old counter.json
  go to logs/discarded/segment-<k>/, and a last line a hard kill cut short
  (no line end; its numbers may be cut short too) to
  logs/discarded/segment-<k>/torn/.

TensorBoard event files are append-only and are not rolled back: after a
hard kill they may show the discarded stretch twice.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
from typing import Optional

from tandem.agents.core import checkpointing
from tandem.agents.core import files
from tandem.agents.runtime import counting
from tandem.agents.runtime import logs
from tandem.agents.core.files import write_json_atomic
from tandem.agents.runtime.rundir import RunDir

# The count a CSV's rows are cut by; env_steps for any other file.
AXIS = {'learner.csv': 'learner_steps',
        'discriminator.csv': 'discriminator_steps'}
# Counts that record events rather than progress: never rolled back.
KEPT_FROM_COUNTER = ('env_faults',)


class LogFileError(ValueError):
  """A CSV log under logs/ that cannot be read as one."""


def read_log(path: str) -> tuple[Optional[list], list]:
  """(header, rows) of CSV log `path`, leaving out a last line without a
  line end (a torn write: `logs.set_aside_torn_line` moves it). Raises
  LogFileError naming the file for bytes no Logger writes (not UTF-8, NUL:
  the zero-filled tail a power cut can leave) or a malformed CSV."""
  with open(path, 'rb') as f:
    data = f.read()
  data = data[:data.rfind(b'\n') + 1]
  try:
    text = data.decode('utf-8')
    if '\0' in text:
      raise ValueError('it holds NUL bytes')
    rows = list(csv.reader(io.StringIO(text, newline='')))
  except (UnicodeDecodeError, csv.Error, ValueError) as e:
    raise LogFileError(
        f'log {path}: not a readable CSV log ({e}); move it out of '
        f'{os.path.dirname(path)} to resume (the run then starts that log '
        'afresh)') from e
  return (rows[0] if rows else None), rows[1:]


def check_logs(rd: RunDir) -> None:
  """Reads every logs/*.csv as `reconcile` will, so that an unreadable one
  is refused before a resume writes anything."""
  for name in sorted(os.listdir(rd.logs)) if os.path.isdir(rd.logs) else []:
    if name.endswith('.csv'):
      read_log(os.path.join(rd.logs, name))


def discarded_dir(rd: RunDir, segment: int) -> str:
  return os.path.join(rd.logs, 'discarded', f'segment-{segment}')


def _published_counts(rd: RunDir) -> dict:
  """The counts the counter last published (progress.json, every second),
  or {} where there are none to read. counter.json is saved every
  checkpoint period only, so after a hard kill it misses up to that long;
  progress.json does not."""
  try:
    with open(rd.progress) as f:
      counts = json.load(f)['counts']
  except (OSError, ValueError, RecursionError, KeyError, TypeError):
    return {}
  return counts if isinstance(counts, dict) else {}


def _positive(value) -> float:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return 0.0
  return float(value) if math.isfinite(value) and value > 0 else 0.0


def published_elapsed(rd: RunDir) -> float:
  """The wall time the program has run that the counter last published
  (progress.json), or 0.0 where there is none to read."""
  return _positive(_published_counts(rd).get('elapsed_s'))


def checkpoint_counts(checkpoint: str, meta: dict) -> Optional[dict]:
  """The global counts in `checkpoint`'s metadata `meta`, or None where the
  checkpoint records none. Raises CheckpointError naming the checkpoint
  when they are not an object of non-negative whole counts (and a number
  for elapsed_s): resume would otherwise end in a traceback, or roll the
  counter back to nonsense."""
  counts = meta.get('counts')
  if counts is None or counts == {}:
    return None

  def bad(why):
    return checkpointing.CheckpointError(
        f'checkpoint {checkpoint}: metadata counts {why}; expected an object '
        f'of non-negative integers ({", ".join(counting.COUNT_KEYS)}) and '
        'elapsed_s')
  if not isinstance(counts, dict):
    raise bad(f'are of type {type(counts).__name__}')
  if 'env_steps' not in counts:
    return None
  for k, v in counts.items():
    ok = counting.is_count(v) or (k == 'elapsed_s' and
                                  counting.is_seconds(v) and v < 2**53)
    if not ok:
      raise bad(f'hold {k}={v!r}')
  return counts


def reconcile(rd: RunDir, checkpoint: str, segment: int) -> Optional[dict]:
  """Rolls counter.json and logs/*.csv back (or forward) to `checkpoint`'s
  counts, for the `segment`-th launch. Returns {'counts': ..., 'before':
  counter.json's counts, 'discarded_rows': {file: n}, 'torn_lines': {file:
  text}}, or None when the checkpoint records no counts (then nothing
  changes here; each log's Logger still sets a torn line aside)."""
  counts = checkpoint_counts(checkpoint,
                             checkpointing.read_metadata(checkpoint))
  if counts is None:
    return None
  with open(rd.counter) as f:
    state = json.load(f)
  before = dict(state['counts'])
  dest = discarded_dir(rd, segment)
  new = {k: int(counts.get(k, before.get(k, 0)))
         for k in counting.COUNT_KEYS}
  published = _published_counts(rd)
  for k in KEPT_FROM_COUNTER:
    # Events after counter.json's last save are in progress.json.
    seen = published.get(k)
    new[k] = max(int(before.get(k, 0)),
                 int(seen) if counting.is_count(seen) else 0)
  elapsed = max(float(state['elapsed_s']), float(counts.get('elapsed_s', 0.0)),
                published_elapsed(rd))
  moved = new != {k: int(before.get(k, 0)) for k in counting.COUNT_KEYS}
  if moved:
    os.makedirs(dest, exist_ok=True)
    kept = os.path.join(dest, 'counter.json')
    shutil.copy2(rd.counter, kept)
    with open(kept, 'rb') as f:  # on disk before the original is replaced
      os.fsync(f.fileno())
  if moved or elapsed > float(state['elapsed_s']):
    state['counts'] = new
    state['elapsed_s'] = elapsed
    write_json_atomic(rd.counter, state)
  discarded, torn_lines = {}, {}
  for name in sorted(os.listdir(rd.logs)) if os.path.isdir(rd.logs) else []:
    if name.endswith('.csv'):
      path = os.path.join(rd.logs, name)
      # A torn last row's numbers may be cut short ("19" of "196"), so it
      # can look like a row before the checkpoint: set aside, never kept.
      torn = logs.set_aside_torn_line(path, os.path.join(dest, 'torn'))
      if torn:
        torn_lines[name] = torn.decode(errors='replace')
      axis = AXIS.get(name, 'env_steps')
      n = _cut(path, axis, new[axis], dest)
      if n:
        discarded[name] = n
  return {'counts': new, 'before': before, 'discarded_rows': discarded,
          'torn_lines': torn_lines}


def _cut(path: str, axis: str, limit: int, dest: str) -> int:
  """Moves the rows of CSV `path` whose `axis` exceeds `limit` to
  dest/<same name> (appended, with the header); returns how many moved."""
  def past(header, rows):
    if axis not in header:
      return set()
    col = header.index(axis)

    def beyond(row):
      try:
        return float(row[col]) > limit
      except (IndexError, ValueError):
        return False   # a short row (Logger never writes one): kept
    return {n for n, row in enumerate(rows) if beyond(row)}
  return _move_rows(path, past, dest)


def _move_rows(path: str, pick, dest: str) -> int:
  """Moves the rows of CSV `path` whose indices pick(header, rows) returns
  to dest/<same name> (appended, with the header); returns how many
  moved."""
  header, rows = read_log(path)
  if header is None:
    return 0
  gone_at = set(pick(header, rows))
  gone = [r for n, r in enumerate(rows) if n in gone_at]
  if not gone:
    return 0
  os.makedirs(dest, exist_ok=True)
  out = os.path.join(dest, os.path.basename(path))
  fresh = not os.path.exists(out)
  with files.open_to_write(out, 'a', newline='') as f:
    w = csv.writer(f)
    if fresh:
      w.writerow(header)
    w.writerows(gone)
    # On disk before the replace below drops them from `path`: a power cut
    # must not leave the rows in neither place.
    f.flush()
    os.fsync(f.fileno())
  tmp = os.path.join(os.path.dirname(path),
                     f'.tmp-{os.path.basename(path)}.{os.getpid()}')
  with files.open_to_write(tmp, 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(r for n, r in enumerate(rows) if n not in gone_at)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)
  return len(gone)


def set_aside_unfinished_final(rd: RunDir, segment: int) -> int:
  """Moves the final evaluation row of a launch stopped between that
  evaluation and final.json (Ctrl-C, a kill) to the segment's discarded/
  folder: the resumed launch logs its own final row when it reaches its
  budget (at the same counts, if it starts at it). The limiter marks that
  window with final.pending.json (the checkpoint's counts). Only the newest
  final row at those counts moves: an earlier launch that finished at the
  same counts (a resume at an unchanged budget) keeps its row. Returns how
  many rows moved (0 or 1). Call before final.json is archived."""
  path = rd.final_pending
  if not os.path.exists(path):
    return 0
  if os.path.exists(rd.final):  # finished; the marker's removal was cut
    os.remove(path)
    return 0
  try:
    with open(path) as f:
      counts = json.load(f)['counts']
    at = {k: float(counts[k]) for k in ('env_steps', 'learner_steps')}
  except (OSError, ValueError, RecursionError, KeyError, TypeError):
    at = None   # unreadable (a marker cut short): no row is matched
  moved = 0
  evaluator = os.path.join(rd.logs, 'evaluator.csv')
  if at is not None and os.path.exists(evaluator):
    dest = discarded_dir(rd, segment)
    # A torn last line is set aside first, as reconcile does: the rewrite
    # below keeps whole rows only.
    logs.set_aside_torn_line(evaluator, os.path.join(dest, 'torn'))

    def unfinished(header, row):
      try:
        return (float(row[header.index('final')]) == 1 and
                all(float(row[header.index(k)]) == v for k, v in at.items()))
      except (IndexError, ValueError):
        return False

    def newest(header, rows):
      found = [n for n, row in enumerate(rows) if unfinished(header, row)]
      return found[-1:]
    moved = _move_rows(evaluator, newest, dest)
  os.remove(path)
  return moved
