"""jakirod rejects a bad configuration quickly, naming the file, the line and the field."""

import re
import subprocess

import pytest

from conftest import JAKIROD

# (A backslash-newline in the text joins two source lines: t1 is one YAML line, line 7.)
GOOD = """\
host:
  name: hbad
  underlay: {port: "net_af_packet0,iface=jk-none0", ip: 198.18.0.99, mtu: 1500}
vpcs:
  - {name: blue, vni: 100}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, \
port: "net_af_packet1,iface=jk-none1"}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}
"""
VNIC_LINE = 7  # 1-based line of the vnic above

# case -> (config text, line of the error, field named in the message)
CASES = {
    "unknown_key": (GOOD.replace("port: \"net_af_packet1", "colour: green, port: \"net_af_packet1"),
                    VNIC_LINE, "colour"),
    "bad_mac": (GOOD.replace("02:00:c6:13:01:01", "02:00:c6:13:01:zz"), VNIC_LINE, "mac"),
    "duplicate_vnic_name": (GOOD.replace(
        "peers:", '  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:05", ip: 198.19.1.5/24, '
                  'port: "net_af_packet2,iface=jk-none2"}\npeers:'), VNIC_LINE + 1, "name"),
    "unknown_vpc": (GOOD.replace("vpc: blue, mac", "vpc: green, mac"), VNIC_LINE, "vpc"),
    "bad_underlay_ip": (GOOD.replace("ip: 198.18.0.99", "ip: 198.18.0.999"), 3, "ip"),
}


@pytest.mark.parametrize("case", CASES)
def test_bad_config_fails_naming_file_line_and_field(case, tmp_path):
    text, line, field = CASES[case]
    assert text != GOOD, "the case did not change the good config"
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    try:
        r = subprocess.run([JAKIROD, "--config", path], capture_output=True, text=True,
                           timeout=10)
    except subprocess.TimeoutExpired:
        pytest.fail("jakirod did not exit within 10 s on a bad config")
    print(f"\n{case}: exit {r.returncode}: {r.stderr.strip()}")
    assert r.returncode != 0
    assert path.name in r.stderr, "file name missing"
    assert re.search(rf"(:{line}\b|line {line}\b)", r.stderr), f"line {line} missing"
    assert field in r.stderr, f"field {field!r} missing"
