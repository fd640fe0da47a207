#!/usr/bin/env python3
"""Instructions per RC SEND 8 B round trip, counted by callgrind (the VM has
no PMU counters), on each path: UDP and shared memory.

Both ends of `uroce perf --test lat --op send --size 8` run under
`valgrind --tool=callgrind` (server: --listen, client: --connect, on
127.0.0.2/127.0.0.1).  A busy poller's empty polls are not work, and how
many there are depends on timing, so the totals say little; what is
reported is the inclusive count, per round trip, of the functions a round
trip runs on the server's side:

  post_send   Qp::post_send: the answer's SEND and the ACK sent with it
  dispatch    Nic::dispatch of the packets received (the peer's SEND, the
              ACK of ours)
  post_recv   Qp::post_recv: the receive the round trip consumed, reposted
  poll        Cq::pop_locked: the completions taken
  work        their sum: one side's instructions per round trip, the
              receive loop's own overhead not counted

Usage: bench/instructions.py [--build DIR] [--iters N] [--path udp,shm] [--json]
Takes about a minute per path.  Writes nothing outside a temporary directory.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

FUNCS = {
    "post_send": r"uroce::verbs::Qp::post_send\(std::span<uroce::verbs::SendWr const",
    "dispatch": r"uroce::transport::Nic::dispatch\(",
    "post_recv": r"uroce::verbs::Qp::post_recv\(std::span<uroce::verbs::RecvWr const",
    "poll": r"uroce::verbs::Cq::pop_locked\(",
}


def inclusive(annotated, pattern):
    """The inclusive count of the function matching `pattern` (its own line
    in callgrind_annotate --inclusive=yes, not an annotated source line)."""
    best = 0
    for line in annotated.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\([\s\d.]+%\)\s+(\S.*)$", line)
        if m and re.search(pattern, m.group(2)) and ".cpp:" in m.group(2):
            best = max(best, int(m.group(1).replace(",", "")))
    return best


def run_path(uroce, path, iters, tmp):
    env = dict(os.environ, UROCE_SHM="1" if path == "shm" else "0", UROCE_STATS="0")
    port = 7000 + (int(time.time() * 1000) % 2000)
    srv_out = os.path.join(tmp, f"{path}.srv")
    cli_out = os.path.join(tmp, f"{path}.cli")
    vg = ["valgrind", "--tool=callgrind", "--quiet"]
    server = subprocess.Popen(vg + [f"--callgrind-out-file={srv_out}", uroce, "perf", "--listen", "--addr",
                                    "127.0.0.2", "--port", str(port), "--connections", "1"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(3)
        subprocess.run(vg + [f"--callgrind-out-file={cli_out}", uroce, "perf", "--connect", f"127.0.0.2:{port}",
                             "--addr", "127.0.0.1", "--op", "send", "--test", "lat", "--size", "8", "--duration", "60",
                             "--iters", str(iters)],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True)
        server.wait(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", srv_out], capture_output=True, text=True,
                               check=True).stdout
    per_rt = {k: inclusive(annotated, p) / iters for k, p in FUNCS.items()}
    per_rt["work"] = sum(per_rt.values())
    return per_rt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build"))
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--path", default="udp,shm")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
        sys.exit("bench/instructions.py: needs valgrind (apt-get install valgrind)")
    uroce = os.path.join(a.build, "tools", "uroce", "uroce")
    results = {}
    with tempfile.TemporaryDirectory(prefix="uroce-instr-") as tmp:
        for path in a.path.split(","):
            results[path] = run_path(uroce, path, a.iters, tmp)
    if a.json:
        print(json.dumps(results, indent=1))
        return
    print("instructions per RC SEND 8 B round trip, server side (callgrind, %d round trips)" % a.iters)
    print("%-6s %10s %10s %10s %10s %10s" % ("path", "post_send", "dispatch", "post_recv", "poll", "work"))
    for path, r in results.items():
        print("%-6s %10.0f %10.0f %10.0f %10.0f %10.0f" % (path, r["post_send"], r["dispatch"], r["post_recv"],
                                                         r["poll"], r["work"]))


if __name__ == "__main__":
    main()
