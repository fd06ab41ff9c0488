"""`--launch vertex_local`: a Vertex AI job's replicas as process groups on
this machine, finding each other through CLUSTER_SPEC alone. ~70 s by
default; the adversarial program's job (the same replicas, another learner)
is under `make test-slow`."""

import json
import os
import signal
import time

import pytest

from tests.integration.conftest import (listening_addresses,
                                        processes_mentioning, run_tandem,
                                        start_tandem, stop_program,
                                        wait_for_learner_steps)
from tests.integration.demo_data import write_cartpole_demos

TINY = ['train', '--config', 'configs/mpo.py:tiny', '--launch', 'vertex_local',
        '--num_actors', '2']


def _replicas(run_dir, segment=1, timeout=120.0, proc=None):
  """replicas.json of a launch, once the launcher has written it."""
  path = os.path.join(run_dir, 'nodes', f'segment-{segment}', 'replicas',
                      'replicas.json')
  deadline = time.time() + timeout
  while not os.path.exists(path):
    assert time.time() < deadline and (proc is None or proc.poll() is None), \
        f'no {path}'
    time.sleep(0.2)
  with open(path) as f:
    return json.load(f)


def _node_pid(replica_pid, node):
  """The pid of `node`'s process under a replica (its TANDEM_NODE group)."""
  import psutil
  for child in psutil.Process(replica_pid).children(recursive=True):
    try:
      if child.environ().get('TANDEM_NODE') == node:
        return child.pid
    except psutil.Error:
      continue
  return None


def test_mpo_job_stops_on_ctrl_c_and_resumes_from_the_shared_root(runs_root):
  # A budget the first launch cannot finish before its Ctrl-C, however slow
  # the checks before it; the resume sets one it reaches. The launcher
  # starts with SIGINT ignored (a script's background job) and stops on it
  # all the same, as a local_mp launch does.
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'job',
                              '--env_step_budget=1000000'],
                      sigint_ignored=True)
  run_dir = os.path.join(runs_root, 'job')
  try:
    replicas = _replicas(run_dir, proc=proc)
    # Pool 0 one replica; the learner's pool; one replica per actor.
    assert sorted(replicas) == ['workerpool0-0', 'workerpool1-0',
                                'workerpool2-0', 'workerpool2-1']
    pids = [r['pid'] for r in replicas.values()]
    # Each replica is a process group (and session) of its own.
    assert sorted(os.getpgid(p) for p in pids) == sorted(pids)
    assert os.getpgid(proc.pid) not in pids
    wait_for_learner_steps(run_dir, 0, proc=proc)
    # The learner listens where CLUSTER_SPEC puts its replica (slot 0).
    learner = replicas['workerpool1-0']
    port = int(learner['address'].rpartition(':')[2])
    node = _node_pid(learner['pid'], 'learner')
    assert node is not None
    assert port in [p for _, p in listening_addresses(node)]
    proc.send_signal(signal.SIGINT)  # stopping the launcher stops them all
    out, err = proc.communicate(timeout=240)
  finally:
    stop_program(run_dir, proc)
  assert proc.returncode == 130, out[-3000:] + err[-3000:]
  assert 'stopping every replica' in err
  assert f'continue with: tandem train --resume {run_dir} --launch ' \
      'vertex_local' in err
  assert processes_mentioning(run_dir) == []
  assert not os.path.exists(os.path.join(run_dir, 'final.json'))
  with open(os.path.join(run_dir, 'counter.json')) as f:
    stored = json.load(f)
  first = dict(stored['counts'], elapsed_s=stored['elapsed_s'])
  assert first['env_steps'] > 0
  budget = first['env_steps'] + 1500

  r2 = run_tandem(['train', '--resume', run_dir, '--launch', 'vertex_local',
                   f'--env_step_budget={budget}'])
  assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
  second = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  for key in ('env_steps', 'learner_steps', 'elapsed_s'):
    assert second[key] > first[key], key
  assert second['env_steps'] >= budget
  restored = json.load(open(os.path.join(run_dir, 'checkpoints',
                                         'replay_restored.json')))
  assert sum(restored['items'].values()) > 0  # replay came back, no refill
  stop = json.load(open(os.path.join(run_dir, 'nodes', 'segment-2',
                                     'replicas', 'stop')))
  assert stop['by'] == 'workerpool0-0'  # the limiter's replica ended the job
  assert processes_mentioning(run_dir) == []


def test_killed_replica_is_named_and_nothing_is_orphaned(runs_root):
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'killed',
                              '--env_step_budget=1000000'])
  run_dir = os.path.join(runs_root, 'killed')
  try:
    replicas = _replicas(run_dir, proc=proc)
    wait_for_learner_steps(run_dir, 0, proc=proc)
    # A VM lost: the replica and its nodes, at once.
    os.killpg(replicas['workerpool2-1']['pid'], signal.SIGKILL)
    out, err = proc.communicate(timeout=240)
  finally:
    stop_program(run_dir, proc)
  assert proc.returncode == 1, out[-3000:] + err[-3000:]
  assert 'replica workerpool2-1 (actor_1)' in err, err[-3000:]
  assert 'killed by SIGKILL' in err
  assert os.path.join('replicas', 'workerpool2-1.log') in err
  assert processes_mentioning(run_dir) == []
  # The others stopped through the shared stop, and the learner saved.
  from tandem.agents.core import checkpointing
  assert checkpointing.latest(os.path.join(run_dir, 'checkpoints', 'learner'))


@pytest.mark.slow
def test_gail_job_completes_as_replicas(runs_root, tmp_path):
  demos = write_cartpole_demos(str(tmp_path / 'demos.npz'), episodes=1)
  r = run_tandem(['train-ail', '--config', 'configs/ail.py:tiny', '--demos',
                  demos, '--launch', 'vertex_local', '--num_actors', '2',
                  '--runs_root', runs_root,
                  '--name', 'gail', '--env_step_budget=1500'])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  run_dir = os.path.join(runs_root, 'gail')
  final = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  assert final['rounds'] > 0 and final['discriminator_steps'] > 0
  assert 'launching vertex_local: 4 replicas in 3 worker pools' in r.stdout
  assert processes_mentioning(run_dir) == []
