"""Whole programs under local_mp: finish, resume, crash. ~1 minute in all."""

import json
import os
import re
import shutil

import numpy as np
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.runtime import logs
from tandem.agents.replay import replay_checkpoints
from tandem.agents.core import schedules
from tests import REPO_ROOT
from tests.integration.conftest import (interrupt_after_learner_steps,
                                        listening_addresses,
                                        processes_mentioning, run_tandem,
                                        start_tandem, stop_program,
                                        tensorboard_matches_csv,
                                        wait_for_learner_steps)

TINY = ['train', '--config', 'configs/mpo.py:tiny', '--launch', 'local_mp']


def test_small_budget_finishes_with_exit_0_and_leaves_no_process(runs_root):
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'smoke',
                         '--tensorboard=true'])
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  run_dir = os.path.join(runs_root, 'smoke')
  assert 'final evaluation return' in r.stdout
  run_tb = os.path.join(runs_root, 'smoke', 'logs', 'tb')
  # A command that runs where it is printed (tensorboard may be on the
  # PATH, or only beside this Python).
  hint = re.search(r'watch it live: (\S+) --logdir (\S+)\n', r.stdout)
  assert hint and hint.group(2) == run_tb, r.stdout[:2000]
  command = hint.group(1)
  assert (shutil.which(command) if command == 'tensorboard' else
          os.access(os.path.join(REPO_ROOT, command), os.X_OK)), command
  final = json.load(open(os.path.join(run_dir, 'final.json')))
  assert not os.path.exists(os.path.join(run_dir, 'final.pending.json'))
  assert final['counts']['env_steps'] >= 3000
  assert final['counts']['learner_steps'] > 0
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints', 'learner'))
  # What was evaluated is what final.json names and the stop path saved:
  # the learner took no update after the budget's checkpoint.
  assert final['learner_checkpoint'] == latest
  assert latest == checkpointing.numbered_path(
      os.path.dirname(latest), final['counts']['learner_steps'])
  # Every log row carries the global counts.
  for name in ('learner', 'evaluator', 'actor_0'):
    rows = logs.read_csv(os.path.join(run_dir, 'logs', f'{name}.csv'))
    assert rows and all('env_steps' in r and 'learner_steps' in r
                        for r in rows)
  # TensorBoard holds each node's CSV rows under the same names.
  for name in ('actor_0', 'evaluator', 'learner'):
    tensorboard_matches_csv(run_dir, name)
  # Each node's output is kept in the run directory, per launch.
  node_logs = os.listdir(os.path.join(run_dir, 'nodes', 'segment-1'))
  assert any(n.startswith('learner') for n in node_logs), node_logs
  assert processes_mentioning(run_dir) == []


