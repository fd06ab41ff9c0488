"""Atomic file writes: a crash mid-write never damages what was there."""

from __future__ import annotations

import json
import os
import tempfile
from typing import BinaryIO, Callable


def write_atomic(path: str, write: Callable[[BinaryIO], None]) -> None:
  """Calls write(f) on a temporary file beside `path`, fsyncs, renames."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  suffix = os.path.splitext(path)[1]
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-', suffix=suffix)
  try:
    with os.fdopen(fd, 'wb') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def write_json_atomic(path: str, obj) -> None:
  # Serialise first, so an unserialisable object never reaches the disk.
  data = json.dumps(obj, indent=1, sort_keys=True).encode()
  write_atomic(path, lambda f: f.write(data))
