"""bench/kernel_profile.py: its trace reader on a hand-written trace shaped
as a GPU's (which lines hold kernels, overlaps, names traced back to JAX
operations), and the script on the CPU, whose trace holds no kernels."""

import json
import os
import subprocess
import sys

import pytest

from tests import REPO_ROOT, load_script

prof = load_script('bench', 'kernel_profile')


def _meta(pid, name, tid=None):
  if tid is None:
    return {'ph': 'M', 'pid': pid, 'name': 'process_name',
            'args': {'name': name}}
  return {'ph': 'M', 'pid': pid, 'tid': tid, 'name': 'thread_name',
          'args': {'name': name}}


def _x(pid, tid, ts, dur, name, hlo_op=None, graph=False):
  e = {'ph': 'X', 'pid': pid, 'tid': tid, 'ts': ts, 'dur': dur,
       'name': name, 'args': {'correlation_id': '7'}}
  if hlo_op:
    e['args']['hlo_op'] = hlo_op
  if graph:
    e['args']['cuda_graph_id'] = '3'
  return e


# A host process with its own events, and a GPU with two streams and an
# 'XLA Ops' line that repeats their kernels. Two steps' worth of kernels:
# fusion.1 twice (by its annotation), a cuBLAS kernel annotated with its
# custom call, a kernel named after its instruction but not annotated
# (fusion_2, on the second stream, overlapping fusion.1's first run).
TRACE = {'traceEvents': [
    _meta(1, '/host:CPU'), _meta(1, 'python', tid=10),
    _meta(2, '/device:GPU:0'), _meta(2, 'Stream #13(Kernel)', tid=20),
    _meta(2, 'Stream #14(Kernel,Memset)', tid=21),
    _meta(2, 'XLA Ops', tid=22),
    _x(1, 10, 0.0, 100.0, 'PjitFunction(update)'),
    _x(2, 20, 10.0, 4.0, 'loop_select_fusion', hlo_op='fusion.1'),
    _x(2, 21, 12.0, 4.0, 'fusion_2'),
    _x(2, 20, 30.0, 2.0, 'sm90_xmma_gemm', hlo_op='custom-call.3'),
    _x(2, 20, 40.0, 4.0, 'loop_select_fusion', hlo_op='fusion.1'),
    _x(2, 22, 10.0, 4.0, 'fusion.1'),
    _x(2, 22, 40.0, 4.0, 'fusion.1'),
]}
SOURCES = {'fusion.1': 'select_n', 'fusion.2': 'reduce_sum',
           'custom-call.3': 'dot_general'}


def test_the_device_streams_hold_the_kernels_not_the_host_or_ops_line():
  named = prof.lines(TRACE)
  assert named[(2, 22)] == ('/device:GPU:0', 'XLA Ops')
  assert prof.kernel_lines(named) == [(2, 20), (2, 21)]
  ks = prof.kernels(TRACE, prof.kernel_lines(named))
  assert [prof.instruction_of(k, SOURCES) for k in ks] == [
      'fusion.1', 'fusion_2', 'custom-call.3', 'fusion.1']
  assert not any(k.in_graph for k in ks)
  # Without streams (a TPU's trace), the ops line.
  tpu = {'traceEvents': [_meta(3, '/device:TPU:0'),
                         _meta(3, 'XLA Ops', tid=1),
                         _meta(3, 'XLA Modules', tid=2)]}
  assert prof.kernel_lines(prof.lines(tpu)) == [(3, 1)]


