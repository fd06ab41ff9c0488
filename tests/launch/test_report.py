"""What the launcher prints of a failed launch's node logs."""

from tandem.launch import report


def test_failure_shows_node_logs_of_local_and_replica_layouts(tmp_path,
                                                              capsys):
  nodes = tmp_path / 'segment-1'
  (nodes / 'workerpool1-0' / 'learner').mkdir(parents=True)
  (nodes / 'replicas').mkdir()
  (nodes / 'replay_0').write_text('Traceback: the local one\n')
  (nodes / 'workerpool1-0' / 'learner' / '0').write_text(
      'RuntimeError: the replica one\n')
  (nodes / 'workerpool1-0' / 'learner' / '1').write_text('all well\n')
  (nodes / 'replicas' / 'workerpool1-0.log').write_text('Error: launcher\n')
  (nodes / 'stop_times.json').write_text('{"Error": 1}')
  report.print_failure({}, str(nodes))
  err = capsys.readouterr().err
  assert '--- replay_0 (last lines)\nTraceback: the local one' in err
  assert ('--- workerpool1-0/learner/0 (last lines)\nRuntimeError: the '
          'replica one') in err
  # Logs without an error, the replicas' own logs (the launcher shows
  # them) and JSON records are left out.
  assert 'all well' not in err and 'launcher' not in err
  assert 'stop_times' not in err
