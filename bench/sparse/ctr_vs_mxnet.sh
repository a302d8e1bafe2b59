#!/bin/bash
# The CTR example's wide & deep model as 2 trainers x 2 parameter servers on this machine, in
# Loom (examples/ctr/train.py under loom launch) and in MXNet 1.9.1 (bench/sparse/mxnet_ctr.py:
# row_sparse embeddings, dist_sync, ps-lite), one after the other: samples/s per trainer after
# 10 warm-up steps and the held-out AUC, for each table size in VOCABS. Both use Adagrad
# (lr 0.05), batch 256 per trainer and the same click-log streams.
#
#   bash bench/sparse/ctr_vs_mxnet.sh     # STEPS=200 VOCABS="100000 1000000"
# Needs a build and the MXNet venv (bench/ps/install-mxnet.sh, MXNET_VENV to override).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${LOOM_BUILD_DIR:-build}
STEPS=${STEPS:-200}
VOCABS=${VOCABS:-"100000 1000000"}
EXTRA=${EXTRA:-}  # more flags for train.py (e.g. --distributed)
MXNET_PY=${MXNET_VENV:-/opt/venvs/mxnet}/bin/python
export PYTHONPATH=$BUILD/python

echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores); 2 trainers x 2 servers"
echo
echo "| table rows | Loom samples/s per trainer | Loom AUC | MXNet samples/s per trainer | MXNet AUC | Loom / MXNet |"
echo "| --- | --- | --- | --- | --- | --- |"
for vocab in $VOCABS; do
  loom_out=$(timeout 900 "$BUILD/tools/loom" launch --workers 2 --servers 2 --timeout 800 -- \
    /usr/bin/python3 examples/ctr/train.py --steps "$STEPS" --vocab "$vocab" --batch 256 \
    --optimizer adagrad --lr 0.05 --warmup 10 --log-every "$STEPS" $EXTRA 2>&1)
  l_rate=$(echo "$loom_out" | sed -n 's/.*trainer 0: step .* \([0-9]*\) samples\/s$/\1/p' | tail -1)
  l_auc=$(echo "$loom_out" | sed -n 's/.*trainer 0: held-out auc \([0-9.]*\).*/\1/p')
  if [ -x "$MXNET_PY" ]; then
    mx_out=$(timeout 900 "$MXNET_PY" bench/sparse/mxnet_ctr.py --workers 2 --servers 2 \
      --steps "$STEPS" --vocab "$vocab" --batch 256 --lr 0.05 2>&1 | grep '^worker 0:')
    m_rate=$(echo "$mx_out" | sed -n 's/worker 0: \([0-9]*\) samples.*/\1/p')
    m_auc=$(echo "$mx_out" | sed -n 's/.*auc \([0-9.]*\)/\1/p')
    ratio=$(awk -v a="$l_rate" -v b="$m_rate" 'BEGIN {printf "%.1fx", a / b}')
  else
    m_rate="(no MXNet venv)"; m_auc="-"; ratio="-"
  fi
  echo "| $vocab | $l_rate | $l_auc | $m_rate | $m_auc | $ratio |"
done
