#!/bin/bash
# The learner-side benchmarks in one go, for a session lent an accelerator
# (device `run`: at most 575 s, inside the device's 600 s per command;
# never yet run on a GPU):
#
#   bash bench/accelerator.sh            # on the device: its python3 has jax and optax
#   ALLOW_CPU=1 PY=.venv/bin/python bash bench/accelerator.sh     # here, on the CPU
#   bash bench/accelerator.sh --critic_layers 512,512,256   # a second call, if time is left
#
# First a probe (at most 50 s): it prints jax's devices and stops the call
# (status 1) when jax has no accelerator (a jax without its CUDA plugin falls
# back to the CPU with only a warning), unless ALLOW_CPU is set. Then, most
# wanted first, each under its own time limit so that one hang cannot eat
# the lease, and each printing its JSON line as it ends, so a limit hit late
# loses one file, not the call:
#   learner            bench/learner.py: steps/s, both tasks, next/current,
#                      with the learner node's XLA flags;
#   kernel_profile     where a walker step's time goes: kernels per step,
#                      busy and gap time, top kernels, time by JAX op;
#   learner-baseline   bench/learner.py on walker with XLA's default command
#                      buffers: the flags' gain, measured in the same call;
#   flags_equivalence  the same steps with the flags and without: equal?
#   duals              bench/duals.py: the cost of each dual strategy;
#   hlo_ops            operations per step in the GPU's module, walker.
# Outputs go to $OUT (the device's return folder) or /tmp/tandem_accelerator,
# one file each. None of them needs TensorFlow, Reverb or Launchpad; each
# exits 1 if one got imported. bench/learner_parts.py (where a step's time
# goes, by part, and flop counts; measured on an H200 before) is left to a
# call of its own.
#
# Arguments, where given, go to bench/learner.py alone (its shape flags, e.g.
# the reference's default critic), and the rest is skipped: such a call takes
# at most 200 s and writes learner-variant.txt, so it does not replace the
# defaults' file. The device lends 900 s in all, machine start included: run
# it only if the first call left that much.
set -u -o pipefail
PY=${PY:-python3}
DEST=${OUT:-/tmp/tandem_accelerator}
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
# XLA's default command buffers, without the learner's WHILE and CONDITIONAL.
BASELINE_FLAGS=$("$PY" -c 'from agents.core import xla_flags
print(xla_flags.DEFAULT_GPU_COMMAND_BUFFERS)') || exit 1
suffix=
[ $# -gt 0 ] && suffix=-variant
status=0

# bench NAME LIMIT_S SCRIPT [ARGS...]: bench/SCRIPT.py under its limit, its
# output also in $DEST/NAME.txt. XLA_FLAGS, where the caller sets it, goes
# to the script.
bench() {
  local name=$1 limit=$2 script=$3
  shift 3
  echo "== bench/$script.py $* ${XLA_FLAGS:+(XLA_FLAGS=$XLA_FLAGS)}"
  timeout -k 5 "$limit" "$PY" "bench/$script.py" "$@" 2>&1 \
      | tee "$DEST/$name$suffix.txt" \
      || { echo "bench/$script.py ($name) failed (status $?)"; status=1; }
}

timeout -k 5 45 "$PY" -c '
import os, sys
import jax
print("jax", jax.__version__, jax.default_backend(), jax.devices())
if jax.default_backend() == "cpu" and not os.environ.get("ALLOW_CPU"):
  sys.exit("no accelerator: jax runs on the CPU (set ALLOW_CPU=1 to go on)")
' 2>&1 | tee "$DEST/devices$suffix.txt" || exit 1

if [ $# -gt 0 ]; then
  bench learner 140 learner "$@"
  exit $status
fi
# Limits: 45 + 130 + 70 + 60 + 80 + 110 + 45 = 540 s, and up to 5 s more
# each where `timeout -k` has to kill.
bench learner 130 learner
bench kernel_profile 70 kernel_profile --tasks walker_walk
XLA_FLAGS=$BASELINE_FLAGS bench learner-baseline 60 learner \
    --tasks walker_walk --seconds 10
bench flags_equivalence 80 flags_equivalence --tasks walker_walk
bench duals 110 duals --rounds 7
bench hlo_ops 45 hlo_ops --tasks walker_walk
exit $status
