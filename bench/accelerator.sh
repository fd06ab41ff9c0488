#!/bin/bash
# The learner-side benchmarks in one go, for a session lent an accelerator
# (device `run`: at most 570 s, the device's 600 s per command; typically
# 5–6 minutes, never yet run on a GPU):
#
#   bash bench/accelerator.sh            # on the device: its python3 has jax and optax
#   ALLOW_CPU=1 PY=.venv/bin/python bash bench/accelerator.sh     # here, on the CPU
#   bash bench/accelerator.sh --critic_layers 512,512,256   # a second call, if time is left
#
# First a probe (at most 50 s): it prints jax's devices and stops the call
# (status 1) when jax has no accelerator (a jax without its CUDA plugin falls
# back to the CPU with only a warning), unless ALLOW_CPU is set. Then
# bench/learner.py (steps/s, next/current), bench/learner_parts.py once per
# task (where a step's time goes, flop counts) and bench/duals.py (cost of
# each dual strategy), each under its own time limit so that one hang cannot
# eat the lease, and each printing its JSON line as it ends, so a limit hit
# late loses one file, not the call; outputs go to $OUT (the device's return
# folder) or /tmp/tandem_accelerator, one file each. None of them needs
# TensorFlow, Reverb or Launchpad; each exits 1 if one got imported.
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
# name:limit_s:arguments (commas for spaces). Limits and the 10 s each
# `timeout -k` may add: 150 + 2 x 120 + 130 s and the probe's 45 + 5 make
# 570 s.
runs="learner:140: learner_parts-cartpole:110:--tasks,cartpole_swingup,--rounds,7
      learner_parts-walker:110:--tasks,walker_walk,--rounds,7
      duals:120:--rounds,9"
suffix=
if [ $# -gt 0 ]; then
  runs="learner:140:"
  suffix=-variant
fi
timeout -k 5 45 "$PY" -c '
import os, sys
import jax
print("jax", jax.__version__, jax.default_backend(), jax.devices())
if jax.default_backend() == "cpu" and not os.environ.get("ALLOW_CPU"):
  sys.exit("no accelerator: jax runs on the CPU (set ALLOW_CPU=1 to go on)")
' 2>&1 | tee "$DEST/devices$suffix.txt" || exit 1
status=0
for run in $runs; do
  name=${run%%:*}
  rest=${run#*:}
  limit=${rest%%:*}
  extra=${rest#*:}
  script=${name%%-*}
  echo "== bench/$script.py ${extra//,/ } $*"
  # shellcheck disable=SC2086  # the commas' words, split on purpose
  timeout -k 10 "$limit" "$PY" "bench/$script.py" ${extra//,/ } "$@" 2>&1 \
      | tee "$DEST/$name$suffix.txt" \
      || { echo "bench/$script.py ($name) failed (status $?)"; status=1; }
done
exit $status
