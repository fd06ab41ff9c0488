"""What the launcher tells the user when a launch ends: the final return, the
nodes that crashed or were killed, and the command that continues the run.
`conclude` turns a supervised launch's outcome into the exit code."""

from __future__ import annotations

import json
import os
import re
import signal
import sys

from tandem.launch import programs
from tandem.launch.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


def conclude(outcome, rd, cfg, program: programs.Program,
             segment: int, launch: str = 'local_mp') -> int:
  """Reports how the launch `outcome` (supervise.Outcome) ended and returns
  the exit code: 0 at the budget, 1 when a node failed, 130 when stopped
  from outside before the budget. `launch`: the launch type, which every
  resume hint repeats."""
  names = program.node_names(cfg.num_actors)
  if outcome.interrupted:
    if not report_stops(rd, cfg, names, segment, outcome.stop_time, launch):
      print(f'continue with: {resume_command(cfg, rd.root, launch)}',
            file=sys.stderr)
    return EXIT_INTERRUPTED
  final = None
  if os.path.exists(rd.final):
    with open(rd.final) as f:
      final = json.load(f)
  stop_time = outcome.stop_time
  if stop_time is None and final is not None:
    stop_time = final.get('stop_time')
  report_stops(rd, cfg, names, segment, stop_time, launch)
  # Crash reports only: errors/ also holds survived environment faults and
  # the archived reports of earlier launches.
  from tandem.agents.runtime.rundir import read_errors
  errors = read_errors(rd)
  if outcome.failed or errors:
    print_failure(errors, rd.segment_nodes(segment))
    from tandem.agents.core import checkpointing
    latest = checkpointing.latest(rd.learner_checkpoints)
    if latest:
      print(f'latest learner checkpoint: {latest}', file=sys.stderr)
    print(f'\nrun directory: {rd.root} (continue with: '
          f'{failure_resume_command(errors, cfg, rd.root, launch)})',
          file=sys.stderr)
    return EXIT_FAILED
  if final is None:
    # No node failed, yet the budget was not reached: the program was
    # stopped from outside (Ctrl-C, SIGTERM); the nodes saved their state.
    print('\nprogram stopped before its budget; continue with: '
          f'{resume_command(cfg, rd.root, launch)}', file=sys.stderr)
    return EXIT_INTERRUPTED
  print(final_summary(final) + f'\nrun directory: {rd.root}')
  return EXIT_OK


def final_summary(final: dict) -> str:
  """The closing lines of a finished launch, from final.json. The return
  is the final evaluation's, of the checkpoint at `checkpoint_counts` (the
  counts its evaluator.csv row carries; actors may sync a few env steps
  after the learner stopped, which `counts`, read after the evaluation,
  include); throughput is over the counter's final counts."""
  from tandem.agents.runtime import counting
  fps = counting.since_start(final['counts'])['env_steps_per_s_since_start']
  at = final.get('checkpoint_counts') or final['counts']
  sampled = final.get('final_eval_sampled_return')
  return (f'\nthroughput: {fps:.1f} env steps/s over the time the run has '
          'run (all its launches)\n'
          f"\nfinal evaluation return: {final['final_eval_return']:.1f} "
          f"(env steps {at['env_steps']}, learner steps "
          f"{at['learner_steps']})" +
          ('' if sampled is None else
           f'\nits policy\'s samples returned: {sampled:.1f}'))


def resume_command(cfg, run_dir: str, launch: str = 'local_mp') -> str:
  """The command line every stop and failure hint names (with the launch
  type where it is not the default)."""
  return (f'tandem {programs.command_of(type(cfg))} --resume {run_dir}' +
          ('' if launch == 'local_mp' else f' --launch {launch}'))


def failure_resume_command(errors: dict, cfg, run_dir: str,
                           launch: str = 'local_mp') -> str:
  """The closing hint of a failed launch, given its crash reports `errors`
  (rundir.read_errors): a replay checkpoint that did not load fails every
  resume the same way, so that one names --drop_replay."""
  from tandem.agents.nodes.replay_node import ReplayCheckpointLoadError
  command = resume_command(cfg, run_dir, launch)
  if errors.get('replay', '').startswith(
      ReplayCheckpointLoadError.__name__ + ':'):
    return (f'{command} --drop_replay, which keeps the replay checkpoint '
            'that did not load under checkpoints/ and starts from an empty '
            'buffer')
  return command


