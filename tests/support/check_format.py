#!/usr/bin/env python3
"""The C and C++ sources are formatted as .clang-format says.

Runs clang-format (version 14, Debian 12's, which the style was applied
with: other versions format some constructs differently) in --dry-run mode
over every C/C++ file of src, include, tools, tests and bench, and lists
the files it would change.  Skips (77) without clang-format 14.
Fix with: git clang-format (changed lines) or clang-format -i <files>.

usage: check_format.py <source dir>
"""
import os
import re
import shutil
import subprocess
import sys

DIRS = ("src", "include", "tools", "tests", "bench")
EXTS = (".c", ".h", ".cpp", ".hpp")


def find_clang_format():
    for name in ("clang-format-14", "clang-format"):
        path = shutil.which(name)
        if not path:
            continue
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
        if re.search(r"version 14\.", out):
            return path
    return None


def main():
    root = sys.argv[1]
    tool = find_clang_format()
    if not tool:
        print("clang-format 14 not found: skipped")
        return 77
    files = []
    for d in DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(EXTS)]
    files.sort()
    bad = []
    for i in range(0, len(files), 50):
        chunk = files[i:i + 50]
        r = subprocess.run([tool, "--dry-run", "--Werror", "--style=file"] + chunk, capture_output=True, text=True)
        for line in r.stderr.splitlines():
            m = re.match(r"(.+?):\d+:\d+: (error|warning):", line)
            if m and m.group(1) not in bad:
                bad.append(m.group(1))
    for f in bad:
        print(f"not formatted: {os.path.relpath(f, root)}")
    print(f"{len(files)} files checked, {len(bad)} not formatted")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
