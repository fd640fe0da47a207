#!/usr/bin/env python3
"""rdma-core's mckey, unmodified, on uroce: RECEIVERS subscriber processes
join multicast group GROUP (rdma_join_multicast, UD QPs), then one sender
process sends COUNT messages to the group; every subscriber must receive
all of them (mckey waits for COUNT receive completions) and every process
exit 0 within the time limit.  The sender's frames are captured and checked
frame by frame (tests/capture/roce_check.py: decoded as InfiniBand, right
ICRCs), and at least COUNT of them must go to GROUP with BTH destination
QP 0xFFFFFF.

  mckey_test.py --lib DIR --group 239.x.y.z [--receivers N] [--count C]
                [--shared] [--netns] [--base A.B.C]

Loopback: process i on BASE.(i+1) (--shared: every subscriber on BASE.1, so
several processes of one address share its port and each gets every
message).  --netns: subscribers in one namespace, the sender in another,
joined by a veth (skipped, 77, where namespaces cannot be made)."""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_program import Capture, Netns, kill_group  # noqa: E402

ROCE_CHECK = os.path.join(HERE, "..", "capture", "roce_check.py")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--receivers", type=int, default=2)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--shared", action="store_true")
    ap.add_argument("--netns", action="store_true")
    ap.add_argument("--base", default="127.0.85")
    ap.add_argument("--timeout", type=float, default=60)
    a = ap.parse_args()
    if not shutil.which("mckey"):
        print("mckey is not installed (Debian package rdmacm-utils): skipped")
        return 77
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))
    work = tempfile.mkdtemp(prefix="uroce-mckey-")
    procs, logs, netns, cap = [], {}, None, None
    ok = True
    try:
        env = dict(os.environ, UROCE_GSO="0")
        env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        # Sanitizer builds: the runtime our library carries, into mckey only.
        preload = env.pop("UROCE_SAN_PRELOAD", None)
        sub_prefix = send_prefix = []
        if a.netns:
            netns = Netns(a.base, 1500)
            if not netns.create():
                return 77
            sub_prefix, send_prefix = netns.exec_prefix(0), netns.exec_prefix(1)
            sub_addrs = [netns.addrs[0]] * a.receivers
            send_addr = netns.addrs[1]
            sub_env = dict(env, UROCE_REGISTRY=os.path.join(work, "registry.s"))
            send_env = dict(env, UROCE_REGISTRY=os.path.join(work, "registry.c"))
            cap = Capture(send_addr, work, netns.iface, send_prefix)
        else:
            sub_addrs = [f"{a.base}.1" if a.shared else f"{a.base}.{i + 1}" for i in range(a.receivers)]
            send_addr = f"{a.base}.{a.receivers + 1}"
            sub_env = send_env = dict(env, UROCE_REGISTRY=os.path.join(work, "registry"))
            cap = Capture(send_addr, work)

        def start(name, prefix, e, addr, sender):
            cmd = [*prefix, "env", f"UROCE_ADDR={addr}", *([f"LD_PRELOAD={preload}"] if preload else []), "stdbuf", "-oL", "mckey", "-m", a.group, "-b", addr, "-C", str(a.count),
                   "-S", "200"] + (["-s"] if sender else [])
            print("$", " ".join(cmd[len(prefix):]))
            logs[name] = open(os.path.join(work, name + ".log"), "w+")
            p = subprocess.Popen(cmd, env=e, stdout=logs[name], stderr=subprocess.STDOUT, start_new_session=True)
            procs.append((name, p))
            return p

        def text(name):
            logs[name].flush()
            logs[name].seek(0)
            return logs[name].read()

        subs = [start(f"subscriber{i}", sub_prefix, sub_env, addr, False) for i, addr in enumerate(sub_addrs)]
        deadline = time.time() + 20
        while time.time() < deadline and not all("joined dgid" in text(f"subscriber{i}") for i in range(len(subs))):
            if any(p.poll() is not None for p in subs):
                break
            time.sleep(0.1)
        sender = start("sender", send_prefix, send_env, send_addr, True)
        end = time.time() + a.timeout
        for name, p in procs:
            try:
                rc = p.wait(max(1, end - time.time()))
            except subprocess.TimeoutExpired:
                kill_group(p)
                rc = "timeout"
            out = text(name)
            print(f"----- {name} (exit {rc})\n{out.rstrip()}")
            if rc != 0 or "data transfers complete" not in out or "return status 0" not in out:
                print(f"FAIL: {name} did not complete (exit {rc})")
                ok = False
        del sender
        if cap and cap.proc:
            ok &= cap.check(a.count)
            out = subprocess.run(["tshark", "-n", "-r", cap.pcap, "-Y",
                                  f"ip.dst == {a.group} && infiniband.bth.destqp == 0xffffff", "-T", "fields",
                                  "-e", "frame.number"], capture_output=True, text=True).stdout
            n = len([l for l in out.splitlines() if l.strip()])
            print(f"capture: {n} frames to {a.group} for QPN 0xFFFFFF (want at least {a.count})")
            ok &= n >= a.count
    finally:
        for _, p in procs:
            kill_group(p)
        if cap:
            cap.stop()
        if netns:
            netns.delete()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
