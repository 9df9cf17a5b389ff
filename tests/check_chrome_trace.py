#!/usr/bin/env python3
"""Validates xrtio's Chrome trace-event JSON (xrtio::write_chrome_trace).

Runs the test_observe case that writes a trace (XRTIO_TRACE_OUT), then checks
with Python's json module that the file is valid JSON in the trace-event
format, and that on each run's track the slices nest and come in order:
one "run" slice holding "leases", "device" (holding "abort"), "reactor" and
"resume", one after another. Exits 1 naming the first problem.

usage: check_chrome_trace.py TEST_EXE OUT.json [extra test arguments...]
"""
import collections
import json
import os
import subprocess
import sys

EPS = 1e-6  # microseconds; the file has three decimals
ORDER = ["leases", "device", "reactor", "resume"]
CASE = "observe: write_chrome_trace*"


def fail(msg):
    print("check_chrome_trace: FAIL: " + msg)
    sys.exit(1)


def contains(outer, inner):
    return inner["ts"] >= outer["ts"] - EPS and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + EPS


def check(doc):
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("no traceEvents list")
    tracks = collections.defaultdict(list)
    instants = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        ph = e.get("ph")
        if ph not in ("X", "i", "M"):
            fail("unexpected phase %r in %r" % (ph, e))
        for key in ("name", "pid", "tid"):
            if key not in e:
                fail("event without %s: %r" % (key, e))
        if ph == "X":
            if not isinstance(e.get("ts"), (int, float)) or not isinstance(e.get("dur"), (int, float)):
                fail("complete event without numeric ts/dur: %r" % e)
            if e["dur"] < 0:
                fail("negative duration: %r" % e)
            tracks[e["tid"]].append(e)
        elif ph == "i":
            instants[e["tid"]].append(e)
    if not tracks:
        fail("no slices")
    names = collections.Counter()
    for tid, slices in tracks.items():
        runs = [s for s in slices if s["name"] == "run"]
        if len(runs) != 1:
            fail("track %s has %d run slices" % (tid, len(runs)))
        run = runs[0]
        children = [s for s in slices if s is not run]
        for s in children + instants[tid]:
            s.setdefault("dur", 0)
            if not contains(run, s):
                fail("track %s: %s [%s, +%s] outside its run [%s, +%s]" %
                     (tid, s["name"], s["ts"], s["dur"], run["ts"], run["dur"]))
        phases = [s for s in children if s["name"] in ORDER]
        # In the order the file lists them, which is the run's order, and
        # one after another.
        ranks = [ORDER.index(s["name"]) for s in phases]
        if ranks != sorted(ranks) or len(set(ranks)) != len(ranks):
            fail("track %s: phases out of order: %s" % (tid, [s["name"] for s in phases]))
        for a, b in zip(phases, phases[1:]):
            if b["ts"] < a["ts"] + a["dur"] - EPS:
                fail("track %s: %s overlaps %s" % (tid, b["name"], a["name"]))
        for s in children:
            if s["name"] == "abort":
                device = [p for p in phases if p["name"] == "device"]
                if len(device) != 1 or not contains(device[0], s):
                    fail("track %s: abort not inside device" % tid)
            elif s["name"] not in ORDER:
                fail("track %s: unknown slice %r" % (tid, s["name"]))
        names.update(s["name"] for s in slices)
    return len(tracks), names


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(2)
    exe, out = sys.argv[1], sys.argv[2]
    if os.path.exists(out):
        os.remove(out)
    env = dict(os.environ, XRTIO_TRACE_OUT=out)
    r = subprocess.run([exe, "-tc=" + CASE] + sys.argv[3:], env=env, capture_output=True, text=True, timeout=240)
    sys.stdout.write(r.stdout)
    if r.returncode != 0:
        fail("%s exited with %d\n%s" % (exe, r.returncode, r.stderr))
    try:
        with open(out) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        fail("%s: %s" % (out, e))
    runs, names = check(doc)
    for need in ORDER + ["abort"]:
        if names[need] == 0:
            fail("no %r slice in the trace" % need)
    print("check_chrome_trace: OK: %d runs, slices %s" % (runs, dict(names)))


if __name__ == "__main__":
    main()
