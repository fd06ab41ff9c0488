"""Where an MPO SGD step's time goes on an accelerator: a jax.profiler trace
of the learner's update, summarised per step.

    python bench/kernel_profile.py [--tasks walker_walk] [--estep_states current,next]
                            [--calls 20] [--top 15] [--trace_dir DIR]
                            [bench/learner.py's other shape flags]

For each task and E-step setting it compiles the update (K SGD steps per
call), warms it up, traces --calls calls and reads the trace the profiler
writes beside its own format (perfetto_trace.json.gz: Chrome trace events,
read with the standard library). From the device's kernel events, per SGD
step (the calls' count × K):

- `kernels_per_step`: operations run on the device's streams (kernels, and
  the copies and memsets XLA runs between them);
- `busy_us_per_step`: time with a kernel running (overlaps counted once);
- `wall_us_per_step`: the traced calls' wall time;
- `busy_fraction`: busy over wall. The rest is gaps between kernels: launch
  latency and host work, what fewer and larger kernels win back.

Two tables follow: the kernels taking most time (launches per step, µs per
launch, share of the busy time, and the JAX operation each came from: the
`op_name` of its HLO instruction in the compiled module, as in
bench/hlo_ops.py) and the time by JAX operation.

The step is traced without command buffers (CUDA graphs): the script sets
XLA_FLAGS' `--xla_gpu_enable_command_buffer=` (empty) unless the caller's
XLA_FLAGS chooses command buffers. Inside a graph a kernel's event carries
the graph's annotation, not its own instruction's, and XLA's own rule of
tracing without graphs does not reach the CUDA plugin of a pip-installed
jax. So the wall time here is a step's launched kernel by kernel, and
bench/learner.py times the step as the learner node runs it;
`graph_kernel_fraction` says how many traced kernels ran inside a graph
(0 where the flag took). On the CPU the profiler records no kernels: the
script says which processes and lines the trace holds and prints nulls.
Imports only jax, optax, numpy and agents.mpo, like bench/learner.py. The
last line printed is one JSON object:
  {"profile.kernels_per_step.<estep>.<task>": ...,
   "profile.busy_us_per_step.<estep>.<task>": ...,
   "profile.wall_us_per_step.<estep>.<task>": ...,
   "profile.busy_fraction.<estep>.<task>": ...,
   "profile.graph_kernel_fraction.<estep>.<task>": ..., ..., "device": ...}
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

import _timing  # binds `tandem` to this checkout
import hlo_ops

import jax

from tandem.agents.core import xla_flags
from tandem.agents.mpo import learner

# Kernels run on the lines of a device process: CUDA streams on a GPU
# ('Stream #13(Kernel,Memset)'); a TPU's trace has an 'XLA Ops' line
# instead (a GPU's, converted by jax, has none).
STREAM_PREFIX = 'Stream'
OPS_LINE = 'XLA Ops'
DEVICE_PREFIX = '/device:'
# Command buffers off: each kernel launched, and traced, on its own.
NO_COMMAND_BUFFERS = f'{xla_flags.COMMAND_BUFFER_FLAG}='
# What a kernel name keeps of its instruction's: letters, digits, '_', '$'
# (XLA's sanitising turns the rest, '.' and '-' included, into '_').
UNSAFE = re.compile(r'[^A-Za-z0-9_$]')
# The per-step figures of the JSON line, Summary's names.
FIELDS = ('kernels_per_step', 'busy_us_per_step', 'wall_us_per_step',
          'busy_fraction', 'graph_kernel_fraction')


@dataclasses.dataclass(frozen=True)
class Kernel:
  name: str          # the event's: the kernel's name
  hlo_op: str        # the instruction its annotation names ('' if none)
  start_us: float
  duration_us: float
  in_graph: bool     # launched inside a CUDA graph


@dataclasses.dataclass(frozen=True)
class Summary:
  kernels_per_step: float
  busy_us_per_step: float
  wall_us_per_step: float
  graph_kernel_fraction: float  # of the kernels, those inside a CUDA graph
  top: list       # [(name, source, launches/step, µs/launch, share of busy)]
  by_source: list  # [(source, launches/step, µs/step, share of busy)]

  @property
  def busy_fraction(self) -> float:
    return self.busy_us_per_step / self.wall_us_per_step


def read_trace(trace_dir: str) -> dict:
  """The newest perfetto_trace.json.gz under `trace_dir`, parsed."""
  paths = sorted(glob.glob(os.path.join(trace_dir, '**',
                                        'perfetto_trace.json.gz'),
                           recursive=True), key=os.path.getmtime)
  if not paths:
    raise RuntimeError(f'no perfetto_trace.json.gz under {trace_dir}: the '
                       'profiler wrote no trace')
  with gzip.open(paths[-1], 'rt') as f:
    return json.load(f)


def lines(trace: dict) -> dict:
  """{(pid, tid): (process name, line name)} of the trace's named lines."""
  events = trace.get('traceEvents', [])
  processes = {e['pid']: e['args']['name'] for e in events
               if e.get('ph') == 'M' and e.get('name') == 'process_name'}
  return {(e['pid'], e['tid']): (processes.get(e['pid'], '?'),
                                 e['args']['name'])
          for e in events
          if e.get('ph') == 'M' and e.get('name') == 'thread_name'}


