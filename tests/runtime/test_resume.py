"""Before a resume, counter and logs are made to agree with the checkpoint."""

import csv
import json
import os

import numpy as np
import pytest

from tandem.agents.core import checkpointing
from tandem.agents.runtime import counting
from tandem.agents.runtime import resume
from tandem.agents.runtime.rundir import RunDir


def _write_csv(path, header, rows):
  with open(path, 'w', newline='') as f:
    w = csv.writer(f)
    w.writerow(header)
    w.writerows(rows)


def _read(path):
  with open(path, newline='') as f:
    return list(csv.reader(f))


def _run_dir(tmp_path, ckpt_counts):
  rd = RunDir(str(tmp_path)).make()
  c = counting.Counter(rd.counter)
  c.increment(env_steps=5000, learner_steps=200, episodes=5, env_faults=2)
  c.save()
  path = checkpointing.save_numbered(
      rd.learner_checkpoints, 120, {'w': np.zeros(3, np.float32)},
      metadata={'counts': ckpt_counts})
  # Learner rows at steps 10..200, 10 env steps per learner step.
  _write_csv(os.path.join(rd.logs, 'learner.csv'),
             ['env_steps', 'learner_steps', 'loss'],
             [[25 * s, s, 0.1 * s] for s in range(10, 201, 10)])
  _write_csv(os.path.join(rd.logs, 'evaluator.csv'),
             ['env_steps', 'learner_steps', 'eval_return'],
             [[e, e // 25, e / 10] for e in range(1000, 5001, 1000)])
  return rd, path


def test_counts_and_logs_roll_back_to_the_checkpoint(tmp_path):
  ckpt = {'env_steps': 3000, 'learner_steps': 120, 'episodes': 3,
          'discriminator_steps': 0, 'rounds': 0, 'env_faults': 0,
          'elapsed_s': 1.0}
  rd, path = _run_dir(tmp_path, ckpt)
  old_learner = _read(os.path.join(rd.logs, 'learner.csv'))
  old_eval = _read(os.path.join(rd.logs, 'evaluator.csv'))
  done = resume.reconcile(rd, path, segment=2)

  restored = counting.Counter(rd.counter, restore=True).get_counts()
  assert restored['env_steps'] == 3000
  assert restored['learner_steps'] == 120
  assert restored['episodes'] == 3
  # Faults happened whatever was lost; the wall time was spent.
  assert restored['env_faults'] == 2
  assert restored['elapsed_s'] >= json.load(open(os.path.join(
      resume.discarded_dir(rd, 2), 'counter.json')))['elapsed_s']
  assert done['before']['env_steps'] == 5000

  learner = _read(os.path.join(rd.logs, 'learner.csv'))
  assert [int(r[1]) for r in learner[1:]] == list(range(10, 121, 10))
  evaluator = _read(os.path.join(rd.logs, 'evaluator.csv'))
  assert [int(r[0]) for r in evaluator[1:]] == [1000, 2000, 3000]
  assert done['discarded_rows'] == {'learner.csv': 8, 'evaluator.csv': 2}
  # Nothing is lost: kept + discarded rows are the original rows.
  dest = resume.discarded_dir(rd, 2)
  gone = _read(os.path.join(dest, 'learner.csv'))
  assert gone[0] == old_learner[0]
  assert learner[1:] + gone[1:] == old_learner[1:]
  assert evaluator[1:] + _read(os.path.join(dest, 'evaluator.csv'))[1:] == \
      old_eval[1:]


def test_discriminator_rows_roll_back_by_discriminator_steps(tmp_path):
  # An adversarial run's discriminator.csv is cut on its own axis: its
  # env_steps run ahead of the checkpoint's between the generator's calls
  # (a cut by env steps would keep rows of lost discriminator updates, or
  # drop kept ones).
  ckpt = {'env_steps': 3000, 'learner_steps': 120, 'discriminator_steps': 60,
          'rounds': 3}
  rd, path = _run_dir(tmp_path, ckpt)
  disc_csv = os.path.join(rd.logs, 'discriminator.csv')
  # Steps 10..100; env steps cross 3000 at step 50 and stay below after.
  _write_csv(disc_csv, ['env_steps', 'discriminator_steps', 'loss'],
             [[2000 + 20 * d if d <= 50 else 2990, d, 0.5]
              for d in range(10, 101, 10)])
  done = resume.reconcile(rd, path, segment=2)
  assert [int(r[1]) for r in _read(disc_csv)[1:]] == [10, 20, 30, 40, 50, 60]
  assert done['discarded_rows']['discriminator.csv'] == 4
  assert counting.Counter(rd.counter, restore=True).get_counts()[
      'discriminator_steps'] == 60


def test_a_torn_last_row_is_set_aside_not_kept_as_an_early_row(tmp_path):
  # Cut short, "4900,196,19.6" reads as learner step 19: behind the
  # checkpoint's 120, it would be kept as a row of wrong counts.
  ckpt = {'env_steps': 3000, 'learner_steps': 120}
  rd, path = _run_dir(tmp_path, ckpt)
  learner_csv = os.path.join(rd.logs, 'learner.csv')
  with open(learner_csv, 'a') as f:
    f.write('4900,19')
  done = resume.reconcile(rd, path, segment=2)
  learner = _read(learner_csv)
  assert [int(r[1]) for r in learner[1:]] == list(range(10, 121, 10))
  assert done['torn_lines'] == {'learner.csv': '4900,19'}
  with open(os.path.join(resume.discarded_dir(rd, 2), 'torn',
                         'learner.csv')) as f:
    assert f.read() == '4900,19\n'


def test_counter_behind_the_checkpoint_moves_forward(tmp_path):
  ckpt = {'env_steps': 6000, 'learner_steps': 240, 'episodes': 6,
          'elapsed_s': 1.0}
  rd, path = _run_dir(tmp_path, ckpt)
  done = resume.reconcile(rd, path, segment=3)
  restored = counting.Counter(rd.counter, restore=True).get_counts()
  assert restored['env_steps'] == 6000 and restored['learner_steps'] == 240
  assert done['discarded_rows'] == {}


def test_a_checkpoint_without_counts_changes_nothing(tmp_path):
  rd, _ = _run_dir(tmp_path, {'env_steps': 1})
  bare = checkpointing.save_numbered(rd.learner_checkpoints, 130,
                                     {'w': np.zeros(3, np.float32)})
  before = open(rd.counter).read(), _read(os.path.join(rd.logs,
                                                       'learner.csv'))
  assert resume.reconcile(rd, bare, segment=2) is None
  assert (open(rd.counter).read(),
          _read(os.path.join(rd.logs, 'learner.csv'))) == before


@pytest.mark.parametrize('counts, named', [
    ([3000, 120], 'are of type list'),
    ({'env_steps': 'lots', 'learner_steps': 120}, "env_steps='lots'"),
    ({'env_steps': 3000, 'learner_steps': -1}, 'learner_steps=-1'),
    ({'env_steps': 3000, 'learner_steps': 1.5}, 'learner_steps=1.5'),
    ({'env_steps': True}, 'env_steps=True'),
    ({'env_steps': 3000, 'elapsed_s': None}, 'elapsed_s=None'),
    ({'env_steps': 3000, 'elapsed_s': float('inf')}, 'elapsed_s=inf'),
    ({'env_steps': 1e300}, 'env_steps=1e+300'),
    ([], 'are of type list'),
    (0, 'are of type int'),
])
def test_counts_that_are_not_counts_are_refused_naming_the_checkpoint(
    tmp_path, counts, named):
  rd, path = _run_dir(tmp_path, counts)
  before = open(rd.counter).read(), _read(os.path.join(rd.logs,
                                                       'learner.csv'))
  with pytest.raises(checkpointing.CheckpointError) as e:
    resume.reconcile(rd, path, segment=2)
  assert path in str(e.value) and named in str(e.value), e.value
  assert (open(rd.counter).read(),
          _read(os.path.join(rd.logs, 'learner.csv'))) == before


def test_whole_counts_written_as_floats_are_accepted(tmp_path):
  rd, path = _run_dir(tmp_path, {'env_steps': 3000.0, 'learner_steps': 120,
                                 'elapsed_s': 12.5})
  done = resume.reconcile(rd, path, segment=2)
  assert done['counts']['env_steps'] == 3000
  assert done['counts']['learner_steps'] == 120


@pytest.mark.parametrize('progress, want', [
    ({'counts': {'env_steps': 5100, 'elapsed_s': 250.0}}, 250.0),
    (None, None),                      # no progress.json: counter.json's
    ('{"counts": {"elapsed_s": "x"}', None),  # unreadable: ignored
    ({'counts': {'elapsed_s': 'soon'}}, None),
    ({'counts': {'elapsed_s': 0.5}}, None),   # behind: counter.json's
])
def test_wall_time_the_counter_published_after_its_last_save_is_kept(
    tmp_path, progress, want):
  # A hard kill loses up to a checkpoint period of counter.json's elapsed
  # time; progress.json, published every second, still holds it.
  rd, path = _run_dir(tmp_path, {'env_steps': 3000, 'learner_steps': 120,
                                 'elapsed_s': 1.0})
  state = json.load(open(rd.counter))
  state['elapsed_s'] = saved = 10.0   # counter.json's, above the checkpoint's
  json.dump(state, open(rd.counter, 'w'))
  if isinstance(progress, dict):
    json.dump(progress, open(rd.progress, 'w'))
  elif isinstance(progress, str):
    open(rd.progress, 'w').write(progress)
  resume.reconcile(rd, path, segment=2)
  # Read as written: a live Counter's clock would run on.
  assert json.load(open(rd.counter))['elapsed_s'] == (want or saved)


@pytest.mark.parametrize('published, want', [
    (5, 5),          # faults after counter.json's last save
    (1, 2),          # behind: counter.json's
    ('x', 2), (-3, 2), (2.5, 2), (True, 2),   # not a count: ignored
])
def test_env_faults_the_counter_published_after_its_last_save_are_kept(
    tmp_path, published, want):
  # The README promises survived environment faults are never rolled back;
  # after a hard kill counter.json misses those since its last save.
  rd, path = _run_dir(tmp_path, {'env_steps': 3000, 'learner_steps': 120,
                                 'env_faults': 0})
  json.dump({'counts': {'env_faults': published, 'elapsed_s': 1.0}},
            open(rd.progress, 'w'))
  done = resume.reconcile(rd, path, segment=2)
  assert done['counts']['env_faults'] == want
  assert counting.Counter(rd.counter, restore=True).get_counts()[
      'env_faults'] == want


def test_only_the_wall_time_moving_rewrites_counter_json_and_discards_nothing(
    tmp_path):
  # A checkpoint at the counter's counts, progress.json a minute ahead.
  rd = RunDir(str(tmp_path)).make()
  c = counting.Counter(rd.counter)
  c.increment(env_steps=3000, learner_steps=120)
  c.save()
  counts = dict(c.get_counts(), elapsed_s=1.0)
  path = checkpointing.save_numbered(
      rd.learner_checkpoints, 120, {'w': np.zeros(3, np.float32)},
      metadata={'counts': counts})
  json.dump({'counts': {'elapsed_s': 61.0}}, open(rd.progress, 'w'))
  done = resume.reconcile(rd, path, segment=2)
  assert json.load(open(rd.counter))['elapsed_s'] == 61.0
  assert json.load(open(rd.counter))['counts']['env_steps'] == 3000
  assert done['discarded_rows'] == {}
  assert not os.path.exists(os.path.join(resume.discarded_dir(rd, 2),
                                         'counter.json'))


def _final_rows(tmp_path, marker):
  rd = RunDir(str(tmp_path)).make()
  # An earlier launch's final row (its final.json archived), a periodic
  # row, and the stopped launch's final row at the marker's counts.
  _write_csv(os.path.join(rd.logs, 'evaluator.csv'),
             ['env_steps', 'learner_steps', 'eval_return', 'final'],
             [[500, 40, 1.0, 1], [800, 60, 2.0, 0], [1000, 80, 3.0, 1]])
  if marker is not None:
    with open(rd.final_pending, 'w') as f:
      f.write(marker)
  return rd


def test_a_stopped_launchs_final_row_alone_is_set_aside(tmp_path):
  rd = _final_rows(tmp_path, json.dumps(
      {'counts': {'env_steps': 1000, 'learner_steps': 80}}))
  assert resume.set_aside_unfinished_final(rd, 3) == 1
  kept = _read(os.path.join(rd.logs, 'evaluator.csv'))
  assert [r[0] for r in kept[1:]] == ['500', '800']
  gone = _read(os.path.join(resume.discarded_dir(rd, 3), 'evaluator.csv'))
  assert gone[1:] == [['1000', '80', '3.0', '1']]
  assert not os.path.exists(rd.final_pending)


@pytest.mark.parametrize('marker, final_json', [
    (None, False),                                        # no marker
    ('{"counts": {"env_steps": 10', False),               # cut short
    (json.dumps({'counts': {'env_steps': 1000, 'learner_steps': 80}}),
     True),   # finished: only the marker's removal was cut short
])
def test_final_rows_stay_without_a_readable_marker_of_an_unfinished_stop(
    tmp_path, marker, final_json):
  rd = _final_rows(tmp_path, marker)
  if final_json:
    json.dump({'final_eval_return': 3.0}, open(rd.final, 'w'))
  before = _read(os.path.join(rd.logs, 'evaluator.csv'))
  assert resume.set_aside_unfinished_final(rd, 3) == 0
  assert _read(os.path.join(rd.logs, 'evaluator.csv')) == before
  assert not os.path.exists(rd.final_pending)


def test_only_the_stopped_launchs_own_final_row_moves_at_equal_counts(
    tmp_path):
  # A finished launch resumed at the same budget finishes again at the same
  # counts; stopped before its final.json, only its own (newest) row moves.
  rd = RunDir(str(tmp_path)).make()
  _write_csv(os.path.join(rd.logs, 'evaluator.csv'),
             ['env_steps', 'learner_steps', 'eval_return', 'final'],
             [[1000, 80, 3.0, 1], [1000, 80, 2.5, 1]])
  with open(os.path.join(rd.logs, 'evaluator.csv'), 'a') as f:
    f.write('1000,8')   # a torn line after it: set aside, not lost
  json.dump({'counts': {'env_steps': 1000, 'learner_steps': 80}},
            open(rd.final_pending, 'w'))
  assert resume.set_aside_unfinished_final(rd, 3) == 1
  dest = resume.discarded_dir(rd, 3)
  assert _read(os.path.join(rd.logs, 'evaluator.csv'))[1:] == \
      [['1000', '80', '3.0', '1']]
  assert _read(os.path.join(dest, 'evaluator.csv'))[1:] == \
      [['1000', '80', '2.5', '1']]
  with open(os.path.join(dest, 'torn', 'evaluator.csv')) as f:
    assert f.read().startswith('1000,8')
