"""What Vertex AI tells a replica about its job, and the stop every replica
shares.

Vertex AI sets CLUSTER_SPEC in every replica of a CustomJob:

    {"cluster": {"workerpool0": ["<host>:<port>"], "workerpool1": [...], ...},
     "task": {"type": "workerpool1", "index": 0}, "environment": "cloud"}

A replica finds its own pool and index in `task`, and every node's address
from `cluster` and the placement (placement.py): node k of a replica listens
on the replica's port + k. `--launch vertex_local` sets the same variable,
with loopback addresses, in each replica it starts.

Stopping: a replica whose stop begins (the limiter's end of the run, a
failed node, a SIGTERM from Vertex AI or the local launcher) writes
`nodes/segment-<k>/replicas/stop` in the shared run directory, and every
replica that sees it stops its own nodes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Optional

from tandem.agents.core import files
from tandem.launch.cloud import placement
from tandem.launch.errors import UsageError

ENV = 'CLUSTER_SPEC'
STOP_FILE = 'stop'


def _pool_index(name: str) -> Optional[int]:
  prefix = 'workerpool'
  if name.startswith(prefix) and name[len(prefix):].isdigit():
    return int(name[len(prefix):])
  return None


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
  """CLUSTER_SPEC, checked: addresses by pool and this replica's place."""
  pools: tuple[tuple[str, ...], ...]   # pools[p][i]: 'host:port'
  pool: int
  index: int

  @staticmethod
  def parse(text: Optional[str]) -> 'ClusterSpec':
    """A UsageError naming CLUSTER_SPEC and what is wrong with it."""
    def bad(what: str):
      raise UsageError(f'{ENV}: expected {what} (Vertex AI sets it in every '
                       f'replica; --launch vertex_local does too), got '
                       f'{(text or "")[:200]!r}')
    if not text:
      bad('the JSON Vertex AI sets')
    try:
      data = json.loads(text)
    except ValueError:
      bad('JSON')
    if not isinstance(data, dict) or not isinstance(data.get('cluster'), dict) \
        or not isinstance(data.get('task'), dict):
      bad('an object with "cluster" and "task"')
    cluster = {}
    for name, addresses in data['cluster'].items():
      p = _pool_index(name)
      if p is None or not isinstance(addresses, list) or not all(
          isinstance(a, str) and a.rpartition(':')[2].isdigit()
          for a in addresses):
        bad(f'"cluster" of workerpool<N>: ["host:port", ...] ({name!r})')
      cluster[p] = tuple(addresses)
    if sorted(cluster) != list(range(len(cluster))):
      bad('pools workerpool0, workerpool1, ... without gaps')
    pool = _pool_index(str(data['task'].get('type')))
    index = data['task'].get('index')
    if pool not in cluster or not isinstance(index, int) or not (
        0 <= index < len(cluster[pool])):
      bad('a "task" {"type": "workerpool<N>", "index": <i>} of the cluster')
    return ClusterSpec(tuple(cluster[p] for p in range(len(cluster))), pool,
                       index)

  @staticmethod
  def from_environ() -> 'ClusterSpec':
    return ClusterSpec.parse(os.environ.get(ENV))

  def to_json(self) -> str:
    return json.dumps({
        'cluster': {f'workerpool{p}': list(a)
                    for p, a in enumerate(self.pools)},
        'task': {'type': f'workerpool{self.pool}', 'index': self.index},
        'environment': 'cloud'})

  def own_replica(self, plan: placement.Plan) -> placement.Replica:
    """This replica's nodes, after checking that the cluster has the pools
    and replica counts the job's placement gives (a UsageError otherwise:
    the job was not made for this run's config)."""
    sizes = tuple(len(a) for a in self.pools)
    want = tuple(len(p.replicas) for p in plan.pools)
    if sizes != want:
      raise UsageError(
          f'{ENV}: the cluster has {sizes} replicas per pool, the run\'s '
          f'config.json places its nodes on {want} (cloud.pools, num_actors, '
          'cloud.actors_per_replica): the job was made for another config')
    return plan.replica(self.pool, self.index)


class ClusterAddress:
  """A node's address from CLUSTER_SPEC, resolved where it is used (the
  node's own process or a peer's): the replica's host and its port + slot.
  Launchpad calls `build()` (lp.Address.resolve)."""

  def __init__(self, pool: int, index: int, slot: int):
    self._where = (pool, index, slot)

  def build(self) -> str:
    pool, index, slot = self._where
    host, _, port = ClusterSpec.from_environ().pools[pool][index].rpartition(
        ':')
    return f'{host}:{int(port) + slot}'


def stop_path(segment_nodes: str) -> str:
  return os.path.join(segment_nodes, 'replicas', STOP_FILE)


def request_stop(segment_nodes: str, by: str, reason: str) -> None:
  """Tells every replica of this launch to stop. The first writer's reason
  stays: the file is written aside and linked into place, which fails once
  it exists."""
  path = stop_path(segment_nodes)
  if os.path.exists(path):
    return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  aside = f'{path}.{by}.{os.getpid()}'
  files.write_json_atomic(aside, {'by': by, 'reason': reason,
                                  'time': time.time()})
  try:
    os.link(aside, path)
  except FileExistsError:
    pass
  finally:
    os.unlink(aside)


def read_stop(segment_nodes: str) -> Optional[dict]:
  try:
    with open(stop_path(segment_nodes)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None
