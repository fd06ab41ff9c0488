"""`--launch vertex_local`: a Vertex AI job run on this machine.

As `gcloud ai custom-jobs local-run` does for one container, each replica
of the job's worker pools becomes a process group of its own, started with
what Vertex AI sets in a replica (CLUSTER_SPEC: every replica's host:port,
here on loopback, and this replica's pool and index) and running the same
command the job's containers run (`tandem replica ...`,
request.replica_args). The replicas share the run directory, as a job's
share its bucket; they find each other only through CLUSTER_SPEC.

The launcher watches: the first replica to exit with an error is reported
by pool and replica with the end of its log, and the others are told to
stop; Ctrl-C stops every replica; once they have exited, any process of
the run still alive is killed, so nothing outlives the launch.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from tandem.agents.core import files
from tandem.agents.runtime import supervision
from tandem.launch import report
from tandem.launch import supervise
from tandem.launch.cloud import cluster
from tandem.launch.cloud import placement
from tandem.launch.cloud import replica as replica_lib
from tandem.launch.cloud import request

HOST = '127.0.0.1'
POLL_S = 0.25
# Beyond the nodes' stop grace, how long replicas may take to exit once a
# stop is under way before they are killed.
EXIT_MARGIN_S = 30.0


@dataclasses.dataclass
class Started:
  replica: placement.Replica
  proc: subprocess.Popen
  log: str
  reported: bool = False


def _free(port: int) -> bool:
  """Whether `port` is free on loopback and on every interface (IPv6 where
  the kernel has it): nodes bind [::]:port."""
  for family, host in ((socket.AF_INET, HOST), (socket.AF_INET6, '::')):
    try:
      with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, port))
    except OSError as e:
      if family == socket.AF_INET6 and e.errno in (errno.EAFNOSUPPORT,
                                                   errno.EADDRNOTAVAIL):
        continue
      return False
  return True


# Below Linux's ephemeral range (32768-60999 by default), so no outgoing
# connection takes a port between its pick and its node's bind.
def port_ranges(sizes: list[int], low: int = 20000, high: int = 32000
                ) -> list[int]:
  """A first port for each replica, with `size` free consecutive ports from
  it, the ranges disjoint (a replica's node k listens on its port + k)."""
  import random
  rng = random.Random()
  taken: set = set()
  bases = []
  for size in sizes:
    for _ in range(1000):
      base = rng.randrange(low, high - size)
      span = range(base, base + size)
      if not taken.intersection(span) and all(_free(p) for p in span):
        taken.update(span)
        bases.append(base)
        break
    else:
      raise OSError(f'no {size} consecutive free ports on {HOST}')
  return bases


def cluster_of(plan: placement.Plan) -> tuple[tuple[str, ...], ...]:
  """Every replica's host:port on loopback, by pool."""
  replicas = plan.replicas
  bases = iter(port_ranges([len(r.nodes) for r in replicas]))
  by_pool: dict[int, list] = {}
  for r in replicas:
    by_pool.setdefault(r.pool, []).append(f'{HOST}:{next(bases)}')
  return tuple(tuple(by_pool[p]) for p in range(len(plan.pools)))


def start_replicas(cfg, rd, *, segment: int, resume: bool) -> list[Started]:
  plan = request.plan_of(cfg)
  pools = cluster_of(plan)
  replicas_dir = os.path.join(rd.segment_nodes(segment), 'replicas')
  os.makedirs(replicas_dir, exist_ok=True)
  env = dict(os.environ)
  env.pop('LAUNCHPAD_LOGGING_DIR', None)
  env[replica_lib.ENV_LOCAL_LAUNCHER] = supervision.this_process().encode()
  env['PYTHONUNBUFFERED'] = '1'
  command = [sys.executable, '-m', 'tandem.launch.cli',
             *request.replica_args(rd.root, segment, resume)]
  started = []
  for r in plan.replicas:
    spec = cluster.ClusterSpec(pools, r.pool, r.index)
    log = os.path.join(replicas_dir, f'{r.name}.log')
    with files.open_to_write(log, 'ab') as out:
      proc = subprocess.Popen(
          command, env={**env, cluster.ENV: spec.to_json()},
          stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
          start_new_session=True)
    started.append(Started(r, proc, log))
  files.write_json_atomic(os.path.join(replicas_dir, 'replicas.json'), {
      s.replica.name: {'pid': s.proc.pid, 'nodes': list(s.replica.nodes),
                       'address': pools[s.replica.pool][s.replica.index]}
      for s in started})
  return started


def _tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, 'rb') as f:
      f.seek(0, os.SEEK_END)
      f.seek(max(0, f.tell() - 8192))
      text = f.read().decode(errors='replace')
  except OSError:
    return ''
  return '\n'.join(text.splitlines()[-lines:])


def _report(s: Started, rc: int) -> None:
  print(f'\nreplica {s.replica.name} ({", ".join(s.replica.nodes)}) '
        f'{report.describe_exit(rc)}; its log: {s.log}', file=sys.stderr)
  tail = _tail(s.log)
  if tail:
    print('  ' + tail.replace('\n', '\n  '), file=sys.stderr)


