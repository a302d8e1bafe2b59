#!/usr/bin/env bash
# Sync push+pull of one float32 key across the nodes of an emulated cluster (docs/CLUSTER.md),
# side by side: Loom's parameter servers and MXNet 1.9.1's dist_sync KVStore (ps-lite over
# ZeroMQ), placed alike by `loom launch --emulate SPEC --servers S --workers N` (one server per
# node by default; workers in blocks over the nodes; MXNet's scheduler beside server 0), and the
# TCP goodput of one link (iperf3 from node 0 to node 1). Both shard the key over the servers
# (Fluid's slicing, MXNet's big-array bound). Every round each worker pushes the key and pulls
# the servers' sum back; one job per implementation, REPS times, alternating, each job on a
# fresh cluster. The table keeps the median round trip over the jobs (each job's value: the
# median over its rounds of the slower worker) and the range, with the link's bound: the bytes
# a node must send per round over its NIC at line rate (the servers' endpoints are rail-0
# addresses, so one NIC's rate whatever NICS is).
#
#   [SPEC=2x1:1gbit] [REPS=3] [WORKERS=2] [BYTES=64M in bytes] [ITERS=10] [WARMUP=3] \
#     bash bench/cluster/ps.sh [BUILD_DIR=build]
#
# Needs root, a build (bash scripts/build.sh), and MXNet in MXNET_VENV (/opt/venvs/mxnet;
# bench/ps/install-mxnet.sh, which also installs iperf3); without MXNet its rows are left out.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
LOOM=$BUILD/tools/loom
MXNET_PY=${MXNET_VENV:-/opt/venvs/mxnet}/bin/python
SPEC=${SPEC:-2x1:1gbit}
REPS=${REPS:-3}
NODES=${SPEC%%[x:]*}
SERVERS=${SERVERS:-$NODES}
WORKERS=${WORKERS:-2}
BYTES=${BYTES:-67108864}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-3}
JOB_S=${JOB_S:-300}  # a job's deadline (loom launch --timeout); the launcher removes the cluster
[ -x "$LOOM" ] || { echo "ps.sh: no $LOOM (bash scripts/build.sh)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

LAUNCH=(--emulate "$SPEC" --servers "$SERVERS" --workers "$WORKERS")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "spec: $SPEC, $SERVERS servers, $WORKERS workers, one key of $BYTES bytes, $ITERS rounds after $WARMUP, $REPS jobs each"
echo "loom:  PYTHONPATH=$BUILD/python $LOOM launch ${LAUNCH[*]} -- /usr/bin/python3 bench/cluster/ps_role.py loom $BYTES $ITERS $WARMUP"
if [ -x "$MXNET_PY" ]; then
  echo "mxnet: $LOOM launch ${LAUNCH[*]} -- $MXNET_PY bench/cluster/ps_role.py mxnet $BYTES $ITERS $WARMUP"
else
  echo "mxnet: no $MXNET_PY (bench/ps/install-mxnet.sh): no MXNet rows"
fi
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# One job; its output lines, with their '[worker k] ' prefixes, into $OUT/$1.txt. Under
# `timeout` as well as --timeout, in case the launcher itself hangs (SIGTERM makes it stop the
# job and remove the cluster).
job() {
  local name=$1; shift
  timeout -k 30 $((JOB_S + 60)) "$LOOM" launch --timeout "$JOB_S" "$@" >"$OUT/$name.txt" 2>&1 ||
    { echo "ps.sh: job failed: $LOOM launch $*" >&2; tail -30 "$OUT/$name.txt" >&2; exit 1; }
}

# The link: iperf3 from node 0 to node 1 (3 s). The server on node 1 serves until the client
# on node 0 is done (a file both see) or 60 s have passed; the client retries until it connects.
if [ "$NODES" -ge 2 ] && command -v iperf3 >/dev/null; then
  job iperf --emulate "$SPEC" --workers 2 --no-prefix -- sh -c '
    json=$0; flag=$0.done
    if [ "$LOOM_EMULATE_NODE" = 1 ]; then
      iperf3 -s -B "$POD_IP" >/dev/null 2>&1 & server=$!
      for i in $(seq 600); do [ -e "$flag" ] && break; sleep 0.1; done
      kill "$server"; wait "$server"; exit 0
    fi
    for i in $(seq 50); do
      timeout 20 iperf3 -c 10.77.0.2 -t 3 -J >"$json" 2>/dev/null && break; sleep 0.2
    done
    touch "$flag"
    /usr/bin/python3 -c "import json, sys; r = json.load(open(sys.argv[1]))
print(\"IPERF\", r[\"end\"][\"sum_received\"][\"bits_per_second\"] / 8e9)" "$json"' \
    "$OUT/iperf.json"
  grep '^IPERF ' "$OUT/iperf.txt" > "$OUT/iperf.rows" || true
fi

for rep in $(seq "$REPS"); do
  PYTHONPATH=$BUILD/python job "loom-$rep" "${LAUNCH[@]}" -- /usr/bin/python3 \
    bench/cluster/ps_role.py loom "$BYTES" "$ITERS" "$WARMUP"
  if [ -x "$MXNET_PY" ]; then
    job "mxnet-$rep" "${LAUNCH[@]}" -- "$MXNET_PY" bench/cluster/ps_role.py mxnet "$BYTES" \
      "$ITERS" "$WARMUP"
  fi
  echo "rep $rep done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$OUT" "$SPEC" "$BYTES" "$WORKERS" "$SERVERS" <<'PY'
import glob, json, os, re, statistics, sys

out, spec, nbytes, workers, servers = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
m = re.match(r"(\d+)(?:x(\d+))?:(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit|tbit|Kb|Mb|Gb|Tb)\b", spec)
scale = {"bit": 1, "kbit": 1e3, "Kb": 1e3, "mbit": 1e6, "Mb": 1e6, "gbit": 1e9, "Gb": 1e9,
         "tbit": 1e12, "Tb": 1e12}[m.group(4)]
nodes, rate = int(m.group(1)), float(m.group(3)) * scale / 8  # bytes/s, one NIC, one direction

# What the busiest node sends per round, with one server per node and the key in equal shards:
# its workers' pushes to the other nodes' servers, and its server's shard to the other nodes'
# workers (a node receives as much).
per_node = max(1, workers // nodes)
sent = per_node * nbytes * (servers - 1) / servers + (workers - per_node) * nbytes / servers
bound_ms = sent / rate * 1e3

jobs = {}  # impl -> [slowest worker's median ms of each job]
for path in sorted(glob.glob(os.path.join(out, "*-*.txt"))):
    impl = os.path.basename(path).split("-")[0]
    ms = []
    for line in open(path):
        body = re.sub(r"^\[worker \d+\] ", "", line)
        if body.startswith("RESULT "):  # Loom: a list of sizes
            ms += [r["median_ms"] for r in json.loads(body[7:])]
        elif body.startswith("RESULTS "):  # MXNet: {"rank", "results"}
            ms += [r["median_ms"] for r in json.loads(body[8:])["results"]]
    if len(ms) != workers:
        sys.exit("ps.sh: %s has %d worker results, not %d" % (path, len(ms), workers))
    jobs.setdefault(impl, []).append(max(ms))

names = {"loom": "Loom parameter servers (sync)", "mxnet": "MXNet 1.9.1 dist_sync (ps-lite)"}
print()
print("| implementation | round trip (ms), median | range | GB/s per worker | of the link's bound |")
print("| --- | --- | --- | --- | --- |")
for impl in ("loom", "mxnet"):
    if impl in jobs:
        v = jobs[impl]
        med = statistics.median(v)
        print("| %s | %.0f | %.0f-%.0f | %.3f | %.0f%% |" % (
            names[impl], med, min(v), max(v), 2 * nbytes / med / 1e6, 100 * bound_ms / med))
print("| link bound: %.0f MiB out of and into each node per round at %.3f GB/s | %.0f | | %.3f | 100%% |"
      % (sent / 2**20, rate / 1e9, bound_ms, 2 * nbytes / bound_ms / 1e6))
iperf = os.path.join(out, "iperf.rows")
if os.path.exists(iperf) and os.path.getsize(iperf):
    gbs = float(open(iperf).read().split()[1])
    print("| iperf3, node 0 to node 1, one stream, 3 s: %.3f GB/s | %.0f | | %.3f | |"
          % (gbs, sent / gbs / 1e6, 2 * nbytes / (sent / gbs / 1e6) / 1e6))
if "loom" in jobs and "mxnet" in jobs:
    print("\nLoom / MXNet round trip: %.2f (medians over %d and %d jobs)"
          % (statistics.median(jobs["loom"]) / statistics.median(jobs["mxnet"]),
             len(jobs["loom"]), len(jobs["mxnet"])))
print("(GB/s per worker = 2 x %d bytes / round trip, as bench/ps; a worker's share of the key on"
      " its own node's server does not cross the link)" % nbytes)
PY
