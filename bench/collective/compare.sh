#!/usr/bin/env bash
# Side-by-side allreduce on this machine: Loom in-process (4 devices, every algorithm and auto),
# Loom over MPI (4 ranks: ring and native), Open MPI's MPI_Allreduce (4 ranks), Gloo ring and
# halving-doubling (4 in-process ranks over TCP loopback), and the STREAM-like memory bandwidth
# bound. fp32 sum, 4 KiB .. 64 MiB. Every measurement runs REPEAT times (default 3) and the
# table keeps the fastest, which filters out other load on a shared machine. Prints one markdown
# table of busbw (GB/s) and time (us).
#
#   [REPEAT=3] bench/collective/compare.sh [BUILD_DIR=build]
set -euo pipefail
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
BENCH=$BUILD/bench/collective
# Loom over MPI on the plain MPI path (signatures and data as MPI messages, MPI_Iallreduce as
# native): on one node Loom's default is the shared-memory meeting, which vs_mpi.sh measures.
MPIRUN=(mpirun -np 4 --oversubscribe -x LOOM_MPI_SHM="${LOOM_MPI_SHM:-0}")
[ "$(id -u)" -eq 0 ] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
SIZES=(-b 4K -e 64M -f 4 -n 20 -w 3)

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$BENCH/collective_membw_bench" > "$OUT/membw.txt"
for rep in $(seq "${REPEAT:-3}"); do
  "$LOOM" bench collective --algo ring,tree,multi_tree,star,native,auto --places cpu:4 \
    --transport inprocess "${SIZES[@]}" >> "$OUT/loom_inprocess.txt"
  "${MPIRUN[@]}" "$LOOM" bench collective --algo ring,native --transport mpi "${SIZES[@]}" \
    >> "$OUT/loom_mpi.txt"
  "${MPIRUN[@]}" "$BENCH/collective_mpi_bench" >> "$OUT/mpi.txt"
  if [ -x "$BENCH/collective_gloo_bench" ]; then
    "$BENCH/collective_gloo_bench" 4 >> "$OUT/gloo.txt"
  else
    echo "compare.sh: collective_gloo_bench not built (install libgloo-dev)" >&2
    touch "$OUT/gloo.txt"
  fi
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$OUT" <<'PY'
import sys, os, collections
out = sys.argv[1]
res = collections.defaultdict(dict)   # column -> bytes -> (us, busbw), fastest repetition
def keep(col, size, us, busbw):
    if size not in res[col] or us < res[col][size][0]:
        res[col][size] = (us, busbw)
def loom(path, prefix):
    for line in open(os.path.join(out, path)):
        f = line.split()
        if not f or f[0].startswith('#') or f[0] == 'size(B)':
            continue
        algo = f[4].split(':')[0]
        keep(prefix + algo, int(f[0]), float(f[5]), float(f[7]))
        if int(f[8]) != 0:
            print(f"WARNING: {prefix}{algo} at {f[0]} bytes: {f[8]} wrong elements", file=sys.stderr)
def peers(path):
    for line in open(os.path.join(out, path)):
        f = line.split()
        if f and f[0] == 'RESULT' and len(f) == 5:
            keep(f[1], int(f[2]), float(f[3]), float(f[4]))
loom('loom_inprocess.txt', 'loom ')
loom('loom_mpi.txt', 'loom-mpi ')
peers('mpi.txt'); peers('gloo.txt')
bw = {}
for line in open(os.path.join(out, 'membw.txt')):
    f = line.split()
    bw[f[1]] = float(f[2])
cols = ['loom ring', 'loom tree', 'loom multi_tree', 'loom star', 'loom native', 'loom auto',
        'loom-mpi ring', 'loom-mpi native', 'mpi_allreduce', 'gloo_ring', 'gloo_halving_doubling']
cols = [c for c in cols if res.get(c)]
sizes = sorted({b for c in cols for b in res[c]})
def fmt(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
print("| size | " + " | ".join(cols) + " |")
print("| --- " * (len(cols) + 1) + "|")
for b in sizes:
    row = [fmt(b)]
    for c in cols:
        v = res[c].get(b)
        row.append(f"{v[1]:.2f} ({v[0]:.0f} µs)" if v else "–")
    print("| " + " | ".join(row) + " |")
print()
print("busbw in GB/s (time per call), fastest of the repetitions; memory bandwidth (STREAM-like, GB/s): " +
      ", ".join(f"{k.replace('membw_', '')} {v:.1f}" for k, v in bw.items()))
PY
