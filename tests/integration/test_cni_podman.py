"""Containers started by podman (Debian's, CNI backend) on two hosts of the test bed attach
themselves through jakiro-cni and get the RDMA device from jakiro-cni's CDI spec: blue
containers on h1 and h2 talk TCP and run an unmodified ib_write_bw across hosts, each seeing
only its own vNIC's device; a red container with a blue one's address reaches no blue one; the
network's QoS applies; `podman rm` leaves no vNIC, veth, lease or etcd record; a loop of
`podman run --rm` leaves nothing (JAKIRO_CNI_PODMAN_LOOP containers, 5 by default; 50 is the
acceptance run). The root file system is assembled here from the machine's own binaries: no
registry, no image.

How podman runs on the test bed: inside a host's network namespace (nsenter --net, so the
veth's host end lands where that host's jakirod runs; `ip netns exec` would also remount /sys
and hide the cgroup mounts runc needs), with a containers.conf of the test's own (the CNI
backend, the plugin's directory, the networks of that host). runc is the runtime: crun 1.8
refuses this machine's hybrid cgroup layout. Limits are set below the machine's hard ones
(podman's defaults for root are above them and need CAP_SYS_RESOURCE).
"""

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from cni_runtime import CNI, DATA_DIR, leases, vnic_links
from conftest import JAKIROCTL, JAKIROD, RUN_DIR, ns, run, wait_until

TESTBED_ARGS = ["--control", "etcd"]
ETCD_URL = "http://198.18.0.250:2379"
LOOP = int(os.environ.get("JAKIRO_CNI_PODMAN_LOOP", "5"))
CDI_SPEC = Path("/var/run/cdi/jakiro-test.json")
SHIM = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
PROGRAMS = ["bash", "cat", "sleep", "nc", "ip", "ping", "ib_write_bw", "ibv_devices",
            # what jakiro-run (from the CDI spec) runs
            "env", "awk", "readlink", "dirname", "uname"]


def copy_with_libraries(binary, root):
    """`binary` and every library ldd names, at the same paths under `root`."""
    paths = [binary] + re.findall(r"(/\S+) \(0x", run("ldd", binary).stdout)
    for path in paths:
        dest = root / path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists():
            shutil.copy2(os.path.realpath(path), dest)


def assemble_rootfs(root):
    for program in PROGRAMS:
        path = shutil.which(program, path="/usr/sbin:/usr/bin:/sbin:/bin")
        assert path, f"{program} is missing (tools/bootstrap installs it)"
        copy_with_libraries(path, root)
    # What the verbs shim the CDI spec preloads needs: the C++ runtime.
    copy_with_libraries(str(SHIM), root)
    for d in ("proc", "sys", "dev", "tmp", "run", "etc"):
        (root / d).mkdir(exist_ok=True)
    (root / "bin").mkdir(exist_ok=True)
    (root / "bin" / "sh").symlink_to("/usr/bin/bash")


class Host:
    """podman on test-bed host `name`, with its own storage, configuration and networks."""

    def __init__(self, name, work, rootfs):
        self.name, self.rootfs = name, rootfs
        self.dir = work / name
        (self.dir / "net.d").mkdir(parents=True)
        for vpc in ("blue", "red"):
            plugin = {"type": "jakiro-cni", "host_config": str(RUN_DIR / f"{name}.yaml"),
                      "vpc": vpc, "subnet": "198.19.1.0/24", "range_start": "198.19.1.100",
                      "range_end": "198.19.1.199", "security_groups": ["default"],
                      "qos": {"rate": "1Gbit", "rdma": {"weight": 3}, "tcp": {"weight": 1}},
                      "data_dir": str(DATA_DIR / name)}
            (self.dir / "net.d" / f"jakiro-{vpc}.conflist").write_text(json.dumps(
                {"cniVersion": "1.0.0", "name": f"jakiro-{vpc}", "plugins": [plugin]}))
        (self.dir / "containers.conf").write_text(
            "[containers]\n"
            'default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]\n'
            "[network]\n"
            'network_backend = "cni"\n'
            f'cni_plugin_dirs = ["{Path(CNI).resolve().parent}", "/usr/lib/cni"]\n'
            f'network_config_dir = "{self.dir / "net.d"}"\n'
            "[engine]\n"
            'runtime = "runc"\n'
            'cgroup_manager = "cgroupfs"\n'
            'events_logger = "file"\n')

    def podman(self, *args, timeout=60, check=True):
        env = dict(os.environ, CONTAINERS_CONF=str(self.dir / "containers.conf"))
        return run("nsenter", f"--net=/run/netns/jk-{self.name}", "podman",
                   "--root", self.dir / "storage", "--runroot", self.dir / "run", *args,
                   timeout=timeout, check=check, env=env)

    def start(self, name, network, command="sleep 300"):
        self.podman("run", "-d", "--name", name, "--network", network,
                    "--device", "jakiro.io/rdma=vnic", "--rootfs", self.rootfs,
                    "bash", "-c", command)

    def exec(self, name, *cmd, timeout=30, check=True):
        return self.podman("exec", name, *cmd, timeout=timeout, check=check)

    def address(self, name):
        out = self.exec(name, "ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
        return re.search(r"inet (\S+)/", out).group(1)

    def remove_all(self):
        self.podman("rm", "-f", "-t", "0", "--all", check=False)


def etcd_vnics():
    out = ns("jk-fabric", JAKIROCTL, "--etcd", ETCD_URL, "get", "vnics", timeout=20).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.startswith("jc")]


