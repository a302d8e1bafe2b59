#!/usr/bin/env bash
# Loom vs PyTorch (CPU) on the operator rows of bench/ops: forward op and grad ops, 2 threads
# each (OpenBLAS and Loom's kernels; torch.set_num_threads). Prints a Markdown table with the
# median of 5 repetitions per row (best of ROUNDS=2 alternating rounds), then machine and load.
# Usage: bench/ops/compare.sh [filter]   (after scripts/build.sh and bench/install-peers.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bench/ops/ops_bench
THREADS=${THREADS:-2}
FILTER=${1:-}
[ -x "$BIN" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load_before=$(cut -d' ' -f1 /proc/loadavg)
# Loom and PyTorch alternate for ROUNDS rounds and each row keeps its best median, so a burst
# of load from other processes does not land on one side only.
ROUNDS=${ROUNDS:-2}
for r in $(seq 1 "$ROUNDS"); do
  OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS LOOM_NUM_THREADS=$THREADS "$BIN" \
    --benchmark_filter="${FILTER:-.}" --benchmark_format=json --benchmark_repetitions=5 \
    --benchmark_min_time=0.2 --benchmark_report_aggregates_only=true >"$tmp/loom$r.json" \
    2>/dev/null
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    OMP_NUM_THREADS=$THREADS /usr/bin/python3 bench/ops/torch_ops.py --threads "$THREADS" \
      --filter "$FILTER" >"$tmp/torch$r.json"
    # Also one thread: this VM's PyTorch build is sometimes much slower with two (docs/PERF.md).
    OMP_NUM_THREADS=1 /usr/bin/python3 bench/ops/torch_ops.py --threads 1 \
      --filter "$FILTER" >"$tmp/torch1_$r.json"
  else
    echo '{}' >"$tmp/torch$r.json"
    echo '{}' >"$tmp/torch1_$r.json"
  fi
done
load_after=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/python3 - "$tmp" "$ROUNDS" "$THREADS" <<'PY'
import json, sys
tmp, rounds, n = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def best(dicts):
    out = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = min(v, out.get(k, v))
    return out
def loom_round(r):
    return {b["run_name"].replace("/real_time", ""): b["real_time"]
            for b in json.load(open("%s/loom%d.json" % (tmp, r)))["benchmarks"]
            if b.get("aggregate_name") == "median"}
rs = range(1, rounds + 1)
loom = best(loom_round(r) for r in rs)
torch = best(json.load(open("%s/torch%d.json" % (tmp, r))) for r in rs)
torch1 = best(json.load(open("%s/torch1_%d.json" % (tmp, r))) for r in rs)
fmt = lambda v: "%.0f" % v if v else "n/a"
print("| row | Loom µs (%s thr) | PyTorch µs (%s thr) | Loom / PyTorch | PyTorch µs (1 thr) "
      "| Loom / best PyTorch |" % (n, n))
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name, us in loom.items():
    t, t1 = torch.get(name), torch1.get(name)
    best = min(v for v in (t, t1) if v) if (t or t1) else None
    print("| %s | %.0f | %s | %s | %s | %s |" % (name, us, fmt(t), "%.2f" % (us / t) if t else "n/a",
                                             fmt(t1), "%.2f" % (us / best) if best else "n/a"))
PY
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs);" \
  "threads: $THREADS; load average before/after: $load_before / $load_after"