def test_per_step_figures_merge_overlaps_and_trace_names_to_jax_ops():
  ks = prof.kernels(TRACE, [(2, 20), (2, 21)])
  # 10-16 (two overlapping kernels), 30-32, 40-44: 12 µs busy of 100.
  assert prof.busy_us(ks) == pytest.approx(12.0)
  s = prof.summarise(ks, steps=2, wall_us=100.0, sources=SOURCES, top=2)
  assert s.kernels_per_step == 2.0
  assert s.busy_us_per_step == pytest.approx(6.0)
  assert s.wall_us_per_step == pytest.approx(50.0)
  assert s.busy_fraction == pytest.approx(0.12)
  # Largest total first, cut at `top`; a kernel named 'fusion_2' is the
  # instruction fusion.2.
  assert [(r[0], r[1], r[2], r[3]) for r in s.top] == [
      ('fusion.1', 'select_n', 1.0, 4.0), ('fusion_2', 'reduce_sum', 0.5,
                                           4.0)]
  assert s.top[0][4] == pytest.approx(8.0 / 12.0)
  assert [r[0] for r in s.by_source] == ['select_n', 'reduce_sum']
  assert s.by_source[0][1:3] == (1.0, 4.0)
  find = prof.source_lookup(SOURCES)
  assert find('fusion.9') == '(unknown)'
  # A kernel named from its instruction by XLA's sanitising, with a
  # uniquing suffix; '-' sanitised too.
  assert find('fusion_2_1') == 'reduce_sum'
  assert find('custom_call_3') == 'dot_general'
  assert s.graph_kernel_fraction == 0.0


def test_kernels_inside_a_cuda_graph_are_counted_and_listed_by_name():
  # Inside a graph a kernel's annotation is the command buffer's, not an
  # instruction of the module: listed under the kernel's own name.
  trace = {'traceEvents': [
      _meta(2, '/device:GPU:0'), _meta(2, 'Stream #13(Kernel)', tid=20),
      _x(2, 20, 0.0, 2.0, 'loop_select_fusion_1', hlo_op='command_buffer',
         graph=True),
      _x(2, 20, 5.0, 2.0, 'fusion_2')]}
  ks = prof.kernels(trace, prof.kernel_lines(prof.lines(trace)))
  s = prof.summarise(ks, steps=1, wall_us=10.0, sources=SOURCES, top=5)
  assert s.graph_kernel_fraction == 0.5
  assert sorted(r[0] for r in s.top) == ['fusion_2', 'loop_select_fusion_1']


def test_the_script_on_the_cpu_says_its_trace_holds_no_kernels(tmp_path):
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO_ROOT, 'bench', 'kernel_profile.py'),
       '--tasks', 'cartpole_swingup', '--estep_states', 'current,next',
       '--steps_per_call', '2', '--batch_size', '8', '--num_samples', '2',
       '--layers', '16,16', '--calls', '2', '--trace_dir', str(tmp_path)],
      capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
      check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  payload = json.loads(proc.stdout.strip().splitlines()[-1])
  assert payload['backend'] == 'cpu' and 'error' not in payload
  # Traced without command buffers, unless the caller chose them.
  assert payload['xla_flags'].endswith('--xla_gpu_enable_command_buffer=')
  for estep in ('current', 'next'):
    assert payload[f'profile.kernels_per_step.{estep}.cartpole_swingup'] is None
  # The trace was written where asked and read: its host lines are named.
  assert "('/host:CPU', 'python')" in proc.stdout
  assert list(tmp_path.glob('cartpole_swingup.next/**/perfetto_trace.json.gz'))


def test_instruction_sources_name_the_compiled_loops_operations():
  hlo = load_script('bench', 'hlo_ops')
  text = """HloModule m

%body (p: f32[2]) -> f32[2] {
  %p = f32[2]{0} parameter(0)
  %fusion.3 = f32[2]{0} fusion(f32[2]{0} %p), kind=kLoop, calls=%f, metadata={op_name="jit(update)/while/body/select_n"}
  ROOT %copy.1 = f32[2]{0} copy(f32[2]{0} %fusion.3)
}
"""
  got = hlo.instruction_sources(text)
  assert got['fusion.3'] == 'select_n'
  assert got['copy.1'] == '(no op_name)'


def test_bad_flags_exit_2_naming_the_flag():
  for flags, field in ((['--estep_states', 'later'], '--estep_states'),
                       (['--calls', '0'], '--calls'),
                       (['--tasks', 'hopper_hop'], 'hopper_hop')):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, 'bench',
                                      'kernel_profile.py'), *flags],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        check=False)
    assert proc.returncode == 2, (flags, proc.stderr[-500:])
    assert field in proc.stderr
