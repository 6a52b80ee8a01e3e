"""perf/programs.py: a benchmark's program that fails is reported with its own words.
No root, no network."""
import os
import sys
import time
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(SRC / "perf"))

from programs import (Background, ProgramFailed, iperf3_received_bps,  # noqa: E402
                      run)


def test_a_command_that_exits_non_zero_raises_with_its_exit_code_and_error():
    with pytest.raises(ProgramFailed) as e:
        run(["sh", "-c", "echo 'jakiro-run: libjakiro_verbs.so not found' >&2; exit 2"])
    assert "exited 2" in str(e.value)
    assert "libjakiro_verbs.so not found" in str(e.value)


def test_a_command_that_does_not_end_in_time_raises():
    with pytest.raises(ProgramFailed, match="still running after 1 s"):
        run(["sleep", "5"], timeout=1)


def test_a_background_program_that_died_at_once_raises_with_its_output():
    p = Background(["sh", "-c", "echo Failed to get IB devices list >&2; exit 1"],
                   name="ib_write_bw")
    deadline = time.monotonic() + 10
    while p.running() and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(ProgramFailed) as e:
        p.check_running()
    assert "ib_write_bw: ended early (exit 1)" in str(e.value)
    assert "Failed to get IB devices list" in str(e.value)


def test_a_background_program_still_at_work_passes_the_check_and_is_stopped():
    p = Background(["sleep", "30"])
    try:
        p.check_running()
    finally:
        p.stop()
    assert not p.running()


def test_finish_raises_on_an_exit_code_not_allowed_and_returns_the_output_otherwise():
    assert Background(["sh", "-c", "echo done"]).finish(timeout=10).strip() == "done"
    with pytest.raises(ProgramFailed, match="exited 3: oops"):
        Background(["sh", "-c", "echo oops; exit 3"], name="x").finish(timeout=10)


def test_finish_of_a_program_that_does_not_end_raises_and_stops_it():
    p = Background(["sleep", "30"], name="sleeper")
    with pytest.raises(ProgramFailed, match="sleeper: still running after 1 s"):
        p.finish(timeout=1)
    assert not p.running()


def test_an_iperf3_error_report_or_no_report_is_a_failure():
    with pytest.raises(ProgramFailed, match="unable to connect to server"):
        iperf3_received_bps('{"start": {}, "intervals": [], "end": {}, '
                            '"error": "unable to connect to server: Connection refused"}')
    with pytest.raises(ProgramFailed, match="no JSON report: iperf3: error"):
        iperf3_received_bps("iperf3: error - unable to connect")
    with pytest.raises(ProgramFailed, match="nothing received"):
        iperf3_received_bps('{"end": {"sum_received": {"bits_per_second": 0}}}')
    assert iperf3_received_bps('{"end": {"sum_received": {"bits_per_second": 5e9}}}') == 5e9
