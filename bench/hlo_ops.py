"""How many operations one MPO SGD step compiles to: a proxy, on any
device, for the kernels a step launches on an accelerator.

    python bench/hlo_ops.py [--tasks cartpole_swingup,walker_walk]
                            [--steps_per_call 10] [--top 12]
                            [bench/learner.py's other shape flags]

On a GPU a step is bound by the latency of a long chain of small kernels, so
the number of kernels per step is the figure to drive down. Without an
accelerator at hand this counts, for bench/learner.py's shapes and both
E-step settings:

- `hlo_ops_per_step`: the operations XLA's optimised module runs in the
  body of the K-step loop (lax.scan's while loop), one per fusion or other
  instruction, leaving out those that launch nothing (parameters, tuples and
  their elements, constants, bitcasts), with nested loops' and calls' bodies
  counted once. On a GPU each is about one kernel; on the CPU XLA fuses
  differently, so compare CPU counts with CPU counts.
- `jaxpr_eqns_per_step`: the equations of one step's jaxpr, nested ones
  included: what JAX hands XLA, the same on every device.

Each count is grouped by the JAX operation that produced it (the last part
of the instruction's `op_name`), so a change shows where it cut. Imports
only jax, optax, numpy and agents.mpo, like bench/learner.py. The last line
printed is one JSON object:
  {"hlo_ops_per_step.current.cartpole_swingup": ..., "hlo_ops_per_step.next.
   cartpole_swingup": ..., "jaxpr_eqns_per_step.<estep>.<task>": ..., ...,
   "device": ...}
"""

from __future__ import annotations

import argparse
import collections
import re
import sys

import _timing  # binds `tandem` to this checkout

import jax

from tandem.agents.mpo import config as config_lib
from tandem.agents.mpo import learner

ESTEP_STATES = ('current', 'next')
# Instructions that launch no kernel: they name or regroup buffers.
FREE = frozenset({'parameter', 'get-tuple-element', 'tuple', 'constant',
                  'bitcast', 'after-all', 'partition-id', 'replica-id',
                  'opt-barrier'})
# Attributes naming the computations an instruction runs (a fusion's own
# computation is its kernel: not looked into).
CALLED = re.compile(r'\b(?:body|to_apply|branch_computations|'
                    r'true_computation|false_computation)=\{?([^,}\s]+'
                    r'(?:,\s*[^,}\s]+)*)\}?')
OP_NAME = re.compile(r'op_name="([^"]*)"')
# '  ROOT %fusion.3 = f32[2]{0} fusion(...)' -> 'fusion.3'
INSTRUCTION = re.compile(r'^\s+(?:ROOT\s+)?%?([^\s=]+)\s+=\s')


def parse_module(text: str) -> dict:
  """Optimised HLO text -> {computation name: [(opcode, attributes)]}; the
  entry computation is also under the key None."""
  comps, current = {}, None
  for line in text.splitlines():
    if not line.strip() or line.lstrip().startswith(('//', 'HloModule')):
      continue
    if not line[0].isspace() and line.rstrip().endswith('{'):
      name = line.split()[1] if line.startswith('ENTRY') else line.split()[0]
      current = comps.setdefault(name.lstrip('%'), [])
      if line.startswith('ENTRY'):
        comps[None] = current
      continue
    if line.strip() == '}' or current is None or ' = ' not in line:
      continue
    current.append(_instruction(line.split(' = ', 1)[1]))
  return comps


def _instruction(rhs: str) -> tuple[str, str]:
  """'f32[2]{0} add(a, b), metadata=...' -> ('add', the rest)."""
  rhs = rhs.strip()
  if rhs.startswith('('):   # a tuple shape: skip to its closing paren
    depth = 0
    for i, ch in enumerate(rhs):
      depth += {'(': 1, ')': -1}.get(ch, 0)
      if depth == 0:
        rhs = rhs[i + 1:].strip()
        break
  else:
    rhs = rhs.split(None, 1)[1] if ' ' in rhs else ''
  opcode = rhs.split('(', 1)[0].strip()
  return opcode, rhs


def _source(attributes: str) -> str:
  """The JAX operation an instruction came from: the last part of its
  op_name ('jit(update)/while/body/select_n' -> 'select_n')."""
  m = OP_NAME.search(attributes)
  if not m:
    return '(no op_name)'
  last = m.group(1).rstrip('/').split('/')[-1]
  return re.sub(r'\[.*\]$', '', last) or '(no op_name)'


def count_ops(comps: dict, name: str, seen=None) -> collections.Counter:
  """Kernel-like instructions of computation `name`, by source, with the
  bodies of the loops, calls and conditionals it runs counted once."""
  seen = set() if seen is None else seen
  out = collections.Counter()
  if name in seen or name not in comps:
    return out
  seen.add(name)
  for opcode, attributes in comps[name]:
    if opcode in ('while', 'call', 'conditional'):
      for group in CALLED.findall(attributes):
        for callee in group.split(','):
          out += count_ops(comps, callee.strip().lstrip('%'), seen)
      if opcode != 'call':
        out[f'({opcode})'] += 1
      continue
    if opcode not in FREE:
      out[_source(attributes)] += 1
  return out


