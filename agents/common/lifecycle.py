"""Asking whether the program is stopping, from inside any node."""


def stop_requested(timeout: float = 0.0) -> bool:
  """True once Launchpad asked this node's program to stop (SIGTERM under
  local_mp, lp.stop() anywhere); waits up to `timeout` seconds for it."""
  import launchpad as lp  # only program nodes call this
  return bool(lp.wait_for_stop(timeout))
