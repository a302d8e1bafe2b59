#!/usr/bin/env bash
# Loom executor vs PyTorch eager: per-op dispatch time on a chain of 1,000 ops over 1-element
# tensors, one thread each. Prints a Markdown table row per system.
# Usage: bench/executor/compare.sh   (after scripts/build.sh and bench/install-peers.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/bench/executor_bench
[ -x "$BIN" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
loom_json=$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$BIN" --benchmark_format=json \
  --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>/dev/null)
loom_ns=$(printf '%s' "$loom_json" | /usr/bin/python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%.0f" % min(1e9 / b["items_per_second"] for b in d["benchmarks"] if b.get("aggregate_name") == "median"))')
echo "| system | ns per op (chain of 1,000 ops, 1-element tensors) |"
echo "| --- | --- |"
echo "| Loom Executor | $loom_ns |"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  torch_ns=$(/usr/bin/python3 bench/executor/torch_chain.py --ops 1000 | /usr/bin/python3 -c '
import json, sys; print("%.0f" % json.load(sys.stdin)["ns_per_op"])')
  echo "| PyTorch eager (python3-torch, no_grad) | $torch_ns |"
else
  echo "| PyTorch eager | not installed (bench/install-peers.sh) |"
fi
echo
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
