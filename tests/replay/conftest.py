"""Fixtures of the replay tests: a Reverb table and a real checkpoint."""

import numpy as np
import pytest
import reverb


def make_table():
  return reverb.Table('t', reverb.selectors.Uniform(),
                      reverb.selectors.Fifo(), max_size=100,
                      rate_limiter=reverb.rate_limiters.MinSize(1))


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
  """A real checkpoint from a Reverb server holding 50 items."""
  root = str(tmp_path_factory.mktemp('replay'))
  server = reverb.Server([make_table()], checkpointer=(
      reverb.checkpointers.DefaultCheckpointer(root)))
  client = reverb.Client(f'localhost:{server.port}')
  for i in range(50):
    client.insert(np.full(8, i, np.float32), {'t': 1.0})
  path = client.checkpoint()
  server.stop()
  return root, path
