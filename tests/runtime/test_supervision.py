"""Node processes tied to their launcher, and the run directory's node lock."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tandem.agents.runtime import supervision
from tests import REPO_ROOT as ROOT


def _python(code, env=None):
  return subprocess.Popen(
      [sys.executable, '-c', textwrap.dedent(code)], cwd=ROOT,
      env=dict(os.environ, **(env or {})), stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True)


def _wait(predicate, timeout=20.0):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return True
    time.sleep(0.1)
  return False


def test_launcher_identity_round_trips_and_tells_alive_from_gone():
  me = supervision.this_process()
  assert supervision.Launcher.decode(me.encode()) == me
  assert supervision.alive(me)
  child = subprocess.Popen([sys.executable, '-c', 'pass'])
  ident = supervision.Launcher(child.pid,
                               supervision._start_time(child.pid))
  child.wait()
  assert not supervision.alive(ident)
  # A reused pid is not the launcher: same pid, another start time.
  assert not supervision.alive(me._replace(start_time=me.start_time + 1))


def _lock_holder(run_dir, env=None):
  """A process holding run_dir's node lock, as a node would; returns once
  it holds it."""
  holder = _python(f"""
      import time
      from tandem.agents.runtime import supervision
      supervision.hold_nodes_lock({run_dir!r})
      print('held', flush=True)
      time.sleep(60)
      """, env=env)
  assert holder.stdout.readline().strip() == 'held'
  return holder


def test_nodes_lock_is_seen_while_a_node_process_holds_it(tmp_path):
  run_dir = str(tmp_path)
  assert not supervision.nodes_running(run_dir)
  holder = _lock_holder(run_dir)
  try:
    assert supervision.nodes_running(run_dir)
    # Asking does not take the lock away from the holder.
    assert supervision.nodes_running(run_dir)
  finally:
    holder.kill()
    holder.wait()
  assert not supervision.nodes_running(run_dir)


def test_node_stops_itself_when_its_launcher_dies(tmp_path):
  run_dir = str(tmp_path)
  # A stand-in launcher that starts one "node" with the launcher's marker,
  # reports the node's pid, then waits to be killed.
  launcher = _python(f"""
      import os, subprocess, sys, time
      from tandem.agents.runtime import supervision
      supervision.announce({run_dir!r}, grace_s=5)
      node = subprocess.Popen([sys.executable, '-c', '''
      import time
      from tandem.agents.runtime import supervision
      supervision.node_started({run_dir!r})
      time.sleep(120)
      '''])
      print(node.pid, flush=True)
      time.sleep(120)
      """)
  node_pid = int(launcher.stdout.readline())
  assert _wait(lambda: supervision.nodes_running(run_dir))
  assert supervision.program_processes(run_dir)
  launcher.send_signal(signal.SIGKILL)
  launcher.wait()

  def node_gone():
    try:
      with open(f'/proc/{node_pid}/stat') as f:
        return f.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X')
    except OSError:
      return True
  # The node polls every second and stops itself with SIGTERM.
  assert _wait(node_gone, timeout=15)
  # The lock goes with the last open file, a moment after the state reads
  # exited on a loaded machine (this failed once in CI beside a run).
  assert _wait(lambda: not supervision.nodes_running(run_dir), timeout=15)
  assert supervision.program_processes(run_dir) == []


def test_nodes_inside_the_launcher_process_take_no_lock(tmp_path,
                                                        monkeypatch):
  monkeypatch.setenv(supervision.ENV_LAUNCHER,
                     supervision.this_process().encode())
  supervision.node_started(str(tmp_path))
  assert not os.path.exists(tmp_path / supervision.NODES_LOCK)


def test_resume_is_refused_while_an_old_node_lives(tmp_path):
  from tandem.launch import errors
  from tandem.launch import prepare
  run_dir = str(tmp_path)
  holder = _lock_holder(run_dir, env={supervision.ENV_RUN_DIR: run_dir})
  try:
    with pytest.raises(errors.UsageError, match=str(holder.pid)):
      prepare.refuse_if_nodes_alive(run_dir)
  finally:
    holder.kill()
    holder.wait()
  prepare.refuse_if_nodes_alive(run_dir)


def test_death_watch_names_the_first_process_to_end(tmp_path):
  run_dir = str(tmp_path)
  marker = {supervision.ENV_RUN_DIR: os.path.abspath(run_dir)}
  nodes = {name: _python('import time; time.sleep(60)',
                         env={**marker, supervision.ENV_NODE: name})
           for name in ('replay', 'learner')}
  watch = supervision.DeathWatch(run_dir, poll_s=0.05).start()
  try:
    assert _wait(lambda: len(watch._known) == 2)
    assert watch.first() is None
    # The higher pid ends first: the processes are learned, and their
    # pidfds registered, in pid order, so a watch that reported deaths in
    # that order (not as they happen) would name the other one.
    first, second = sorted(nodes, key=lambda n: -nodes[n].pid)
    nodes[first].kill()
    nodes[first].wait()
    assert _wait(lambda: len(watch.ended) == 1)
    nodes[second].kill()
    nodes[second].wait()
    assert _wait(lambda: len(watch.ended) == 2)
    assert watch.first() == (nodes[first].pid, first)
  finally:
    watch.stop()
    for p in nodes.values():
      p.kill()


def test_death_watch_first_waits_for_an_end_already_under_way(tmp_path):
  # The launcher asks as soon as Launchpad saw a worker exit, which can be
  # before this watch's thread ran: it must not answer None then.
  run_dir = str(tmp_path)
  marker = {supervision.ENV_RUN_DIR: os.path.abspath(run_dir),
            supervision.ENV_NODE: 'replay'}
  node = _python('import time; time.sleep(60)', env=marker)
  watch = supervision.DeathWatch(run_dir, poll_s=0.05).start()
  try:
    assert _wait(lambda: len(watch._known) == 1)
    assert watch.first(wait_s=0.1) is None  # nothing ended yet
    node.kill()
    node.wait()
    assert watch.first(wait_s=30) == (node.pid, 'replay')
  finally:
    watch.stop()
    node.kill()


def test_death_watch_names_no_first_among_ends_seen_together(tmp_path,
                                                              monkeypatch):
  # Ends seen in one poll come back in registration order, not in the
  # order they happened (a watch thread kept off the CPU): naming one would
  # be a guess.
  import select
  import threading
  run_dir = str(tmp_path)
  marker = {supervision.ENV_RUN_DIR: os.path.abspath(run_dir)}
  nodes = {name: _python('import time; time.sleep(60)',
                         env={**marker, supervision.ENV_NODE: name})
           for name in ('replay', 'learner')}
  gate = threading.Event()
  real_poll = select.poll

  class _LatePoll:
    """A poller whose polls wait for the gate once both are known."""

    def __init__(self):
      self._poll = real_poll()
      self.register, self.unregister = self._poll.register, \
          self._poll.unregister

    def poll(self, timeout_ms):
      if len(watch._known) == 2:
        assert gate.wait(30)
      return self._poll.poll(timeout_ms)
  monkeypatch.setattr(supervision.select, 'poll', _LatePoll)
  watch = supervision.DeathWatch(run_dir, poll_s=0.05, expected=2)
  watch.start()  # after the name is bound: its polls read it
  try:
    assert _wait(lambda: len(watch._known) == 2)
    for p in nodes.values():
      p.kill()
      p.wait()
    gate.set()
    assert _wait(lambda: len(watch.ended) == 2)
    assert watch.first(wait_s=1.0) is None
  finally:
    gate.set()
    watch.stop()
    for p in nodes.values():
      p.kill()


def test_launchpad_exit_codes_are_explained():
  from tandem.launch import report
  text = report.describe_failure(RuntimeError(
      'One of the workers exited with code -9.'))
  assert 'killed by SIGKILL' in text
  assert report.describe_failure(RuntimeError('boom')) == 'boom'
