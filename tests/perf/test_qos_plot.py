"""perf/qos_plot on the test bed: a run whose ib_write_bw cannot start fails, with
jakiro-run's own error, instead of printing a ratio. Root; brings the test bed up and down
(run under the test-bed lock like the integration tests)."""
import os
import subprocess
from pathlib import Path

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])


def test_qos_plot_whose_ib_write_bw_cannot_start_fails_with_jakiro_runs_error(tmp_path):
    env = dict(os.environ, JAKIRO_VERBS_LIB="/nonexistent/libjakiro_verbs.so")
    try:
        r = subprocess.run([str(SRC / "perf" / "qos_plot"), "--phase", "2", "--htb-rates", "",
                            "--out", str(tmp_path / "qos.png")], env=env, capture_output=True,
                           text=True, timeout=240)
    finally:
        subprocess.run([str(SRC / "tools" / "testbed"), "down"], capture_output=True,
                       timeout=120)
    assert r.returncode != 0, f"exited 0:\n{r.stdout}"
    assert "qos_plot: FAILED: ib_write_bw server" in r.stderr, r.stderr
    assert "JAKIRO_VERBS_LIB=/nonexistent/libjakiro_verbs.so does not exist" in r.stderr
    assert "Jakiro 3:1" not in r.stdout  # no table of figures that were never measured
    assert not (tmp_path / "qos.png").exists()
