"""Verbs beyond the basic set, each as a Python user runs it: rdma-core's pyverbs
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
  the windows, SEND_WITH_INV, and no data through an invalidated window; rdma_mw_lifecycle.cc:
  the binds mlx5 and rxe take (a window asking for LOCAL_WRITE too, an MR with only LOCAL_WRITE
  and MW_BIND), by each bind verb, through to the peer's WRITE, invalidation and dealloc.
- ibv_create_qp_ex (tests/rdma/pyverbs_qp_ex.py) with the init attributes rdma-core's own QP
  tests build from the device's limits (creation flags named but empty, send ops): RC, UC and
  UD QPs made, moved on, queried and carrying a message each across hosts; what the device does
  not advertise refused with EOPNOTSUPP.
- ibv_rereg_mr across hosts (tests/rdma/pyverbs_rereg_traffic.py): every combination of its
  flags, then RC traffic through the MR, also after a QP recovered from ERR through RESET.
"""

import pytest

from conftest import PYTHON, SRC, T1, ns
from test_rdma_rc import JAKIRO_RUN, build_tool, lossy_fabric, run_pair, shim_env

pytestmark = pytest.mark.usefixtures("testbed")

SCRIPT_TIMEOUT_S = 60  # each script bounds its own waits at 10 s; this is the backstop


def run_script(name, tenant=T1, args=()):
    script = SRC / "tests" / "rdma" / name
    r = ns(tenant, JAKIRO_RUN, "--", PYTHON, script, *args, timeout=SCRIPT_TIMEOUT_S,
           check=False, env=shim_env())
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


def test_create_qp_ex_takes_init_attrs_built_from_the_devices_limits():
    """tests/rdma/pyverbs_qp_ex.py --local: rdma-core's test_create_{rc,uc,ud}_qp_ex_{no,with}_attr,
    test_query_*_qp and test_modify_ud_qp on extended QPs: each QP is made, reaches the state
    pyverbs moves it to and reports at least the caps asked for; creation flags and a TSO header,
    which the device does not advertise, are EOPNOTSUPP."""
    out = run_script("pyverbs_qp_ex.py", args=["--local"])
    for qpt in ("RC", "UC", "UD"):
        for how in ("without a QPAttr", "with a QPAttr", "with a QPAttr, with send ops"):
            assert f"{qpt} QP by ibv_create_qp_ex {how}: caps" in out, (qpt, how)
    assert "extended UD QP: RTS with sq_psn 0x45, queried back" in out
    assert "creation flag 0x400 refused with EOPNOTSUPP" in out  # IBV_QP_CREATE_SOURCE_QPN
    assert "a TSO header refused with EOPNOTSUPP" in out
    assert "pyverbs_qp_ex: local: all verified" in out


def test_qps_made_by_create_qp_ex_carry_a_message_each_across_hosts(tmp_path):
    """tests/rdma/pyverbs_qp_ex.py across hosts: an RC (through ibv_wr_send), a UC and a UD QP
    per side made by ibv_create_qp_ex from the device's limits go to RTS and each delivers one
    message whose every byte the server checks."""
    script = SRC / "tests" / "rdma" / "pyverbs_qp_ex.py"
    cli, srv = run_pair("cross_host", [PYTHON, script, "--server"],
                        [PYTHON, script, "--connect", "198.19.1.2"], 7495, tmp_path)
    out = cli.stdout + srv
    for qpt in ("RC", "UC", "UD"):
        assert f"{qpt}: the SEND of 1024 bytes completed" in out, qpt
        assert f"{qpt}: every byte arrived as sent" in out, qpt
    assert "pyverbs_qp_ex: server: all verified" in out
    assert "pyverbs_qp_ex: client: all verified" in out


@pytest.mark.parametrize("bind", ["type1", "type2-post-send", "type2-wr-bind"])
def test_a_window_bound_as_mlx5_and_rxe_allow_takes_a_peers_write_until_invalidated(bind,
                                                                                    tmp_path):
    """tests/rdma/rdma_mw_lifecycle.cc across hosts: over an MR registered LOCAL_WRITE | MW_BIND
    on a QP with LOCAL_WRITE | REMOTE_WRITE, a window bound with REMOTE_WRITE | LOCAL_WRITE (by
    ibv_bind_mw, an IBV_WR_BIND_MW to ibv_post_send, or ibv_wr_bind_mw) completes
    IBV_WC_BIND_MW; the other host's WRITE through it lands in the window's page and nowhere
    else; once invalidated (type 1: unbound by a bind of length 0) the same WRITE is a remote
    access error that changes nothing; and ibv_dealloc_mw succeeds."""
    tool = build_tool("JAKIRO_RDMA_MW_LIFECYCLE", "rdma_mw_lifecycle")
    cli, srv = run_pair("cross_host", [tool, "--server", "--bind", bind],
                        [tool, "--connect", "198.19.1.2", "--bind", bind], 7497, tmp_path)
    out = cli.stdout + srv
    assert "bound with REMOTE_WRITE | LOCAL_WRITE" in out
    assert "through the window (rkey" in out and ": completed" in out
    assert "after the WRITE through the window: memory as it must be" in out
    assert "a WRITE through the invalidated window: remote access error" in out
    assert "after the WRITE through the invalidated window: memory as it must be" in out
    assert "ibv_dealloc_mw succeeded" in out
    assert "rdma_mw_lifecycle: server: all verified" in out
    assert "rdma_mw_lifecycle: client: all verified" in out


def test_rereg_mr_with_every_flag_combination_carries_rc_traffic_across_hosts(tmp_path):
    """tests/rdma/pyverbs_rereg_traffic.py: for each of the seven flag combinations the MR
    re-registered on h2 takes a SEND, an RDMA WRITE (where the new rights allow), serves an
    RDMA READ and is the source of a SEND to h1, through the QP of its (new) PD with the keys
    the rereg left. Where the rereg invalidated a receive posted before it (new range or PD),
    the SEND into it fails IBV_WC_REM_OP_ERR and both QPs come back through RESET: what follows
    must be the new WRs' completions, never the flushes of the QPs' earlier life."""
    script = SRC / "tests" / "rdma" / "pyverbs_rereg_traffic.py"
    cli, srv = run_pair("cross_host", [PYTHON, script, "--server"],
                        [PYTHON, script, "--connect", "198.19.1.2"], 7499, tmp_path)
    out = cli.stdout + srv
    for flags in ("translation", "pd", "translation+pd", "access", "translation+access",
                  "pd+access", "translation+pd+access"):
        assert f"server: {flags}: verified" in out, out[-3000:]
        assert f"client: {flags}: verified" in out, out[-3000:]
    assert "a SEND into a receive the rereg invalidated" in out
    assert "the RDMA WRITE the new rights allow landed" in out
    assert "pyverbs_rereg_traffic: server: all verified" in out
    assert "pyverbs_rereg_traffic: client: all verified" in out
