"""HPC over the vNIC: UCX, Open MPI and MPICH, unmodified, under jakiro-run in tenant
namespaces: t1 (h1) <-> t2 (h2) over the overlay and t1 <-> t5 on one host.

What a user checks: `ucx_info -d` lists rc_verbs and ud_verbs on the Jakiro device;
`ucx_perftest` tag_lat, tag_bw (1 MiB) and ucp_put_bw run over UCX_TLS=rc_v (rc_verbs, with
ud_verbs as the auxiliary transport that sets the RC connections up); a two-rank MPI ping-pong
(1 B .. 4 MiB, every byte compared) runs under Open MPI (pml ucx) and MPICH (ch4:ucx); and
jakirod's per-vNIC RDMA byte counters show that the traffic went through the RoCE engine.

The transports are named (UCX_TLS=rc_v, or self,rc_v for MPI): with `all`, UCX would use
shared memory between two namespaces of one machine and never touch the vNIC. The MPI launchers
need no ssh: their rsh agent is a script that enters the other tenant's namespace.
"""

import itertools
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIRO_RUN, T1, T2, T5, flatten, ns, shim_env, stats, stop,
                      under_jakiro_run)

pytestmark = pytest.mark.usefixtures("testbed")

PINGPONG_C = Path(__file__).resolve().parent / "mpi_pingpong.c"
HOST = {T1: "h1", T2: "h2", T5: "h1"}
VNIC = {T1: "t1", T2: "t2", T5: "t5"}
PLACEMENTS = {"cross_host": (T1, T2), "intra_host": (T1, T5)}  # (client / rank 0, server)
SERVER_LISTEN_S = 2.0  # ucx_perftest's server: jakiro-run, UCX init, listen (< 0.5 s here)
TIMEOUT_S = 90
_ports = itertools.count(13400)

# The ping-pong's sizes (1 B, then x4 up to 4 MiB) and round trips per size (mpi_pingpong.c).
PINGPONG_BYTES_EACH_WAY = 20 * sum(4 ** k for k in range(12))


def rdma_rx_bytes(tenant):
    """The RDMA bytes jakirod's RoCE engine delivered to `tenant`'s vNIC (packets over the
    overlay, or memory to memory between two vNICs of one host)."""
    for path, value in flatten(stats(HOST[tenant])).items():
        if VNIC[tenant] in path and path[-1] == "rdma_rx_bytes":
            return value
    raise AssertionError(f"no rdma_rx_bytes for {VNIC[tenant]} in stats --json")


class engine_bytes:
    """RDMA bytes received by both vNICs of a pair while the block runs."""

    def __init__(self, *tenants):
        self.tenants = tenants

    def __enter__(self):
        self.before = sum(rdma_rx_bytes(t) for t in self.tenants)
        return self

    def __exit__(self, *exc):
        self.moved = sum(rdma_rx_bytes(t) for t in self.tenants) - self.before


@pytest.fixture(scope="module")
def mpi_programs(tmp_path_factory):
    """mpi_pingpong.c built with each MPI's compiler wrapper."""
    out = tmp_path_factory.mktemp("mpi")
    programs = {}
    for mpi, cc in (("openmpi", "mpicc.openmpi"), ("mpich", "mpicc.mpich")):
        assert shutil.which(cc), \
            f"{cc} missing: tools/bootstrap installs libopenmpi-dev, libmpich-dev"
        programs[mpi] = out / f"pingpong.{mpi}"
        subprocess.run([cc, "-O2", "-o", programs[mpi], PINGPONG_C], check=True, timeout=60)
    return programs


def rsh_agent(tmp_path, tenants):
    """A launcher's rsh agent: `agent HOST COMMAND...` runs COMMAND under jakiro-run in the
    namespace of the tenant whose address is HOST."""
    cases = " ".join(f"{IP[t]}) n={t};;" for t in tenants)
    agent = tmp_path / "nsrsh"
    agent.write_text("#!/bin/sh\nh=$1; shift\n"
                     f"case $h in {cases} *) echo \"nsrsh: unknown host $h\" >&2; exit 1;; esac\n"
                     f"exec ip netns exec $n {JAKIRO_RUN} -- sh -c \"$*\"\n")
    agent.chmod(0o755)
    return agent


def test_ucx_info_lists_rc_verbs_and_ud_verbs_on_the_jakiro_device():
    out = ns(T1, str(JAKIRO_RUN), "--", "ucx_info", "-d", env=shim_env(), timeout=60).stdout
    # The device's section: from its memory domain to the next one.
    section = out.split("# Memory domain: jakiro_t1", 1)
    assert len(section) == 2, f"no Jakiro memory domain in ucx_info -d:\n{out[-3000:]}"
    section = section[1].split("# Memory domain:", 1)[0]
    for transport in ("rc_verbs", "ud_verbs"):
        assert re.search(rf"Transport: {transport}\n#\s+Device: jakiro_t1:1", section), section


