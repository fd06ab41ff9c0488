"""A private network for a local run: its nodes reach each other and nothing
else reaches them.

Courier and Reverb listen on every interface and authenticate no one, and
Courier rebuilds a call's arguments by calling what the caller names: any
process that reaches a node's port runs code as the run's user. So
`tandem train` runs a local program in a network namespace of its own (a
user namespace maps the caller to root there, so no privilege is needed)
with only its loopback interface up: the nodes' ports exist inside it alone.
The process re-executes itself under `unshare` before anything of the run
starts, keeping its PID, terminal and signals. Where namespaces are not
available (a container without the capability, a kernel that forbids user
namespaces, no `unshare`), the run goes on on the host's network after a
one-line warning; `--network host` chooses that without the warning, for
tools that attach to a live run's nodes.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import subprocess
import sys
from typing import Optional, Sequence

PRIVATE = 'private'
HOST = 'host'
CHOICES = (PRIVATE, HOST)
# Set across the re-execution: the network namespace the run came from, so
# the process inside can tell that it did enter a new one.
OUTER = 'TANDEM_OUTER_NETNS'
UNSHARE_FLAGS = ('--user', '--map-root-user', '--net')
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_IFREQ = '16sH22x'  # struct ifreq: name, flags, the rest of the union


def namespace() -> str:
  """This process's network namespace, e.g. 'net:[4026531840]'."""
  return os.readlink('/proc/self/ns/net')


def bring_loopback_up() -> None:
  """Sets `lo` up (a new network namespace starts with it down), as
  `ip link set lo up` does, without needing iproute2."""
  with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
    req = struct.pack(_IFREQ, b'lo', 0)
    flags = struct.unpack(_IFREQ, fcntl.ioctl(s.fileno(), _SIOCGIFFLAGS,
                                              req))[1]
    fcntl.ioctl(s.fileno(), _SIOCSIFFLAGS,
                struct.pack(_IFREQ, b'lo', flags | _IFF_UP))


def _probe_command(unshare: str) -> list:
  return [unshare, *UNSHARE_FLAGS, '--', sys.executable, '-c',
          'from tandem.launch import network; network.bring_loopback_up()']


def unavailable_reason() -> Optional[str]:
  """None where a private namespace with loopback up can be made here, else
  why not (the probe's own words)."""
  unshare = shutil.which('unshare')
  if unshare is None:
    return '`unshare` (util-linux) is not installed'
  try:
    probe = subprocess.run(_probe_command(unshare), capture_output=True,
                           text=True, timeout=30)
  except (OSError, subprocess.TimeoutExpired) as e:
    return f'`unshare` could not run ({e})'
  if probe.returncode != 0:
    words = (probe.stderr.strip().splitlines() or
             [f'exit status {probe.returncode}'])[-1]
    return f'`unshare {" ".join(UNSHARE_FLAGS)}` failed: {words}'
  return None


def warn(reason: str) -> None:
  print(f'tandem: warning: no private network for this run ({reason}); its '
        'nodes listen on every interface without authentication '
        '(docs/security.md); --network host runs so without this warning',
        file=sys.stderr)


def isolate(choice: str, argv: Sequence[str]) -> None:
  """Makes the rest of this process run inside a private network namespace
  (re-executing `python -m tandem.launch.cli ARGV` there), or warns and
  returns where that is not possible. Returns normally inside the
  namespace, with loopback up; `--network host` returns at once."""
  outer = os.environ.pop(OUTER, None)
  if choice == HOST:
    return
  if outer is not None:  # the re-executed process
    if namespace() == outer:
      warn('the re-executed launcher is still on the host network')
      return
    bring_loopback_up()
    return
  reason = unavailable_reason()
  if reason is not None:
    warn(reason)
    return
  sys.stdout.flush()
  sys.stderr.flush()
  unshare = shutil.which('unshare')
  env = dict(os.environ, **{OUTER: namespace()})
  os.execve(unshare, [unshare, *UNSHARE_FLAGS, '--', sys.executable, '-m',
                      'tandem.launch.cli', *argv], env)
