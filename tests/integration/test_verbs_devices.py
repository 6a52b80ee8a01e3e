"""The RDMA face, device discovery: unmodified ibverbs programs run with jakiro-run in a tenant
namespace see one RoCE v2 device for their vNIC, described by jakirod over its verbs socket;
verbs the engine does not have yet (UD, SRQ) fail cleanly instead of crashing."""

import os
import signal
from pathlib import Path

import pytest

from conftest import IP, JAKIROD, MAC, PYTHON, SRC, T1, T2, T3, T5, ns, run

pytestmark = pytest.mark.usefixtures("testbed")

JAKIRO_RUN = SRC / "tools" / "jakiro-run"
VNIC = {T1: "t1", T2: "t2", T3: "t3", T5: "t5"}


def shim_env():
    """The build tree's shim beside the jakirod under test (meson points JAKIROD into the
    build tree); without one, jakiro-run finds the installed library itself."""
    env = dict(os.environ)
    lib = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
    if lib.exists():
        env["JAKIRO_VERBS_LIB"] = str(lib)
    return env


def jakiro_run(tenant, *cmd, check=True, timeout=30):
    return ns(tenant, JAKIRO_RUN, "--", *cmd, check=check, timeout=timeout, env=shim_env())


def assert_no_crash(r, what):
    # ip netns exec execs the command, so a signal shows as a negative code (or 128+N from a
    # shell): a SIGSEGV is 139 / -11, an abort 134 / -6.
    crashed = {-signal.SIGSEGV, -signal.SIGABRT, -signal.SIGBUS, 128 + signal.SIGSEGV,
               128 + signal.SIGABRT, 128 + signal.SIGBUS}
    assert r.returncode not in crashed, f"{what} crashed ({r.returncode}): {r.stderr[-500:]}"


def guid_of(mac):
    """Modified EUI-64 of a MAC, as ibv_devices prints a node GUID."""
    b = bytes.fromhex(mac.replace(":", ""))
    return bytes([b[0] ^ 2, b[1], b[2], 0xFF, 0xFE, b[3], b[4], b[5]]).hex()


def test_ibv_devices_lists_the_tenants_vnic():
    out = jakiro_run(T1, "ibv_devices").stdout
    print(out)
    assert "jakiro_t1" in out
    assert guid_of(MAC[T1]) in out
    assert "jakiro_t2" not in out and "jakiro_t5" not in out


@pytest.mark.parametrize("tenant", [T1, T2, T5, T3])
def test_ibv_devinfo_shows_active_roce_v2_port(tenant):
    out = jakiro_run(tenant, "ibv_devinfo", "-v").stdout
    assert f"hca_id:\tjakiro_{VNIC[tenant]}" in out
    assert "PORT_ACTIVE" in out
    assert "link_layer:\t\tEthernet" in out
    # Underlay MTU 1500: tenant MTU 1450, and the largest IB MTU whose packets fit is 1024.
    assert "active_mtu:\t\t1024 (3)" in out
    assert f"GID[  0]:\t\t::ffff:{IP[tenant]}, RoCE v2" in out
    # Limits are what the engine supports, atomics included.
    assert "atomic_cap:\t\t\tATOMIC_HCA" in out
    assert "vendor_id:\t\t\t0x02c9" not in out  # not Mellanox: perftest takes generic paths


def test_each_tenant_sees_exactly_one_device():
    for tenant in (T1, T2):
        out = jakiro_run(tenant, "ibv_devinfo", "-l").stdout
        assert "1 HCA found:" in out and f"jakiro_{VNIC[tenant]}" in out, out


