#!/usr/bin/env python3
"""Runs `xrtio-bench ... --json FILE` and checks its host limits entry.

usage: check_limits_json.py FILE [--may-be-null a,b] -- COMMAND...

The JSON array must hold one {"limits": {...}} entry with every limit the
bench measures, each a positive finite number, and the relay (two sleeping
hops) slower than a spinning round trip. A limit named in --may-be-null may
be null (qemu-user has no io_uring); so may the relay's two, and the relay
on one core, when the bench printed why it could not measure them
("relay_post_sleeping: not measured: REASON", e.g. io_uring refused by a
seccomp filter). Either is printed as NOT MEASURED. Also checks that the
text report has the ratio lines against the two chains. Prints
"check_limits_json: OK".
"""
import json
import math
import subprocess
import sys

sys.dont_write_bytecode = True  # CTest runs this from the source tree: leave no __pycache__ there
import check_common  # noqa: E402

LIMITS = ["spin_pingpong_p50_us", "eventfd_pingpong_p50_us", "asio_post_sleeping_p50_us", "eventfd_wake_p50_us",
          "relay_post_sleeping_p50_us", "eventfd_wake_cpu_us", "relay_post_sleeping_cpu_us", "relay_one_core_p50_us"]


def fail(msg):
    check_common.fail("check_limits_json", msg)


def main():
    path, opts, cmd = check_common.split_command("check_limits_json",
                                                 "check_limits_json.py FILE [--may-be-null a,b] -- COMMAND...")
    may_be_null = set()
    if "--may-be-null" in opts:
        may_be_null = {x for x in opts[opts.index("--may-be-null") + 1].split(",") if x}
    out = subprocess.run(cmd + ["--json", path], capture_output=True, text=True)
    print(out.stdout)
    if out.returncode != 0:
        fail(f"the bench exited with {out.returncode}: {out.stderr}")
    with open(path) as f:
        entries = json.load(f)
    found = [e["limits"] for e in entries if isinstance(e, dict) and "limits" in e]
    if len(found) != 1:
        fail(f"{len(found)} limits entries, want 1")
    lim = found[0]
    why = [line for line in out.stdout.splitlines() if "relay_post_sleeping: not measured:" in line]
    if why:
        may_be_null |= {"relay_post_sleeping_p50_us", "relay_post_sleeping_cpu_us", "relay_one_core_p50_us"}
        print("check_limits_json: the bench says: " + why[0].strip())
    for k in LIMITS:
        if k not in lim:
            fail(f"no {k}")
        v = lim[k]
        if v is None and k in may_be_null:
            print(f"check_limits_json: {k} NOT MEASURED (null; allowed here)")
            continue
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
            fail(f"{k} is {v!r}")
    relay, spin = lim["relay_post_sleeping_p50_us"], lim["spin_pingpong_p50_us"]
    if relay is not None and not relay > spin:
        fail(f"two sleeping hops ({relay} us) took no longer than a spinning round trip ({spin} us)")
    if "x relay" not in out.stdout or "x wake" not in out.stdout:
        fail("no ratio against the relay and the one-hop wake in the text report")
    print("check_limits_json: OK")


main()
