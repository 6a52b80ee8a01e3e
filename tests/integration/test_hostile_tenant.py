"""The hostile-tenant suite for the RDMA face's endpoints (docs/threat-model.md): a tenant
reaches only its own vNIC's endpoint, cannot lock other tenants out of theirs, shares no
doorbell with them, and a vNIC removed by `apply` takes its RDMA face with it.

The probes are tests/hostile/verbs_probe, a raw client of jakirod's verbs protocol (no shim),
as an attacker would write it. Every attack has a control: the same probe against the
attacker's own vNIC works, so a refusal is the isolation, not a broken probe.
"""

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROD, MAC, RUN_DIR, SRC, T1, T2, T3, T5, alive, host_config_with,
                      jakirod_pids, jakiroctl, ns, stop, wait_listening, wait_until)

pytestmark = pytest.mark.usefixtures("testbed")

PROBE = os.environ.get("JAKIRO_VERBS_PROBE") or str(
    Path(JAKIROD).resolve().parents[1] / "tests" / "hostile" / "verbs_probe")
JAKIRO_RUN = SRC / "tools" / "jakiro-run"
# Each vNIC's endpoints, as jakirod binds them inside the tenant's namespace.
BY_NAME = "@jakiro/verbs/name/{}"
BY_MAC = "@jakiro/verbs/mac/{}"
# rdma.max_contexts default and the HELLO timeout (rnic/verbs/channel_server.hh). The hold
# test reads its connections 1 s after opening them (half the timeout: they are all still
# there) and the second one 2 s after the timeout.
MAX_CONTEXTS = 64
HELLO_TIMEOUT_S = 2


def probe(namespace, *args, timeout=30):
    """The probe's last line (its verdict)."""
    return ns(namespace, PROBE, *args, timeout=timeout).stdout.strip().splitlines()[-1]


def endpoint_stats(host="h1"):
    return json.loads(jakiroctl(host, "qps", "--json").stdout)["endpoints"]


def shim_env():
    env = dict(os.environ)
    lib = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
    if lib.exists():
        env["JAKIRO_VERBS_LIB"] = str(lib)
    return env


def jakiro_run(namespace, *args, timeout=30, check=False):
    return subprocess.run(["ip", "netns", "exec", namespace, str(JAKIRO_RUN), *args],
                          env=shim_env(), capture_output=True, text=True, timeout=timeout,
                          check=check)


