#!/usr/bin/env bash
# The sanitizer stage of CI (scripts/test.sh runs it after the other tests):
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/ (CUDA, Python and
#         benchmarks off), then every ctest test;
#   tsan  ThreadSanitizer build in build-tsan/ of the suites whose code runs threads and sockets
#         (collective, rpc, kvstore, runtime), each test binary run whole.
# Usage: scripts/ci-sanitizers.sh [asan] [tsan]   (default: both). Prints one line per stage with
# its time; exits non-zero on the first failure, naming the log to read.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${LOOM_JOBS:-2}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(asan tsan)

configure() {  # configure DIR SANITIZER
  # -O1 and no debug info: the sanitizers need no more, and the builds take half the time. MPI
  # off: Open MPI's own allocations would be reported as leaks.
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="-O1 -g0" \
    -DLOOM_SANITIZE="$2" -DLOOM_WITH_CUDA=OFF -DLOOM_WITH_MPI=OFF -DLOOM_BUILD_PYTHON=OFF \
    -DLOOM_BUILD_BENCH=OFF >/dev/null
}

for stage in "${stages[@]}"; do
  begin=$(date +%s)
  case "$stage" in
    asan)
      configure build-asan address
      ninja -C build-asan -j"$JOBS" >build-asan/ninja.log 2>&1 ||
        { tail -30 build-asan/ninja.log; echo "ci-sanitizers: asan build failed"; exit 1; }
      (cd build-asan && ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        ctest -j"$JOBS" --timeout 1200 --output-on-failure -E '^gpu_kit$' >test.log 2>&1) ||
        { grep -E "tests failed|\(Failed\)|\(Timeout\)|ERROR: .*Sanitizer" build-asan/test.log | head;
          echo "ci-sanitizers: asan tests failed, see build-asan/test.log"; exit 1; }
      ;;
    tsan)
      configure build-tsan thread
      targets=(collective_test rpc_test kvstore_test runtime_test launcher_test emulate_test)
      ninja -C build-tsan -j"$JOBS" "${targets[@]}" >build-tsan/ninja.log 2>&1 ||
        { tail -30 build-tsan/ninja.log; echo "ci-sanitizers: tsan build failed"; exit 1; }
      export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
      for t in collective/collective_test rpc/rpc_test kvstore/kvstore_test runtime/runtime_test \
               runtime/launcher_test runtime/emulate_test; do
        (cd build-tsan && timeout 1200 "tests/$t" >>test.log 2>&1) ||
          { tail -40 build-tsan/test.log; echo "ci-sanitizers: tsan: tests/$t failed"; exit 1; }
      done
      ;;
    *) echo "ci-sanitizers: unknown stage '$stage' (asan, tsan)" >&2; exit 2 ;;
  esac
  echo "ci-sanitizers: $stage passed in $(( $(date +%s) - begin )) s"
done
