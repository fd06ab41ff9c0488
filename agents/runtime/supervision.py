"""Node processes live and die with their launcher, and hold the run
directory while they live.

Launchpad's local_mp starts each node as a child process and stops them
when the launcher asks; a launcher killed with SIGKILL (or by the OOM
killer) asks nothing, and the nodes would go on training and writing into
the run directory, which the launcher's lock no longer protects. Two things
close that hole:

- every node process polls its launcher (pid and start time, so a reused
  pid is not mistaken for it) and, once it is gone, stops itself through
  Launchpad's own SIGTERM path: the node's checkpoint-on-stop code runs as
  on any stop, and a node that has not exited `grace_s` later exits hard;
- every node process holds a shared flock on `.nodes.lock` for its whole
  life, and the launcher refuses to start (or resume) while it cannot take
  that lock exclusively: no second writer while any old node lives.

The launcher announces itself to its nodes in the environment
(`TANDEM_LAUNCHER`), which Launchpad's local_mp copies into every node
process. Nodes running inside the launcher's own process (local_mt,
test_mt) skip both: the launcher's lock already covers them.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import select
import signal
import threading
import time
from typing import NamedTuple, Optional

ENV_LAUNCHER = 'TANDEM_LAUNCHER'   # "<pid>:<start time>" of the launcher
ENV_RUN_DIR = 'TANDEM_RUN_DIR'     # marks the program's processes
ENV_GRACE = 'TANDEM_STOP_GRACE_S'  # how long a node may take to stop
NODES_LOCK = '.nodes.lock'


class Launcher(NamedTuple):
  pid: int
  start_time: Optional[int]   # clock ticks since boot; None without /proc

  def encode(self) -> str:
    return f'{self.pid}:{"" if self.start_time is None else self.start_time}'

  @staticmethod
  def decode(text: str) -> 'Launcher':
    pid, _, start = text.partition(':')
    return Launcher(int(pid), int(start) if start else None)


def _start_time(pid: int) -> Optional[int]:
  """Field 22 of /proc/<pid>/stat; None if the process or /proc is absent."""
  try:
    with open(f'/proc/{pid}/stat') as f:
      stat = f.read()
  except OSError:
    return None
  # The command name (field 2) may hold spaces and parentheses: split after
  # its closing parenthesis.
  return int(stat[stat.rindex(')') + 2:].split()[19])


def this_process() -> Launcher:
  return Launcher(os.getpid(), _start_time(os.getpid()))


def alive(launcher: Launcher) -> bool:
  """Whether `launcher` still runs (a zombie counts as gone)."""
  if launcher.start_time is not None:
    if _start_time(launcher.pid) != launcher.start_time:
      return False
    try:
      with open(f'/proc/{launcher.pid}/stat') as f:
        state = f.read().rsplit(')', 1)[1].split()[0]
      return state not in ('Z', 'X')
    except OSError:
      return False
  try:
    os.kill(launcher.pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    pass
  return True


def announce(run_dir: str, grace_s: float) -> None:
  """In the launcher, before lp.launch: tells the nodes who to watch and
  how long their stop may take."""
  os.environ[ENV_LAUNCHER] = this_process().encode()
  os.environ[ENV_RUN_DIR] = os.path.abspath(run_dir)
  os.environ[ENV_GRACE] = str(float(grace_s))


# The fd of this process's shared lock: it must stay open for the process's
# whole life, whatever node object asked for it.
_held: dict[str, int] = {}


def hold_nodes_lock(run_dir: str) -> None:
  """Takes a shared flock on run_dir/.nodes.lock until this process ends."""
  path = os.path.join(run_dir, NODES_LOCK)
  if path in _held:
    return
  fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
  # The launcher only holds it exclusively for an instant, before launch.
  fcntl.flock(fd, fcntl.LOCK_SH)
  _held[path] = fd


def nodes_running(run_dir: str) -> bool:
  """True while any node process of a program on run_dir holds its lock."""
  path = os.path.join(run_dir, NODES_LOCK)
  if not os.path.exists(path):
    return False
  fd = os.open(path, os.O_RDWR)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError as e:
    if e.errno in (errno.EAGAIN, errno.EACCES):
      return True
    raise
  finally:
    os.close(fd)  # closing drops the lock if we got it
  return False


def program_processes(run_dir: str) -> list[int]:
  """Pids of live processes started for a program on run_dir (by the
  environment marker), other than this one. Linux only; [] elsewhere."""
  marker = f'{ENV_RUN_DIR}={os.path.abspath(run_dir)}'.encode()
  found = []
  for name in os.listdir('/proc') if os.path.isdir('/proc') else []:
    if not name.isdigit() or int(name) == os.getpid():
      continue
    try:
      with open(f'/proc/{name}/environ', 'rb') as f:
        env = f.read().split(b'\0')
      with open(f'/proc/{name}/stat') as f:
        state = f.read().rsplit(')', 1)[1].split()[0]
    except OSError:
      continue
    if marker in env and state not in ('Z', 'X'):
      found.append(int(name))
  return sorted(found)


def _stop_self(grace_s: float) -> None:
  # Launchpad's handler turns SIGTERM into the node's ordinary stop; the
  # hard exit only catches a node whose stop path hangs.
  os.kill(os.getpid(), signal.SIGTERM)
  time.sleep(grace_s)
  logging.error('launcher gone and this node did not stop within %.0f s; '
                'exiting', grace_s)
  os._exit(1)


def exit_with_launcher(launcher: Launcher, poll_s: float = 1.0,
                       grace_s: float = 60.0) -> threading.Thread:
  """Starts a daemon thread that stops this process once `launcher` is
  gone."""
  def watch():
    while alive(launcher):
      time.sleep(poll_s)
    logging.warning('launcher (pid %d) is gone; stopping this node',
                    launcher.pid)
    _stop_self(grace_s)
  thread = threading.Thread(target=watch, name='launcher-watch', daemon=True)
  thread.start()
  return thread


_watching: list = []


def node_started(run_dir: str) -> None:
  """Called first by every node: in a node process of its own, holds the
  run directory's node lock and ties the process to its launcher."""
  text = os.environ.get(ENV_LAUNCHER)
  if not text:
    return
  launcher = Launcher.decode(text)
  if launcher.pid == os.getpid():
    return   # local_mt / test_mt: nodes are threads of the launcher
  hold_nodes_lock(run_dir)
  if not _watching:
    grace_s = float(os.environ.get(ENV_GRACE, '60'))
    _extend_own_notice(grace_s)
    _watching.append(exit_with_launcher(launcher, grace_s=grace_s))


