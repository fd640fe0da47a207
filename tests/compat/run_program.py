#!/usr/bin/env python3
"""Runs an unmodified verbs program (from a Debian package) on uroce's
libibverbs.so.1 and checks what it did.

  run_program.py [options] -- PROGRAM ARGS...

Modes:
  --mode single   run PROGRAM ARGS once (ibv_devinfo)
  --mode pair     a server `PROGRAM ARGS <port-flag> P` and a client
                  `PROGRAM ARGS <port-flag> P 127.0.0.1` (ibv_*_pingpong,
                  perftest); both must exit 0
  --mode qperf    a server `qperf -lp P` and a client
                  `qperf -lp P ARGS... 127.0.0.1 TEST` (TEST = --qperf-test);
                  the client must exit 0 and print the test's result

Both ends get LD_LIBRARY_PATH=<--lib>, UROCE_ADDR=<--addr> (each test uses
its own loopback address, so that concurrent tests do not see each other's
traffic) and a private host registry.  Every process is bounded in time.

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


def listening(port):
    """True if some socket listens on TCP `port` (IPv4 or IPv6)."""
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
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


def free_port():
    for _ in range(200):
        p = random.randint(20000, 45000)
        if not listening(p):
            return p
    raise SystemExit("no free TCP port found")


class Capture:
    """tshark on lo for the traffic of one address; None if not possible."""

    def __init__(self, addr, workdir):
        self.proc = None
        self.pcap = os.path.join(workdir, "run.pcap")
        if os.environ.get("UROCE_COMPAT_CAPTURE", "1") == "0" or not shutil.which("tshark"):
            print("capture: skipped (no tshark, or UROCE_COMPAT_CAPTURE=0)")
            return
        host = "ip6 host " + addr if ":" in addr else "host " + addr
        err = open(os.path.join(workdir, "tshark.err"), "w+")
        self.err = err
        self.proc = subprocess.Popen(
            ["tshark", "-n", "-q", "-i", "lo", "-f", f"udp and {host}", "-c", "20000",
             "-a", "duration:170", "-F", "pcap", "-w", self.pcap],
            stdout=subprocess.DEVNULL, stderr=err)
        for _ in range(100):
            err.seek(0)
            text = err.read()
            if "Capture started" in text:
                time.sleep(0.3)
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        print("capture: tshark cannot capture on lo here, skipped:", text.strip()[-200:])
        self.stop()
        self.proc = None

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
        r = subprocess.run([sys.executable, ROCE_CHECK, self.pcap, "--min-frames", str(min_frames)],
                           capture_output=True, text=True)
        lines = r.stdout.splitlines()
        print("capture:", " ".join(l.strip() for l in lines if not l.startswith("FAIL"))[:400])
        for l in lines:
            if l.startswith("FAIL"):
                print("capture:", l)
        return r.returncode == 0


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
    ap.add_argument("--port-flag", default="-p")
    ap.add_argument("--qperf-test")
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

    work = tempfile.mkdtemp(prefix="uroce-compat-")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["UROCE_ADDR"] = a.addr
    env.setdefault("UROCE_REGISTRY", os.path.join(work, "registry"))
    ok = True
    logs = {}

    def log(name):
        logs[name] = os.path.join(work, name + ".log")
        return open(logs[name], "w")

    capture = Capture(a.addr, work) if a.mode != "single" else None
    if capture and capture.proc:
        env["UROCE_GSO"] = "0"  # one frame per packet, as the frame check wants
    try:
        if a.mode == "single":
            p = run(cmd, env, a.timeout, log("run"))
            rc = finish(p, a.timeout, "run")
            if rc != 0:
                print(f"exit status {rc}")
                ok = False
            checked = "run"
        else:
            port = free_port()
            if a.mode == "pair":
                server_cmd = cmd + [a.port_flag, str(port)]
                client_cmd = server_cmd + ["127.0.0.1"]
            else:
                server_cmd = [cmd[0], "-lp", str(port)]
                client_cmd = cmd + ["-lp", str(port), "127.0.0.1", a.qperf_test]
            server = run(server_cmd, env, a.timeout, log("server"))
            deadline = time.time() + 20
            while not listening(port) and server.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            client = run(client_cmd, env, a.timeout, log("client"))
            crc = finish(client, a.timeout, "client")
            if a.mode == "qperf":
                # The qperf server serves forever; it must still be alive.
                if server.poll() is not None:
                    print(f"server died (status {server.returncode})")
                    ok = False
                else:
                    os.killpg(server.pid, signal.SIGTERM)
                    finish(server, 10, "server")
            else:
                src = finish(server, a.timeout, "server")
                if src != 0:
                    print(f"server: exit status {src}")
                    ok = False
            if crc != 0:
                print(f"client: exit status {crc}")
                ok = False
            checked = "client"
        outputs = {n: open(f, errors="replace").read() for n, f in logs.items()}
        for pattern in a.expect:
            if not re.search(pattern, outputs[checked], re.M):
                print(f"{checked} output does not match {pattern!r}")
                ok = False
        for pattern in a.reject:
            for n, text in outputs.items():
                m = re.search(pattern, text, re.M)
                if m:
                    print(f"{n} output has {m.group(0)!r} (rejected: {pattern!r})")
                    ok = False
        for n, text in outputs.items():
            print(f"----- {n} output" + ("" if len(text) < 6000 else " (tail)"))
            print(text[-6000:].rstrip())
        if capture and not capture.check(a.min_frames):
            ok = False
    finally:
        if capture:
            capture.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
