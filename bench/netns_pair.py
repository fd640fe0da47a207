"""Two network namespaces joined by a veth pair, for the benchmarks that need
a real kernel path with loss or marking (bench/lossy, bench/ecn).  Root only;
cleanup() removes everything (call it from finally and on signals)."""
import os
import signal
import subprocess
import sys
import time

NS = []


def sh(*cmd, check=True):
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def cleanup():
    for ns in NS:
        sh("ip", "netns", "del", ns, check=False)
    NS.clear()


def on_signals():
    def handler(signum, _frame):
        cleanup()
        sys.exit(128 + signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, handler)


def setup(tag, subnet, mtu=9000):
    """Namespaces <tag>-s (subnet.1) and <tag>-c (subnet.2)."""
    s, c = f"{tag}-{os.getpid()}-s", f"{tag}-{os.getpid()}-c"
    for ns in (s, c):
        sh("ip", "netns", "add", ns)
        NS.append(ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    n = os.getpid() % 100000
    sh("ip", "link", "add", f"na{n}", "netns", s, "type", "veth", "peer", "name", f"nb{n}", "netns", c)
    for ns, dev, host in ((s, f"na{n}", 1), (c, f"nb{n}", 2)):
        sh("ip", "-n", ns, "addr", "add", f"{subnet}.{host}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", dev, "mtu", str(mtu), "up")
    return s, c


def iptables(ns, *rule):
    sh("ip", "netns", "exec", ns, "iptables", *rule)


def wait_listen(ns, port):
    for _ in range(250):
        if f":{port:04X}" in sh("ip", "netns", "exec", ns, "cat", "/proc/net/tcp", "/proc/net/tcp6").stdout:
            return
        time.sleep(0.02)


def run_pair(server_cmd, client_cmd, env, timeout, ns_s, ns_c, port):
    """Runs server_cmd in ns_s, waits for it to listen on TCP `port`, runs
    client_cmd in ns_c; returns both outputs (each bounded by `timeout`)."""
    srv = subprocess.Popen(["ip", "netns", "exec", ns_s, *server_cmd], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    wait_listen(ns_s, port)
    cli = subprocess.Popen(["ip", "netns", "exec", ns_c, *client_cmd], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    out = {}
    for name, p in (("client", cli), ("server", srv)):
        try:
            out[name] = p.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            out[name] = p.communicate()[0] + "\n(timed out)"
    return out


def uroce_cmd(uroce, work, subnet, host, prog):
    """`uroce exec` of `prog` on subnet.host with a registry of its own."""
    return ["env", f"UROCE_REGISTRY={work}/registry.{host}", uroce, "exec", "--addr", f"{subnet}.{host}", "--", *prog]


def perftest_bw(out, size):
    """The BW average (MB/s) of a perftest client's output, or None."""
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and f[0] == str(size):
            return float(f[3])
    return None


def counters(out):
    """The counters a uroce NIC logs when it closes (UROCE_LOG=debug)."""
    vals = {}
    for line in out.splitlines():
        if "closed; counters:" in line:
            for item in line.split("counters:", 1)[1].split():
                k, _, v = item.partition("=")
                if v.isdigit():
                    vals[k] = vals.get(k, 0) + int(v)
    return vals
