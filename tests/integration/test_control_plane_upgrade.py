"""A cluster written before vNIC keys were grouped per VPC, upgraded host by host.

`tools/testbed up --hosts 2 --control etcd`, then etcd is brought back to what a jakiroctl and
jakirods from before per-VPC keys left there: every vNIC under /jakiro/v1/vnics/<vnic> only, no
homes/ index, no readers/ keys, no schema marker, and a third host h3 registered by such a
jakirod. The hosts' jakirods run this build; the jakirods from before are simulated by what
they read: the old key parser kept a vNIC key of exactly one segment after vnics/ and ignored
every other (old_reader_vnics below; building the old jakirod from git inside the test would
cost a second full build). Throughout, t1 (h1) pings t2 (h2) and loses nothing: no host loses a
vNIC at any step of the upgrade.
"""

import json
import os
import re
import signal
import subprocess

from conftest import JAKIROCTL, RUN_DIR, T1, TESTBED, jakiroctl, ns, ns_bg, run, wait_until

TESTBED_ARGS = ["--hosts", "2", "--control", "etcd"]
ETCD_URL = "http://198.18.0.250:2379"
ROOT = "/jakiro/v1/"
ETCD_ENV = dict(os.environ, ETCDCTL_API="3")


def etcd(*args, check=True):
    """etcd's own client, for what a jakiroctl from before would have written."""
    return ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, *args, timeout=20, check=check,
              env=ETCD_ENV)


def jakiroctl_etcd(*args, check=True):
    return ns("jk-fabric", JAKIROCTL, "--etcd", ETCD_URL, *args, timeout=30, check=check)


def keys_values(prefix):
    lines = etcd("get", "--prefix", prefix).stdout.splitlines()
    return dict(zip(lines[0::2], lines[1::2]))


def revision():
    out = etcd("get", ROOT + "hosts/", "--prefix", "-w", "json").stdout
    return int(re.search(r'"revision":(\d+)', out).group(1))


def old_reader_vnics():
    """The vNICs a jakirod from before per-VPC keys sees: only /jakiro/v1/vnics/<vnic>."""
    out = {}
    for key, value in keys_values(ROOT + "vnics/").items():
        name = key[len(ROOT + "vnics/"):]
        if "/" not in name:
            out[name] = value
    return out


def per_vpc_vnics():
    return {key.rsplit("/", 1)[1] for key in keys_values(ROOT + "vnics/")
            if key[len(ROOT + "vnics/"):].count("/") == 1}


def control_plane(host):
    return json.loads(jakiroctl(host, "status", "--json").stdout)["control_plane"]


def reachable(src, dst):
    return ns(src, "ping", "-c", 1, "-i", "0.2", "-W", 0.3, dst, timeout=5,
              check=False).returncode == 0


TENANTS = {"t1", "t2", "t3", "t4", "t5"}