def test_resume_continues_counts_and_schedules(runs_root):
  lr_args = ['--mpo.policy_optimizer.schedule=linear',
             '--mpo.policy_optimizer.final_fraction=0.1',
             '--mpo.schedule_horizon=2000']
  r1 = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'res',
                          '--env_step_budget=1500'] + lr_args)
  assert r1.returncode == 0, r1.stdout[-3000:] + r1.stderr[-3000:]
  run_dir = os.path.join(runs_root, 'res')
  # The tiny config writes no TensorBoard events, so no command to watch.
  assert 'tensorboard' not in r1.stdout
  first = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  rows1 = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))

  # The replay buffer was checkpointed at the stop ...
  at_stop = json.load(open(os.path.join(run_dir, 'checkpoints',
                                        'replay_checkpoint.json')))
  assert at_stop['at_stop'] and at_stop['items']['transitions'] >= 64
  # ... so a resume may not change the table's settings without dropping it.
  refused = run_tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                        '--replay_max_size=5000'])
  assert refused.returncode == 2, refused.stderr[-2000:]
  assert 'replay_max_size' in refused.stderr and '--drop_replay' in \
      refused.stderr

  r2 = run_tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                   '--env_step_budget=3000'])
  assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
  # It started from the buffer as it was at the stop: no refill.
  restored = json.load(open(os.path.join(run_dir, 'checkpoints',
                                         'replay_restored.json')))
  # At least those items: the server serves from its start, so an actor's
  # first inserts can land before replay_restored.json reads the size (an
  # unrestored one would hold next to none).
  for table, n in at_stop['items'].items():
    assert restored['items'][table] >= n, (restored, at_stop)
  second = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  # The first launch's node logs stay; the resume wrote its own.
  for segment in ('segment-1', 'segment-2'):
    assert os.listdir(os.path.join(run_dir, 'nodes', segment)), segment
  assert second['env_steps'] >= 3000 > first['env_steps']
  assert second['learner_steps'] > first['learner_steps']
  assert second['elapsed_s'] > first['elapsed_s']
  # A clean finish checkpoints the counts its final evaluation logged, so
  # the resume keeps that row and no log's env-step axis goes back. (An
  # actor's rows may be discarded: it can sync steps made after finish().)
  for segment in ('segment-2', 'segment-3'):
    gone = os.path.join(run_dir, 'logs', 'discarded', segment)
    for name in ('evaluator.csv', 'learner.csv'):
      assert not os.path.exists(os.path.join(gone, name)), (segment, name)
  evals = logs.read_csv(os.path.join(run_dir, 'logs', 'evaluator.csv'))
  finals = [r for r in evals if r['final'] == 1]
  assert [int(r['env_steps']) >= 1500 for r in finals] == [True, True]
  first_final = json.load(open(os.path.join(run_dir, 'nodes', 'segment-1',
                                            'final.json')))
  assert int(finals[0]['env_steps']) == \
      first_final['checkpoint_counts']['env_steps'] <= first['env_steps']
  for name in ('learner', 'evaluator'):
    env = [int(r['env_steps'])
           for r in logs.read_csv(os.path.join(run_dir, 'logs', f'{name}.csv'))]
    assert env == sorted(env), name

  rows = logs.read_csv(os.path.join(run_dir, 'logs', 'learner.csv'))
  resumed = rows[len(rows1):]
  assert resumed, 'no learner rows after resume'
  # The wall clock carried over: a clock restarted at 0 would time the
  # resume's rows before the first launch's last.
  clock = [r['elapsed_s'] for r in rows]
  assert clock == sorted(clock)
  assert resumed[0]['elapsed_s'] >= rows1[-1]['elapsed_s']
  last_before = int(rows1[-1]['learner_steps'])
  first_after = resumed[0]
  assert int(first_after['learner_steps']) > last_before
  # The rate used at a step is the schedule at that global learner step
  # (the metric is taken before the step's increment).
  expected = float(schedules.value('linear', 1e-4, 0.1,
                                   int(first_after['learner_steps']) - 1,
                                   2000))
  assert np.isclose(first_after['learning_rate_policy'], expected, rtol=1e-5)
  # ... so it continues below the last rate used before the stop, instead
  # of restarting the schedule at 1e-4.
  assert first_after['learning_rate_policy'] < \
      rows1[-1]['learning_rate_policy']


def test_crashing_actor_stops_program_nonzero_naming_it(runs_root):
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'crash',
                         '--fault_injection_actor_crash_after=1500',
                         '--env_step_budget=100000'])
  run_dir = os.path.join(runs_root, 'crash')
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
  assert 'actor_0' in r.stderr and 'InjectedCrash' in r.stderr
  assert '--resume' in r.stderr
  # The learner wrote its checkpoint on the way down.
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None
  assert checkpointing.read_metadata(latest)['counts']['env_steps'] >= 1000
  assert os.path.exists(os.path.join(run_dir, 'counter.json'))
  assert processes_mentioning(run_dir) == []


