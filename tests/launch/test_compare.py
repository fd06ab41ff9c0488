"""`tandem compare`: runs grouped, medians and quartiles over seeds."""

import json
import os

import numpy as np
import pytest

from tandem.agents.runtime import logs
from tandem.launch import cli
from tandem.launch import compare
from tandem.launch import errors


def _run(root, name, seed, returns, estep='next', seconds_per_step=0.01,
         env='cartpole:swingup', finished=True):
  """A run directory with a config.json and evaluations every 1000 steps;
  `finished`: with the final.json a run writes at its budget."""
  path = root / name
  (path / 'logs').mkdir(parents=True)
  (path / 'config.json').write_text(json.dumps(
      {'seed': seed, 'env': env, 'mpo': {'estep_states': estep}}))
  log = logs.Logger(str(path / 'logs'), 'evaluator', tensorboard=False)
  for i, r in enumerate(returns):
    log.write({'env_steps': 1000 * i, 'learner_steps': 10 * i,
               'elapsed_s': 1000 * i * seconds_per_step, 'eval_return': r})
  if finished:
    (path / 'final.json').write_text(json.dumps(
        {'final_eval_return': returns[-1]}))
  return str(path)


@pytest.fixture
def runs(tmp_path):
  """Group a (3 seeds) learns faster and ends higher than group b (3)."""
  return [
      _run(tmp_path, 'a_s0', 0, [0, 40, 80, 100]),
      _run(tmp_path, 'a_s1', 1, [0, 50, 90, 110]),
      _run(tmp_path, 'a_s2', 2, [0, 30, 70, 90]),
      _run(tmp_path, 'b_s0', 0, [0, 10, 30, 60], estep='current'),
      _run(tmp_path, 'b_s1', 1, [0, 20, 40, 70], estep='current'),
      _run(tmp_path, 'b_s2', 2, [0, 10, 20, 40], estep='current',
           seconds_per_step=0.02),
  ]


def test_groups_by_name_without_seed_and_by_a_config_field(runs):
  by_name = compare.group([compare.read_run(p, None) for p in runs])
  assert list(by_name) == ['a', 'b']
  by_field = compare.group([compare.read_run(p, 'mpo.estep_states')
                            for p in runs])
  assert list(by_field) == ['mpo.estep_states=next',
                            'mpo.estep_states=current']
  assert [len(v) for v in by_field.values()] == [3, 3]


def test_the_table_holds_quartiles_thresholds_and_paired_differences(runs):
  groups = compare.group([compare.read_run(p, None) for p in runs])
  rows, best = compare.group_table(groups)
  a, b = rows
  assert best == 100.0  # a's median final
  assert a['final'] == (95.0, 100.0, 105.0)  # finals 100, 110, 90
  assert b['final'] == (50.0, 60.0, 65.0)    # finals 60, 70, 40
  # 50% of 100: a's runs reach it at 2000, 1000, 2000 steps -> median 2000;
  # b's at 3000, 3000 and never -> median 3000 (a late run counts as late).
  assert a['steps_0.5'] == 2000 and b['steps_0.5'] == 3000
  # 90%: a at 3000, 2000, 3000 -> 3000; b never -> no median.
  assert a['steps_0.9'] == 3000 and b['steps_0.9'] is None
  # Wall-clock: b_s2 runs at half speed; b's runs reach 50% at 30, 30 s and
  # never.
  assert b['seconds_0.5'] == pytest.approx(30.0)
  # Paired over seeds: 60-100, 70-110, 40-90 -> median -40.
  assert a['paired'] is None and b['paired'] == (-40.0, 3)
  table = compare.markdown(rows, best)
  assert '| b | 3 | 60.0 [50.0, 65.0] | 3,000 |' in table
  assert '-40.0 (3 seeds)' in table


