"""Stand-ins shared by tests of nodes built outside a program."""

import concurrent.futures


class UncontactedReplay:
  """The replay client a learner node takes, for tests in which the node
  never takes a step: only its address is read, never contacted."""
  server_address = 'localhost:0'


class _Futures:
  def __init__(self, target):
    self._target = target

  def __getattr__(self, method):
    def submit(*args, **kwargs):
      future = concurrent.futures.Future()
      try:
        future.set_result(getattr(self._target, method)(*args, **kwargs))
      except Exception as e:
        future.set_exception(e)
      return future
    return submit


class CourierClient:
  """What `lifecycle.call` needs of a Courier client: `futures.<method>()`
  answered at once by calling `target`'s method (a finished future)."""

  def __init__(self, target):
    self.futures = _Futures(target)