def kernel_lines(named: dict) -> list:
  """The (pid, tid) lines that hold a device's kernels: its streams where it
  has them, else its 'XLA Ops' line (one of the two, not both: the ops line
  repeats the streams' kernels)."""
  chosen = []
  for pid in sorted({p for p, _ in named}):
    mine = {k: n for k, (proc, n) in named.items()
            if k[0] == pid and proc.startswith(DEVICE_PREFIX)}
    streams = [k for k, n in mine.items() if n.startswith(STREAM_PREFIX)]
    chosen += streams or [k for k, n in mine.items() if n == OPS_LINE]
  return sorted(chosen)


def kernels(trace: dict, where: list) -> list:
  """Complete events ('X') on the lines `where`."""
  where = set(where)
  out = []
  for e in trace.get('traceEvents', []):
    if e.get('ph') == 'X' and (e.get('pid'), e.get('tid')) in where:
      args = e.get('args') or {}
      out.append(Kernel(e.get('name', '?'), args.get('hlo_op', ''),
                        float(e['ts']), float(e.get('dur', 0.0)),
                        'cuda_graph_id' in args))
  return out


def busy_us(ks: list) -> float:
  """Time covered by at least one kernel (overlapping ones merged)."""
  total, end = 0.0, float('-inf')
  for k in sorted(ks, key=lambda k: k.start_us):
    stop = k.start_us + k.duration_us
    if stop <= end:
      continue
    total += stop - max(k.start_us, end)
    end = stop
  return total


def instruction_of(k: Kernel, sources: dict) -> str:
  """The name a kernel is listed under: the instruction its annotation
  names where that is one of the module's (`sources`), else the kernel's
  own name (a library kernel's, say, or a graph's annotation)."""
  return k.hlo_op if k.hlo_op in sources else k.name


def source_lookup(sources: dict):
  """name -> the JAX operation of a kernel: its instruction's in `sources`
  (hlo_ops.instruction_sources), else the instruction whose sanitised name
  the kernel carries ('loop_add_fusion_3' for 'loop_add_fusion.3', a
  uniquing suffix '_N' allowed: best effort, as identical fusions share
  one kernel under the first one's name); '(unknown)' else."""
  sanitised = {UNSAFE.sub('_', k): v for k, v in sources.items()}

  def find(name: str) -> str:
    if name in sources:
      return sources[name]
    key = UNSAFE.sub('_', name)
    if key in sanitised:
      return sanitised[key]
    base = re.sub(r'_\d+$', '', key)
    return sanitised.get(base, '(unknown)')

  return find


def summarise(ks: list, steps: int, wall_us: float, sources: dict,
              top: int) -> Summary:
  """Per-step figures of the kernels `ks` of `steps` SGD steps that took
  `wall_us` in all."""
  busy = busy_us(ks)
  source_of = source_lookup(sources)
  by_name = collections.defaultdict(list)
  for k in ks:
    by_name[instruction_of(k, sources)].append(k.duration_us)
  named = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
  rows = [(name, source_of(name), len(d) / steps,
           sum(d) / len(d), sum(d) / busy if busy else 0.0)
          for name, d in named[:top]]
  by_source = collections.defaultdict(lambda: [0, 0.0])
  for name, d in by_name.items():
    group = by_source[source_of(name)]
    group[0] += len(d)
    group[1] += sum(d)
  sources_rows = sorted(
      ((s, n / steps, t / steps, t / busy if busy else 0.0)
       for s, (n, t) in by_source.items()), key=lambda r: -r[2])
  return Summary(kernels_per_step=len(ks) / steps,
                 busy_us_per_step=busy / steps,
                 wall_us_per_step=wall_us / steps,
                 graph_kernel_fraction=sum(k.in_graph for k in ks) / len(ks),
                 top=rows, by_source=sources_rows[:top])