def test_a_cluster_of_legacy_keys_is_upgraded_host_by_host_and_no_host_loses_a_vnic(testbed):
    # This build's jakirods say, when they register, that they read per-VPC keys; a new
    # cluster (the test bed's first apply) is marked migrated.
    readers = keys_values(ROOT + "readers/")
    assert set(readers) == {ROOT + "readers/h1", ROOT + "readers/h2"}, readers
    assert keys_values(ROOT + "schema"), "the first apply of a new cluster marks it"

    # Pings every 20 ms through the whole upgrade below (at most 60 s of them).
    with ns_bg(T1, "ping", "-c", "3000", "-i", "0.02", "-q", "198.19.1.2",
               stdout=subprocess.PIPE, text=True) as pinger:
        # ---- the cluster as a jakiroctl and jakirods from before per-VPC keys left it; each
        # step keeps every vNIC under some key this build's jakirods read.
        for key, value in keys_values(ROOT + "vnics/").items():
            etcd("put", ROOT + "vnics/" + key.rsplit("/", 1)[1], value)
        etcd("put", ROOT + "hosts/h3", "{name: h3, underlay_ip: 198.18.0.3}")
        etcd("del", "--prefix", ROOT + "readers/")
        etcd("del", ROOT + "schema")
        wait_until(lambda: "schema_changed" in (RUN_DIR / "h1.log").read_text(), 10,
                   "h1 to read its interest again with the legacy keys")
        for prefix in ("vnics/blue/", "vnics/red/", "homes/"):
            etcd("del", "--prefix", ROOT + prefix)
        assert set(old_reader_vnics()) == TENANTS and not per_vpc_vnics()
        # This build's jakirod on a cluster nobody migrated yet: it follows the legacy keys.
        wait_until(lambda: control_plane("h1")["revision_applied"] >= revision(), 10,
                   "h1 to apply the legacy records")
        assert control_plane("h1")["peers"] == 2 and control_plane("h2")["peers"] == 3
        assert control_plane("h1")["legacy_keys"]
        assert "not migrated yet" in jakiroctl("h1", "status").stdout
        assert reachable(T1, "198.19.1.2")

        # ---- migrate: a dry run writes nothing; a record that cannot be placed refuses it all.
        before = revision()
        out = jakiroctl_etcd("migrate", "--dry-run").stdout
        assert "dry run, nothing written" in out and f"put {ROOT}vnics/blue/t2" in out, out
        assert revision() == before
        etcd("put", ROOT + "vnics/stray", "{name: stray, ip: 198.19.1.99/24, host: h2}")
        refused = jakiroctl_etcd("migrate", check=False)
        assert refused.returncode == 1, refused
        assert f"{ROOT}vnics/stray: vpc" in refused.stderr, refused.stderr
        assert not per_vpc_vnics()
        etcd("del", ROOT + "vnics/stray")

        # ---- migrate while every host still reads only legacy keys: both forms, in step.
        out = jakiroctl_etcd("migrate").stdout
        assert "5 vNICs written under their VPC" in out, out
        assert re.search(r"migration in progress: h1, h2, h3 still read only", out), out
        assert per_vpc_vnics() == TENANTS and set(old_reader_vnics()) == TENANTS
        assert set(keys_values(ROOT + "homes/")) == {
            ROOT + "homes/h1/blue/t1", ROOT + "homes/h1/blue/t5", ROOT + "homes/h1/red/t3",
            ROOT + "homes/h2/blue/t2", ROOT + "homes/h2/red/t4"}
        assert "nothing to change" in jakiroctl_etcd("migrate").stdout  # idempotent

        # ---- a vNIC added meanwhile (this build's apply) reaches old and new readers alike.
        run(TESTBED, "add-tenant", "t19", "--host", "2", "--vpc", "blue", "--ip", "198.19.1.19",
            "--mac", "02:00:c6:13:01:19", timeout=60, env=dict(os.environ, JAKIROCTL=JAKIROCTL))
        assert "t19" in old_reader_vnics() and "t19" in per_vpc_vnics()
        wait_until(lambda: reachable(T1, "198.19.1.19"), 10, "t19 reachable from h1")

        # ---- h1 and h2 upgraded (as their jakirod writes it when it registers); h3 is not.
        for host in ("h1", "h2"):
            etcd("put", ROOT + "readers/" + host, readers[ROOT + "readers/" + host])
        out = jakiroctl_etcd("migrate").stdout
        assert re.search(r"migration in progress: h3 still read only", out), out
        assert "t19" in old_reader_vnics()

        # ---- h3 upgraded: the legacy keys go and the marker comes, in one transaction.
        etcd("put", ROOT + "readers/h3", "{name: h3, vnic_keys: per_vpc}")
        out = jakiroctl_etcd("migrate").stdout
        assert "6 legacy keys removed" in out and "migration complete" in out, out
        assert not old_reader_vnics() and keys_values(ROOT + "schema")
        assert per_vpc_vnics() == TENANTS | {"t19"}
        assert "migration complete" in jakiroctl_etcd("migrate").stdout
        wait_until(lambda: control_plane("h1")["revision_applied"] >= revision(), 10,
                   "h1 to follow the migrated cluster")
        assert control_plane("h1")["peers"] == 3, control_plane("h1")
        assert not control_plane("h1")["legacy_keys"]
        assert reachable(T1, "198.19.1.19")
        # The upgrade is over: ping stops and prints its count (it would run 60 s otherwise).
        pinger.send_signal(signal.SIGINT)
        out, _ = pinger.communicate(timeout=30)
    counts = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    assert counts, out
    sent, answered = int(counts.group(1)), int(counts.group(2))
    # None lost; the one echo still on its way when ping was stopped is not a loss.
    assert sent >= 10 and answered >= sent - 1, out
