#!/usr/bin/env python3
"""Runs an unmodified verbs program (from a Debian package) on uroce's
libibverbs.so.1 and checks what it did.

  run_program.py [options] -- PROGRAM ARGS...

Modes:
  --mode single   run PROGRAM ARGS once (ibv_devinfo)
  --mode pair     a server `PROGRAM ARGS <port-flag> P` and a client
                  `PROGRAM ARGS <port-flag> P 127.0.0.1` (ibv_*_pingpong,
                  perftest); both must exit 0.  --clients N starts N such
                  clients at once (each must exit 0 and match --expect);
                  --server-arg adds an argument to the server's command
                  only (ibv_xsrq_pingpong -c N)
  --mode qperf    a server `qperf -lp P` and a client
                  `qperf -lp P ARGS... 127.0.0.1 TEST` (TEST = --qperf-test);
                  the client must exit 0 and print the test's result

Both ends get LD_LIBRARY_PATH=<--lib>, UROCE_ADDR=<--addr> (each test uses
its own loopback address, so that concurrent tests do not see each other's
traffic) and a private host registry.  Every process is bounded in time.

--netns: the two-host case.  Two network namespaces (unique names
uroce-compat-<pid>-s and -c) are joined by a veth pair of MTU --netns-mtu
(9000: active MTU 4096), addresses <--netns-subnet>.1/24 (server) and .2/24
(client), lo up in each; the server runs in the first (`ip netns exec`), the
client in the second, each with UROCE_ADDR = its veth address and its own
host registry (two hosts), the client pointing at the server's address; the
capture runs on the client's veth.  --mode single runs in the server's
namespace.  The namespaces are deleted at the end, also on SIGTERM/SIGINT/
SIGHUP, and, should this script be killed outright (ctest's timeout), by a
guard process that waits for its end; namespaces left by dead runs are
removed at start.  Exit 77 if namespaces cannot be created (not root).

Checks: exit statuses; --expect REGEX (the client's, or the single run's,
output must match; repeatable); --reject REGEX (no output may match); and,
when tshark may capture on lo, a capture of the RoCEv2 traffic of the run
checked frame by frame by tests/capture/roce_check.py (set
UROCE_COMPAT_CAPTURE=0 to skip it).

Exit 77 (skipped) when PROGRAM is not installed (--package names the Debian
package that provides it)."""
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
ROCE_CHECK = os.path.join(HERE, "..", "capture", "roce_check.py")
# The frames a capture (and each shared-memory trace) keeps, from the start
# of the run: every one is decoded by tshark and its ICRC checked.
TRACE_FRAMES = 5000


