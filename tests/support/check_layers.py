#!/usr/bin/env python3
"""The layers below the API include downwards only (docs/architecture.md, "Layers").

Of the project's headers, the C/C++ files of each directory may include:
  src/common          common/ and the vocabulary uroce/{types,faults,congestion,status,ip_addr}.hpp
  src/wire, src/net   + wire/, + net/
  src/core/transport  + transport/ (never verbs/)
  src/core/verbs      common/ wire/ net/ verbs/ uroce/, and of the transport its interface
                      only: nic.hpp qp_engine.hpp ports.hpp work_queue.hpp
and in src/core/verbs a QP's engine is used through methods only (`engine_->x` is a call).
Violations being removed are listed in layer_exceptions.txt ("<file> <header>"); one that
no longer occurs is an error too, so the list only shrinks.
usage: check_layers.py <source dir> | --list <source dir> | --self-test
"""
import os
import re
import sys

VOCAB = {"uroce/types.hpp", "uroce/faults.hpp", "uroce/congestion.hpp", "uroce/status.hpp", "uroce/ip_addr.hpp"}
TRANSPORT_API = {"transport/nic.hpp", "transport/qp_engine.hpp", "transport/ports.hpp", "transport/work_queue.hpp"}
PROJECT = ("common/", "wire/", "net/", "transport/", "verbs/", "uroce/", "cm/", "api/", "compat/")
RULES = {  # directory: (allowed prefixes, allowed single headers)
    "src/common": (("common/",), VOCAB),
    "src/wire": (("common/", "wire/"), VOCAB),
    "src/net": (("common/", "wire/", "net/"), VOCAB),
    "src/core/transport": (("common/", "wire/", "net/", "transport/"), VOCAB),
    "src/core/verbs": (("common/", "wire/", "net/", "verbs/", "uroce/"), TRANSPORT_API),
}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
ENGINE_FIELD = re.compile(r"\bengine_\s*->\s*(\w+)(?!\w)(?!\s*\()")
ENGINE_RULE = True  # verbs uses a QP's engine through its methods only
HERE = os.path.dirname(os.path.abspath(__file__))

def violations(rel, text, engine_rule=None):
    out = []
    for d, (prefixes, singles) in RULES.items():
        if rel.startswith(d + "/"):
            out += [(rel, i) for i in INCLUDE.findall(text)
                    if i.startswith(PROJECT) and not i.startswith(prefixes) and i not in singles]
            if d == "src/core/verbs" and (ENGINE_RULE if engine_rule is None else engine_rule):
                out += [(rel, "engine_->" + m.group(1)) for m in ENGINE_FIELD.finditer(text)]
    return out

def scan(root):
    found = set()
    for d in RULES:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in files:
                if f.endswith((".c", ".h", ".cpp", ".hpp")):
                    p = os.path.join(dirpath, f)
                    with open(p, encoding="utf-8") as fh:
                        found.update(violations(os.path.relpath(p, root), fh.read()))
    return found

def self_test():
    cases = [("src/core/transport/a.cpp", '#include "verbs/qp.hpp"', 1),
             ("src/core/transport/a.hpp", "#include <verbs/cq.hpp>", 1),
             ("src/core/transport/a.cpp", '#include "uroce/queue_pair.hpp"', 1),
             ("src/core/transport/a.cpp", '#include "uroce/types.hpp"\n#include "wire/packet.hpp"\n#include <vector>', 0),
             ("src/core/verbs/a.cpp", '#include "transport/requester.hpp"', 1),
             ("src/core/verbs/a.cpp", '#include "transport/qp_engine.hpp"', 0),
             ("src/core/verbs/a.cpp", "engine_->req.una_psn = 0;", 1),
             ("src/core/verbs/a.cpp", "engine_->post_recv_locked(wrs, bad);", 0),
             ("src/net/a.cpp", '#include "transport/nic.hpp"', 1),
             ("src/compat/a.cpp", '#include "verbs/qp.hpp"', 0)]
    bad = [c for c in cases if len(violations(c[0], c[1] + "\n", engine_rule=True)) != c[2]]
    for rel, text, want in bad:
        print(f"self-test: {rel}: {text!r} should give {want} violation(s)")
    return 1 if bad else 0

def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    if sys.argv[1] == "--list":  # writes the exceptions file's lines (step 0, once)
        print("\n".join(f"{r} {w}" for r, w in sorted(scan(sys.argv[2]))))
        return 0
    found = scan(sys.argv[1])
    with open(os.path.join(HERE, "layer_exceptions.txt"), encoding="utf-8") as fh:
        allowed = {tuple(l.split(None, 1)) for l in map(str.strip, fh) if l and not l.startswith("#")}
    for r, w in sorted(found - allowed):
        print(f"{r}: {w}: against the layers of docs/architecture.md")
    for r, w in sorted(allowed - found):
        print(f"{r}: {w} is gone: remove it from tests/support/layer_exceptions.txt")
    return 1 if found != allowed else 0

if __name__ == "__main__":
    sys.exit(main())