def test_the_device_reads_as_roce_v2_on_eth0_where_ucx_looks_in_sysfs():
    gid_attrs = "/sys/class/infiniband/jakiro_t1/ports/1/gid_attrs"
    for attribute, text in (("types/0", "RoCE v2\n"), ("ndevs/0", "eth0\n")):
        out = ns(T1, str(JAKIRO_RUN), "--", "cat", f"{gid_attrs}/{attribute}", env=shim_env())
        assert out.stdout == text, attribute
    assert ns(T1, "cat", f"{gid_attrs}/types/0", check=False).returncode != 0, \
        "only programs under jakiro-run see the emulated files"
    # UCX reads them itself (and would say "failed to read" at diag level otherwise).
    r = ns(T1, str(JAKIRO_RUN), "--", "ucx_info", "-d", env=dict(shim_env(), UCX_LOG_LEVEL="diag"),
           timeout=60)
    assert "gid_attrs" not in r.stdout + r.stderr, (r.stdout + r.stderr)[-3000:]


# ucx_perftest's test, its options and the bytes it moves one way at least.
PERFTESTS = {
    "tag_lat": (["-t", "tag_lat", "-n", 2000], 2000 * 8),
    "tag_bw": (["-t", "tag_bw", "-s", 1 << 20, "-n", 200], 200 << 20),
    "ucp_put_bw": (["-t", "ucp_put_bw", "-s", 1 << 20, "-n", 200], 200 << 20),
}


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("test", PERFTESTS)
def test_ucx_perftest_runs_over_rc_v_through_the_engine(test, placement, tmp_path):
    client, server = PLACEMENTS[placement]
    args, least_bytes = PERFTESTS[test]
    port = next(_ports)
    env = dict(shim_env(), UCX_TLS="rc_v")
    log = tmp_path / "server.log"
    with engine_bytes(client, server) as moved, open(log, "w") as o:
        srv = subprocess.Popen(under_jakiro_run(server, ["ucx_perftest", "-p", port]), stdout=o,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                               start_new_session=True)
        try:
            time.sleep(SERVER_LISTEN_S)
            cli = subprocess.run(under_jakiro_run(client, ["ucx_perftest", IP[server], "-p", port,
                                                           *args]),
                                 capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
            try:
                status = srv.wait(timeout=20)
            except subprocess.TimeoutExpired:
                status = "still running 20 s after its client"
        finally:
            stop(srv)
    out = cli.stdout + cli.stderr
    print(f"\n{test} {placement}:\n{out[-700:]}")
    assert cli.returncode == 0, out[-3000:]
    assert status == 0, log.read_text(errors="replace")[-3000:]
    assert re.search(r"^Final:\s+" + str(args[-1]) + r"\s", out, re.M), out[-3000:]
    assert moved.moved >= least_bytes, (f"the vNICs received {moved.moved} RDMA bytes, "
                                        f"the test moved at least {least_bytes}")


MPI_LAUNCH = {
    # Debian's openmpi-mca-params.conf leaves pml ucx out unless asked; pml_ucx_devices any
    # lets it use a device that is not mlx5. btl: no shared memory (vader) and no TCP.
    "openmpi": lambda hosts, agent: [
        "mpirun", "--allow-run-as-root", "-np", 2, "--host", ",".join(hosts),
        "--mca", "plm_rsh_agent", agent, "--mca", "pml", "ucx", "--mca", "pml_ucx_devices", "any",
        "--mca", "btl", "^vader,tcp,openib,uct", "--mca", "oob_tcp_if_include", "eth0",
        "-x", "UCX_TLS=self,rc_v"],
    # MPIR_CVAR_NOLOCAL: both ranks report the same hostname; keep MPICH's shared memory out.
    "mpich": lambda hosts, agent: [
        "mpiexec.mpich", "-launcher", "rsh", "-launcher-exec", agent, "-hosts", ",".join(hosts),
        "-n", 2, "-genv", "UCX_TLS", "self,rc_v", "-genv", "MPIR_CVAR_NOLOCAL", 1],
}


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("mpi", MPI_LAUNCH)
def test_mpi_pingpong_verifies_every_byte_from_1_byte_to_4_mib(mpi, placement, mpi_programs,
                                                               tmp_path):
    rank0, rank1 = PLACEMENTS[placement]
    agent = rsh_agent(tmp_path, (rank0, rank1))
    cmd = MPI_LAUNCH[mpi]((IP[rank0], IP[rank1]), agent) + [mpi_programs[mpi]]
    with engine_bytes(rank0, rank1) as moved:
        r = subprocess.run(under_jakiro_run(rank0, cmd), capture_output=True, text=True,
                           timeout=TIMEOUT_S, env=shim_env(), stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    print(f"\n{mpi} {placement}: {out[-600:]}")
    assert r.returncode == 0, out[-3000:]
    assert "mpi pingpong: 12 sizes, 0 bad bytes" in out, out[-3000:]
    assert moved.moved >= 2 * PINGPONG_BYTES_EACH_WAY, (
        f"the vNICs received {moved.moved} RDMA bytes; the ping-pong alone moves "
        f"{2 * PINGPONG_BYTES_EACH_WAY}")
