#!/usr/bin/env python3
"""One port for many processes (issue 18), between two network namespaces.

Unmodified Debian programs on uroce's libibverbs.so.1 / librdmacm.so.1:
several servers on ONE address in the first namespace, their clients in the
second, all at once, every byte checked by the programs themselves:

  RC SEND   ibv_rc_pingpong -c  (4 servers, 4 clients)
  UD SEND   ibv_ud_pingpong -c  (2 servers, 2 clients)
  WRITE/READ through rdma_cm    rping -V (2 servers on two rdma_cm ports)

The first RC server is killed with SIGKILL while its client runs; every
other pair must finish.  Then a fifth RC server starts on the address (it
takes the killed one's place in the port's group) and its client must reach
it.  Exit 0 on success, 1 on failure, 77 where namespaces cannot be made.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_program  # noqa: E402  (Netns, its cleanup guard)

RC_PAIRS, UD_PAIRS, RPING_PAIRS = 4, 2, 2


def start(ns, addr, lib, cmd, log):
    env = dict(os.environ, UROCE_ADDR=addr, LD_LIBRARY_PATH=lib, UROCE_LOG="warn")
    return subprocess.Popen(["ip", "netns", "exec", ns] + cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def wait(p, until):
    try:
        return p.wait(timeout=max(0.1, until - time.time()))
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--subnet", default="10.91.7")
    ap.add_argument("--work", default="/tmp")
    args = ap.parse_args()
    for prog in ("ibv_rc_pingpong", "ibv_ud_pingpong", "rping"):
        if subprocess.run(["sh", "-c", f"command -v {prog}"], capture_output=True).returncode != 0:
            print(f"{prog} is not installed (ibverbs-utils, rdmacm-utils)")
            return 77
    ns = run_program.Netns(args.subnet, 1500)
    if not ns.create():
        return 77
    srv_ns, cli_ns = ns.names
    srv, cli = ns.addrs
    work = os.path.join(args.work, f"uroce-shared-port-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    procs, failed = [], []

    def log(name):
        return open(os.path.join(work, name + ".log"), "w")

    def show(name):
        with open(os.path.join(work, name + ".log")) as f:
            print(f"----- {name}\n{f.read().strip()}")

    try:
        rc_srv, rc_cli, ud_srv, ud_cli, rp_srv, rp_cli = [], [], [], [], [], []
        # The servers, all on one address.
        for i in range(RC_PAIRS):
            iters = "100000" if i == 0 else "3000"  # the first runs until it is killed
            rc_srv.append(start(srv_ns, srv, args.lib, ["ibv_rc_pingpong", "-g", "0", "-c", "-s", "4096", "-n", iters,
                                                        "-p", str(18600 + i)], log(f"rc-server-{i}")))
        for i in range(UD_PAIRS):
            ud_srv.append(start(srv_ns, srv, args.lib, ["ibv_ud_pingpong", "-g", "0", "-c", "-s", "1024", "-n", "2000",
                                                        "-p", str(18700 + i)], log(f"ud-server-{i}")))
        for i in range(RPING_PAIRS):
            rp_srv.append(start(srv_ns, srv, args.lib, ["rping", "-s", "-a", srv, "-p", str(18800 + i), "-C", "200",
                                                        "-S", "4000", "-V"], log(f"rping-server-{i}")))
        procs += rc_srv + ud_srv + rp_srv
        time.sleep(1.0)  # listening
        for i in range(RC_PAIRS):
            iters = "100000" if i == 0 else "3000"
            rc_cli.append(start(cli_ns, cli, args.lib, ["ibv_rc_pingpong", "-g", "0", "-c", "-s", "4096", "-n", iters,
                                                        "-p", str(18600 + i), srv], log(f"rc-client-{i}")))
        for i in range(UD_PAIRS):
            ud_cli.append(start(cli_ns, cli, args.lib, ["ibv_ud_pingpong", "-g", "0", "-c", "-s", "1024", "-n", "2000",
                                                        "-p", str(18700 + i), srv], log(f"ud-client-{i}")))
        for i in range(RPING_PAIRS):
            rp_cli.append(start(cli_ns, cli, args.lib, ["rping", "-c", "-a", srv, "-p", str(18800 + i), "-C", "200",
                                                        "-S", "4000", "-V"], log(f"rping-client-{i}")))
        procs += rc_cli + ud_cli + rp_cli
        # Kill the first RC server while its client runs.
        time.sleep(0.5)
        if rc_srv[0].poll() is not None:
            failed.append("rc-server-0 ended before it could be killed (its run is too short)")
        os.killpg(rc_srv[0].pid, signal.SIGKILL)
        rc_srv[0].wait()
        print("killed rc-server-0 (SIGKILL)")
        until = time.time() + 60
        pairs = [(f"rc-{i}", rc_srv[i], rc_cli[i]) for i in range(1, RC_PAIRS)]
        pairs += [(f"ud-{i}", ud_srv[i], ud_cli[i]) for i in range(UD_PAIRS)]
        pairs += [(f"rping-{i}", rp_srv[i], rp_cli[i]) for i in range(RPING_PAIRS)]
        for name, s, c in pairs:
            cs, ss = wait(c, until), wait(s, until)
            ok = cs == 0 and ss == 0
            print(f"{name}: client exit {cs}, server exit {ss}: {'ok' if ok else 'FAILED'}")
            if not ok:
                failed.append(name)
                side = name.split("-")[0]
                show(f"{'rping' if side == 'rping' else side}-server-{name.split('-')[1]}")
                show(f"{'rping' if side == 'rping' else side}-client-{name.split('-')[1]}")
        os.killpg(rc_cli[0].pid, signal.SIGKILL)  # it lost its server
        rc_cli[0].wait()
        # A fifth server on the address, and its client.
        s5 = start(srv_ns, srv, args.lib, ["ibv_rc_pingpong", "-g", "0", "-c", "-s", "4096", "-n", "2000",
                                           "-p", "18610"], log("rc-server-5"))
        procs.append(s5)
        time.sleep(0.5)
        c5 = start(cli_ns, cli, args.lib, ["ibv_rc_pingpong", "-g", "0", "-c", "-s", "4096", "-n", "2000", "-p", "18610",
                                           srv], log("rc-client-5"))
        procs.append(c5)
        until = time.time() + 30
        cs, ss = wait(c5, until), wait(s5, until)
        print(f"rc-5 (after the kill): client exit {cs}, server exit {ss}: {'ok' if cs == 0 and ss == 0 else 'FAILED'}")
        if cs != 0 or ss != 0:
            failed.append("rc-5")
            show("rc-server-5")
            show("rc-client-5")
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        run_program.netns_delete(ns.names)
        subprocess.run(["rm", "-rf", work])
    if failed:
        print("FAILED:", ", ".join(failed))
        return 1
    print("RESULT: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
