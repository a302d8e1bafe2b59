#!/usr/bin/env bash
# scripts/check.sh [format|tsan|asan|all]...: the checks run before every stop (default: all).
#   format  C++ lines at most 100 columns, and clang-format (.clang-format) clean on the C++
#           files changed since CHECK_BASE (default: the merge base with origin/main, else HEAD~1)
#   tsan    ThreadSanitizer build in build-tsan/ (CUDA, MPI and Python off), then the tests of
#           what runs threads: collectives, device groups, executor, data-parallel transpiler, CLI
#   asan    AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/, then every ctest
# CI runs its own, leaner sanitizer stage (scripts/ci-sanitizers.sh: -O1, no debug info, TSan
# over the collective, rpc, kvstore and runtime suites). Prints one line per check and exits
# non-zero on any failure.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=${LOOM_JOBS:-2}
checks=("$@")
[ ${#checks[@]} -eq 0 ] && checks=(format tsan asan)
[ "${checks[0]}" = all ] && checks=(format tsan asan)
failed=0
result() { printf 'check.sh: %-7s %s\n' "$1" "$2"; [ "$2" = PASS ] || failed=1; }

sanitized_build() {  # sanitized_build DIR SANITIZER
  cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOOM_SANITIZE="$2" \
    -DLOOM_WITH_CUDA=OFF -DLOOM_WITH_MPI=OFF -DLOOM_BUILD_PYTHON=OFF -DLOOM_BUILD_BENCH=OFF \
    >/dev/null && ninja -C "$1" -j"$JOBS" >"$1/ninja.log" 2>&1
}

for c in "${checks[@]}"; do
  case "$c" in
    format)
      long=$(git ls-files '*.cc' '*.h' '*.cu' | /usr/bin/python3 -c '
import sys
for f in sys.stdin.read().split():
    for i, line in enumerate(open(f, encoding="utf-8"), 1):
        if len(line.rstrip("\n")) > 100:
            print("%s:%d" % (f, i))')
      base=${CHECK_BASE:-$(git merge-base HEAD origin/main 2>/dev/null || git rev-parse HEAD~1)}
      changed=$(git diff --name-only --diff-filter=AM "$base" -- '*.cc' '*.h' '*.cu')
      unformatted=""
      if command -v clang-format >/dev/null 2>&1; then
        for f in $changed; do
          clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=" $f"
        done
      fi
      if [ -n "$long" ]; then
        result format "FAIL: lines over 100 columns: $(echo "$long" | head -5 | tr '\n' ' ')"
      elif [ -n "$unformatted" ]; then
        result format "FAIL: not clang-format clean (clang-format -i):$unformatted"
      else
        result format PASS
      fi ;;
    tsan)
      if sanitized_build build-tsan thread; then
        supp="$PWD/scripts/tsan.supp"
        (cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$supp" \
          ctest -j"$JOBS" --timeout 1200 --output-on-failure \
          -R 'collective_test|Collective|InProcess|Native|Robust|Abort|DeviceGroup|Executor|DataParallel|Runner|RankFeed|Train|Errors|Cli|ControlFlow|Rpc|Distribute|Launch|KVStore|Hierarchical' \
          >test.log 2>&1) && result tsan PASS ||
          result tsan "FAIL: see build-tsan/test.log"
      else
        result tsan "FAIL: build, see build-tsan/ninja.log"
      fi ;;
    asan)
      if sanitized_build build-asan address; then
        (cd build-asan && ASAN_OPTIONS="detect_leaks=1:abort_on_error=1" \
          UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
          ctest -j"$JOBS" --timeout 1200 --output-on-failure >test.log 2>&1) &&
          result asan PASS || result asan "FAIL: see build-asan/test.log"
      else
        result asan "FAIL: build, see build-asan/ninja.log"
      fi ;;
    *) echo "check.sh: unknown check '$c' (format, tsan, asan, all)" >&2; exit 2 ;;
  esac
done
exit $failed