def test_medians_on_a_grid_stop_where_each_run_stops(tmp_path):
  short = compare.read_run(_run(tmp_path, 's_s0', 0, [0, 10]), None)
  long = compare.read_run(_run(tmp_path, 's_s1', 1, [0, 20, 40]), None)
  values = compare.on_grid([short, long], 'steps',
                           np.array([0., 500., 1000., 1500., 2000.]))
  np.testing.assert_allclose(values[0], [0, 5, 10, np.nan, np.nan])
  np.testing.assert_allclose(values[1], [0, 10, 20, 30, 40])


def test_the_curves_are_quartiles_over_runs_up_to_the_shortest(runs,
                                                                tmp_path):
  groups = compare.group([compare.read_run(p, None) for p in runs])
  x, q1, q2, q3 = compare.curves(groups['a'], 'steps',
                                 np.array([500., 1000., 3000.]))
  # At 500 steps a's runs are at 20, 25, 15; at 1000 at 40, 50, 30; at
  # 3000 at 100, 110, 90: quartiles with linear interpolation.
  np.testing.assert_allclose(x, [500, 1000, 3000])
  np.testing.assert_allclose(q1, [17.5, 35, 95])
  np.testing.assert_allclose(q2, [20, 40, 100])
  np.testing.assert_allclose(q3, [22.5, 45, 105])
  # Against wall-clock: b_s0 and b_s1 evaluate every 10 s, b_s2 (at half
  # speed) every 20 s: at 15 s they are at 20, 30 and 7.5. Past 30 s only
  # b_s2 goes on, so the curve ends at 30 s.
  x, q1, q2, q3 = compare.curves(groups['b'], 'seconds',
                                 np.array([15., 30., 45., 60.]))
  np.testing.assert_allclose(x, [15, 30])
  np.testing.assert_allclose(q1, [13.75, 37.5])  # 30 s: 60, 70 and 15
  np.testing.assert_allclose(q2, [20, 60])
  np.testing.assert_allclose(q3, [25, 65])
  # Runs of different lengths: the curve stops at the shorter one's end.
  short = compare.read_run(_run(tmp_path, 's_s0', 0, [0, 10]), None)
  long = compare.read_run(_run(tmp_path, 's_s1', 1, [0, 20, 40]), None)
  x, q1, q2, q3 = compare.curves([short, long], 'steps',
                                 np.array([500., 1000., 2000.]))
  np.testing.assert_allclose(x, [500, 1000])
  np.testing.assert_allclose(q1, [6.25, 12.5])
  np.testing.assert_allclose(q2, [7.5, 15])
  np.testing.assert_allclose(q3, [8.75, 17.5])


def test_the_picture_draws_those_curves_on_both_axes(runs):
  groups = compare.group([compare.read_run(p, None) for p in runs])
  fig = compare.figure(groups)
  try:
    for ax, axis, end in zip(fig.axes, ('steps', 'seconds'), (3000, 60)):
      grid = np.linspace(0, end, 200)
      for line, band, (label, group_runs) in zip(ax.lines, ax.collections,
                                                 groups.items()):
        x, q1, q2, q3 = compare.curves(group_runs, axis, grid)
        assert line.get_label() == f'{label} (n=3)'
        np.testing.assert_allclose(line.get_xdata(), x)
        np.testing.assert_allclose(line.get_ydata(), q2)
        # The band's outline: at each point, from q1 up to q3.
        vertices = band.get_paths()[0].vertices
        for xi, lo, hi in zip(x[::20], q1[::20], q3[::20]):
          ys = vertices[np.isclose(vertices[:, 0], xi), 1]
          assert ys.min() == pytest.approx(lo)
          assert ys.max() == pytest.approx(hi)
      assert len(ax.lines) == len(ax.collections) == 2
  finally:
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_compare_prints_the_table_and_writes_the_picture(runs, tmp_path,
                                                         capsys):
  out = tmp_path / 'cmp.png'
  assert cli.main(['compare', *runs, '--out', str(out)]) == errors.EXIT_OK
  printed = capsys.readouterr().out
  assert '| a | 3 |' in printed and '| b | 3 |' in printed
  assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


