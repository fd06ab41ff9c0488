"""Binds the package `tandem` to this checkout's folders, installed or not.

Benchmarks run from a checkout: on accelerator images that have jax and optax
but no install of Tandem, and side by side from two checkouts, where each must
measure its own code rather than whichever one `pip install -e` last saw.
Import it before any `tandem` module; a process that already imported
`tandem` (a test run) keeps the one it has.
"""

import os
import sys
import types

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if 'tandem' not in sys.modules:
  _package = types.ModuleType('tandem')
  _package.__path__ = [REPO_ROOT]  # tandem.agents -> <checkout>/agents, ...
  sys.modules['tandem'] = _package
