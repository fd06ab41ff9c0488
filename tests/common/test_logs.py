"""Log rows carry global counts and survive a resume."""

import pytest

from agents.common import logs


def test_rows_need_global_counts_and_append_on_resume(tmp_path):
  lg = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  with pytest.raises(ValueError, match='env_steps'):
    lg.write({'learner_steps': 1, 'loss': 0.5})
  lg.write({'env_steps': 10, 'learner_steps': 1, 'loss': 0.5})
  again = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  again.write({'env_steps': 20, 'learner_steps': 2, 'loss': 0.25})
  rows = logs.read_csv(lg.path)
  assert [r['env_steps'] for r in rows] == [10, 20]
  assert [r['loss'] for r in rows] == [0.5, 0.25]
