"""Tests of the scripts under bench/."""

import importlib.util
import os

from tests import REPO_ROOT


def load_script(name: str):
  """bench/<name>.py as a module (bench/ is a folder of scripts, not a
  package)."""
  path = os.path.join(REPO_ROOT, 'bench', f'{name}.py')
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
