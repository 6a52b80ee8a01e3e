"""Verbs beyond the basic set (issue 14), each as a Python user runs it: rdma-core's pyverbs
scripts of tests/rdma under jakiro-run in a tenant namespace, against real jakirods whose engine
completes from its own thread.

- ibv_resize_cq (tests/rdma/pyverbs_resize_cq.py): grow and shrink with completions outstanding
  and SENDs arriving, nothing lost or doubled; below the outstanding count EINVAL.
- Completion timestamps (tests/rdma/pyverbs_cq_timestamps.py): hca_core_clock, the raw clock of
  ibv_query_rt_values_ex, and both stamps on real completions within the clocks read around them.
- Parent domains (tests/rdma/pyverbs_parent_domain.py): a parent domain with Python allocators
  makes a CQ, QPs and MRs that move real data, as its PD (another PD's rkey is refused).
- Memory windows (tests/rdma/pyverbs_mw.py and rdma_mw.cc, two hosts, the latter under a lossy
  fabric): type-1 and type-2 binds, access through
  the windows, SEND_WITH_INV, and no data through an invalidated window.
"""

import pytest

from conftest import PYTHON, SRC, T1, ns
from test_rdma_rc import JAKIRO_RUN, build_tool, lossy_fabric, run_pair, shim_env

pytestmark = pytest.mark.usefixtures("testbed")

SCRIPT_TIMEOUT_S = 60  # each script bounds its own waits at 10 s; this is the backstop


def run_script(name, tenant=T1):
    script = SRC / "tests" / "rdma" / name
    r = ns(tenant, JAKIRO_RUN, "--", PYTHON, script, timeout=SCRIPT_TIMEOUT_S, check=False,
           env=shim_env())
    print(r.stdout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return r.stdout


def test_resize_cq_grows_and_shrinks_under_traffic_and_refuses_below_the_outstanding_count():
    out = run_script("pyverbs_resize_cq.py")
    assert "resize below the outstanding count refused with EINVAL" in out
    assert "46 receive completions, each once, in posting order" in out
    assert "all verified" in out


def test_completion_timestamps_follow_the_advertised_device_clock_and_the_wall_clock():
    out = run_script("pyverbs_cq_timestamps.py")
    assert "ibv_query_rt_values_ex reads the device clock" in out
    assert "every completion_ts lies between" in out
    assert "CVLAN refused at creation with EOPNOTSUPP" in out
    assert "all verified" in out


def test_a_parent_domain_with_python_allocators_carries_real_traffic_as_its_pd():
    out = run_script("pyverbs_parent_domain.py")
    assert "SEND and RDMA WRITE through the parent domain's QPs completed" in out
    assert "a WRITE to another PD's MR is a remote access error" in out
    assert "allocator calls: alloc 0, free 0" in out
    assert "all verified" in out


def test_memory_windows_bind_grant_and_invalidate_across_hosts(tmp_path):
    """tests/rdma/pyverbs_mw.py: a type-1 window bound with ibv_bind_mw takes a WRITE, a
    type-2 window bound by IBV_WR_BIND_MW serves a READ (the control), a SEND_WITH_INV frees
    it (the receive says IBV_WC_WITH_INV and the rkey), and a READ through it afterwards is a
    remote access error that returns no data."""
    script = SRC / "tests" / "rdma" / "pyverbs_mw.py"
    cli, srv = run_pair("cross_host", [PYTHON, script, "--server"],
                        [PYTHON, script, "--connect", "198.19.1.2"], 7491, tmp_path)
    out = cli.stdout + srv
    assert "ibv_bind_mw completed IBV_WC_BIND_MW" in out
    assert "the WRITE through the type-1 window landed, whole" in out
    assert "returned the server's page (control)" in out
    assert "the receive reports IBV_WC_WITH_INV" in out
    assert "remote access error and returns no data" in out
    assert "pyverbs_mw: server: all verified" in out
    assert "pyverbs_mw: client: all verified" in out


def test_memory_window_data_survives_a_lossy_fabric_and_no_other_qp_or_stale_key_gets_any(
        tmp_path):
    """tests/rdma/rdma_mw.cc across hosts with 1 % loss, 25 % reordering and 1 ms delay towards
    h2: 512 KiB written and read back through a type-2 window (both sides check the bytes and
    the server's memory around the window); the attacker, a QP of another context (another PD) of
    the server's vNIC, gets a remote access error and no data (the control: the same READ through
    the owning QP succeeded); after LOCAL_INV a WRITE through the window is refused too."""
    tool = build_tool("JAKIRO_RDMA_MW", "rdma_mw")
    impairment = {}
    with lossy_fabric(tmp_path, impairment):
        cli, srv = run_pair("cross_host", [tool, "--server"], [tool, "--connect", "198.19.1.2"],
                            7493, tmp_path)
    out = cli.stdout + srv
    print(impairment)
    assert "WRITEs and 8 READs of 64 KiB through the window: completed, content verified" in out
    assert "after the WRITEs through the window: memory as it must be" in out
    assert "from another PD's QP: remote access error, no data" in out
    assert "after the foreign QP's READ: memory as it must be" in out
    assert "a WRITE through the invalidated window: remote access error" in out
    assert "rdma_mw: server: all verified" in out and "rdma_mw: client: all verified" in out
