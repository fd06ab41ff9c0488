"""What an .npz member holds, from its .npy header alone.

`np.load(...)[name]` decompresses and allocates a member whole before anyone
sees its shape: a small compressed file can claim, or really hold, far more
than the machine's memory. Reading the header first (its first bytes, the
only ones decompressed) lets a loader check shape, dtype and size against
what it expects and refuse, naming the member, before any data is read.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from typing import NamedTuple

import numpy as np

# No member Tandem reads is near this; a header claiming more is refused
# whatever else is expected of it.
MAX_MEMBER_BYTES = 8 * 2**30
# The .npy header's own length limit (numpy's default for untrusted files).
_MAX_HEADER = 10_000


class Header(NamedTuple):
  """A member's declared array: shape and dtype."""
  shape: tuple
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize

  def describe(self) -> str:
    return f'shape {self.shape} dtype {self.dtype}'


class BadMember(ValueError):
  """A member's header is unreadable, or declares what cannot be loaded."""


def _zip_name(npz: np.lib.npyio.NpzFile, name: str) -> str:
  names = set(npz.zip.namelist())
  return name + '.npy' if name + '.npy' in names else name


def header(npz: np.lib.npyio.NpzFile, name: str,
           limit: int = MAX_MEMBER_BYTES) -> Header:
  """The declared shape and dtype of member `name` of an open archive,
  reading only its header. BadMember (its message says why, without the
  file's name) for a header that cannot be read, an object dtype (pickled
  data), or a size above `limit` bytes."""
  try:
    with npz.zip.open(_zip_name(npz, name)) as f:
      version = np.lib.format.read_magic(f)
      if version == (1, 0):
        shape, _, dtype = np.lib.format.read_array_header_1_0(
            f, max_header_size=_MAX_HEADER)
      elif version == (2, 0):
        shape, _, dtype = np.lib.format.read_array_header_2_0(
            f, max_header_size=_MAX_HEADER)
      else:
        raise BadMember(f'.npy format version {version}, expected 1.0 or 2.0')
  except BadMember:
    raise
  except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile,
          zlib.error) as e:
    raise BadMember(f'unreadable .npy header ({type(e).__name__}: {e})') from e
  if dtype.hasobject:
    raise BadMember('expected a numeric array, found a pickled object array '
                    '(files are loaded with allow_pickle=False)')
  found = Header(tuple(int(n) for n in shape), dtype)
  if found.nbytes > limit:
    raise BadMember(f'declares {found.describe()} ({found.nbytes:,} bytes), '
                    f'more than the {limit:,} bytes allowed')
  return found
