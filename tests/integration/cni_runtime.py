"""Runs jakiro-cni as a container runtime does: the CNI_* environment, the network
configuration on stdin, the result or error object on stdout. The runtime's own namespace is
the host's (`ip netns exec jk-h<i>`), where that host's jakirod runs; containers are
namespaces the tests make (named jk-cni-*, so `testbed down` removes any a failure left)."""

import json
import os
import subprocess
from pathlib import Path

from conftest import RUN_DIR, run, tool

CNI = tool("JAKIRO_CNI", "jakiro-cni")
DATA_DIR = Path("/run/jakiro/testbed/cni")  # under the test bed's run dir: down removes it
SUBNET = "198.19.1.0/24"


def network(vpc, host, **extra):
    """A network configuration for `vpc` on `host` (h1, h2): addresses .100-.199."""
    conf = {"cniVersion": "1.0.0", "name": f"jakiro-{vpc}", "type": "jakiro-cni",
            "host_config": str(RUN_DIR / f"{host}.yaml"), "vpc": vpc, "subnet": SUBNET,
            "range_start": "198.19.1.100", "range_end": "198.19.1.199",
            "security_groups": ["default"], "data_dir": str(DATA_DIR / host),
            "ready_timeout_ms": 10000}
    conf.update(extra)
    return conf


class Outcome:
    def __init__(self, r):
        self.code = r.returncode
        self.stderr = r.stderr
        self.out = json.loads(r.stdout) if r.stdout.strip() else None

    @property
    def error(self):
        return self.out if self.code != 0 else None

    def __repr__(self):
        return f"exit {self.code}: {self.out} {self.stderr}"


def cni(command, host, container, conf, ifname="eth0", args="", netns=None, stdin=None):
    """One plugin call, as a runtime makes it, from host `host`'s namespace."""
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
           "CNI_COMMAND": command, "CNI_CONTAINERID": container,
           "CNI_NETNS": f"/run/netns/{container}" if netns is None else netns,
           "CNI_IFNAME": ifname, "CNI_PATH": "/usr/lib/cni", "CNI_ARGS": args}
    r = subprocess.run(["ip", "netns", "exec", f"jk-{host}", CNI],
                       input=json.dumps(conf) if stdin is None else stdin, env=env,
                       capture_output=True, text=True, timeout=60)
    return Outcome(r)


def add(host, container, conf, **kw):
    """ADD that must succeed; returns the result object."""
    o = cni("ADD", host, container, conf, **kw)
    assert o.code == 0, o
    return o.out


def address(result):
    return result["ips"][0]["address"].split("/")[0]


def container_ns(name):
    run("ip", "netns", "add", name)
    return name


def vnic_links(host):
    """The plugin's host ends (jc...) in host `host`'s namespace."""
    out = run("ip", "-n", f"jk-{host}", "-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
            if line.split(":")[1].strip().startswith("jc")]


def leases(host):
    d = DATA_DIR / host
    return sorted(str(p.relative_to(d)) for p in d.glob("*/*")) if d.exists() else []


def container_links(name):
    """The interfaces in container namespace `name` (lo alone when nothing was left)."""
    out = run("ip", "-n", name, "-o", "link", "show").stdout
    return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()]
