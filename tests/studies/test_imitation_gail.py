"""studies/imitation_gail.py's parts that run without the imitation library
(it lives in .venv-imitation): the demonstrations as the library's
trajectories see them, the figures of a curve, the summary line and the
refusals."""

import json
import os

import numpy as np
import pytest

from tests import REPO_ROOT, load_script

tool = load_script('studies', 'imitation_gail')
DEMOS = os.path.join(REPO_ROOT, 'tests', 'data', 'point_mass_easy_expert.npz')


def test_episodes_are_the_files_transitions_in_the_tasks_order():
  from dm_control import suite
  eps = tool.episodes(DEMOS)
  with np.load(DEMOS) as d:
    position, velocity = d['observations_position'], d['observations_velocity']
    last = np.concatenate([d['next_observations_position'][999],
                           d['next_observations_velocity'][999]])
    actions = d['actions']
  assert len(eps) == 10
  obs, acts = eps[0]
  assert obs.shape == (1001, 4) and acts.shape == (1000, 2)
  np.testing.assert_array_equal(obs[:1000, :2], position[:1000])
  np.testing.assert_array_equal(obs[:1000, 2:], velocity[:1000])
  np.testing.assert_array_equal(obs[1000], last)
  np.testing.assert_array_equal(eps[1][1], actions[1000:2000])
  # The environment flattens dm_control's observation in its own order,
  # which must be the file's for the demonstrations to mean anything.
  order = list(suite.load('point_mass', 'easy').observation_spec())
  with np.load(DEMOS) as d:
    assert tool.observation_keys(d.files) == order


def test_the_dm_control_environment_flattens_as_the_file_does():
  pytest.importorskip('gymnasium')
  env = tool.make_env_class()('point_mass', 'easy', seed=3)
  obs, _ = env.reset()
  assert obs.shape == (4,) and obs.dtype == np.float32
  steps, done = 0, False
  while not done:
    obs, reward, terminated, truncated, _ = env.step(np.array([5.0, -5.0]))
    steps += 1
    done = terminated or truncated
  assert steps == 1000 and truncated and not terminated


def test_figures_and_summary_of_hand_made_curves():
  expert = 1000.0
  rise = [{'env_steps': s, 'elapsed_s': s / 100, 'eval_return': r}
          for s, r in ((16384, 100.0), (32768, 600.0), (49152, 950.0),
                       (65536, 700.0))]
  fig = tool.figures(rise, expert)
  assert fig['env_steps_to_50pct'] == 32768
  assert fig['env_steps_to_90pct'] == 49152
  assert fig['final_return'] == 700.0 and fig['max_return'] == 950.0
  assert fig['held'] is False  # 700 < 0.95 * 950
  flat = tool.figures([{'env_steps': 16384, 'elapsed_s': 1.0,
                        'eval_return': 0.0}], expert)
  held = tool.figures(rise[:3], expert)
  out = tool.summary([fig, flat, held], 'point_mass:easy')
  assert out['gail.seeds_reaching_50pct'] == '2/3'
  assert out['gail.env_steps_to_50pct_median'] == 32768
  assert out['gail.seeds_reaching_90pct'] == '2/3'
  assert out['gail.env_steps_to_90pct_median'] == 49152
  # Only the run that reached 90% and stayed there counts: not the one that
  # fell, nor the one that never rose.
  assert out['gail.seeds_reaching_90pct_and_holding'] == '1/3'
  assert out['gail.final_return_median'] == 700.0
  assert tool.summary([flat, flat], 'x:y')[
      'gail.env_steps_to_50pct_median'] is None


def test_summary_reads_records(tmp_path, capsys):
  records = tmp_path / 'records'
  records.mkdir()
  curve = [{'env_steps': 16384, 'elapsed_s': 9.0, 'eval_return': 700.0}]
  (records / 'gail_s1.json').write_text(json.dumps({'curve': curve}))
  assert tool.main(['summary', '--demos', DEMOS, '--task', 'point_mass:easy',
                    '--seeds', '0,1', '--records_dir', str(records)]) == 0
  out = capsys.readouterr()
  assert 'seed 0: no record' in out.err
  line = json.loads(out.out.strip().splitlines()[-1])
  # 700 of the file's 886.6: past 50% (443), short of 90% (798).
  assert line['gail.seeds_reaching_50pct'] == '1/1'
  assert line['gail.seeds_reaching_90pct'] == '0/1'


@pytest.mark.parametrize('argv, expected', [
    (['--task', 'point_mass'], 'DOMAIN:TASK'),
    (['--seeds', 'a,b'], 'seeds such as'),
])
def test_bad_arguments_exit_2_naming_them(argv, expected, capsys):
  with pytest.raises(SystemExit) as e:
    tool.main(['summary', '--demos', DEMOS, '--task', 'point_mass:easy']
              + argv)
  assert e.value.code == 2 and expected in capsys.readouterr().err


def test_a_missing_demonstration_file_is_named(tmp_path):
  with pytest.raises(tool.Refusal, match='no such file'):
    tool.main(['summary', '--demos', str(tmp_path / 'none.npz'), '--task',
               'point_mass:easy'])
