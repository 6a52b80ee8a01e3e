"""The unreliable transports and the atomics, end to end with unmodified Debian programs:
ibverbs-utils' ibv_ud_pingpong and ibv_uc_pingpong, perftest over UD (ib_send_bw/_lat -c UD)
and UC (ib_write_bw, ib_send_bw -c UC), ib_atomic_bw/_lat with both atomic operations, across
hosts (t1 on h1 <-> t2 on h2), on one host (t1 <-> t5) and on one vNIC (two programs in t1). A UD
datagram is checked against the vNIC's security groups one by one: with the rdma rule gone,
nothing arrives and jakiroctl counts the refusals. Two processes on one vNIC connect their QPs to
each other (loopback, as on any RNIC port).
"""

import time

import pytest
import yaml

import test_rdma_rc
from conftest import IP, RUN_DIR, T1, T2, drops_matching, jakiroctl
from test_rdma_rc import PLACEMENTS, VNIC, _ports, client, perftest_result, run_pair, server

pytestmark = pytest.mark.usefixtures("testbed")

# Every test here also runs with both programs in t1, their QPs talking through t1's own
# address (run_pair looks placements up in the RC module, whose own tests are not affected).
test_rdma_rc.PLACEMENTS["same_vnic"] = (T1, T1)


# ---------------------------------------------------------------- ibverbs-utils

@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("events", [False, True], ids=["poll", "events"])
@pytest.mark.parametrize("size", [1, 1024])
def test_ibv_ud_pingpong_exchanges_datagrams_through_address_handles(placement, events, size,
                                                                     tmp_path):
    """ibv_ud_pingpong: address handles from the peer's GID, a 40-byte GRH ahead of every
    payload, Q_Key 0x11111111; 1024 bytes is the path MTU of a 1500-byte underlay."""
    port = next(_ports)
    args = ["-g", "0", "-s", size, "-n", 50, "-p", port, "-c"] + (["-e"] if events else [])
    srv_tenant = PLACEMENTS[placement][0]
    cli, srv_out = run_pair(placement, ["ibv_ud_pingpong", *args],
                            ["ibv_ud_pingpong", *args, IP[srv_tenant]], port, tmp_path)
    assert "invalid data" not in (cli.stderr + srv_out).lower(), cli.stderr + srv_out
    assert "50 iters in" in cli.stdout, cli.stdout


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("size", [1, 4096, 65536])
def test_ibv_uc_pingpong_moves_multi_packet_messages_without_acks(placement, size, tmp_path):
    port = next(_ports)
    args = ["-g", "0", "-s", size, "-n", 50, "-p", port, "-c"]
    srv_tenant = PLACEMENTS[placement][0]
    cli, srv_out = run_pair(placement, ["ibv_uc_pingpong", *args],
                            ["ibv_uc_pingpong", *args, IP[srv_tenant]], port, tmp_path)
    assert "invalid data" not in (cli.stderr + srv_out).lower(), cli.stderr + srv_out
    assert "50 iters in" in cli.stdout, cli.stdout


# ---------------------------------------------------------------- perftest

PERFTEST = {
    # id: (tool, extra args, size, iterations)
    "send_bw_ud": ("ib_send_bw", ["-c", "UD"], 1024, 500),
    "send_lat_ud": ("ib_send_lat", ["-c", "UD"], 2, 200),
    "write_bw_uc": ("ib_write_bw", ["-c", "UC"], 65536, 200),
    "send_bw_uc": ("ib_send_bw", ["-c", "UC"], 4096, 200),
    "write_lat_uc": ("ib_write_lat", ["-c", "UC"], 2, 200),
    "atomic_bw_fetch_add": ("ib_atomic_bw", ["-A", "FETCH_AND_ADD"], 8, 500),
    "atomic_bw_cmp_swap": ("ib_atomic_bw", ["-A", "CMP_AND_SWAP"], 8, 500),
    "atomic_lat_fetch_add": ("ib_atomic_lat", ["-A", "FETCH_AND_ADD"], 8, 200),
    "atomic_lat_cmp_swap": ("ib_atomic_lat", ["-A", "CMP_AND_SWAP"], 8, 200),
}


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("case", PERFTEST)
def test_perftest_runs_over_each_transport(case, placement, tmp_path):
    tool, extra, size, iters = PERFTEST[case]
    srv_tenant, cli_tenant = PLACEMENTS[placement]
    port = next(_ports)
    common = ["-x", 0, "-F", "-s", size, "-n", iters, "-p", port, *extra]
    cli, srv_out = run_pair(placement,
                            [tool, "-d", f"jakiro_{VNIC[srv_tenant]}", *common],
                            [tool, "-d", f"jakiro_{VNIC[cli_tenant]}", *common, IP[srv_tenant]],
                            port, tmp_path)
    header, values = perftest_result(cli.stdout)
    if header is None:
        header, values = perftest_result(srv_out)
    assert header is not None, f"no result line in {tool}'s output:\n{cli.stdout}\n{srv_out}"
    print(f"\n{case} {placement}: {header}\n{case} {placement}: {' '.join(values)}")
    assert int(values[0]) == size and int(values[1]) == iters
    if tool.endswith("_bw"):
        assert float(values[3]) > 0, "average bandwidth is 0"


