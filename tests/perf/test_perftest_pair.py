"""perf/perftest_pair.py: a perftest that fails at once fails the pair, with its own error.
Root: the pair runs in a network namespace of its own (no test bed, no jakirod)."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(SRC / "perf"))

import perftest_pair  # noqa: E402
from programs import ProgramFailed  # noqa: E402

NS = "jk-perftest-pair"  # jk-*: tools/testbed down removes it too


@pytest.fixture
def netns():
    subprocess.run(["ip", "netns", "del", NS], capture_output=True)
    subprocess.run(["ip", "netns", "add", NS], check=True, timeout=10)
    subprocess.run(["ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up"], check=True,
                   timeout=10)
    yield NS
    subprocess.run(["ip", "netns", "del", NS], capture_output=True, timeout=10)


def test_a_server_whose_shim_is_missing_fails_the_pair_with_jakiro_runs_error(netns,
                                                                              monkeypatch):
    monkeypatch.setenv("JAKIRO_VERBS_LIB", "/nonexistent/libjakiro_verbs.so")
    start = time.monotonic()
    with pytest.raises(ProgramFailed) as e:
        perftest_pair.run("ib_write_bw", netns, netns, "127.0.0.1", ["-D", "1"], timeout=30)
    assert time.monotonic() - start < perftest_pair.LISTEN_WAIT_S  # at once, not at a timeout
    assert "ib_write_bw server" in str(e.value)
    assert "JAKIRO_VERBS_LIB=/nonexistent/libjakiro_verbs.so does not exist" in str(e.value)


def test_a_server_without_a_vnic_fails_the_pair_with_perftests_error(netns, monkeypatch):
    monkeypatch.delenv("JAKIRO_VERBS_LIB", raising=False)
    with pytest.raises(ProgramFailed) as e:
        perftest_pair.run("ib_write_bw", netns, netns, "127.0.0.1", ["-D", "1"], timeout=30)
    assert "exited" in str(e.value) and "before it listened" in str(e.value)
    assert "Unable to find the Infiniband/RoCE device" in str(e.value)


def test_a_client_that_prints_no_result_fails_the_pair(netns, tmp_path, monkeypatch):
    # A "perftest" that listens like a server and, as a client, exits 0 without its table:
    # exit status alone is not proof of a measurement.
    fake = tmp_path / "fake_bw"
    fake.write_text("#!/usr/bin/python3\n"
                    "import socket, sys, time\n"
                    "if sys.argv[-1] == '127.0.0.1':\n"
                    "    print('connected, then nothing'); sys.exit(0)\n"
                    "s = socket.socket()\n"
                    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                    f"s.bind(('0.0.0.0', {perftest_pair.PERFTEST_PORT})); s.listen()\n"
                    "time.sleep(30)\n")
    fake.chmod(0o755)
    shim = tmp_path / "libjakiro_verbs.so"  # jakiro-run needs a file to preload
    shim.write_bytes(b"")
    monkeypatch.setenv("JAKIRO_VERBS_LIB", str(shim))
    with pytest.raises(ProgramFailed, match="no result line: connected, then nothing"):
        perftest_pair.run(str(fake), netns, netns, "127.0.0.1", [], timeout=30)
