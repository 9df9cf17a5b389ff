#!/usr/bin/env python3
"""Turns the README's C++ snippets into one program, so that what a user
copies from the README compiles, and the snippets that are statements run.

usage: readme_blocks.py README.md OUT.cpp

Every ```cpp block without a main() (the first example has one: it is
examples/quickstart.cpp, checked by check_readme_example.py) becomes either
- namespace-scope code, if it opens with a definition (its first code line
  ends in '{' and its last line is '}'): compiled, not run; or
- the body of a function that main() calls in README order: compiled and run.
Each block keeps its README line numbers (#line), so a compile error points
at the README. The program prints "readme blocks: N run, M compiled only".
"""
import re
import sys

PRELUDE = """// Generated from README.md by tests/readme_blocks.py; do not edit.
#include <asio.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <xrtio/file.hpp>
#include <xrtio/xrtio.hpp>
using namespace std::chrono_literals;
"""


def blocks(text):
    """(first line number of the code, code) for each ```cpp block."""
    for m in re.finditer(r"^```cpp\n(.*?)^```$", text, re.S | re.M):
        line = text.count("\n", 0, m.start(1)) + 1
        yield line, m.group(1)


def is_definition(code):
    lines = [l for l in code.splitlines() if l.strip() and not l.lstrip().startswith("//")]
    return bool(lines) and lines[0].rstrip().endswith("{") and "(" in lines[0] and lines[-1].strip() == "}"


def main():
    readme, out = sys.argv[1], sys.argv[2]
    text = open(readme, encoding="utf-8").read()
    top, funcs = [], []
    for line, code in blocks(text):
        if re.search(r"\bint\s+main\s*\(", code):
            continue
        where = '#line %d "%s"\n' % (line, readme)
        if is_definition(code):
            top.append(where + code)
        else:
            funcs.append((line, where + code))
    if not funcs and not top:
        print("readme_blocks: FAIL: no ```cpp block without a main() in " + readme)
        return 1
    src = [PRELUDE]
    src += top
    for line, code in funcs:
        src.append("static void readme_block_at_line_%d() {\n%s}\n" % (line, code))
    body = "".join('  readme_block_at_line_%d();\n  std::printf("README block at line %d: ran\\n");\n' % (l, l)
                   for l, _ in funcs)
    src.append("int main() {\n%s  std::printf(\"readme blocks: %d run, %d compiled only\\n\");\n}\n"
               % (body, len(funcs), len(top)))
    open(out, "w", encoding="utf-8").write("\n".join(src))
    return 0


sys.exit(main())
