#!/usr/bin/env bash
# Push+pull of one key, 2 workers x 2 servers on 127.0.0.1, side by side in one run: the loopback
# bound (iperf3), MXNet 1.9.1's dist_sync KVStore (ps-lite over ZeroMQ) and Loom's parameter
# servers. Needs a build (bash scripts/build.sh) and, for the peers, bench/ps/install-mxnet.sh.
# Usage: bash bench/ps/compare.sh   (docs/PERF.md has the numbers of this machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
MXNET_PY=${MXNET_VENV:-/opt/venvs/mxnet}/bin/python
echo "== loopback bound (iperf3)"
if command -v iperf3 >/dev/null; then bash bench/ps/iperf3_bound.sh; else echo "iperf3 missing: bench/ps/install-mxnet.sh"; fi
echo "== MXNet dist_sync"
if [ -x "$MXNET_PY" ]; then "$MXNET_PY" bench/ps/mxnet_kvstore.py; else echo "MXNet venv missing: bench/ps/install-mxnet.sh"; fi
echo "== Loom parameter servers (sync)"
PYTHONPATH=build/python /usr/bin/python3 bench/ps/loom_ps_bench.py
