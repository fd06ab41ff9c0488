"""Running one cell of a multi-run study (studies/ail_learning.py,
studies/dual_study.py): a `tandem` command whose output goes to the terminal
and is appended to the cell's log; and the cell's committed record.

Run directories live under runs/, which git ignores: they are gone on the
next machine, and with them hours of finished cells. So each study also
writes every finished cell, small and deterministic, to a records directory
inside the repo (studies/results/<study>/<cell>.json), which is committed; a
study skips a recorded cell and summarises it where no run directory is.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import subprocess
import sys
import time

EXIT_INTERRUPTED = 130


def run_cell(command, log_path: str, cwd: str, label: str) -> int:
  """Runs `command` in `cwd`, streaming its output to the terminal and
  appending it to log_path; returns its exit status (130 if interrupted)."""
  env = dict(os.environ, PYTHONUNBUFFERED='1')
  with open(log_path, 'a') as log:
    log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} "
              f'{shlex.join(command)}\n')
    log.flush()
    proc = subprocess.Popen(command, cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1, errors='replace')
    try:
      for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        log.write(line)
        log.flush()
      return proc.wait()
    except KeyboardInterrupt:
      # The child got the same SIGINT and stops its program, checkpointing
      # on the way down; wait for it, so that the next run of the study
      # continues the cell with --resume.
      print(f'\n{label}: interrupted; waiting for the run to stop',
            file=sys.stderr)
      try:
        proc.wait()
      except KeyboardInterrupt:
        proc.kill()
        proc.wait()
      log.write('===== interrupted\n')
      return EXIT_INTERRUPTED


def parse_seeds(text: str) -> list:
  """argparse type: '0,1,2' -> [0, 1, 2] (distinct, in order, each >= 0)."""
  try:
    seeds = [int(s) for s in text.split(',') if s.strip()]
  except ValueError:
    seeds = []
  if not seeds or any(s < 0 for s in seeds):
    raise argparse.ArgumentTypeError(
        f'expected comma-separated integers >= 0, got {text!r}')
  return list(dict.fromkeys(seeds))


def parse_budget(text: str) -> int:
  """argparse type: an env-step budget, an integer >= 1."""
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f'expected an integer >= 1, got {text!r}')
  return value


def write_record(path: str, record: dict) -> None:
  """Written whole or not at all (a crash mid-write leaves the old file)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f'{path}.tmp{os.getpid()}'
  with open(tmp, 'w') as f:
    json.dump(record, f, indent=1, sort_keys=True)
    f.write('\n')
  os.replace(tmp, path)


def store_record(path: str, record: dict, label: str, origin: str) -> bool:
  """Writes the record unless the file already holds another run of the
  cell (two machines ran it): that one is kept, never overwritten, and a
  warning names both (`origin`: where this record's run lives). True where
  the file now holds this record."""
  if os.path.exists(path):
    try:
      with open(path) as f:
        if json.load(f) == json.loads(json.dumps(record)):
          return True
    except (OSError, ValueError):
      pass  # unreadable: the run directory's record replaces it
    else:
      print(f'{label}: {path} records another run of this cell than '
            f'{origin}; kept it (delete it to record the run directory '
            'instead)', file=sys.stderr)
      return False
  write_record(path, record)
  return True


def record_path(records_dir: str, name: str, seed: int) -> str:
  """RECORDS_DIR/<name>_s<seed>.json: the file find_records lists."""
  return os.path.join(records_dir, f'{name}_s{seed}.json')


def find_records(records_dir, names, run_name, seeds=None) -> list:
  """[(name, seed, path)] for RECORDS_DIR/<name>_s<seed>.json, `run_name`
  the study's regex of (name, seed); seeds=None takes every seed found."""
  found = []
  if records_dir and os.path.isdir(records_dir):
    for entry in os.listdir(records_dir):
      stem, ext = os.path.splitext(entry)
      m = run_name.match(stem)
      if (ext == '.json' and m and m.group(1) in names and
          (seeds is None or int(m.group(2)) in seeds)):
        found.append((m.group(1), int(m.group(2)),
                      os.path.join(records_dir, entry)))
  return found


class RecordError(ValueError):
  """A record file that cannot be read as the cell it is named for."""


def load_record(path: str, record_format: str, role: str, name: str,
                seed: int) -> dict:
  """A record's JSON, after checking its format and that it is the cell
  (`role` name, seed) asked for; RecordError naming the file and what is
  wrong otherwise. The study checks the rest of its fields."""
  try:
    with open(path) as f:
      rec = json.load(f)
  except (OSError, ValueError) as e:
    raise RecordError(f'{path}: not a readable JSON record ({e})') from e
  if not isinstance(rec, dict) or rec.get('format') != record_format:
    raise RecordError(f'{path}: expected a record with format '
                      f'{record_format!r}')
  if (rec.get(role), rec.get('seed')) != (name, seed):
    raise RecordError(f'{path}: records {rec.get(role)!r} seed '
                      f'{rec.get("seed")!r}, expected {name!r} seed {seed}')
  return rec


@contextlib.contextmanager
def paths_named(prog: str):
  """An OSError naming a path (an unwritable runs_root, records_dir or
  --png) ends the study script with one line naming it; any other keeps its
  traceback."""
  try:
    yield
  except OSError as e:
    if not e.filename:
      raise
    raise SystemExit(f'{prog}: {e.filename}: {e.strerror or e}') from e
