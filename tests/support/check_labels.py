#!/usr/bin/env python3
"""Every ctest test carries the name of its folder and exactly one tier
label, `fast` or `slow` (tests/CMakeLists.txt), so that `ctest -L fast`
(./run.sh test --quick) is the whole fast tier and nothing slips out of both.

usage: check_labels.py <ctest> <build dir>
"""
import json
import subprocess
import sys


def main():
    ctest, build = sys.argv[1], sys.argv[2]
    out = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"], check=True,
                         capture_output=True, text=True).stdout
    tests = json.loads(out)["tests"]
    bad = []
    tiers = {"fast": 0, "slow": 0}
    for t in tests:
        name = t["name"]
        labels = []
        for p in t.get("properties", []):
            if p["name"] == "LABELS":
                labels = p["value"]
        tier = [l for l in labels if l in tiers]
        layer = name.split(".")[0]
        if len(tier) != 1:
            bad.append(f"{name}: tier labels {tier or 'none'} (want exactly one of fast, slow)")
        else:
            tiers[tier[0]] += 1
        if layer not in labels:
            bad.append(f"{name}: no label '{layer}' (its folder)")
    for b in bad:
        print(b)
    print(f"{len(tests)} tests: {tiers['fast']} fast, {tiers['slow']} slow, {len(bad)} problems")
    if len(tests) < 50:
        print("too few tests listed: is this the build directory?")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
