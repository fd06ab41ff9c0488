"""Checkpoints of pytrees as .npz files, without pickle.

Each leaf is stored under its tree path (e.g. "policy['torso']['dense'][0]['w']")
with its dtype and shape; restoring fills a template pytree of the same
structure and checks every name, shape and dtype, so a checkpoint from another
config fails loudly instead of loading garbage. Files are written to a
temporary name and renamed, so a crash mid-write never damages the previous
checkpoint.
"""

from __future__ import annotations

import json
import os
import re
import zipfile
from typing import Any, Optional

import jax
import numpy as np

from tandem.agents.core import files
from tandem.agents.core import npz

_META_KEY = '__metadata__'
_FORMAT = 'tandem-pytree-v1'
# Counts, a config hash and the like: a few kB.
_MAX_METADATA_BYTES = 2**20


class CheckpointError(ValueError):
  """A checkpoint file is missing, unreadable, or does not fit the template."""


def _named_leaves(tree) -> list[tuple[str, Any]]:
  flat, _ = jax.tree_util.tree_flatten_with_path(tree)
  return [(jax.tree_util.keystr(path), leaf) for path, leaf in flat]


def save_tree(path: str, tree, metadata: Optional[dict] = None) -> None:
  """Atomically writes `tree` (and JSON-able `metadata`) to `path` (.npz)."""
  arrays = {}
  for name, leaf in _named_leaves(tree):
    arrays[name] = np.asarray(leaf)
  meta = dict(metadata or {}, format=_FORMAT)
  arrays[_META_KEY] = np.asarray(json.dumps(meta, sort_keys=True))
  files.write_atomic(path, lambda f: np.savez(f, **arrays))


def _open(path: str):
  if not os.path.exists(path):
    raise CheckpointError(f'checkpoint {path}: no such file')
  try:
    data = np.load(path, allow_pickle=False)
    names = set(data.files)
  except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
    raise CheckpointError(
        f'checkpoint {path}: not a readable .npz checkpoint ({e})') from e
  if _META_KEY not in names:
    data.close()
    raise CheckpointError(f'checkpoint {path}: no {_META_KEY} entry; not a '
                          'Tandem checkpoint')
  return data


def _metadata(path: str, data) -> dict:
  try:
    npz.header(data, _META_KEY, limit=_MAX_METADATA_BYTES)
    meta = json.loads(str(data[_META_KEY]))
  except (ValueError, RecursionError, zipfile.BadZipFile, OSError) as e:
    raise CheckpointError(f'checkpoint {path}: corrupt metadata ({e})') from e
  if not isinstance(meta, dict) or meta.get('format') != _FORMAT:
    found = meta.get('format') if isinstance(meta, dict) else meta
    raise CheckpointError(f'checkpoint {path}: format {found!r}, '
                          f'expected {_FORMAT!r}')
  return meta


def read_metadata(path: str) -> dict:
  with _open(path) as data:
    return _metadata(path, data)


def restore_tree(path: str, template):
  """Returns a tree shaped like `template` holding the arrays in `path`."""
  return restore_with_metadata(path, template)[0]


def restore_with_metadata(path: str, template) -> tuple[Any, dict]:
  """(tree shaped like `template`, metadata) from one opening of `path`, so
  the two cannot come from different files."""
  with _open(path) as data:
    meta = _metadata(path, data)
    return _fill(path, data, template), meta


def _fill(path: str, data, template):
  named = _named_leaves(template)
  stored = set(data.files) - {_META_KEY}
  wanted = {name for name, _ in named}
  if stored != wanted:
    missing = sorted(wanted - stored)[:5]
    extra = sorted(stored - wanted)[:5]
    raise CheckpointError(
        f'checkpoint {path}: does not match this configuration; missing '
        f'{missing}, unexpected {extra}')
  leaves = []
  for name, leaf in named:
    ref = np.asarray(leaf)
    # The header first: an entry of another shape is refused before its
    # data is decompressed or allocated.
    try:
      declared = npz.header(data, name)
    except npz.BadMember as e:
      raise CheckpointError(f'checkpoint {path}: entry {name}: {e}') from e
    if declared.shape != ref.shape or declared.dtype != ref.dtype:
      raise CheckpointError(
          f'checkpoint {path}: entry {name} has {declared.describe()}, '
          f'expected {ref.shape} {ref.dtype}')
    try:
      value = data[name]
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
      raise CheckpointError(f'checkpoint {path}: entry {name} is corrupt '
                            f'({e})') from e
    leaves.append(value)
  treedef = jax.tree_util.tree_structure(template)
  return jax.tree_util.tree_unflatten(treedef, leaves)


def non_finite_entries(tree) -> list[str]:
  """The names of `tree`'s floating-point leaves that hold a NaN or an
  infinity. A learner skips any update that would produce one, so a
  checkpoint holding one was damaged or written by something else."""
  return [name for name, leaf in _named_leaves(tree)
          if np.issubdtype(np.asarray(leaf).dtype, np.floating)
          and not np.all(np.isfinite(leaf))]


# --------------------------------------------------------------------------
# A directory of numbered checkpoints.

_NUMBERED = re.compile(r'^ckpt-(\d{12})\.npz$')


def numbered_path(directory: str, step: int) -> str:
  return os.path.join(directory, f'ckpt-{step:012d}.npz')


def list_checkpoints(directory: str) -> list[str]:
  if not os.path.isdir(directory):
    return []
  found = sorted((int(m.group(1)), name) for name in os.listdir(directory)
                 if (m := _NUMBERED.match(name)))
  return [os.path.join(directory, name) for _, name in found]


def latest(directory: str) -> Optional[str]:
  found = list_checkpoints(directory)
  return found[-1] if found else None


def save_numbered(directory: str, step: int, tree,
                  metadata: Optional[dict] = None, keep: int = 3) -> str:
  """Writes ckpt-<step>.npz and then removes all but the newest `keep`."""
  path = numbered_path(directory, step)
  save_tree(path, tree, metadata)
  for old in list_checkpoints(directory)[:-keep]:
    os.unlink(old)
  return path