def profile(task: str, estep_states: str, args, trace_dir: str,
            check: bool):
  """Traces --calls calls of the update; (Summary or None, the trace's
  lines, whether the learner core imported no forbidden module: None
  unless `check`) for `task` and `estep_states`.

  Checked before a process's first trace only: the profiler's Python hooks
  import TensorFlow wherever it is installed (to trace TF's own code),
  which says nothing of what the learner needs."""
  cfg, state, batches = hlo_ops.setup(task, estep_states, args)
  compiled = learner.make_update(cfg).lower(state, batches).compile()
  sources = hlo_ops.instruction_sources(compiled.as_text())
  runner = _timing.Runner(compiled, state, batches)
  runner.call(3)   # warm-up
  core_ok = _timing.check_forbidden_modules() if check else None
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    jax.block_until_ready(runner.state)
    t0 = time.perf_counter()
    runner.call(args.calls)
    wall_us = (time.perf_counter() - t0) * 1e6
  trace = read_trace(trace_dir)
  named = lines(trace)
  ks = kernels(trace, kernel_lines(named))
  if not ks:
    return None, named, core_ok
  steps = args.calls * args.steps_per_call
  return summarise(ks, steps, wall_us, sources, args.top), named, core_ok


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  _timing.add_learner_args(p)
  p.set_defaults(tasks='walker_walk')
  p.add_argument('--estep_states', default='current,next',
                 help="comma-separated, from: current, next")
  p.add_argument('--calls', type=_timing.positive_int, default=20,
                 help='calls traced (K SGD steps each), after 3 untraced')
  p.add_argument('--top', type=int, default=15,
                 help='rows of each table')
  p.add_argument('--trace_dir', default=None,
                 help='keep the traces here, one folder per setting '
                      '(default: a temporary folder, removed)')
  return p.parse_args(argv)


def _print_summary(title: str, s: Summary) -> None:
  print(f'\n{title}: {s.kernels_per_step:.1f} kernels per SGD step, busy '
        f'{s.busy_us_per_step:.1f} of {s.wall_us_per_step:.1f} µs '
        f'({100 * s.busy_fraction:.0f}%)')
  if s.graph_kernel_fraction:
    print(f'  {100 * s.graph_kernel_fraction:.0f}% of the kernels ran inside '
          'CUDA graphs: those are listed under the graph, not their own '
          'instruction (XLA_FLAGS chose command buffers)')
  print(f'  {"kernel":<40}{"JAX op":<24}{"per step":>9}{"µs each":>9}'
        f'{"busy %":>8}')
  for name, source, per_step, each, share in s.top:
    print(f'  {name[:39]:<40}{source[:23]:<24}{per_step:>9.1f}{each:>9.2f}'
          f'{100 * share:>8.1f}')
  print(f'  {"by JAX op":<40}{"":<24}{"per step":>9}{"µs/step":>9}'
        f'{"busy %":>8}')
  for source, per_step, us, share in s.by_source:
    print(f'  {source[:39]:<40}{"":<24}{per_step:>9.1f}{us:>9.1f}'
          f'{100 * share:>8.1f}')


def main(argv=None) -> int:
  args = parse_args(argv)
  tasks = _timing.parse_tasks(args.tasks)
  if tasks is None:
    return 2
  esteps = [e.strip() for e in args.estep_states.split(',') if e.strip()]
  if not esteps or set(esteps) - set(hlo_ops.ESTEP_STATES):
    print(f'--estep_states: expected names from {hlo_ops.ESTEP_STATES}, '
          f'got {args.estep_states!r}', file=sys.stderr)
    return 2
  print('MPO learner: a profile of the update, per SGD step')
  for line in _timing.environment_lines():
    print('  ' + line)
  payload, core_ok = {}, None   # checked before the first trace
  keep = args.trace_dir
  with tempfile.TemporaryDirectory() as scratch:
    for task in tasks:
      for estep in esteps:
        where = os.path.join(keep or scratch, f'{task}.{estep}')
        summary, named, ok = profile(task, estep, args, where,
                                     check=core_ok is None)
        core_ok = core_ok if ok is None else ok
        if summary is None:
          print(f'\n{task}, {estep}: the trace holds no device kernels '
                f'(lines: {sorted(set(named.values()))[:12]})')
          for f in FIELDS:
            payload[f'profile.{f}.{estep}.{task}'] = None
          continue
        _print_summary(f'{task}, {estep}', summary)
        for f in FIELDS:
          payload[f'profile.{f}.{estep}.{task}'] = round(
              getattr(summary, f), 3)
  print()
  return _timing.finish(payload, core_ok=core_ok,
                        steps_per_call=args.steps_per_call,
                        batch_size=args.batch_size,
                        num_samples=args.num_samples, calls=args.calls,
                        **_timing.layer_fields(args))


if __name__ == '__main__':
  # Before jax starts a backend, which reads XLA_FLAGS once.
  os.environ['XLA_FLAGS'] = xla_flags.with_flag(
      os.environ.get('XLA_FLAGS', ''), NO_COMMAND_BUFFERS)
  sys.exit(main())
