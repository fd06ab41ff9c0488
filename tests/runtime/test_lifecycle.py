"""`call` and `stop_requested` from threads Launchpad does not manage."""

import concurrent.futures
import threading
import time

import pytest

from tandem.agents.runtime import lifecycle


class _SlowClient:
  """A Courier-like client whose calls take `delay_s` to answer."""

  def __init__(self, delay_s):
    self._pool = concurrent.futures.ThreadPoolExecutor(1)
    self.futures = self
    self._delay = delay_s

  def answer(self, x):
    def work():
      time.sleep(self._delay)
      return x * 2
    return self._pool.submit(work)


def _in_thread(fn):
  out = {}

  def body():
    try:
      out['value'] = fn()
    except BaseException as e:
      out['error'] = e
  t = threading.Thread(target=body)  # not a Launchpad node thread
  t.start()
  t.join(30)
  return out


@pytest.fixture
def fresh_capture(monkeypatch):
  monkeypatch.setattr(lifecycle, '_captured', [])


def test_a_slow_call_from_a_handler_thread_waits_for_its_answer(
    fresh_capture):
  lifecycle.capture_stop_event(threading.Event())
  # Slower than one poll slice: the poll asks whether the program stops.
  out = _in_thread(lambda: lifecycle.call(_SlowClient(1.2), 'answer', 21,
                                          poll_s=0.2))
  assert out == {'value': 42}


def test_the_captured_stop_still_abandons_the_call(fresh_capture):
  stop = threading.Event()
  lifecycle.capture_stop_event(stop)
  stop.set()
  out = _in_thread(lambda: lifecycle.call(_SlowClient(5.0), 'answer', 1,
                                          poll_s=0.2))
  assert isinstance(out.get('error'), lifecycle.Stopping)


def test_without_a_captured_event_the_error_says_why(fresh_capture):
  out = _in_thread(lambda: lifecycle.call(_SlowClient(1.0), 'answer', 1,
                                          poll_s=0.2))
  assert isinstance(out.get('error'), RuntimeError)
  assert 'capture_stop_event' in str(out['error'])


class _FailingClient:
  """A Courier-like client whose peer cancels the call (it stopped first)."""

  def __init__(self):
    self.futures = self

  def answer(self, x):
    del x
    f = concurrent.futures.Future()
    f.set_exception(RuntimeError('Cancelled'))
    return f


def test_a_call_failing_as_the_program_stops_is_the_stop(fresh_capture,
                                                         monkeypatch):
  # Guards against a learner reported as crashed on Ctrl-C: its call to the
  # counter, which stopped first, fails with StatusNotOk: Cancelled, and its
  # own stop arrives a moment later.
  # A long grace for the stop half: the wait ends when the stop arrives, so
  # it costs nothing, and a Timer thread scheduled late on a loaded machine
  # still lands inside it. Code that re-raises at once fails it.
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 10.0)
  stop = threading.Event()
  lifecycle.capture_stop_event(stop)
  threading.Timer(0.1, stop.set).start()
  out = _in_thread(lambda: lifecycle.call(_FailingClient(), 'answer', 1))
  assert isinstance(out.get('error'), lifecycle.Stopping), out
  # Without a stop it is the error it is.
  monkeypatch.setattr(lifecycle, 'STOP_GRACE_S', 0.2)
  stop.clear()
  out = _in_thread(lambda: lifecycle.call(_FailingClient(), 'answer', 1))
  assert isinstance(out.get('error'), RuntimeError), out
  assert not isinstance(out['error'], lifecycle.Stopping)
