#!/usr/bin/env python3
"""Runs unmodified rdma_cm programs (rdmacm-utils, perftest -R, qperf -cm1)
on uroce's libibverbs.so.1 and librdmacm.so.1 and checks what they did.

  run_cm_program.py [options] --server 'CMD' --client 'CMD'

The rdma_cm programs do not share run_program.py's argument conventions
(rping -s / -c, udaddy -b / -s, ...), so the two command lines are given
whole; in them {addr} is the server's address, {port} and {port2} free
ports, {addr_unused} a loopback address no uroce process has.  The
helpers (capture, namespaces, process bounds) are run_program.py's.

The server starts first; the client starts once the server is ready: its
process has a UDP socket (uroce opened its device; it listens right after),
or, with --ready tcp, something listens on TCP {port} (qperf's control
connection).  Every process is bounded in time (--timeout).

Checks:
  exit statuses   --client-exit zero|nonzero|any, --server-exit likewise;
                  --server-forever: the server serves forever (qperf) and
                  must still be alive when the client is done.
  time            --client-within S: the client must be gone S seconds after
                  it started (or after --kill-server-after's kill).
  vanishing peer  --kill-server-after S / --kill-client-after S: kill -9 one
                  side S seconds after the client started; the other must
                  then end by itself within --client-within /
                  --server-within seconds.
  output          --expect REGEX (client), --expect-server REGEX,
                  --reject REGEX (any output).
  data            --rping-data COUNT:SIZE: rping -v printed COUNT pings on
                  each side (the server's RDMA READ, the client's RDMA
                  WRITE result), each byte as rping's generator makes it.
  wire            when tshark may capture on lo (or the client's veth): every
                  frame decodes as RoCEv2 with a valid ICRC (roce_check.py);
                  --cm-messages A,B,...: the CM MADs tshark decodes are these
                  (in this order; names as tshark shows them, e.g.
                  ConnectRequest), with consistent communication IDs and the
                  IP CM service ID of {port} (--cm-port-check);
                  --cm-at-least NAME=N,...: at least N of each;
                  --ud-qkey Q: every UD data packet (not QP1's) carries
                  Q_Key Q (RDMA_PS_UDP's is 0x01234567).
  --no-server     only the client runs (a connect to where nothing listens).
  --netns         server and client in two namespaces joined by a veth
                  (run_program.py's Netns; exit 77 if unavailable).

Exit 77 (skipped) if a program is not installed (--package names its
Debian package), 0 if every check passed, 1 otherwise."""
import argparse
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "compat"))
import run_program as rp  # noqa: E402


