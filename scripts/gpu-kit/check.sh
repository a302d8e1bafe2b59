#!/usr/bin/env bash
# check.sh [REPORT_DIR]: checks every CUDA path of this Loom kit on this machine, from the kit
# alone (made by scripts/gpu-kit.sh; see docs/GPU.md). Needs bash, coreutils, ldd and the GPU
# machine's driver, CUDA runtime, cuBLAS and NCCL (found under /usr/local/cuda, /usr/local/nvidia,
# /opt, /usr/lib or a Python's nvidia-* packages); python3 with torch for the side-by-side benches.
#
# Runs, with LOOM_REQUIRE_GPU=1 (a GPU test that would skip fails instead):
#   tests   every CUDA kernel against its CPU twin, the device-group rendezvous, the CUDA P2P and
#           NCCL transports, the transpiler's CUDA-place rules
#   train   each bundle on cuda:0 against cpu:0 (same losses within rounding); data-parallel
#           training on virtual devices cuda:0,0,0,0 (comm_init over CUDA P2P; every algorithm,
#           both modes) against 4 CPU places, and on cuda:0 over NCCL (comm_init = NCCLInit)
#   bench   loom topo --detect, loom bench collective on the GPU (CUDA P2P, NCCL), the op benches
#           and a training step of the MLP and CNN, each beside PyTorch when it is importable
# Writes REPORT_DIR/report.md (pass/fail of every test and check, every bench table),
# REPORT_DIR/results.tsv and REPORT_DIR/logs.tar.gz. REPORT_DIR defaults to $OUT, else
# KIT/report. Exits 0 only when everything passed on a GPU.
set -uo pipefail
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPORT=${1:-${OUT:-$KIT/report}}
mkdir -p "$REPORT" || exit 1
REPORT=$(cd "$REPORT" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
LOGS=$WORK/logs
mkdir -p "$LOGS"
MD=$WORK/body.md
TSV=$REPORT/results.tsv
export LOOM_REQUIRE_GPU=1
START=$(date +%s)
FAILS=0
NOT_RUN=0
: >"$TSV"
LOOM=$KIT/bin/loom

say() { echo "check: $*"; }
# record KIND NAME RESULT DETAIL: one line of results.tsv; FAIL counts.
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$TSV"
  [ "$3" = FAIL ] && FAILS=$((FAILS + 1))
  [ "$3" = NOT-RUN ] && NOT_RUN=$((NOT_RUN + 1))
  printf 'check: %-6s %-58s %s %s\n' "$1" "$2" "$3" "$4"
}

