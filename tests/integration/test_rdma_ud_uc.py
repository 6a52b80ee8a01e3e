"""The unreliable transports and the atomics, end to end with unmodified Debian programs:
ibverbs-utils' ibv_ud_pingpong and ibv_uc_pingpong, perftest over UD (ib_send_bw/_lat -c UD)
and UC (ib_write_bw, ib_send_bw -c UC), ib_atomic_bw/_lat with both atomic operations, across
hosts (t1 on h1 <-> t2 on h2) and on one host (t1 <-> t5). A UD datagram is checked against the
vNIC's security groups one by one: with the rdma rule gone, nothing arrives and jakiroctl
counts the refusals.
"""

import re

import pytest

from conftest import IP
from test_rdma_rc import PLACEMENTS, VNIC, _ports, perftest_result, run_pair

pytestmark = pytest.mark.usefixtures("testbed")


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
