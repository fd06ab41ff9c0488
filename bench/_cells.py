"""Running one cell of a multi-run study (bench/ail_learning.py,
bench/dual_study.py): a `tandem` command whose output goes to the terminal
and is appended to the cell's log."""

from __future__ import annotations

import argparse
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
