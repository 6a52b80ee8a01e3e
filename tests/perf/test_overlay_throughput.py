"""perf/overlay_throughput: --ipv6 puts TCP over IPv6 next to IPv4, and its IPv6/IPv4 column is
the median of the ratios measured side by side. No root, no network."""
import importlib.util
import math
import os
import subprocess
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
SCRIPT = SRC / "perf" / "overlay_throughput"
sys.path.insert(0, str(SRC / "perf"))


def load_script():
    loader = SourceFileLoader("overlay_throughput", str(SCRIPT))
    spec = importlib.util.spec_from_loader("overlay_throughput", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_ipv6_ratio_is_the_median_of_per_round_ratios():
    script = load_script()
    # Rounds of (IPv4, IPv6) Gbit/s: ratios 0.5, 0.9 and 1.0; the median is that of the ratios,
    # not the ratio of the medians (4.0 / 3.6 would be 0.9 too, 3.0 / 2.7 is not).
    assert script.median_ratio([(4.0, 2.0), (3.0, 2.7), (5.0, 5.0)]) == pytest.approx(0.9)
    assert script.median_ratio([(2.0, 1.0), (2.0, 3.0)]) == pytest.approx(1.0)


def test_a_failed_or_zero_round_says_nothing_about_the_ratio():
    script = load_script()
    nan = float("nan")
    rounds = [(nan, 2.0), (4.0, nan), (0.0, 1.0), (2.0, 1.8)]
    assert script.median_ratio(rounds) == pytest.approx(0.9)
    assert math.isnan(script.median_ratio([(nan, 1.0)]))
    assert math.isnan(script.median_ratio([]))


def test_the_help_offers_ipv6_next_to_ipv4():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    assert "--ipv6" in out.stdout
    assert "2001:2::1:2" in out.stdout, "the IPv6 address t1 sends to is named"