@pytest.mark.parametrize('damage, named', [
    ('no_config', 'config.json'),
    ('no_evaluations', 'no evaluation yet'),
    ('text_return', "column 'eval_return' is 'abc'"),
])
def test_compare_names_a_run_it_cannot_read(tmp_path, capsys, damage,
                                            named):
  good = _run(tmp_path, 'g_s0', 0, [0, 10])
  bad = _run(tmp_path, 'x_s0', 0, [0, 10])
  csv_path = os.path.join(bad, 'logs', 'evaluator.csv')
  if damage == 'no_config':
    os.remove(os.path.join(bad, 'config.json'))
  elif damage == 'no_evaluations':
    with open(csv_path) as f:
      header = f.readline()
    with open(csv_path, 'w') as f:
      f.write(header)
  else:
    import csv
    with open(csv_path, newline='') as f:
      rows = list(csv.DictReader(f))
    rows[-1]['eval_return'] = 'abc'
    with open(csv_path, 'w', newline='') as f:
      writer = csv.DictWriter(f, fieldnames=list(rows[0]))
      writer.writeheader()
      writer.writerows(rows)
  rc = cli.main(['compare', good, bad, '--out', str(tmp_path / 'c.png')])
  err = capsys.readouterr().err
  assert rc == errors.EXIT_BAD_INPUT and named in err, err
  assert not (tmp_path / 'c.png').exists()


def test_an_unfinished_run_is_counted_and_named(runs, tmp_path, capsys):
  late = _run(tmp_path, 'a_s3', 3, [0, 20], finished=False)
  assert cli.main(['compare', *runs, late, '--out',
                   str(tmp_path / 'c.png')]) == errors.EXIT_OK
  printed = capsys.readouterr().out
  assert '| a | 4 (1 unfinished) |' in printed and '| b | 3 |' in printed
  assert printed.count('unfinished (no final.json') == 1 and late in printed


def test_runs_named_alike_in_two_folders_are_two_groups_whatever_the_seeds(
    tmp_path, monkeypatch, capsys):
  first = [_run(tmp_path / 'study_a', f'gail_s{i}', i, [0, 100]) for i in
           range(2)]
  later = [_run(tmp_path / 'study_b', f'gail_s{i}', i, [0, 50]) for i in
           range(2, 4)]
  # Named from inside study_a: bare names, the folder is still known.
  monkeypatch.chdir(tmp_path / 'study_a')
  assert cli.main(['compare', 'gail_s0', 'gail_s1', *later, '--out',
                   str(tmp_path / 'c.png')]) == errors.EXIT_OK
  out = capsys.readouterr().out
  assert '| study_a/gail | 2 |' in out and '| study_b/gail | 2 |' in out
  assert len(first) == 2


def test_runs_named_alike_in_two_folders_are_two_groups(tmp_path, capsys):
  first = [_run(tmp_path / 'study_a', f'gail_s{i}', i, [0, 100]) for i in
           range(2)]
  second = [_run(tmp_path / 'study_b', f'gail_s{i}', i, [0, 50]) for i in
            range(2)]
  assert cli.main(['compare', *first, *second, '--out',
                   str(tmp_path / 'c.png')]) == errors.EXIT_OK
  out = capsys.readouterr()
  assert '| study_a/gail | 2 |' in out.out
  assert '| study_b/gail | 2 |' in out.out and '-50.0 (2 seeds)' in out.out
  assert 'warning' not in out.err
  # Grouped by a field both share, the seeds repeat within one group: said.
  assert cli.main(['compare', *first, *second, '--by', 'mpo.estep_states',
                   '--out', str(tmp_path / 'c.png')]) == errors.EXIT_OK
  err = capsys.readouterr().err
  assert 'group mpo.estep_states=next holds seed(s) 0, 1 more than once' in err


@pytest.mark.parametrize('out, why', [
    ('missing_dir/c.png', 'does not exist or is not writable'),
    ('a_folder.png', 'is a directory')])
