"""Reverb's replay checkpoints on disk, checked before a resume loads one.

Reverb's TFRecordCheckpointer writes each checkpoint into a new directory
named by its time under checkpoints/replay/ (tables.tfrecord, then
chunks.tfrecord, then an empty DONE file) and, when a server starts, loads
the newest directory by name that holds DONE. If a file of that checkpoint
is cut short, the replay node dies at start, after every other node has
been launched; if one is missing or the table file is empty, Reverb starts
from an empty buffer without a word. `check` reads the record framing of
both files first, so the launcher can refuse the resume and name the file.

The framing is TensorFlow's TFRecord format (uncompressed, as Reverb writes
it): per record a little-endian uint64 length, the masked CRC-32C of those
8 bytes, the data, the masked CRC-32C of the data. `check` verifies the
lengths and their CRCs and that the last record ends at the end of the
file; it does not checksum the data (megabytes, in pure Python): a record
damaged inside is still reported by the replay node when it loads it.

Nothing here imports Reverb or TensorFlow.
"""

from __future__ import annotations

import os
import struct
from typing import Optional

DONE = 'DONE'
FILES = ('tables.tfrecord', 'chunks.tfrecord')


class ReplayCheckpointError(ValueError):
  """A replay checkpoint's file is missing, cut short or damaged."""


def _crc32c_table() -> tuple:
  table = []
  for n in range(256):
    c = n
    for _ in range(8):
      c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)  # Castagnoli, reflected
    table.append(c)
  return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
  """CRC-32C (Castagnoli) of `data`, as TFRecord files use it."""
  c = 0xFFFFFFFF
  for b in data:
    c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
  return c ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
  """TFRecord's masked CRC: rotated right by 15 bits, plus a constant."""
  c = crc32c(data)
  return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def latest(directory: str) -> Optional[str]:
  """The checkpoint a Reverb server started on `directory` loads: the
  newest sub-directory by name holding DONE; None where there is none."""
  if not os.path.isdir(directory):
    return None
  for name in sorted(os.listdir(directory), reverse=True):
    path = os.path.join(directory, name)
    if os.path.isfile(os.path.join(path, DONE)):
      return path
  return None


def check_records(path: str) -> int:
  """Walks a TFRecord file's framing; returns its number of records, or
  raises ReplayCheckpointError naming the file and the byte offset."""
  try:
    size = os.path.getsize(path)
    f = open(path, 'rb')
  except OSError as e:
    raise ReplayCheckpointError(f'{path}: cannot be read ({e})') from e
  count = offset = 0
  with f:
    while offset < size:
      header = f.read(12)
      if len(header) < 12:
        raise ReplayCheckpointError(
            f'{path}: cut short: a record header at byte {offset} has '
            f'{len(header)} of its 12 bytes')
      length, length_crc = struct.unpack('<QI', header)
      if masked_crc32c(header[:8]) != length_crc:
        raise ReplayCheckpointError(
            f'{path}: damaged: the length of the record at byte {offset} '
            'fails its checksum')
      end = offset + 12 + length + 4
      if end > size:
        raise ReplayCheckpointError(
            f'{path}: cut short: the record at byte {offset} needs '
            f'{12 + length + 4} bytes, the file has {size - offset} left')
      f.seek(end)
      offset = end
      count += 1
  return count


def check(path: str) -> dict:
  """{file name: records} of the checkpoint directory `path`, or
  ReplayCheckpointError naming the first file that is missing, cut short or
  damaged in its framing, or a table file without a record (Reverb writes
  one per table; a file emptied by a crash would restore nothing)."""
  out = {}
  for name in FILES:
    file = os.path.join(path, name)
    if not os.path.isfile(file):
      raise ReplayCheckpointError(f'{file}: missing (the checkpoint holds '
                                  f'{DONE}, so it was complete once)')
    out[name] = check_records(file)
  if out['tables.tfrecord'] == 0:
    raise ReplayCheckpointError(
        f'{os.path.join(path, "tables.tfrecord")}: empty (a checkpoint holds '
        'one record per table)')
  return out
