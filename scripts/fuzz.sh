#!/usr/bin/env bash
# Builds the libFuzzer targets (the program loader + verifier, and the parameter-server message
# decoder) with clang and runs each.
# Usage: scripts/fuzz.sh [SECONDS]   (default 30). Fails when clang is absent
# (scripts/install-deps.sh installs it), so that a test run cannot lose the fuzzers silently.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-30}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
BUILD=build-fuzz
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DLOOM_FUZZ=ON >/dev/null
ninja -C "$BUILD" -j2 program_fuzzer rpc_message_fuzzer
# Seed corpus: the example programs, if they were built.
CORPUS=$(mktemp -d)
cp tests/fuzz/corpus/* "$CORPUS"/ 2>/dev/null || true
for f in build/examples_out/*/*.pb; do [ -f "$f" ] && cp "$f" "$CORPUS/$(basename "$(dirname "$f")")_$(basename "$f")"; done
echo "fuzz: running program_fuzzer for ${SECONDS_TO_RUN}s"
ASAN_OPTIONS=detect_leaks=0 "$BUILD/tests/fuzz/program_fuzzer" -max_total_time="$SECONDS_TO_RUN" \
  -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "$CORPUS" 2>&1 | tail -n 15
rm -rf "$CORPUS"
echo "fuzz: running rpc_message_fuzzer for ${SECONDS_TO_RUN}s"
CORPUS=$(mktemp -d)
ASAN_OPTIONS=detect_leaks=0 "$BUILD/tests/fuzz/rpc_message_fuzzer" -max_total_time="$SECONDS_TO_RUN" \
  -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "$CORPUS" 2>&1 | tail -n 15
rm -rf "$CORPUS"
