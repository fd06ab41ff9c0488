"""Hard kills, then resume: one node SIGKILLed, then a resume that restores
the learner's newest checkpoint exactly (the default run); and (slow, `make
test-slow`) the whole program SIGKILLed at a random moment, after which the
resumed run's counts and logs continue from the learner checkpoint without
going back or double counting."""

import json
import os
import random
import signal
import time

import pytest

from tandem.agents.core import checkpointing
from tandem.agents.runtime import logs
from tests.integration.conftest import (interrupt_after_learner_steps,
                                        processes_mentioning, run_tandem,
                                        start_tandem, wait_for_learner_steps)
from tests.integration.demo_data import write_cartpole_demos

TINY = ['train', '--config', 'configs/mpo.py:tiny', '--launch', 'local_mp']


def _kill_everything(proc, run_dir):
  proc.send_signal(signal.SIGKILL)
  for pid in processes_mentioning(run_dir):
    try:
      os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
      pass
  proc.wait()
  deadline = time.time() + 30
  while processes_mentioning(run_dir) and time.time() < deadline:
    time.sleep(0.2)


def _monotone(run_dir):
  for name in os.listdir(os.path.join(run_dir, 'logs')):
    if not name.endswith('.csv'):
      continue
    rows = logs.read_csv(os.path.join(run_dir, 'logs', name))
    for key in ('env_steps', 'elapsed_s'):
      values = [r[key] for r in rows]
      assert values == sorted(values), f'{name}: {key} go back'
    if name == 'learner.csv':
      steps = [r['learner_steps'] for r in rows]
      assert all(b > a for a, b in zip(steps, steps[1:])), \
          f'{name}: learner_steps not strictly increasing'


def _kill_then_resume(runs_root, name, launch, command, seed):
  """Starts `launch`, SIGKILLs the whole program at a random moment after
  60-300 learner steps, resumes it with `command` for 1500 more env steps
  and checks that every log continues from the checkpoint. Returns the run
  directory and the checkpoint's counts."""
  rng = random.Random(seed)
  run_dir = os.path.join(runs_root, name)
  # Periodic checkpoints every 2 s: the kill lands between two of them.
  proc = start_tandem(launch + ['--runs_root', runs_root, '--name', name,
                                '--env_step_budget=10000000',
                                '--checkpoint_period_s=2'], capture=False)
  # Fails naming the count reached if the program exits or stalls first.
  wait_for_learner_steps(run_dir, rng.randint(60, 300), timeout=180,
                         proc=proc)
  time.sleep(rng.uniform(0, 2))
  _kill_everything(proc, run_dir)
  assert processes_mentioning(run_dir) == []

  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None, 'no checkpoint before the kill'
  saved = checkpointing.read_metadata(latest)['counts']
  budget = saved['env_steps'] + 1500
  r = run_tandem([command, '--resume', run_dir, '--launch', 'local_mp',
                  f'--env_step_budget={budget}'])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  _monotone(run_dir)
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  resumed = [x for x in rows if x['learner_steps'] > saved['learner_steps']]
  # The first resumed update follows the restored step directly: the
  # counter's learner_steps was the checkpoint's, not counter.json's.
  assert resumed and resumed[0]['learner_steps'] == \
      saved['learner_steps'] + 1
  # Env steps continue from the checkpoint's count.
  assert min(x['env_steps'] for x in resumed) >= saved['env_steps']
  final = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  assert final['env_steps'] >= budget
  return run_dir, saved


