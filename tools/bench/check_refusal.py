#!/usr/bin/env python3
"""Runs an xrtio-bench command that must be refused and checks how.

usage: check_refusal.py STATUS START END -- COMMAND...

The command must exit with STATUS, and one line of its standard error must
begin with START and end with END: for a bad option value, START is
"xrtio-bench: OPTION: " and END is "(got 'VALUE')", so the message names
both the option and the text it refused. The exit status alone would pass a
bench that prints only its usage, and the message alone one that goes on
to run its sweep. Prints "check_refusal: OK".
"""
import subprocess
import sys

sys.dont_write_bytecode = True  # CTest runs this from the source tree: leave no __pycache__ there
import check_common  # noqa: E402


def fail(msg):
    check_common.fail("check_refusal", msg)


def main():
    status, opts, cmd = check_common.split_command("check_refusal", "check_refusal.py STATUS START END -- COMMAND...")
    if len(opts) != 2 or not status.isdigit():
        fail("usage: check_refusal.py STATUS START END -- COMMAND...")
    start, end = opts
    try:
        # A refused value costs no sweep; a bench that runs one anyway is
        # given time to finish it, so that its exit status is what fails.
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        fail("still running after 90 s: the value was not refused")
    print("stderr:\n" + out.stderr)
    if out.returncode != int(status):
        fail(f"exit status {out.returncode}, expected {status}")
    if not any(line.startswith(start) and line.endswith(end) for line in out.stderr.splitlines()):
        fail(f"no line of stderr begins with {start!r} and ends with {end!r}")
    print("check_refusal: OK")


if __name__ == "__main__":
    main()
