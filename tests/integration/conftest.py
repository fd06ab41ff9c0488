"""Helpers for whole-program tests: run `tandem` as a newcomer would."""

import os
import subprocess
import sys

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def run_tandem(args, timeout=240):
  """Runs the `tandem` CLI in a subprocess; returns CompletedProcess."""
  env = dict(os.environ)
  env.pop('LAUNCHPAD_LOGGING_DIR', None)
  return subprocess.run(
      [sys.executable, '-m', 'launch.cli'] + list(args), cwd=ROOT, env=env,
      capture_output=True, text=True, timeout=timeout)


def processes_mentioning(text):
  """Live processes whose environment or command line mentions `text`."""
  found = []
  for p in psutil.process_iter(['pid', 'cmdline']):
    try:
      if p.pid == os.getpid():
        continue
      blob = ' '.join(p.info['cmdline'] or [])
      try:
        blob += ' '.join(f'{k}={v}' for k, v in p.environ().items())
      except (psutil.AccessDenied, psutil.ZombieProcess):
        pass
      if text in blob and p.status() != psutil.STATUS_ZOMBIE:
        found.append(p.pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
      continue
  return found


@pytest.fixture
def runs_root(tmp_path):
  return str(tmp_path / 'runs')
