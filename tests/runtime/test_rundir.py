"""Run directory housekeeping: per-launch segments, stray temporaries."""

import os

from tandem.agents.core import files
from tandem.agents.envs.env_faults import ENV_FAULTS
from tandem.agents.runtime.rundir import RunDir, read_errors


def test_previous_launch_errors_are_archived_not_deleted(tmp_path):
  rd = RunDir(str(tmp_path / 'run')).make()
  with open(os.path.join(rd.errors, 'actor_0.txt'), 'w') as f:
    f.write('InjectedCrash: boom')
  rd.archive_errors(1)
  assert read_errors(rd) == {}  # the new launch starts with none of its own
  kept = os.path.join(rd.errors, 'segment-1', 'actor_0.txt')
  assert open(kept).read() == 'InjectedCrash: boom'
  rd.archive_errors(2)  # nothing new: nothing moves
  assert os.listdir(rd.errors) == ['segment-1']
  assert rd.segment_nodes(3).endswith(os.path.join('nodes', 'segment-3'))


def test_stray_temporaries_are_removed_and_finished_files_kept(tmp_path):
  rd = RunDir(str(tmp_path / 'run')).make()
  ckpt = os.path.join(rd.learner_checkpoints, 'ckpt-000000000010.npz')
  files.write_atomic(ckpt, lambda f: f.write(b'done'))
  stray = os.path.join(rd.learner_checkpoints, '.tmp-abc123.npz')
  open(stray, 'wb').write(b'half a checkpoint')
  open(os.path.join(rd.root, '.tmp-x.json'), 'w').write('{')
  removed = rd.remove_stray_temporaries()
  assert sorted(removed) == ['.tmp-abc123.npz', '.tmp-x.json']
  assert not os.path.exists(stray)
  assert open(ckpt, 'rb').read() == b'done'


def test_env_fault_reports_are_not_crashes_and_are_archived(tmp_path):
  rd = RunDir(str(tmp_path / 'run')).make()
  faults = os.path.join(rd.errors, ENV_FAULTS)
  os.makedirs(faults)
  open(os.path.join(faults, 'actor_1-1.txt'), 'w').write('PhysicsError: x')
  open(os.path.join(rd.errors, 'learner.txt'), 'w').write('boom')
  assert read_errors(rd) == {'learner': 'boom'}
  rd.archive_errors(2)
  kept = os.path.join(rd.errors, 'segment-2')
  assert open(os.path.join(kept, ENV_FAULTS, 'actor_1-1.txt')).read() == \
      'PhysicsError: x'
  assert open(os.path.join(kept, 'learner.txt')).read() == 'boom'
  # The new launch starts with neither crashes nor faults of its own.
  assert os.listdir(rd.errors) == ['segment-2'] and read_errors(rd) == {}
