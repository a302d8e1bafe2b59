#!/usr/bin/env bash
# scripts/gpu-kit.sh OUTDIR: builds Loom with CUDA for Hopper (sm_90 machine code + compute_90
# PTX) and packs into OUTDIR what a bare GPU machine needs to check every CUDA path of Loom in one
# command (OUTDIR/check.sh; see docs/GPU.md):
#   bin/      the loom CLI, loom_make_examples, the test binaries that touch CUDA, ops_bench
#   lib/      libloom.so and the runtime libraries from Debian packages (unpacked from the .debs
#             with dpkg -x, stripped; those over 8 MB gzip-compressed); lib/compat/ holds libstdc++/libgcc_s for machines whose
#             own are older than Debian 12's (check.sh uses them only then)
#   bundles/  the Fashion-MNIST MLP and CNN as `loom run` bundles (1024 training rows each)
#   bench/    the PyTorch twins of the op and training benches
#   share/topologies/  the reference topologies
#   MANIFEST  every file: bytes, sha256, where it came from
# The CUDA runtime, cuBLAS, NCCL and the driver are not packed: the GPU machine has them
# (check.sh finds them). Fails when the kit exceeds LOOM_KIT_LIMIT_MIB (60) or when a binary
# needs a library that is neither in the kit nor one the GPU machine provides.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:?usage: scripts/gpu-kit.sh OUTDIR}
LIMIT_MIB=${LOOM_KIT_LIMIT_MIB:-60}
BUILD=${LOOM_BUILD_DIR:-$ROOT/build}
die() { echo "gpu-kit: $*" >&2; exit 1; }

# Libraries the GPU machine brings (driver, CUDA toolkit, NCCL) and the C library itself.
provided_by_gpu_machine() {
  case "$1" in
    libcuda.so*|libcudart.so*|libcublas.so*|libcublasLt.so*|libnccl.so*|libnvidia-*|\
    libcudnn*|libnvrtc*|libnvJitLink*|libcurand.so*|libcufft.so*|libcusparse.so*|\
    libcusolver.so*) return 0 ;;
  esac
  return 1
}
system_c_library() {
  case "$1" in
    linux-vdso.so*|ld-linux-x86-64.so*|libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|\
    librt.so.1|libresolv.so.2|libutil.so.1) return 0 ;;
  esac
  return 1
}
compat_library() { case "$1" in libstdc++.so.6|libgcc_s.so.1) return 0 ;; esac; return 1; }

# --- 1. build ---------------------------------------------------------------------------------
command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] ||
  die "nvcc not found: the kit needs a CUDA build (install the CUDA toolkit)"
if [ "${LOOM_KIT_NO_BUILD:-0}" = 1 ]; then
  # Pack an existing CUDA build as it is (the kit's own test does this after the normal build).
  grep -q '^LOOM_CUDA_ENABLED:.*=ON$\|#define LOOM_CUDA_ENABLED 1' "$BUILD/generated/config/loom/config.h" \
    "$BUILD/CMakeCache.txt" 2>/dev/null || die "$BUILD is not a CUDA build"
else
  bash "$ROOT/scripts/install-deps.sh"
  LOOM_BUILD_DIR="$BUILD" bash "$ROOT/scripts/build.sh" -DLOOM_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90
fi
# sm_90 machine code and compute_90 PTX in every CUDA object: read from the fatbin where
# cuobjdump exists, else from the build's own nvcc commands.
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null || true)
if [ -n "$CUOBJDUMP" ]; then
  grep -q "sm_90" <<< "$("$CUOBJDUMP" --list-elf "$BUILD/libloom.so")" ||
    die "libloom.so holds no sm_90 machine code"
  grep -q "sm_90" <<< "$("$CUOBJDUMP" --list-ptx "$BUILD/libloom.so")" ||
    die "libloom.so holds no compute_90 PTX"
else
  codes=$(ninja -C "$BUILD" -t commands loom | grep -o 'generate-code=[^ ]*' | sort -u)
  [ "$codes" = "generate-code=arch=compute_90,code=[compute_90,sm_90]" ] ||
    die "libloom's CUDA objects are not built for sm_90 + compute_90 PTX: ${codes:-none}"
fi

