"""jakirod speaks standard VXLAN: a Linux kernel VTEP (jk-kvtep, vxlan100, 198.19.1.9 in
VPC blue) and tenant t1 behind jakirod on h1 exchange ICMP and TCP both ways."""

import pytest

from conftest import IP, T1, iperf3_gbps, iperf3_server, ping

TESTBED_ARGS = ["--kernel-vtep"]
KVTEP, KVTEP_IP = "jk-kvtep", "198.19.1.9"

pytestmark = pytest.mark.usefixtures("testbed")


def test_tenant_pings_kernel_vtep():
    assert ping(T1, KVTEP_IP, count=3)


def test_kernel_vtep_pings_tenant():
    assert ping(KVTEP, IP[T1], count=3)


@pytest.mark.parametrize("client,server,server_ip", [(T1, KVTEP, KVTEP_IP), (KVTEP, T1, IP[T1])],
                         ids=["t1_to_kernel", "kernel_to_t1"])
def test_tcp_transfer_with_kernel_vtep(client, server, server_ip):
    with iperf3_server(server):
        gbps = iperf3_gbps(client, server_ip, seconds=3)
    print(f"\niperf3 {client} -> {server}: {gbps:.2f} Gbit/s")
    assert gbps > 0