@pytest.mark.parametrize('sig', ['SIGINT', 'SIGTERM'])
def test_interrupt_stops_cleanly_with_checkpoint_and_exit_130(runs_root, sig):
  # Ctrl-C, or a service manager's stop (SIGTERM), of the launcher.
  import signal
  run_dir = os.path.join(runs_root, 'intr')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'intr',
                              '--env_step_budget=10000000',
                              '--checkpoint_period_s=1000'])
  _, err = interrupt_after_learner_steps(proc, run_dir,
                                         sig=getattr(signal, sig))
  assert f'continue with: tandem train --resume {run_dir}' in err
  # With periodic checkpoints off, this one was written on the way down.
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None
  assert checkpointing.read_metadata(latest)['counts']['learner_steps'] > 50
  assert processes_mentioning(run_dir) == []


def test_killed_launcher_leaves_no_process_and_a_resumable_run(runs_root):
  """kill -9 of the launcher alone: its nodes notice, stop through their
  ordinary stop path (the learner checkpoints on the way down), and release
  the run directory (the resume itself is test_resume_*'s)."""
  import signal
  import time
  run_dir = os.path.join(runs_root, 'orphan')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name', 'orphan',
                              '--env_step_budget=10000000',
                              '--checkpoint_period_s=1000'], capture=False)
  seen = wait_for_learner_steps(run_dir, 50, proc=proc)
  try:
    assert processes_mentioning(run_dir)
    _check_listening_sockets_are_as_the_readme_says(run_dir, proc.pid)
  except BaseException:
    stop_program(run_dir, proc)  # leave nothing running for later tests
    raise
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  from tandem.agents.runtime import supervision
  # Both, not the first alone: an exiting process's command line and
  # environment read empty once its memory is released, a moment before
  # its open files (the run's node lock among them) are closed.
  deadline = time.time() + 90
  while ((processes_mentioning(run_dir) or supervision.nodes_running(run_dir))
         and time.time() < deadline):
    time.sleep(0.5)
  assert processes_mentioning(run_dir) == []
  assert not supervision.nodes_running(run_dir)
  # Periodic checkpoints were off: this one is the learner's stop path.
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None
  saved = checkpointing.read_metadata(latest)['counts']['learner_steps']
  assert saved >= seen  # written on the way down, after the kill


def test_learner_whose_updates_are_all_skipped_stops_the_program(runs_root):
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'stall',
                         '--fault_injection_nonfinite_after=40',
                         '--stall_window=20', '--env_step_budget=100000'])
  run_dir = os.path.join(runs_root, 'stall')
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
  assert 'learner' in r.stderr and 'LearnerStalled' in r.stderr
  assert 'last finite update at step 39' in r.stderr
  assert '--resume' in r.stderr
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None and latest in r.stderr
  assert processes_mentioning(run_dir) == []


def test_killed_replay_is_named_and_the_learner_checkpoints(runs_root):
  import signal
  from tandem.agents.runtime import supervision
  run_dir = os.path.join(runs_root, 'replaydeath')
  proc = start_tandem(TINY + ['--runs_root', runs_root, '--name',
                              'replaydeath', '--env_step_budget=10000000',
                              '--checkpoint_period_s=1000'])
  seen = wait_for_learner_steps(run_dir, 50, proc=proc)
  replay = [p for p in supervision.program_processes(run_dir)
            if supervision._node_name(p) == 'replay']
  assert len(replay) == 1
  os.kill(replay[0], signal.SIGKILL)
  out, err = proc.communicate(timeout=180)
  assert proc.returncode == 1, out[-2000:] + err[-2000:]
  assert f'first node process to end was replay (pid {replay[0]})' in err
  assert 'killed by SIGKILL' in err
  # Periodic checkpoints were off: the learner left through its stop path
  # (or its replay-failure path, which checkpoints the same way).
  latest = checkpointing.latest(os.path.join(run_dir, 'checkpoints',
                                             'learner'))
  assert latest is not None and f'latest learner checkpoint: {latest}' in err
  assert checkpointing.read_metadata(latest)['counts'][
      'learner_steps'] >= seen
  assert processes_mentioning(run_dir) == []