BINARIES=(
  "$BUILD/tools/loom"
  "$BUILD/examples/loom_make_examples"
  "$BUILD/tests/operators/operators_test"
  "$BUILD/tests/collective/collective_cuda_test"
  "$BUILD/tests/transpiler/transpiler_test"
  "$BUILD/bench/ops/ops_bench"
)
[ -x "$BUILD/tests/collective/collective_nccl_test" ] &&
  BINARIES+=("$BUILD/tests/collective/collective_nccl_test")
for b in "${BINARIES[@]}"; do [ -x "$b" ] || die "missing build output $b"; done

# --- 2. pack ----------------------------------------------------------------------------------
rm -rf "$OUTDIR"
mkdir -p "$OUTDIR"/{bin,lib/compat,bundles,bench,share/topologies}
OUTDIR=$(cd "$OUTDIR" && pwd)
declare -A SOURCE  # kit path -> where it came from
for b in "${BINARIES[@]}"; do
  cp "$b" "$OUTDIR/bin/"
  strip --strip-unneeded "$OUTDIR/bin/$(basename "$b")"
  SOURCE["bin/$(basename "$b")"]="built from this tree"
done
cp "$BUILD/libloom.so" "$OUTDIR/lib/"
strip --strip-unneeded "$OUTDIR/lib/libloom.so"
SOURCE["lib/libloom.so"]="built from this tree (sm_90 + compute_90 PTX)"

