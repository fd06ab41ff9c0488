"""How the command line ends: its exit codes, and the error for bad input
found before launch."""

import os
import tempfile

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
  """Bad input found before launch: reported by name, exit 2."""


def require_writable_dir(out: str) -> None:
  """A UsageError naming --out where the directory that would hold it is
  missing or refuses a write: checked with a real write before any long
  work, since os.access does not see every refusal (root-squashed network
  mounts, ACLs, quotas). An existing directory at `out` is named too: the
  write at the end would fail on it."""
  if os.path.isdir(out):
    raise UsageError(f'--out {out} is a directory; expected the path of a '
                     'file to write')
  out_dir = os.path.dirname(os.path.abspath(out))
  try:
    with tempfile.TemporaryFile(dir=out_dir):
      pass
  except OSError as e:
    raise UsageError(f'--out {out}: the directory {out_dir} does not exist '
                     f'or is not writable ({e.strerror})') from e
