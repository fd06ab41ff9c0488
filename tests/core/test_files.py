"""Atomic writes: a failed write leaves the old file and no temporary."""

import json
import os

import pytest

from tandem.agents.core import files


def test_a_write_that_fails_midway_keeps_the_old_file(tmp_path):
  path = tmp_path / 'state.bin'
  path.write_bytes(b'old')

  def half_then_fail(f):
    f.write(b'new but cut')
    raise RuntimeError('crashed mid-write')
  with pytest.raises(RuntimeError, match='mid-write'):
    files.write_atomic(str(path), half_then_fail)
  assert path.read_bytes() == b'old'
  assert os.listdir(tmp_path) == ['state.bin']
  files.write_atomic(str(path), lambda f: f.write(b'new'))
  assert path.read_bytes() == b'new'
  assert os.listdir(tmp_path) == ['state.bin']


def test_an_unserialisable_object_never_reaches_the_disk(tmp_path,
                                                         monkeypatch):
  path = tmp_path / 'x.json'
  path.write_text('{"a": 1}')
  opened = []
  real_mkstemp = files.tempfile.mkstemp
  monkeypatch.setattr(files.tempfile, 'mkstemp',
                      lambda **kw: opened.append(kw) or real_mkstemp(**kw))
  with pytest.raises(TypeError):
    files.write_json_atomic(str(path), {'x': object()})
  assert opened == []  # serialised before any file was made
  assert json.loads(path.read_text()) == {'a': 1}
  files.write_json_atomic(str(path), {'b': 2})
  assert len(opened) == 1 and json.loads(path.read_text()) == {'b': 2}
