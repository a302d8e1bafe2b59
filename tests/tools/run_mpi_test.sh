#!/usr/bin/env bash
# loom transpile --transport mpi + mpirun -np N loom run: one rank per process trains exactly
# like the same program run with all ranks in one process (every progress line equal), for both
# modes, several algorithms (MPI's native one included) and rank counts; and the errors: no
# mpirun, a world of the wrong size.
#   run_mpi_test.sh MPIRUN LOOM MAKE_EXAMPLES
set -euo pipefail
MPIRUN=$1 LOOM=$2 MAKE_EXAMPLES=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$MAKE_EXAMPLES" "$WORK/ex" > /dev/null
IN="$WORK/ex/softmax_classifier"
mpi() { "$MPIRUN" --oversubscribe --allow-run-as-root "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# iteration lines without the it/s rate
losses() { grep -E '^(iter|done)' | sed -E 's/  [0-9.]+ it\/s$//; s/ in [0-9.]+ s;/;/'; }

for cfg in "2 allreduce ring 0" "3 allreduce tree 0" "3 owner auto 32" "4 allreduce multi_tree 0" \
           "2 owner star 0"; do
  read -r np mode algo fuse <<< "$cfg"
  "$LOOM" transpile "$IN" -o "$WORK/ip" --places "cpu:$np" --mode "$mode" --algo "$algo" \
      --fuse-mb "$fuse" > /dev/null
  "$LOOM" transpile "$IN" -o "$WORK/mpi" --places "cpu:$np" --mode "$mode" --algo "$algo" \
      --fuse-mb "$fuse" --transport mpi > /dev/null
  grep -q 'transport: "mpi"' "$WORK/mpi/manifest.pbtxt" || fail "manifest lacks transport mpi"
  want=$("$LOOM" run "$WORK/ip" --iters 25 --print-every 5 | losses)
  got=$(mpi -np "$np" "$LOOM" run "$WORK/mpi" --iters 25 --print-every 5 \
        --save-params "$WORK/params" | tee "$WORK/out.txt" | losses)
  grep -q "$np ranks ($mode, mpi" "$WORK/out.txt" || fail "$cfg: not run over MPI"
  [ "$(grep -c '^done' "$WORK/out.txt")" = 1 ] || fail "$cfg: more than one rank printed"
  [ -n "$want" ] && [ "$want" = "$got" ] || {
    echo "in-process:"; echo "$want"; echo "mpi:"; echo "$got"; fail "$cfg: losses differ"; }
  [ -n "$(ls "$WORK/params")" ] || fail "$cfg: no params saved"
  rm -rf "$WORK/ip" "$WORK/mpi" "$WORK/params"
  echo "ok: np=$np $mode $algo fuse=$fuse"
done

# MPI's own allreduce (native) gives the same training within rounding.
"$LOOM" transpile "$IN" -o "$WORK/nat" --places cpu:2 --algo native --transport mpi > /dev/null
out=$(mpi -np 2 "$LOOM" run "$WORK/nat" --iters 25)
echo "$out" | grep -qE '^done: 25 iterations.*lower\)' || { echo "$out"; fail "native: no progress"; }

# Errors: no mpirun; a world of the wrong size (every rank says so; the job exits non-zero).
set +e
msg=$("$LOOM" run "$WORK/nat" --iters 2 2>&1); rc=$?
set -e
[ $rc = 1 ] || fail "run without mpirun: exit $rc"
echo "$msg" | grep -q "transpiled for transport mpi: start one process per rank" ||
  fail "run without mpirun: $msg"
set +e
msg=$(timeout 120 "$MPIRUN" --oversubscribe --allow-run-as-root -np 3 "$LOOM" run "$WORK/nat" \
      --iters 2 2>&1); rc=$?
set -e
[ $rc != 0 ] && [ $rc != 124 ] || fail "wrong world size: exit $rc"
echo "$msg" | grep -q "transpiled for 2 ranks, the MPI world has 3 processes" ||
  fail "wrong world size: $msg"
# Ranks started with different options, or from bundles transpiled from different programs,
# fail at once naming both values (no rank trains on alone).
set +e
msg=$(timeout 120 "$MPIRUN" --oversubscribe --allow-run-as-root -np 1 "$LOOM" run "$WORK/nat" \
      --iters 2 --batch-size 16 : -np 1 "$LOOM" run "$WORK/nat" --iters 2 --batch-size 32 2>&1)
rc=$?
set -e
[ $rc != 0 ] && [ $rc != 124 ] || fail "different batch sizes: exit $rc"
echo "$msg" | grep -q "different batch size: rank 1 has 32, rank 0 has 16" ||
  fail "different batch sizes: $msg"
"$LOOM" transpile "$IN" -o "$WORK/other" --places cpu:2 --algo native --transport mpi \
    --fuse-mb 1 > /dev/null
cp -r "$WORK/other/rank1/." "$WORK/nat/rank1/"
set +e
msg=$(timeout 120 "$MPIRUN" --oversubscribe --allow-run-as-root -np 2 "$LOOM" run "$WORK/nat" \
      --iters 2 2>&1); rc=$?
set -e
[ $rc != 0 ] && [ $rc != 124 ] || fail "different programs: exit $rc"
echo "$msg" | grep -q "runs another program or options than rank 0 (fingerprint" ||
  fail "different programs: $msg"
echo "PASS"