# --- libraries --------------------------------------------------------------------------------
# Libraries the kit carries compressed are unpacked first.
mkdir -p "$WORK/lib"
for z in "$KIT"/lib/*.gz; do
  [ -e "$z" ] || continue
  gzip -dc "$z" >"$WORK/lib/$(basename "$z" .gz)" || { echo "check: cannot unpack $z" >&2; exit 1; }
done
export LD_LIBRARY_PATH=$KIT/lib:$WORK/lib
unresolved() {
  for f in "$KIT"/bin/* "$KIT"/lib/*.so "$KIT"/lib/*.so.[0-9]* "$WORK"/lib/*; do
    [ -e "$f" ] && ldd "$f" 2>/dev/null
  done |
    awk '/=> not found/ {print $1}' | sort -u
}
ROOTS=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64
       /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda /opt
       /usr/local/lib /usr/lib)
for name in $(unresolved); do
  for root in "${ROOTS[@]}"; do
    [ -d "$root" ] || continue
    hit=$(find "$root" -name "$name" -print -quit 2>/dev/null)
    if [ -n "$hit" ]; then
      dir=$(dirname "$hit")
      case ":$LD_LIBRARY_PATH:" in *":$dir:"*) ;; *) LD_LIBRARY_PATH+=":$dir" ;; esac
      break
    fi
  done
done
# The driver's own folder, where a container keeps libcuda and libnvidia-ml (loaded at run time).
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH+=":$d"
done
# Debian 12's libstdc++ and libgcc_s only where this machine's do not serve (older, or none).
if ! "$LOOM" --version >/dev/null 2>&1 &&
   LD_LIBRARY_PATH=$KIT/lib/compat:$LD_LIBRARY_PATH "$LOOM" --version >/dev/null 2>&1; then
  LD_LIBRARY_PATH=$KIT/lib:$KIT/lib/compat:${LD_LIBRARY_PATH#"$KIT/lib:"}
fi
missing=$(unresolved | tr '\n' ' ')
{
  echo "kit: $(head -1 "$KIT/MANIFEST" | sed 's/^# //')"
  echo "machine: $(uname -srm), $(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(nproc) cores"
  echo "library path: \`$LD_LIBRARY_PATH\`"
  echo
} >"$MD"
if [ -n "$missing" ]; then
  record setup libraries FAIL "not found in the kit or on this machine: $missing"
  echo "check: cannot run: libraries missing: $missing" >&2
  { echo "# Loom GPU check"; echo; echo "**FAILED: cannot run: libraries missing: $missing**"
    echo; cat "$MD"; } >"$REPORT/report.md"
  exit 1
fi
record setup libraries PASS "every library resolved"

# --- the GPU ----------------------------------------------------------------------------------
{
  echo '## GPU'
  echo '```'
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
  else
    echo "nvidia-smi: not found"
  fi
  "$LOOM" devices 2>&1
  if command -v cuobjdump >/dev/null 2>&1; then
    echo "libloom.so GPU code: $(cuobjdump --list-elf "$KIT/lib/libloom.so" 2>/dev/null |
      grep -o 'sm_[0-9a-z]*' | sort | uniq -c | tr -s ' ' | tr '\n' ';') PTX: $(
      cuobjdump --list-ptx "$KIT/lib/libloom.so" 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort |
      uniq -c | tr -s ' ' | tr '\n' ';')"
  fi
  echo '```'
} >>"$MD"
GPUS=$("$LOOM" devices 2>/dev/null | awk '/^cuda devices:/ {print $3; exit}')
GPUS=${GPUS:-0}
sed -n '/^## GPU/,$p' "$MD" | grep -v '^```\|^## ' | sed 's/^/check: /'

# --- tests ------------------------------------------------------------------------------------
# gtest NAME BINARY FILTER TIMEOUT_S: one line per test into results.tsv.
gtest() {
  local name=$1 bin=$2 filter=$3 limit=$4 log=$LOGS/$1.log rc
  timeout "$limit" "$KIT/bin/$bin" --gtest_filter="$filter" --gtest_color=no >"$log" 2>&1
  rc=$?
  # Per-test lines carry their time: "[       OK ] Suite.Name (12 ms)".
  while read -r status test ms; do
    case "$status" in
      OK) record test "$test" PASS "$ms ms" ;;
      SKIPPED) record test "$test" SKIP "$ms ms" ;;
      FAILED)
        if grep -q "LOOM_REQUIRE_GPU is set and this test would skip" <(
             sed -n "/^\[ RUN      \] ${test//\//\\/}\$/,/^\[  FAILED  \] ${test//\//\\/}[ ,]/p" "$log"); then
          record test "$test" FAIL "needs a GPU (see $name.log)"
        else
          record test "$test" FAIL "see $name.log"
        fi ;;
    esac
  done < <(sed -n -E \
    's/^\[ +(OK|FAILED|SKIPPED) +\] ([^ ,]+)(, where GetParam\(\) = .*)? \(([0-9]+) ms\)$/\1 \2 \4/p' "$log")
  if [ "$rc" = 124 ]; then
    record test "$name" FAIL "timed out after ${limit}s (see $name.log)"
  elif [ "$rc" != 0 ] && ! grep -q '^\[  FAILED  \]' "$log"; then
    record test "$name" FAIL "exit $rc without a test result (see $name.log)"
  fi
}
say "tests"
gtest operators operators_test 'Cuda*:DeviceGroup.*' 300
gtest collective_cuda collective_cuda_test '*' 300
[ -x "$KIT/bin/collective_nccl_test" ] && gtest collective_nccl collective_nccl_test '*' 180
gtest transpiler transpiler_test '*Cuda*' 120

# --- training on the GPU ----------------------------------------------------------------------
# losses FILE: the per-step losses a `loom run --print-every 1` printed.
losses() { awk '/^iter [0-9]+\// {print $4}' "$1"; }
# same_losses NAME REF GOT RTOL: the two runs' losses agree step by step within RTOL.
same_losses() {
  local worst
  worst=$(paste <(losses "$2") <(losses "$3") | awk -v n=0 '
    NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; s = $1 < 0 ? -$1 : $1; r = d / (s > 1e-6 ? s : 1e-6);
              if (r > w) w = r }
    NF != 2 { bad = 1 }
    END { if (n == 0 || bad) print "none"; else printf "%.2e", w }')
  if [ "$worst" = none ]; then
    record train "$1" FAIL "no losses to compare (see logs)"
  elif awk -v w="$worst" -v t="$4" 'BEGIN {exit !(w <= t)}'; then
    record train "$1" PASS "$(losses "$3" | wc -l) steps, largest relative difference $worst (<= $4)"
  else
    record train "$1" FAIL "largest relative difference $worst > $4 (see logs)"
  fi
}
run_loom() {  # run_loom LOG ARGS...: loom with a deadline; the log keeps the output
  local log=$1
  shift
  timeout 240 "$LOOM" "$@" >"$log" 2>&1
}

say "training"
BUNDLES=$WORK/bundles
mkdir -p "$BUNDLES"
cp -r "$KIT"/bundles/* "$BUNDLES/"
"$KIT/bin/loom_make_examples" "$BUNDLES" >"$LOGS/make_examples.log" 2>&1 ||
  record train make_examples FAIL "see make_examples.log"
if [ "$GPUS" -gt 0 ]; then
  # Both runs start from the same parameters (the CUDA and CPU random generators differ): the
  # ones after one step on cpu:0, saved and loaded.
  ITERS=30
  for b in softmax_classifier fashion_mnist_mlp fashion_mnist_cnn; do
    init=$WORK/init_$b
    if run_loom "$LOGS/$b.init.log" run "$BUNDLES/$b" --iters 1 --place cpu:0 --save-params "$init" &&
       run_loom "$LOGS/$b.cpu.log" run "$BUNDLES/$b" --iters $ITERS --print-every 1 --place cpu:0 \
         --load-params "$init" &&
       run_loom "$LOGS/$b.cuda.log" run "$BUNDLES/$b" --iters $ITERS --print-every 1 --place cuda:0 \
         --load-params "$init"
    then
      same_losses "$b on cuda:0 vs cpu:0" "$LOGS/$b.cpu.log" "$LOGS/$b.cuda.log" 1e-3
    else
      record train "$b on cuda:0 vs cpu:0" FAIL "loom run failed (see $b.*.log)"
    fi
  done
  # Data parallel: 4 virtual devices on GPU 0 (CUDA P2P: Loom's schedules over peer copies and
  # reduction kernels) against 4 CPU places, every algorithm, allreduce and owner mode.
  B=$BUNDLES/fashion_mnist_mlp
  INIT=$WORK/init_fashion_mnist_mlp
  for mode in allreduce owner; do
    ref=$WORK/dp_cpu_$mode
    if run_loom "$LOGS/transpile_cpu_$mode.log" transpile "$B" -o "$ref" --places cpu:4 \
         --mode $mode && run_loom "$LOGS/dp_cpu_$mode.log" run "$ref" --iters 20 --print-every 1 \
         --load-params "$INIT"
    then
      for algo in ring tree multi_tree star auto; do
        name="mlp on cuda:0,0,0,0 (cuda_p2p, $algo, $mode) vs cpu:4"
        out=$WORK/dp_${algo}_$mode
        if run_loom "$LOGS/transpile_${algo}_$mode.log" transpile "$B" -o "$out" \
             --places cuda:0,0,0,0 --transport cuda_p2p --algo $algo --mode $mode &&
           run_loom "$LOGS/dp_${algo}_$mode.log" run "$out" --iters 20 --print-every 1 \
             --load-params "$INIT"; then
          same_losses "$name" "$LOGS/dp_cpu_$mode.log" "$LOGS/dp_${algo}_$mode.log" 1e-3
        else
          record train "$name" FAIL "see transpile_${algo}_$mode.log / dp_${algo}_$mode.log"
        fi
      done
    else
      record train "mlp on cpu:4 ($mode), the reference" FAIL "see dp_cpu_$mode.log"
    fi
  done
  # NCCL: comm_init creates the NCCL communicator (NCCLInit); NCCL takes one GPU per rank.
  nccl_out=$WORK/dp_nccl
  name="mlp on cuda:$(seq -s, 0 $((GPUS - 1))) (nccl) vs cpu:$GPUS"
  if run_loom "$LOGS/transpile_nccl.log" transpile "$B" -o "$nccl_out" \
       --places "cuda:$(seq -s, 0 $((GPUS - 1)))" --transport nccl &&
     run_loom "$LOGS/dp_nccl.log" run "$nccl_out" --iters 20 --print-every 1 \
       --load-params "$INIT" &&
     run_loom "$LOGS/transpile_nccl_ref.log" transpile "$B" -o "$WORK/dp_nccl_ref" \
       --places "cpu:$GPUS" &&
     run_loom "$LOGS/dp_nccl_ref.log" run "$WORK/dp_nccl_ref" --iters 20 --print-every 1 \
       --load-params "$INIT"; then
    same_losses "$name" "$LOGS/dp_nccl_ref.log" "$LOGS/dp_nccl.log" 1e-3
  else
    record train "$name" FAIL "see transpile_nccl*.log / dp_nccl*.log"
  fi
else
  for n in "3 bundles on cuda:0 vs cpu:0" "10 data-parallel runs on cuda:0,0,0,0" \
           "data-parallel run over NCCL"; do
    record train "$n" NOT-RUN "no CUDA device"
  done
fi

# --- benches ----------------------------------------------------------------------------------
HAVE_TORCH=0
if command -v python3 >/dev/null 2>&1 &&
   python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null
then
  HAVE_TORCH=1
fi
if [ "$GPUS" -gt 0 ]; then
  say "benches"
  if run_loom "$LOGS/topo_detect.log" topo --detect; then
    record bench "loom topo --detect" PASS ""
  else
    record bench "loom topo --detect" FAIL "see topo_detect.log"
  fi
  {
    echo
    echo '## loom topo --detect'
    echo '```'
    cat "$LOGS/topo_detect.log"
    echo '```'
  } >>"$MD"
  for spec in "cuda:0,0,0,0 cuda_p2p" "cuda:$(seq -s, 0 $((GPUS - 1))) nccl"; do
    set -- $spec
    log=$LOGS/bench_collective_$2.log
    if run_loom "$log" bench collective --places "$1" --transport "$2" --algo all \
         -b 4 -e 256M -n 20; then
      record bench "loom bench collective --places $1 --transport $2" PASS ""
    else
      record bench "loom bench collective --places $1 --transport $2" FAIL "see $(basename "$log")"
    fi
    { echo; echo "## loom bench collective --places $1 --transport $2 --algo all"
      echo '```'; cat "$log"; echo '```'; } >>"$MD"
  done
  # Operators: ops_bench on cuda:0 beside PyTorch on the same GPU.
  timeout 240 "$KIT/bin/ops_bench" --place=cuda:0 --benchmark_format=json \
    --benchmark_repetitions=5 --benchmark_min_time=0.1 --benchmark_report_aggregates_only=true \
    >"$LOGS/ops_loom.json" 2>"$LOGS/ops_loom.err" ||
    record bench "ops_bench --place=cuda:0" FAIL "see ops_loom.err"
  if [ "$HAVE_TORCH" = 1 ]; then
    timeout 240 python3 "$KIT/bench/torch_ops.py" --device cuda --min-time 0.1 \
      >"$LOGS/ops_torch.json" 2>"$LOGS/ops_torch.err" ||
      record bench "torch_ops.py --device cuda" FAIL "see ops_torch.err"
  fi
  # Training steps: loom run's rate over steps 101-400 (its progress lines time each window of
  # 100 steps; the first window, with start-up, is left out).
  for m in mlp cnn; do
    b=$BUNDLES/fashion_mnist_$m
    run_loom "$LOGS/train_$m.log" run "$b" --place cuda:0 --iters 400 --print-every 100
    if [ "$HAVE_TORCH" = 1 ]; then
      timeout 240 python3 "$KIT/bench/torch_train.py" --bundle "$b" --model $m --steps 300 \
        >"$LOGS/train_${m}_torch.json" 2>"$LOGS/train_${m}_torch.err" ||
        record bench "torch_train.py --model $m" FAIL "see train_${m}_torch.err"
    fi
  done
  if command -v python3 >/dev/null 2>&1; then
    python3 - "$LOGS" >>"$MD" 2>"$LOGS/tables.err" <<'PY' || record bench tables FAIL "see tables.err"
import json, os, re, sys
logs = sys.argv[1]
def load(name):
    try:
        with open(os.path.join(logs, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
print("\n## Operators on cuda:0 (median µs per call, stream drained after each)\n")
loom = load("ops_loom.json") or {"benchmarks": []}
torch = load("ops_torch.json") or {}
rows = {}
for b in loom["benchmarks"]:
    if b.get("aggregate_name") == "median":
        rows[b["run_name"].replace("/real_time", "")] = b["real_time"]
print("| op | Loom | PyTorch | Loom / PyTorch |")
print("| --- | ---: | ---: | ---: |")
for name, t in rows.items():
    p = torch.get(name)
    print("| %s | %.1f | %s | %s |" % (name, t, "%.1f" % p if p else "-",
                                       "%.2f" % (t / p) if p else "-"))
print("\n## Training step on cuda:0 (Fashion-MNIST, batch 64, Adam; steps/s)\n")
print("| model | Loom (`loom run`) | PyTorch eager | Loom / PyTorch |")
print("| --- | ---: | ---: | ---: |")
def steady_rate(path):
    """Steps/s over the windows after the first: 100 / (sum of their times)."""
    try:
        with open(path) as f:
            rates = [float(r) for it, r in re.findall(r"^iter (\d+)/\d+ .* ([0-9.]+) it/s$",
                                                      f.read(), re.M) if int(it) >= 200]
    except OSError:
        return None
    return len(rates) / sum(1.0 / r for r in rates) if rates else None
for m in ("mlp", "cnn"):
    loom_rate = steady_rate(os.path.join(logs, "train_%s.log" % m))
    t = load("train_%s_torch.json" % m)
    torch_rate = t["steps_per_s"] if t else None
    print("| %s | %s | %s | %s |" % (m, "%.0f" % loom_rate if loom_rate else "-",
                                     "%.0f" % torch_rate if torch_rate else "-",
                                     "%.2f" % (loom_rate / torch_rate) if loom_rate and torch_rate else "-"))
if torch:
    t = load("train_mlp_torch.json") or {}
    print("\nPyTorch %s on %s." % (t.get("torch", "?"), t.get("device", "?")))
PY
  fi
else
  record bench "topo --detect, collective and op benches, training steps" NOT-RUN "no CUDA device"
fi

# --- report -----------------------------------------------------------------------------------
GPU_TESTS_NOT_RUN=$(awk -F'\t' '$3 == "FAIL" && $4 ~ /^needs a GPU/' "$TSV" | wc -l)
NOT_RUN=$((NOT_RUN + GPU_TESTS_NOT_RUN))
PASSED=$(awk -F'\t' '$3 == "PASS"' "$TSV" | wc -l)
ELAPSED=$(($(date +%s) - START))
if [ "$GPUS" = 0 ]; then
  VERDICT="FAILED: no CUDA device: $NOT_RUN GPU tests could not run"
elif [ "$FAILS" -gt 0 ]; then
  VERDICT="FAILED: $FAILS of $((FAILS + PASSED)) checks failed"
else
  VERDICT="PASSED: all $PASSED checks on $GPUS GPU(s)"
fi
{
  echo "# Loom GPU check"
  echo
  echo "**$VERDICT** (in ${ELAPSED} s)"
  echo
  cat "$MD"
  echo
  echo "## Results"
  echo
  echo "| kind | check | result | detail |"
  echo "| --- | --- | --- | --- |"
  awk -F'\t' '{printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4}' "$TSV"
} >"$REPORT/report.md"
tar -czf "$REPORT/logs.tar.gz" -C "$WORK" logs
echo "check: $VERDICT (in ${ELAPSED} s); report: $REPORT/report.md"
[ "$GPUS" != 0 ] && [ "$FAILS" = 0 ]