def test_an_unusable_out_is_refused_before_any_run_is_read(tmp_path, capsys,
                                                           out, why):
  (tmp_path / 'a_folder.png').mkdir()
  rc = cli.main(['compare', str(tmp_path / 'not_a_run'), '--out',
                 str(tmp_path / out)])
  err = capsys.readouterr().err
  assert rc == errors.EXIT_BAD_INPUT and why in err, err
  assert 'not_a_run' not in err and not (tmp_path / 'missing_dir').exists()


def test_an_unknown_by_field_is_named(runs, tmp_path, capsys):
  rc = cli.main(['compare', *runs, '--by', 'mpo.nope',
                 '--out', str(tmp_path / 'c.png')])
  assert rc == errors.EXIT_BAD_INPUT
  assert '--by mpo.nope' in capsys.readouterr().err


def test_thresholds_can_be_fractions_of_a_reference_return(runs, tmp_path,
                                                           capsys):
  groups = compare.group([compare.read_run(p, None) for p in runs])
  rows, best = compare.group_table(groups, reference=200.0)
  a, b = rows
  assert best == 200.0
  # 50% of 200 = 100: only a_s0 (100 at 3000) and a_s1 (110 at 3000) reach
  # it, so a's median is 3000; 90% = 180: nobody.
  assert a['steps_0.5'] == 3000 and b['steps_0.5'] is None
  assert a['steps_0.9'] is None
  assert a['final'] == (95.0, 100.0, 105.0)   # finals are not rescaled
  out = tmp_path / 'cmp.png'
  assert cli.main(['compare', *runs, '--out', str(out),
                   '--reference', '200']) == errors.EXIT_OK
  assert 'of 200.0, the --reference return' in capsys.readouterr().out
  assert cli.main(['compare', *runs, '--out', str(out),
                   '--reference', '-1']) == errors.EXIT_BAD_INPUT
  assert '--reference' in capsys.readouterr().err


def test_without_a_positive_return_no_threshold_is_made_up(tmp_path,
                                                          capsys):
  # Pendulum-like returns: the best group's median final is -150, and
  # "90% of it" (-135) would lie above every curve.
  runs = [_run(tmp_path, f'p_s{i}', i, [-1200, -600 + 10 * i, -150 + i])
          for i in range(3)]
  out = tmp_path / 'cmp.png'
  assert cli.main(['compare', *runs, '--out', str(out)]) == errors.EXIT_OK
  printed = capsys.readouterr().out
  assert '| p | 3 | -149.0 [-149.5, -148.5] | - |' in printed
  assert 'env steps to' not in printed and 'wall-clock to' not in printed
  assert 'no thresholds' in printed and '-149.0' in printed
  rows, best = compare.group_table(
      compare.group([compare.read_run(p, None) for p in runs]))
  assert best == -149.0 and rows[0]['steps_0.5'] is None


def test_runs_of_different_tasks_are_refused_by_name(runs, tmp_path, capsys):
  walker = _run(tmp_path, 'w_s0', 0, [0, 10], env='walker:walk')
  out = tmp_path / 'c.png'
  rc = cli.main(['compare', runs[0], runs[3], walker, '--out', str(out)])
  err = capsys.readouterr().err
  assert rc == errors.EXIT_BAD_INPUT
  assert (f'cartpole:swingup ({runs[0]}, {runs[3]}); walker:walk ({walker})'
          in err), err
  assert not out.exists()


def test_a_reader_that_goes_away_ends_it_without_a_traceback(runs, tmp_path,
                                                             monkeypatch):
  # `tandem compare ... | head -1`: the pipe's reader is gone before the
  # table is written.
  read_end, write_end = os.pipe()
  os.close(read_end)
  # Block-buffered, as a pipe's stdout is: the write fails at the flush.
  stdout = os.fdopen(write_end, 'w')
  monkeypatch.setattr('sys.stdout', stdout)
  try:
    rc = cli.main(['compare', *runs, '--out', str(tmp_path / 'c.png')])
  finally:
    stdout.close()
  assert rc == 141