def describe_failure(e: BaseException) -> str:
  """Launchpad's 'exited with code -9' means killed by signal 9."""
  text = str(e)
  m = re.search(r'exited with code (-\d+)', text)
  return text + _killed_by(int(m.group(1))) if m else text


def describe_exit(code: int) -> str:
  """'exited with code N', naming the signal of a negative N (a process
  killed by signal -N, as subprocess and Launchpad report it)."""
  return f'exited with code {code}' + _killed_by(code)


def _killed_by(code: int) -> str:
  if code >= 0:
    return ''
  try:
    name = signal.Signals(-code).name
  except ValueError:
    name = f'signal {-code}'
  return f' (killed by {name})'


def report_stops(rd, cfg, node_names: list, segment: int,
                 stop_time, launch: str = 'local_mp') -> list[str]:
  """Writes nodes/segment-<k>/stop_times.json (seconds from the stop to
  each node's end) and reports nodes that neither finished nor crashed:
  those were killed, mostly by Launchpad's SIGKILL once stop_grace_s ran
  out. Returns their names."""
  from tandem.agents.core.files import write_json_atomic
  from tandem.agents.runtime.rundir import read_errors, read_stopped
  finished = read_stopped(rd)
  crashed = set(read_errors(rd))
  killed = [n for n in node_names if n not in finished and
            n not in crashed]
  seconds = ({n: round(t - stop_time, 3) for n, t in finished.items()}
             if stop_time else {})
  path = os.path.join(rd.segment_nodes(segment), 'stop_times.json')
  try:
    os.makedirs(rd.segment_nodes(segment), exist_ok=True)
    write_json_atomic(path, {'stop_time': stop_time,
                             'seconds_to_stop': seconds, 'killed': killed,
                             'crashed': sorted(crashed),
                             'stop_grace_s': cfg.stop_grace_s})
  except OSError as e:
    # A full disk must not cost the report below and the resume hint.
    print(f'tandem: warning: could not write {path} ({e.strerror or e}); '
          'the stop report follows here only', file=sys.stderr)
  if killed:
    print(f'\nnode(s) {", ".join(killed)} ended without finishing their stop: '
          'killed by a signal (Launchpad\'s SIGKILL once stop_grace_s='
          f'{cfg.stop_grace_s:g} s ran out, or from outside). What they had '
          'not saved is lost; the learner resumes from its latest checkpoint. '
          'If the grace period was too short, raise stop_grace_s. Continue '
          f'with: {resume_command(cfg, rd.root, launch)}', file=sys.stderr)
  return killed


def print_failure(errors: dict, nodes_dir: str) -> None:
  if errors:
    for node, text in errors.items():
      print(f'\nnode {node} crashed:\n{text}', file=sys.stderr)
    return
  # A node that died without Python (e.g. the Reverb server): show the tail
  # of any node log that mentions an error.
  print('\na node exited with an error; node logs under '
        f'{nodes_dir}:', file=sys.stderr)
  for name in _node_logs(nodes_dir):
    p = os.path.join(nodes_dir, name)
    text = open(p, errors='replace').read()
    if 'Traceback' in text or 'Error' in text:
      print(f'--- {name} (last lines)\n' + '\n'.join(text.splitlines()[-15:]),
            file=sys.stderr)


def _node_logs(nodes_dir: str) -> list[str]:
  """The node logs under nodes_dir, as paths relative to it: files there
  (local_mp), or under each replica's folder (vertex_local:
  <replica>/<group>/<index>); not the replicas' own logs, which the
  launcher reports, nor the JSON records beside them."""
  found = []
  for root, dirs, names in os.walk(nodes_dir):
    dirs[:] = sorted(d for d in dirs if d != 'replicas')
    found.extend(os.path.relpath(os.path.join(root, n), nodes_dir)
                 for n in sorted(names) if not n.endswith('.json'))
  return found
