"""Tandem's tests; they mirror the modules they test."""

import os

# The repository's root, for tests that start processes there or read files
# beside the code.
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(folder: str, name: str):
  """<folder>/<name>.py of the checkout (bench/, studies/: folders of scripts,
  not packages) as a module; the folder joins sys.path for the scripts' own
  helpers (_checkout, _timing, harness)."""
  import importlib.util
  import sys
  where = os.path.join(REPO_ROOT, folder)
  if where not in sys.path:
    sys.path.insert(0, where)
  spec = importlib.util.spec_from_file_location(
      name, os.path.join(where, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  # Registered before it runs, as an import would: dataclasses look their
  # module up by name.
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def no_gl(why) -> None:
  """Skips a test that needs an OpenGL back end where none works, but fails
  it in CI (CI=true): there the render tests must run, not pass by being
  skipped."""
  import pytest
  message = f'nothing renders on this machine: {why}'
  if os.environ.get('CI', '').lower() in ('true', '1'):  # CI runs set CI=true
    pytest.fail(message + ' (CI: install libegl1 libgl1-mesa-dri or '
                'libosmesa6)')
  pytest.skip(message)
