"""Writing files safely: atomically (a crash mid-write never damages what
was there), and never through a symbolic link (a link planted where a file
is written would otherwise redirect the write to the link's target)."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from typing import IO, BinaryIO, Callable

_MODES = {'w': os.O_TRUNC, 'a': os.O_APPEND}


class NotARegularFile(OSError):
  """A path to write is a symbolic link, or not a regular file."""


def open_to_write(path: str, mode: str = 'w', newline=None) -> IO:
  """open(path, mode) for 'w', 'a', 'wb' or 'ab', refusing (with
  NotARegularFile naming the path) a symbolic link or anything but a
  regular file at `path`, without touching what it points to. The mode of
  a new file follows the umask, as open()'s does."""
  # O_NONBLOCK: a FIFO planted at `path` fails to open instead of blocking
  # the writer until someone reads it; cleared again for the regular file.
  flags = (os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC |
           os.O_NONBLOCK | _MODES[mode[0]])
  try:
    fd = os.open(path, flags, 0o666)
  except OSError as e:
    if os.path.islink(path):
      raise NotARegularFile(
          f'{path} is a symbolic link; Tandem writes only regular files '
          'there, never through a link') from e
    raise
  if not stat.S_ISREG(os.fstat(fd).st_mode):
    os.close(fd)
    raise NotARegularFile(f'{path} is not a regular file')
  os.set_blocking(fd, True)
  return os.fdopen(fd, mode, newline=newline)


def write_atomic(path: str, write: Callable[[BinaryIO], None]) -> None:
  """Calls write(f) on a temporary file beside `path`, fsyncs, renames."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  suffix = os.path.splitext(path)[1]
  fd, tmp = tempfile.mkstemp(dir=directory, prefix='.tmp-', suffix=suffix)
  try:
    # mkstemp makes the file 0600; the file it becomes gets open()'s mode.
    os.fchmod(fd, 0o666 & ~_umask())
    with os.fdopen(fd, 'wb') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  # The rename itself is on disk only once its directory is.
  dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)


def _umask() -> int:
  """This process's umask, read without changing it (os.umask can only
  set it, and setting it back races with other threads' creations)."""
  try:
    with open('/proc/self/status') as f:
      for line in f:
        if line.startswith('Umask:'):
          return int(line.split()[1], 8)
  except (OSError, ValueError, IndexError):
    pass
  return 0o022


def write_json_atomic(path: str, obj) -> None:
  # Serialise first, so an unserialisable object never reaches the disk.
  data = json.dumps(obj, indent=1, sort_keys=True).encode()
  write_atomic(path, lambda f: f.write(data))