# What rdma-core's tests (base.py: `ls /sys/class/infiniband/<dev>/device/net/`, then
# `ip -j addr show <netdev>`), ibdev2netdev-style scripts and Python programs do to find the
# network interface behind an RDMA device.
FIND_NETDEV = r"""
import json, os, subprocess, sys
dev = sys.argv[1]
net = f"/sys/class/infiniband/{dev}/device/net/"
assert os.path.exists(net) and os.path.isdir(net), net
names = os.listdir(net)
listed = subprocess.check_output(["ls", net], text=True).split()
assert names == listed, (names, listed)
assert [e.name for e in os.scandir(net)] == names and os.path.isdir(net + names[0])
addr = json.loads(subprocess.check_output(["ip", "-j", "addr", "show", names[0]]))
ndev = open(f"/sys/class/infiniband/{dev}/ports/1/gid_attrs/ndevs/0").read().strip()
assert ndev == names[0], (ndev, names)
print(os.listdir("/sys/class/infiniband"), names[0], addr[0]["address"],
      addr[0]["addr_info"][0]["local"])
"""


@pytest.mark.parametrize("tenant", [T1, T3])
def test_the_device_names_its_netdev_where_programs_look_in_sysfs(tenant):
    """/sys/class/infiniband/<dev>/device/net/ lists the tenant's eth0, which carries the
    vNIC's MAC and address; /sys/class/infiniband lists the tenant's own device only. The
    control: without the shim the tenant has no such directory (no kernel RDMA here)."""
    dev = f"jakiro_{VNIC[tenant]}"
    out = jakiro_run(tenant, PYTHON, "-c", FIND_NETDEV, dev).stdout.split()
    print(out)
    assert out == [f"['{dev}']", "eth0", MAC[tenant], IP[tenant]]
    r = ns(tenant, "ls", f"/sys/class/infiniband/{dev}/device/net/", check=False)
    assert r.returncode != 0, "a real sysfs directory: the test bed is not what this test means"
    # Another tenant's device is nowhere in this one's tree.
    other = "jakiro_t3" if tenant == T1 else "jakiro_t1"
    r = jakiro_run(tenant, "ls", f"/sys/class/infiniband/{other}/device/net/", check=False)
    assert r.returncode != 0


def test_jakiro_run_selects_a_vnic_by_name_only_inside_its_tenant_namespace():
    # Inside t5's namespace, --vnic picks its endpoint by name.
    r = ns(T5, JAKIRO_RUN, "--vnic", "t5", "--", "ibv_devinfo", "-v", env=shim_env())
    assert "hca_id:\tjakiro_t5" in r.stdout
    assert f"::ffff:{IP[T5]}" in r.stdout
    # From the test's own namespace (the host's), no vNIC's endpoint is reachable: each lives
    # in its tenant's namespace only (docs/threat-model.md).
    r = run(JAKIRO_RUN, "--vnic", "t5", "--", "true", check=False, env=shim_env())
    assert r.returncode == 2 and "no vNIC named 't5' in this network namespace" in r.stderr, r
    r = ns(T5, JAKIRO_RUN, "--vnic", "no-such-vnic", "--", "true", check=False, env=shim_env())
    assert r.returncode == 2 and "no-such-vnic" in r.stderr


def test_pyverbs_opens_and_queries_the_device():
    # pyverbs calls ibv_get_device_index and friends: every call must stay inside the shim.
    script = ("from pyverbs.device import Context, get_device_list\n"
              "d = get_device_list()[0]\n"
              "c = Context(name=d.name.decode())\n"
              "print(d.name.decode(), c.query_port(1).state, c.query_gid(1, 0))\n")
    out = jakiro_run(T1, PYTHON, "-c", script).stdout
    assert out.split()[:2] == ["jakiro_t1", "4"], out
    assert out.split()[2].endswith("ffff:c613:0101"), out


@pytest.mark.parametrize("args,message", [
    # RC, UC and UD QPs and SRQs work (test_rdma_rc.py, test_rdma_ud_uc.py); XRC does not.
    (["ibv_xsrq_pingpong", "-g", "0"], "Couldn't"),
], ids=["xsrq_pingpong"])
def test_unimplemented_verbs_fail_cleanly(args, message):
    r = jakiro_run(T1, *args, check=False, timeout=20)
    assert_no_crash(r, args[0])
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
