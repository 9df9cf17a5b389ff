#!/usr/bin/env python3
"""Runs `xrtio-bench --io ... --json FILE` and checks its rows.

usage: check_io_json.py FILE [--may-skip a,b] [--depths 1,128] [--cases rand4k,seq1m] [--caches hot]
                        [--contenders a,b,..] -- COMMAND...

Every expected (contender, case, cache, queue_depth) must have a row whose
numbers are sane and whose reads were verified against the file (the bench
checks sampled words of every request: a contender that reads nothing has
no verified requests and counts errors). A contender named in --may-skip
may instead appear in the "skipped" entry with its reason, printed as NOT
CHECKED. Prints "check_io_json: OK" when everything holds.
"""
import json
import math
import subprocess
import sys

sys.dont_write_bytecode = True  # CTest runs this from the source tree: leave no __pycache__ there
import check_common  # noqa: E402

REQUIRED = ["contender", "case", "cache", "queue_depth", "gib_per_s", "iops", "cpu_us_per_gib", "p50_us",
            "p99_us", "allocs_per_request"]


def fail(msg):
    check_common.fail("check_io_json", msg)


def number(row, key):
    v = row.get(key)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
        fail(f"{key} of {row.get('contender')} {row.get('case')} QD={row.get('queue_depth')} is {v!r}")
    return v


def check_row(row):
    where = f"{row['contender']} {row['case']} {row['cache']} QD={row['queue_depth']}"
    for k in REQUIRED:
        if k not in row:
            fail(f"{where}: no {k}")
    gib, iops = number(row, "gib_per_s"), number(row, "iops")
    if gib <= 0 or iops <= 0:
        fail(f"{where}: nothing read (gib_per_s {gib}, iops {iops})")
    size = 4096 if row["case"] == "rand4k" else 1 << 20
    if row.get("request_bytes") != size:
        fail(f"{where}: request_bytes {row.get('request_bytes')}, expected {size}")
    if abs(iops * size / 2**30 - gib) > 0.01 * gib:
        fail(f"{where}: gib_per_s {gib} does not match iops {iops} x {size} bytes")
    if number(row, "cpu_us_per_gib") <= 0:
        fail(f"{where}: cpu_us_per_gib {row['cpu_us_per_gib']}")
    p50, p99 = number(row, "p50_us"), number(row, "p99_us")
    if not (0 < p50 <= p99):
        fail(f"{where}: p50 {p50} / p99 {p99}")
    if number(row, "allocs_per_request") < 0:
        fail(f"{where}: allocs_per_request {row['allocs_per_request']}")
    if row.get("errors") != 0:
        fail(f"{where}: {row.get('errors')} requests failed, came up short or read wrong data")
    if not row.get("verified_requests", 0) > 0 or not row.get("requests_in_windows", 0) > 0:
        fail(f"{where}: no verified requests ({row.get('verified_requests')}) or none in the window")
    if row["cache"] == "cold" and row.get("direct") is not True:
        fail(f"{where}: a cold row not read with O_DIRECT")


def main():
    path, opts, cmd = check_common.split_command("check_io_json", "check_io_json.py FILE [options] -- COMMAND...")
    conf = {"--may-skip": "", "--depths": "1,128", "--cases": "rand4k,seq1m", "--caches": "hot",
            "--contenders": "xrtio,xrtio-inloop,pread-thread,pread-thread-1buf,pread-post,pread-pool,asio-file,raw-uring"}
    while opts:
        k = opts.pop(0)
        if k not in conf or not opts:
            fail(f"bad option {k}")
        conf[k] = opts.pop(0)
    lst = lambda k: [x for x in conf[k].split(",") if x]
    proc = subprocess.run(cmd + ["--json", path])
    if proc.returncode != 0:
        fail(f"the bench exited with {proc.returncode}")
    with open(path) as f:
        data = json.load(f)
    rows = [o for o in data if "contender" in o]
    skipped = next((o["skipped"] for o in data if "skipped" in o), None)
    if skipped is None or not any("io_file" in o for o in data):
        fail("no skipped or io_file entry")
    for row in rows:
        check_row(row)
    may_skip = lst("--may-skip")
    for c in lst("--contenders"):
        for case in lst("--cases"):
            for cache in lst("--caches"):
                for d in [int(x) for x in lst("--depths")]:
                    key = (c, case, cache, d)
                    if any((r["contender"], r["case"], r["cache"], r["queue_depth"]) == key for r in rows):
                        continue
                    why = next((s["reason"] for s in skipped
                                if (s["contender"], s["case"], s["cache"], s["queue_depth"]) == key), None)
                    if c in may_skip and why:
                        print(f"check_io_json: NOT CHECKED: {c} {case} {cache} QD={d}: {why}")
                        continue
                    fail(f"no row for {c} {case} {cache} QD={d}" + (f" (skipped: {why})" if why else ""))
    print(f"check_io_json: {len(rows)} rows checked")
    print("check_io_json: OK")


main()
