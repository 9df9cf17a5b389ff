#!/usr/bin/env bash
# Installs what xrtio needs from Debian 12's packages, only when missing.
# Run as root (the README's commands do). Set XRTIO_NO_XRT=1 to skip XRT.
set -euo pipefail
pkgs=(g++ cmake ninja-build pkg-config libasio-dev liburing-dev doctest-dev gnuplot-nox uuid-dev gdb)
# The trace's JSON check (tests/check_chrome_trace.py) and the metrics check (promtool).
pkgs+=(python3 prometheus)
# xrtio-server (examples/server): its parser; curl for its tests; wrk for tools/load-test.sh
pkgs+=(libhttp-parser-dev curl wrk)
[ "${XRTIO_NO_XRT:-0}" = 1 ] || pkgs+=(libxrt-dev libxrt1)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "xrtio: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y "${missing[@]}"
fi
