#!/usr/bin/env bash
# Load test of xrtio-server against its --baseline (docs/SERVER.md): each
# server on 127.0.0.1, driven by Debian's wrk (tools/load-test/vadd.lua: POST
# /v1/vadd, 2 x 64 u32) at 1, 64 and 1024 connections, at sim latency 0 and
# 50 us: xrtio (its default: one io thread driving the runtime, in-loop),
# xrtio --threads 2 (two io threads, strands and the reactor thread) and the
# baseline (two io threads, as in every earlier table); then the floor all of
# them stand on, --no-run (the same HTTP stack and buffers, no kernel run, two
# io threads), at 1 and 64 connections. Each row also gives wrk's own CPU per
# request (wrk shares the two cores). The 1024-connection cell runs
# 1 + LOAD_TEST_RSS_RUNS (4) times: RSS and heap in use are read after each.
# Prints one table. With LOAD_TEST_SAVE=1 it also writes it, with the commit
# and a gnuplot plot, into docs/SERVER.md (between the load-test markers) and
# docs/perf/server-load.{png,dat}; by default nothing in the repository is
# touched (a user trying the README's command must not find docs rewritten).
#   tools/load-test.sh [build-dir]      LOAD_TEST_SECONDS=5 (per cell)
#   LOAD_TEST_SAVE=1: also record the table in the repository's docs.
# Every run is bounded: wrk -d seconds, at most LOAD_TEST_MAX_REQUESTS per wrk
# thread, and every wait for a server has a limit. Only loopback is targeted.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
secs=${LOAD_TEST_SECONDS:-5}
rss_runs=${LOAD_TEST_RSS_RUNS:-4}
server=$build/examples/server/xrtio-server
script=tools/load-test/vadd.lua
tools="wrk curl"
[ "${LOAD_TEST_SAVE:-0}" = 1 ] && tools="$tools gnuplot"  # the plot is made only when saving
for tool in $tools; do
  command -v "$tool" >/dev/null || { echo "load-test: $tool not found (bash tools/install-deps.sh installs it)" >&2; exit 1; }
done
[ -x "$server" ] || { echo "load-test: $server not built (cmake --build $build)" >&2; exit 1; }
ulimit -n 8192

