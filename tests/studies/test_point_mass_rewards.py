"""studies/point_mass_rewards.py on a checkpoint written by hand (no
training): the grid's orientation (rows y, columns x), the policy's
episodes, and the refusal of a run on another task."""

import json
import os

import numpy as np
import pytest

from tandem.agents.ail import learner as ail_learner
from tandem.agents.core import checkpointing
from tandem.configs import ail as ail_configs
from tandem.launch import ail as launch_ail
from tandem.launch import config as config_lib
from tests import REPO_ROOT, load_script

tool = load_script('studies', 'point_mass_rewards')
Refusal = tool.harness.Refusal
DEMOS = os.path.join(REPO_ROOT, 'tests', 'data', 'point_mass_easy_expert.npz')


def _run_dir(tmp_path, env='point_mass:easy'):
  tc = config_lib.apply_overrides(ail_configs.tiny(), {'env': env})
  run = tmp_path / env.replace(':', '_')
  (run / 'checkpoints' / 'learner').mkdir(parents=True)
  with open(run / 'config.json', 'w') as f:
    json.dump(config_lib.to_dict(tc), f)
  checkpointing.save_numbered(
      str(run / 'checkpoints' / 'learner'), 7,
      ail_learner.to_numpy(launch_ail.learner_template(tc)),
      {'counts': {'env_steps': 1234}})
  return str(run), tc


def test_the_grid_is_rows_of_y_and_columns_of_x(tmp_path):
  run, tc = _run_dir(tmp_path)
  r = tool.diagnose(run, None, DEMOS, grid=3, episodes=1, seed=0)
  assert r['env_steps'] == 1234 and r['axis'] == [-0.3, 0.0, 0.3]
  grid = np.asarray(r['reward_at_rest'])
  assert grid.shape == (3, 3) and np.all(np.isfinite(grid))
  state = ail_learner.restore(
      checkpointing.latest(os.path.join(run, 'checkpoints', 'learner')),
      launch_ail.learner_template(tc))
  policy = launch_ail.policy_of(tc, state)
  corner = tool._rewards(tc, state, policy,  # noqa: SLF001
                         tool.at_rest(np.array([[-0.3, 0.3]]), 2))
  assert grid[2, 0] == pytest.approx(float(corner[0]), rel=1e-5)
  assert grid[0, 2] != pytest.approx(grid[2, 0], rel=1e-6)
  # One mean-action episode, ending inside the arena.
  (x, y), = r['agent_ends']
  assert abs(x) <= 0.31 and abs(y) <= 0.31 and r['agent_return'] >= 0
  table = tool.markdown(r)
  assert table.count('\n| ') == 3 and 'ending at (' in table  # y rows


def test_refuses_a_run_on_another_task(tmp_path):
  run, _ = _run_dir(tmp_path, env='cartpole:swingup')
  with pytest.raises(Refusal, match="env is 'cartpole:swingup'"):
    tool.diagnose(run, None, DEMOS, grid=3, episodes=1, seed=0)
