"""Shared pytest setup."""

import os
import shutil
import sys
import tempfile

import pytest

from absl import flags

# absl-based libraries (Launchpad's test launchers, absltest) read flags;
# pytest never parses them, so take the defaults.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()


def _patient_thread_programs():
  """The first Launchpad worker manager of a process takes
  --lp_termination_notice_secs (10 by default) and, when thread workers
  (test_mt programs) have not stopped by then, kills its whole process: here
  pytest itself, with no summary. A test_mt program's replay server takes
  ~5 s to stop while a sampling stream is open, so a loaded machine could
  cross 10 s. A node that never stops still ends the session, later."""
  try:
    import launchpad.flags  # noqa: F401  (defines the flag set below)
  except ImportError:  # the learner core's tests run without Launchpad
    return
  flags.FLAGS.lp_termination_notice_secs = 120


_patient_thread_programs()

os.environ.setdefault('MUJOCO_GL', 'disable')


def _share_compilations():
  """One XLA compilation cache for the whole test session, this process and
  every process it starts (each `tandem` program's nodes inherit the
  environment). The program tests launch the same small learner a dozen
  times: on 2 cores its compile is ~9 s of each ~25 s launch. JAX keys an
  entry by the computation, its options, the backend and jax's version,
  and falls back to compiling when an entry cannot be read. The folder is
  the session's own, removed at its end: nothing carries over between
  runs, so a run tests a fresh clone's compiles. Set
  JAX_COMPILATION_CACHE_DIR to choose the folder (kept), or to '' for none.
  """
  if 'JAX_COMPILATION_CACHE_DIR' in os.environ:
    return None
  path = tempfile.mkdtemp(prefix='tandem-test-xla-cache-')
  os.environ['JAX_COMPILATION_CACHE_DIR'] = path
  # Entries for compiles that take at least this long (the default is 1 s).
  os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.5')
  if 'jax' in sys.modules:  # read the variables already (pytest.main from
    import jax               # a process that had imported it)
    jax.config.update('jax_compilation_cache_dir', path)
    jax.config.update('jax_persistent_cache_min_compile_time_secs', float(
        os.environ['JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS']))
  return path


_XLA_CACHE = _share_compilations()


def _quicker_cpu_compiles():
  """XLA's CPU back end at LLVM optimisation level 1 (its default is 2)
  for this session and every process it starts. The tests build many small
  learners and run few steps with each, so compiling is most of their time;
  level 1 made both the compile-bound and the training tests faster, level
  0 made training about three times slower (BENCHMARKS.md, XLA's CPU
  optimisation level). The level changes the machine code LLVM emits, not
  the computation XLA builds: the same HLO, the same fusions. Set the flag
  in XLA_FLAGS to choose another level."""
  from tandem.agents.core import xla_flags
  os.environ['XLA_FLAGS'] = xla_flags.with_flag(
      os.environ.get('XLA_FLAGS', ''), '--xla_backend_optimization_level=1')


_quicker_cpu_compiles()

_TOOLING = ('bench', 'studies')


# Tests that start whole programs: each starts six or more processes that
# share the machine's cores, so they run one after another.
_PROGRAMS = 'integration'


# First: pytest-xdist's own hook, which turns the xdist_group markers into
# the units of work, must find them already set.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
  """Tests of the bench/ and studies/ scripts are marked `tooling`: they
  guard research tooling, not the product, so the default run leaves them
  to `make test-tooling` (which CI runs).

  For pytest-xdist's `--dist loadgroup` (`make test` runs two workers), each
  test file is one unit of work, so a module's fixtures are built once, and
  the whole-program tests are one unit together, so no two programs run at
  once."""
  del config
  tests_dir = os.path.dirname(os.path.abspath(__file__))
  for item in items:
    rel = os.path.relpath(str(item.path), tests_dir)
    top = rel.split(os.sep)[0]
    if top in _TOOLING:
      item.add_marker(pytest.mark.tooling)
    item.add_marker(pytest.mark.xdist_group(
        'programs' if top == _PROGRAMS else rel))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
  """pytest-xdist's `loadgroup`, with the whole-program tests handed out
  first: they take the longest of any unit (about half the run on 2
  cores), so a worker that began them late would finish alone."""
  if config.getvalue('dist') != 'loadgroup':
    return None
  from xdist.scheduler import LoadGroupScheduling

  class ProgramsFirst(LoadGroupScheduling):

    def _assign_work_unit(self, node):
      if 'programs' in self.workqueue:
        self.workqueue.move_to_end('programs', last=False)
      super()._assign_work_unit(node)

  return ProgramsFirst(config, log)


# Courier's C++ clients of test_mt programs that have stopped, kept alive
# until the test process ends (see below).
_COURIER_CLIENTS = []


def _never_shut_down_courier_clients_from_gc():
  """A Courier client garbage-collected after its program stopped shuts its
  channel down from `__del__` (and its C++ destructor) while holding the
  GIL, waiting for an RPC whose completion needs the GIL: the process hangs
  (in test_program_mt: its main thread "Garbage-collecting" inside a
  Courier call, the learner's handler thread stuck in JAX tracing). Test
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
  made = client.Client.__init__

  def noting_init(self, *args, **kwargs):
    _COURIER_MADE.append(True)
    made(self, *args, **kwargs)
  client.Client.__init__ = noting_init


# Set once a Courier client was made in this process (conftest itself
# imports Courier, so an imported module says nothing).
_COURIER_MADE = []


_never_shut_down_courier_clients_from_gc()

_EXIT_STATUS = []


def pytest_sessionfinish(session, exitstatus):
  _EXIT_STATUS.append(int(exitstatus))
  if _XLA_CACHE:
    shutil.rmtree(_XLA_CACHE, ignore_errors=True)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
  del config
  # Any Courier client made, not only one collected so far: one still
  # referenced now is collected while the interpreter finalizes, its C++
  # half put in _COURIER_CLIENTS, and clearing that list joins a thread that
  # never ends (a run of test_ail_program.py alone hangs there after
  # reporting). Sessions without one (most unit-test runs) exit normally,
  # atexit handlers (coverage) included.
  if _EXIT_STATUS and (_COURIER_CLIENTS or _COURIER_MADE):
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_EXIT_STATUS[-1])
