#!/usr/bin/env bash
# loom bench collective under mpirun: every collective with every algorithm (native included)
# prints a table whose rows all have #wrong = 0.
#   bench_collective_mpi_test.sh MPIRUN LOOM NP
set -euo pipefail
MPIRUN=$1 LOOM=$2 NP=$3
for op in allreduce broadcast reduce allgather reducescatter; do
  out=$("$MPIRUN" -np "$NP" --oversubscribe --allow-run-as-root "$LOOM" bench collective \
        --op "$op" --algo all -b 1K -e 256K -f 16 -n 2 -w 1 -d fp16)
  echo "$out"
  echo "$out" | grep -Eq "$NP ranks \(mpi(\+shm)?\)" || { echo "FAIL: $op did not run over MPI"; exit 1; }
  echo "$out" | grep -q " native " || { echo "FAIL: $op has no native row"; exit 1; }
  echo "$out" | awk -v op="$op" '
    /^#/ || /size\(B\)/ || NF == 0 { next }
    { rows++; if ($NF != 0) { print "FAIL: " op ": wrong elements: " $0; bad = 1 } }
    END { if (rows < 4) { print "FAIL: " op ": only " rows " rows"; bad = 1 }; exit bad }'
done
echo "PASS"
