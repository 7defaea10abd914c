"""Hosts in network namespaces joined by one bridge: a small switched network
that exists only inside namespaces this process made.

    with Network("mh") as net:
        coordinator = net.add_host("coordinator")   # Host(name, ns, ip)
        net.add_host("worker-0")
        net.resolve({"lact-coordinator": coordinator.ip})  # /etc/hosts in every namespace
        net.set_link(coordinator, up=False)          # cut its cable
        net.limit(coordinator, "200mbit")            # tc tbf, both directions

The bridge lives in a namespace of its own, so no address or route is added
to the namespace the test runs in. Every host namespace gets `lo` and `eth0`
(10.231.0.N/24); `ip netns exec` shows it /etc/netns/NS/hosts as /etc/hosts.
close() (or leaving the `with`) deletes the namespaces and their hosts files,
also after a failure; namespaces left by a run that was killed (named after
a process id that no longer exists) are deleted when the next one starts.
Needs root and iproute2.
"""

import os
import re
import shutil
import subprocess

SUBNET = "10.231.0"
_NAME = re.compile(r"^lact(\d+)-")


def ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def remove_stale():
    """Deletes namespaces an earlier, killed run of these tests left behind."""
    listing = ip("netns", "list", check=False).stdout.split()
    for name in listing:
        match = _NAME.match(name)
        if match and not os.path.exists(f"/proc/{match.group(1)}"):
            ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


class Host:
    def __init__(self, name, ns, ip_address, port):
        self.name = name
        self.ns = ns
        self.ip = ip_address
        self.port = port  # the bridge's port (a veth in the bridge namespace)

    def exec_argv(self, argv):
        return ["ip", "netns", "exec", self.ns, *argv]


class Network:
    def __init__(self, label):
        remove_stale()
        self._prefix = f"lact{os.getpid()}-{label}"
        self._hosts = []
        self._namespaces = []
        self.bridge_ns = self._add_ns("br")
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _add_ns(self, suffix):
        name = f"{self._prefix}-{suffix}"
        ip("netns", "add", name)
        self._namespaces.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return name

    def add_host(self, name):
        index = len(self._hosts)
        ns = self._add_ns(str(index))
        port = f"p{index}"
        address = f"{SUBNET}.{index + 2}"
        ip("-n", self.bridge_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0",
           "netns", ns)
        ip("-n", self.bridge_ns, "link", "set", port, "master", "br0")
        ip("-n", self.bridge_ns, "link", "set", port, "up")
        ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        host = Host(name, ns, address, port)
        self._hosts.append(host)
        return host

    def resolve(self, names):
        """Writes name -> address entries as every host's /etc/hosts."""
        lines = ["127.0.0.1 localhost"] + [f"{addr} {name}" for name, addr in names.items()]
        for host in self._hosts:
            folder = f"/etc/netns/{host.ns}"
            os.makedirs(folder, exist_ok=True)
            with open(f"{folder}/hosts", "w") as f:
                f.write("\n".join(lines) + "\n")

    def set_link(self, host, up):
        ip("-n", self.bridge_ns, "link", "set", host.port, "up" if up else "down")

    def limit(self, host, rate):
        """Token-bucket limit `rate` (tc's units, e.g. 1gbit) on both directions of
        the host's link; None removes it."""
        for ns, dev in ((host.ns, "eth0"), (self.bridge_ns, host.port)):
            subprocess.run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"],
                           capture_output=True)
            if rate:
                subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf",
                                "rate", rate, "burst", "256kb", "latency", "100ms"],
                               check=True, capture_output=True, text=True)

    def close(self):
        for name in reversed(self._namespaces):
            ip("netns", "del", name, check=False)
            shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)
        self._namespaces = []
