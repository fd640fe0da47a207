#!/usr/bin/env python3
"""Prints what failed in a ctest run, from its console log.

  ctest_failures.py STAGE LOG [--lines N]
  ctest_failures.py --names-only STAGE LOG   (the failed tests' names, one a line)

run.sh keeps each stage's ctest output (run with --output-on-failure) in a
log and calls this at the end, so that the last lines of a long run (all a
CI summary may show) name the failed tests and the end of each one's output.
"""
import argparse
import re
import sys

STATUS = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (\S+) \.*\s*(.*?)\s+[\d.]+ sec\s*$")
START = re.compile(r"^\s*Start\s+\d+: ")
BAD = ("Failed", "Timeout", "Exception", "Not Run", "SEGFAULT", "Child aborted", "Subprocess aborted")


def failures(lines):
    """(name, status, output lines) of each failed test, in log order."""
    out, cur = [], None
    for line in lines:
        m = STATUS.match(line)
        if m or START.match(line):
            cur = None
        if m and any(b in m.group(2) for b in BAD):
            cur = (m.group(1), m.group(2).strip("* "), [])
            out.append(cur)
        elif cur is not None and not m:
            cur[2].append(line)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("stage")
    ap.add_argument("log")
    ap.add_argument("--lines", type=int, default=30)
    ap.add_argument("--names-only", action="store_true")
    a = ap.parse_args()
    try:
        with open(a.log, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"run.sh: stage {a.stage}: no ctest log ({e})")
        return
    found = failures(lines)
    if a.names_only:
        for name, _, _ in found:
            print(name)
        return
    if not found:
        tail = [l for l in lines if "tests failed" in l or "Errors while running" in l]
        print(f"run.sh: stage {a.stage}: no failed test in its log; {' '.join(tail) or 'see ' + a.log}")
        return
    print(f"run.sh: stage {a.stage}: {len(found)} failed: {' '.join(n for n, _, _ in found)}")
    for name, status, output in found[:6]:
        print(f"---- {a.stage}: {name} ({status}), last {a.lines} lines of its output:")
        for l in output[-a.lines:]:
            print("  " + l)
    if len(found) > 6:
        print(f"---- and {len(found) - 6} more (see {a.log})")


if __name__ == "__main__":
    sys.exit(main())
