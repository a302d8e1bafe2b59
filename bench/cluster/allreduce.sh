#!/usr/bin/env bash
# Allreduce across the nodes of an emulated cluster (docs/CLUSTER.md), side by side: Loom's
# collectives (auto, ring, tree) and Open MPI's MPI_Allreduce in the same MPI world of one
# process per node (`loom bench collective --peer-mpi`; Open MPI's TCP transport runs over every
# rail), then Gloo's ring, chunked ring and halving-doubling (bench/cluster/gloo_bench.cc, one
# process per node, Gloo's TCP device on the node's rail-0 address). fp32 sum, 4 B to 64 MiB.
# The pair of jobs runs LAUNCHES times, each on a fresh cluster, and the table keeps per size and
# contender the median over the launches and the range (lowest-highest), busbw as a share of a
# node's line rate (NICS x RATE), and Loom auto's time over MPI_Allreduce's (both timed in the
# same processes, so per launch; median and range).
#
#   [SPEC=4x2:1gbit] [WORKERS=NODES] [LAUNCHES=3] [ITERS=5] [WARMUP=2] [ROUNDS=3] [GLOO_SECONDS=1] \
#     bash bench/cluster/allreduce.sh [BUILD_DIR=build]
#
# Open MPI's ranks yield the core while they wait (mpi_yield_when_idle 1, which `loom launch
# --emulate` passes to every client's mpirun): the emulated nodes share this machine's cores,
# but each node's hostfile line has one slot, so mpirun cannot know. Ranks that spin on the
# shared cores make every small MPI call pay for the scheduler's time slices (milliseconds),
# which a real cluster's nodes do not (runs A, B and E of the record).
#
# Needs root (the emulated cluster), a build with MPI (bash scripts/build.sh) and, for the Gloo
# rows, libgloo-dev at build time (without it they are left out). One process per node: the
# nodes share this machine's cores, so ITERS x ROUNDS at 64 MiB sets most of the run time.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
GLOO=$BUILD/bench/cluster/cluster_gloo_bench
SPEC=${SPEC:-4x2:1gbit}
LAUNCHES=${LAUNCHES:-3}
NODES=${SPEC%%[x:]*}
WORKERS=${WORKERS:-$NODES}
JOB_S=${JOB_S:-600}  # a launch's deadline (loom launch --timeout); the launcher removes the cluster
[ -x "$LOOM" ] || { echo "allreduce.sh: no $LOOM (bash scripts/build.sh)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

BENCH=(--algo auto,ring,tree --peer-mpi -b 4 -e 64M -f 16 -n "${ITERS:-5}" -w "${WARMUP:-2}"
       --rounds "${ROUNDS:-3}")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "spec: $SPEC, $WORKERS workers ($(( WORKERS / NODES )) per node), $LAUNCHES launches"
echo "loom: $LOOM launch --emulate $SPEC --workers $WORKERS --clients 1 -- $LOOM bench collective ${BENCH[*]}"
if [ -x "$GLOO" ]; then
  echo "gloo: $LOOM launch --emulate $SPEC --workers $WORKERS -- $GLOO DIR 4 64M 16 ${GLOO_SECONDS:-1} 60"
else
  echo "gloo: $GLOO not built (no libgloo-dev): no Gloo rows"
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# One launch; keeps worker 0's lines, prefix removed. Under `timeout` as well as --timeout, in
# case the launcher itself hangs (SIGTERM makes it stop the job and remove the cluster).
job() {
  timeout -k 30 $((JOB_S + 60)) "$LOOM" launch --emulate "$SPEC" --workers "$WORKERS" \
    --timeout "$JOB_S" "$@" 2>"$OUT/stderr" | sed -n 's/^\[worker 0\] //p' ||
    { echo "allreduce.sh: launch failed: $LOOM launch $*" >&2; tail -20 "$OUT/stderr" >&2; exit 1; }
}

for launch in $(seq "$LAUNCHES"); do
  # size count type redop algorithm time algbw busbw #wrong
  job --clients 1 -- "$LOOM" bench collective "${BENCH[@]}" |
    awk -v l="$launch" 'NF == 9 && $1 ~ /^[0-9]+$/ {
      if ($9 != 0) { print "allreduce.sh: " $5 " at " $1 " B: " $9 " wrong" > "/dev/stderr"; exit 1 }
      print l, $5, $1, $6, $8 }' >> "$OUT/rows.txt"
  if [ -x "$GLOO" ]; then
    store=$(mktemp -d "$OUT/gloo.XXXX")  # a fresh rendezvous directory for every launch
    job -- "$GLOO" "$store" 4 64M 16 "${GLOO_SECONDS:-1}" 60 |
      awk -v l="$launch" '$1 == "RESULT" { print l, $2, $3, $4, $5 }' >> "$OUT/rows.txt"
  fi
  echo "launch $launch done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$OUT/rows.txt" "$SPEC" <<'PY'