# ---------------------------------------------------------------- loopback on one vNIC


def test_two_processes_on_one_vnic_connect_rc_qps(tmp_path):
    tool, size = "ibv_rc_pingpong", 65536
    port = next(_ports)
    args = ["-g", "0", "-s", size, "-n", 50, "-p", port, "-c"]
    cli, srv_out = run_pair("same_vnic", [tool, *args], [tool, *args, IP[T1]], port, tmp_path)
    assert "invalid data" not in (cli.stderr + srv_out).lower(), cli.stderr + srv_out
    assert "50 iters in" in cli.stdout, cli.stdout


# ---------------------------------------------------------------- security groups per datagram

HOSTS = ("h1", "h2")
# t2 admits TCP from the blue tenants (the programs' side channel) and nothing else: no rdma.
TCP_ONLY = {"name": "tcp_only", "vpc": "blue",
            "ingress": [{"proto": "tcp", "from_group": "default"}]}


def apply_members(members, groups=()):
    for host in HOSTS:
        cfg = yaml.safe_load((RUN_DIR / f"{host}.yaml").read_text())
        cfg["security_groups"] += list(groups)
        for entry in cfg["vnics"] + cfg["peers"]:
            name = entry.get("name") or {"198.19.1.2": "t2"}.get(entry["ip"], "")
            if entry.get("vpc") == "blue" and name in members:
                entry["security_groups"] = members[name]
        path = RUN_DIR / f"{host}-ud-policy.yaml"
        path.write_text(yaml.safe_dump(cfg, default_flow_style=None, sort_keys=False))
        jakiroctl(host, "apply", path)


def test_ud_datagrams_are_checked_against_the_security_groups(tmp_path):
    """With no rdma rule into t2, t1's datagrams are refused at t2's host one by one (the
    side-channel TCP still connects); with the test bed's policy back, the same run passes."""
    before = drops_matching("h2", "sg_denied_ingress")
    port = next(_ports)
    args = ["-g", "0", "-s", 64, "-n", 20, "-p", port]
    try:
        apply_members({"t2": ["tcp_only"]}, [TCP_ONLY])
        with server(T2, ["ibv_ud_pingpong", *args], port, tmp_path) as srv:
            cli = client(T1, ["ibv_ud_pingpong", *args, IP[T2]], timeout=8)
            print(f"\n{cli.stdout}{cli.stderr}{srv.output()}")
            assert "iters in" not in cli.stdout, "datagrams got through a policy without rdma"
    finally:
        for host in HOSTS:
            jakiroctl(host, "apply", RUN_DIR / f"{host}.yaml")
    refused = drops_matching("h2", "sg_denied_ingress") - before
    assert refused > 0, "no refused datagram was counted on h2"
    time.sleep(0.5)
    port = next(_ports)
    args = ["-g", "0", "-s", 64, "-n", 20, "-p", port]
    cli, _ = run_pair("cross_host", ["ibv_ud_pingpong", *args],
                      ["ibv_ud_pingpong", *args, IP[T2]], port, tmp_path)
    assert "20 iters in" in cli.stdout, cli.stdout
