#!/usr/bin/env bash
# Builds one libFuzzer target and fuzzes it for a bounded time.
#   tools/fuzz.sh TARGET SECONDS [libFuzzer options...]
# TARGET: access_tracker, arguments, xclbin or mkxclbin (tests/fuzz).
# The build (clang, -fsanitize=fuzzer,address,undefined: cmake/fuzzing.cmake)
# is in build-fuzz/ (XRTIO_FUZZ_BUILD to change it). The fuzzer starts from
# the seeds in tests/fuzz/corpus/TARGET and writes what it finds to
# build-fuzz/corpus/TARGET, so the repository's corpus changes only by hand.
# A crash, leak, sanitizer report or failed check stops it with a non-zero
# status; the input is saved as build-fuzz/artifacts/TARGET/crash-* (or
# leak-*, timeout-*, oom-*). Reproduce with
#   build-fuzz/tests/fuzz/fuzz-TARGET build-fuzz/artifacts/TARGET/crash-...
# and keep it as a regression test by copying it to
# tests/fuzz/corpus/TARGET/regress-<name> (CTest: fuzz.TARGET.<name>).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: tools/fuzz.sh TARGET SECONDS [libFuzzer options...]" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
dir=${XRTIO_FUZZ_BUILD:-build-fuzz}
bash tools/install-deps.sh
if [ ! -f "$dir/CMakeCache.txt" ]; then
  # -g1: line tables are what a crash's stack (file:line) needs.
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DXRTIO_FUZZ=ON -DXRTIO_BUILD_EXAMPLES=OFF
fi
cmake --build "$dir" -j"$(nproc)" --target "fuzz-$target"
mkdir -p "$dir/corpus/$target" "$dir/artifacts/$target"
# Each input has 120 s (wall time: generous, so that a machine that stops or
# starves the fuzzer for a while is not taken for a hang) and 2 GiB (malloc
# and RSS); leaks are reported
# (detect_leaks). UBSan reports are crashes (no recovery: cmake/fuzzing.cmake).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
exec "$dir/tests/fuzz/fuzz-$target" -max_total_time="$seconds" -timeout=120 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$dir/artifacts/$target/" "$@" "$dir/corpus/$target" "tests/fuzz/corpus/$target"