def listening(port, pid=None):
    """True if some socket listens on TCP `port` (IPv4 or IPv6), in the
    network namespace of process `pid` (default: ours)."""
    base = f"/proc/{pid}/net" if pid else "/proc/net"
    for name in (base + "/tcp", base + "/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if cols[3] == "0A" and int(cols[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def port_in_use(port):
    """True if any TCP socket here (IPv4 or IPv6, listening, connected or
    closing) has `port` as its local port."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    if int(line.split()[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def free_port():
    """A TCP port for a server to listen on: outside the kernel's range of
    ephemeral ports (an outgoing connection of any other test may hold one,
    and the server's bind then fails), and used by no socket now."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    low = (10000, lo - 1) if lo > 12000 else (hi + 1, 65535)
    for _ in range(200):
        p = random.randint(*low)
        if not port_in_use(p):
            return p
    raise SystemExit("no free TCP port found")


def shm_enabled(env):
    """Whether uroce's shared-memory path is on in `env`: unless UROCE_SHM
    says 0 (also off, false, no)."""
    return env.get("UROCE_SHM", "").lower() not in ("0", "off", "false", "no")


class Capture:
    """tshark on lo for the traffic of one address (or on `iface` inside a
    namespace, `prefix` being `ip netns exec NS`); no capture if not possible."""

    def __init__(self, addr, workdir, iface="lo", prefix=()):
        self.proc = None
        self.traces = []  # the UROCE_PCAP traces of server and client, to check too (shared memory)
        self.pcap = os.path.join(workdir, "run.pcap")
        if os.environ.get("UROCE_COMPAT_CAPTURE", "1") == "0" or not shutil.which("dumpcap"):
            print("capture: skipped (no dumpcap, or UROCE_COMPAT_CAPTURE=0)")
            return
        host = "ip6 host " + addr if ":" in addr else "host " + addr
        err = open(os.path.join(workdir, "dumpcap.err"), "w+")
        self.err = err
        # dumpcap, tshark's capture engine, without tshark's start (about
        # 1.5 s of probing capture plug-ins); classic pcap (-P).
        self.proc = subprocess.Popen(
            [*prefix, "dumpcap", "-q", "-i", iface, "-f", f"udp and {host}", "-c", str(TRACE_FRAMES),
             "-a", "duration:170", "-P", "-w", self.pcap],
            stdout=subprocess.DEVNULL, stderr=err)
        text = ""
        for _ in range(500):
            err.seek(0)
            text = err.read()
            # The file's header is written once the interface is open and
            # its filter set: from then on the capture sees every packet.
            if "Capturing on" in text and os.path.exists(self.pcap) and os.path.getsize(self.pcap) >= 24:
                time.sleep(0.05)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        print(f"capture: tshark cannot capture on {iface} here, skipped:", text.strip()[-200:])
        self.stop()
        self.proc = None

    def trace_shm(self, workdir, server_env, client_env):
        """When the environments turn uroce's shared-memory path on, packets
        between the two processes bypass tshark: have them write uroce's own
        traces (UROCE_PCAP) and check those too.  A trace holds what its
        process sent and received, so each side writes its own: together
        they would show every packet twice.  Returns the environments."""
        if not shm_enabled(server_env):
            return server_env, client_env
        self.traces = [os.path.join(workdir, f"trace-{n}.pcap") for n in ("server", "client")]
        # As many frames as the capture on lo keeps (dumpcap -c).
        count = {"UROCE_PCAP_COUNT": os.environ.get("UROCE_PCAP_COUNT", str(TRACE_FRAMES))}
        return (dict(server_env, UROCE_PCAP=self.traces[0], **count),
                dict(client_env, UROCE_PCAP=self.traces[1], **count))

    @property
    def frames(self):
        """A file that holds every RoCEv2 frame between server and client
        once: the capture, or the client's trace."""
        return self.traces[1] if self.traces else self.pcap

    def stop(self):
        if self.proc and self.proc.poll() is None:
            time.sleep(0.5)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def check(self, min_frames):
        if not self.proc:
            return True
        self.stop()
        if not self.traces:
            return self.check_file("capture", self.pcap, min_frames)
        # Whatever crossed the kernel (CM MADs, packets sent before a ring
        # was found) must be RoCEv2 too; the traces have it all.
        ok = self.check_file("capture", self.pcap, 0)
        written = [t for t in self.traces if os.path.exists(t)]  # (some runs have no server)
        if not written:
            print("trace: FAIL no trace written:", " ".join(self.traces))
            return False
        for t in written:
            ok = self.check_file("trace", t, min_frames) and ok
        return ok

    @staticmethod
    def check_file(what, pcap, min_frames):
        if not os.path.exists(pcap):
            print(f"{what}: FAIL no file {pcap}")
            return False
        r = subprocess.run([sys.executable, ROCE_CHECK, pcap, "--min-frames", str(min_frames)],
                           capture_output=True, text=True)
        lines = r.stdout.splitlines()
        print(f"{what}:", " ".join(l.strip() for l in lines if not l.startswith("FAIL"))[:400])
        for l in lines:
            if l.startswith("FAIL"):
                print(f"{what}:", l)
        return r.returncode == 0


NETNS_PREFIX = "uroce-compat-"


def ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def netns_delete(names):
    """Kills what still runs in the namespaces `names`, then deletes them."""
    for n in names:
        r = ip("netns", "pids", n, check=False)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
    for n in names:
        if os.path.exists(os.path.join("/run/netns", n)):
            ip("netns", "del", n, check=False)


def netns_remove_stale():
    """Deletes the namespaces of earlier runs whose script is dead."""
    try:
        entries = os.listdir("/run/netns")
    except OSError:
        return
    stale = []
    for n in entries:
        m = re.fullmatch(re.escape(NETNS_PREFIX) + r"(\d+)-[sc]", n)
        if not m:
            continue
        try:
            os.kill(int(m.group(1)), 0)
        except ProcessLookupError:
            stale.append(n)
        except OSError:
            pass
    if stale:
        print("removing namespaces of dead runs:", " ".join(stale))
        netns_delete(stale)


class Netns:
    """Two namespaces joined by a veth pair: [server, client]."""

    def __init__(self, subnet, mtu):
        self.names = [f"{NETNS_PREFIX}{os.getpid()}-s", f"{NETNS_PREFIX}{os.getpid()}-c"]
        self.addrs = [subnet + ".1", subnet + ".2"]
        self.iface = "veth0"
        self.guard = None
        self.created = False
        self.mtu = mtu

    def create(self):
        """False (nothing left behind) if namespaces cannot be made here."""
        netns_remove_stale()
        r = ip("netns", "add", self.names[0], check=False)
        if r.returncode != 0:
            print("ip netns add is not permitted here:", r.stderr.strip())
            return False
        self.created = True
        self._start_guard()
        ip("netns", "add", self.names[1])
        # Both ends are made inside their namespaces: nothing appears in ours.
        ip("link", "add", self.iface, "netns", self.names[0], "mtu", str(self.mtu), "type", "veth",
           "peer", "name", self.iface, "netns", self.names[1], "mtu", str(self.mtu))
        for n, a in zip(self.names, self.addrs):
            ip("-n", n, "link", "set", "lo", "up")
            ip("-n", n, "addr", "add", a + "/24", "dev", self.iface)
            ip("-n", n, "link", "set", self.iface, "up")
        # The veth is up once both ends are (carrier); wait for it.
        deadline = time.time() + 10
        while time.time() < deadline:
            states = [ip("-n", n, "-o", "link", "show", self.iface).stdout for n in self.names]
            if all("LOWER_UP" in s for s in states):
                break
            time.sleep(0.05)
        print(f"netns: {self.names[0]} ({self.addrs[0]}) <-veth mtu {self.mtu}-> {self.names[1]} ({self.addrs[1]})")
        return True

    def _start_guard(self):
        """A process outside our process tree (a kill of our tree leaves it
        alone) that deletes the namespaces when our end of a pipe closes,
        i.e. when this script ends, however it ends."""
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setsid()
                if os.fork() != 0:
                    os._exit(0)
                os.close(w)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_IGN)
                while True:
                    try:
                        if not os.read(r, 1):
                            break
                    except InterruptedError:
                        continue
                netns_delete(self.names)
            finally:
                os._exit(0)
        os.close(r)
        os.waitpid(pid, 0)
        self.guard = w

    def exec_prefix(self, i):
        return ["ip", "netns", "exec", self.names[i]]

    def delete(self):
        if self.created:
            netns_delete(self.names)
            self.created = False
        if self.guard is not None:
            os.close(self.guard)
            self.guard = None


def rejected(patterns, outputs):
    """Names each output (a dict name -> text) that matches one of the
    rejected patterns; True if any did."""
    found = False
    for pattern in patterns:
        for n, text in outputs.items():
            m = re.search(pattern, text, re.M)
            if m:
                print(f"{n} output has {m.group(0)!r} (rejected: {pattern!r})")
                found = True
    return found


def kill_group(p):
    """Kills process p's whole process group (it was started with
    start_new_session) unless it has ended, and reaps it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        p.wait()


def clean_up(procs, capture, netns, work):
    """The end of every run, passed or not: no process, capture, namespace
    or scratch directory of the run is left behind."""
    for p in procs:
        kill_group(p)
    if capture:
        capture.stop()
    if netns:
        netns.delete()
    shutil.rmtree(work, ignore_errors=True)


def on_signal(signum, frame):
    raise SystemExit(128 + signum)


def run(cmd, env, timeout, log):
    print("$", " ".join(cmd))
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def finish(proc, timeout, name):
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"{name}: still running after {timeout} s: killed")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 124


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--package", default="?")
    ap.add_argument("--mode", choices=["single", "pair", "qperf"], default="pair")
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--netns", action="store_true",
                    help="server and client in two namespaces joined by a veth")
    ap.add_argument("--netns-subnet", help="first three bytes of the veth /24 (default 10.<random>.<random>)")
    ap.add_argument("--netns-mtu", type=int, default=9000)
    ap.add_argument("--port-flag", default="-p")
    ap.add_argument("--qperf-test")
    ap.add_argument("--clients", type=int, default=1)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--reject", action="append", default=[])
    ap.add_argument("--min-frames", type=int, default=1)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no program given")
    if not shutil.which(cmd[0]):
        print(f"{cmd[0]} is not installed (Debian package {a.package}): skipped")
        return 77
    if a.netns and not shutil.which("ip"):
        print("ip (Debian package iproute2) is not installed: skipped")
        return 77

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    # perftest calibrates its cycle counter against the clock before its
    # report and gives up when a busy machine spoils the fit ("Correlation
    # coefficient r^2: ... < 0.9 / Can't produce a report"): a fault of the
    # measurement, not of the run, so such a run is made once more.
    rc, outputs = attempt(a, cmd)
    if rc != 0 and any(m in t for t in outputs.values() for m in CALIBRATION_FAILED):
        print("perftest could not calibrate its clock (a busy machine): running once more")
        rc, outputs = attempt(a, cmd)
    return rc


CALIBRATION_FAILED = ("Can't produce a report", "Correlation coefficient r^2")  # (or it reports "inf")


def attempt(a, cmd):
    """One run of the program(s): (exit status, {log name: output})."""
    outputs = {}
    work = tempfile.mkdtemp(prefix="uroce-compat-")
    procs = []
    netns = None
    capture = None
    try:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["UROCE_ADDR"] = a.addr
        # Sanitizer builds: the runtime our library carries goes first into
        # the programs (not instrumented) only, never into this interpreter,
        # tshark or ip (a preloaded TSan runtime crashes some Pythons).
        preload = env.pop("UROCE_SAN_PRELOAD", None)
        if preload and not a.netns:
            env["LD_PRELOAD"] = preload
        env.setdefault("UROCE_REGISTRY", os.path.join(work, "registry"))
        server_env = client_env = env
        server_prefix = client_prefix = []
        server_addr = "127.0.0.1"
        if a.netns:
            subnet = a.netns_subnet or f"10.{random.randint(128, 254)}.{random.randint(0, 255)}"
            netns = Netns(subnet, a.netns_mtu)
            if not netns.create():
                return 77, outputs
            server_prefix, client_prefix = netns.exec_prefix(0), netns.exec_prefix(1)
            if preload:  # into the programs, not into ip
                server_prefix = server_prefix + ["env", "LD_PRELOAD=" + preload]
                client_prefix = client_prefix + ["env", "LD_PRELOAD=" + preload]
            server_addr = netns.addrs[0]
            # Two hosts: each end its own address and its own host registry.
            server_env = dict(env, UROCE_ADDR=netns.addrs[0], UROCE_REGISTRY=os.path.join(work, "registry.s"))
            client_env = dict(env, UROCE_ADDR=netns.addrs[1], UROCE_REGISTRY=os.path.join(work, "registry.c"))
        ok = True
        logs = {}

        def log(name):
            logs[name] = os.path.join(work, name + ".log")
            return open(logs[name], "w")

        def start(prefix, c, e, name):
            p = run(prefix + c, e, a.timeout, log(name))
            procs.append(p)
            return p

        if a.mode != "single":
            if netns:
                capture = Capture(netns.addrs[1], work, netns.iface, netns.exec_prefix(1))
            else:
                capture = Capture(a.addr, work)
        if capture and capture.proc:
            # one frame per packet, as the frame check wants
            server_env = dict(server_env, UROCE_GSO="0")
            client_env = dict(client_env, UROCE_GSO="0")
            if not netns:
                server_env, client_env = capture.trace_shm(work, server_env, client_env)
        if a.mode == "single":
            p = start(server_prefix, cmd, server_env, "run")
            rc = finish(p, a.timeout, "run")
            if rc != 0:
                print(f"exit status {rc}")
                ok = False
            checked = ["run"]
        else:
            port = free_port()
            if a.mode == "pair":
                server_cmd = cmd + [a.port_flag, str(port)]
                client_cmd = server_cmd + [server_addr]
                server_cmd = server_cmd + a.server_arg
            else:
                server_cmd = [cmd[0], "-lp", str(port)]
                client_cmd = cmd + ["-lp", str(port), server_addr, a.qperf_test]
            server = start(server_prefix, server_cmd, server_env, "server")
            deadline = time.time() + 20
            # `ip netns exec` execs the program: its pid shows its namespace.
            while not listening(port, server.pid) and server.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            checked = ["client"] if a.clients == 1 else [f"client{i + 1}" for i in range(a.clients)]
            clients = [start(client_prefix, client_cmd, client_env, name) for name in checked]
            # One deadline for them all: several clients must not add up
            # their time limits past the test's own (ctest would kill the
            # run before it could say where it stood).
            deadline = time.time() + a.timeout
            crcs = [finish(c, max(1.0, deadline - time.time()), name) for c, name in zip(clients, checked)]
            if a.mode == "qperf":
                # The qperf server serves forever; it must still be alive.
                if server.poll() is not None:
                    print(f"server died (status {server.returncode})")
                    ok = False
                else:
                    os.killpg(server.pid, signal.SIGTERM)
                    finish(server, 10, "server")
            else:
                src = finish(server, max(1.0, deadline - time.time()) if a.clients > 1 else a.timeout, "server")
                if src != 0:
                    print(f"server: exit status {src}")
                    ok = False
            for name, crc in zip(checked, crcs):
                if crc != 0:
                    print(f"{name}: exit status {crc}")
                    ok = False
        outputs = {n: open(f, errors="replace").read() for n, f in logs.items()}
        for pattern in a.expect:
            for name in checked:
                if not re.search(pattern, outputs[name], re.M):
                    print(f"{name} output does not match {pattern!r}")
                    ok = False
        ok &= not rejected(a.reject, outputs)
        for n, text in outputs.items():
            print(f"----- {n} output" + ("" if len(text) < 6000 else " (tail)"))
            print(text[-6000:].rstrip())
        if capture and not capture.check(a.min_frames):
            ok = False
    finally:
        clean_up(procs, capture, netns, work)
    print("RESULT:", "PASS" if ok else "FAIL")
    return (0 if ok else 1), outputs


if __name__ == "__main__":
    sys.exit(main())
