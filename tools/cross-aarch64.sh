#!/usr/bin/env bash
# Cross-builds xrtio (library, sim backend, tests, demo, bench) for aarch64
# with Debian's g++-aarch64-linux-gnu and runs the suites under qemu-user.
#   tools/cross-aarch64.sh [build-dir]   (default build-aarch64)
# XRTIO_CROSS_NO_TESTS=1 builds only. Installs what it needs, only when
# missing; run as root, like tools/install-deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build-aarch64}
# Where Debian's arm64 liburing is unpacked (cmake/aarch64-linux-gnu.cmake).
deps=${XRTIO_AARCH64_DEPS:-/opt/xrtio-aarch64-deps}
export XRTIO_AARCH64_DEPS=$deps
export DEBIAN_FRONTEND=noninteractive
apt=(apt-get -o DPkg::Lock::Timeout=600)

# Host side: cmake, ninja, pkg-config, and the architecture-independent
# headers (Asio, doctest). XRT is x86-only: not needed here.
XRTIO_NO_XRT=1 bash tools/install-deps.sh

# The cross compiler (its sysroot /usr/aarch64-linux-gnu has libc and
# libstdc++ for aarch64) and qemu-user (not qemu-user-binfmt: CMake runs the
# programs through qemu-aarch64 itself, so binfmt_misc is not needed).
missing=()
for p in g++-aarch64-linux-gnu qemu-user; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
updated=0
if [ ${#missing[@]} -gt 0 ]; then
  echo "xrtio: installing ${missing[*]}"
  "${apt[@]}" update && updated=1
  "${apt[@]}" install -y --no-install-recommends "${missing[@]}"
fi

# liburing for arm64: Debian's liburing2:arm64 and liburing-dev:arm64 are
# unpacked into $deps rather than installed. Installing them would pull in
# libc6-dev:arm64 and its dependencies (krb5, OpenSSL, ...), and since those
# are Multi-Arch: same, upgrade the host's amd64 copies to the same versions.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  echo "xrtio: adding the arm64 architecture to dpkg (for apt-get download of arm64 packages)"
  dpkg --add-architecture arm64
  updated=0
fi
if ! apt-cache show liburing-dev:arm64 >/dev/null 2>&1 && [ "$updated" = 0 ]; then
  "${apt[@]}" update && updated=1
fi
uring_pkgs=(liburing2:arm64 liburing-dev:arm64)
want=""
for p in "${uring_pkgs[@]}"; do
  v=$(apt-cache policy "$p" | sed -n 's/^ *Candidate: //p')
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then echo "xrtio: no candidate for $p" >&2; exit 1; fi
  want+="$p=$v "
done
if [ "$(cat "$deps/.xrtio-unpacked" 2>/dev/null)" != "$want" ]; then
  echo "xrtio: unpacking ${want}into $deps"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && "${apt[@]}" -o APT::Sandbox::User=root download ${want})
  rm -rf "$deps" && mkdir -p "$deps"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$deps"; done
  echo "$want" > "$deps/.xrtio-unpacked"
fi

# RelWithDebInfo's -O2, with -g1 (line tables: backtraces keep file:line)
# for -g: the tests/test_sim.cpp compile took 10.9 CPU-s instead of 14.0.
cmake -S . -B "$dir" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
# The cross build must not have picked up the host's x86-64 XRT (Debian has
# no arm64 XRT: the XRT backend, tools and tests are left out).
xrt_lib=$(sed -n 's/^XRT_COREUTIL_LIBRARY:FILEPATH=//p' "$dir/CMakeCache.txt")
if [ -e "$xrt_lib" ] && ! aarch64-linux-gnu-readelf -h "$xrt_lib" | grep -q AArch64; then
  echo "xrtio: the aarch64 build found a non-aarch64 XRT library: $xrt_lib" >&2
  exit 1
fi
cmake --build "$dir" -j"$(nproc)"
[ "${XRTIO_CROSS_NO_TESTS:-0}" = 1 ] && exit 0

cd "$dir"
# Tests left out under qemu: timing-based assertions that emulation (several
# times slower, more so on a loaded host) breaks. Each passed 40 of 40 runs
# natively on a 2-core host at load 7-20, and failed under qemu-user there in
# some of 13 runs of the whole suite, as noted.
qemu_excluded=(
  # It checks in_flight() right after async_execute: the 20 ms run must not
  # have finished yet. Under qemu it had (1 of 13).
  "prepared run rejects a second execution while one is in flight with errc::busy"
  # Not timing: the hang watchdog's gdb attaches to the emulator process, so
  # the stacks it prints are qemu's, not the test's (the native CI stages run it).
  "watchdog.hung_test_prints_stacks"
  # Not timing: it forks, and the child starts threads; qemu-user 7.2 cannot
  # start a thread in a child forked from a process with threads (it aborts:
  # "qemu_plugin_vcpu_init_hook: assertion failed", "cpu == current_cpu";
  # the child exits 127). The native CI stages run it.
  "file io: a first transfer on a default runtime that cannot start throws to the caller, as async_run does"
  "inloop.file io: a first transfer on a default runtime that cannot start throws to the caller, as async_run does"
)
echo "xrtio: left out under qemu (see tools/cross-aarch64.sh for why):"
re=""
for t in "${qemu_excluded[@]}"; do
  echo "  - $t"
  re+="${re:+|}$(printf '%s' "$t" | sed 's/[][\.*^$+?(){}|]/\\&/g')"
done
re="^($re)\$"
n=$(ctest -N -R "$re" | grep -c 'Test *#' || true)
[ "$n" = ${#qemu_excluded[@]} ] || echo "xrtio: warning: $n tests match the ${#qemu_excluded[@]} names left out"
# One test at a time: each runs a spinning reactor thread, and emulated
# threads competing for 2 cores eat the timing slack of the others.
ctest --output-on-failure -j1 --timeout 600 -E "$re"
# Which wait primitive the reactor used (qemu-user has no io_uring syscalls:
# the eventfd + ppoll fallback is expected).
echo "xrtio: reactor wait path under qemu:"
qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH="$deps/usr/lib/aarch64-linux-gnu" tests/test_reactor \
  -tc="reactor: stats report the io_uring wait primitive*" -s |
  sed -n 's/.*MESSAGE: /  /p'
