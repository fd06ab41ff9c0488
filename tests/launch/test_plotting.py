"""`tandem plot` writes a learning curve from a run's logs."""

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
