#!/usr/bin/env bash
# The GPU kit on a machine without a GPU: scripts/gpu-kit.sh packs the existing CUDA build; the
# kit's check.sh, run with an empty environment (env -i), resolves every library from the kit,
# runs every GPU test and fails clearly, naming how many GPU tests could not run.
#   gpu_kit_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC=$1 BUILD=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LOOM_KIT_NO_BUILD=1 LOOM_BUILD_DIR="$BUILD" bash "$SRC/scripts/gpu-kit.sh" "$tmp/kit"
if LD_LIBRARY_PATH="$tmp/kit/lib" "$tmp/kit/bin/loom" devices --require-gpu >/dev/null 2>&1; then
  echo "SKIP: a GPU is visible (this test checks the kit's failure without one)"
  exit 77
fi
for f in check.sh MANIFEST bin/loom lib/libloom.so bin/operators_test bin/collective_cuda_test; do
  [ -e "$tmp/kit/$f" ] || { echo "FAIL: the kit lacks $f"; exit 1; }
done
grep -q 'lib/libprotobuf.so.32 .*libprotobuf32_.*\.deb\|lib/libprotobuf.so.32 .*installed file' \
  "$tmp/kit/MANIFEST" || { echo "FAIL: MANIFEST does not say where libprotobuf came from"; exit 1; }
# Where mount namespaces are allowed, this machine's copies of every Debian library the kit
# packs are hidden (an empty file bound over each), so the run can only use the kit's.
cat >"$tmp/run.sh" <<'SH'
kit=$1 report=$2 hide=$3
if [ "$hide" = 1 ]; then
  for n in $(awk '$3 ~ /^lib\// && $3 != "lib/libloom.so" {print $3}' "$kit/MANIFEST" |
             xargs -n1 basename | sed 's/\.gz$//'); do
    for d in /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/openmpi/lib \
             /usr/lib/x86_64-linux-gnu/openblas-pthread /lib/x86_64-linux-gnu; do
      [ -e "$d/$n" ] && mount --bind /dev/null "$d/$n"
    done
  done
  echo "hid this machine's copies of the kit's Debian libraries"
fi
exec env -i PATH=/usr/bin:/bin "$kit/check.sh" "$report"
SH
hide=0
[ "$(id -u)" = 0 ] && unshare --mount true 2>/dev/null && hide=1
set +e
if [ "$hide" = 1 ]; then
  out=$(unshare --mount bash "$tmp/run.sh" "$tmp/kit" "$tmp/report" 1 2>&1)
else
  out=$(bash "$tmp/run.sh" "$tmp/kit" "$tmp/report" 0 2>&1)
fi
rc=$?
set -e
echo "$out" | grep -m1 "^hid this machine" || echo "(mount namespaces not allowed: ldd-checked only)"
echo "$out" | grep -v "^check: test " | tail -8
[ "$rc" -ne 0 ] || { echo "FAIL: check.sh passed without a GPU"; exit 1; }
n=$(echo "$out" | sed -n 's/.*FAILED: no CUDA device: \([0-9]*\) GPU tests could not run.*/\1/p')
[ -n "$n" ] && [ "$n" -ge 40 ] ||
  { echo "FAIL: expected 'no CUDA device: N GPU tests could not run' with N >= 40"; exit 1; }
grep -q $'^setup\tlibraries\tPASS' "$tmp/report/results.tsv" ||
  { echo "FAIL: the kit's libraries did not resolve under env -i"; exit 1; }
grep -q $'^test\tDeviceGroup.CommInitRefusesTransportsThatDoNotFitThePlace\tPASS' \
  "$tmp/report/results.tsv" || { echo "FAIL: the kit's CPU-side tests did not run"; exit 1; }
grep -q "needs a GPU" "$tmp/report/report.md" && [ -s "$tmp/report/logs.tar.gz" ] ||
  { echo "FAIL: report.md or logs.tar.gz missing"; exit 1; }
echo "PASS ($n GPU tests could not run, as expected without a GPU)"