def test_a_tenant_reaches_only_the_rdma_endpoints_of_its_own_namespace():
    # Control: t1's own endpoints, by name and by MAC, answer as t1.
    assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
    assert probe(T1, "hello", BY_MAC.format(MAC[T1])) == "vnic t1"
    assert probe(T3, "hello", BY_NAME.format("t3")) == "vnic t3"
    # Red t3 (same host, same IP as blue t1) asks for blue t1: nothing listens there.
    assert probe(T3, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
    assert probe(T3, "hello", BY_MAC.format(MAC[T1])) == "refused ECONNREFUSED"
    # Blue t5 (same VPC, same host) cannot act through t1 either: one endpoint, one tenant.
    assert probe(T5, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
    # No path socket is left that any namespace could open.
    sockets = list(Path("/run/jakiro/verbs").rglob("*.sock")) if Path(
        "/run/jakiro/verbs").exists() else []
    assert sockets == [], sockets

    # What a user of jakiro-run sees: --vnic chooses only among the namespace's own vNICs.
    r = jakiro_run(T3, "--vnic", "t1", "--", "ibv_devinfo")
    assert r.returncode == 2 and "no vNIC named 't1' in this network namespace" in r.stderr, r
    r = jakiro_run(T3, "--socket", BY_NAME.format("t1"), "--", "ibv_devinfo", "-l")
    assert "jakiro_t1" not in r.stdout, r.stdout
    r = jakiro_run(T1, "--vnic", "t1", "--", "ibv_devinfo", "-l", check=True)
    assert "jakiro_t1" in r.stdout, r.stdout


def test_a_process_that_leaves_the_namespace_before_hello_is_refused():
    before = endpoint_stats()["refused_foreign"]
    # Control: the same connection, HELLO from inside the namespace.
    assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
    # Connect from t1, then move to a fresh namespace and say HELLO from there.
    assert probe(T1, "leave-then-hello", BY_NAME.format("t1")) == "refused closed"
    assert endpoint_stats()["refused_foreign"] == before + 1


def test_idle_connections_hold_only_their_own_vnics_slots_and_only_until_the_hello_timeout():
    before = endpoint_stats()
    # t1 opens far more connections than its vNIC serves and never says HELLO.
    hog = subprocess.Popen(["ip", "netns", "exec", T1, PROBE, "hold", BY_NAME.format("t1"),
                            "300", "1"], stdout=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        time.sleep(0.5)
        # Meanwhile every other tenant of the host gets in (control: they are not held up).
        assert probe(T5, "hello", BY_NAME.format("t5")) == "vnic t5"
        assert probe(T3, "hello", BY_NAME.format("t3")) == "vnic t3"
        out, _ = hog.communicate(timeout=30)
    finally:
        stop(hog)
    m = re.match(r"open (\d+) connect-refused (\d+)", out.strip())
    assert m, out
    assert 1 <= int(m.group(1)) <= MAX_CONTEXTS, out
    after = endpoint_stats()
    assert after["refused_over_limit"] >= before["refused_over_limit"] + 300 - MAX_CONTEXTS
    # Held past the HELLO timeout, none stays open, and t1 itself gets in again.
    out = probe(T1, "hold", BY_NAME.format("t1"), "10", str(HELLO_TIMEOUT_S + 2))
    assert out.startswith("open 0 "), out
    assert endpoint_stats()["hello_timeouts"] >= after["hello_timeouts"] + 10
    assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"


def test_each_vnic_has_a_doorbell_page_of_its_own():
    pages = {t: probe(t, "doorbell", BY_NAME.format(name))
             for t, name in ((T1, "t1"), (T3, "t3"), (T5, "t5"))}
    for t, line in pages.items():
        assert re.fullmatch(r"doorbell \d+:\d+", line), (t, line)
    assert len(set(pages.values())) == 3, pages
    # Control: two contexts of one vNIC share its page (it is per vNIC, not per process).
    assert probe(T1, "doorbell", BY_NAME.format("t1")) == pages[T1]


def test_removing_a_vnic_ends_its_rdma_face_and_adding_it_back_creates_a_new_one(tmp_path):
    args = ["ib_write_bw", "-x", "0", "-F", "-s", "65536", "-p", "18700", "-D", "30"]
    server = subprocess.Popen(["ip", "netns", "exec", T2, str(JAKIRO_RUN), "--", *args],
                              env=shim_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    client = None
    try:
        wait_listening(T2, 18700, timeout=15)
        client = subprocess.Popen(["ip", "netns", "exec", T1, str(JAKIRO_RUN), "--", *args,
                                   IP[T2]], env=shim_env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, start_new_session=True)
        wait_until(lambda: any(q["vnic"] == "t1" and q["state"] == "RTS"
                               for q in json.loads(jakiroctl("h1", "qps", "--json").stdout)["qps"]),
                   15, "t1's QP in RTS")
        removed = endpoint_stats()["vnics_removed"]
        jakiroctl("h1", "apply", str(host_config_with(tmp_path, "t1", None)), timeout=60)
        # Its program learns at once (IBV_EVENT_DEVICE_FATAL, flushed work) and ends with an
        # error, long before its 30 s; its QPs left the engine; nothing listens for it.
        out, _ = client.communicate(timeout=20)
        assert client.returncode != 0, out[-800:]
        qps = json.loads(jakiroctl("h1", "qps", "--json").stdout)["qps"]
        assert qps == [], "t1's QP outlived its vNIC"
        assert endpoint_stats()["vnics_removed"] == removed + 1
        assert probe(T1, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
        # Control: the other vNICs' faces are untouched.
        assert probe(T5, "hello", BY_NAME.format("t5")) == "vnic t5"

        # Added back live (its namespace named in YAML this time): a new endpoint, in t1 only.
        jakiroctl("h1", "apply", str(host_config_with(tmp_path, "t1", f"netns: {T1}")), timeout=60)
        assert probe(T1, "hello", BY_NAME.format("t1")) == "vnic t1"
        assert probe(T3, "hello", BY_NAME.format("t1")) == "refused ECONNREFUSED"
        r = jakiro_run(T1, "--", "ibv_devinfo", "-l", check=True)
        assert "jakiro_t1" in r.stdout, r.stdout
    finally:
        for p in (client, server):
            if p is not None:
                stop(p)
        jakiroctl("h1", "apply", str(RUN_DIR / "h1.yaml"), timeout=60)


# ---- row 2: MR memory jakirod could lose

def test_an_mr_is_registered_only_on_a_sealed_shmem_memfd():
    pid = jakirod_pids()["h1"]
    # Control: a sealed shmem memfd, what the shim sends, registers; a hole punched under it
    # afterwards leaves jakirod answering. (t5: the test above re-creates t1's endpoint.)
    assert probe(T5, "reg-mr", BY_NAME.format("t5"), "shmem") == "registered alive"
    # A hugetlb memfd (a hole punch would hand its page back: SIGBUS in jakirod), an unsealed
    # memfd, a file on disk, a pipe: each refused with EINVAL, what ibv_reg_mr returns.
    for kind in ("hugetlb", "unsealed", "file", "pipe"):
        assert probe(T5, "reg-mr", BY_NAME.format("t5"), kind) == "refused EINVAL", kind
    assert alive(pid)
    assert probe(T3, "hello", BY_NAME.format("t3")) == "vnic t3"


# ---- row 11: per-vNIC quotas, changed live by apply

def test_apply_changes_a_vnics_qp_quota_live_and_only_that_vnics(tmp_path):
    # Control: t5 creates a QP.
    assert re.fullmatch(r"doorbell \d+:\d+", probe(T5, "doorbell", BY_NAME.format("t5")))
    no_qps = host_config_with(tmp_path, "t5", "rdma: {max_qps: 0}")
    jakiroctl("h1", "apply", str(no_qps), timeout=60)
    try:
        # Now one QP is over t5's quota: EDQUOT (122); t3 is not affected.
        assert probe(T5, "doorbell", BY_NAME.format("t5")) == "doorbell none status 122"
        assert re.fullmatch(r"doorbell \d+:\d+", probe(T3, "doorbell", BY_NAME.format("t3")))
    finally:
        jakiroctl("h1", "apply", str(RUN_DIR / "h1.yaml"), timeout=60)
    assert re.fullmatch(r"doorbell \d+:\d+", probe(T5, "doorbell", BY_NAME.format("t5")))
