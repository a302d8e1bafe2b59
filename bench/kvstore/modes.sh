#!/usr/bin/env bash
# The MXNET-MPI paper's comparison at this machine's scale: the Fashion-MNIST MLP on 4 workers
# and 2 servers (examples/kvstore_train.py under `loom launch`), in the modes dist-SGD (4 clients
# of 1), dist-ASGD, mpi-SGD (2 clients of 2), mpi-ASGD and mpi-ESGD (interval 16): test accuracy
# against wall time, one JSON line per epoch, then a plot (docs/kvstore_modes.png) and a table.
# Usage: bash bench/kvstore/modes.sh [EPOCHS]   (needs a build, mpirun and dataset-fashion-mnist)
set -euo pipefail
cd "$(dirname "$0")/../.."
EPOCHS=${1:-3}
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
run() {  # name, launch flags..., -- train flags...
  local name=$1; shift
  local launch=() train=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done; shift
  train=("$@")
  build/tools/loom launch --workers 4 --servers 2 "${launch[@]}" -- env PYTHONPATH=build/python \
    /usr/bin/python3 examples/kvstore_train.py --epochs "$EPOCHS" --log "$LOG" \
    --mode-name "$name" "${train[@]}" >/dev/null
}
run dist-SGD -- --kvstore dist_sync
run dist-ASGD -- --kvstore dist_async
run mpi-SGD --clients 2 -- --kvstore dist_sync_mpi
run mpi-ASGD --clients 2 -- --kvstore dist_async_mpi
run mpi-ESGD --clients 2 -- --kvstore dist_sync_mpi --esgd-interval 16
/usr/bin/python3 bench/kvstore/plot_modes.py "$LOG" docs/kvstore_modes.png
