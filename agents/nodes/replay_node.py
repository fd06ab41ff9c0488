"""The replay server as a program node, checkpointed into the run directory.

Launchpad's ReverbNode starts a server and waits for the stop; its
checkpoints (if any) go where the checkpointer says and are never taken at
a stop. A resumed run then starts from an empty buffer: a refill of
`replay_min_size` transitions, then training on fresh data only, which is a
different run rather than a continued one. This node keeps the buffer:

- the server's checkpointer is Reverb's DefaultCheckpointer at the fixed
  path checkpoints/replay/ (Reverb keeps the newest checkpoint there and
  loads it when the server starts, so a resume restores the table);
- it checkpoints every `checkpoint_period_s` and once more when the program
  stops, and writes replay_checkpoint.json (items, bytes, seconds) beside
  the checkpoints, and replay_restored.json with what a start restored.

A restored table keeps the settings it was created with (size, rate
limiter): the launcher refuses a resume that changes them unless the user
drops the buffer (launch/replay_checks.py).
"""

from __future__ import annotations

import logging
import os
import time

import launchpad as lp

from tandem.agents.core import files
from tandem.agents.replay import replay_checkpoints
from tandem.agents.runtime.lifecycle import stop_requested
from tandem.agents.runtime.rundir import RunDir, capture_errors


def _bytes(path: str) -> int:
  return sum(os.path.getsize(os.path.join(d, f))
             for d, _, names in os.walk(path) for f in names)


class ReplayCheckpointLoadError(RuntimeError):
  """The replay server did not start while loading its checkpoint; the
  launcher's closing hint then names --drop_replay."""


def start_server(tables, port, checkpoint_dir):
  """A reverb.Server on `port` (None: any free one) with a checkpointer on
  `checkpoint_dir` (None: none), which loads the newest checkpoint there.
  A load that fails is reported with the checkpoint and the way out: the
  launcher checks the checkpoint's framing before a resume, but a record
  damaged inside is found only here."""
  import reverb
  checkpointer = None
  if checkpoint_dir is not None:
    os.makedirs(checkpoint_dir, exist_ok=True)
    checkpointer = reverb.checkpointers.DefaultCheckpointer(checkpoint_dir)
  try:
    return reverb.Server(tables=tables, port=port, checkpointer=checkpointer)
  except RuntimeError as e:
    loading = (checkpoint_dir is not None and
               replay_checkpoints.latest(checkpoint_dir))
    if not loading:
      raise
    raise ReplayCheckpointLoadError(
        f'the replay server did not start while loading {loading}: {e}. If '
        'that checkpoint is damaged, resume with --drop_replay to move '
        'checkpoints/replay/ aside (kept) and start from an empty '
        'buffer') from e


class ReplayNode(lp.ReverbNode):
  """A ReverbNode whose table survives stops, crashes and resumes."""

  def __init__(self, tables_fn, run_dir: str, checkpoints: bool,
               checkpoint_period_s: float):
    super().__init__(tables_fn)
    self._run_dir = run_dir
    self._checkpoints = checkpoints
    self._period = checkpoint_period_s

  def run(self):
    rd = RunDir(self._run_dir)
    with capture_errors(rd, 'replay'):
      self._serve(rd)

  def _serve(self, rd: RunDir):
    import reverb
    from launchpad import address as lp_address
    tables = self._priority_tables_fn()
    server = start_server(
        tables, lp_address.get_port_from_address(self._address.resolve()),
        rd.replay_checkpoints if self._checkpoints else None)
    client = reverb.Client(f'localhost:{server.port}')
    if self._checkpoints:
      files.write_json_atomic(rd.replay_restored, {
          'time': time.time(), 'items': self._items(client)})
    last = time.monotonic()
    try:
      while not stop_requested(1.0):
        if self._checkpoints and time.monotonic() - last > self._period:
          self._checkpoint(client, rd, at_stop=False)
          last = time.monotonic()
      if self._checkpoints:
        self._checkpoint(client, rd, at_stop=True)
    finally:
      server.stop()

  @staticmethod
  def _items(client) -> dict:
    return {name: int(info.current_size)
            for name, info in client.server_info().items()}

  def _checkpoint(self, client, rd: RunDir, at_stop: bool) -> None:
    start = time.monotonic()
    path = client.checkpoint()
    seconds = time.monotonic() - start
    record = {'time': time.time(), 'path': path, 'at_stop': at_stop,
              'items': self._items(client), 'seconds': seconds,
              'bytes': _bytes(path)}
    files.write_json_atomic(rd.replay_checkpoint_record, record)
    logging.info('replay: checkpoint %s (%s items, %.2f s)', path,
                 record['items'], seconds)
