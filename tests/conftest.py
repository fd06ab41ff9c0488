"""Shared pytest setup."""

import os

from absl import flags

# absl-based libraries (Launchpad's test launchers, absltest) read flags;
# pytest never parses them, so take the defaults.
if not flags.FLAGS.is_parsed():
  flags.FLAGS.mark_as_parsed()

os.environ.setdefault('MUJOCO_GL', 'disable')
