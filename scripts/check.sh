#!/usr/bin/env bash
# scripts/check.sh [format|kernels|tsan|asan|all]...: the checks run before every stop (default:
# all).
#   format  C++ lines at most 100 columns, and clang-format (.clang-format) clean on the C++
#           files changed since CHECK_BASE (default: the merge base with origin/main, else HEAD~1)
#   kernels every kernel registered apart from its op (LOOM_REGISTER_KERNEL, e.g. the CUDA
#           kernels of a *_cuda.cu) sits in the operators/ folder of the op's LOOM_REGISTER_OP,
#           and no operators/ file is named *_extra* or *_more* (files are named for their
#           ops). Reads the sources only (expanding the macros each file defines): a second.
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
[ ${#checks[@]} -eq 0 ] && checks=(format kernels tsan asan)
[ "${checks[0]}" = all ] && checks=(format kernels tsan asan)
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
    kernels)
      # Prints one line per offender; the registrations are found after expanding the
      # function-like macros each file defines (LOOM_COMPARE_CUDA(NAME, FN) and the like).
      offenders=$(/usr/bin/python3 - <<'PY'
import os, re
from collections import defaultdict

lexed = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
define = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)[ \t]*(.*)$", re.M)
directive = re.compile(r"^[ \t]*#.*$", re.M)
register = re.compile(r"\bLOOM_REGISTER_(OP|KERNEL)\s*\(\s*(\w+)\s*(?:,\s*(\w+))?")


def arguments(text, i):  # text[i] is "(": the call's arguments and the index after ")"
    depth, args, cur = 0, [], ""
    for j in range(i, len(text)):
        c = text[j]
        if c == "(":
            depth += 1
            if depth == 1:
                continue
        elif c == ")":
            depth -= 1
            if depth == 0:
                return args + [cur.strip()], j + 1
        elif c == "," and depth == 1:
            args, cur = args + [cur.strip()], ""
            continue
        cur += c
    return None, len(text)


def expand(text, macros, depth=0):  # every definition of a macro (#if branches alike)
    if depth > 8 or not macros:
        return text
    calls = re.compile(r"\b(%s)\s*(?=\()" % "|".join(map(re.escape, macros)))
    out, pos = [], 0
    for m in calls.finditer(text):
        if m.start() < pos:
            continue
        args, end = arguments(text, m.end())
        if args is None:
            continue
        out.append(text[pos:m.start()])
        for params, body in macros[m.group(1)]:
            bound = dict(zip(params, args))
            body = re.sub(r"\w+", lambda t: bound.get(t.group(0), t.group(0)), body)
            out.append(" %s " % expand(re.sub(r"\s*##\s*", "", body), macros, depth + 1))
        pos = end
    return "".join(out) + text[pos:]


ops, kernels, offenders = defaultdict(set), [], []
for folder, _, files in sorted(os.walk("operators")):
    for f in sorted(files):
        path = os.path.join(folder, f)
        if "_extra" in f or "_more" in f:
            offenders.append("%s: named *_extra*/*_more*; name files for the ops they hold" % path)
        if not f.endswith((".cc", ".cu", ".h", ".cuh")):
            continue
        with open(path, encoding="utf-8") as src:
            text = lexed.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else " ", src.read())
        text = text.replace("\\\n", " ")
        macros = defaultdict(list)
        for m in define.finditer(text):
            macros[m.group(1)].append(([p.strip() for p in m.group(2).split(",")], m.group(3)))
        for kind, op, place in register.findall(expand(directive.sub(" ", text), macros)):
            if kind == "OP":
                ops[op].add(folder)
            elif (op, place, path) not in kernels:
                kernels.append((op, place, path))
if not ops:
    offenders.append("operators/: no LOOM_REGISTER_OP found")
for op, place, path in kernels:
    home = ops.get(op)
    if not home:
        offenders.append("%s: %s kernel of '%s', an op registered nowhere" % (path, place, op))
    elif os.path.dirname(path) not in home:
        offenders.append("%s: %s kernel of '%s', whose op is registered in %s/" %
                         (path, place, op, ", ".join(sorted(home))))
print("\n".join(offenders))
PY
)
      if [ -n "$offenders" ]; then
        echo "$offenders" | sed 's/^/  /'
        result kernels "FAIL: $(echo "$offenders" | wc -l) offenders above (each kernel goes in its \
op's folder; files are named for their ops)"
      else
        result kernels PASS
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
    *) echo "check.sh: unknown check '$c' (format, kernels, tsan, asan, all)" >&2; exit 2 ;;
  esac
done
exit $failed
