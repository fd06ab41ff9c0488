"""Helpers for whole-program tests: run `tandem` as a newcomer would."""

import math
import os
import subprocess
import sys

import psutil
import pytest

from tests import REPO_ROOT as ROOT


def run_tandem(args, timeout=480, env=None):
  """Runs the `tandem` CLI in a subprocess (with `env` over this process's
  environment); returns CompletedProcess."""
  env = dict(os.environ, **(env or {}))
  env.pop('LAUNCHPAD_LOGGING_DIR', None)
  return subprocess.run(
      [sys.executable, '-m', 'tandem.launch.cli'] + list(args), cwd=ROOT, env=env,
      capture_output=True, text=True, timeout=timeout)


def start_tandem(args, capture=True, sigint_ignored=False):
  """Starts the `tandem` CLI in a subprocess and returns its Popen (text
  pipes for stdout and stderr, or neither with capture=False).
  sigint_ignored: it starts with SIGINT ignored, as a shell starts a
  script's background job (`cmd &`), through a shell that ignores it and
  then becomes the CLI (the same process)."""
  import subprocess as sp
  env = dict(os.environ)
  env.pop('LAUNCHPAD_LOGGING_DIR', None)
  out = sp.PIPE if capture else sp.DEVNULL
  command = [sys.executable, '-m', 'tandem.launch.cli'] + list(args)
  if sigint_ignored:
    command = ['sh', '-c', 'trap "" INT; exec "$@"', 'sh'] + command
  return sp.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=out,
                  text=True)


def learner_steps(run_dir):
  """The global learner steps in run_dir's progress.json (0 if unreadable)."""
  import json
  try:
    with open(os.path.join(run_dir, 'progress.json')) as f:
      return json.load(f)['counts']['learner_steps']
  except (OSError, ValueError, KeyError):
    return 0


def wait_for_learner_steps(run_dir, steps, timeout=240.0, proc=None):
  """Waits until the program on run_dir has made more than `steps` learner
  steps; returns the count seen. Fails, naming the count reached, if
  `timeout` passes first or `proc` (the started `tandem`) exits: a test
  that went on to signal the program would fail later, blaming the stop."""
  import time
  deadline = time.time() + timeout
  while learner_steps(run_dir) <= steps and time.time() < deadline:
    if proc is not None and proc.poll() is not None:
      break
    time.sleep(0.2)
  seen = learner_steps(run_dir)
  if seen <= steps:  # leave no program running for the rest of the session
    stop_program(run_dir, proc)
  assert seen > steps, (
      f'the program on {run_dir} made {seen} learner steps, not more than '
      f'{steps}, before ' + ('it exited' if proc is not None and
                              proc.poll() is not None else
                              f'{timeout:.0f} s passed'))
  return seen


def interrupt_after_learner_steps(proc, run_dir, steps=50, timeout=120,
                                  sig=None):
  """Ctrl-C (SIGINT, or `sig`) to a started `tandem` once its program has
  made more than `steps` learner steps; waits up to `timeout` s for it to
  exit, checks it exited 130 (interrupted, resumable) and returns its
  (stdout, stderr)."""
  import signal
  wait_for_learner_steps(run_dir, steps, proc=proc)
  proc.send_signal(signal.SIGINT if sig is None else sig)
  out, err = proc.communicate(timeout=timeout)
  assert proc.returncode == 130, out[-2000:] + err[-2000:]
  return out, err


def stop_program(run_dir, proc=None):
  """Kills `proc` (a started `tandem`) and every process of the program on
  run_dir, so a failed test leaves nothing running."""
  if proc is not None and proc.poll() is None:
    proc.kill()
    proc.wait()
  for pid in processes_mentioning(run_dir):
    try:
      psutil.Process(pid).kill()
    except psutil.NoSuchProcess:
      pass


def listening_addresses(pid: int) -> list:
  """[(ip, port)] of the TCP sockets process `pid` listens on, sorted, read
  from its own /proc entries: its socket inodes, looked up in its network
  namespace's tables (psutil's net_connections reads the caller's
  namespace, which a private run's nodes are not in)."""
  import socket
  inodes = set()
  for fd in os.listdir(f'/proc/{pid}/fd'):
    try:
      target = os.readlink(f'/proc/{pid}/fd/{fd}')
    except OSError:
      continue
    if target.startswith('socket:['):
      inodes.add(target[8:-1])
  found = set()
  for name, family in (('tcp', socket.AF_INET), ('tcp6', socket.AF_INET6)):
    try:
      with open(f'/proc/{pid}/net/{name}') as f:
        rows = f.read().splitlines()[1:]
    except OSError:
      continue
    for row in rows:
      fields = row.split()
      if fields[3] != '0A' or fields[9] not in inodes:  # 0A: LISTEN
        continue
      hex_ip, hex_port = fields[1].split(':')
      raw = bytes.fromhex(hex_ip)  # 32-bit words in host (little) order
      raw = b''.join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
      found.add((socket.inet_ntop(family, raw), int(hex_port, 16)))
  return sorted(found)


def tensorboard_matches_csv(run_dir, label):
  """Asserts that the node's TensorBoard events, read as TensorBoard reads
  them, hold every row of logs/<label>.csv under `<label>/<column>`, at
  the row's env_steps (the evaluator's samples' columns only where the run
  measured them: NaN in the CSV otherwise)."""
  from tensorboard.backend.event_processing import event_accumulator
  from tandem.agents.nodes.acting import SAMPLED_COLUMNS
  from tandem.agents.runtime import logs
  rows = logs.read_csv(os.path.join(run_dir, 'logs', f'{label}.csv'))
  acc = event_accumulator.EventAccumulator(
      os.path.join(run_dir, 'logs', 'tb', label), size_guidance={'scalars': 0})
  acc.Reload()
  columns = {c for c in set(rows[0]) - {'env_steps', 'wall_time'}
             if not (c in SAMPLED_COLUMNS and
                     all(math.isnan(r[c]) for r in rows))}
  assert set(acc.Tags()['scalars']) == {f'{label}/{c}' for c in columns}, \
      label
  steps = [e.step for e in acc.Scalars(f'{label}/learner_steps')]
  assert steps == [int(r['env_steps']) for r in rows], label


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
  """Keeps each phase's report on the test item, for runs_root's teardown."""
  del call
  outcome = yield
  report = outcome.get_result()
  setattr(item, f'report_{report.when}', report)


@pytest.fixture
def runs_root(tmp_path, request):
  """A runs root of the test's own. At teardown nothing of a program on it
  may still run: whatever does (a test that failed before stopping its
  program) is killed, so it cannot slow or disturb later tests, and a test
  that passed while leaving it running fails in its teardown."""
  import time
  root = str(tmp_path / 'runs')
  yield root
  deadline = time.time() + 15  # nodes still finishing their stop
  while processes_mentioning(root) and time.time() < deadline:
    time.sleep(0.2)
  left = processes_mentioning(root)
  for pid in left:
    try:
      psutil.Process(pid).kill()
    except psutil.NoSuchProcess:
      pass
  call = getattr(request.node, 'report_call', None)
  if left and call is not None and call.passed:
    pytest.fail(f'processes of a program on {root} were still running after '
                f'the test (killed): {left}')
