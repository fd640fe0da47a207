#!/usr/bin/env python3
"""A second local user cannot break or redirect the first user's uroce.

  local_users_test.py --lib BUILD/lib

Run as root: it creates two users with useradd (a victim and an attacker,
unique names, removed at the end) and a network namespace of its own
(lo up, 127.0.0.1), and runs unmodified ibv_devinfo / ibv_rc_pingpong
(ibverbs-utils) as the victim on uroce's libibverbs.so.1 (copied to a
directory both users can read).  Exit 77 (skipped) when not root, or when
useradd, setpriv, ip netns or ibv_rc_pingpong are missing.

 1. The attacker creates the victim's runtime directory (/dev/shm/uroce-<uid>)
    first, open to all: the victim's device does not open and says who owns
    the directory (before, it ran without its host registry: QP numbers
    collided and same-host peers could not find each other).  With a
    private UROCE_RUNTIME_DIR, or a /run/user/<uid> of its own, the victim's
    ping-pong passes despite the planted directory.
 2. The attacker binds UDP 127.0.0.1:4791 first: the victim's server fails at
    once, naming the holder's uid (before, it moved silently to an ephemeral
    port, and a remote client's packets went to the attacker).  A port held
    by the victim's own process still sends the victim to another port, and
    the pair passes.
 3. The victim's runtime directory is 0700 and the attacker can create
    nothing in it (ring files, registry), and cannot open what is there."""
import argparse
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

SKIP = 77
PROGRAM_TIMEOUT = 30


def have(*tools):
    return all(shutil.which(t) for t in tools)


