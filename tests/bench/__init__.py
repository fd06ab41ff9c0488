"""Tests of the scripts under bench/."""

import importlib.util
import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def load_script(name: str):
  """bench/<name>.py as a module (bench/ is a folder of scripts, not a
  package)."""
  path = os.path.join(REPO_ROOT, 'bench', f'{name}.py')
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
