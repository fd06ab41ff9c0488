"""Log rows keyed to global counts: CSV files and TensorBoard events.

Every row carries env_steps and learner_steps (the global counts), so curves
from different nodes, rounds and restarts line up on one axis. Files are
appended to on resume, never truncated, save one thing: a last line without
its line end (a write cut short, e.g. by a full disk) is moved to
<dir>/discarded/torn/<label>.csv before the first append, which would
otherwise run the next row into it and log a row of wrong counts.

Why not `acme.utils.loggers` (CSVLogger, TFSummaryLogger): Acme's CSV logger
writes into a new time-stamped directory per process by default and accepts
rows without any global count, while Tandem's rows must carry the global
counts (checked here) and continue the same file across restarts.
"""

from __future__ import annotations

import csv
import itertools
import logging
import math
import os
import socket
import time
from typing import Mapping, Optional

from tandem.agents.core import files

REQUIRED = ('env_steps', 'learner_steps')


def count_columns(counts: Mapping[str, float]) -> dict:
  """The global counts a row carries, from a Counter snapshot: env and
  learner steps, discriminator steps and round (rounds completed; 0 in
  programs without a discriminator), and the wall time the program has run,
  all launches."""
  return {'env_steps': int(counts['env_steps']),
          'learner_steps': int(counts['learner_steps']),
          'discriminator_steps': int(counts.get('discriminator_steps', 0)),
          'round': int(counts.get('rounds', 0)),
          'elapsed_s': float(counts['elapsed_s'])}


class Logger:
  """Writes rows to <dir>/<label>.csv and (optionally) TensorBoard.

  `optional` names columns that are NaN where a run does not measure them
  (the CSV keeps them, so its header holds whether or not a resume turns
  them on): TensorBoard gets them only where not NaN, not a series of NaN.
  """

  def __init__(self, directory: str, label: str, tensorboard: bool = True,
               required=REQUIRED, optional=()):
    self._required = tuple(required)
    self._optional = frozenset(optional)
    self._dir = directory
    self._label = label
    os.makedirs(directory, exist_ok=True)
    self._path = os.path.join(directory, f'{label}.csv')
    self._fields: Optional[list] = None
    torn_dir = os.path.join(directory, 'discarded', 'torn')
    if set_aside_torn_line(self._path, torn_dir):
      logging.warning('%s: its last line had no line end; moved to %s',
                      self._path, torn_dir)
    # Where an earlier launch's rows end (a resume has cut the rows past its
    # checkpoint by then): the env steps of its last row, and every kept row
    # at those env steps. TensorBoard is told to drop the events from that
    # step on, which a killed launch may have written past the checkpoint
    # at the same env steps too (learner rows between two env-step counts);
    # the kept rows at that step are written again after the marker.
    self._continues_at: Optional[int] = None
    self._rows_at_restart: list = []
    if os.path.exists(self._path) and os.path.getsize(self._path) > 0:
      with open(self._path, newline='') as f:
        reader = csv.reader(f)
        header = next(reader, None)
        self._fields = header
        if header and 'env_steps' in header:
          self._continues_at, self._rows_at_restart = _last_step_rows(
              header, reader)
    self._tb: Optional[EventFile] = None
    self._tb_enabled = tensorboard

  @property
  def path(self) -> str:
    return self._path

  @property
  def columns(self) -> Optional[list]:
    """The CSV's header: fixed by its first row (an earlier launch's, on
    a resume); a later row's other columns go to TensorBoard only."""
    return self._fields

  def write(self, row: Mapping[str, float]) -> None:
    missing = [k for k in self._required if k not in row]
    if missing:
      raise ValueError(f'log row for {self._label} lacks global counts '
                       f'{missing}: every row must carry '
                       f'{list(self._required)}')
    row = {k: _scalar(v) for k, v in row.items()}
    row.setdefault('wall_time', time.time())
    if self._fields is None:
      self._fields = list(self._required) + sorted(
          k for k in row if k not in self._required)
      with files.open_to_write(self._path, 'w', newline='') as f:
        csv.writer(f).writerow(self._fields)
    with files.open_to_write(self._path, 'a', newline='') as f:
      csv.DictWriter(f, fieldnames=self._fields,
                     extrasaction='ignore').writerow(row)
    if self._tb_enabled:
      self._write_tensorboard(row)

  def _write_tensorboard(self, row):
    """Every column but the step (env_steps) and the wall time, as
    `<label>/<column>` at the row's env_steps."""
    if self._tb is None:
      try:
        self._tb = EventFile(os.path.join(self._dir, 'tb', self._label))
      except ImportError:  # no tensorboard package: CSVs only
        self._tb_enabled = False
        return
      if self._continues_at is not None:
        self._tb.restart(self._continues_at)
        for kept in self._rows_at_restart:
          self._write_tensorboard(kept)
    self._tb.write_scalars(
        int(row['env_steps']), float(row['wall_time']),
        {f'{self._label}/{k}': v for k, v in row.items()
         if k not in ('env_steps', 'wall_time') and
         isinstance(v, (int, float)) and
         not (k in self._optional and math.isnan(v))})


