"""The replay server's start on a checkpoint (agents/nodes/replay_node.py)."""

import os
import shutil

import pytest
import reverb

from tandem.agents.nodes import replay_node
from tests.replay.conftest import make_table


def _items(server):
  client = reverb.Client(f'localhost:{server.port}')
  return client.server_info()['t'].current_size


def test_a_sound_checkpoint_is_restored(checkpoint, tmp_path):
  root = str(tmp_path / 'replay')
  shutil.copytree(checkpoint[0], root)
  server = replay_node.start_server([make_table()], None, root)
  try:
    assert _items(server) == 50
  finally:
    server.stop()


def test_a_record_damaged_inside_names_the_checkpoint_and_the_way_out(
    checkpoint, tmp_path):
  # Framing intact, data not: only Reverb's own load finds it.
  root = str(tmp_path / 'replay')
  shutil.copytree(checkpoint[0], root)
  path = os.path.join(root, os.path.basename(checkpoint[1]))
  chunks = os.path.join(path, 'chunks.tfrecord')
  with open(chunks, 'r+b') as f:
    f.seek(20)  # past the first record's 12-byte header: its data
    byte = f.read(1)
    f.seek(20)
    f.write(bytes([byte[0] ^ 0xFF]))
  with pytest.raises(replay_node.ReplayCheckpointLoadError) as err:
    replay_node.start_server([make_table()], None, root)
  assert path in str(err.value) and '--drop_replay' in str(err.value)
  assert isinstance(err.value.__cause__, RuntimeError)


def test_without_a_checkpoint_an_error_passes_unchanged(tmp_path,
                                                       monkeypatch):
  def fail(**_):
    raise RuntimeError('no port')
  monkeypatch.setattr(reverb, 'Server', fail)
  with pytest.raises(RuntimeError, match='^no port$'):
    replay_node.start_server([], None, str(tmp_path / 'empty'))
  with pytest.raises(RuntimeError, match='^no port$'):
    replay_node.start_server([], None, None)
