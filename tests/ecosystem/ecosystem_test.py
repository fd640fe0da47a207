#!/usr/bin/env python3
"""Runs the software people test on RDMA, unmodified, on uroce (issue 10):
UCX, Open MPI over UCX, libfabric's verbs provider.  Each case starts the
programs through `uroce exec` (the drop-in libraries, and the device view
under /dev/infiniband and /sys/class/infiniband that UCX looks for) and
checks what they report.

  ecosystem_test.py --uroce BIN --case CASE [ARG...]

Cases:
  ucx-info                 ucx_info -d lists uroce0 with rc_verbs and
                           ud_verbs, rc_verbs with 64-bit device atomics
  ucx-perf TEST TL [sleep] ucx_perftest UCP TEST (tag_lat, tag_bw, ucp_put_bw,
                           ucp_get) between two processes over UCX_TLS=TL
                           (rc_v, ud_v), 1 MiB messages for the bw tests;
                           sleep: both wait for events (-E sleep)
  ucx-uct TEST             ucx_perftest UCT TEST on rc_verbs (fadd, cswap)
  ucx-client-server        UCX's ucp_client_server example (built from
                           libucx-dev's copy) over rdma_cm: the message
                           arrives byte for byte
  mpi TL                   Open MPI (pml ucx, UCX_TLS=TL) with 2 ranks runs
                           mpi_check.c: byte-checked ping-pong 8 B..1 MiB,
                           MPI_Allreduce, MPI_Put
  mpi-netns TL             the same with 4 ranks, 2 in each of two network
                           namespaces (launched through an rsh agent that
                           enters the other namespace): each pair of ranks
                           of a namespace shares its one address
  fi-info                  fi_info -p verbs lists uroce0 for FI_EP_MSG and
                           FI_EP_DGRAM (in a namespace with a veth: libfabric
                           ignores loopback interfaces)
  fi-pingpong EP           fi_pingpong -c -S all (data checked, every size)
                           over EP (msg, dgram, rdm = verbs;ofi_rxm), server
                           and client in that namespace

Every process is bounded in time and killed at the end.  Exit 77 (skipped)
when a program or package is missing, or namespaces cannot be made."""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "compat"))
from run_program import Netns, free_port, kill_group, listening  # noqa: E402

SKIP = 77


class Fail(Exception):
    pass


