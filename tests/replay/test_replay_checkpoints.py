"""Reverb replay checkpoints checked before a resume loads one
(agents/replay/replay_checkpoints.py)."""

import os
import shutil

import pytest
import tensorflow as tf

from tandem.agents.replay import replay_checkpoints as rc


def test_crc32c_matches_the_standard_check_value():
  assert rc.crc32c(b'123456789') == 0xE3069283
  assert rc.crc32c(b'') == 0


def test_framing_matches_tensorflows_record_writer(tmp_path):
  path = str(tmp_path / 'x.tfrecord')
  with tf.io.TFRecordWriter(path) as w:
    for n in (0, 1, 300, 70_000):
      w.write(bytes(range(256)) * (n // 256) + b'a' * (n % 256))
  assert rc.check_records(path) == 4


def _copy(checkpoint, tmp_path):
  root, path = checkpoint
  dest = tmp_path / 'replay'
  shutil.copytree(root, dest)
  return str(dest), str(dest / os.path.basename(path))


def test_an_empty_table_file_is_refused(checkpoint, tmp_path):
  # Reverb restores nothing from it, silently.
  _, path = _copy(checkpoint, tmp_path)
  os.truncate(os.path.join(path, 'tables.tfrecord'), 0)
  with pytest.raises(rc.ReplayCheckpointError,
                     match=r'tables\.tfrecord: empty'):
    rc.check(path)


def test_a_servers_checkpoint_passes_and_is_the_latest(checkpoint, tmp_path):
  root, path = _copy(checkpoint, tmp_path)
  assert rc.latest(root) == path
  counts = rc.check(path)
  assert counts['tables.tfrecord'] == 1 and counts['chunks.tfrecord'] >= 1
  # A newer directory without DONE (a save cut short) is not what loads.
  os.makedirs(os.path.join(root, '9999-12-31T00:00:00'))
  assert rc.latest(root) == path
  assert rc.latest(str(tmp_path / 'none')) is None


def test_a_file_cut_short_is_named_with_its_offset(checkpoint, tmp_path):
  _, path = _copy(checkpoint, tmp_path)
  chunks = os.path.join(path, 'chunks.tfrecord')
  os.truncate(chunks, os.path.getsize(chunks) - 3)
  with pytest.raises(rc.ReplayCheckpointError,
                     match=r'chunks\.tfrecord: cut short: the record at byte'):
    rc.check(path)
  os.truncate(chunks, 5)
  with pytest.raises(rc.ReplayCheckpointError, match='has 5 of its 12 bytes'):
    rc.check(path)


def test_a_damaged_length_and_a_missing_file_are_named(checkpoint, tmp_path):
  _, path = _copy(checkpoint, tmp_path)
  tables = os.path.join(path, 'tables.tfrecord')
  with open(tables, 'r+b') as f:
    f.write(b'\x7f')  # the first byte of the first record's length
  with pytest.raises(rc.ReplayCheckpointError,
                     match=r'tables\.tfrecord: damaged: the length'):
    rc.check(path)
  os.unlink(tables)
  with pytest.raises(rc.ReplayCheckpointError,
                     match=r'tables\.tfrecord: missing'):
    rc.check(path)
