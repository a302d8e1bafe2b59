#!/bin/bash
# The CTR example's wide & deep model as 2 trainers x 2 parameter servers on this machine, in
# Loom (examples/ctr/train.py under loom launch) and in MXNet 1.9.1 (bench/sparse/mxnet_ctr.py:
# row_sparse embeddings, dist_sync, ps-lite), one after the other: samples/s per trainer after
# 10 warm-up steps and the held-out AUC (in parentheses), for each table size in VOCABS. Loom
# runs the table sliced over the servers (is_sparse: row gradients, the slices pulled whole)
# and distributed (train.py --distributed: rows on the servers, made on first touch, only the
# batch's rows pulled). Adagrad (lr 0.05), batch 256 per trainer, the same click-log streams.
# Tables above 10^7 rows run distributed only: the other two hold them dense.
#
#   bash bench/sparse/ctr_vs_mxnet.sh     # STEPS=200 VOCABS="100000 1000000 1000000000"
# Needs a build and the MXNet venv (bench/ps/install-mxnet.sh, MXNET_VENV to override).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${LOOM_BUILD_DIR:-build}
STEPS=${STEPS:-200}
VOCABS=${VOCABS:-"100000 1000000 1000000000"}
EXTRA=${EXTRA:-}  # more flags for train.py (e.g. --distributed)
MXNET_PY=${MXNET_VENV:-/opt/venvs/mxnet}/bin/python
export PYTHONPATH=$BUILD/python

echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores); 2 trainers x 2 servers"
echo
echo "| table rows | Loom, sliced table | Loom, distributed table | MXNet row_sparse | best Loom / MXNet |"
echo "| --- | --- | --- | --- | --- |"
loom_run() {  # flags -> "samples/s per trainer (auc)" of trainer 0
  local out rate auc
  out=$(timeout 900 "$BUILD/tools/loom" launch --workers 2 --servers 2 --timeout 800 -- \
    /usr/bin/python3 examples/ctr/train.py --steps "$STEPS" --batch 256 --optimizer adagrad \
    --lr 0.05 --warmup 10 --log-every "$STEPS" "$@" $EXTRA 2>&1)
  rate=$(echo "$out" | sed -n 's/.*trainer 0: step .* \([0-9]*\) samples\/s$/\1/p' | tail -1)
  auc=$(echo "$out" | sed -n 's/.*trainer 0: held-out auc \([0-9.]*\).*/\1/p')
  echo "$rate ($auc)"
}
for vocab in $VOCABS; do
  dist=$(loom_run --vocab "$vocab" --distributed)
  if [ "$vocab" -gt 10000000 ]; then  # a sliced table, and MXNet's servers, hold it dense
    sliced="(dense slices: not run)"; mx="(dense on its servers: not run)"; ratio="-"
  else
    sliced=$(loom_run --vocab "$vocab")
    if [ -x "$MXNET_PY" ]; then
      mx_out=$(timeout 900 "$MXNET_PY" bench/sparse/mxnet_ctr.py --workers 2 --servers 2 \
        --steps "$STEPS" --vocab "$vocab" --batch 256 --lr 0.05 2>&1 | grep '^worker 0:')
      mx="$(echo "$mx_out" | sed -n 's/worker 0: \([0-9]*\) samples.*/\1/p') ($(echo "$mx_out" | sed -n 's/.*auc \([0-9.]*\)/\1/p'))"
      best=$(printf '%s\n%s\n' "${sliced%% *}" "${dist%% *}" | sort -n | tail -1)
      ratio=$(awk -v a="$best" -v b="${mx%% *}" 'BEGIN {printf "%.1fx", a / b}')
    else
      mx="(no MXNet venv)"; ratio="-"
    fi
  fi
  echo "| $vocab | $sliced | $dist | $mx | $ratio |"
done
