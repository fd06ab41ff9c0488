"""bench/hlo_ops.py: its HLO reader on a hand-written module (what counts
as an operation, nested bodies once, sources from op_name), and the script
at toy sizes (counts per step do not depend on the steps per call)."""

import json
import os
import subprocess
import sys

from tests import REPO_ROOT, load_script

hlo = load_script('bench', 'hlo_ops')

MODULE = """HloModule jit_update, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

%fused_computation (p0: f32[2]) -> f32[2] {
  %p0 = f32[2]{0} parameter(0)
  ROOT %a = f32[2]{0} add(f32[2]{0} %p0, f32[2]{0} %p0)
}

%inner_body (p: (s32[], f32[2])) -> (s32[], f32[2]) {
  %p = (s32[], f32[2]{0}) parameter(0)
  %x = f32[2]{0} get-tuple-element((s32[], f32[2]{0}) %p), index=1
  %e = f32[2]{0} exponential(f32[2]{0} %x), metadata={op_name="jit(update)/while/body/while/body/exp"}
  %i = s32[] get-tuple-element((s32[], f32[2]{0}) %p), index=0
  ROOT %t = (s32[], f32[2]{0}) tuple(s32[] %i, f32[2]{0} %e)
}

%outlined (q: f32[2]) -> f32[2] {
  %q = f32[2]{0} parameter(0)
  ROOT %m = f32[2]{0} multiply(f32[2]{0} %q, f32[2]{0} %q), metadata={op_name="jit(update)/while/body/mul"}
}

%body (p: (s32[], f32[2])) -> (s32[], f32[2]) {
  %p = (s32[], f32[2]{0}) parameter(0)
  %x = f32[2]{0} get-tuple-element((s32[], f32[2]{0}) %p), index=1
  %c = f32[] constant(1)
  %f = f32[2]{0} fusion(f32[2]{0} %x), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(update)/while/body/select_n"}
  %g = f32[2]{0} fusion(f32[2]{0} %f), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(update)/while/body/select_n"}
  %r = pred[] reduce(f32[2]{0} %g, f32[] %c), dimensions={0}, to_apply=%fused_computation, metadata={op_name="jit(update)/while/body/reduce_and[axes=(0,)]"}
  %k = f32[2]{0} call(f32[2]{0} %g), to_apply=%outlined
  %w = (s32[], f32[2]{0}) while((s32[], f32[2]{0}) %p), condition=%cond, body=%inner_body
  %y = f32[2]{0} copy(f32[2]{0} %k)
  %i = s32[] get-tuple-element((s32[], f32[2]{0}) %p), index=0
  ROOT %t = (s32[], f32[2]{0}) tuple(s32[] %i, f32[2]{0} %y)
}

ENTRY %main (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0)
  %z = s32[] constant(0)
  %t = (s32[], f32[2]{0}) tuple(s32[] %z, f32[2]{0} %a)
  %small = (s32[], f32[2]{0}) while((s32[], f32[2]{0}) %t), condition=%cond, body=%inner_body
  %w = (s32[], f32[2]{0}) while((s32[], f32[2]{0}) %t), condition=%cond, body=%body
  ROOT %o = f32[2]{0} get-tuple-element((s32[], f32[2]{0}) %w), index=1
}
"""


def test_the_reader_counts_launching_instructions_by_their_source():
  comps = hlo.parse_module(MODULE)
  assert comps[None] is comps['main']
  # The larger of the entry's two loops is the step's.
  assert hlo.loop_body(comps) == 'body'
  got = hlo.count_ops(comps, 'body')
  # Two fusions and a reduce by op_name; the call's body (mul) and the
  # nested loop's (exp) once each, the loop itself as one; the copy has no
  # op_name; parameters, tuples, elements and constants launch nothing.
  assert dict(got) == {'select_n': 2, 'reduce_and': 1, 'mul': 1, 'exp': 1,
                       '(while)': 1, '(no op_name)': 1}


def test_counts_per_step_do_not_depend_on_the_steps_per_call():
  # Its own process, like bench/learner.py: the script must not need
  # TensorFlow, Reverb or Launchpad (it checks).
  payloads = []
  for k in (3, 5):
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO_ROOT, 'bench', 'hlo_ops.py'),
         '--tasks', 'cartpole_swingup', '--steps_per_call', str(k),
         '--batch_size', '16', '--num_samples', '4'],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    payloads.append(json.loads(proc.stdout.strip().splitlines()[-1]))
  a, b = payloads
  assert 'error' not in a
  for kind in ('hlo_ops_per_step', 'jaxpr_eqns_per_step'):
    for estep in ('current', 'next'):
      key = f'{kind}.{estep}.cartpole_swingup'
      assert a[key] == b[key] > 100, key
    # 'next' reuses the bootstrap's samples: less work in the step.
    assert a[f'{kind}.next.cartpole_swingup'] < \
        a[f'{kind}.current.cartpole_swingup']
