"""Which replica of which worker pool runs which node, and on which port.

A Vertex AI CustomJob has at most 4 worker pools; pool 0 has exactly one
replica (Vertex AI's primary). Tandem's program has six node groups
(`GROUPS`), so pools share them. `cloud.pools` names the groups of each
pool, pools separated by `;`, groups by `,`:

    replay,counter,evaluator,limiter;learner;actor   (the default)

- every group is placed exactly once;
- `actor` has a pool of its own, not pool 0: its replicas each run
  `cloud.actors_per_replica` actors (the last one the rest), so the pool has
  ceil(num_actors / actors_per_replica) replicas;
- every other pool has one replica, whose nodes are its groups' single
  nodes, in the order written.

A replica's nodes listen on consecutive ports from the port Vertex AI gives
it in CLUSTER_SPEC (`host:port` of the replica): node k on port + k. Both
sides of the job use this module: the launcher to size the pools of its
request, every replica to find its own nodes and everyone else's address.
"""

from __future__ import annotations

import dataclasses
import math

from tandem.agents.core.fields import ConfigError

# The node groups of both programs (launch/mpo.py builds them; the
# adversarial program is the same program with another learner).
GROUPS = ('replay', 'counter', 'learner', 'actor', 'evaluator', 'limiter')
MAX_POOLS = 4  # Vertex AI's limit on a CustomJob's worker pools
ACTOR = 'actor'
LEARNER = 'learner'


def _fail(expected: str, got) -> None:
  raise ConfigError(f'cloud.pools: expected {expected}, got {got!r}')


def parse_pools(text: str) -> tuple[tuple[str, ...], ...]:
  """'a,b;c' -> (('a', 'b'), ('c',)), with the rules above checked; a
  broken rule is a ConfigError naming cloud.pools."""
  if not isinstance(text, str) or not text.strip():
    _fail(f'pools of node groups, e.g. {DEFAULT_POOLS!r}', text)
  pools = tuple(tuple(g.strip() for g in pool.split(',') if g.strip())
                for pool in text.split(';'))
  if any(not pool for pool in pools):
    _fail('no empty pool (pools are separated by ";", groups by ",")', text)
  if len(pools) > MAX_POOLS:
    _fail(f'at most {MAX_POOLS} pools (Vertex AI\'s limit on a CustomJob\'s '
          f'worker pools); {len(pools)} given', text)
  placed = [g for pool in pools for g in pool]
  unknown = sorted(set(placed) - set(GROUPS))
  if unknown:
    _fail(f'node groups among {list(GROUPS)}; unknown: {unknown}', text)
  twice = sorted({g for g in placed if placed.count(g) > 1})
  if twice:
    _fail(f'each group in one pool only; placed more than once: {twice}', text)
  missing = [g for g in GROUPS if g not in placed]
  if missing:
    _fail(f'every node group placed; missing: {missing}', text)
  actor_pool = next(i for i, pool in enumerate(pools) if ACTOR in pool)
  if actor_pool == 0 or len(pools[actor_pool]) > 1:
    _fail('"actor" alone in a pool other than pool 0 (its pool has one '
          'replica per actors_per_replica actors; pool 0 has exactly one '
          'replica)', text)
  return pools


DEFAULT_POOLS = 'replay,counter,evaluator,limiter;learner;actor'


@dataclasses.dataclass(frozen=True)
class Replica:
  """One replica of one worker pool and the nodes it runs, by the names
  crash reports use ('replay', 'actor_3')."""
  pool: int
  index: int
  nodes: tuple[str, ...]

  @property
  def name(self) -> str:
    return f'workerpool{self.pool}-{self.index}'


@dataclasses.dataclass(frozen=True)
class Pool:
  index: int
  groups: tuple[str, ...]
  replicas: tuple[Replica, ...]

  @property
  def has_learner(self) -> bool:
    return LEARNER in self.groups


@dataclasses.dataclass(frozen=True)
class Plan:
  """The pools of one job and where each node lives."""
  pools: tuple[Pool, ...]

  @property
  def replicas(self) -> tuple[Replica, ...]:
    return tuple(r for p in self.pools for r in p.replicas)

  def replica(self, pool: int, index: int) -> Replica:
    return self.pools[pool].replicas[index]

  def where(self, node: str) -> tuple[Replica, int]:
    """The replica running `node` and its slot there (its port offset)."""
    for r in self.replicas:
      if node in r.nodes:
        return r, r.nodes.index(node)
    raise KeyError(node)


def node_name(group: str, index: int) -> str:
  """A node's name from its group and its index in the group (as the
  program's node_names lists them)."""
  return f'{ACTOR}_{index}' if group == ACTOR else group


def plan(pools_text: str, num_actors: int, actors_per_replica: int) -> Plan:
  """The job's pools for `num_actors` actors (see the module docstring)."""
  pools = []
  for p, groups in enumerate(parse_pools(pools_text)):
    if groups == (ACTOR,):
      count = math.ceil(num_actors / actors_per_replica)
      replicas = tuple(
          Replica(p, r, tuple(node_name(ACTOR, i) for i in range(
              r * actors_per_replica,
              min(num_actors, (r + 1) * actors_per_replica))))
          for r in range(count))
    else:
      replicas = (Replica(p, 0, tuple(groups)),)
    pools.append(Pool(p, groups, replicas))
  return Plan(tuple(pools))
