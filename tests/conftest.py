"""Shared pytest setup."""

import os

from absl import flags

# absl-based libraries (Launchpad's test launchers, absltest) read flags;
# pytest never parses them, so take the defaults.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

os.environ.setdefault('MUJOCO_GL', 'disable')


def _never_shut_down_courier_clients_from_gc():
  """A Courier client garbage-collected while one of its RPCs is still in
  flight to a server that is gone (a call a stopping node abandoned, in a
  test_mt program of an earlier test) blocks in `Shutdown()` inside
  `__del__` forever: CI hung with the main thread there, in a later, unrelated
  test. Test processes run many programs and collect their clients at
  arbitrary moments, so here a collected client is left to the process's
  exit instead. (Node processes of real programs exit through Launchpad.)"""
  try:
    from courier.python import client
  except ImportError:
    return
  client.Client.__del__ = lambda self: None


_never_shut_down_courier_clients_from_gc()
