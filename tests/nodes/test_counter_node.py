"""The limiter's finish (agents/nodes/counter_node.py): final.json, and the
marker of an unfinished final evaluation that a resume acts on."""

import json
import os
import threading

import launchpad
import pytest

from tandem.agents.runtime import counting
from tandem.agents.runtime import lifecycle
from tandem.agents.runtime import logs
from tandem.agents.nodes import counter_node
from tandem.agents.runtime import resume
from tandem.agents.runtime.rundir import RunDir
from tests.fakes import CourierClient

COUNTS = {'env_steps': 1000, 'learner_steps': 80, 'elapsed_s': 12.5}


class _Learner:
  def finish(self):
    return {'checkpoint': 'ckpt-80', 'counts': dict(COUNTS)}


class _Evaluator:
  """Logs a final row at the counts it is given; `stop` (if set) is set
  and the call cancelled after the row is written, as a Ctrl-C there."""

  def __init__(self, rd, stop=None, sampled=float('nan')):
    self._logger = logs.Logger(rd.logs, 'evaluator', tensorboard=False)
    self._stop = stop
    self._sampled = sampled

  def evaluate_now(self, episodes, label, counts):
    row = {**logs.count_columns(counts), 'eval_return': 5.0,
           'eval_return_min': 4.0, 'eval_return_max': 6.0,
           'eval_sampled_return': self._sampled,
           'final': int(label == 'final')}
    self._logger.write(row)
    if self._stop is not None:
      self._stop.set()
      raise RuntimeError('Cancelled')
    return row


@pytest.fixture
def stop(monkeypatch):
  event = threading.Event()
  monkeypatch.setattr(lifecycle, '_captured', [event])
  monkeypatch.setattr(launchpad, 'stop', lambda: None)
  return event


def _limiter(rd, evaluator):
  counter = counting.Counter(rd.counter)
  counter.increment(env_steps=COUNTS['env_steps'],
                    learner_steps=COUNTS['learner_steps'])
  return counter_node.StepsLimiter(
      CourierClient(counter), CourierClient(_Learner()),
      CourierClient(evaluator), 1000, rd.root, final_eval_episodes=1)


def test_a_finished_run_has_final_json_and_no_pending_marker(tmp_path, stop):
  rd = RunDir(str(tmp_path)).make()
  _limiter(rd, _Evaluator(rd)).run()
  final = json.load(open(rd.final))
  assert final['checkpoint_counts'] == COUNTS
  # Not evaluated (NaN in its row): null, never a NaN JSON cannot hold.
  assert final['final_eval_sampled_return'] is None
  assert not os.path.exists(rd.final_pending)


def test_final_json_holds_the_samples_return_where_evaluated(tmp_path, stop):
  rd = RunDir(str(tmp_path)).make()
  _limiter(rd, _Evaluator(rd, sampled=7.5)).run()
  final = json.load(open(rd.final))
  assert (final['final_eval_return'], final['final_eval_sampled_return']) == (
      5.0, 7.5)


def test_a_stop_during_the_final_evaluation_leaves_its_row_marked(tmp_path,
                                                                 stop):
  rd = RunDir(str(tmp_path)).make()
  _limiter(rd, _Evaluator(rd, stop)).run()
  assert not os.path.exists(rd.final)
  assert json.load(open(rd.final_pending))['counts'] == COUNTS
  # The resume sets that row aside (its own final evaluation logs one).
  assert resume.set_aside_unfinished_final(rd, 2) == 1
  assert logs.read_csv(os.path.join(rd.logs, 'evaluator.csv')) == []
  assert not os.path.exists(rd.final_pending)


def test_a_marker_that_cannot_be_removed_does_not_fail_a_finished_run(
    tmp_path, stop, monkeypatch):
  rd = RunDir(str(tmp_path)).make()
  stopped = []
  monkeypatch.setattr(launchpad, 'stop', lambda: stopped.append(1))
  real_remove = os.remove

  def remove(path):
    if path == rd.final_pending:
      raise PermissionError(13, 'Permission denied', path)
    real_remove(path)
  monkeypatch.setattr(os, 'remove', remove)
  _limiter(rd, _Evaluator(rd)).run()   # no crash report, the program stops
  assert os.path.exists(rd.final) and stopped
  assert not os.path.exists(os.path.join(rd.errors, 'limiter.txt'))
