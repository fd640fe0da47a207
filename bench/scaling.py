"""QP-count scaling and registration cost (seed 004), for bench/run.

  uroce scale    time and resident memory per RC QP (1,024 and 10,000 QPs on
                 each of two devices of one process: created, connected, used
                 once) and per one-page MR; registration time by region size
  cmtime         rdma_cm connection setup, 1,000 and 10,000 connections
                 (rdmacm-utils, unmodified, through uroce exec), us per
                 connection and step
  uroce perf     aggregate WRITE 64 KiB bandwidth over 1,024 QPs against one
                 QP, each with a window of 4
"""

import json
import re
import shutil
import time

CMTIME_STEPS = ("create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy")


def _cmtime(suite, run, background, conns):
    """cmtime -c conns, server and client through uroce exec on loopback: us
    per connection of each step (cmtime's last column)."""
    port = 7000 + (int(time.time() * 1000) % 2000)
    server = [suite.uroce, "exec", "--addr", "127.0.0.2", "--", "cmtime", "-b", "127.0.0.2", "-p", str(port),
              "-c", str(conns)]
    with background(server):
        time.sleep(1.0)
        out = run([suite.uroce, "exec", "--addr", "127.0.0.1", "--", "cmtime", "-s", "127.0.0.2", "-p", str(port),
                   "-c", str(conns)], 180)
    steps = {}
    for line in out.splitlines():
        m = re.match(r"^(create id|resolve addr|resolve route|create qp|connect|disconnect|destroy)\s*:\s*(.*)$", line)
        if m:
            f = m.group(2).split()
            try:
                steps[m.group(1)] = float(f[-1])
            except (ValueError, IndexError):
                pass
    if "connect" not in steps:
        raise RuntimeError(f"cmtime -c {conns}: no figures in its output: {out[-300:]}")
    return {"conns": conns, "us_per_conn": steps}


def measure(suite, run, background, quick):
    res = {}

    def attempt(name, fn):  # a step that fails is a row with its error
        try:
            res[name] = fn()
        except RuntimeError as e:
            res[name] = {"error": str(e)[-300:]}

    def scale(qps, mrs):
        return json.loads(run([suite.uroce, "scale", "--qps", str(qps), "--mrs", str(mrs), "--json"], 300))

    attempt("scale_1k", lambda: scale(1024, 10000))
    if not quick:
        attempt("scale_10k", lambda: scale(10000, 0))
    if shutil.which("cmtime"):
        for conns in (1000,) if quick else (1000, 10000):
            attempt(f"cmtime_{conns}", lambda c=conns: _cmtime(suite, run, background, c))
    dur = "0.5" if quick else "2"
    attempt("bw_1qp", lambda: suite.perf("--op", "write", "--test", "bw", "--size", "64K", "--window", "4",
                                         "--duration", dur)["results"][0])
    attempt("bw_1024qp", lambda: suite.perf("--op", "write", "--test", "bw", "--size", "64K", "--window", "4",
                                            "--qps", "1024", "--duration", dur)["results"][0])
    return res


def add_rows(row, sc):
    """Rows: memory and time per QP and MR, cmtime's steps, the 1,024-QP
    aggregate against one QP (target 0.8x)."""
    for k, v in sc.items():
        if "error" in v:
            row(f"{k}: FAILED", None, "us", v["error"][-120:].replace("|", "/"), None)
    for k in ("scale_1k", "scale_10k"):
        v = sc.get(k, {})
        if "qps" not in v or not v.get("ok"):
            continue
        q = v["qps"]
        n = f"{q['n']:,} RC QPs per device ({q['send_wr']}/{q['recv_wr']} WRs)"
        row(f"resident memory per QP, {n}", q["bytes_per_qp"] / 1024, "KiB", "-", None, note="uroce scale")
        row(f"create + connect (RESET -> RTS) per QP, {n}", q["create_us"] + q["connect_us"], "us", "-", None,
            note="uroce scale")
        if v["mrs"]["n"]:
            m = v["mrs"]
            row(f"ibv_reg_mr of one page, {m['n']:,} MRs", m["reg_us"], "us", "-", None,
                note=f"{m['bytes_per_mr']:.0f} B resident per MR")
            for s in m["reg_us_by_size"]:
                row(f"ibv_reg_mr of {s['size'] // 1024:,} KiB (untouched)", s["us"], "us", "-", None)
    for k in sorted(x for x in sc if x.startswith("cmtime_")):
        v = sc[k]
        if "us_per_conn" not in v:
            continue
        for step in ("resolve addr", "connect", "destroy"):
            if step in v["us_per_conn"]:
                row(f"cmtime {v['conns']:,} connections: {step}, per connection", v["us_per_conn"][step], "us", "-",
                    None, note="rdmacm-utils cmtime through uroce exec")
    one, many = sc.get("bw_1qp", {}), sc.get("bw_1024qp", {})
    if "bytes_per_s" in one and "bytes_per_s" in many:
        row("RC WRITE 64 KiB aggregate bandwidth, 1,024 QPs (window 4 each)", many["bytes_per_s"], "B/s",
            "the same over one QP", one["bytes_per_s"], 0.8, better="higher",
            note=f"Jain's index over the QPs {many.get('jain', float('nan')):.3f}")
