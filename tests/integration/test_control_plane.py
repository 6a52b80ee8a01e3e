"""The control plane in etcd: `tools/testbed up --hosts 3 --control etcd`.

Every host's YAML holds only host facts and `control:`; the cluster (VPCs, groups, every vNIC)
lives in one etcd in jk-fabric. These tests change it the way an operator would (testbed
add-tenant, `jakiroctl --etcd URL apply`) and check what tenants see: a vNIC that joins is
reachable from every host, one that leaves is not, one that moves is reached at its new
host; with etcd dead forwarding goes on and status says so, and etcd back converges.
"""

import json
import os
import re
import subprocess
import time

from conftest import (JAKIROCTL, RUN_DIR, T1, T2, T4, TESTBED, jakiroctl, ns, ns_bg, run,
                      wait_until)

TESTBED_ARGS = ["--hosts", "3", "--control", "etcd"]
ETCD_URL = "http://198.18.0.250:2379"


def etcdctl(*args, check=True):
    """jakiroctl --etcd, from jk-fabric (where etcd's address is)."""
    return ns("jk-fabric", JAKIROCTL, "--etcd", ETCD_URL, *args, timeout=20, check=check)


def control_plane(host):
    return json.loads(jakiroctl(host, "status", "--json").stdout)["control_plane"]


def add_tenant(name, host, vpc, ip, mac):
    run(TESTBED, "add-tenant", name, "--host", host, "--vpc", vpc, "--ip", ip, "--mac", mac,
        timeout=60, env=dict(os.environ, JAKIROCTL=JAKIROCTL))


def reachable(src, dst, count=1, wait_s=1):
    return ns(src, "ping", "-c", count, "-i", "0.2", "-W", wait_s, dst, timeout=count * 3 + 5,
              check=False).returncode == 0


def ports(host):
    return {p["role"] for p in json.loads(jakiroctl(host, "status", "--json").stdout)["ports"]}


def etcd_pid():
    for pid in run("ip", "netns", "pids", "jk-fabric").stdout.split():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "etcd":
                    return int(pid)
        except OSError:
            pass
    return None


def test_every_host_starts_with_the_cluster_from_etcd(testbed):
    # No peers in any YAML: h1 learnt t2 and t4 (on h2) from etcd.
    assert "peers" not in (RUN_DIR / "h1.yaml").read_text()
    assert reachable(T1, "198.19.1.2", count=2)
    cp = control_plane("h1")
    assert cp["connected"] and cp["local_vnics"] == 3 and cp["peers"] == 2, cp
    listed = etcdctl("get", "vnics").stdout
    assert re.search(r"^t2\s+blue\s+198\.19\.1\.2/24\s+2001:2::1:2/64\s+\S+\s+h2\s", listed,
                     re.M), listed


def test_a_vnic_that_joins_on_h3_is_reachable_from_h1_and_h2_but_not_from_red(testbed):
    patched = control_plane("h1")["patched_publications"]
    add_tenant("t19", 3, "blue", "198.19.1.19", "02:00:c6:13:01:19")
    t0 = time.monotonic()
    wait_until(lambda: reachable(T1, "198.19.1.19", wait_s=0.2), 10, "t19 reachable from h1")
    converged_s = time.monotonic() - t0
    print(f"t19 reachable from h1 {converged_s:.2f} s after add-tenant returned")
    assert converged_s < 2.0
    assert reachable(T2, "198.19.1.19", count=2)
    assert not reachable(T4, "198.19.1.19", count=2)  # red, another VPC
    assert "t19" in ports("h3")
    # Another host's vNIC: h1 patched its snapshot (the VLT entry, blue's group members and the
    # ACLs of its vNICs whose rules name them) rather than building its tables again.
    assert control_plane("h1")["patched_publications"] > patched


