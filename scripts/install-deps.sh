#!/usr/bin/env bash
# Installs Loom's build and test dependencies from Debian's packages.
# Idempotent: packages already present are skipped and `apt-get update` runs at most once.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libprotobuf-dev protobuf-compiler
  libgflags-dev libgoogle-glog-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libeigen3-dev libopenblas-dev libboost-dev
  libopenmpi-dev openmpi-bin libgloo-dev nlohmann-json3-dev
  libzmq3-dev cppzmq-dev libsodium-dev
  pybind11-dev python3-dev python3-numpy python3-pytest python3-venv python3-pip
  dataset-fashion-mnist python3-matplotlib
  clang libclang-rt-14-dev
  iproute2 nftables
)
# Optional extras (none today).
OPTIONAL=()

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
optional_missing=()
for p in "${OPTIONAL[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || optional_missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ] && [ ${#optional_missing[@]} -eq 0 ]; then
  echo "install-deps: all dependencies present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: missing packages (${missing[*]}) and not root; install them and re-run" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
echo "install-deps: installing ${missing[*]} ${optional_missing[*]}"
$SUDO apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if [ ${#optional_missing[@]} -gt 0 ]; then
  $SUDO apt-get install -y -qq --no-install-recommends "${optional_missing[@]}" ||
    echo "install-deps: optional packages (${optional_missing[*]}) not installed; continuing"
fi
