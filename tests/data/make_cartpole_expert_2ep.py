"""Writes cartpole_swingup_expert_2ep.npz beside this script: the first two
episodes (2,000 transitions) of the shared expert file
(../shared/demos/cartpole_swingup_expert.npz, scripted controller,
dm_control cartpole:swingup), in the same per-key layout, so the tests that
read an expert file run where that folder is absent.

  python tests/data/make_cartpole_expert_2ep.py [SOURCE.npz]
"""

import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, '..', '..', '..', 'shared', 'demos',
                      'cartpole_swingup_expert.npz')
EPISODES = 2


def main(source: str = SOURCE) -> str:
  with np.load(source) as raw:
    arrays = {name: raw[name] for name in raw.files}
  keep = np.isin(arrays['episode_index'],
                 np.unique(arrays['episode_index'])[:EPISODES])
  rows = len(keep)
  out = {name: (a[keep] if len(a) == rows else a[:EPISODES])
         for name, a in arrays.items()}
  path = os.path.join(HERE, 'cartpole_swingup_expert_2ep.npz')
  np.savez_compressed(path, **out)
  return path


if __name__ == '__main__':
  print(main(*sys.argv[1:]))
