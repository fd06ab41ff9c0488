"""Stopping: asking whether the program is stopping, and RPCs that notice it.

A Courier call to a node that has already stopped waits forever; a node
that makes such a call on its way down would then never write its final
checkpoint. Nodes therefore call each other through `call`, which waits in
short slices and raises `Stopping` once the program is stopping.

Launchpad answers "is the program stopping?" only in a node's own thread
(its worker manager is thread-local), and Courier runs each incoming call
in a handler thread of its own: the evaluator's `evaluate_now`, called by
the limiter, calls the learner from such a thread. So every node records
its program's stop event from its main thread when it starts
(`capture_stop_event`, called by rundir.capture_errors), and any other
thread of that process falls back to it.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Optional


class Stopping(Exception):
  """The program is stopping; the interrupted operation was abandoned."""


# The stop event of the program whose node last started in this process:
# one per process under local_mp; under local_mt all nodes share one.
_captured: list = []


def capture_stop_event(event: Optional[threading.Event] = None) -> None:
  """Records the current node's stop event (Launchpad's, if not given) for
  threads that Launchpad does not manage."""
  if event is None:
    import launchpad as lp  # only program nodes call this
    try:
      event = lp.stop_event()
    except RuntimeError:
      return  # not a node thread: nothing to capture
  _captured[:] = [event]


def stop_requested(timeout: float = 0.0) -> bool:
  """True once Launchpad asked this node's program to stop (SIGTERM under
  local_mp, lp.stop() anywhere); waits up to `timeout` seconds for it.
  Works from any thread of a node's process."""
  import launchpad as lp  # only program nodes call this
  try:
    return bool(lp.wait_for_stop(timeout))
  except RuntimeError:
    if not _captured:
      raise RuntimeError(
          'stop_requested: called outside a Launchpad node thread before '
          'any node of this process started (capture_stop_event)') from None
    return _captured[0].wait(timeout)


# How long a failed call waits for this node's stop before it is an error.
# Nodes learn of a stop independently (a dead launcher: each on its own 1 s
# poll), so on a loaded machine a peer can be gone seconds before this node
# hears; a real failure is reported this much later.
STOP_GRACE_S = 5.0


def call(client, method: str, *args, poll_s: float = 0.5, **kwargs):
  """client.method(*args, **kwargs) over Courier, abandoned on stop."""
  future = getattr(client.futures, method)(*args, **kwargs)
  while True:
    try:
      return future.result(timeout=poll_s)
    except concurrent.futures.TimeoutError:
      if stop_requested():
        raise Stopping(f'{method}: program stopping') from None
    except Exception as e:  # noqa: BLE001  (re-raised unless stopping)
      # A peer that stops first cancels the calls it was serving (Courier:
      # StatusNotOk "Cancelled"), and this node's own stop may arrive a
      # moment later: that is the stop, not a crash of this node.
      if stop_requested(STOP_GRACE_S):
        raise Stopping(f'{method}: program stopping ({e})') from e
      raise
