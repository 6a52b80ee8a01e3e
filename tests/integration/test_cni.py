"""jakiro-cni on hosts whose cluster lives in etcd (`tools/testbed up --control etcd`): the
plugin, run as a runtime runs it, attaches namespaces standing in for containers to VPCs
across hosts. Blue containers on h1 and h2 reach each other (ping, TCP), a red container with
the same address as a blue one reaches no blue one, the network's security groups and QoS
(and a container's own, from CNI_ARGS) apply, DEL leaves no vNIC, veth, lease or etcd record,
and a loop of ADD/DEL leaves nothing (JAKIRO_CNI_LOOP containers; CI runs 50).
"""

import json
import os
import time

import pytest

from cni_runtime import (DATA_DIR, add, address, cni, container_links, container_ns, leases,
                         network, vnic_links)
from conftest import (JAKIROCTL, http_server, jakiroctl, ns, ping, run,
                      udp_gso_datagrams_received)

TESTBED_ARGS = ["--control", "etcd"]
ETCD_URL = "http://198.18.0.250:2379"
LOOP = int(os.environ.get("JAKIRO_CNI_LOOP", "50"))


def etcd_vnics():
    out = ns("jk-fabric", JAKIROCTL, "--etcd", ETCD_URL, "get", "vnics", timeout=20).stdout
    return {line.split()[0] for line in out.splitlines()[1:] if not line.startswith("(")}


def etcd_keys(prefix):
    """Every key under `prefix` (etcdctl, Debian's etcd-client, from jk-fabric)."""
    r = ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, "get", "--prefix", "--keys-only",
           prefix, timeout=20, env=dict(os.environ, ETCDCTL_API="3"))
    return [k for k in r.stdout.split() if k]


@pytest.fixture
def containers(testbed):
    """Makes container namespaces on demand; DELs and removes them after the test."""
    made = []

    def make(name, host, conf, **kw):
        container_ns(name)
        made.append((name, host, conf, kw))
        return add(host, name, conf, **kw)

    yield make
    for name, host, conf, kw in made:
        cni("DEL", host, name, conf, **{k: v for k, v in kw.items() if k == "ifname"})
        run("ip", "netns", "del", name, check=False)


def test_blue_containers_on_two_hosts_talk_and_red_with_the_same_address_cannot(containers,
                                                                                tmp_path):
    b1 = containers("jk-cni-b1", "h1", network("blue", "h1"))
    b2 = containers("jk-cni-b2", "h2", network("blue", "h2"))
    # red on h1 with b1's own address: VPCs are separate address spaces.
    r1 = containers("jk-cni-r1", "h1", network("red", "h1"), args=f"IP={address(b1)}")
    assert address(b1) != address(b2)
    assert address(r1) == address(b1)
    for result, netns in ((b1, "jk-cni-b1"), (r1, "jk-cni-r1")):
        assert result["cniVersion"] == "1.0.0"
        assert result["interfaces"][1] == {"name": "eth0", "mac": result["interfaces"][1]["mac"],
                                           "sandbox": f"/run/netns/{netns}"}
        assert result["ips"][0]["interface"] == 1
    assert b1["interfaces"][1]["mac"] != r1["interfaces"][1]["mac"]

    assert ping("jk-cni-b1", address(b2))
    (tmp_path / "hello").write_text("blue\n")
    with http_server("jk-cni-b2", address(b2), 8080, tmp_path):
        got = ns("jk-cni-b1", "curl", "-s", "--max-time", "5",
                 f"http://{address(b2)}:8080/hello").stdout
        assert got == "blue\n"
        assert ns("jk-cni-r1", "curl", "-s", "--max-time", "2",
                  f"http://{address(b2)}:8080/hello", check=False).returncode != 0
    assert not ping("jk-cni-r1", address(b2), count=2, timeout_s=1)
    # CHECK: everything ADD made is as it made it.
    assert cni("CHECK", "h1", "jk-cni-b1", network("blue", "h1")).code == 0


def test_a_containers_udp_gso_sends_reach_a_container_on_another_host(containers):
    """The container's interface offloads TCP segmentation only: a UDP_SEGMENT send (as QUIC
    stacks make them) is cut by the container's own kernel and every datagram arrives, where
    the veth's default would hand the vNIC's face a UDP super-frame it refuses."""
    containers("jk-cni-b1", "h1", network("blue", "h1"))
    b2 = containers("jk-cni-b2", "h2", network("blue", "h2"))
    features = ns("jk-cni-b1", "ethtool", "-k", "eth0").stdout
    assert "tx-udp-segmentation: off" in features and "tx-gso-list: off" in features
    assert "tx-tcp-segmentation: on" in features
    assert udp_gso_datagrams_received("jk-cni-b1", "jk-cni-b2", address(b2), 10) == (
        30, 30, "{1000: 30}")


def test_security_groups_and_qos_come_from_the_config_and_the_containers_args(containers):
    b1 = containers("jk-cni-g1", "h1", network("blue", "h1"))
    shaped = network("blue", "h2", qos={"rate": "200Mbit", "tcp": {"weight": 1},
                                        "rdma": {"weight": 3}})
    b2 = containers("jk-cni-g2", "h2", shaped)
    # A container of its own: no group (no ingress at all) and its own rate.
    lone = containers("jk-cni-g3", "h2", shaped, args="JAKIRO_SECURITY_GROUPS=;"
                                                      "JAKIRO_QOS_RATE=50Mbit")
    assert ping("jk-cni-g1", address(b2))
    assert not ping("jk-cni-g1", address(lone), count=2, timeout_s=1)
    rates = {v["vnic"]: v["rate_bps"] for v in json.loads(jakiroctl("h2", "qos", "--json").stdout)}
    assert rates[b2["interfaces"][0]["name"]] == 200_000_000
    assert rates[lone["interfaces"][0]["name"]] == 50_000_000
    assert b1["interfaces"][0]["name"] not in rates


