"""Stopping: asking whether the program is stopping, and RPCs that notice it.

A Courier call to a node that has already stopped waits forever; a node
that makes such a call on its way down would then never write its final
checkpoint. Nodes therefore call each other through `call`, which waits in
short slices and raises `Stopping` once the program is stopping.
"""

from __future__ import annotations

import concurrent.futures


class Stopping(Exception):
  """The program is stopping; the interrupted operation was abandoned."""


def stop_requested(timeout: float = 0.0) -> bool:
  """True once Launchpad asked this node's program to stop (SIGTERM under
  local_mp, lp.stop() anywhere); waits up to `timeout` seconds for it."""
  import launchpad as lp  # only program nodes call this
  return bool(lp.wait_for_stop(timeout))


def call(client, method: str, *args, poll_s: float = 0.5, **kwargs):
  """client.method(*args, **kwargs) over Courier, abandoned on stop."""
  future = getattr(client.futures, method)(*args, **kwargs)
  while True:
    try:
      return future.result(timeout=poll_s)
    except concurrent.futures.TimeoutError:
      if stop_requested():
        raise Stopping(f'{method}: program stopping') from None