def _check_listening_sockets_are_as_the_readme_says(run_dir, launcher_pid):
  """docs/security.md: each node process listens on one TCP port on every
  interface of its network namespace (Reverb and Courier bind
  "[::]:<port>"; Launchpad offers no way to bind loopback), the launcher on
  none. Read from the processes' own socket tables, never by connecting
  anywhere."""
  from tandem.agents.runtime import supervision
  listening = {pid: listening_addresses(pid) for pid in
               supervision.program_processes(run_dir) + [launcher_pid]}
  assert listening.pop(launcher_pid) == []
  nodes = {supervision._node_name(pid): addrs
           for pid, addrs in listening.items()}
  assert set(nodes) == {'replay', 'counter', 'learner', 'actor', 'evaluator',
                        'limiter'}, nodes
  for node, addrs in nodes.items():
    assert len(addrs) == 1 and addrs[0][0] == '::', (node, addrs)


def test_environment_faults_cost_episodes_not_the_run(runs_root):
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'faults',
                         '--fault_injection_env_fault_every=1200'])
  run_dir = os.path.join(runs_root, 'faults')
  assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
  final = json.load(open(os.path.join(run_dir, 'final.json')))['counts']
  assert final['env_steps'] >= 3000
  # Actor 0's two environments (~1500 steps each) fault at their 1200th
  # step, in their second episode: the first episodes complete.
  assert final['env_faults'] >= 2
  reports = os.listdir(os.path.join(run_dir, 'errors', 'env_faults'))
  assert len(reports) == final['env_faults']
  assert all(n.startswith('actor_0-') for n in reports)
  assert 'InjectedEnvFault' in open(os.path.join(
      run_dir, 'errors', 'env_faults', sorted(reports)[0])).read()
  # Survived faults are not crash reports.
  assert not [n for n in os.listdir(os.path.join(run_dir, 'errors'))
              if n.endswith('.txt')]
  assert processes_mentioning(run_dir) == []


@pytest.mark.slow
def test_permanently_failing_environment_stops_the_program_naming_it(
    runs_root):
  r = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'broken',
                         '--fault_injection_env_fault_every=1',
                         '--max_consecutive_env_faults=3'])
  run_dir = os.path.join(runs_root, 'broken')
  assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
  assert 'node actor_0 crashed' in r.stderr
  assert 'EnvFaultLimitExceeded' in r.stderr
  assert 'cartpole:swingup' in r.stderr
  assert processes_mentioning(run_dir) == []


@pytest.mark.slow
def test_a_replay_checkpoint_damaged_inside_closes_with_drop_replay(runs_root):
  # Framing intact, one byte of record data flipped: only Reverb's own load
  # finds it, after launch. The closing hint must name --drop_replay (a plain
  # resume fails the same way), and --drop_replay then finishes the run.
  r1 = run_tandem(TINY + ['--runs_root', runs_root, '--name', 'damaged',
                          '--env_step_budget=1500'])
  assert r1.returncode == 0, r1.stdout[-3000:] + r1.stderr[-3000:]
  run_dir = os.path.join(runs_root, 'damaged')
  # The checkpoint Reverb loads (a periodic one may sit beside it).
  loaded = replay_checkpoints.latest(os.path.join(run_dir, 'checkpoints',
                                                  'replay'))
  assert loaded is not None
  with open(os.path.join(loaded, 'chunks.tfrecord'), 'r+b') as f:
    f.seek(20)  # past the first record's 12-byte header: its data
    byte = f.read(1)
    f.seek(20)
    f.write(bytes([byte[0] ^ 0xFF]))
  r2 = run_tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                   '--env_step_budget=3000'])
  assert r2.returncode == 1, r2.stdout[-3000:] + r2.stderr[-3000:]
  assert 'node replay crashed' in r2.stderr
  closing = r2.stderr.strip().splitlines()[-1]
  assert f'--resume {run_dir} --drop_replay' in closing, closing
  assert processes_mentioning(run_dir) == []
  r3 = run_tandem(['train', '--resume', run_dir, '--launch', 'local_mp',
                   '--env_step_budget=3000', '--drop_replay'])
  assert r3.returncode == 0, r3.stdout[-3000:] + r3.stderr[-3000:]
  assert os.path.isdir(os.path.join(run_dir, 'checkpoints',
                                    'replay-dropped-segment-3'))