def _extend_own_notice(grace_s: float) -> None:
  """Each node process has its own Launchpad worker manager, which kills its
  process once its --lp_termination_notice_secs (10 by default; the
  launcher's setting does not reach it, and Launchpad's flag forwarding
  fails on this flag) have passed in a stop. Give it the run's grace period.
  Called from the node's main thread, where the manager is reachable."""
  import math
  try:
    from launchpad.launch import worker_manager
    manager = worker_manager.get_worker_manager()
  except (ImportError, RuntimeError):
    return
  # Launchpad reads the grace only from its flag, once per process.
  manager._termination_notice_secs = int(math.ceil(grace_s))  # noqa: SLF001


ENV_NODE = 'TANDEM_NODE'   # the node group of a process (launch/mpo.py)


def _node_name(pid: int) -> Optional[str]:
  try:
    with open(f'/proc/{pid}/environ', 'rb') as f:
      env = f.read().split(b'\0')
  except OSError:
    return None
  prefix = f'{ENV_NODE}='.encode()
  for item in env:
    if item.startswith(prefix):
      return item[len(prefix):].decode(errors='replace')
  return None


class DeathWatch:
  """In the launcher: which node process of the program ended first.

  Launchpad's worker manager reports only "One of the workers exited with
  code N"; when replay is killed, the learner then fails too (it can no
  longer sample) and would be blamed. This thread learns the program's
  processes (by the run directory marker and their TANDEM_NODE) and waits
  on a pidfd of each, so it records the order in which they end as they
  end, before the manager has noticed anything.
  """

  def __init__(self, run_dir: str, poll_s: float = 0.25,
               expected: Optional[int] = None):
    """expected: how many node processes the program has; once all are
    known, /proc is no longer scanned (a scan reads every process's
    environment, too much to repeat four times a second for a whole run)."""
    self._run_dir = run_dir
    self._expected = expected
    self._poll = poll_s
    self._fds: dict[int, tuple[int, str]] = {}   # pidfd -> (pid, node)
    self._known: set = set()
    # (time, pid, node, how many ended in the same poll): those seen in one
    # poll are in registration order, not the order they ended in.
    self.ended: list[tuple[float, int, str, int]] = []
    self._lock = threading.Lock()
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._watch, daemon=True,
                                    name='death-watch')

  def start(self) -> 'DeathWatch':
    self._thread.start()
    return self

  def stop(self) -> None:
    self._stop.set()
    if self._thread.is_alive():
      self._thread.join(5)
    for fd in list(self._fds):
      os.close(fd)
    self._fds.clear()

  def _learn(self, poller) -> None:
    for pid in program_processes(self._run_dir):
      if pid in self._known:
        continue
      name = _node_name(pid)
      if name is None:
        continue
      try:
        fd = os.pidfd_open(pid)
      except (OSError, AttributeError):
        continue   # already gone, or no pidfd on this system
      self._known.add(pid)
      self._fds[fd] = (pid, name)
      poller.register(fd, select.POLLIN)

  def _watch(self):
    poller = select.poll()
    while not self._stop.is_set():
      if self._expected is None or len(self._known) < self._expected:
        self._learn(poller)
      events = poller.poll(self._poll * 1000)
      seen = []
      for fd, _ in events:
        seen.append(self._fds.pop(fd))
        poller.unregister(fd)
        os.close(fd)
      with self._lock:
        self.ended.extend((time.time(), pid, name, len(seen))
                          for pid, name in seen)

  def first(self, wait_s: float = 0.0) -> Optional[tuple[int, str]]:
    """(pid, node) of the first program process seen to end, or None if
    none has been seen within `wait_s` seconds, or if the first were seen
    together (this thread was late: which ended first is unknown). The
    launcher asks once Launchpad saw a worker exit; this thread may not
    have run since that process ended (its pidfd is then readable
    already), so it waits."""
    deadline = time.monotonic() + wait_s
    while True:
      with self._lock:
        if self.ended:
          _, pid, name, together = self.ended[0]
          return (pid, name) if together == 1 else None
      if time.monotonic() >= deadline or not self._thread.is_alive():
        return None
      time.sleep(0.02)
