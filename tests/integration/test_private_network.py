"""A local run's nodes are unreachable from outside the run: every port they
listen on exists only in the run's own network namespace. The probes go to
loopback (127.0.0.1 and ::1) only, from this test's process."""

import os
import socket
import stat
import time

import psutil
import pytest

from tandem.agents.runtime import supervision
from tandem.launch import network
from tests.integration.conftest import (interrupt_after_learner_steps,
                                        listening_addresses, run_tandem,
                                        start_tandem,
                                        stop_program, wait_for_learner_steps)

TINY = ['train', '--config', 'configs/mpo.py:tiny', '--launch', 'local_mp']

pytestmark = pytest.mark.skipif(
    network.unavailable_reason() is not None,
    reason=f'no network namespaces here: {network.unavailable_reason()}')


def refused(port: int) -> bool:
  """Whether a connection to `port` on both loopback addresses fails."""
  for family, host in ((socket.AF_INET, '127.0.0.1'),
                       (socket.AF_INET6, '::1')):
    with socket.socket(family, socket.SOCK_STREAM) as s:
      s.settimeout(5)
      try:
        s.connect((host, port))
      except OSError:
        continue
      return False
  return True


class _Crafted:
  """Rebuilt by the receiving Courier server as open(path, 'w')."""

  def __init__(self, path: str):
    self.path = path

  def __reduce__(self):
    return (open, (self.path, 'w'))


def crafted_call_lands(port: int, marker: str) -> bool:
  """Calls get_counts on localhost:port with an argument whose rebuilding
  writes `marker`; whether the call was answered. (Against a reachable
  node this writes the marker: that is the attack.)"""
  import courier
  client = courier.Client(f'localhost:{port}', call_timeout=5)
  try:
    client.get_counts(_Crafted(marker))
  except Exception:  # refused, unavailable or timed out
    return False
  return True


def test_nodes_listen_only_inside_the_run_namespace(runs_root, tmp_path):
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'private',
                              '--env_step_budget=1000000'])
  stopped = False
  run_dir = os.path.join(runs_root, 'private')
  try:
    wait_for_learner_steps(run_dir, 0, proc=proc)
    nodes = [p for p in psutil.Process(proc.pid).children(recursive=True)]
    assert nodes, 'the launcher started no node processes'
    # The launcher kept its PID across the re-execution, and it and every
    # node share one namespace that is not this test's.
    spaces = {os.readlink(f'/proc/{p.pid}/ns/net') for p in nodes}
    spaces.add(os.readlink(f'/proc/{proc.pid}/ns/net'))
    assert len(spaces) == 1 and network.namespace() not in spaces, spaces
    ports = set()
    deadline = time.monotonic() + 60
    while len(ports) < 3 and time.monotonic() < deadline:
      ports = {port for p in nodes for _, port in listening_addresses(p.pid)}
      time.sleep(0.5)
    assert len(ports) >= 3, ports  # replay, counter, learner at least
    # Listening, and no connection from outside reaches any of them: not a
    # byte of a crafted call can arrive.
    assert [p for p in ports if not refused(p)] == []
    # The takeover docs/security.md describes, aimed at the counter: an
    # argument whose rebuilding calls open(marker, 'w') in the node. It
    # cannot reach the node, so the marker stays absent.
    counter = [p.pid for p in nodes
               if supervision._node_name(p.pid) == 'counter']
    assert len(counter) == 1, [supervision._node_name(p.pid) for p in nodes]
    (_, port), = listening_addresses(counter[0])
    marker = str(tmp_path / 'marker')
    assert not crafted_call_lands(port, marker)
    assert not os.path.exists(marker)
    # The run itself is unharmed: Ctrl-C stops it cleanly (exit 130).
    interrupt_after_learner_steps(proc, run_dir, steps=0)
    stopped = True
  finally:
    if not stopped:
      stop_program(run_dir, proc)


def test_without_namespaces_the_run_warns_once_and_goes_on(runs_root,
                                                           tmp_path):
  # A stand-in `unshare` that fails as a kernel without user namespaces
  # would make it fail, first on PATH.
  bin_dir = tmp_path / 'bin'
  bin_dir.mkdir()
  fake = bin_dir / 'unshare'
  fake.write_text('#!/bin/sh\necho "unshare: unshare failed: Operation not '
                  'permitted" >&2\nexit 1\n')
  fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
  env_path = f'{bin_dir}{os.pathsep}{os.environ.get("PATH", "")}'
  # The launch goes on past the warning to the config's checks, which
  # refuse a bad field (exit 2) before any process starts.
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'fallback',
                         '--num_actors', '0'], env={'PATH': env_path})
  assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
  assert 'num_actors' in r.stderr
  warnings = [line for line in r.stderr.splitlines()
              if 'no private network' in line]
  assert len(warnings) == 1, r.stderr[-2000:]
  assert 'Operation not permitted' in warnings[0]
  # `--network host` is the same launch without the warning.
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'fallback',
                         '--num_actors', '0', '--network', 'host'],
                 env={'PATH': env_path})
  assert r.returncode == 2 and 'no private network' not in r.stderr
