"""Log rows carry global counts and survive a resume."""

import math
import os

import pytest

from tandem.agents.runtime import logs


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


def _row(env, learner, loss):
  return {'env_steps': env, 'learner_steps': learner, 'loss': loss}


def test_a_torn_last_line_is_set_aside_not_run_into(tmp_path):
  # A write cut short leaves a last line without its line end; the next
  # launch's first row must not be appended onto it.
  lg = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  lg.write(_row(10, 1, 0.5))
  with open(lg.path, 'a') as f:
    f.write('20,2,0.2')  # torn: no line end
  again = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  again.write(_row(30, 3, 0.25))
  rows = logs.read_csv(lg.path)
  assert [(r['env_steps'], r['learner_steps']) for r in rows] == [(10, 1),
                                                                 (30, 3)]
  torn = tmp_path / 'discarded' / 'torn' / 'learner.csv'
  assert torn.read_text() == '20,2,0.2\n'


def test_a_torn_header_starts_the_file_afresh(tmp_path):
  path = tmp_path / 'evaluator.csv'
  path.write_text('env_steps,learn')
  lg = logs.Logger(str(tmp_path), 'evaluator', tensorboard=False)
  lg.write(_row(5, 0, 1.0))
  rows = logs.read_csv(lg.path)
  assert len(rows) == 1 and rows[0]['env_steps'] == 5
  assert rows[0]['loss'] == 1.0
  assert ((tmp_path / 'discarded' / 'torn' / 'evaluator.csv').read_text()
          == 'env_steps,learn\n')


def test_complete_files_are_left_byte_for_byte(tmp_path):
  lg = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  for i in range(3):
    lg.write(_row(10 * i, i, 0.1 * i))
  before = open(lg.path, 'rb').read()
  logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  assert open(lg.path, 'rb').read() == before
  assert not (tmp_path / 'discarded').exists()


def test_a_row_cut_between_cr_and_lf_is_whole_and_kept(tmp_path):
  lg = logs.Logger(str(tmp_path), 'learner', tensorboard=False)
  lg.write(_row(10, 1, 0.5))
  with open(lg.path, 'rb+') as f:
    f.seek(-1, os.SEEK_END)
    assert f.read(1) == b'\n'  # csv ends rows with \r\n
    f.seek(-1, os.SEEK_END)
    f.truncate()
  logs.Logger(str(tmp_path), 'learner', tensorboard=False).write(
      _row(20, 2, 0.25))
  rows = logs.read_csv(lg.path)
  assert [r['env_steps'] for r in rows] == [10, 20]
  assert not (tmp_path / 'discarded').exists()


def test_tensorboard_holds_every_row_under_the_csv_names(tmp_path):
  from tensorboard.backend.event_processing import event_accumulator
  rows = [{'env_steps': 100 * i, 'learner_steps': i, 'loss': 0.5 / (i + 1),
           'round': 2} for i in range(5)]
  logs.Logger(str(tmp_path), 'learner').write(rows[0])
  again = logs.Logger(str(tmp_path), 'learner')  # a resume: a second file
  for row in rows[1:]:
    again.write(row)
  tb = tmp_path / 'tb' / 'learner'
  assert len(list(tb.glob('events.out.tfevents.*'))) == 2
  # Read as TensorBoard itself reads it (its record checksums included).
  acc = event_accumulator.EventAccumulator(str(tb))
  acc.Reload()
  columns = set(logs.read_csv(again.path)[0]) - {'env_steps', 'wall_time'}
  assert set(acc.Tags()['scalars']) == {f'learner/{c}' for c in columns}
  loss = acc.Scalars('learner/loss')
  assert [e.step for e in loss] == [r['env_steps'] for r in rows]
  assert [e.value for e in loss] == pytest.approx(
      [r['loss'] for r in rows], rel=1e-6)
  # The event's wall time is the CSV row's.
  assert [e.wall_time for e in loss] == pytest.approx(
      [r['wall_time'] for r in logs.read_csv(again.path)])


