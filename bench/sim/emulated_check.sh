#!/usr/bin/env bash
# The simulator against the emulated cluster (docs/SIMULATOR.md, "Against an emulated cluster"):
# for each SPEC, Loom's ring allreduce over MPI is measured on `loom launch --emulate SPEC` (one
# process per node, 1 MiB to 256 MiB, fp32 sum) and predicted by `loom simulate --cluster SPEC`
# with the MPI communicator's 256 KiB pieces; prints both and the prediction's error.
#
#   [SPECS="2x1:1gbit 4x1:1gbit 4x2:1gbit 8x1:1gbit"] [ITERS=3] bash bench/sim/emulated_check.sh \
#     [BUILD_DIR=build]
#
# Needs root (the emulated cluster) and a build with MPI. About 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
SPECS=${SPECS:-"2x1:1gbit 4x1:1gbit 4x2:1gbit 8x1:1gbit"}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)"
for spec in $SPECS; do
  nodes=${spec%%x*}
  nodes=${nodes%%:*}
  timeout 900 "$LOOM" launch --emulate "$spec" --workers "$nodes" --clients 1 --timeout 880 -- \
    "$LOOM" bench collective --algo ring -b 1M -e 256M -f 4 -n "${ITERS:-3}" -w 1 |
    awk -v s="$spec" '/^\[worker 0\] +[0-9]/ {print s, $3, $8}' >> "$OUT/measured.txt"
  "$LOOM" simulate --cluster "$spec" --algo ring --sizes 1M:256M --factor 4 --chunk-bytes 262144 |
    awk -v s="$spec" '!/^#/ {print s, $1, $7}' >> "$OUT/predicted.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$OUT" <<'PY'
import sys
out = sys.argv[1]
pred = {tuple(l.split()[:2]): float(l.split()[2]) for l in open(out + "/predicted.txt")}
print("%-12s %8s %14s %14s %8s" % ("spec", "size", "measured(us)", "predicted(us)", "error"))
for line in open(out + "/measured.txt"):
    spec, size, us = line.split()
    p = pred[(spec, size)]
    print("%-12s %5d MiB %14.0f %14.0f %+7.0f%%" % (spec, int(size) >> 20, float(us), p,
                                                    (p - float(us)) / float(us) * 100))
PY