def loop_body(comps: dict) -> str:
  """The body of the entry's K-step loop (the largest while in it)."""
  bodies = []
  for opcode, attributes in comps[None]:
    if opcode == 'while':
      m = re.search(r'\bbody=%?([^,\s]+)', attributes)
      if m:
        bodies.append(m.group(1))
  if not bodies:
    raise RuntimeError('no while loop in the compiled update')
  return max(bodies, key=lambda b: len(comps.get(b, ())))


def jaxpr_eqns(jaxpr) -> collections.Counter:
  """Equations by primitive, into every nested jaxpr (pjit, custom
  derivatives, loops, conditionals); a nested call's own equation is
  counted too."""
  out = collections.Counter()
  for eqn in jaxpr.eqns:
    out[eqn.primitive.name] += 1
    for value in eqn.params.values():
      for sub in (value if isinstance(value, (tuple, list)) else (value,)):
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          out += jaxpr_eqns(inner)
  return out


def instruction_sources(text: str) -> dict:
  """Optimised HLO text -> {instruction name: the JAX operation it came
  from}, every computation's: how a profiled kernel, named after its HLO
  instruction, is traced back to the JAX code."""
  out = {}
  for line in text.splitlines():
    m = INSTRUCTION.match(line)
    if m:
      out[m.group(1)] = _source(line)
  return out


def setup(task: str, estep_states: str, args):
  """(config, fresh state, K random batches) of the update for
  bench/learner.py's shapes, as parsed by `parse_args`."""
  obs_dim, act_dim = _timing.TASK_SHAPES[task]
  policy_layers, critic_layers = _timing.layer_sizes(args)
  cfg = config_lib.replace(config_lib.MPOConfig(), {
      'policy_layers': policy_layers, 'critic_layers': critic_layers,
      'batch_size': args.batch_size, 'num_samples': args.num_samples,
      'sgd_steps_per_call': args.steps_per_call,
      'estep_states': estep_states})
  state = learner.init(cfg, learner.Dims(observation=obs_dim,
                                         action=act_dim), args.seed)
  batches = _timing.random_batches(learner.Batch, args.steps_per_call,
                                   cfg.batch_size, obs_dim, act_dim,
                                   seed=args.seed)
  return cfg, state, batches


def measure(task: str, estep_states: str, args) -> dict:
  cfg, state, batches = setup(task, estep_states, args)
  text = learner.make_update(cfg).lower(state, batches).compile().as_text()
  comps = parse_module(text)
  hlo = count_ops(comps, loop_body(comps))
  one = jax.tree_util.tree_map(lambda x: x[0], batches)
  closed = jax.make_jaxpr(lambda s, b: learner.sgd_step(cfg, s, b))(state,
                                                                     one)
  eqns = jaxpr_eqns(closed.jaxpr)
  return {'hlo': hlo, 'eqns': eqns}


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  _timing.add_learner_args(p)
  p.add_argument('--top', type=int, default=12,
                 help='sources listed per count (the rest summed)')
  return p.parse_args(argv)


def _table(title: str, counts: dict, top: int) -> None:
  """Sources as rows, E-step settings as columns, largest first."""
  names = list(counts)
  total = collections.Counter()
  for c in counts.values():
    total += c
  print(f'{title:<28}' + ''.join(f'{n:>10}' for n in names))
  for source, _ in total.most_common(top):
    print(f'  {source:<26}' + ''.join(f'{counts[n][source]:>10}'
                                      for n in names))
  rest = {n: sum(counts[n].values()) -
          sum(counts[n][s] for s, _ in total.most_common(top)) for n in names}
  print(f'  {"(the rest)":<26}' + ''.join(f'{rest[n]:>10}' for n in names))
  print(f'  {"total":<26}' + ''.join(f'{sum(counts[n].values()):>10}'
                                     for n in names))


def main(argv=None) -> int:
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  print('MPO learner: operations per SGD step')
  for line in _timing.environment_lines():
    print('  ' + line)
  sizes = _timing.layer_fields(args)
  print(f'  setup:       batch={args.batch_size} policy={sizes["layers"]} '
        f'critic={sizes["critic_layers"]} samples={args.num_samples} '
        f'default duals, K={args.steps_per_call} steps/call')
  payload = {}
  for task in tasks:
    got = {e: measure(task, e, args) for e in ESTEP_STATES}
    print()
    _table(f'{task}: HLO ops in the loop', {e: g['hlo'] for e, g in
                                             got.items()}, args.top)
    _table(f'{task}: jaxpr equations', {e: g['eqns'] for e, g in
                                         got.items()}, args.top)
    for e, g in got.items():
      payload[f'hlo_ops_per_step.{e}.{task}'] = sum(g['hlo'].values())
      payload[f'jaxpr_eqns_per_step.{e}.{task}'] = sum(g['eqns'].values())
  print()
  return _timing.finish(payload, steps_per_call=args.steps_per_call,
                        batch_size=args.batch_size,
                        num_samples=args.num_samples, **sizes)


if __name__ == '__main__':
  _timing.use_learner_flags()
  sys.exit(main())
