"""Pytree checkpoints as .npz files (agents/core/checkpointing.py)."""

import json
import os

import numpy as np
import pytest

from tandem.agents.core import checkpointing

TREE = {'w': np.arange(6, dtype=np.float32).reshape(2, 3),
        'b': [np.zeros(3, np.float32), np.int32(7)]}


def _open_fds_on(path):
  real = os.path.realpath(path)
  fds = []
  for fd in os.listdir('/proc/self/fd'):
    try:
      if os.path.realpath(os.readlink(f'/proc/self/fd/{fd}')) == real:
        fds.append(fd)
    except OSError:
      pass
  return fds


def test_restore_with_metadata_gives_the_tree_and_metadata_of_one_file(
    tmp_path):
  path = str(tmp_path / 'c.npz')
  checkpointing.save_tree(path, TREE, metadata={'counts': {'env_steps': 5}})
  template = {'w': np.zeros((2, 3), np.float32),
              'b': [np.ones(3, np.float32), np.int32(0)]}
  tree, meta = checkpointing.restore_with_metadata(path, template)
  np.testing.assert_array_equal(tree['w'], TREE['w'])
  assert int(tree['b'][1]) == 7
  assert meta['counts'] == {'env_steps': 5}
  assert meta == checkpointing.read_metadata(path)
  assert _open_fds_on(path) == []


def test_metadata_that_is_not_an_object_is_a_checkpoint_error(tmp_path):
  # Valid JSON of the wrong kind is a CheckpointError, not an AttributeError.
  path = str(tmp_path / 'list.npz')
  np.savez(path, __metadata__=np.asarray(json.dumps([1, 2])),
           w=np.zeros(1))
  with pytest.raises(checkpointing.CheckpointError,
                     match=r'list\.npz: format \[1, 2\], expected'):
    checkpointing.read_metadata(path)
  with pytest.raises(checkpointing.CheckpointError, match='list.npz'):
    checkpointing.restore_tree(path, {'w': np.zeros(1)})


def test_a_refused_file_is_not_left_open(tmp_path):
  path = str(tmp_path / 'foreign.npz')
  np.savez(path, w=np.zeros(1))
  with pytest.raises(checkpointing.CheckpointError,
                     match='no __metadata__ entry') as err:
    checkpointing.read_metadata(path)
  # The traceback pytest keeps holds every frame's locals.
  assert err.value is not None
  assert _open_fds_on(path) == []


def test_an_entry_claiming_a_trillion_elements_is_refused_by_its_header(
    tmp_path):
  import io
  import tracemalloc
  import zipfile
  template = {'w': np.zeros((3, 2), np.float32), 'b': np.zeros(2, np.float32)}
  path = str(tmp_path / 'ckpt.npz')
  checkpointing.save_tree(path, {'w': template['w']})  # 'b' added below
  header = io.BytesIO()
  np.lib.format.write_array_header_1_0(
      header, {'descr': '<f4', 'fortran_order': False, 'shape': (10**12,)})
  with zipfile.ZipFile(path, 'a', zipfile.ZIP_DEFLATED) as z:
    z.writestr("['b'].npy", header.getvalue() + bytes(64))
  tracemalloc.start()
  try:
    with pytest.raises(checkpointing.CheckpointError,
                       match=r"entry \['b'\].*bytes allowed"):
      checkpointing.restore_tree(path, template)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert peak < 20 * 2**20, peak
  # Within the cap but not the template's shape: refused by the header too.
  checkpointing.save_tree(path, {'w': np.zeros((3, 2), np.float32),
                                 'b': np.zeros(1_000_000, np.float32)})
  with pytest.raises(checkpointing.CheckpointError,
                     match=r"entry \['b'\] has shape \(1000000,\)"):
    checkpointing.restore_tree(path, template)
