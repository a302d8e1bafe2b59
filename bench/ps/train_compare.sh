#!/usr/bin/env bash
# The Fashion-MNIST MLP (examples/fashion_mnist.py), 2 epochs at a global batch of 128, three
# ways on this machine: 2 trainers x 2 parameter servers sync, the same async (both through
# `loom launch`), and 2 processes with the MPI allreduce transport (mpirun). Prints steps/s (as
# trainer 0 / rank 0 reports it) and the test accuracy of the trained parameters.
# Usage: bash bench/ps/train_compare.sh   (needs a build and dataset-fashion-mnist)
set -euo pipefail
cd "$(dirname "$0")/../.."
L=build/tools/loom
PY="env PYTHONPATH=build/python /usr/bin/python3"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
ITERS=938  # 2 epochs of 60000 rows at 128
$PY examples/fashion_mnist.py --model mlp --epochs 0 --save-bundle "$W/fm" >/dev/null
report() {  # name, log, params
  local rate acc
  rate=$(grep -o '[0-9.]* it/s' "$2" | tail -n 1)
  acc=$($PY examples/fashion_mnist.py --model mlp --eval-params "$3" | grep -o 'accuracy [0-9.]*')
  printf '%-28s %14s   test %s\n' "$1" "$rate" "$acc"
}
for mode in sync async; do
  flag=""; [ "$mode" = async ] && flag="--async"
  $L transpile "$W/fm" -o "$W/ps_$mode" --mode pserver --pservers 2 --trainers 2 $flag >/dev/null
  $L launch --workers 2 --servers 2 -- $L run "$W/ps_$mode" --iters $ITERS --batch-size 128 \
    --print-every $ITERS --save-params "$W/ps_$mode.params" >"$W/ps_$mode.log" 2>&1
  report "pserver $mode 2x2" "$W/ps_$mode.log" "$W/ps_$mode.params"
done
if command -v mpirun >/dev/null; then
  $L transpile "$W/fm" -o "$W/mpi" --places cpu:2 --transport mpi >/dev/null
  mpirun --allow-run-as-root --oversubscribe -np 2 $L run "$W/mpi" --iters $ITERS \
    --batch-size 128 --print-every $ITERS --save-params "$W/mpi.params" >"$W/mpi.log" 2>&1
  report "mpi allreduce 2 procs" "$W/mpi.log" "$W/mpi.params"
fi