# The libraries every binary loads, resolved here; each Debian one comes out of its package.
DEBS=$(mktemp -d)
trap 'rm -rf "$DEBS"' EXIT
declare -A WANT   # soname -> path resolved here
declare -A GPU_SIDE
for b in "${BINARIES[@]}" "$BUILD/libloom.so"; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    [ "$path" = "not" ] && die "$(basename "$b") needs $name, which is not found here"
    if system_c_library "$name"; then continue; fi
    if provided_by_gpu_machine "$name"; then GPU_SIDE[$name]=1; continue; fi
    case "$path" in "$BUILD"/*) continue ;; esac
    WANT[$name]=$path
  done < <(LD_LIBRARY_PATH="$BUILD" ldd "$b")
done
for name in $(printf '%s\n' "${!WANT[@]}" | sort); do
  path=${WANT[$name]}
  real=$(readlink -f "$path")
  pkg=""
  for p in "$path" "$real" "${path#/usr}" "${real#/usr}" "/usr${path}"; do
    pkg=$(dpkg-query -S "$p" 2>/dev/null | head -1 | cut -d: -f1) && [ -n "$pkg" ] && break
  done
  [ -n "$pkg" ] || die "no Debian package owns $path ($name)"
  version=$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null | head -1)
  dest="$OUTDIR/lib/$name"
  compat_library "$name" && dest="$OUTDIR/lib/compat/$name"
  deb=$(ls "$DEBS/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  if [ -z "$deb" ]; then
    (cd "$DEBS" && apt-get download -qq "$pkg=$version" >/dev/null 2>&1) ||
      (cd "$DEBS" && cp /var/cache/apt/archives/"${pkg}_"*.deb . 2>/dev/null) || true
    deb=$(ls "$DEBS/${pkg}_"*.deb 2>/dev/null | head -1 || true)
  fi
  if [ -n "$deb" ]; then
    mkdir -p "$DEBS/x/$pkg"
    [ -d "$DEBS/x/$pkg/usr" ] || [ -d "$DEBS/x/$pkg/lib" ] || dpkg -x "$deb" "$DEBS/x/$pkg"
    found=$(find "$DEBS/x/$pkg" -name "$name" \( -type f -o -type l \) | head -1)
    [ -n "$found" ] || die "$name is not in $(basename "$deb")"
    cp -L "$found" "$dest"
    SOURCE["${dest#"$OUTDIR"/}"]="$(basename "$deb")"
  else
    # No package registry reachable: the installed file of the same package and version.
    echo "gpu-kit: no .deb of $pkg reachable; packing the installed $real" >&2
    cp -L "$real" "$dest"
    SOURCE["${dest#"$OUTDIR"/}"]="installed file of ${pkg}_$version (no .deb reachable)"
  fi
  strip --strip-unneeded "$dest" 2>/dev/null || true
done

# Bundles: the Fashion-MNIST MLP and CNN of examples/fashion_mnist.py, with 1024 training rows.
PYTHONPATH="$BUILD/python:$ROOT/examples" /usr/bin/python3 - "$OUTDIR/bundles" <<'PY'
import sys
import fashion_mnist
import loom as fluid
out = sys.argv[1]
x, y = fashion_mnist.load(fashion_mnist.DATA_DIR, "train")
x, y = x[:1024], y[:1024]
for model in ("mlp", "cnn"):
    main, startup, _, loss, _, _ = fashion_mnist.build(model, 1e-3, 1)
    image = x.reshape(len(x), -1) if model == "mlp" else x
    fluid.io.save_program_bundle("%s/fashion_mnist_%s" % (out, model), main, startup,
                                 ["image", "label"], [loss], data={"image": image, "label": y},
                                 batch_size=64, description="Fashion-MNIST %s (1024 rows)" % model)
PY
SOURCE["bundles/"]="written by examples/fashion_mnist.py's build() from Debian's dataset-fashion-mnist"
cp "$ROOT/scripts/gpu-kit/check.sh" "$OUTDIR/check.sh"
chmod +x "$OUTDIR/check.sh"
cp "$ROOT/bench/ops/torch_ops.py" "$ROOT/bench/gpu/torch_train.py" "$OUTDIR/bench/"
cp "$ROOT"/collective/topologies/* "$OUTDIR/share/topologies/"
printf '%s\n' "${!GPU_SIDE[@]}" | sort >"$OUTDIR/lib/FROM_GPU_MACHINE"

# --- 3. check what was packed -----------------------------------------------------------------
# Every library a kit binary loads must resolve inside the kit, be the C library, or be one the
# GPU machine provides; nothing may resolve to this machine's Debian library directories.
bad=""
for f in "$OUTDIR"/bin/* "$OUTDIR"/lib/*.so*; do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    system_c_library "$name" && continue
    provided_by_gpu_machine "$name" && continue
    compat_library "$name" && continue
    case "$path" in "$OUTDIR"/*) continue ;; esac
    bad+="  $(basename "$f") -> $name ($path)"$'\n'
  done < <(LD_LIBRARY_PATH="$OUTDIR/lib" ldd "$f" 2>/dev/null)
done
[ -z "$bad" ] || die "libraries that would come from outside the kit:"$'\n'"$bad"

# The largest Debian library (OpenBLAS, built for every x86 CPU: 36 MB) travels gzip-compressed;
# check.sh unpacks lib/*.gz into a temporary folder before anything runs.
for f in "$OUTDIR"/lib/*.so*; do
  [ "$(basename "$f")" = libloom.so ] && continue
  if [ "$(stat -c %s "$f")" -gt $((8 * 1024 * 1024)) ]; then
    gzip -9 "$f"
    SOURCE["${f#"$OUTDIR"/}.gz"]="${SOURCE["${f#"$OUTDIR"/}"]} (gzip -9)"
  fi
done

{
  echo "# Loom GPU kit: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
       "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "# bytes  sha256  path  source"
  (cd "$OUTDIR" && find . -type f ! -name MANIFEST | sed 's|^\./||' | sort) | while read -r f; do
    src=${SOURCE[$f]:-}
    [ -z "$src" ] && case "$f" in
      bundles/*) src=${SOURCE["bundles/"]} ;;
      bench/*) src="bench/ of this tree" ;;
      share/*) src="collective/topologies of this tree" ;;
      check.sh) src="scripts/gpu-kit/check.sh of this tree" ;;
      lib/FROM_GPU_MACHINE) src="libraries check.sh finds on the GPU machine" ;;
    esac
    echo "$(stat -c %s "$OUTDIR/$f")  $(sha256sum "$OUTDIR/$f" | cut -c1-16)  $f  $src"
  done
} >"$OUTDIR/MANIFEST"

total=$(du -sb "$OUTDIR" | cut -f1)
limit=$((LIMIT_MIB * 1024 * 1024))
echo "gpu-kit: $OUTDIR: $(find "$OUTDIR" -type f | wc -l) files, $((total / 1024 / 1024)) MiB" \
     "(limit $LIMIT_MIB MiB); the GPU machine provides: $(tr '\n' ' ' <"$OUTDIR/lib/FROM_GPU_MACHINE")"
[ "$total" -le "$limit" ] || die "the kit is $total bytes, over the $LIMIT_MIB MiB limit"