class Users:
    """Two throwaway users, deleted on exit."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.names = [f"urocev{tag}", f"urocea{tag}"]
        self.made = []
        try:
            for n in self.names:
                subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", n], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                self.made.append(n)
            self.victim = pwd.getpwnam(self.names[0])
            self.attacker = pwd.getpwnam(self.names[1])
        except BaseException:
            self.cleanup()
            raise

    def cleanup(self):
        for n in self.made:
            subprocess.run(["userdel", n], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.made = []


class Test:
    def __init__(self, lib, users, netns, work):
        self.lib, self.users, self.netns, self.work = lib, users, netns, work
        self.failures = []

    def as_user(self, user, argv):
        return ["ip", "netns", "exec", self.netns, "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                "--clear-groups", "--"] + argv

    def env(self, **extra):
        e = {k: v for k, v in os.environ.items() if not k.startswith("UROCE_")}
        e.update(LD_LIBRARY_PATH=self.lib, UROCE_ADDR="127.0.0.1", HOME="/", **extra)
        e.pop("XDG_RUNTIME_DIR", None)
        return e

    def run(self, user, argv, **extra):
        p = subprocess.run(self.as_user(user, argv), env=self.env(**extra), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=PROGRAM_TIMEOUT)
        return p.returncode, p.stdout

    def check(self, cond, what, output=""):
        print(("ok   " if cond else "FAIL ") + what, flush=True)
        if not cond:
            self.failures.append(what)
            if output:
                print("  output:\n    " + output.strip().replace("\n", "\n    "), flush=True)

    def pingpong(self, user, port, **extra):
        """An ibv_rc_pingpong server and client as `user`; True if both pass."""
        args = ["ibv_rc_pingpong", "-g", "0", "-n", "50", "-p", str(port)]
        srv = subprocess.Popen(self.as_user(user, args), env=self.env(**extra), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        try:
            cli = subprocess.run(self.as_user(user, args + ["127.0.0.1"]), env=self.env(**extra),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=PROGRAM_TIMEOUT)
            out, _ = srv.communicate(timeout=PROGRAM_TIMEOUT)
        except subprocess.TimeoutExpired:
            srv.kill()
            srv.communicate()
            return False, "timed out"
        ok = cli.returncode == 0 and srv.returncode == 0 and "50 iters" in cli.stdout
        return ok, cli.stdout + out

    def holder(self, user, port):
        """A process of `user` holding UDP 127.0.0.1:<port> in the namespace."""
        code = ("import socket,sys,time\n"
                "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                f"s.bind(('127.0.0.1',{port}))\n"
                "print('bound',flush=True)\n"
                "time.sleep(60)\n")
        p = subprocess.Popen(self.as_user(user, [sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if "bound" not in line:
            p.kill()
            raise RuntimeError(f"the {user.pw_name} holder could not bind {port}")
        return p


def planted_runtime_dir(t):
    v, a = t.users.victim, t.users.attacker
    planted = f"/dev/shm/uroce-{v.pw_uid}"
    shutil.rmtree(planted, ignore_errors=True)
    rc, out = t.run(a, ["mkdir", "-m", "0777", planted])
    t.check(rc == 0 and os.stat(planted).st_uid == a.pw_uid, "the attacker made the victim's directory first", out)
    rc, out = t.run(v, ["ibv_devinfo"])
    t.check(rc != 0 and f"{planted} is owned by uid {a.pw_uid}" in out,
            "the victim's device refuses to open, naming the directory's owner", out)
    rc, out = t.run(v, ["ibv_rc_pingpong", "-g", "0", "-n", "5", "-p", "18515"])
    t.check(rc != 0 and f"owned by uid {a.pw_uid}" in out, "the victim's server does not start without its registry",
            out)

    private = os.path.join(t.work, "victim-runtime")
    os.mkdir(private, 0o700)
    os.chown(private, v.pw_uid, v.pw_gid)
    ok, out = t.pingpong(v, 18516, UROCE_RUNTIME_DIR=private)
    t.check(ok, "with UROCE_RUNTIME_DIR of its own the victim's ping-pong passes", out)
    t.check(os.path.exists(os.path.join(private, "registry")), "the victim's registry is in its own directory")

    run_user = f"/run/user/{v.pw_uid}"
    made_parent = not os.path.exists("/run/user")
    made_run = not os.path.exists(run_user)
    if made_run:
        os.makedirs(run_user, 0o700)
        os.chmod(run_user, 0o700)
        os.chown(run_user, v.pw_uid, v.pw_gid)
    try:
        ok, out = t.pingpong(v, 18517)
        t.check(ok, "with a /run/user/<uid> of its own the victim ignores the planted directory", out)
        t.check(os.path.exists(os.path.join(run_user, "uroce", "registry")), "the registry went to /run/user/<uid>")
    finally:
        if made_run:
            shutil.rmtree(run_user, ignore_errors=True)
        if made_parent:
            shutil.rmtree("/run/user", ignore_errors=True)
    shutil.rmtree(planted, ignore_errors=True)


def port_held_first(t):
    v, a = t.users.victim, t.users.attacker
    holder = t.holder(a, 4791)
    try:
        rc, out = t.run(v, ["ibv_devinfo"])
        t.check(rc != 0 and f"held by a socket of another user (uid {a.pw_uid})" in out,
                "the victim's device refuses another user's port 4791 and names the holder", out)
        rc, out = t.run(v, ["ibv_rc_pingpong", "-g", "0", "-n", "5", "-p", "18518"])
        t.check(rc != 0 and f"uid {a.pw_uid}" in out, "the victim's server fails at once instead of moving", out)
    finally:
        holder.kill()
        holder.wait()
    own = t.holder(v, 4791)
    try:
        ok, out = t.pingpong(v, 18519)
        t.check(ok, "a port held by the victim's own process still lets its pair run on another port", out)
    finally:
        own.kill()
        own.wait()


def private_files(t):
    v, a = t.users.victim, t.users.attacker
    d = f"/dev/shm/uroce-{v.pw_uid}"
    ok, out = t.pingpong(v, 18520, UROCE_SHM="1")
    t.check(ok, "the victim's ping-pong over shared-memory rings passes", out)
    st = os.stat(d)
    t.check(st.st_uid == v.pw_uid and (st.st_mode & 0o777) == 0o700, "the victim's runtime directory is 0700 and its own")
    rc, out = t.run(a, ["touch", os.path.join(d, "uroce-planted.ring")])
    t.check(rc != 0, "the attacker cannot create a file in it", out)
    rc, out = t.run(a, ["cat", os.path.join(d, "registry")])
    t.check(rc != 0, "the attacker cannot read the victim's registry", out)
    shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("skipped: needs root (useradd, ip netns)")
        return SKIP
    if not have("useradd", "userdel", "setpriv", "ip", "ibv_rc_pingpong", "ibv_devinfo"):
        print("skipped: needs useradd, setpriv, ip and ibverbs-utils")
        return SKIP
    netns = f"uroce-users-{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", netns], stderr=subprocess.DEVNULL).returncode != 0:
        print("skipped: cannot create a network namespace")
        return SKIP
    users = None
    work = tempfile.mkdtemp(prefix="uroce-users-")
    os.chmod(work, 0o755)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
        try:
            users = Users()
        except (subprocess.CalledProcessError, KeyError) as e:
            print(f"skipped: cannot add users here ({e})")
            return SKIP
        lib = os.path.join(work, "lib")
        shutil.copytree(args.lib, lib, symlinks=True)
        t = Test(lib, users, netns, work)
        planted_runtime_dir(t)
        port_held_first(t)
        private_files(t)
        if t.failures:
            print(f"{len(t.failures)} check(s) failed")
            return 1
        print("all checks passed")
        return 0
    finally:
        if users:
            for u in (users.victim, users.attacker):
                shutil.rmtree(f"/dev/shm/uroce-{u.pw_uid}", ignore_errors=True)
            users.cleanup()
        subprocess.run(["ip", "netns", "del", netns], stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
