"""Tests of the scripts under bench/."""

import importlib.util
import os
import sys

from tests import REPO_ROOT


def load_script(name: str):
  """bench/<name>.py as a module (bench/ is a folder of scripts, not a
  package)."""
  bench = os.path.join(REPO_ROOT, 'bench')
  if bench not in sys.path:  # the scripts' own helpers (_checkout, _timing)
    sys.path.insert(0, bench)
  path = os.path.join(bench, f'{name}.py')
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
