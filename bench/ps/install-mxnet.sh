#!/usr/bin/env bash
# Installs the parameter-server peer for bench/ps: MXNet 1.9.1 (CPU wheel) in its own venv,
# and Debian's iperf3 to measure what loopback TCP can carry. Safe to run again.
set -euo pipefail
VENV="${MXNET_VENV:-/opt/venvs/mxnet}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo

# MXNet in a venv (its numpy must stay below 1.24: mxnet 1.9 uses np.bool etc.).
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import mxnet' 2>/dev/null; then
  echo "install-mxnet: mxnet present in $VENV"
else
  [ -x "$VENV/bin/python" ] || $SUDO /usr/bin/python3 -m venv "$VENV"
  $SUDO "$VENV/bin/pip" install -q --upgrade pip
  $SUDO "$VENV/bin/pip" install -q 'mxnet==1.9.1' 'numpy<1.24'
  "$VENV/bin/python" -c 'import mxnet; print("install-mxnet: mxnet", mxnet.__version__)'
fi

# iperf3 from Debian; preseed its debconf question so the install never waits for an answer.
if command -v iperf3 >/dev/null; then
  echo "install-mxnet: iperf3 present"
else
  echo 'iperf3 iperf3/start_daemon boolean false' | $SUDO debconf-set-selections
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends iperf3
fi
