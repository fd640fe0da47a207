"""Third-party RDMA tools unmodified on uroce's libibverbs.so.1, for bench/run.

perftest (ib_{send,write,read}_{lat,bw}) and qperf (rc_lat, rc_bw,
rc_rdma_write_bw, rc_rdma_read_bw), each server and client on loopback, run
pinned (server on one CPU, client on the other, as bench/run pins its own
tools) and unpinned (as users run them), with qperf's tcp_lat and tcp_bw
as the kernel's figures from the same tool.  Figures are normalised: round
trips in us, bandwidth in bytes/s.  Each tool, like each uroce perf figure
set against it, runs --repeats times (3) and the run with the median figure
is kept, all of them in its "repeats".

A bandwidth row's uroce perf figure is measured in turns with the tool: one
uroce perf run, then one run of the tool, --repeats times.  This VM's
throughput drifts by 2x from one minute to the next for everything on it
(iperf3 over loopback, pinned, 1.3-2.6 GB/s in one series of eight), so a
ratio of two medians taken minutes apart said more about the minute than
about the tool: ib_send_bw at 0.43x of a uroce perf figure measured 20
minutes earlier came out at 0.8-1.2x run in turns with it.
"""

import os
import re
import time

KiB = 1024
MiB = 1024 * 1024

# perftest reports half a round trip for SEND and WRITE (a ping-pong) and the
# operation's own round trip for READ.
PERFTEST_LAT = {"ib_send_lat": ("send", 2), "ib_write_lat": ("write", 2), "ib_read_lat": ("read", 1)}
PERFTEST_BW = {"ib_send_bw": "send", "ib_write_bw": "write", "ib_read_bw": "read"}
# qperf reports one-way latency (half a round trip) and decimal units.
QPERF_BW = {"rc_bw": "send", "rc_rdma_write_bw": "write", "rc_rdma_read_bw": "read", "tcp_bw": "tcp"}
_UNITS = {"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
_TIME = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "sec": 1e6, "s": 1e6}


class Tools:
    """Runs the tools; `suite` gives run(), Background, free_port() and CPUs."""

    def __init__(self, suite, run, background, free_port):
        self.s = suite
        self.run = run
        self.Background = background
        self.free_port = free_port
        self.env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(suite.args.build_dir, "lib"))

    def _pin(self, pinned, cpu):
        return ["taskset", "-c", str(cpu)] if pinned else []

    def _pair(self, server_cmd, client_cmd, pinned, timeout, settle=0.5):
        """Runs server then client (each pinned to its CPU if `pinned`); returns
        the client's output."""
        with self.Background(self._pin(pinned, self.s.c1) + server_cmd, env=self.env):
            time.sleep(settle)
            return self.run(self._pin(pinned, self.s.c0) + client_cmd, timeout, env=self.env)

    # ---- perftest

    def perftest_lat(self, prog, size, iters, pinned):
        port = self.free_port()
        common = [prog, "-d", "uroce0", "-s", str(size), "-n", str(iters), "-p", str(port)]
        out = self._pair(common, common + ["127.0.0.1"], pinned, 120)
        _, factor = PERFTEST_LAT[prog]
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 8 and f[0] == str(size) and f[1] == str(iters):
                return {"tool": prog, "size": size, "iters": iters, "pinned": pinned,
                        "rtt_min_us": factor * float(f[2]), "rtt_typical_us": factor * float(f[4]),
                        "rtt_avg_us": factor * float(f[5]), "rtt_p99_us": factor * float(f[7])}
        raise RuntimeError(f"{prog}: no result line in its output: {out[-500:]}")

    def perftest_bw(self, prog, size, seconds, pinned):
        port = self.free_port()
        common = [prog, "-d", "uroce0", "-s", str(size), "-D", str(seconds), "-p", str(port)]
        out = self._pair(common, common + ["127.0.0.1"], pinned, seconds + 60)
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 5 and f[0] == str(size):
                # BW average, in MiB/s (perftest's MB is 2^20 bytes)
                return {"tool": prog, "size": size, "pinned": pinned, "bytes_per_s": float(f[3]) * MiB,
                        "msgs_per_s": float(f[4]) * 1e6}
        raise RuntimeError(f"{prog}: no result line in its output: {out[-500:]}")

    # ---- qperf

    def qperf(self, test, size, seconds, pinned, extra=()):
        port = self.free_port()
        out = self._pair(["qperf", "-lp", str(port)],
                         ["qperf", "127.0.0.1", "-lp", str(port), "-t", str(seconds), "-m", str(size)] + list(extra) +
                         [test], pinned, seconds + 60)
        r = {"tool": "qperf", "test": test, "size": size, "pinned": pinned, "options": " ".join(extra)}
        # (qperf pads figures and puts commas in thousands: "1,000 MB/sec")
        m = re.search(r"bw\s*=\s*([\d.,]+)\s*(bytes|[KMGT]B)/sec", out)
        if m:
            r["bytes_per_s"] = float(m.group(1).replace(",", "")) * _UNITS[m.group(2)]
            return r
        m = re.search(r"latency\s*=\s*([\d.,]+)\s*(ns|us|ms|sec)", out)
        if m:
            r["rtt_us"] = 2 * float(m.group(1).replace(",", "")) * _TIME[m.group(2)]
            return r
        raise RuntimeError(f"qperf {test}: no figure in its output: {out[-500:]}")