class Runner:
    def __init__(self, uroce, work, addr):
        self.uroce = uroce
        self.work = work
        self.addr = addr
        self.procs = []
        self.env = dict(os.environ)
        self.env["UROCE_REGISTRY"] = os.path.join(work, "registry")
        self.env.pop("UROCE_SAN_PRELOAD", None)
        if os.geteuid() == 0:  # mpirun refuses root without these
            self.env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
            self.env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"

    def cmd(self, argv, prefix=(), addr=None):
        return [*prefix, self.uroce, "exec", "--addr", addr or self.addr, "--", *argv]

    def start(self, name, argv, env=None, prefix=(), addr=None):
        log = open(os.path.join(self.work, name + ".log"), "w+")
        p = subprocess.Popen(self.cmd(argv, prefix, addr), env={**self.env, **(env or {})}, stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
        self.procs.append((name, p, log))
        return p

    def wait(self, p, timeout):
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            raise Fail(f"{self.name_of(p)} did not finish within {timeout} s")

    def name_of(self, p):
        return next(n for n, q, _ in self.procs if q is p)

    def output(self, p):
        log = next(l for _, q, l in self.procs if q is p)
        log.flush()
        log.seek(0)
        return log.read()

    def run(self, name, argv, timeout, env=None, prefix=(), addr=None):
        p = self.start(name, argv, env, prefix, addr)
        rc = self.wait(p, timeout)
        return rc, self.output(p)

    def kill_all(self):
        for _, p, _ in self.procs:
            kill_group(p)

    def dump(self):
        for name, p, _ in self.procs:
            print(f"----- {name} (exit {p.poll()}) -----")
            print(self.output(p)[-4000:])


def expect(text, pattern, what):
    if not re.search(pattern, text, re.M):
        raise Fail(f"{what}: no match for /{pattern}/")


def need(*programs):
    for prog in programs:
        if not shutil.which(prog):
            print(f"{prog} is not installed: skipped")
            raise SystemExit(SKIP)


def wait_listening(port, proc, runner, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if listening(port, proc.pid):
            return
        if proc.poll() is not None:
            raise Fail(f"{runner.name_of(proc)} exited ({proc.returncode}) before listening on {port}")
        time.sleep(0.05)
    raise Fail(f"nothing listens on TCP {port} after {timeout} s")


# ---------------------------------------------------------------- UCX

def ucx_info(r, a):
    need("ucx_info")
    rc, out = r.run("ucx_info", ["ucx_info", "-d"], 60)
    if rc != 0:
        raise Fail(f"ucx_info exited {rc}")
    dom = out.split("# Memory domain: uroce0", 1)
    if len(dom) != 2:
        raise Fail("ucx_info -d lists no memory domain uroce0 (UCX did not find the device)")
    dom = dom[1].split("# Memory domain:", 1)[0]
    rc_part = dom.split("Transport: rc_verbs", 1)
    if len(rc_part) != 2:
        raise Fail("no rc_verbs transport on uroce0")
    rc_part = rc_part[1].split("Transport:", 1)[0]
    expect(dom, r"Transport: ud_verbs\s*\n#\s+Device: uroce0:1", "ud_verbs on uroce0:1")
    expect(rc_part, r"atomic_fadd: 64 bit", "rc_verbs 64-bit fetch-and-add")
    expect(rc_part, r"atomic_cswap: 64 bit", "rc_verbs 64-bit compare-and-swap")
    print("ucx_info: uroce0 with rc_verbs (device atomics) and ud_verbs")


def ucx_pair(r, server_args, client_args, env, timeout):
    port = free_port()
    server = r.start("server", ["ucx_perftest", "-p", str(port), *server_args], env)
    wait_listening(port, server, r)
    rc, out = r.run("client", ["ucx_perftest", "127.0.0.1", "-p", str(port), *client_args], timeout, env)
    src = r.wait(server, 30)
    if rc != 0 or src != 0:
        raise Fail(f"ucx_perftest exited {rc} (client), {src} (server)")
    m = re.search(r"^Final:\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", out, re.M)
    if not m:
        raise Fail("the client printed no Final: line")
    return m


def ucx_perf(r, a):
    need("ucx_perftest")
    test, tl, *mode = a.args
    env = {"UCX_TLS": tl + ",self", "UCX_NET_DEVICES": "uroce0:1"}
    size = ["-s", str(1 << 20)] if test in ("tag_bw", "ucp_put_bw", "ucp_get") else []
    iters = "200" if size else "2000"
    # sleep: both sides wait in ucp_worker_wait (poll() on the channels' fds
    # after arming the CQs), not busy polling.
    wait = ["-E", "sleep"] if mode == ["sleep"] else []
    m = ucx_pair(r, wait, ["-t", test, *size, "-n", iters, *wait], env, 120)
    if int(m.group(1)) != int(iters):
        raise Fail(f"{m.group(1)} iterations, {iters} asked")
    print(f"ucx_perftest {test} over {tl}{' -E sleep' if wait else ''}: {m.group(0)}")


def ucx_uct(r, a):
    need("ucx_perftest")
    (test,) = a.args
    args = ["-x", "rc_verbs", "-d", "uroce0:1"]
    m = ucx_pair(r, args, [*args, "-t", test, "-n", "2000"], {}, 120)
    print(f"ucx_perftest UCT {test} on rc_verbs: {m.group(0)}")


def ucx_client_server(r, a):
    src = "/usr/share/doc/libucx-dev/examples/ucp_client_server.c"
    if not os.path.exists(src):
        print("UCX's examples are not installed (Debian package libucx-dev): skipped")
        raise SystemExit(SKIP)
    need("cc")
    exe = os.path.join(r.work, "ucp_client_server")
    cc = subprocess.run(["cc", "-O1", "-o", exe, src, "-lucp", "-lucs"], capture_output=True, text=True)
    if cc.returncode != 0:
        raise Fail("cannot build UCX's example: " + cc.stderr[-2000:])
    port = free_port()
    # The rdma_cm connection manager only, and the data over rc_verbs.
    env = {"UCX_TLS": "rc_v,self", "UCX_NET_DEVICES": "uroce0:1", "UCX_SOCKADDR_TLS_PRIORITY": "rdmacm"}
    server = r.start("server", ["stdbuf", "-oL", exe, "-p", str(port)], env)
    deadline = time.time() + 20
    while "server is listening" not in r.output(server):
        if server.poll() is not None or time.time() > deadline:
            raise Fail("the example's server did not start listening")
        time.sleep(0.05)
    rc, out = r.run("client", ["stdbuf", "-oL", exe, "-a", r.addr, "-p", str(port)], 60, env)
    if rc != 0:
        raise Fail(f"the example's client exited {rc}")
    # The example's message, which the client receives from the server.
    expect(out, r"^ABCDEFGHIJKLMNO\.$", "the example's message")
    time.sleep(0.5)
    expect(r.output(server), r"UCX data message was received|ABCDEFGHIJKLMNO\.", "the server's side")
    print("ucp_client_server over rdma_cm: message received byte for byte")


# ---------------------------------------------------------------- Open MPI

def build_mpi_check(r):
    exe = os.path.join(r.work, "mpi_check")
    cc = subprocess.run(["mpicc", "-O1", "-o", exe, os.path.join(HERE, "mpi_check.c")], capture_output=True,
                        text=True)
    if cc.returncode != 0:
        raise Fail("mpicc failed: " + cc.stderr[-2000:])
    return exe


def mpi(r, a):
    need("mpicc", "mpirun")
    (tl,) = a.args
    exe = build_mpi_check(r)
    # UCX_TLS without a shared-memory transport: the ranks talk through uroce.
    rc, out = r.run("mpirun", ["mpirun", "--oversubscribe", "-np", "2", "--mca", "pml", "ucx", "--mca", "osc",
                               "ucx", "--mca", "btl", "^openib,uct", "-x", f"UCX_TLS={tl},self", "-x",
                               "UCX_NET_DEVICES=uroce0:1", exe], 240)
    if rc != 0:
        raise Fail(f"mpirun exited {rc}")
    expect(out, r"^mpi_check: OK \(2 ranks\)$", "mpi_check's verdict")
    print(f"Open MPI over UCX {tl}: ping-pong 8 B..1 MiB, Allreduce and Put byte-exact")


def mpi_netns(r, a):
    """2 ranks in each of two namespaces (hosts): Open MPI launches the far
    ranks through an rsh agent that enters the other namespace, as ssh would
    enter another host.  The two ranks of a namespace share its one address,
    so the far ranks reach both of them on UDP 4791 only through the port
    group (issue 18)."""
    need("mpicc", "mpirun", "orted")
    (tl,) = a.args
    exe = build_mpi_check(r)
    prefix = with_netns(r)
    ns = r.netns
    agent = os.path.join(r.work, "agent.sh")
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# Open MPI's rsh agent: agent [OPTION...] HOST COMMAND...\n"
                'while [ "${1#-}" != "$1" ]; do shift; done\nhost=$1; shift\ncase $host in\n')
        for name, addr in zip(ns.names, ns.addrs):
            f.write(f"  {addr}) ns={name};;\n")
        f.write('  *) echo "agent: unknown host $host" >&2; exit 1;;\nesac\n'
                f'exec ip netns exec "$ns" {r.uroce} exec --addr "$host" -- sh -c "$*"\n')
    os.chmod(agent, 0o755)
    hosts = os.path.join(r.work, "hosts")
    with open(hosts, "w") as f:
        f.write("".join(f"{addr} slots=2\n" for addr in ns.addrs))
    rc, out = r.run("mpirun", ["mpirun", "--hostfile", hosts, "-np", "4", "--map-by", "slot", "--mca",
                               "plm_rsh_agent", agent, "--mca", "pml", "ucx", "--mca", "osc", "ucx", "--mca", "btl",
                               "^openib,uct", "-x", f"UCX_TLS={tl},self", "-x", "UCX_NET_DEVICES=uroce0:1", exe],
                    240, prefix=prefix)
    if rc != 0:
        raise Fail(f"mpirun exited {rc}")
    expect(out, r"^mpi_check: OK \(4 ranks\)$", "mpi_check's verdict")
    print(f"Open MPI over UCX {tl}, 2 ranks in each of two namespaces: every pair's ping-pong 8 B..1 MiB, "
          "Allreduce and Put byte-exact")


# ---------------------------------------------------------------- libfabric

def with_netns(r):
    if not shutil.which("ip"):
        print("ip (iproute2) is not installed: skipped")
        raise SystemExit(SKIP)
    ns = Netns(f"10.{random.randint(128, 254)}.{random.randint(0, 255)}", 9000)
    if not ns.create():
        raise SystemExit(SKIP)
    r.netns = ns
    r.addr = ns.addrs[0]
    return ns.exec_prefix(0)


def fi_info(r, a):
    need("fi_info")
    prefix = with_netns(r)
    rc, out = r.run("fi_info", ["fi_info", "-p", "verbs"], 60, prefix=prefix)
    if rc != 0:
        raise Fail(f"fi_info exited {rc}")
    expect(out, r"domain: uroce0\n\s+version: \S+\n\s+type: FI_EP_MSG", "a verbs FI_EP_MSG domain uroce0")
    expect(out, r"domain: uroce0-dgram\n\s+version: \S+\n\s+type: FI_EP_DGRAM", "a verbs FI_EP_DGRAM domain")
    print("fi_info -p verbs: uroce0 for FI_EP_MSG and FI_EP_DGRAM")


def fi_pingpong(r, a):
    need("fi_pingpong")
    (ep,) = a.args
    prefix = with_netns(r)
    prov = "verbs;ofi_rxm" if ep == "rdm" else "verbs"
    port = free_port()
    args = ["fi_pingpong", "-p", prov, "-e", ep, "-c", "-S", "all", "-I", "20", "-B", str(port)]
    server = r.start("server", args, prefix=prefix)
    wait_listening(port, server, r)  # (ip netns exec and uroce exec exec: the pid is fi_pingpong's)
    # The server's address comes from libfabric ("localhost", bound to the
    # device as the kernel's rdma_cm does): client and server share the host.
    rc, out = r.run("client", [*args[:-2], "-P", str(port), "127.0.0.1"], 120, prefix=prefix)
    src = r.wait(server, 30)
    if rc != 0 or src != 0:
        raise Fail(f"fi_pingpong exited {rc} (client), {src} (server)")
    # One row per size of -S all, up to the endpoint's largest message; -c
    # makes fi_pingpong check every byte (it fails on a mismatch).
    rows = re.findall(r"^(\d+[kmg]?)\s+20\s+=20\s", out, re.M)
    if len(rows) < 10 or "4k" not in rows:
        raise Fail(f"expected a row for every size up to 4k at least, got {rows}")
    print(f"fi_pingpong -e {ep} -c -S all: {len(rows)} sizes, data checked, up to {rows[-1]}")


CASES = {"ucx-info": ucx_info, "ucx-perf": ucx_perf, "ucx-uct": ucx_uct, "ucx-client-server": ucx_client_server,
         "mpi": mpi, "mpi-netns": mpi_netns, "fi-info": fi_info, "fi-pingpong": fi_pingpong}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--uroce", required=True, help="the uroce tool (uroce exec)")
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    ap.add_argument("--addr", default="127.0.0.1", help="the device's address for loopback cases")
    ap.add_argument("args", nargs="*")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="uroce-eco-")
    r = Runner(a.uroce, work, a.addr)
    r.netns = None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(1))
    try:
        CASES[a.case](r, a)
        print("RESULT: PASS")
        return 0
    except Fail as e:
        print("FAIL:", e)
        r.dump()
        print("RESULT: FAIL")
        return 1
    finally:
        r.kill_all()
        if r.netns:
            r.netns.delete()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