def test_a_vnic_that_leaves_is_gone_from_its_host_and_unreachable(testbed, tmp_path):
    cluster = (RUN_DIR / "cluster.yaml").read_text()
    without = "".join(line + "\n" for line in cluster.splitlines() if "name: t19," not in line)
    path = tmp_path / "cluster-without-t19.yaml"
    path.write_text(without)
    out = etcdctl("apply", str(path)).stdout
    assert "1 deleted" in out, out
    wait_until(lambda: "t19" not in ports("h3"), 5, "h3 to close t19's port")
    wait_until(lambda: control_plane("h1")["peers"] == 2, 5, "h1 to forget t19")
    assert not reachable(T1, "198.19.1.19", count=2)
    # Joining again (as the test bed knows it) brings it back.
    etcdctl("apply", str(RUN_DIR / "cluster.yaml"))
    wait_until(lambda: reachable(T1, "198.19.1.19", wait_s=0.2), 5, "t19 back")


def test_a_vnic_that_moves_from_h1_to_h3_is_reached_at_h3(testbed):
    # Same name, VPC, IP and MAC, another host: the record's host changes in etcd.
    patched = control_plane("h2")["patched_publications"]
    add_tenant("t5", 3, "blue", "198.19.1.3", "02:00:c6:13:01:03")
    wait_until(lambda: "t5" in ports("h3") and "t5" not in ports("h1"), 5,
               "t5's port to move from h1 to h3")
    wait_until(lambda: reachable(T2, "198.19.1.3", wait_s=0.2), 5, "t5 reachable at h3")
    # The answer comes from the new namespace: it sees t2's pings, the old one does not.
    before = int(ns("jk-h3-t5", "cat", "/sys/class/net/eth0/statistics/rx_packets").stdout)
    assert reachable(T2, "198.19.1.3", count=3)
    after = int(ns("jk-h3-t5", "cat", "/sys/class/net/eth0/statistics/rx_packets").stdout)
    assert after - before >= 3
    # For h2 a peer moved from h1 to h3: its VLT entry was patched to the new host.
    assert control_plane("h2")["patched_publications"] > patched
    # h1 itself reaches it over the underlay now.
    assert reachable(T1, "198.19.1.3", count=2)


def cluster_with(tmp_path, name, vpcs=(), groups=(), vnics=()):
    """The test bed's cluster (as it stands) plus extra entries, written for apply."""
    extra = {"vpcs:": list(vpcs), "security_groups:": list(groups), "vnics:": list(vnics)}
    out = []
    for line in (RUN_DIR / "cluster.yaml").read_text().splitlines():
        out.append(line)
        out += [f"  - {entry}" for entry in extra.get(line, [])]
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n")
    return path


GREEN_VPC = "{name: green, vni: 300}"
GREEN_GROUPS = ["{name: default, vpc: green, ingress: [{proto: any, from_group: default}]}",
                "{name: app, vpc: green, ingress: [{proto: any, from_group: db}]}",
                "{name: db, vpc: green}"]
# Two vNICs of green on h3, g1 in its default group and d1 only in db.
GREEN_ON_H3 = ['{name: g1, vpc: green, ip: 198.19.3.1/24, mac: "02:00:c6:13:03:01", host: h3, '
               "security_groups: [default]}",
               '{name: d1, vpc: green, ip: 198.19.3.2/24, mac: "02:00:c6:13:03:02", host: h3, '
               "security_groups: [db]}"]
# h1's first vNIC of green, in group app, whose rule admits group db (whose members are all on
# h3). Its port never opens (no veth): a record is all the interest needs.
G2_ON_H1 = ('{name: g2, vpc: green, ip: 198.19.3.3/24, mac: "02:00:c6:13:03:03", host: h1, '
            "security_groups: [app]}")


