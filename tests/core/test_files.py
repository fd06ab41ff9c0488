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


def _digest(path):
  import hashlib
  with open(path, 'rb') as f:
    return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.parametrize('mode', ['w', 'a', 'wb', 'ab'])
def test_open_to_write_refuses_a_link_and_leaves_its_target(tmp_path, mode):
  target = tmp_path / 'precious.txt'
  target.write_text('keep me\n')
  before = _digest(target)
  link = tmp_path / 'run.csv'
  link.symlink_to(target)
  with pytest.raises(files.NotARegularFile, match='run.csv.*symbolic link'):
    files.open_to_write(str(link), mode)
  assert _digest(target) == before
  # A dangling link is not followed either: nothing is created at its target.
  dangling = tmp_path / 'dangling.csv'
  dangling.symlink_to(tmp_path / 'nowhere.txt')
  with pytest.raises(files.NotARegularFile):
    files.open_to_write(str(dangling), mode)
  assert not (tmp_path / 'nowhere.txt').exists()


def test_open_to_write_refuses_what_is_not_a_regular_file(tmp_path):
  fifo = tmp_path / 'fifo'
  os.mkfifo(fifo)
  with pytest.raises(OSError):  # no reader: refused at once, never blocks
    files.open_to_write(str(fifo), 'a')
  reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
  try:
    with pytest.raises(files.NotARegularFile, match='not a regular file'):
      files.open_to_write(str(fifo), 'a')
  finally:
    os.close(reader)
  with pytest.raises(IsADirectoryError):
    files.open_to_write(str(tmp_path), 'a')


def test_open_to_write_appends_truncates_and_follows_the_umask(tmp_path):
  path = str(tmp_path / 'log.csv')
  old = os.umask(0o027)
  try:
    with files.open_to_write(path, 'w') as f:
      f.write('a\n')
  finally:
    os.umask(old)
  assert os.stat(path).st_mode & 0o777 == 0o640
  with files.open_to_write(path, 'a') as f:
    f.write('b\n')
  assert open(path).read() == 'a\nb\n'
  with files.open_to_write(path, 'w') as f:
    f.write('c\n')
  assert open(path).read() == 'c\n'


def test_atomic_writes_get_the_mode_open_would_give(tmp_path):
  path = str(tmp_path / 'state.json')
  old = os.umask(0o027)
  try:
    files.write_json_atomic(path, {'a': 1})
  finally:
    os.umask(old)
  assert os.stat(path).st_mode & 0o777 == 0o640
  files.write_json_atomic(path, {'a': 2})
  assert os.stat(path).st_mode & 0o777 == 0o666 & ~old
