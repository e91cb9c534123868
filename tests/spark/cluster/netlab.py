"""Test hosts on one machine: Linux network namespaces joined by a bridge, each host with its own address, and a
mount namespace per process that hides chosen paths (an empty tmpfs mounted over them).

    net = TestNet.create(hosts=2)       # root namespace = the "broker host" (net.broker_ip)
    p = net.popen(1, ["java", ...], hide=[data_parent])    # runs on host 1 (net.ip(1)), data_parent is empty there
    net.destroy()

Layout (names carry the test process's pid, so concurrent runs never meet):

    root ns  --veth klt<pid>h (10.213.N.1/24) ----+
                                                  |  bridge br0 in its own namespace klt<pid>-sw
    klt<pid>-w1  eth0 10.213.N.11/24 -- veth -----+  (the bridge lives outside the root namespace so the root
    klt<pid>-w2  eth0 10.213.N.12/24 -- veth -----+   namespace's firewall and br_netfilter never see its frames)

The root namespace is the broker host: `kafkalog serve`, the Spark master and the driver listen on 10.213.N.1.
Made with Debian's iproute2 (`ip netns`, veth, bridge) and util-linux's `unshare`; needs root (CAP_SYS_ADMIN and
CAP_NET_ADMIN). ``TestNet.create`` raises ``NetLabError`` saying exactly which command failed and why.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass, field

PREFIX = "klt"


class NetLabError(RuntimeError):
    pass


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise NetLabError(f"`{shlex.join(argv)}` failed (exit {r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


def _netns_list() -> list[str]:
    r = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale() -> None:
    """Remove the namespaces and links of earlier runs whose process is gone (a killed test run leaves them)."""
    for ns in _netns_list():
        if not ns.startswith(PREFIX):
            continue
        digits = ns[len(PREFIX):].split("-", 1)[0]
        if digits.isdigit() and not _pid_alive(int(digits)):
            _run("ip", "netns", "del", ns, check=False)
    r = _run("ip", "-o", "link", "show", check=False)
    for line in r.stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if name.startswith(PREFIX) and name.endswith("h") and name[len(PREFIX):-1].isdigit():
            if not _pid_alive(int(name[len(PREFIX):-1])):
                _run("ip", "link", "del", name, check=False)


def _used_subnets() -> set[int]:
    r = _run("ip", "-o", "-4", "addr", "show", check=False)
    used = set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            addr = ipaddress.ip_interface(parts[parts.index("inet") + 1])
            if str(addr.ip).startswith("10.213."):
                used.add(int(str(addr.ip).split(".")[2]))
    return used


@dataclass
class TestNet:
    tag: str
    subnet: int
    hosts: int
    made: list[str] = field(default_factory=list)  # namespaces made, for destroy()

    __test__ = False  # not a pytest class

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    def ns(self, i: int) -> str:
        return f"{self.tag}-w{i}"

    def ip(self, i: int) -> str:
        """Host i's address (i >= 1); 0 is the broker host (the root namespace)."""
        return f"10.213.{self.subnet}.{1 if i == 0 else 10 + i}"

    @property
    def broker_ip(self) -> str:
        return self.ip(0)

    @classmethod
    def create(cls, hosts: int = 2) -> TestNet:
        if os.geteuid() != 0:
            raise NetLabError(f"network namespaces need root (CAP_SYS_ADMIN, CAP_NET_ADMIN); running as uid "
                              f"{os.geteuid()}")
        reap_stale()
        used = _used_subnets()
        subnet = next((n for n in range(1 + os.getpid() % 200, 255) if n not in used), None)
        if subnet is None:
            raise NetLabError("no free 10.213.N.0/24 subnet")
        net = cls(f"{PREFIX}{os.getpid()}", subnet, hosts)
        try:
            net._build()
        except BaseException:
            net.destroy()
            raise
        return net

    def _build(self) -> None:
        sw, tag = self.switch, self.tag
        _run("ip", "netns", "add", sw)
        self.made.append(sw)
        _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", sw, "link", "set", "br0", "up")
        _run("ip", "-n", sw, "link", "set", "lo", "up")
        # the broker host's leg: one end stays in the root namespace with the broker's address
        root_if = f"{tag}h"
        _run("ip", "link", "add", root_if, "type", "veth", "peer", "name", "h0", "netns", sw)
        _run("ip", "addr", "add", f"{self.broker_ip}/24", "dev", root_if)
        _run("ip", "link", "set", root_if, "up")
        _run("ip", "-n", sw, "link", "set", "h0", "master", "br0")
        _run("ip", "-n", sw, "link", "set", "h0", "up")
        for i in range(1, self.hosts + 1):
            ns = self.ns(i)
            _run("ip", "netns", "add", ns)
            self.made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            _run("ip", "-n", sw, "link", "add", f"w{i}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", sw, "link", "set", f"w{i}", "master", "br0")
            _run("ip", "-n", sw, "link", "set", f"w{i}", "up")
            _run("ip", "-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
        # every host reaches the broker host before anything is started on them
        with socket.create_server((self.broker_ip, 0)) as srv:
            port = srv.getsockname()[1]
            for i in range(1, self.hosts + 1):
                _run("ip", "netns", "exec", self.ns(i), sys.executable, "-c",
                     f"import socket; socket.create_connection(({self.broker_ip!r}, {port}), timeout=5).close()")
                srv.accept()[0].close()

    def command(self, i: int, argv: list[str], hide: list[str] = ()) -> list[str]:
        """argv run on host i, in a mount namespace of its own where each path of ``hide`` is an empty,
        read-only tmpfs (the path exists, its contents do not)."""
        mounts = " && ".join(f"mount -t tmpfs -o ro,size=64k,mode=0755 kafkalog-hidden {shlex.quote(str(p))}"
                             for p in hide)
        script = (mounts + " && " if mounts else "") + 'exec "$@"'
        return ["ip", "netns", "exec", self.ns(i), "unshare", "--mount", "--propagation", "private", "--",
                "sh", "-c", script, "kafkalog-host", *argv]

    def popen(self, i: int, argv: list[str], hide: list[str] = (), **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(i, argv, hide), **kw)

    def destroy(self) -> None:
        for ns in reversed(self.made):
            _run("ip", "netns", "del", ns, check=False)  # deleting a namespace deletes its veth ends and peers
        self.made.clear()
        _run("ip", "link", "del", f"{self.tag}h", check=False)

