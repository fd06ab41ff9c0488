#!/bin/bash
# The learner-side benchmarks in one go, for a session lent an accelerator
# (device `run`, about 6 minutes on one GPU, 8 on a 2-core CPU):
#
#   bash bench/accelerator.sh            # on the device: its python3 has jax and optax
#   PY=.venv/bin/python bash bench/accelerator.sh     # here, on the CPU
#   bash bench/accelerator.sh --critic_layers 512,512,256   # a second call
#
# Runs bench/learner.py (steps/s, next/current), bench/learner_parts.py (where
# a step's time goes, flop counts) and bench/duals.py (cost of each dual
# strategy), each under its own time limit so that one hang cannot eat the
# lease; their outputs go to $OUT (the device's return folder) or
# /tmp/tandem_accelerator, one file each. None of them needs TensorFlow,
# Reverb or Launchpad; each exits 1 if one got imported.
#
# Arguments, where given, go to bench/learner.py and bench/learner_parts.py
# (the shape flags they share, e.g. the reference's default critic), and
# bench/duals.py is skipped: such a call fits in 390 s and writes
# <script>-variant.txt, so it does not replace the defaults' files.
set -u -o pipefail
PY=${PY:-python3}
DEST=${OUT:-/tmp/tandem_accelerator}
mkdir -p "$DEST"
export PYTHONUNBUFFERED=1
cd "$(dirname "$0")/.."
# Limits: 150 + 240 + 180 s (150 + 240 with arguments), inside the
# device's 600 s per command.
runs="learner:150 learner_parts:240 duals:180"
suffix=
if [ $# -gt 0 ]; then
  runs="learner:150 learner_parts:240"
  suffix=-variant
fi
"$PY" -c 'import jax; print("jax", jax.__version__, jax.devices())' \
    2>&1 | tee "$DEST/devices$suffix.txt" || exit 1
status=0
for run in $runs; do
  script=${run%%:*}
  echo "== bench/$script.py $*"
  timeout "${run##*:}" "$PY" "bench/$script.py" "$@" 2>&1 \
      | tee "$DEST/$script$suffix.txt" \
      || { echo "bench/$script.py failed (status $?)"; status=1; }
done
exit $status