def test_an_optional_column_reaches_tensorboard_only_where_measured(
    tmp_path):
  """A column a run does not measure (NaN) stays in the CSV, so its header
  holds when a resume measures it, but draws no NaN series; a NaN in any
  other column (a loss gone bad) still shows."""
  from tensorboard.backend.event_processing import event_accumulator
  logger = logs.Logger(str(tmp_path), 'evaluator', optional=('sampled',))
  nan = float('nan')
  logger.write({'env_steps': 0, 'learner_steps': 0, 'ret': 1.0,
                'loss': nan, 'sampled': nan})
  logger.write({'env_steps': 100, 'learner_steps': 1, 'ret': 2.0,
                'loss': 0.5, 'sampled': 3.0})
  csv_rows = logs.read_csv(logger.path)
  assert math.isnan(csv_rows[0]['sampled']) and csv_rows[1]['sampled'] == 3.0
  acc = event_accumulator.EventAccumulator(str(tmp_path / 'tb' / 'evaluator'))
  acc.Reload()
  assert [(e.step, e.value) for e in acc.Scalars('evaluator/sampled')] == [
      (100, 3.0)]
  loss = [e.value for e in acc.Scalars('evaluator/loss')]
  assert len(loss) == 2 and math.isnan(loss[0]) and loss[1] == 0.5


def test_tensorboard_drops_the_rows_a_resume_cut_from_the_csv(tmp_path):
  """A killed launch wrote rows past its last checkpoint; the resume moves
  them out of the CSV, and TensorBoard must not show them either."""
  from tensorboard.backend.event_processing import event_accumulator
  from tandem.agents.runtime import resume
  first = logs.Logger(str(tmp_path), 'evaluator')
  for i in range(5):
    first.write({'env_steps': 100 * i, 'learner_steps': i, 'ret': i})
  # The checkpoint was at env step 200: rows 300 and 400 are cut.
  assert resume._cut(first.path, 'env_steps', 200,
                     str(tmp_path / 'discarded')) == 2
  again = logs.Logger(str(tmp_path), 'evaluator')
  for step in (250, 350):
    again.write({'env_steps': step, 'learner_steps': step // 100,
                 'ret': -step})
  acc = event_accumulator.EventAccumulator(str(tmp_path / 'tb' / 'evaluator'))
  acc.Reload()
  shown = [(e.step, e.value) for e in acc.Scalars('evaluator/ret')]
  kept = [(r['env_steps'], r['ret']) for r in logs.read_csv(again.path)]
  assert shown == kept == [(0, 0), (100, 1), (200, 2), (250, -250),
                           (350, -350)]


def test_tensorboard_drops_cut_rows_that_share_the_last_kept_env_step(
    tmp_path):
  """The learner's rows are cut by learner steps: rows past its checkpoint
  can carry the env steps of the last kept row (the actors waited while the
  learner stepped). TensorBoard shows the CSV's rows, no more."""
  from tensorboard.backend.event_processing import event_accumulator
  from tandem.agents.runtime import resume
  first = logs.Logger(str(tmp_path), 'learner')
  for learner_steps, env_steps in enumerate((0, 100, 200, 200, 200, 300)):
    first.write({'env_steps': env_steps, 'learner_steps': learner_steps,
                 'loss': float(learner_steps)})
  # The checkpoint was at learner step 3: rows 4 (env step 200) and 5 go.
  assert resume._cut(first.path, 'learner_steps', 3,
                     str(tmp_path / 'discarded')) == 2
  again = logs.Logger(str(tmp_path), 'learner')
  again.write({'env_steps': 250, 'learner_steps': 4, 'loss': -4.0})
  acc = event_accumulator.EventAccumulator(str(tmp_path / 'tb' / 'learner'))
  acc.Reload()
  shown = [(e.step, e.value) for e in acc.Scalars('learner/loss')]
  kept = [(r['env_steps'], r['loss']) for r in logs.read_csv(again.path)]
  assert shown == kept == [(0, 0.0), (100, 1.0), (200, 2.0), (200, 3.0),
                           (250, -4.0)]