def test_vnics_of_a_vpc_a_host_does_not_serve_never_reach_it(testbed, tmp_path):
    before = control_plane("h1")
    etcdctl("apply", str(cluster_with(tmp_path, "green-on-h3.yaml", [GREEN_VPC], GREEN_GROUPS,
                                      GREEN_ON_H3)))
    # h3 has green's vNICs now (the records went out; their ports have no veth)...
    wait_until(lambda: "g1" in control_plane("h3")["waiting_vnics"], 5, "h3 to take g1")
    time.sleep(0.5)
    # ...and h1, which has no vNIC in green, holds none of its records.
    after = control_plane("h1")
    assert after["records"] == before["records"], (before["records"], after["records"])
    assert after["peers"] == before["peers"], (before["peers"], after["peers"])
    assert sorted(after["vpcs"]) == ["blue", "red"], after["vpcs"]
    assert "green" in control_plane("h3")["vpcs"]
    assert not any(g.startswith("green/") for g in after["group_members"]), after
    assert not after["rejected"], after["rejected"]


def test_the_first_local_vnic_of_a_vpc_pulls_it_in_with_the_members_of_remote_groups(
        testbed, tmp_path):
    before = control_plane("h1")
    etcdctl("apply", str(cluster_with(tmp_path, "green-on-h1.yaml", [GREEN_VPC], GREEN_GROUPS,
                                      GREEN_ON_H3 + [G2_ON_H1])))
    wait_until(lambda: "green" in control_plane("h1")["vpcs"], 5, "h1 to follow green")
    cp = control_plane("h1")
    assert cp["peers"] == before["peers"] + 2, cp  # g1 and d1, at h3
    assert "g2" in cp["waiting_vnics"], cp  # local: its port has no veth
    # g2's rule names group db: its member d1, on h3 only, is in h1's tables.
    assert cp["group_members"]["green/db"] == 1, cp["group_members"]
    assert not cp["rejected"], cp["rejected"]


def test_the_last_local_vnic_leaving_a_vpc_drops_it(testbed, tmp_path):
    etcdctl("apply", str(cluster_with(tmp_path, "green-on-h1.yaml", [GREEN_VPC], GREEN_GROUPS,
                                      GREEN_ON_H3 + [G2_ON_H1])))
    wait_until(lambda: "green" in control_plane("h1")["vpcs"], 5, "h1 to follow green")
    with_green = control_plane("h1")
    etcdctl("apply", str(cluster_with(tmp_path, "green-on-h3.yaml", [GREEN_VPC], GREEN_GROUPS,
                                      GREEN_ON_H3)))
    wait_until(lambda: "green" not in control_plane("h1")["vpcs"], 5, "h1 to drop green")
    cp = control_plane("h1")
    assert cp["peers"] == with_green["peers"] - 2, cp
    assert not any(g.startswith("green/") for g in cp["group_members"]), cp
    assert "g2" not in cp["waiting_vnics"], cp
    assert "green" in control_plane("h3")["vpcs"]  # h3 still serves it


def test_a_host_cut_off_past_a_compaction_reads_its_interest_again(testbed, tmp_path):
    etcdctl("apply", str(cluster_with(tmp_path, "green-on-h3.yaml", [GREEN_VPC], GREEN_GROUPS,
                                      GREEN_ON_H3)))
    # h1 loses its management link: its watch ends, and its revision falls behind.
    ns("jk-h1", "ip", "link", "set", "mg0", "down")
    try:
        wait_until(lambda: not control_plane("h1")["connected"], 10, "h1 to notice etcd is gone")
        etcdctl("apply", str(cluster_with(tmp_path, "green-on-h1.yaml", [GREEN_VPC],
                                          GREEN_GROUPS, GREEN_ON_H3 + [G2_ON_H1])))
        # A second revision, so that compacting up to it removes the one h1 resumes from.
        etcdctl("apply", str(cluster_with(tmp_path, "green-on-h1-qos.yaml", [GREEN_VPC],
                                          GREEN_GROUPS, GREEN_ON_H3 +
                                          [G2_ON_H1[:-1] + ", qos: {rate: 1Gbit}}"])))
        out = ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, "endpoint", "status", "-w",
                 "json", env=dict(os.environ, ETCDCTL_API="3")).stdout
        revision = json.loads(out)[0]["Status"]["header"]["revision"]
        ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, "compact", str(revision),
           env=dict(os.environ, ETCDCTL_API="3"))
    finally:
        ns("jk-h1", "ip", "link", "set", "mg0", "up")
    # Back: the revision to resume from is gone, so h1 reads its interest whole, green with it.
    wait_until(lambda: "green" in control_plane("h1")["vpcs"], 15, "h1 to resync into green")
    cp = control_plane("h1")
    assert cp["connected"] and cp["revision_applied"] >= revision, cp
    assert cp["group_members"]["green/db"] == 1, cp["group_members"]
    assert "etcd_compacted" in (RUN_DIR / "h1.log").read_text()
    # Back to the test bed's own cluster.
    etcdctl("apply", str(RUN_DIR / "cluster.yaml"))
    wait_until(lambda: "green" not in control_plane("h1")["vpcs"], 5, "h1 to drop green")


