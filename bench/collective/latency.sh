#!/usr/bin/env bash
# Small-message allreduce latency side by side: Open MPI's MPI_Allreduce and MPI_Iallreduce +
# MPI_Wait (4 processes), the
# plain-MPI floor of Loom's small-call exchange (raw_exchange, mpi_allreduce_bench.cc), Loom
# over MPI (4 processes: native = MPI_Iallreduce through the communicator, tree, auto) and Loom
# in-process (4 rank threads: star, tree, native, auto). fp32 sum, 4 B .. 64 KiB, 500 calls
# per size; each measurement REPEAT times (default 3), the table keeps the median. Prints one
# markdown table of microseconds per call.
#
#   [REPEAT=3] bench/collective/latency.sh [BUILD_DIR=build]
set -euo pipefail
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
# Loom over MPI on the plain MPI path (signatures and data as MPI messages, MPI_Iallreduce as
# native): on one node Loom's default is the shared-memory meeting, which vs_mpi.sh measures.
MPIRUN=(mpirun -np 4 --oversubscribe -x LOOM_MPI_SHM="${LOOM_MPI_SHM:-0}")
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
SIZES=(-b 4 -e 64K -f 16 -n 500 -w 50)
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
for rep in $(seq "${REPEAT:-3}"); do
  "${MPIRUN[@]}" "$BUILD/bench/collective/collective_mpi_bench" 4 65536 | \
    awk '$1 == "RESULT" && ($3 == 4 || $3 == 64 || $3 == 1024 || $3 == 16384 || $3 == 65536) {
      who = $2 == "mpi_allreduce" ? "MPI_Allreduce" : $2 == "mpi_iallreduce" ? "MPI_Iallreduce" : "raw_exchange"
      print $3, who, $4}' >> "$OUT/all.txt"
  "${MPIRUN[@]}" "$LOOM" bench collective --transport mpi --algo native,tree,auto "${SIZES[@]}" | \
    awk '/^ +[0-9]/ {sub(/:.*/, "", $5); print $1, "mpi:" $5, $6}' >> "$OUT/all.txt"
  "$LOOM" bench collective --transport inprocess --places cpu:4 --algo star,tree,native,auto \
    "${SIZES[@]}" | awk '/^ +[0-9]/ {sub(/:.*/, "", $5); print $1, "inprocess:" $5, $6}' >> "$OUT/all.txt"
done
python3 - "$OUT/all.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    size, who, us = line.split()
    runs[(int(size), who)].append(float(us))
cols = ["MPI_Allreduce", "MPI_Iallreduce", "raw_exchange", "mpi:native", "mpi:tree", "mpi:auto", "inprocess:star",
        "inprocess:tree", "inprocess:native", "inprocess:auto"]
print("| bytes | " + " | ".join(cols) + " |")
print("|" + " --- |" * (len(cols) + 1))
for size in sorted({s for s, _ in runs}):
    cells = ["%.1f" % statistics.median(runs[(size, c)]) if runs.get((size, c)) else "-"
             for c in cols]
    print("| %d | %s |" % (size, " | ".join(cells)))
PY
