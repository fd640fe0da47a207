"""A loaded host, for bench/run (and on its own: `python3 bench/loaded.py`
writes bench/results/loaded.md from the tool already built): four CPU-bound processes beside both ends,
all on the machine's CPUs and nothing pinned (a shared CI runner, a laptop
building something).  Each figure beside kernel TCP or UDP under the same
load (bandwidth: medians of three runs; round trips: one run of 2 s):

  iperf3 1 MiB writes                against  uroce perf RC WRITE 1 MiB (passive
                                              server; busy and wait-for-notify
                                              client; busy over shared memory),
                                              qperf rc_rdma_write_bw
  raw UDP ping-pong 8 B, blocking    against  uroce perf RC SEND 8 B RTT,
                                              wait-for-notify (median and p99),
                                              over UDP and shared memory
"""

import contextlib
import json
import os
import re
import shutil
import time

HOGS = 4
MiB = 1 << 20


@contextlib.contextmanager
def _hogs(background, n):
    """n CPU-bound processes for the block (each ends by itself after 300 s)."""
    with contextlib.ExitStack() as stack:
        for _ in range(n):
            stack.enter_context(background(["timeout", "300", "sh", "-c", "while :; do :; done"]))
        time.sleep(0.5)
        yield


def _median(runs, key):
    runs = [r for r in runs if key(r) is not None]
    if not runs:
        raise RuntimeError("no run gave a figure")
    runs.sort(key=key)
    best = dict(runs[len(runs) // 2])
    best["repeats"] = [key(r) for r in runs]
    return best


def measure(suite, run, background, free_port, quick):
    res = {"hogs": HOGS}
    n = 1 if quick else 3
    dur = "1" if quick else "2"

    def attempt(name, fn):  # a step that fails is a row with its error
        try:
            res[name] = fn()
        except (RuntimeError, ValueError, KeyError, OSError) as e:
            res[name] = {"error": f"{type(e).__name__}: {e}"[-300:]}

    def runs(fn):  # n runs; one that fails leaves the others
        got, err = [], None
        for _ in range(n):
            try:
                got.append(fn())
            except RuntimeError as e:
                err = e
        if not got:
            raise err or RuntimeError("no run")
        return got

    def iperf3():
        port = free_port()
        with background(["iperf3", "-s", "-1", "-p", str(port)]):
            for _ in range(20):  # the server may be slow to start on a loaded host
                time.sleep(0.25)
                out = run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-l", str(MiB), "-t", dur, "-J"], 60,
                          check=False)
                try:
                    return {"bytes_per_s": json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8}
                except (ValueError, KeyError, TypeError):
                    pass
        raise RuntimeError(f"iperf3: no figure in {out[-300:]}")

    shm_env = {"UROCE_SHM": "1"}  # (run() adds it to the environment)

    def perf(*opts, env=None):
        return suite.perf(*opts, "--duration", dur, cpus="none", env=env)["results"][0]

    def qperf():
        port = free_port()
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(suite.args.build_dir, "lib"))
        with background(["qperf", "-lp", str(port)], env=env):
            time.sleep(0.5)
            out = run(["qperf", "127.0.0.1", "-lp", str(port), "-t", dur, "-m", str(MiB), "rc_rdma_write_bw"], 60,
                      env={"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"]})
        m = re.search(r"bw\s*=\s*([\d.,]+)\s*(bytes|KB|MB|GB)/sec", out)
        if not m:
            raise RuntimeError(f"qperf: no figure in {out[-300:]}")
        unit = {"bytes": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m.group(2)]
        return {"bytes_per_s": float(m.group(1).replace(",", "")) * unit}

    def udp_blocking():
        return run([suite.uroce, "baseline", "udp-pingpong", "--wait", "blocking", "--size", "8", "--cpus", "none",
                    "--duration", dur, "--json"], 60)

    bw = lambda r: r.get("bytes_per_s")  # noqa: E731
    with _hogs(background, HOGS):
        attempt("tcp", lambda: _median(runs(iperf3), bw))
        attempt("write_busy", lambda: _median(
            runs(lambda: perf("--op", "write", "--test", "bw", "--size", "1M", "--server", "sleep")), bw))
        attempt("write_notify", lambda: _median(
            runs(lambda: perf("--op", "write", "--test", "bw", "--size", "1M", "--server", "sleep", "--wait",
                              "notify")), bw))
        attempt("write_busy_shm", lambda: _median(
            runs(lambda: perf("--op", "write", "--test", "bw", "--size", "1M", "--server", "sleep", env=shm_env)), bw))
        if shutil.which("qperf"):
            attempt("qperf_write", lambda: _median(runs(qperf), bw))
        attempt("udp_blocking", lambda: json.loads(udp_blocking())["rtt_us"])
        attempt("send_notify", lambda: perf("--op", "send", "--test", "lat", "--size", "8", "--wait",
                                            "notify")["rtt_us"])
        attempt("send_notify_shm", lambda: perf("--op", "send", "--test", "lat", "--size", "8", "--wait",
                                                "notify", env=shm_env)["rtt_us"])
    return res