def test_etcd_death_loses_no_packet_and_etcd_back_converges(testbed):
    pid = etcd_pid()
    assert pid, "no etcd in jk-fabric"
    cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
    with ns_bg(T1, "ping", "-c", "400", "-i", "0.02", "-q", "198.19.1.2",
               stdout=subprocess.PIPE, text=True) as pinger:
        time.sleep(0.5)
        os.kill(pid, 9)
        wait_until(lambda: not control_plane("h1")["connected"], 5, "h1 to notice etcd is gone")
        status = jakiroctl("h1", "status").stdout
        assert re.search(r"etcd .*DISCONNECTED.*since .*last revision \d+", status), status
        cp = control_plane("h2")
        assert not cp["connected"] and cp["local_vnics"] == 2, cp  # the last state stays
        # etcd comes back with its data: every host resumes its watch.
        with open(RUN_DIR / "etcd-restarted.log", "wb") as log:
            subprocess.Popen(["ip", "netns", "exec", "jk-fabric", *cmdline],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                             start_new_session=True)
        for host in ("h1", "h2", "h3"):
            wait_until(lambda: control_plane(host)["connected"], 10, f"{host} to reconnect")
        out, _ = pinger.communicate(timeout=30)
    loss = re.search(r"([\d.]+)% packet loss", out)
    assert loss and float(loss.group(1)) == 0.0, out
    # A change made after the restart reaches every host.
    add_tenant("t20", 2, "blue", "198.19.1.20", "02:00:c6:13:01:20")
    wait_until(lambda: reachable(T1, "198.19.1.20", wait_s=0.2), 5, "t20 after the restart")


def test_a_host_whose_lease_expires_is_stale_but_its_vnics_stay_reachable(testbed):
    # h3's jakirod dies without a word: nobody keeps its lease alive (TTL 10 s).
    pid = int((RUN_DIR / "h3.pid").read_text())
    peers = control_plane("h1")["peers"]
    os.kill(pid, 9)
    wait_until(lambda: control_plane("h1")["stale_hosts"] == ["h3"], 20, "h3 to turn stale")
    assert control_plane("h1")["peers"] == peers  # t19 and t5 are still in h1's tables
    listed = etcdctl("get", "hosts").stdout
    assert re.search(r"^h3\s+198\.18\.0\.3\s+stale", listed, re.M), listed


def test_a_jakirod_stops_promptly_while_etcd_is_down(testbed):
    """An operator stops a host (systemctl stop: SIGTERM) while etcd is unreachable: jakirod must
    not wait for etcd. A watch blocked opening a stream to the dead etcd would be out of reach of
    the stop, and the daemon would never exit (the test bed's SIGKILL would leave its control
    socket)."""
    pid = etcd_pid()
    if pid:
        os.kill(pid, 9)
    wait_until(lambda: not control_plane("h2")["connected"], 5, "h2 to notice etcd is gone")
    time.sleep(1)  # h2 is retrying its watch now
    jakirod = int((RUN_DIR / "h2.pid").read_text())
    socket = "/run/jakiro/h2.sock"
    assert os.path.exists(socket)
    os.kill(jakirod, 15)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and os.path.exists(f"/proc/{jakirod}"):
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{jakirod}"), "jakirod still runs 10 s after SIGTERM"
    assert not os.path.exists(socket), "a clean stop removes the control socket"
