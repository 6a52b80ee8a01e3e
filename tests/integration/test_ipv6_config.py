"""A dual-stack vNIC: its IPv6 address (YAML `ip6:`) is checked, carried to jakirod and shown,
and the test bed's tenants have theirs, configured statically, with nothing autoconfigured."""

import ipaddress
import json
import subprocess

import pytest

from conftest import IP6, JAKIROD, MAC, T1, T2, T3, T4, T5, jakiroctl, ns

TENANTS = (T1, T2, T5, T3, T4)
HOST_OF = {T1: "h1", T5: "h1", T3: "h1", T2: "h2", T4: "h2"}
VNIC_OF = {T1: "t1", T2: "t2", T5: "t5", T3: "t3", T4: "t4"}

BAD = """\
host:
  name: hbad
  underlay: {port: "net_af_packet0,iface=jk-none0", ip: 198.18.0.99, mtu: 1500}
vpcs:
  - {name: blue, vni: 100}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, ip6: IP6, \
port: "net_af_packet1,iface=jk-none1"}
"""


@pytest.mark.parametrize("ip6, words", [("2001:2::1::1/64", "is not an IPv6 address/prefix"),
                                        ("ff02::1/64", "is a multicast address"),
                                        ("fe80::1/64", "is link-local")])
def test_jakirod_refuses_an_ip6_that_is_not_a_vnic_address_naming_line_and_field(
        ip6, words, tmp_path):
    path = tmp_path / "bad-ip6.yaml"
    path.write_text(BAD.replace("IP6", ip6))
    r = subprocess.run([JAKIROD, "--check-config", path], capture_output=True, text=True,
                       timeout=10)
    print(r.stderr.strip())
    assert r.returncode == 78
    assert f"bad-ip6.yaml:7: vnics[0].ip6: '{ip6}'" in r.stderr
    assert words in r.stderr


def test_jakirod_takes_a_dual_stack_vnic(tmp_path):
    path = tmp_path / "good-ip6.yaml"
    path.write_text(BAD.replace("IP6", "2001:2::1:1/64"))
    r = subprocess.run([JAKIROD, "--check-config", path], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 0, r.stderr


@pytest.mark.usefixtures("testbed")
def test_jakiroctl_status_shows_each_vnics_ipv6_address():
    for host in ("h1", "h2"):
        status = json.loads(jakiroctl(host, "status", "--json").stdout)
        shown = {v["name"]: v["ip6"] for v in status["vnics"]}
        expected = {VNIC_OF[t]: IP6[t] for t in TENANTS if HOST_OF[t] == host}
        assert shown == expected, status["vnics"]


@pytest.mark.usefixtures("testbed")
@pytest.mark.parametrize("tenant", TENANTS)
def test_a_tenant_has_its_planned_ipv6_address_its_link_local_and_nothing_autoconfigured(tenant):
    out = json.loads(ns(tenant, "ip", "-j", "-6", "addr", "show", "dev", "eth0").stdout)
    addresses = {(a["local"], a["prefixlen"]) for a in out[0]["addr_info"]}
    # EUI-64 from the vNIC's MAC (RFC 4291 appendix A): the universal/local bit flipped.
    mac = bytes.fromhex(MAC[tenant].replace(":", ""))
    eui = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:]
    link_local = str(ipaddress.IPv6Address(b"\xfe\x80" + bytes(6) + eui))
    assert addresses == {(IP6[tenant], 64), (link_local, 64)}, out
    routes = ns(tenant, "ip", "-6", "route", "show", "dev", "eth0").stdout
    assert "default" not in routes, routes  # nothing learnt from a router advertisement
    for key in ("accept_ra", "autoconf", "router_solicitations", "accept_dad"):
        value = ns(tenant, "sysctl", "-n", f"net.ipv6.conf.eth0.{key}").stdout.strip()
        assert value == "0", f"{tenant}: net.ipv6.conf.eth0.{key} = {value}"
