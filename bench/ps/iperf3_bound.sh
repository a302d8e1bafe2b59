#!/usr/bin/env bash
# What loopback TCP can carry on this machine: iperf3 with 1 and 2 parallel streams, 3 s each.
# Prints one JSON line per run: {"impl":"iperf3-loopback","streams":N,"gbps":...} (bytes/s / 1e9).
# Needs iperf3 (bench/ps/install-mxnet.sh installs it), ss (iproute2) and python3.
set -euo pipefail
SERVER_PID=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true' EXIT

for streams in 1 2; do
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  # One-shot server (-1): it serves a single client, then exits.
  timeout 30 iperf3 -s -1 -B 127.0.0.1 -p "$port" >/dev/null & SERVER_PID=$!
  for _ in $(seq 50); do  # wait up to 5 s for it to listen
    [ -n "$(ss -Hltn "sport = :$port")" ] && break; sleep 0.1  # (a probe connect would use up -1)
  done
  timeout 30 iperf3 -c 127.0.0.1 -p "$port" -t 3 -P "$streams" -J |
    python3 -c 'import json,sys; r=json.load(sys.stdin)
print(json.dumps({"impl":"iperf3-loopback","streams":'"$streams"',
  "gbps":round(r["end"]["sum_received"]["bits_per_second"]/8/1e9,3)}))'
  wait "$SERVER_PID" || true; SERVER_PID=""
done