def etcd_addresses():
    r = ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, "get", "--prefix", "--keys-only",
           "/jakiro-cni/", timeout=20, env=dict(os.environ, ETCDCTL_API="3"))
    return r.stdout.split()


def nothing_left():
    assert etcd_vnics() == [] and etcd_addresses() == []
    for host in ("h1", "h2"):
        assert vnic_links(host) == [] and leases(host) == []


@pytest.fixture(scope="module")
def hosts(testbed, tmp_path_factory):
    assert shutil.which("podman"), "podman is missing (tools/bootstrap installs it)"
    work = tmp_path_factory.mktemp("podman")
    rootfs = work / "rootfs"
    assemble_rootfs(rootfs)
    spec = run(CNI, "cdi", "--lib", SHIM, "--run", Path(__file__).parents[2] / "tools" /
               "jakiro-run").stdout
    CDI_SPEC.parent.mkdir(parents=True, exist_ok=True)
    CDI_SPEC.write_text(spec)
    made = {h: Host(h, work, rootfs) for h in ("h1", "h2")}
    try:
        yield made
    finally:
        for h in made.values():
            h.remove_all()
        CDI_SPEC.unlink(missing_ok=True)


def retry(what, action, timeout=10):
    """`action()` until it returns a CompletedProcess that exited 0; that one."""
    deadline = time.monotonic() + timeout
    while True:
        r = action()
        if r.returncode == 0 or time.monotonic() > deadline:
            assert r.returncode == 0, f"{what}: {r.stdout}{r.stderr}"
            return r
        time.sleep(0.2)


def test_podman_containers_on_two_hosts_talk_tcp_and_rdma_and_red_cannot(hosts):
    h1, h2 = hosts["h1"], hosts["h2"]
    try:
        # b2's first process is an unmodified ib_write_bw server: the CDI device's environment
        # preloads the shim for it.
        h2.start("b2", "jakiro-blue", "ib_write_bw -D 1 -s 65536 > /tmp/bw 2>&1; sleep 300")
        h1.start("b1", "jakiro-blue")
        h1.start("r1", "jakiro-red")
        b1, b2, r1 = h1.address("b1"), h2.address("b2"), h1.address("r1")
        assert r1 == b2 and b1 != b2  # red has blue's address: VPCs are separate

        # podman exec gets no CDI environment: jakiro-run, from the CDI spec, preloads the
        # shim. Each container sees one RDMA device, its own vNIC's.
        devices = re.findall(r"^\s+(jakiro_\S+)",
                             h1.exec("b1", "jakiro-run", "--", "ibv_devices").stdout, re.M)
        assert len(devices) == 1 and devices[0][len("jakiro_"):] in vnic_links("h1"), devices
        assert devices[0][len("jakiro_"):] in etcd_vnics()

        # RDMA, blue to blue across hosts.
        out = retry("ib_write_bw from b1 to b2", lambda: h1.exec(
            "b1", "jakiro-run", "--", "ib_write_bw", "-D", "1", "-s", "65536", b2, timeout=30,
            check=False)).stdout
        m = re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)", out, re.M)
        assert m and float(m.group(1)) > 0, out
        assert devices[0] in out
        wait_until(lambda: "BW average" in h2.exec("b2", "cat", "/tmp/bw").stdout, 10,
                   "b2's ib_write_bw to report")

        # TCP, blue to blue across hosts.
        h2.podman("exec", "-d", "b2", "bash", "-c", f"nc -l {b2} 9000 > /tmp/got")
        retry("TCP from b1 to b2", lambda: h1.exec(
            "b1", "bash", "-c", f"echo blue | nc -N -w 2 {b2} 9000", check=False))
        wait_until(lambda: h2.exec("b2", "cat", "/tmp/got").stdout == "blue\n", 5,
                   "b2 to get it")
        # Red cannot reach blue.
        assert h1.exec("r1", "ping", "-c", "2", "-W", "1", b1, check=False).returncode != 0

        # The network's QoS: every container's vNIC is shaped at the conflist's 1 Gbit/s.
        qos = {v["vnic"]: v["rate_bps"]
               for v in json.loads(ns("jk-h1", JAKIROCTL, "--host", "h1", "qos", "--json").stdout)}
        assert all(qos.get(v) == 1_000_000_000 for v in vnic_links("h1")), qos

        # podman rm: nothing of the three is left anywhere.
        for h, name in ((h1, "b1"), (h1, "r1"), (h2, "b2")):
            h.podman("rm", "-f", "-t", "0", name)
        nothing_left()
    finally:
        h1.remove_all()
        h2.remove_all()


def test_podman_run_rm_in_a_loop_leaves_nothing(hosts):
    h1 = hosts["h1"]
    started = time.monotonic()
    seen = set()
    for _ in range(LOOP):
        out = h1.podman("run", "--rm", "--network", "jakiro-blue", "--rootfs", h1.rootfs,
                        "ip", "-4", "-o", "addr", "show", "dev", "eth0").stdout
        seen.add(re.search(r"inet (\S+)", out).group(1))
    assert len(seen) == 1, seen  # each container's address came back for the next
    print(f"{LOOP} podman containers run and removed in {time.monotonic() - started:.1f} s")
    nothing_left()
