#!/bin/bash
# The CTR example (examples/ctr) with sparse against dense table gradients: samples/s of the
# last progress line, median of RUNS runs, for one process and for 2 CPU places, on a
# VOCAB-row table. Prints a markdown table headed by the machine.
#
#   bash bench/sparse/ctr.sh            # RUNS=3 STEPS=200 VOCAB=1000000 BATCH=256
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${LOOM_BUILD_DIR:-build}
RUNS=${RUNS:-3}
STEPS=${STEPS:-200}
VOCAB=${VOCAB:-1000000}
BATCH=${BATCH:-256}
export PYTHONPATH=$BUILD/python

rate() {  # samples/s of the last progress line of one run
  timeout 600 /usr/bin/python3 examples/ctr/train.py --steps "$STEPS" --batch "$BATCH" \
    --vocab "$VOCAB" --log-every "$STEPS" --eval 2000 "$@" |
    sed -n 's/.* \([0-9]*\) samples\/s$/\1/p' | tail -1
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
echo "table: $VOCAB rows, width 8 (deep) and 1 (wide); batch $BATCH; $STEPS steps; median of $RUNS"
echo
echo "| places | sparse samples/s | dense samples/s | sparse / dense |"
echo "| --- | --- | --- | --- |"
for places in 1 2; do
  s=$(for _ in $(seq "$RUNS"); do rate --places "$places"; done | median)
  d=$(for _ in $(seq "$RUNS"); do rate --places "$places" --dense-gradients; done | median)
  echo "| $places | $s | $d | $(awk -v a="$s" -v b="$d" 'BEGIN {printf "%.1fx", a / b}') |"
done
