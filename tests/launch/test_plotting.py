"""`tandem plot` writes a learning curve from a run's logs."""

import math

import matplotlib.figure
import pytest

from tandem.agents.runtime import logs
from tandem.launch import cli
from tandem.launch import errors


def test_plot_writes_png_and_rejects_non_runs(tmp_path, capsys):
  run = tmp_path / 'run'
  ev = logs.Logger(str(run / 'logs'), 'evaluator', tensorboard=False)
  act = logs.Logger(str(run / 'logs'), 'actor_0', tensorboard=False)
  for i in range(5):
    ev.write({'env_steps': 1000 * i, 'learner_steps': 100 * i,
              'eval_return': 10.0 * i})
    act.write({'env_steps': 1000 * i, 'learner_steps': 100 * i,
               'episode_return': 5.0 * i})
  assert cli.main(['plot', str(run)]) == 0
  png = run / 'learning_curve.png'
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert cli.main(['plot', str(tmp_path / 'empty')]) == errors.EXIT_BAD_INPUT
  assert 'evaluator' in capsys.readouterr().err


def test_plot_draws_the_samples_return_where_it_was_evaluated(tmp_path,
                                                               monkeypatch):
  drawn = {}
  real = matplotlib.figure.Figure.savefig

  def keep_lines(fig, *args, **kwargs):
    for ax in fig.axes:
      for line in ax.get_lines():
        drawn[line.get_label()] = [float(y) for y in line.get_ydata()]
    return real(fig, *args, **kwargs)
  monkeypatch.setattr(matplotlib.figure.Figure, 'savefig', keep_lines)
  for name, sampled in (('on', [math.nan, 30.0, 50.0]),
                        ('off', [math.nan] * 3)):
    ev = logs.Logger(str(tmp_path / name / 'logs'), 'evaluator',
                     tensorboard=False)
    for i, s in enumerate(sampled):
      ev.write({'env_steps': 1000 * i, 'learner_steps': 100 * i,
                'eval_return': 10.0 * i, 'eval_sampled_return': s})
    drawn.clear()
    assert cli.main(['plot', str(tmp_path / name)]) == 0
    assert drawn['evaluator (mean action)'] == [0.0, 10.0, 20.0]
    if name == 'on':  # the evaluations that ran samples, and only those
      assert drawn['evaluator (samples)'] == [30.0, 50.0]
    else:
      assert 'evaluator (samples)' not in drawn


def _run_with_eval(tmp_path, text: str):
  logs_dir = tmp_path / 'run' / 'logs'
  logs_dir.mkdir(parents=True)
  (logs_dir / 'evaluator.csv').write_text(text)
  return tmp_path / 'run'


@pytest.mark.parametrize('text, named', [
    ('env_steps,learner_steps\n1000,10\n', "no column 'eval_return'"),
    ('env_steps,learner_steps,eval_return\n1000,10,5.0\n2000,20,abc\n',
     "line 3: column 'eval_return' is 'abc'"),
    ('env_steps,learner_steps,eval_return\n,10,5.0\n',
     "line 2: column 'env_steps'"),
])
def test_plot_names_the_log_and_column_it_cannot_draw(tmp_path, capsys, text,
                                                      named):
  run = _run_with_eval(tmp_path, text)
  assert cli.main(['plot', str(run)]) == errors.EXIT_BAD_INPUT
  err = capsys.readouterr().err
  assert 'evaluator.csv' in err and named in err, err
  assert not (run / 'learning_curve.png').exists()


def test_plot_names_a_picture_it_cannot_write(tmp_path, capsys):
  run = _run_with_eval(tmp_path, 'env_steps,learner_steps,eval_return\n'
                       '1000,10,5.0\n')
  out = tmp_path / 'no_such_folder' / 'curve.png'
  assert cli.main(['plot', str(run), '--out', str(out)]) == (
      errors.EXIT_BAD_INPUT)
  assert str(out) in capsys.readouterr().err
  target = tmp_path / 'precious.png'
  target.write_bytes(b'mine')
  (run / 'learning_curve.png').symlink_to(target)
  assert cli.main(['plot', str(run)]) == errors.EXIT_BAD_INPUT
  assert 'symbolic link' in capsys.readouterr().err
  assert target.read_bytes() == b'mine'