def has_udp_socket(pid):
    """True if process `pid` holds a UDP socket (in its namespace)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                inodes.add(t[8:-1])
    except OSError:
        return False
    for name in ("udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                next(f)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[9] in inodes:
                        return True
        except OSError:
            pass
    return False


def tcp_listening(port, pid):
    try:
        return rp.listening(port, pid)  # in the namespace of `pid`
    except TypeError:
        return rp.listening(port)


def rping_expected(ping, size):
    """The string rping's client puts in its buffer for ping number `ping`
    (up to the NUL it writes at size - 1)."""
    head = f"rdma-ping-{ping}: "
    n = size - 1 - len(head)
    if n <= 0:
        return head[:size - 1]
    alphabet = "".join(chr(c) for c in range(65, 123))  # 'A'..'z', 58 characters
    first = ping % len(alphabet)  # the first character moves on by one each ping
    reps = (first + n) // len(alphabet) + 1
    return head + (alphabet * reps)[first:first + n]


def check_rping(text, prefix, count, size, who):
    lines = [l for l in text.split("\n") if l.startswith(prefix)]
    problems = []
    if len(lines) != count:
        problems.append(f"{who}: {len(lines)} lines of {prefix!r}, not {count}")
    for i, line in enumerate(lines[:count]):
        got = line[len(prefix):]
        want = rping_expected(i, size)
        if got != want:
            at = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            problems.append(f"{who}: ping {i}: byte {at} differs (got {got[at:at + 20]!r}, "
                            f"want {want[at:at + 20]!r}; lengths {len(got)}/{len(want)})")
            if len(problems) > 5:
                break
    if not problems:
        print(f"data: {who}: {count} pings of {size} bytes, every byte as rping made it")
    return problems


# tshark's names of the CM attributes (Info column "CM: <name>").
CM_FIELDS = ["frame.number", "infiniband.mad.attributeid", "_ws.col.Info",
             "infiniband.cm.req.serviceid.dport", "infiniband.cm.req.ip_cm.sip4", "infiniband.cm.req.ip_cm.dip4",
             "infiniband.cm.req.ip_cm.sport", "infiniband.cm.rep.remotecommid",
             "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
             "infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid",
             "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
             "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"]


def cm_rows(pcap):
    cmd = ["tshark", "-n", "-r", pcap, "-Y", "infiniband.mad", "-T", "fields", "-E", "occurrence=f"]
    for f in CM_FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        r = dict(zip(CM_FIELDS, line.split("\t")))
        m = re.search(r"CM: (\w+)", r.get("_ws.col.Info", ""))
        r["name"] = m.group(1) if m else "?" + r.get("infiniband.mad.attributeid", "")
        rows.append(r)
    return rows


def check_cm(pcap, want, port, server_addr, at_least):
    """The CM MADs of the capture, as tshark decodes them."""
    rows = cm_rows(pcap)
    names = [r["name"] for r in rows]
    print("cm: tshark decodes", " ".join(names) if names else "no CM MAD")
    # The CM's keep-alive probes (Get / GetResp ClassPortInfo) of connections
    # to other hosts may come in between: not part of the sequence.
    names = [n for n in names if n != "ClassPortInfo"]
    problems = []
    # Retransmissions may repeat a message: compare without repeats.
    dedup = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    if want and dedup != want:
        problems.append(f"CM messages {dedup}, not {want}")
    for name, n in at_least.items():
        if names.count(name) < n:
            problems.append(f"{names.count(name)} {name}, fewer than {n}")
    by = {}
    for r in rows:
        by.setdefault(r["name"], r)
    if "ConnectRequest" in by:
        req = by["ConnectRequest"]
        if port is not None and req["infiniband.cm.req.serviceid.dport"] not in (str(port), hex(port)):
            problems.append(f"REQ service ID port {req['infiniband.cm.req.serviceid.dport']}, not {port}")
        if server_addr and ":" not in server_addr and req["infiniband.cm.req.ip_cm.dip4"] != server_addr:
            problems.append(f"REQ IP CM destination {req['infiniband.cm.req.ip_cm.dip4']}, not {server_addr}")
    if "ConnectReply" in by and "ReadyToUse" in by:
        if by["ReadyToUse"]["infiniband.cm.rtu.localcommid"] != by["ConnectReply"]["infiniband.cm.rep.remotecommid"]:
            problems.append("the RTU's local comm ID is not the one the REP answered")
    if "DisconnectRequest" in by and "DisconnectReply" in by:
        dq, dp = by["DisconnectRequest"], by["DisconnectReply"]
        if (dp["infiniband.cm.drsp.remotecommid"] != dq["infiniband.cm.dreq.localcommid"] or
                dp["infiniband.cm.drsp.localcommid"] != dq["infiniband.cm.dreq.remotecommid"]):
            problems.append("the DREP's comm IDs do not answer the DREQ's")
    if "ConnectReject" in by and by["ConnectReject"]["infiniband.cm.rej.remotecommid"] in ("", "0", "0x00000000"):
        problems.append("the REJ names no comm ID of the requester")
    return problems


def check_ud_qkey(pcap, want):
    """Every UD packet between QPs other than QP1 carries Q_Key `want`."""
    out = subprocess.run(["tshark", "-n", "-r", pcap, "-Y", "infiniband.deth", "-T", "fields",
                          "-e", "infiniband.bth.destqp", "-e", "infiniband.deth.srcqp", "-e", "infiniband.deth.q_key"],
                         capture_output=True, text=True, check=True).stdout
    seen, problems = 0, []
    for line in out.splitlines():
        dqp, sqp, qkey = line.split("\t")
        if int(dqp, 16) == 1 or int(sqp, 16) == 1:
            continue  # a MAD (QP1's Q_Key is 0x80010000)
        seen += 1
        if int(qkey, 16) != want:
            problems.append(f"UD packet from QP {sqp} to QP {dqp} with Q_Key {qkey}, not {want:#x}")
    if not seen:
        problems.append("no UD data packet in the capture")
    else:
        print(f"qkey: {seen} UD data packets, each with Q_Key {want:#010x}")
    return problems[:5]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--package", default="?")
    ap.add_argument("--addr", default="127.0.0.1")
    ap.add_argument("--netns", action="store_true")
    ap.add_argument("--server")
    ap.add_argument("--client", required=True)
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--ready", choices=["udp", "tcp"], default="udp")
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--client-exit", choices=["zero", "nonzero", "any"], default="zero")
    ap.add_argument("--server-exit", choices=["zero", "nonzero", "any"], default="zero")
    ap.add_argument("--server-forever", action="store_true")
    ap.add_argument("--client-within", type=float)
    ap.add_argument("--server-within", type=float)
    ap.add_argument("--kill-server-after", type=float)
    ap.add_argument("--kill-client-after", type=float)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("--expect-server", action="append", default=[])
    ap.add_argument("--reject", action="append", default=[])
    ap.add_argument("--rping-data")
    ap.add_argument("--cm-messages")
    ap.add_argument("--cm-port-check", action="store_true")
    ap.add_argument("--cm-at-least")
    ap.add_argument("--min-frames", type=int, default=1)
    ap.add_argument("--ud-qkey", type=lambda x: int(x, 0))
    a = ap.parse_args()
    if not a.no_server and not a.server:
        ap.error("--server is required (or --no-server)")

    progs = [shlex.split(a.client)[0]] + ([] if a.no_server else [shlex.split(a.server)[0]])
    for p in progs:
        if not shutil.which(p):
            print(f"{p} is not installed (Debian package {a.package}): skipped")
            return 77
    if (a.cm_messages or a.cm_at_least) and not shutil.which("tshark"):
        print("tshark is not installed: the CM decode cannot be checked: skipped")
        return 77
    if a.netns and not hasattr(rp, "Netns"):
        print("run_program.py has no --netns support here: skipped")
        return 77

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, rp.on_signal if hasattr(rp, "on_signal") else signal.default_int_handler)
    # A sanitizer runtime preloaded for the programs (sanitizer builds) is
    # theirs only: tshark, ip and the checkers run without it.
    # (UROCE_SAN_PRELOAD: the CMake files pass it so, never as LD_PRELOAD,
    # which would go into this interpreter too.)
    global PRELOAD
    if PRELOAD is None:  # (taken out of the environment once: a second run needs it too)
        PRELOAD = os.environ.pop("UROCE_SAN_PRELOAD", None) or os.environ.pop("LD_PRELOAD", None) or ""
    preload = PRELOAD
    work = tempfile.mkdtemp(prefix="uroce-rdmacm-")
    procs = []
    netns = None
    capture = None
    ok = True
    try:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = a.lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env["UROCE_ADDR"] = a.addr
        if preload:
            env["LD_PRELOAD"] = preload
        env.setdefault("UROCE_REGISTRY", os.path.join(work, "registry"))
        server_env = client_env = env
        server_prefix = client_prefix = []
        server_addr = a.addr
        if a.netns:
            subnet = f"10.{random.randint(128, 254)}.{random.randint(0, 255)}"
            netns = rp.Netns(subnet, 9000)
            if not netns.create():
                return 77
            server_prefix, client_prefix = netns.exec_prefix(0), netns.exec_prefix(1)
            server_addr = netns.addrs[0]
            server_env = dict(env, UROCE_ADDR=netns.addrs[0], UROCE_REGISTRY=os.path.join(work, "registry.s"))
            client_env = dict(env, UROCE_ADDR=netns.addrs[1], UROCE_REGISTRY=os.path.join(work, "registry.c"))
            capture = rp.Capture(netns.addrs[1], work, netns.iface, netns.exec_prefix(1))
        else:
            capture = rp.Capture(a.addr, work)
        if capture.proc:
            server_env = dict(server_env, UROCE_GSO="0")  # one frame per packet, as the frame check wants
            client_env = dict(client_env, UROCE_GSO="0")
            if not netns:
                server_env, client_env = capture.trace_shm(work, server_env, client_env)

        port = rp.free_port()
        port2 = rp.free_port()
        while port2 == port:
            port2 = rp.free_port()
        # An address of loopback that no uroce process has (127.0.254.<n> for
        # 127.<x>.<y>.<n>).
        unused = "127.0.254." + server_addr.rsplit(".", 1)[1] if server_addr.startswith("127.") else "192.0.2.1"
        subst = {"addr": server_addr, "port": str(port), "port2": str(port2), "addr_unused": unused}
        logs = {}

        def start(prefix, cmd, e, name):
            # stdout and stderr apart: a program's stdout (to a file: fully
            # buffered) and its stderr would otherwise interleave mid-line.
            logs[name] = os.path.join(work, name + ".log")
            logs[name + " stderr"] = os.path.join(work, name + ".err")
            argv = prefix + [w.format(**subst) for w in shlex.split(cmd)]
            print("$", " ".join(argv))
            p = subprocess.Popen(argv, env=e, stdout=open(logs[name], "w"), stderr=open(logs[name + " stderr"], "w"),
                                 start_new_session=True)
            procs.append(p)
            return p

        def expect_exit(name, rc, want):
            if want == "zero" and rc != 0 or want == "nonzero" and rc in (0, 124):
                print(f"{name}: exit status {rc} (wanted {want})")
                return False
            return True

        server = None
        if not a.no_server:
            server = start(server_prefix, a.server, server_env, "server")
            deadline = time.time() + 20
            ready = (lambda: tcp_listening(port, server.pid)) if a.ready == "tcp" else (lambda: has_udp_socket(server.pid))
            while not ready() and server.poll() is None and time.time() < deadline:
                time.sleep(0.02)
            if server.poll() is not None or not ready():
                print("server: not ready after 20 s (or it ended)")
                ok = False
            time.sleep(0.3)  # from its device open to its rdma_listen
        t0 = time.time()
        client = start(client_prefix, a.client, client_env, "client")
        killed_at = None
        if a.kill_server_after is not None or a.kill_client_after is not None:
            victim, delay = (server, a.kill_server_after) if a.kill_server_after is not None else (client, a.kill_client_after)
            time.sleep(delay)
            if victim.poll() is not None:
                print(f"the process to kill ended before {delay} s (status {victim.returncode})")
                ok = False
            else:
                os.kill(victim.pid, signal.SIGKILL)
                killed_at = time.time()
                print(f"killed {'server' if victim is server else 'client'} (kill -9) {killed_at - t0:.2f} s after the client started")
        survivor_bound = a.client_within if a.kill_client_after is None else None
        crc = rp.finish(client, a.timeout, "client")
        t_client = time.time()
        print(f"client: ended {t_client - t0:.2f} s after it started" +
              (f", {t_client - killed_at:.2f} s after the kill" if killed_at and a.kill_server_after is not None else ""))
        if survivor_bound is not None:
            since = killed_at if killed_at and a.kill_server_after is not None else t0
            if t_client - since > survivor_bound:
                print(f"client: took {t_client - since:.2f} s, more than {survivor_bound} s")
                ok = False
        if a.kill_client_after is None:
            ok &= expect_exit("client", crc, a.client_exit)
        if server is not None:
            if a.server_forever:
                if server.poll() is not None:
                    print(f"server died (status {server.returncode})")
                    ok = False
                else:
                    os.killpg(server.pid, signal.SIGTERM)
                    rp.finish(server, 10, "server")
            elif a.kill_server_after is None:
                src = rp.finish(server, a.timeout, "server")
                t_server = time.time()
                if a.kill_client_after is not None and killed_at:
                    print(f"server: ended {t_server - killed_at:.2f} s after the kill")
                    if a.server_within is not None and t_server - killed_at > a.server_within:
                        print(f"server: took more than {a.server_within} s")
                        ok = False
                ok &= expect_exit("server", src, a.server_exit)
            else:
                server.wait()

        outputs = {n: open(f, errors="replace").read() for n, f in logs.items()}
        both = {n: outputs[n] + "\n" + outputs[n + " stderr"] for n in ("client", "server") if n in outputs}
        for pattern in a.expect:
            if not re.search(pattern, both["client"], re.M):
                print(f"client output does not match {pattern!r}")
                ok = False
        for pattern in a.expect_server:
            if not re.search(pattern, both.get("server", ""), re.M):
                print(f"server output does not match {pattern!r}")
                ok = False
        ok &= not rp.rejected(a.reject, outputs)
        if a.rping_data:
            count, size = (int(x) for x in a.rping_data.split(":"))
            problems = check_rping(outputs["client"], "ping data: ", count, size, "client")
            problems += check_rping(outputs.get("server", ""), "server ping data: ", count, size, "server")
            for p in problems:
                print("data:", p)
            ok &= not problems
        global CALIBRATION_FAILED
        CALIBRATION_FAILED = any(m in t for t in outputs.values() for m in CALIBRATION_MESSAGES)
        for n, text in outputs.items():
            if text:
                print(f"----- {n}" + ("" if len(text) < 3000 else " (tail)"))
                print(text[-3000:].rstrip())
        if capture.proc:
            ok &= capture.check(a.min_frames)
            if a.cm_messages or a.cm_at_least:
                at_least = {k: int(v) for k, v in (x.split("=") for x in a.cm_at_least.split(","))} \
                    if a.cm_at_least else {}
                # CM MADs (QP1) always go through the kernel, shared memory or
                # not: the capture holds each once, whatever each process lived
                # to receive.
                problems = check_cm(capture.pcap, a.cm_messages.split(",") if a.cm_messages else [],
                                    port if a.cm_port_check else None, server_addr, at_least)
                for p in problems:
                    print("cm: FAIL", p)
                ok &= not problems
            if a.ud_qkey is not None:
                problems = check_ud_qkey(capture.frames, a.ud_qkey)
                for p in problems:
                    print("qkey: FAIL", p)
                ok &= not problems
        elif a.cm_messages or a.cm_at_least or a.ud_qkey is not None:
            print("tshark cannot capture here: the wire is not checked")
            return 77
    finally:
        rp.clean_up(procs, capture, netns, work)
    print("RESULT:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


# perftest calibrates its cycle counter against the clock before its report
# and gives up, or reports "inf", when a busy machine spoils the fit
# ("Correlation coefficient r^2: ... < 0.9"): a fault of the measurement, not
# of the run, so such a run is made once more (as run_program.py does).
CALIBRATION_MESSAGES = ("Correlation coefficient r^2", "Can't produce a report")
CALIBRATION_FAILED = False
PRELOAD = None

if __name__ == "__main__":
    rc = main()
    if rc == 1 and CALIBRATION_FAILED:
        print("perftest could not calibrate its clock (a busy machine): running once more")
        rc = main()
    sys.exit(rc)