def add_rows(row, ld):
    """Rows: each figure under load against the kernel's under the same load
    (no target: the issue sets none; see README)."""
    for k, v in ld.items():
        if isinstance(v, dict) and "error" in v:
            row(f"loaded host, {k}: FAILED", None, "us", v["error"][-120:].replace("|", "/"), None)
    note = f"{ld['hogs']} CPU-bound processes beside both ends, unpinned"
    tcp = ld.get("tcp", {}).get("bytes_per_s")
    for k, what in (("write_busy", "uroce perf RC WRITE 1 MiB, busy client, passive server"),
                    ("write_notify", "uroce perf RC WRITE 1 MiB, wait-for-notify client, passive server"),
                    ("write_busy_shm", "uroce perf RC WRITE 1 MiB, busy client, passive server, shared memory"),
                    ("qperf_write", "qperf rc_rdma_write_bw 1 MiB")):
        v = ld.get(k, {})
        if "bytes_per_s" in v:
            row(f"loaded host: {what}", v["bytes_per_s"], "B/s", "loaded host: TCP stream, 1 MiB writes (iperf3)",
                tcp, better="higher", note=note)
    udp = ld.get("udp_blocking", {})
    for k, path in (("send_notify", ""), ("send_notify_shm", ", shared memory")):
        ours = ld.get(k, {})
        for q in ("median", "p99"):
            if q in udp and q in ours:
                row(f"loaded host: uroce perf RC SEND 8 B RTT {q}, wait-for-notify{path}", ours[q], "us",
                    f"loaded host: raw UDP ping-pong 8 B, blocking, {q}", udp[q], note=note)


def main():
    """Measures with the tool already built in ./build and writes
    bench/results/loaded.md (bench/run's helpers, loaded as a module)."""
    import argparse
    import datetime
    import importlib.machinery
    import importlib.util
    import signal
    import subprocess

    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default=os.path.join(here, "..", "build"))
    ap.add_argument("--out", default=os.path.join(here, "results", "loaded.md"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    missing = [t for t in ("iperf3", "timeout") if not shutil.which(t)]
    if missing:
        raise SystemExit(f"bench/loaded.py: missing {', '.join(missing)} (apt-get install iperf3)")
    loader = importlib.machinery.SourceFileLoader("bench_run", os.path.join(here, "run"))
    spec = importlib.util.spec_from_loader("bench_run", loader)
    br = importlib.util.module_from_spec(spec)
    loader.exec_module(br)
    args = argparse.Namespace(build_dir=os.path.abspath(a.build_dir), cpus=(0, 1), repeats=1, quick=a.quick)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # the hogs and servers go too
        signal.signal(sig, br._on_signal)
    os.environ["UROCE_SHM"] = "0"  # UDP unless a row asks for shared memory (as bench/run)
    load_before = br.loadavg()
    res = measure(br.Suite(args), br.run, br.Background, br.free_port, a.quick)
    rows = []
    add_rows(lambda what, value, unit, base_name, base, target=None, better="lower", note="": rows.append(
        (what, br.value_str(value, unit), base_name, br.value_str(base, unit), br.ratio(value, base), note)), res)
    git = subprocess.run(["git", "-C", here, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout
    L = [f"# uroce on a loaded host ({datetime.datetime.now():%Y-%m-%d %H:%M}, git {git.strip()})", "",
         f"`python3 bench/loaded.py` (also a phase of bench/run). {HOGS} CPU-bound processes (`sh -c 'while :; do :; "
         f"done'`) beside both ends on the machine's {os.cpu_count()} CPUs, nothing pinned; load average before "
         f"{load_before}. Bandwidth: medians of {1 if a.quick else 3} runs of {1 if a.quick else 2} s; round "
         f"trips: one run.", "",
         "| uroce | figure | baseline | figure | ratio |", "|---|---:|---|---:|---:|"]
    for what, v, base_name, b, r, _ in rows:
        L.append(f"| {what} | {v} | {base_name} | {b} | {'' if r is None else f'{r:.2f}x'} |")
    L += ["", "```json", json.dumps(res, indent=1, default=str), "```", ""]
    with open(a.out, "w") as f:
        f.write("\n".join(L))
    print("\n".join(L[:12 + len(rows)]))


if __name__ == "__main__":
    main()