work=$(mktemp -d /tmp/xrtio-load-test-XXXXXX)
srv_pid=""
cleanup() {
  if [ -n "$srv_pid" ]; then kill -TERM "$srv_pid" 2>/dev/null || true; wait "$srv_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Starts a server; sets srv_pid and port. Waits at most 10 s for its line.
# Each start has its own output file: the background shell may open (and
# truncate) it after this function first reads it.
starts=0
start_server() {
  starts=$((starts + 1))
  local out="$work/server-$starts.out"
  "$server" --port 0 "$@" > "$out" 2>&1 &
  srv_pid=$!
  port=""
  for _ in $(seq 1 200); do
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$out" 2>/dev/null)
    [ -n "$port" ] && return 0
    sleep 0.05
  done
  echo "load-test: the server did not start: $(cat "$out")" >&2
  exit 1
}

# SIGTERM; a server still running 10 s later is killed (and reported).
stop_server() {
  kill -TERM "$srv_pid"
  for _ in $(seq 1 200); do
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.05
  done
  if kill -0 "$srv_pid" 2>/dev/null; then
    echo "load-test: the server did not stop within 10 s: killed" >&2
    kill -KILL "$srv_pid"
  fi
  wait "$srv_pid" 2>/dev/null || true
  srv_pid=""
}

cpu_ticks() { awk '{print $14 + $15}' "/proc/$srv_pid/stat"; }
# User + system time of the waited-for children of shell process $1 (drive
# passes its own: wrk's, once it has exited).
children_ticks() { awk '{print $16 + $17}' "/proc/$1/stat"; }
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$srv_pid/status"; }
# After a run: "RSS (heap in use)" in KiB, read once the server has trimmed
# its heap (--idle-trim-ms, 100 ms without a connection: the freed memory
# goes back to the kernel), so RSS is what is in use plus what glibc keeps
# resident (the arenas' tops, thread caches); heap in use (mallinfo2, from
# /metrics) is what a leak would grow. Each scrape is a connection, which
# calls a pending trim off: the counter is read, then polled every 250 ms
# (at most 5 s) until a trim after that read. "?" marks a figure not read
# (no trim seen: RSS before it; /metrics not answered).
scrape() { curl -s --max-time 5 "http://127.0.0.1:$port/metrics" || true; }
metric_of() { awk -v m="$1" '$1 == m { printf "%d", $2 }'; }
mem_after_idle() {
  local page t0 t rss heap i trimmed="?"
  page=$(scrape)
  t0=$(echo "$page" | metric_of xrtio_server_heap_trims_total)
  for i in $(seq 20); do
    sleep 0.25
    page=$(scrape)
    t=$(echo "$page" | metric_of xrtio_server_heap_trims_total)
    if [ -n "$t0" ] && [ -n "$t" ] && [ "$t" -gt "$t0" ]; then trimmed=""; break; fi
  done
  rss=$(rss_kib)
  heap=$(echo "$page" | awk '$1 == "xrtio_server_heap_in_use_bytes" { printf "%d", $2 / 1024 }')
  echo "$rss$trimmed (${heap:-?})"
}

# One wrk run against the running server: prints
# "req/s p50 p99 p99.9 cpu_us_per_req errors wrk_cpu_us_per_req".
drive() {
  local conns=$1 threads=2
  [ "$conns" -lt 2 ] && threads=1
  local t0 t1 w0 w1 me=$BASHPID
  t0=$(cpu_ticks)
  w0=$(children_ticks "$me")
  wrk -t"$threads" -c"$conns" -d"${secs}s" --timeout 5s -s "$script" "http://127.0.0.1:$port/" > "$work/wrk.out" 2>&1 || true
  t1=$(cpu_ticks)
  w1=$(children_ticks "$me")
  local line
  line=$(grep '^LOADTEST ' "$work/wrk.out" || true)
  if [ -z "$line" ]; then
    echo "load-test: wrk failed: $(cat "$work/wrk.out")" >&2
    exit 1
  fi
  local hz
  hz=$(getconf CLK_TCK)
  echo "$line" | awk -v ticks=$((t1 - t0)) -v wticks=$((w1 - w0)) -v hz="$hz" '{
    for (i = 2; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
    n = v["requests"]; err = v["errors_connect"] + v["errors_read"] + v["errors_write"] + v["errors_status"] + v["errors_timeout"]
    rps = n * 1e6 / v["duration_us"]; cpu = 0; wcpu = 0
    if (n > 0) { cpu = ticks * 1e6 / hz / n; wcpu = wticks * 1e6 / hz / n }
    printf "%.0f %d %d %d %.1f %d %.1f\n", rps, v["p50_us"], v["p99_us"], v["p999_us"], cpu, err, wcpu }'
}

commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- examples src include || echo "+dirty")
table="$work/table.md"
dat="$work/server-load.dat"
{
  echo "| server | sim latency | connections | req/s | p50 us | p99 us | p99.9 us | server CPU us/req | wrk CPU us/req | errors | RSS (heap in use) KiB after each 1024-connection run |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} > "$table"
: > "$dat"
# One server, one data set of the plot: $1 its name, $2 the sim latency,
# $3 the connection counts, then its flags.
cells() {
  local kind=$1 lat=$2 counts=$3
  shift 3
  start_server --sim-latency-us "$lat" "$@"
  echo "# $kind L=$lat" >> "$dat"
  for conns in $counts; do
    read -r rps p50 p99 p999 cpu err wcpu < <(drive "$conns")
    rss="-"
    if [ "$conns" = 1024 ]; then
      # The cell again, LOAD_TEST_RSS_RUNS more times (the row shows the
      # last): the memory after each run shows whether it grows from run
      # to run (a leak) or stays.
      rss=$(mem_after_idle)
      for _ in $(seq 1 "$rss_runs"); do
        read -r rps p50 p99 p999 cpu err2 wcpu < <(drive "$conns")
        err=$((err + err2))
        rss="$rss / $(mem_after_idle)"
      done
    fi
    row="| $kind | $lat us | $conns | $rps | $p50 | $p99 | $p999 | $cpu | $wcpu | $err | $rss |"
    echo "$row" >> "$table"
    echo "$row"
    echo "$conns $rps $p50 $p99 $p999" >> "$dat"
  done
  printf '\n\n' >> "$dat"
  stop_server
}
# Data sets, in the plot's order: per latency xrtio, xrtio --threads 2, baseline; then the floor.
for lat in 0 50; do
  cells xrtio "$lat" "1 64 1024"
  cells "xrtio --threads 2" "$lat" "1 64 1024" --threads 2
  cells baseline "$lat" "1 64 1024" --baseline --threads 2
done
# No kernel run: the HTTP stack and buffers alone (the latency does not apply).
cells "no run (floor)" 0 "1 64" --no-run --threads 2

load="$(cut -d' ' -f1-3 /proc/loadavg)"
sched="normal scheduling"
[ "$(chrt -p $$ | sed -n 's/.*policy: //p' | head -1)" = "SCHED_IDLE" ] && sched="chrt -i 0 (idle class)"
header="Commit $commit, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, ${secs} s per cell, $sched, load average before the last cell: $load."
echo
echo "$header"
cat "$table"

[ "${LOAD_TEST_SAVE:-0}" = 1 ] || exit 0
mkdir -p docs/perf
# gnuplot separates data sets by two blank lines; none after the last
awk 'NF { n = NR } { l[NR] = $0 } END { for (i = 1; i <= n; i++) print l[i] }' "$dat" > docs/perf/server-load.dat
# Style of xrtio-bench's plot (tools/bench/report_plot.cpp): pngcairo, one
# column per latency, throughput above and p99 below, log scales.
gnuplot <<GP
set terminal pngcairo size 1100,800 font ',10'
set output 'docs/perf/server-load.png'
set multiplot layout 2,2 title 'xrtio-server vs --baseline (wrk, POST /v1/vadd, loopback; commit $commit)'
set termoption noenhanced
set logscale x 4
set logscale y
set grid
set key top left font ',8'
set xlabel 'connections'
set title 'sim, L = 0 us: requests per second'
set ylabel 'req/s'
d = 'docs/perf/server-load.dat'
plot d index 0 using 1:2 with linespoints title 'xrtio', '' index 1 using 1:2 with linespoints title 'xrtio --threads 2', \\
     '' index 2 using 1:2 with linespoints title 'baseline', '' index 6 using 1:2 with linespoints dt 2 title 'no run (floor)'
set title 'sim, L = 50 us: requests per second'
plot d index 3 using 1:2 with linespoints title 'xrtio', '' index 4 using 1:2 with linespoints title 'xrtio --threads 2', \\
     '' index 5 using 1:2 with linespoints title 'baseline', '' index 6 using 1:2 with linespoints dt 2 title 'no run (floor)'
set title 'sim, L = 0 us: latency p99'
set ylabel 'p99 us'
plot d index 0 using 1:4 with linespoints title 'xrtio', '' index 1 using 1:4 with linespoints title 'xrtio --threads 2', \\
     '' index 2 using 1:4 with linespoints title 'baseline', '' index 6 using 1:4 with linespoints dt 2 title 'no run (floor)'
set title 'sim, L = 50 us: latency p99'
plot d index 3 using 1:4 with linespoints title 'xrtio', '' index 4 using 1:4 with linespoints title 'xrtio --threads 2', \\
     '' index 5 using 1:4 with linespoints title 'baseline', '' index 6 using 1:4 with linespoints dt 2 title 'no run (floor)'
unset multiplot
GP
# Replace what is between the markers in docs/SERVER.md.
{
  echo "$header"
  echo
  cat "$table"
  echo
  echo "![throughput and p99 per connection count](perf/server-load.png)"
} > "$work/section.md"
awk -v section="$work/section.md" '
  /<!-- load-test:begin -->/ { print; while ((getline l < section) > 0) print l; skip = 1; next }
  /<!-- load-test:end -->/ { skip = 0 }
  !skip { print }' docs/SERVER.md > "$work/SERVER.md"
cp "$work/SERVER.md" docs/SERVER.md
echo "load-test: docs/SERVER.md, docs/perf/server-load.png and .dat written"