import collections, re, statistics, sys

spec = sys.argv[2]
m = re.match(r"(\d+)(?:x(\d+))?:(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|Kb|Mb|Gb|Tb)\b", spec)
scale = {"bit": 1, "kbit": 1e3, "Kb": 1e3, "mbit": 1e6, "Mb": 1e6, "gbit": 1e9, "Gb": 1e9,
         "tbit": 1e12, "Tb": 1e12}[m.group(4)]
nics = int(m.group(2) or 1)
nic_gbps = float(m.group(3)) * scale / 8e9  # GB/s, one NIC, one direction
line = nics * nic_gbps

NAMES = [("auto", "Loom auto"), ("ring", "Loom ring"), ("tree", "Loom tree"),
         ("MPI_Allreduce", "MPI_Allreduce"), ("gloo_ring", "Gloo ring"),
         ("gloo_ring_chunked", "Gloo ring_chunked"),
         ("gloo_halving_doubling", "Gloo halving-doubling")]
time = collections.defaultdict(dict)   # (size, who) -> {launch: us}
bus = collections.defaultdict(dict)    # (size, who) -> {launch: GB/s}
picked = collections.defaultdict(set)  # size -> algorithms auto ran
for row in open(sys.argv[1]):
    launch, algo, size, us, busbw = row.split()
    if algo.startswith("auto:"):
        picked[int(size)].add(algo[5:])
        algo = "auto"
    time[(int(size), algo)][launch] = float(us)
    bus[(int(size), algo)][launch] = float(busbw)

def cell(d, fmt):
    v = list(d.values())
    return (fmt % statistics.median(v), (fmt + "-" + fmt) % (min(v), max(v)))

def human(n):
    for unit, b in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= b and n % b == 0:
            return "%d %s" % (n // b, unit)
    return "%d B" % n

sizes = sorted({s for s, _ in time})
print()
print("| size | contender | time (us) | range | busbw (GB/s) | range | of line rate |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for size in sizes:
    for key, name in NAMES:
        if (size, key) not in time:
            continue
        us = time[(size, key)]
        t, tr = cell(us, "%.0f" if statistics.median(us.values()) >= 100 else "%.1f")
        b, br = cell(bus[(size, key)], "%.3f")
        share = 100 * statistics.median(bus[(size, key)].values()) / line
        if key == "auto":
            name += " (%s)" % "/".join(sorted(picked[size]))
        print("| %s | %s | %s | %s | %s | %s | %.0f%% |" % (human(size), name, t, tr, b, br, share))
print()
print("| size | Loom auto / MPI_Allreduce (time) | range over launches |")
print("| --- | --- | --- |")
for size in sizes:
    mine, peer = time.get((size, "auto"), {}), time.get((size, "MPI_Allreduce"), {})
    r = [mine[l] / peer[l] for l in mine if l in peer and peer[l] > 0]
    if r:
        print("| %s | %.2f | %.2f-%.2f |" % (human(size), statistics.median(r), min(r), max(r)))
launches = len({l for d in time.values() for l in d})
print("\n(%s: a node's line rate is %d x %.3f = %.3f GB/s each way; medians over %d launches;"
      " Gloo's TCP device uses the rail-0 NIC only, %.3f GB/s)" % (spec, nics, nic_gbps, line,
                                                                  launches, nic_gbps))
PY
