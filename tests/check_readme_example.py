#!/usr/bin/env python3
"""Checks that the README's first example is examples/quickstart.cpp, whole.

usage: check_readme_example.py README.md examples/quickstart.cpp

The README says so, and CTest builds and runs the file (examples.quickstart),
so a README edited without the file (or the reverse) would show code nobody
runs. Prints "check_readme_example: OK" when the first ```cpp block after
"## What it looks like" equals the file byte for byte.
"""
import difflib
import sys


def main():
    readme, example = sys.argv[1], sys.argv[2]
    text = open(readme, encoding="utf-8").read()
    start = text.find("## What it looks like")
    if start < 0:
        print("check_readme_example: FAIL: no '## What it looks like' section")
        return 1
    a = text.find("```cpp\n", start)
    if a < 0:
        print("check_readme_example: FAIL: no ```cpp block in that section")
        return 1
    a += len("```cpp\n")
    b = text.find("```\n", a)
    block, code = text[a:b], open(example, encoding="utf-8").read()
    if block != code:
        diff = difflib.unified_diff(code.splitlines(), block.splitlines(), example, readme, lineterm="")
        print("\n".join(diff))
        print("check_readme_example: FAIL: the README's first example differs from " + example)
        return 1
    print("check_readme_example: OK")
    return 0


sys.exit(main())
