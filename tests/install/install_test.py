#!/usr/bin/env python3
"""Tests of `cmake --install` and `uroce exec` (tests/install/CMakeLists.txt).

Each check installs the build into a fresh temporary prefix, works there and
removes it.  Prints "ok: ..." and exits 0 on success; exits 77 to skip; any
other status is a failure (with what was wrong on stdout).

  layout    what the prefix holds (and what it must not)
  consumer  find_package(uroce) in a small project against the prefix; build
            it and run it (RDMA WRITEs over loopback, byte-exact)
  devinfo   <prefix>/bin/uroce exec --addr A -- ibv_devinfo -v
  missing   <prefix>/bin/uroce exec -- /nonexistent
  env       what uroce exec hands the program (LD_LIBRARY_PATH, UROCE_*,
            exit status), from the prefix and from the build tree
  view      the devices the program sees in /dev/infiniband and
            /sys/class/infiniband (for UCX and rdma-core's tests), as root
            and, when possible, as an unprivileged user; the host's /dev,
            /sys and /tmp are left as they were
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

STEP_TIMEOUT = 120  # seconds for any one command


class Failure(Exception):
    pass


def run(cmd, env=None, cwd=None, timeout=STEP_TIMEOUT, check=True):
    try:
        p = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {timeout} s: {' '.join(cmd)}")
    if check and p.returncode != 0:
        raise Failure(f"exit status {p.returncode}: {' '.join(cmd)}\n--- stdout\n{p.stdout}\n--- stderr\n{p.stderr}")
    return p


def install(build, prefix):
    run(["cmake", "--install", build, "--prefix", prefix])


def private_libdir(prefix):
    """The directory of the drop-in libibverbs.so.1 under the prefix."""
    found = []
    for root, _dirs, files in os.walk(prefix):
        if "libibverbs.so.1" in files:
            found.append(root)
    if len(found) != 1:
        raise Failure(f"expected one directory holding libibverbs.so.1 under {prefix}, found {found}")
    return found[0]


def same_dir(a, b):
    return os.path.realpath(a) == os.path.realpath(b)


def check_layout(a, prefix):
    install(a.build, prefix)
    files = sorted(os.path.relpath(os.path.join(r, f), prefix) for r, _d, fs in os.walk(prefix) for f in fs)
    listing = "\n".join(files)
    if os.listdir(os.path.join(prefix, "bin")) != ["uroce"]:
        raise Failure(f"bin/ should hold uroce only:\n{listing}")
    libdir = private_libdir(prefix)
    rel = os.path.relpath(libdir, prefix)
    # Out of the default library path: not directly in lib/ (nor lib64/ or a
    # multiarch lib/<triplet>/).
    if os.path.basename(libdir) != "uroce":
        raise Failure(f"the drop-in libraries are in {rel}, not in a private uroce/ directory")
    for lib in ("libibverbs.so.1", "librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"):
        if not os.path.exists(os.path.join(libdir, lib)):
            raise Failure(f"{rel}/{lib} is missing:\n{listing}")
    for f in files:
        name = os.path.basename(f)
        if re.match(r"lib(ibverbs|rdmacm|mlx5|efa)\.so", name) and not same_dir(os.path.dirname(os.path.join(prefix, f)), libdir):
            raise Failure(f"{f}: a drop-in library outside {rel}")
        if re.search(r"gtest|gmock|_test\b|test_support", f):
            raise Failure(f"{f}: the test suite must not be installed")
    for needed in ("include/uroce/uroce.hpp", "include/uroce/types.hpp"):
        if needed not in files:
            raise Failure(f"{needed} is missing:\n{listing}")
    if any(f.startswith("include/") and not f.startswith("include/uroce/") for f in files):
        raise Failure(f"headers other than include/uroce/*:\n{listing}")
    configs = [f for f in files if f.endswith("/cmake/uroce/uroceConfig.cmake")]
    if len(configs) != 1 or not any(f.endswith("/cmake/uroce/uroceConfigVersion.cmake") for f in files):
        raise Failure(f"no uroceConfig.cmake + uroceConfigVersion.cmake:\n{listing}")
    if not any(re.search(r"(^|/)liburoce\.(a|so)$", f) for f in files):
        raise Failure(f"no liburoce.a / liburoce.so:\n{listing}")
    return f"{len(files)} files; drop-in libraries in {rel}; {configs[0]}"


def check_consumer(a, prefix, work):
    install(a.build, prefix)
    build = os.path.join(work, "consumer-build")
    cfg = ["cmake", "-S", a.consumer, "-B", build, "-G", a.generator, f"-DCMAKE_PREFIX_PATH={prefix}",
           f"-DCMAKE_CXX_COMPILER={a.cxx}", "-DCMAKE_BUILD_TYPE=Release",
           # Only the prefix may provide uroce.
           "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF", "-DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF"]
    if a.make_program:
        cfg.append(f"-DCMAKE_MAKE_PROGRAM={a.make_program}")
    if a.san_flags:
        cfg += [f"-DCMAKE_CXX_FLAGS={a.san_flags}", f"-DCMAKE_EXE_LINKER_FLAGS={a.san_flags}"]
    run(cfg)
    cache = open(os.path.join(build, "CMakeCache.txt")).read()
    m = re.search(r"^uroce_DIR:PATH=(.*)$", cache, re.M)
    if not m or not os.path.realpath(m.group(1)).startswith(os.path.realpath(prefix) + os.sep):
        raise Failure(f"find_package(uroce) did not find the installed package: uroce_DIR={m and m.group(1)}")
    run(["cmake", "--build", build])
    env = dict(os.environ)
    env["UROCE_REGISTRY"] = os.path.join(work, "registry")
    env["UROCE_STATS"] = "0"
    # The consumer is linked statically against uroce (or finds liburoce.so
    # through its RPATH): nothing of the build tree may be needed.
    env.pop("LD_LIBRARY_PATH", None)
    p = run([os.path.join(build, "consumer"), "127.0.81.3", "127.0.81.4"], env=env, timeout=60, check=False)
    if p.returncode != 0 or "consumer: ok" not in p.stdout:
        raise Failure(f"consumer failed (exit status {p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout.strip()


def check_devinfo(a, prefix, work):
    devinfo = shutil.which("ibv_devinfo")
    if not devinfo:
        print("ibv_devinfo is not installed (Debian package ibverbs-utils): skipped")
        sys.exit(77)
    install(a.build, prefix)
    env = dict(os.environ)
    env["UROCE_REGISTRY"] = os.path.join(work, "registry")
    env.pop("UROCE_ADDR", None)
    if a.san_preload:
        # A sanitizer build: our library carries the runtime, which must come
        # first in a program that is not instrumented.
        env["LD_PRELOAD"] = a.san_preload
        for kv in a.san_env:
            k, _, v = kv.partition("=")
            env[k] = v
    p = run([os.path.join(prefix, "bin", "uroce"), "exec", "--addr", "127.0.81.1", "--", "ibv_devinfo", "-v"],
            env=env, timeout=60, check=False)
    out = p.stdout
    if p.returncode != 0:
        raise Failure(f"exit status {p.returncode}:\n{out}{p.stderr}")
    for pattern in (r"hca_id:\s+uroce0\b", r"GID\[\s*0\]:\s+::ffff:127\.0\.81\.1\b"):
        if not re.search(pattern, out):
            raise Failure(f"no match for {pattern!r} in:\n{out}{p.stderr}")
    if re.search(r"hca_id:\s+uroce1\b", out):
        raise Failure(f"one address, yet a second device:\n{out}")
    return "ibv_devinfo shows uroce0 with GID ::ffff:127.0.81.1"


def check_missing(a, prefix, work):
    install(a.build, prefix)
    p = run([os.path.join(prefix, "bin", "uroce"), "exec", "--", "/nonexistent"], check=False, timeout=30)
    if p.returncode != 127:
        raise Failure(f"exit status {p.returncode}, expected 127:\n{p.stdout}{p.stderr}")
    if "/nonexistent" not in p.stderr or "not found" not in p.stderr:
        raise Failure(f"no message naming the program on stderr: {p.stderr!r}")
    p = run([os.path.join(prefix, "bin", "uroce"), "exec", "--", "no-such-program-of-uroce"], check=False, timeout=30)
    if p.returncode != 127 or "no-such-program-of-uroce" not in p.stderr:
        raise Failure(f"a name not on PATH: exit status {p.returncode}, stderr {p.stderr!r}")
    return f"exit status 127: {p.stderr.strip()}"


def exec_env(uroce, args, base_env):
    script = 'printf "%s\\n" "$LD_LIBRARY_PATH" "${UROCE_ADDR-unset}" "${UROCE_PORT-unset}" "$#" "$1"; exit 42'
    p = run([uroce, "exec"] + args + ["--", "sh", "-c", script, "sh", "-x"], env=base_env, check=False, timeout=30)
    if p.returncode != 42:
        raise Failure(f"{uroce} exec {args}: exit status {p.returncode}, expected the program's 42:\n{p.stdout}{p.stderr}")
    lines = p.stdout.split("\n")
    return lines[0].split(":"), lines[1], lines[2], lines[3:5]


def check_env(a, prefix, work):
    install(a.build, prefix)
    cases = [(os.path.join(prefix, "bin", "uroce"), private_libdir(prefix))]
    if a.build_uroce:
        cases.append((a.build_uroce, os.path.join(a.build, "lib")))
    for uroce, libdir in cases:
        env = {k: v for k, v in os.environ.items() if not k.startswith("UROCE_") and k != "LD_LIBRARY_PATH"}
        # With options: the variables are set, LD_LIBRARY_PATH keeps what was there after ours.
        env["LD_LIBRARY_PATH"] = "/opt/a:/opt/b"
        path, addr, port, rest = exec_env(uroce, ["--addr", "127.0.81.2,::1", "--port", "4999"], env)
        if not same_dir(path[0], libdir) or path[1:] != ["/opt/a", "/opt/b"]:
            raise Failure(f"{uroce}: LD_LIBRARY_PATH={':'.join(path)}, expected {libdir}:/opt/a:/opt/b")
        if (addr, port) != ("127.0.81.2,::1", "4999"):
            raise Failure(f"{uroce}: UROCE_ADDR={addr} UROCE_PORT={port}")
        if rest != ["1", "-x"]:
            raise Failure(f"{uroce}: the program's arguments arrived as {rest}")
        # Without: the environment's own values stay, LD_LIBRARY_PATH is ours alone.
        del env["LD_LIBRARY_PATH"]
        env["UROCE_ADDR"] = "127.0.81.9"
        path, addr, port, _ = exec_env(uroce, [], env)
        if len(path) != 1 or not same_dir(path[0], libdir) or (addr, port) != ("127.0.81.9", "unset"):
            raise Failure(f"{uroce}: without options: LD_LIBRARY_PATH={':'.join(path)} UROCE_ADDR={addr} UROCE_PORT={port}")
        # Bad options are uroce's own failure.
        for bad in (["--addr", "not-an-address"], ["--port", "70000"]):
            p = run([uroce, "exec"] + bad + ["--", "true"], env=env, check=False, timeout=30)
            if p.returncode == 0:
                raise Failure(f"{uroce} exec {' '.join(bad)} succeeded")
    return f"checked {len(cases)} uroce executable(s)"


VIEW_SCRIPT = """
d=/sys/class/infiniband/uroce0
stat -L -c %F /dev/infiniband/uroce0
test -r /dev/infiniband/uroce0 && test -w /dev/infiniband/uroce0 && echo accessible
cat $d/node_type $d/ports/1/state $d/ports/1/link_layer $d/ports/1/gids/0 $d/ports/1/gid_attrs/types/0
cat $d/ports/1/gid_attrs/ndevs/0
ls $d/device/net
test -d /dev/shm && test -e /dev/null && test -d /sys/class/net/lo && echo host-entries
"""
VIEW_EXPECT = ["character special file", "accessible", "1: CA", "4: ACTIVE", "Ethernet",
               "0000:0000:0000:0000:0000:ffff:7f00:5103", "RoCE v2", "lo", "lo", "host-entries"]


def host_state():
    tmp = sorted(n for n in os.listdir("/tmp") if n.startswith("uroce-view-"))
    return os.path.exists("/dev/infiniband"), os.path.exists("/sys/class/infiniband"), tmp


def view_as(cmd_prefix, uroce, env):
    p = run(cmd_prefix + [uroce, "exec", "--addr", "127.0.81.3", "--", "sh", "-c", VIEW_SCRIPT], env=env,
            check=False, timeout=30)
    lines = p.stdout.split("\n")[:len(VIEW_EXPECT)]
    if p.returncode != 0 or lines != VIEW_EXPECT:
        raise Failure(f"{' '.join(cmd_prefix)} uroce exec: the program saw {lines} (exit {p.returncode}), "
                      f"expected {VIEW_EXPECT}\n--- stderr\n{p.stderr}")


def check_view(a, prefix, work):
    uroce = a.build_uroce
    env = {k: v for k, v in os.environ.items() if not k.startswith("UROCE_")}
    before = host_state()
    if before[0] and os.path.exists("/dev/infiniband/uroce0"):
        return "skipped: this host has /dev/infiniband/uroce0 of its own"
    view_as([], uroce, env)
    # --no-device-view: nothing is shown.
    p = run([uroce, "exec", "--no-device-view", "--", "sh", "-c", "test -e /dev/infiniband/uroce0"], env=env,
            check=False, timeout=30)
    if p.returncode == 0:
        raise Failure("--no-device-view still showed /dev/infiniband/uroce0")
    done = ["as this user"]
    # An unprivileged user gets the same view through a user namespace.
    if os.geteuid() == 0 and shutil.which("setpriv"):
        probe = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", uroce, "exec",
                     "--no-device-view", "--", "true"], env=env, check=False, timeout=30)
        userns = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "unshare", "-U", "true"],
                     env=env, check=False, timeout=30)
        if probe.returncode == 0 and userns.returncode == 0:
            view_as(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], uroce, env)
            done.append("as user nobody")
        else:
            done.append("not as nobody (cannot run the build's uroce as nobody, or no user namespaces)")
    after = host_state()
    if after != before:
        raise Failure(f"the host changed: /dev/infiniband, /sys/class/infiniband, /tmp/uroce-view-*: "
                      f"{before} before, {after} after")
    return "the view is right " + ", ".join(done) + "; the host is unchanged"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("check", choices=["layout", "consumer", "devinfo", "missing", "env", "view"])
    ap.add_argument("--build", required=True, help="the build tree to install")
    ap.add_argument("--build-uroce", help="the uroce executable of the build tree")
    ap.add_argument("--consumer", help="the consumer project's source directory")
    ap.add_argument("--generator", default="Ninja")
    ap.add_argument("--make-program", default="")
    ap.add_argument("--cxx", default="c++")
    ap.add_argument("--san-flags", default="", help="sanitizer flags the build was made with")
    ap.add_argument("--san-preload", default="", help="sanitizer runtime to preload into ibv_devinfo")
    ap.add_argument("--san-env", action="append", default=[], help="VAR=VALUE for ibv_devinfo under a sanitizer")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="uroce-install-")
    prefix = os.path.join(work, "prefix")
    try:
        if a.check == "layout":
            msg = check_layout(a, prefix)
        elif a.check == "consumer":
            msg = check_consumer(a, prefix, work)
        elif a.check == "devinfo":
            msg = check_devinfo(a, prefix, work)
        elif a.check == "missing":
            msg = check_missing(a, prefix, work)
        elif a.check == "view":
            msg = check_view(a, prefix, work)
        else:
            msg = check_env(a, prefix, work)
    except Failure as e:
        print(f"FAILED: {e}")
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"ok: {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
