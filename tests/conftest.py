"""Shared pytest setup."""

import os
import sys

import pytest

from absl import flags

# absl-based libraries (Launchpad's test launchers, absltest) read flags;
# pytest never parses them, so take the defaults.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

os.environ.setdefault('MUJOCO_GL', 'disable')


# Courier's C++ clients of test_mt programs that have stopped, kept alive
# until the test process ends (see below).
_COURIER_CLIENTS = []


def _never_shut_down_courier_clients_from_gc():
  """A Courier client garbage-collected after its program stopped shuts its
  channel down from `__del__` (and its C++ destructor) while holding the
  GIL, waiting for an RPC whose completion needs the GIL: CI hung twice in
  test_program_mt with the main thread "Garbage-collecting" inside a Courier
  call and the learner's handler thread stuck in JAX tracing. Test
  processes run several test_mt programs and collect their clients at
  arbitrary moments, so a collected client's C++ half is kept alive instead,
  and the process ends with os._exit once pytest has reported (below),
  before any finalizer could run. Node processes of real programs are not
  affected: Launchpad ends them."""
  try:
    from courier.python import client
  except ImportError:
    return
  client.Client.__del__ = lambda self: _COURIER_CLIENTS.append(
      self.__dict__.get('_client'))


_never_shut_down_courier_clients_from_gc()

_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
  _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  del config
  if _COURIER_CLIENTS and _EXIT_STATUS:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])  # pylint: disable=protected-access
