#!/usr/bin/env bash
# Builds xrtio and runs every test through CTest.
#   tools/run-tests.sh [build-dir]   (XRTIO_SANITIZE=address|thread for sanitizer builds,
#                                     XRTIO_SHARED=1 for libxrtio.so instead of libxrtio.a)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
dir=${1:-build}
if [ "${XRTIO_SANITIZE:-}" = address ]; then
  # ASan+UBSan: -O0. UBSan's checks make every optimisation pass work on
  # far more code: at -O1 the Asio-heavy suites took 45-68 CPU-s each
  # (tests/test_reactor.cpp 62.6, tests/test_file_io.cpp 47.5), at -O0 half
  # (29.1, 23.7), and the whole build was 1387 CPU-s of CI's stage of 753 s.
  # The suite's run grows less than the compile shrinks (97 s at -O1 in CI;
  # 133 s at -O0 here on a loaded machine). Both sanitizers check the same
  # code at any level. -g1 (line tables, no variable info): a report's
  # frames still show file:line, and full -g's variable tracking made the
  # compile of tests/test_sim.cpp 34.5 CPU-s instead of 18.8.
  build_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1")
elif [ -n "${XRTIO_SANITIZE:-}" ]; then
  # TSan: -O1 without -O2's inlining work keeps the compile down (19.2
  # CPU-s for tests/test_reactor.cpp, 15.9 at -O0) while the suite, slowed
  # most by TSan, keeps -O1's speed. -g1 as above.
  build_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1")
else
  # Line tables only (-g1), as tools/run-demo.sh builds the same directory:
  # stacks (gdb, the test watchdog, perf) keep functions and file:line, the
  # code is the same, and the compile of tests/test_sim.cpp took 10.9 CPU-s
  # instead of 20.2 with full -g. A project that builds xrtio itself keeps
  # CMake's own RelWithDebInfo flags.
  build_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG")
fi
# A shared library passes on only its public dependencies: a target that
# uses a private one (liburing, XRT) itself must link it, which a static
# build never shows (libxrtio.a carries them all). CI builds both.
build_flags+=(-DBUILD_SHARED_LIBS="$([ -n "${XRTIO_SHARED:-}" ] && echo ON || echo OFF)")
# XRT is required here (XRTIO_WITH_XRT=ON): the XRT suites must fail the run
# when XRT is missing, not vanish from it. XRTIO_WITH_XRT=AUTO or OFF opts out.
cmake -S . -B "$dir" -G Ninja "${build_flags[@]}" -DXRTIO_SANITIZE="${XRTIO_SANITIZE:-}" \
  -DXRTIO_WITH_XRT="${XRTIO_WITH_XRT:-ON}"
cmake --build "$dir" -j"$(nproc)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# atexit_sleep_ms: TSan sleeps that long at every exit (1000 ms by default)
# to catch races with threads still running; every test is its own process,
# so the default cost CI's 565 TSan tests 1 s each (719 of the stage's
# test-seconds were 565 of sleep). xrtio's threads are joined before exit;
# 50 ms still covers a thread that outlives main by a few scheduler slices.
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1:atexit_sleep_ms=50}
cd "$dir" && ctest --output-on-failure -j"$(nproc)" --timeout 600