def figure_of(r):
    """What a tool's row reports: bandwidth, or the round trip it shows."""
    for k in ("bytes_per_s", "rtt_typical_us", "rtt_us"):
        if k in r:
            return r[k]
    return 0.0


def measure(suite, run, background, free_port, quick):
    """Every row, pinned and unpinned; with uroce perf's own figure unpinned
    (bench/run measures it pinned)."""
    t = Tools(suite, run, background, free_port)
    iters = 2000 if quick else 10000
    secs = 1 if quick else 2
    res = {"perftest_lat": [], "perftest_bw": [], "qperf": [], "uroce_unpinned": {}}

    def once(fn, *a, **kw):  # a tool that fails is a row with its error, not the end of the run
        try:
            return fn(*a, **kw)
        except RuntimeError as e:
            return {"error": str(e)[-300:], "call": f"{fn.__name__}{a}"}

    def attempt(fn, *a, **kw):
        """The run with the median figure of `suite.repeats`, as bench/run keeps
        for uroce perf: one run of a tool moved by 10-20% from the next on the
        2-vCPU VM, either way, and a row is a ratio of two such figures."""
        return suite.median_of(lambda: once(fn, *a, **kw), figure_of)

    def in_turns(opts, pinned, fn, *a):
        """The tool's median run, as attempt() gives, with the median of the
        uroce perf runs (`opts`) made in turns with it ("partner")."""
        figs, runs = [], []
        for _ in range(suite.repeats):
            try:
                j = suite.perf(*opts, cpus=None if pinned else "none")
                figs.append(j["results"][0]["bytes_per_s"])
            except (RuntimeError, KeyError, IndexError, ValueError):
                pass  # (a row without its partner falls back to bench/run's figure)
            runs.append(once(fn, *a))
        ok = sorted((r for r in runs if "error" not in r), key=figure_of)
        if not ok:
            return runs[0]
        best = ok[len(ok) // 2]
        best["repeats"] = [figure_of(r) for r in ok]
        if figs:
            figs.sort()
            best["partner"] = {"options": " ".join(opts), "bytes_per_s": figs[len(figs) // 2], "repeats": figs}
        return best

    for pinned in (True, False):
        for prog in PERFTEST_LAT:
            res["perftest_lat"].append(attempt(t.perftest_lat, prog, 8, iters, pinned))
        for prog, op in PERFTEST_BW.items():
            for size in (64 * KiB, MiB):
                res["perftest_bw"].append(in_turns(partner_opts(op, size, secs), pinned, t.perftest_bw, prog, size,
                                                   secs, pinned))
        for test in ("rc_bw", "rc_rdma_write_bw", "rc_rdma_read_bw", "tcp_bw"):
            for size in (64 * KiB, MiB):
                if test == "tcp_bw":
                    res["qperf"].append(attempt(t.qperf, test, size, secs, pinned))
                    continue
                # qperf's RC tests set a path MTU of 2048 unless told otherwise
                # (-mt): twice the packets of uroce perf's 4096 for the same
                # message.  Its rows are set against uroce perf at that MTU.
                opts = partner_opts(QPERF_BW[test], size, secs) + ["--mtu", "2048"]
                res["qperf"].append(in_turns(opts, pinned, t.qperf, test, size, secs, pinned))
        res["qperf"].append(attempt(t.qperf, "rc_lat", 8, secs, pinned))
        res["qperf"].append(attempt(t.qperf, "rc_lat", 8, secs, pinned, ["-cp", "1"]))
        res["qperf"].append(attempt(t.qperf, "tcp_lat", 8, secs, pinned))
    dur = "0.2" if quick else "0.6"
    un = res["uroce_unpinned"]
    m = suite.perf_median
    un["lat"] = m("--op", "send,write,read", "--test", "lat", "--size", "8", "--duration", dur, cpus="none")
    un["lat_passive"] = m("--op", "write,read", "--test", "lat", "--size", "8", "--duration", dur, "--server", "sleep",
                          cpus="none")
    un["send8_notify"] = m("--op", "send", "--test", "lat", "--size", "8", "--duration", dur, "--wait", "notify",
                           cpus="none")
    un["bw_passive"] = m("--op", "write", "--test", "bw", "--size", "1M", "--duration", dur, "--window", "64",
                         "--server", "sleep", cpus="none")
    return res


def partner_opts(op, size, secs):
    """uroce perf doing what the tool does: the same operation and size, a
    server that polls for SENDs and one that never polls for WRITE and READ
    (as the tools' servers), for as long."""
    opts = ["--op", op, "--test", "bw", "--size", str(size), "--duration", str(secs), "--window", "64"]
    return opts + (["--server", "sleep"] if op in ("write", "read") else [])


def _size(b):
    return f"{b // MiB} MiB" if b >= MiB else (f"{b // KiB} KiB" if b >= KiB else f"{b} B")


def add_rows(row, tp, u, b, lat_of, bw_of):
    """The table rows of the third-party tools: each against uroce perf doing
    the same operation, size and pinning (the passive server's figures where
    the tool's server does not poll), and the large transfers against kernel
    TCP.  `row` is bench/run's row(what, value, unit, base_name, base, target,
    better, note)."""
    un = tp["uroce_unpinned"]
    for k, v in tp.items():
        for r in v if isinstance(v, list) else []:
            if "error" in r:
                row(f"{r['call']}: FAILED", None, "us", r["error"][-120:].replace("|", "/"), None)
    tp = {k: [r for r in v if "error" not in r] if isinstance(v, list) else v for k, v in tp.items()}

    def ours(pinned):
        # (qperf reports the mean of its round trips, set against ours.)
        notify = u["send8_notify"]["rtt_us"] if pinned else un["send8_notify"]["results"][0]["rtt_us"]
        if pinned:
            return {"lat": u["lat"], "lat_passive": u["lat_passive"], "notify_mean": notify["mean"],
                    "bw": u["bw"], "bw_passive": u["bw_passive"]}
        return {"lat": un["lat"], "lat_passive": un["lat_passive"], "notify_mean": notify["mean"],
                "bw": un.get("bw"), "bw_passive": un["bw_passive"]}

    def partner(r, op, what, fallback):
        """A bandwidth row's uroce perf figure: the runs made in turns with
        the tool, else bench/run's (older results)."""
        if "partner" in r:
            return r["partner"]["bytes_per_s"], f"{what}, run in turns with it"
        return (bw_of(fallback, op, r["size"]) if fallback else None), what

    send_lat = {}
    for r in tp["perftest_lat"]:
        pin = "pinned" if r["pinned"] else "unpinned"
        o = ours(r["pinned"])
        op, _ = PERFTEST_LAT[r["tool"]]
        if r["tool"] == "ib_send_lat":
            send_lat[r["pinned"]] = r["rtt_typical_us"]
            row(f"perftest ib_send_lat 8 B RTT, {pin}", r["rtt_typical_us"], "us",
                f"uroce perf RC SEND 8 B RTT, {pin}", lat_of(o["lat"], "send", 8), 1.2,
                note="typical x 2")
        elif r["tool"] == "ib_write_lat":
            row(f"perftest ib_write_lat 8 B RTT, {pin}", r["rtt_typical_us"], "us", f"ib_send_lat 8 B RTT, {pin}",
                send_lat.get(r["pinned"]), 2.0, note="typical x 2; it spins on memory between CQ polls")
        else:
            row(f"perftest ib_read_lat 8 B RTT, {pin}", r["rtt_typical_us"], "us",
                f"uroce perf RC READ 8 B RTT, passive server, {pin}", lat_of(o["lat_passive"], "read", 8), 1.2,
                note="typical")
    for r in tp["perftest_bw"]:
        pin = "pinned" if r["pinned"] else "unpinned"
        o = ours(r["pinned"])
        op = PERFTEST_BW[r["tool"]]
        src, what = (o["bw"], "") if op == "send" else (o["bw_passive"], ", passive server")
        base, name = partner(r, op, f"uroce perf RC {op.upper()} {_size(r['size'])}{what}, {pin}", src)
        row(f"perftest {r['tool']} {_size(r['size'])}, {pin}", r["bytes_per_s"], "B/s", name, base, 1 / 1.2,
            better="higher")
    tcp = {}
    for r in tp["qperf"]:
        if r["test"] == "tcp_bw":
            tcp[(r["size"], r["pinned"])] = r["bytes_per_s"]
    for r in tp["qperf"]:
        pin = "pinned" if r["pinned"] else "unpinned"
        o = ours(r["pinned"])
        t = r["test"]
        if t == "rc_lat" and r["options"]:
            row(f"qperf rc_lat -cp 1 8 B RTT, {pin}", r["rtt_us"], "us", f"uroce perf RC SEND 8 B RTT, mean, {pin}",
                lat_of(o["lat"], "send", 8, "mean"), 1.2, note="one-way x 2, a mean; polls its CQ")
        elif t == "rc_lat":
            row(f"qperf rc_lat 8 B RTT, {pin}", r["rtt_us"], "us",
                f"uroce perf RC SEND 8 B RTT, wait-for-notify, mean, {pin}", o["notify_mean"], 1.2,
                note="one-way x 2, a mean; waits on a completion channel")
        elif t == "tcp_lat":
            row(f"qperf tcp_lat 8 B RTT, {pin}", r["rtt_us"], "us", "sockperf TCP ping-pong 14 B, blocking, pinned",
                b["tcp_pingpong_blocking"]["median"], note="the kernel through qperf (blocking sockets)")
        elif t != "tcp_bw":
            op = QPERF_BW[t]
            src, what = (o["bw"], "") if op == "send" else (o["bw_passive"], ", passive server")
            paired = "partner" in r
            base, name = partner(r, op, f"uroce perf RC {op.upper()} {_size(r['size'])}{what}"
                                 f"{', MTU 2048' if paired else ''}, {pin}", src)
            row(f"qperf {t} {_size(r['size'])}, {pin}", r["bytes_per_s"], "B/s", name, base, 1 / 1.2,
                better="higher", note="qperf's path MTU, 2048, on both sides" if paired else "")
    # Large transfers against the kernel's TCP, measured by the same tool.
    for r in tp["perftest_bw"] + [q for q in tp["qperf"] if q["test"] in ("rc_bw", "rc_rdma_write_bw")]:
        if r["size"] != MiB or r.get("tool") in ("ib_read_bw", "ib_send_bw"):
            continue
        pin = "pinned" if r["pinned"] else "unpinned"
        name = r["tool"] if r["tool"] != "qperf" else f"qperf {r['test']}"
        row(f"{name} 1 MiB, {pin}", r["bytes_per_s"], "B/s", f"qperf tcp_bw 1 MiB, {pin}",
            tcp.get((MiB, r["pinned"])), 1.0, better="higher", note="against kernel TCP")
    for pinned in (True, False):
        pin = "pinned" if pinned else "unpinned"
        row(f"uroce perf RC WRITE 1 MiB, passive server, {pin}", bw_of(ours(pinned)["bw_passive"], "write", MiB),
            "B/s", f"qperf tcp_bw 1 MiB, {pin}", tcp.get((MiB, pinned)), 1.0, better="higher",
            note="against kernel TCP")