def test_a_killed_learner_fails_the_run_and_a_resume_restores_it_exactly(
    runs_root):
  import numpy as np
  from tandem.agents.runtime import supervision
  run_dir = os.path.join(runs_root, 'nodekill')
  checkpoints = os.path.join(run_dir, 'checkpoints', 'learner')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'nodekill',
                              '--env_step_budget=10000000',
                              '--checkpoint_period_s=1'])
  wait_for_learner_steps(run_dir, 60, timeout=180, proc=proc)

  def checkpointed_steps():
    latest = checkpointing.latest(checkpoints)
    return latest and checkpointing.read_metadata(latest)['counts'].get(
        'learner_steps', 0)
  deadline = time.time() + 60  # a periodic checkpoint past those steps
  while (checkpointed_steps() or 0) < 60 and time.time() < deadline:
    time.sleep(0.2)
  assert checkpointed_steps() >= 60, checkpointed_steps()
  learner = [p for p in supervision.program_processes(run_dir)
             if supervision._node_name(p) == 'learner']
  assert len(learner) == 1, learner
  os.kill(learner[0], signal.SIGKILL)
  out, err = proc.communicate(timeout=180)
  assert proc.returncode == 1, out[-2000:] + err[-2000:]
  assert 'first node process to end was learner' in err, err[-2000:]
  assert '--resume' in err
  deadline = time.time() + 60
  while processes_mentioning(run_dir) and time.time() < deadline:
    time.sleep(0.2)
  assert processes_mentioning(run_dir) == []

  # The newest checkpoint the learner wrote before it was killed.
  latest = checkpointing.latest(checkpoints)
  saved = checkpointing.read_metadata(latest)['counts']
  assert saved['learner_steps'] > 0
  with np.load(latest) as f:
    before = {name: f[name] for name in f.files}
  # A resume whose budget its restored counts already reach, with no replay
  # to learn from: the limiter finishes at once, and the learner checkpoints
  # the state it restored, having taken no update.
  r = run_tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                  '--drop_replay', f'--env_step_budget={saved["env_steps"]}'])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  final = json.load(open(os.path.join(run_dir, 'final.json')))
  assert final['checkpoint_counts']['learner_steps'] == saved['learner_steps']
  assert final['checkpoint_counts']['env_steps'] >= saved['env_steps']
  after = checkpointing.latest(checkpoints)
  assert checkpointing.read_metadata(after)['counts']['learner_steps'] == \
      saved['learner_steps']
  with np.load(after) as f:
    assert sorted(f.files) == sorted(before)
    for name in before:  # every leaf bit for bit (the metadata holds times)
      if name != '__metadata__':
        np.testing.assert_array_equal(f[name], before[name], err_msg=name)
  _monotone(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1])
def test_hard_kill_at_a_random_moment_then_resume(runs_root, seed):
  _kill_then_resume(runs_root, f'kill{seed}', TINY, 'train', seed)


@pytest.mark.slow
def test_hard_kill_of_an_adversarial_run_then_resume(runs_root, tmp_path):
  # The discriminator's own axis survives the kill too: its rows continue
  # from the checkpoint's discriminator step, strictly increasing, and the
  # rounds count goes on from the checkpoint's.
  demos = write_cartpole_demos(str(tmp_path / 'demos.npz'), episodes=1)
  launch = ['train-ail', '--config', 'configs/ail.py:tiny', '--demos', demos,
            '--launch', 'local_mp']
  run_dir, saved = _kill_then_resume(runs_root, 'killail', launch,
                                     'train-ail', 2)
  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'discriminator.csv'))
  steps = [r['discriminator_steps'] for r in rows]
  assert all(b > a for a, b in zip(steps, steps[1:])), steps
  resumed = [r for r in rows
             if r['discriminator_steps'] > saved['discriminator_steps']]
  assert resumed and resumed[0]['discriminator_steps'] == \
      saved['discriminator_steps'] + 1
  final = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  assert final['rounds'] > saved['rounds'] > 0


@pytest.mark.slow
def test_a_stop_that_outlasts_the_grace_period_is_reported_as_a_kill(
    runs_root):
  run_dir = os.path.join(runs_root, 'slowstop')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'slowstop',
                              '--env_step_budget=10000000', '--stop_grace_s=3',
                              '--fault_injection_slow_stop_s=60'])
  _, err = interrupt_after_learner_steps(proc, run_dir)
  assert 'learner ended without finishing their stop' in err or \
      'learner' in err.split('ended without finishing')[0].splitlines()[-1]
  assert 'stop_grace_s=3' in err and '--resume' in err
  stops = json.load(open(os.path.join(run_dir, 'nodes', 'segment-1',
                                      'stop_times.json')))
  assert 'learner' in stops['killed']
  # The others finished, inside the grace period.
  assert 'counter' in stops['seconds_to_stop']
  assert max(stops['seconds_to_stop'].values()) < 10
  assert processes_mentioning(run_dir) == []


@pytest.mark.slow
def test_a_stop_longer_than_launchpads_default_notice_finishes(runs_root):
  """A 15 s stop inside stop_grace_s=40: each node process's own Launchpad
  kills it after its --lp_termination_notice_secs (10 by default) unless the
  launcher passes the grace period on."""
  run_dir = os.path.join(runs_root, 'longstop')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'longstop',
                              '--env_step_budget=10000000', '--stop_grace_s=40',
                              '--checkpoint_period_s=1000',
                              '--fault_injection_slow_stop_s=15'])
  interrupt_after_learner_steps(proc, run_dir, timeout=180)
  stops = json.load(open(os.path.join(run_dir, 'nodes', 'segment-1',
                                      'stop_times.json')))
  assert stops['killed'] == []
  assert stops['seconds_to_stop']['learner'] >= 15
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None
  assert processes_mentioning(run_dir) == []
