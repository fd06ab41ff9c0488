"""`tandem replica`: one replica of a Vertex AI job runs its nodes.

Every replica of the job runs this same command (the image's entrypoint
with request.replica_args). It reads the run's config.json from the shared
run directory, builds the program exactly as a local launch does, binds
every node's address to its replica's place in CLUSTER_SPEC, and starts the
nodes placed on this replica as local processes (Launchpad's local_mp, one
process per node). A replica's nodes reach the others only through those
addresses.

Its stop is the job's: when this replica's stop begins (the limiter ends
the run, a node fails, SIGTERM), it tells the others through the run
directory (cluster.request_stop); when another's stop is seen, it stops its
own nodes, which checkpoint on the way down as in any stop. Exit 0 when its
nodes stopped cleanly, 1 when one failed.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from tandem.agents.runtime import supervision
from tandem.agents.runtime.rundir import RunDir
from tandem.launch import config as config_lib
from tandem.launch import prepare
from tandem.launch import programs
from tandem.launch import report
from tandem.launch import resolve
from tandem.launch import supervise
from tandem.launch.cloud import cluster
from tandem.launch.cloud import placement
from tandem.launch.cloud import request
from tandem.launch.errors import EXIT_FAILED, EXIT_OK, UsageError

# Set by --launch vertex_local: the launcher's "<pid>:<start time>"; a
# replica stops once that process is gone, as local nodes do (Vertex AI's
# replicas have no such launcher).
ENV_LOCAL_LAUNCHER = 'TANDEM_VERTEX_LOCAL_LAUNCHER'
STOP_POLL_S = 0.5


def run(run_dir: str, segment: int, resume: bool) -> int:
  """Runs this replica's nodes until the job stops; returns the exit code.
  Bad input (CLUSTER_SPEC, config.json) raises UsageError first."""
  spec = cluster.ClusterSpec.from_environ()
  rd = RunDir(run_dir)
  data = resolve.read_run_json(rd.config, f'tandem replica --run_dir {run_dir}')
  cfg = config_lib.from_dict(data)
  program = programs.for_config(cfg)
  plan = request.plan_of(cfg)
  mine = spec.own_replica(plan)
  segment_nodes = rd.segment_nodes(segment)
  try:
    _check_launch(rd, segment, mine)
  except UsageError:
    cluster.request_stop(segment_nodes, mine.name, 'refused to start')
    raise
  # The replica process itself builds the program only: the learner's
  # accelerator is for the learner's process.
  import jax
  jax.config.update('jax_platforms', 'cpu')
  # As lp.launch does first (Launchpad's worker manager reads its flags),
  # before set_up_launchpad sets one.
  from absl import flags
  if not flags.FLAGS.is_parsed():
    flags.FLAGS([sys.argv[0]], known_only=True)
  supervise.set_up_launchpad(rd, cfg, os.path.join(segment_nodes, mine.name))
  try:
    built = program.build(cfg, run_dir, resume=resume, segment=segment)
    manager = start_nodes(built, plan, mine,
                          program.local_resources('local_mp'))
  except BaseException:
    cluster.request_stop(segment_nodes, mine.name, 'failed to start')
    raise
  print(f'{mine.name}: started {", ".join(mine.nodes)}', flush=True)
  _tell_others_on_stop(manager, segment_nodes, mine)
  _stop_when_told(segment_nodes, mine)
  launcher = os.environ.get(ENV_LOCAL_LAUNCHER)
  if launcher:
    supervision.exit_with_launcher(supervision.Launcher.decode(launcher),
                                   grace_s=cfg.stop_grace_s + 10)
  try:
    manager.wait()
  except BaseException as e:  # noqa: BLE001  (a node failed; the manager stops the rest)
    print(f'{mine.name}: a node failed: {report.describe_failure(e)}',
          file=sys.stderr, flush=True)
    cluster.request_stop(segment_nodes, mine.name, 'a node failed')
    try:
      manager.wait(raise_error=False)
    except BaseException:  # noqa: BLE001  (the failure above is the one reported)
      pass
    return EXIT_FAILED
  print(f'{mine.name}: stopped', flush=True)
  return EXIT_OK


def _check_launch(rd: RunDir, segment: int,
                  mine: placement.Replica) -> None:
  """A UsageError unless this replica belongs to the run's latest launch
  and starts for the first time in it: a job left from an earlier launch
  (still queued, or sent twice) would otherwise train with the later
  launch's config.json, and a replica restarted in the middle of a job
  would start its nodes from scratch (a fresh counter, an untrained
  learner) beside the others. Either way, resume the run instead."""
  latest = prepare.next_segment(rd) - 1
  if segment != latest:
    raise UsageError(
        f'--segment {segment}: the run in {rd.root} was last launched as '
        f'segment {latest}; this replica belongs to another launch of it')
  marker = os.path.join(rd.segment_nodes(segment), 'replicas',
                        f'{mine.name}.started')
  os.makedirs(os.path.dirname(marker), exist_ok=True)
  try:
    os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
  except FileExistsError:
    raise UsageError(
        f'{mine.name} already started in segment {segment} of {rd.root}: a '
        'replica restarted within a job would start its nodes from scratch; '
        'resume the run instead (tandem train --resume ...)') from None


def start_nodes(built, plan: placement.Plan, mine: placement.Replica,
                resources: dict):
  """Launchpad's local_mp launch of `built`, with every node's address bound
  to its place in the cluster and only `mine`'s nodes started; returns the
  worker manager."""
  from launchpad import context
  from launchpad.launch.run_locally import run_locally
  for label, nodes in built.groups.items():
    for node in nodes:
      node._initialize_context(  # noqa: SLF001  (lp.launch's own first step; no public form)
          context.LaunchType.LOCAL_MULTI_PROCESSING,
          launch_config=resources.get(label))
  for label, nodes in built.groups.items():
    for node in nodes:
      for handle in node.input_handles:
        handle.connect(node, label)
  commands = []
  for label, nodes in built.groups.items():
    own = []
    for i, node in enumerate(nodes):
      name = placement.node_name(label, i)
      replica, slot = plan.where(name)
      if len(node.addresses) > 1:
        raise UsageError(f'node {name} has {len(node.addresses)} addresses; '
                         'a replica gives each node one port')
      for address in node.addresses:
        address.bind(cluster.ClusterAddress(replica.pool, replica.index, slot))
      if name in mine.nodes:
        own.append(node)
    if own:
      commands.extend(own[0].to_executables(own, label, own[0].launch_context))
  manager = run_locally.run_commands_locally(commands, 'output_to_files')
  # As in a local launch (supervise.launch): the replica stays alive to
  # report a node killed at the end of the grace period.
  manager._kill_main_thread = False  # noqa: SLF001  (no public setting)
  return manager


def _tell_others_on_stop(manager, segment_nodes: str,
                         mine: placement.Replica) -> None:
  def watch():
    manager.stop_event().wait()
    cluster.request_stop(segment_nodes, mine.name, 'stopping')
  threading.Thread(target=watch, daemon=True, name='tell-others').start()


def _stop_when_told(segment_nodes: str, mine: placement.Replica) -> None:
  """Once another replica's stop is seen, stops this one's nodes the way a
  local stop does (SIGTERM to this process: Launchpad's handler)."""
  def watch():
    while True:
      stop = cluster.read_stop(segment_nodes)
      if stop is not None and stop.get('by') != mine.name:
        print(f"{mine.name}: stopping: {stop.get('by')} is "
              f"{stop.get('reason')}", flush=True)
        os.kill(os.getpid(), signal.SIGTERM)
        return
      time.sleep(STOP_POLL_S)
  threading.Thread(target=watch, daemon=True, name='stop-watch').start()