def _wait(started: list[Started], segment_nodes: str, grace_s: float,
          first: list, failures: bool = True) -> Optional[float]:
  """Until every replica has exited: reports the first that fails (with
  `failures`; not once the launcher itself stopped them) and tells the rest
  to stop; kills replicas that outlast a stop by grace_s + EXIT_MARGIN_S.
  Returns when the stop began (None if never seen)."""
  stop_time = None
  killed: set = set()
  while True:
    running = False
    for s in started:
      rc = s.proc.poll()
      if rc is None:
        running = True
      elif not s.reported:
        s.reported = True
        if rc != 0 and failures and not first and s.replica.name not in killed:
          first.append((s, rc))
          _report(s, rc)
          cluster.request_stop(segment_nodes, 'launcher',
                               f'stopping the job: {s.replica.name} '
                               f'{report.describe_exit(rc)}')
    if not running:
      return stop_time
    if stop_time is None and cluster.read_stop(segment_nodes) is not None:
      stop_time = time.time()
    if stop_time is not None and time.time() > stop_time + grace_s + \
        EXIT_MARGIN_S:
      for s in started:
        if s.proc.poll() is None and s.replica.name not in killed:
          killed.add(s.replica.name)
          print(f'replica {s.replica.name} did not stop within '
                f'{grace_s + EXIT_MARGIN_S:.0f} s; killing it',
                file=sys.stderr)
          _kill_group(s.proc.pid)
    time.sleep(POLL_S)


def _kill_group(pgid: int) -> None:
  try:
    os.killpg(pgid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass


def _leave_nothing(started: list[Started], run_dir: str,
                   grace_s: float) -> None:
  """After the replicas exit, their nodes (which stop with their replica)
  get the grace period to finish; whatever of the run is left then is
  killed (at once with grace_s 0)."""
  deadline = time.time() + (grace_s + 5 if grace_s > 0 else 0)
  while supervision.program_processes(run_dir) and time.time() < deadline:
    time.sleep(POLL_S)
  for s in started:
    _kill_group(s.proc.pid)
  for pid in supervision.program_processes(run_dir):
    try:
      os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass


def launch(cfg, rd, *, resume: bool, segment: int) -> supervise.Outcome:
  """Runs the job's replicas for the run directory `rd` until they end.
  SIGTERM stops it as Ctrl-C does (a `kill`, `docker stop`); a second
  Ctrl-C kills every replica at once.

  While the replicas run SIGINT is handled here whatever this process
  inherited, as a `local_mp` launch (Launchpad's) handles it: a shell
  starts a script's background jobs with SIGINT ignored, and Python then
  leaves it ignored, so without its own handler such a launcher would
  ignore every Ctrl-C or `kill -INT`.
  """
  # Both raise KeyboardInterrupt in the main thread.
  previous = {sig: signal.signal(sig, signal.default_int_handler)
              for sig in (signal.SIGTERM, signal.SIGINT)}
  try:
    return _launch(cfg, rd, resume=resume, segment=segment)
  finally:
    for sig, handler in previous.items():
      signal.signal(sig, handler)


def _launch(cfg, rd, *, resume: bool, segment: int) -> supervise.Outcome:
  segment_nodes = rd.segment_nodes(segment)
  started: list = []
  try:
    started.extend(start_replicas(cfg, rd, segment=segment, resume=resume))
  except BaseException:
    _leave_nothing(started, rd.root, 0.0)
    raise
  pools = request.plan_of(cfg).pools
  print(f'run directory: {rd.root}\nlaunching vertex_local: '
        f'{len(started)} replicas in {len(pools)} worker pools '
        f'({"; ".join(f"workerpool{p.index}: {len(p.replicas)} × " + ",".join(p.groups) for p in pools)}); '
        f'budget {cfg.env_step_budget} env steps\nreplica logs: '
        f'{os.path.join(segment_nodes, "replicas")}'
        f'{supervise.tensorboard_hint(cfg, os.path.join(rd.logs, "tb"))}',
        flush=True)
  stop_watch = threading.Event()
  watcher = threading.Thread(target=supervise.watch_progress,
                             args=(rd.progress, stop_watch), daemon=True)
  watcher.start()
  first: list = []
  interrupted = False
  stop_time = None
  grace = cfg.stop_grace_s
  try:
    try:
      stop_time = _wait(started, segment_nodes, grace, first)
    except KeyboardInterrupt:
      interrupted = True
      stop_time = time.time()
      print('\ninterrupted; stopping every replica (Ctrl-C again kills '
            'them)', file=sys.stderr)
      cluster.request_stop(segment_nodes, 'launcher', 'interrupted')
      try:
        _wait(started, segment_nodes, grace, first, failures=False)
      except KeyboardInterrupt:
        print('\nkilling every replica', file=sys.stderr)
        grace = 0.0
  finally:
    stop_watch.set()
    watcher.join(timeout=5.0)  # its last line end before the report
    _leave_nothing(started, rd.root, grace)
  return supervise.Outcome(interrupted=interrupted and not first,
                           failed=bool(first), stop_time=stop_time)


def replicas_record(rd, segment: int) -> dict:
  """The replicas.json a launch wrote: name -> pid, nodes, address."""
  with open(os.path.join(rd.segment_nodes(segment), 'replicas',
                         'replicas.json')) as f:
    return json.load(f)
