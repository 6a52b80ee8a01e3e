"""The sealed overlay with the control plane in etcd (`tools/testbed up --control etcd
--encrypt`): no host YAML lists another host's overlay key; each jakirod registers its public
key in its etcd host record, and the others learn it there and seal to it."""

import json

import pytest

from conftest import IP, RUN_DIR, T1, T2, jakiroctl, ping, wait_until

TESTBED_ARGS = ["--control", "etcd", "--encrypt"]
pytestmark = pytest.mark.usefixtures("testbed")

H1_IP, H2_IP = "198.18.0.1", "198.18.0.2"


def overlay_peer(host, peer_ip):
    status = json.loads(jakiroctl(host, "status", "--json").stdout)
    return next((p for p in status["overlay"]["peers"] if p["host"] == peer_ip), None)


def test_hosts_learn_each_others_keys_from_etcd_and_seal():
    assert "public_key" not in (RUN_DIR / "h1.yaml").read_text()
    # The uplink's worker takes a learned key at its next burst; until both hosts have the
    # other's key, `required` sends nothing (unsealed_no_key).
    wait_until(lambda: ping(T1, IP[T2], count=1), 15,
               "t1 to reach t2 once both hosts learnt the other's key from etcd")
    assert overlay_peer("h1", H2_IP)["sealed"] and overlay_peer("h2", H1_IP)["sealed"]
    assert overlay_peer("h1", H2_IP)["frames_sealed"] > 0
    assert overlay_peer("h2", H1_IP)["frames_opened"] > 0
    assert overlay_peer("h2", H1_IP)["auth_failed"] == 0