def test_check_reports_what_drifted(containers):
    conf = network("blue", "h1")
    containers("jk-cni-d1", "h1", conf)
    run("ip", "-n", "jk-cni-d1", "addr", "flush", "dev", "eth0")
    o = cni("CHECK", "h1", "jk-cni-d1", conf)
    assert o.code != 0 and o.error["code"] == 101, o
    assert "no address" in o.error["msg"], o


def test_del_leaves_no_vnic_veth_lease_or_etcd_record_and_can_be_repeated(testbed):
    conf = network("blue", "h2")
    container_ns("jk-cni-x1")
    try:
        vnic = add("h2", "jk-cni-x1", conf)["interfaces"][0]["name"]
        assert vnic in etcd_vnics() and vnic in vnic_links("h2") and leases("h2")
        assert etcd_keys("/jakiro-cni/")
        for _ in range(2):  # DEL is idempotent
            o = cni("DEL", "h2", "jk-cni-x1", conf)
            assert o.code == 0 and o.out is None, o
        assert vnic not in etcd_vnics()
        assert vnic_links("h2") == [] and leases("h2") == []
        assert etcd_keys("/jakiro-cni/") == []
        ports = {p["role"] for p in json.loads(jakiroctl("h2", "status", "--json").stdout)["ports"]}
        assert vnic not in ports
        # DEL of a container whose namespace is gone already (CNI_NETNS empty) is no error.
        assert cni("DEL", "h2", "jk-cni-x1", conf, netns="").code == 0
        # A lease file lost (a wiped data_dir): DEL still finds the vNIC and its address key.
        add("h2", "jk-cni-x1", conf)
        for lease in (DATA_DIR / "h2").glob("*/*"):
            lease.unlink()
        assert cni("DEL", "h2", "jk-cni-x1", conf).code == 0
        assert vnic not in etcd_vnics() and etcd_keys("/jakiro-cni/") == []
        assert vnic_links("h2") == []
    finally:
        run("ip", "netns", "del", "jk-cni-x1", check=False)


def test_bad_requests_are_cni_errors_that_leave_nothing(testbed):
    container_ns("jk-cni-e1")
    tiny = network("blue", "h1", range_start="198.19.1.250", range_end="198.19.1.250")
    try:
        o = cni("ADD", "h1", "jk-cni-e1", network("green", "h1"))
        assert o.error["code"] == 7 and "'green' is not a VPC in etcd" in o.error["msg"], o
        # A one-address range: the second container finds it exhausted.
        add("h1", "jk-cni-e1", tiny)
        container_ns("jk-cni-e2")
        o = cni("ADD", "h1", "jk-cni-e2", tiny)
        assert o.error["code"] == 102 and "no free address" in o.error["msg"], o
        o = cni("ADD", "h1", "jk-cni-e1", tiny)  # the same container twice
        assert o.error["code"] == 104, o
        # An address another host's container holds (etcd says so): refused, not shared.
        o = cni("ADD", "h2", "jk-cni-e2", tiny, args="IP=198.19.1.250")
        assert o.error["code"] == 7 and "taken" in o.error["msg"], o
        assert cni("DEL", "h1", "jk-cni-e1", tiny).code == 0
        o = cni("ADD", "h1", "jk-cni-e2", network("blue", "h1"), stdin='{"cniVersion": "1.0.0",')
        assert o.error["code"] == 6, o
        o = cni("ADD", "h1", "../../../etc", network("blue", "h1"), netns="/run/netns/jk-cni-e2")
        assert o.error["code"] == 4, o
        o = cni("ADD", "h1", "jk-cni-e2", network("blue", "h1"), ifname="a" * 16)
        assert o.error["code"] == 4, o
        o = cni("ADD", "h1", "jk-cni-e2", network("blue", "h1"), netns="/run/netns/no-such")
        assert o.error["code"] == 3, o
        assert vnic_links("h1") == [] and vnic_links("h2") == []
        assert leases("h1") == [] and leases("h2") == []
        assert etcd_keys("/jakiro-cni/") == []
        assert not any(v.startswith("jc") for v in etcd_vnics())
        assert container_links("jk-cni-e2") == ["lo"]
    finally:
        cni("DEL", "h1", "jk-cni-e1", tiny)
        for name in ("jk-cni-e1", "jk-cni-e2"):
            run("ip", "netns", "del", name, check=False)


def test_containers_added_and_removed_in_a_loop_leave_nothing(testbed):
    conf = network("blue", "h1")
    started = time.monotonic()
    for i in range(LOOP):
        name = f"jk-cni-l{i}"
        container_ns(name)
        try:
            result = add("h1", name, conf)
            assert cni("DEL", "h1", name, conf).code == 0
        finally:
            run("ip", "netns", "del", name, check=False)
        # Addresses come back: every container gets the lowest one.
        assert address(result) == "198.19.1.100"
    elapsed = time.monotonic() - started
    print(f"{LOOP} containers added and removed in {elapsed:.1f} s")
    assert vnic_links("h1") == [] and leases("h1") == []
    assert etcd_keys("/jakiro-cni/") == []
    assert not any(v.startswith("jc") for v in etcd_vnics())
