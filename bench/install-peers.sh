#!/usr/bin/env bash
# Installs the peers the benchmarks compare against (not needed to build or test Loom):
# PyTorch from Debian (CPU), sharing Debian's /usr/bin/python3 with Loom.
set -euo pipefail
if dpkg-query -W -f='${Status}' python3-torch 2>/dev/null | grep -q "install ok installed"; then
  echo "install-peers: python3-torch present"; exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch
