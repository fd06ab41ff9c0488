"""studies/airl_diagnostics.py on a checkpoint written by hand (no training):
it reads the run's config, its latest checkpoint and counts, and measures
the drift it exists to show (a policy mean beyond the box)."""

import json
import os
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from tandem.agents.ail import learner as ail_learner
from tandem.agents.core import checkpointing
from tandem.configs import ail as ail_configs
from tandem.launch import ail as launch_ail
from tandem.launch import config as config_lib
from tests import REPO_ROOT, load_script
from tests.integration import demo_data

tool = load_script('studies', 'airl_diagnostics')
Refusal = tool.harness.Refusal


@pytest.fixture(scope='module')
def demos(tmp_path_factory):
  return demo_data.write_cartpole_demos(
      str(tmp_path_factory.mktemp('demos') / 'demos.npz'), episodes=1)


def _run_dir(tmp_path, *, mean_bias, kind='airl', policy_mean='linear'):
  tc = config_lib.apply_overrides(ail_configs.tiny(), {
      'ail.kind': kind, 'ail.reward': 'f' if kind == 'airl' else 'logit',
      'mpo.policy_mean': policy_mean})
  run = tmp_path / f'{kind}_{policy_mean}'
  (run / 'checkpoints' / 'learner').mkdir(parents=True)
  with open(run / 'config.json', 'w') as f:
    json.dump(config_lib.to_dict(tc), f)
  state = launch_ail.learner_template(tc)
  policy = state.generator.policy
  policy = dict(policy, mean=dict(
      policy['mean'], b=jnp.full_like(policy['mean']['b'], mean_bias)))
  state = state._replace(generator=state.generator._replace(policy=policy))
  checkpointing.save_numbered(
      str(run / 'checkpoints' / 'learner'), 7, ail_learner.to_numpy(state),
      {'counts': {'env_steps': 1234}})
  return str(run)


def test_reports_the_latest_checkpoint_and_its_counts(tmp_path, demos):
  r = tool.diagnose(_run_dir(tmp_path, mean_bias=0.0), None, demos,
                    episodes=1, seed=0)
  assert r['env_steps'] == 1234
  assert r['checkpoint'] == os.path.basename(
      checkpointing.numbered_path('x', 7))
  for k in ('log_pi_expert', 'log_pi_agent', 'f_expert', 'f_agent',
            'd_expert', 'd_agent', 'mean_abs_mu', 'agent_return'):
    assert np.isfinite(r[k]), k
  assert r['mean_abs_mu'] < 0.1  # the initial policy's mean is near 0
  assert r['beyond_box_expert'] == r['beyond_box_agent'] == 0.0
  assert 0.0 <= r['at_edge_expert'] < 1.0
  assert tool.markdown_row(r).startswith('| airl_linear, 1234 |')


def test_shows_a_mean_beyond_the_box_and_the_log_pi_gap_it_opens(
    tmp_path, demos):
  r = tool.diagnose(_run_dir(tmp_path, mean_bias=3.0), None, demos,
                    episodes=1, seed=0)
  assert r['mean_abs_mu'] == pytest.approx(3.0, abs=0.05)
  # Its own actions sit on the edge, nearly certain under the clipped
  # Gaussian; the demonstrations' interior actions are many nats rarer.
  assert r['log_pi_agent'] - r['log_pi_expert'] > 5.0
  # Every entry of its mean is beyond the box, and nearly every sample it
  # acts with is clipped onto the edge (N(3, σ) falls below 1 rarely).
  assert r['beyond_box_expert'] == r['beyond_box_agent'] == 1.0
  assert r['at_edge_agent'] > 0.9
  assert r['at_edge_expert'] < r['at_edge_agent']
  squashed = tool.diagnose(
      _run_dir(tmp_path, mean_bias=3.0, policy_mean='tanh'), None, demos,
      episodes=1, seed=0)
  assert squashed['mean_abs_mu'] == pytest.approx(np.tanh(3.0), abs=0.01)


def test_refuses_a_gail_run(tmp_path, demos):
  with pytest.raises(Refusal, match="ail.kind is 'gail'"):
    tool.diagnose(_run_dir(tmp_path, mean_bias=0.0, kind='gail'), None,
                  demos, episodes=1, seed=0)


def test_reads_the_demonstrations_the_run_trained_on(tmp_path, demos):
  run = _run_dir(tmp_path, mean_bias=0.0)
  with pytest.raises(Refusal, match='demos.json names no demonstrations'):
    tool.diagnose(run, None, None, episodes=1, seed=0)
  with open(os.path.join(run, 'demos.json'), 'w') as f:
    json.dump({'path': str(tmp_path / 'moved.npz')}, f)
  with pytest.raises(Refusal, match='moved.npz, are not here'):
    tool.diagnose(run, None, None, episodes=1, seed=0)
  with open(os.path.join(run, 'demos.json'), 'w') as f:
    json.dump({'path': demos}, f)
  assert (tool.diagnose(run, None, None, episodes=1, seed=0)['log_pi_expert']
          == tool.diagnose(run, None, demos, episodes=1, seed=0)[
              'log_pi_expert'])


def test_names_demonstrations_of_another_task(tmp_path):
  # A cartpole run diagnosed against point_mass's file: a named refusal, not a
  # traceback.
  other = str(tmp_path / 'point_mass.npz')
  demo_data.write_demos(other, 'point_mass:easy', episodes=1)
  with pytest.raises(Refusal, match='point_mass.npz'):
    tool.diagnose(_run_dir(tmp_path, mean_bias=0.0), None, other,
                  episodes=1, seed=0)


def test_a_directory_that_is_no_run_exits_2_naming_it(tmp_path, demos):
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, 'studies',
                                    'airl_diagnostics.py'), str(tmp_path)],
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2, proc.stderr[-2000:]
  assert proc.stderr == (f'{tmp_path}: no readable config.json; expected '
                         'the directory of a `tandem train-ail` run\n')
  with pytest.raises(Refusal, match='--checkpoint .*ckpt.npz: no such file'):
    tool.diagnose(_run_dir(tmp_path, mean_bias=0.0),
                  str(tmp_path / 'ckpt.npz'), demos, episodes=1, seed=0)
