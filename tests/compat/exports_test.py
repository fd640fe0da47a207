#!/usr/bin/env python3
"""Checks the exports of uroce's drop-in libraries.

  exports_test.py --lib DIR --list libibverbs.so.1=libibverbs.symbols ...

For each library:
  - it exports exactly the symbols of its list, each at its version node,
    as the default version (nothing else: no C++ symbol of the core);
  - its version nodes are chained as version_script.cmake promises
    (PREFIX_x.y inherits the previous PREFIX_ version, others stand alone);
and every symbol that Debian's consumers (the programs, libraries and
Python modules of CONSUMER_PACKAGES: ibverbs-utils, perftest, qperf, UCX,
libfabric, pyverbs, Open MPI, librpma) import from these libraries is
exported at the version they ask for: most are BIND_NOW, so a missing one
stops them from starting, and the rest fail at their first call."""
import argparse
import glob
import os
import re
import subprocess
import sys

# The Debian packages whose programs, libraries and modules load ours: their
# ELF files are found with dpkg -L (a package not installed is reported).
CONSUMER_PACKAGES = ("ibverbs-utils", "perftest", "qperf", "rdmacm-utils", "librdmacm1", "libucx0",
                     "ucx-utils", "libfabric1", "libfabric-bin", "python3-pyverbs", "libopenmpi3",
                     "openmpi-bin", "librpma0")


def package_elfs(pkg):
    """The ELF files of an installed package, or None if it is not installed."""
    r = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    out = []
    for path in r.stdout.splitlines():
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def consumer_binaries():
    binaries = []
    for pkg in CONSUMER_PACKAGES:
        elfs = package_elfs(pkg)
        if elfs is None:
            print(f"note: {pkg} is not installed: its imports are not checked")
        else:
            binaries += elfs
    return binaries
VERSIONED = re.compile(r"^(.*)_([0-9]+)\.([0-9]+)$")


def objdump(*args):
    return subprocess.run(["objdump", *args], check=True, capture_output=True, text=True).stdout


def parse_list(path):
    syms, nodes = {}, []
    for line in open(path):
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        node = line[1] if len(line) >= 2 else line[0]  # "<symbol> <node> [<returns>]"
        if node not in nodes:
            nodes.append(node)
        if len(line) >= 2:
            syms[line[0]] = node
    return syms, nodes


def dynamic_symbols(path):
    """(defined, undefined): {name: (version, is_default)} from objdump -T."""
    defined, undefined = {}, {}
    for line in objdump("-T", path).splitlines():
        m = re.match(r"^[0-9a-f]{16}\s+(.{7})\s+(\S+)\s+[0-9a-f]{16}\s+(\(?)([^\s)]*)\)?\s+(\S+)$", line)
        if not m:
            continue
        _, section, hidden, version, name = m.groups()
        entry = (version, hidden != "(")
        (undefined if section == "*UND*" else defined)[name] = entry
    return defined, undefined


def version_definitions(path):
    """{node: parent or None} from objdump -p."""
    out = objdump("-p", path)
    section = out.split("Version definitions:", 1)[1].split("Version References:", 1)[0]
    nodes, last = {}, None
    for line in section.splitlines():
        m = re.match(r"^\d+\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+(\S+)$", line.strip())
        if m:
            last = m.group(1)
            nodes[last] = None
        elif line.strip() and last:
            nodes[last] = line.strip()
    return nodes


def expected_parents(nodes):
    parents = {}
    by_prefix = {}
    for n in nodes:
        m = VERSIONED.match(n)
        if m:
            by_prefix.setdefault(m.group(1), []).append((int(m.group(2)), int(m.group(3)), n))
        else:
            parents[n] = None
    for group in by_prefix.values():
        group.sort()
        for i, (_, _, n) in enumerate(group):
            parents[n] = group[i - 1][2] if i else None
    return parents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--list", action="append", required=True, help="SONAME=SYMBOL_LIST")
    a = ap.parse_args()
    problems = []
    exports = {}  # soname -> {symbol: version}
    for item in a.list:
        soname, listfile = item.split("=", 1)
        path = os.path.join(a.lib, soname)
        if not os.path.exists(path):
            problems.append(f"{path} is missing")
            continue
        syms, nodes = parse_list(listfile)
        defined, _ = dynamic_symbols(path)
        for name, (version, default) in defined.items():
            if name in nodes and version == name:
                continue  # the node's own symbol
            if name not in syms:
                problems.append(f"{soname}: exports {name}@{version}, which is not in its list")
            elif syms[name] != version or not default:
                problems.append(f"{soname}: {name} is at {version}{'' if default else ' (hidden)'}, "
                                f"the list says {syms[name]}")
        for name, node in syms.items():
            if name not in defined:
                problems.append(f"{soname}: {name}@{node} is in the list but not exported")
        have = version_definitions(path)
        want = expected_parents(nodes)
        for node, parent in want.items():
            if node not in have:
                problems.append(f"{soname}: version node {node} is missing")
            elif have[node] != parent:
                problems.append(f"{soname}: {node} inherits {have[node]}, expected {parent}")
        for node in have:
            if node not in want and node != soname:
                problems.append(f"{soname}: unexpected version node {node}")
        exports[soname] = {n: v for n, (v, d) in defined.items() if d}
        print(f"{soname}: {len(syms)} symbols in {len(nodes)} version nodes")

    prefixes = {"IBVERBS_": "libibverbs.so.1", "MLX5_": "libmlx5.so.1", "EFA_": "libefa.so.1",
                "RDMACM_": "librdmacm.so.1"}
    checked = 0
    binaries = sorted(set(consumer_binaries()))
    for binary in binaries:
        if not os.path.exists(binary):
            continue
        _, undefined = dynamic_symbols(binary)
        for name, (version, _) in undefined.items():
            lib = next((l for p, l in prefixes.items() if version.startswith(p)), None)
            if not lib or lib not in exports:
                continue
            checked += 1
            if exports[lib].get(name) != version:
                problems.append(f"{binary} imports {name}@{version}, which {lib} does not export")
    print(f"{checked} imports of {len(binaries)} Debian ELF files checked")
    for p in problems:
        print("FAIL", p)
    print("RESULT:", "PASS" if not problems else "FAIL")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