def _last_step_rows(header: list, rows) -> tuple:
  """The env steps of the last of CSV `rows` (lists under `header`) and
  the trailing rows at those env steps, as dicts of parsed values; (None,
  []) where the last row's env steps cannot be read."""
  column = header.index('env_steps')
  step, tail = None, []
  for row in rows:
    try:
      at = int(float(row[column]))
    except (IndexError, ValueError):
      step, tail = None, []
      continue
    if at != step:
      step, tail = at, []
    tail.append(row)
  # Only the tail's rows are parsed: a long log is read once, not rebuilt.
  return step, [{k: _parse(v) for k, v in zip(header, row)} for row in tail]


_event_files = itertools.count()


class EventFile:
  """A TensorBoard event file of scalars, one Event record per row,
  flushed after each (a crash loses none already written).

  Written here in TensorBoard's record format (tensorboard's RecordWriter:
  length, masked CRC-32C, serialized Event, masked CRC-32C) rather than
  through tf.summary, which costs over ten times as much per row in eager
  mode (docs/operations.md) and needs TensorFlow in every node. A new file
  per writer, named as TensorBoard expects (events.out.tfevents.<time>.
  <host>...), opened without following a link.
  """

  def __init__(self, directory: str):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter
    self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
    os.makedirs(directory, exist_ok=True)
    name = (f'events.out.tfevents.{int(time.time()):010d}.'
            f'{socket.gethostname()}.{os.getpid()}.{next(_event_files)}')
    self.path = os.path.join(directory, name)
    self._records = RecordWriter(files.open_to_write(self.path, 'ab'))
    self._write(event_pb2.Event(wall_time=time.time(),
                                file_version='brain.Event:2'))

  def write_scalars(self, step: int, wall_time: float,
                    scalars: Mapping[str, float]) -> None:
    value = self._summary_pb2.Summary.Value
    summary = self._summary_pb2.Summary(
        value=[value(tag=tag, simple_value=float(v))
               for tag, v in scalars.items()])
    self._write(self._event_pb2.Event(step=step, wall_time=wall_time,
                                      summary=summary))

  def restart(self, step: int) -> None:
    """Marks a restart at `step`: TensorBoard drops the events of earlier
    files at this step and beyond (a session log START event, which it
    honours in files of version 2, as these are; it never reorders by step
    alone)."""
    from tensorboard.compat.proto import event_pb2
    self._write(event_pb2.Event(
        step=step, wall_time=time.time(),
        session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START)))

  def _write(self, event) -> None:
    self._records.write(event.SerializeToString())
    self._records.flush()


def set_aside_torn_line(path: str, dest: str) -> bytes:
  """Moves the bytes after `path`'s last line end (all of them where there
  is none, a torn header) to dest/<same name>, cuts them off `path` and
  returns them (b'' where the file ends with its line end).

  A file cut between csv's "\\r" and "\\n" holds a whole last row: it gets
  its "\\n" instead. Assumes that nothing appends to `path` meanwhile (one
  writing process per log file; a resume runs before the nodes start).
  """
  if not os.path.exists(path):
    return b''
  with open(path, 'rb+') as f:
    size = f.seek(0, os.SEEK_END)
    if size == 0:
      return b''
    f.seek(size - 1)
    last = f.read(1)
    if last == b'\r':
      f.write(b'\n')
    if last in (b'\n', b'\r'):
      return b''
    end = size
    keep = 0  # bytes up to and including the last line end
    while end > 0:
      start = max(0, end - 65536)
      f.seek(start)
      at = f.read(end - start).rfind(b'\n')
      if at >= 0:
        keep = start + at + 1
        break
      end = start
    f.seek(keep)
    torn = f.read()
    os.makedirs(dest, exist_ok=True)
    with files.open_to_write(os.path.join(dest, os.path.basename(path)),
                             'ab') as out:
      out.write(torn + b'\n')
      out.flush()
      os.fsync(out.fileno())
    f.truncate(keep)
  return torn


def _scalar(v):
  try:
    import numpy as np
    if isinstance(v, np.ndarray) or hasattr(v, 'item'):
      v = np.asarray(v).item()
  except ImportError:
    pass
  if isinstance(v, bool):
    return int(v)
  return v


def read_csv(path: str) -> list[dict]:
  with open(path, newline='') as f:
    return [{k: _parse(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _parse(v):
  try:
    return float(v)
  except (TypeError, ValueError):
    return v
