#!/usr/bin/env bash
# Loom's auto allreduce beside Open MPI's blocking MPI_Allreduce, 4 B to 64 MiB, side by side:
# over MPI both run in the same 4 processes on the same buffers (`loom bench collective
# --peer-mpi`, round-robin medians of ROUNDS rounds), and Loom in-process (4 rank threads) runs
# right after. The whole comparison is repeated LAUNCHES times (each mpirun places its processes
# anew) and the table keeps the median of each cell, with auto's time over MPI_Allreduce's and
# the range of that ratio over the launches (each launch's two times come from one process).
# fp32 sum; microseconds per call. Ranks of one node meet in shared memory (mpi+shm);
# LOOM_MPI_SHM=0 measures the plain MPI path instead.
#
#   [LAUNCHES=5] [ROUNDS=5] bench/collective/vs_mpi.sh [BUILD_DIR=build]
set -euo pipefail
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
MPIRUN=(mpirun -np 4 --oversubscribe)
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
ROUNDS=${ROUNDS:-5}
SMALL=(-b 4 -e 64K -f 2 -n 3000 -w 300 --rounds "$ROUNDS")
MID=(-b 128K -e 1M -f 2 -n 100 -w 5 --rounds "$ROUNDS")
LARGE=(-b 2M -e 64M -f 2 -n 10 -w 2 --rounds "$ROUNDS")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')" >&2
rows() { awk -v tag="$1" -v launch="$2" '/^ +[0-9]/ {split($5, a, ":");
    who = a[1] == "auto" ? tag ":" a[2] : $5; print $1, who, $6, launch}'; }
for launch in $(seq "${LAUNCHES:-5}"); do
  for sizes in SMALL MID LARGE; do
    declare -n flags=$sizes
    "${MPIRUN[@]}" "$LOOM" bench collective --transport mpi --algo auto --peer-mpi "${flags[@]}" |
      rows mpi "$launch" >> "$OUT/all.txt"
    "$LOOM" bench collective --transport inprocess --places cpu:4 --algo auto "${flags[@]}" |
      rows inprocess "$launch" >> "$OUT/all.txt"
  done
done
/usr/bin/python3 - "$OUT/all.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
ran = collections.defaultdict(set)
by_launch = collections.defaultdict(dict)  # (size, who) -> {launch: us}
for line in open(sys.argv[1]):
    size, who, us, launch = line.split()
    if who != "MPI_Allreduce":
        where, algo = who.split(":", 1)
        ran[(int(size), where)].add(algo)
        who = where
    runs[(int(size), who)].append(float(us))
    by_launch[(int(size), who)][launch] = float(us)
med = lambda k: statistics.median(runs[k]) if runs.get(k) else float("nan")
def spread(size):
    # auto / MPI_Allreduce within each launch (both timed in the same processes): lowest-highest.
    mine, peer = by_launch[(size, "mpi")], by_launch[(size, "MPI_Allreduce")]
    r = [mine[l] / peer[l] for l in mine if l in peer and peer[l] > 0]
    return "%.2f-%.2f" % (min(r), max(r)) if r else "-"
print("| bytes | `MPI_Allreduce` | Loom MPI auto | auto ran | auto / MPI | per launch | Loom in-process auto | in-process / MPI |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
worst = 0.0
for size in sorted({s for s, _ in runs}):
    mpi, loom, inproc = med((size, "MPI_Allreduce")), med((size, "mpi")), med((size, "inprocess"))
    worst = max(worst, loom / mpi)
    print("| %d | %.1f | %.1f | %s | %.2f | %s | %.1f | %.2f |" % (
        size, mpi, loom, "/".join(sorted(ran[(size, "mpi")])), loom / mpi, spread(size), inproc,
        inproc / mpi))
print("\n(medians over %d launches of round-robin medians; per launch: the lowest and highest"
      " auto / MPI_Allreduce of one launch; worst Loom MPI auto / MPI_Allreduce: %.2f)"
      % (len(runs[(4, "mpi")]), worst))
PY
