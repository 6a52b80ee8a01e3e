"""jakirod as a service an operator runs: --help everywhere, --check-config on good
and bad files, the man pages, the systemd unit (systemd-analyze verify, its capability set is
enough, its ExecReload applies live), sd_notify (READY=1 after the ports are up, STATUS=,
WATCHDOG=1, STOPPING=1), Prometheus metrics under traffic (promtool check metrics; a scrape
between two `jakiroctl stats --json` lies between them), DPDK telemetry, and logs (structured,
rate limited, nothing per packet).

The test bed runs jakirod in namespaces jk-h1 and jk-h2 with metrics on 127.0.0.1:9417 in each.
Some tests restart h1's jakirod themselves (under a notify socket, or with the unit's
capabilities); each leaves h1 running and ready.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (IP, JAKIROCTL, JAKIROD, PYTHON, RUN_DIR, SRC, T1, T2, alive, iperf3_server,
                      jakiroctl, ns, ns_bg, run, stats, stop, wait_until)

BUILD = Path(JAKIROD).resolve().parents[1]
UNIT = Path(os.environ.get("JAKIRO_UNIT") or BUILD / "dataplane" / "jakirod@.service")
INSTALLED_UNIT = Path(os.environ.get("JAKIRO_INSTALLED_UNIT")
                      or "/usr/local/lib/systemd/system/jakirod@.service")
BINDIR = os.environ.get("JAKIRO_BINDIR") or "/usr/local/bin"
MAN_PAGES = {"jakirod": BUILD / "dataplane" / "jakirod.8",
             "jakiroctl": BUILD / "tools" / "jakiroctl.8"}
JAKIRO_RUN = SRC / "tools" / "jakiro-run"
METRICS_URL = "http://127.0.0.1:9417/metrics"
EX_CONFIG = 78

# (A backslash-newline in the text joins two source lines: t1 is one YAML line, line 10.)
GOOD = """\
host:
  name: hcheck
  underlay: {port: "net_af_packet0,iface=jk-none0", ip: 198.18.0.99, mtu: 1500}
  metrics: {listen: 127.0.0.1:9417}
vpcs:
  - {name: blue, vni: 100}
security_groups:
  - {name: web, vpc: blue, ingress: [{proto: tcp, ports: 8080, from: 198.19.0.0/16}]}
vnics:
  - {name: t1, vpc: blue, mac: "02:00:c6:13:01:01", ip: 198.19.1.1/24, \
port: "net_af_packet1,iface=jk-none1", security_groups: [web]}
peers:
  - {vpc: blue, ip: 198.19.1.2, host: 198.18.0.2}
"""
# case -> (text, line, field)
BAD = {
    "bad_mac": (GOOD.replace('01:01"', '01:zz"'), 10, "vnics[0].mac"),
    "bad_metrics_listen": (GOOD.replace("127.0.0.1:9417", "127.0.0.1:99999"), 4,
                           "host.metrics.listen"),
    "unknown_key": (GOOD.replace("  metrics:", "  colour: green\n  metrics:"), 4, "host.colour"),
    "unknown_group": (GOOD.replace("security_groups: [web]", "security_groups: [db]"), 10,
                      "vnics[0].security_groups[0]"),
    # A YAML syntax error: the line where the parser gave up, and its message.
    "yaml_syntax": (GOOD.replace("vpcs:\n", "vpcs:\n  - {name: blue\n", 1), 9,
                    "illegal block entry"),
}


# ---------------------------------------------------------------- without the test bed


def test_help_on_every_program():
    programs = [[JAKIROD], [JAKIROCTL], [JAKIRO_RUN], [PYTHON, SRC / "tools" / "testbed"],
                [SRC / "tools" / "bootstrap"], [SRC / "tools" / "demo"],
                [SRC / "tools" / "test-all"],
                *[[p] for p in sorted((SRC / "perf").iterdir())
                  if p.is_file() and os.access(p, os.X_OK) and p.suffix == ""]]
    for argv in programs:
        r = run(*argv, "--help", timeout=20, check=False)
        print(f"{' '.join(map(str, argv))} --help: exit {r.returncode}, "
              f"{(r.stdout or r.stderr).splitlines()[0] if (r.stdout or r.stderr) else ''}")
        assert r.returncode == 0, f"{argv}: {r.stderr}"
        assert "usage" in r.stdout.lower(), f"{argv} --help prints no usage: {r.stdout}"


def test_check_config_accepts_a_good_file_without_privilege_or_devices():
    # Somewhere nobody can read (pytest's tmp_path is root's only).
    folder = Path(tempfile.mkdtemp(prefix="jakiro-check-"))
    folder.chmod(0o755)
    path = folder / "good.yaml"
    path.write_text(GOOD)
    path.chmod(0o644)
    # As nobody, with no capability: it reads the YAML and nothing else (its ports do not even
    # exist; EAL would need root and hugepages or memory).
    r = run("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all", JAKIROD, "--check-config", path,
            check=False)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    assert f"{path}: valid: host hcheck" in r.stdout
    assert "metrics on 127.0.0.1:9417" in r.stdout
    assert not Path("/run/dpdk/jakiro-hcheck").exists(), "no EAL was started"
    shutil.rmtree(folder)


@pytest.mark.parametrize("case", BAD)
def test_check_config_rejects_a_bad_file_with_file_line_and_field(case, tmp_path):
    text, line, field = BAD[case]
    assert text != GOOD
    path = tmp_path / f"{case}.yaml"
    path.write_text(text)
    r = run(JAKIROD, "--check-config", path, check=False, timeout=10)
    print(f"{case}: exit {r.returncode}\n{r.stderr}")
    assert r.returncode == EX_CONFIG
    assert r.stdout == ""
    assert re.search(rf"^{re.escape(str(path))}:{line}: {re.escape(field)}", r.stderr, re.M), \
        f"no {path}:{line}: {field} in {r.stderr}"
    # The daemon says the same, the same way, and exits with the same status.
    d = run(JAKIROD, "--config", path, check=False, timeout=10)
    assert d.returncode == EX_CONFIG
    assert r.stderr.splitlines()[0] in d.stderr


def test_check_config_of_a_missing_file_fails():
    r = run(JAKIROD, "--check-config", "/nonexistent/h9.yaml", check=False)
    assert r.returncode == EX_CONFIG
    assert "/nonexistent/h9.yaml: cannot be read" in r.stderr


def man_text(page):
    r = run("man", "-P", "cat", "-l", page, check=False, env=dict(os.environ, MANWIDTH="200"))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_man_pages_describe_every_option_and_command():
    assert MAN_PAGES["jakirod"].exists() and MAN_PAGES["jakiroctl"].exists(), "not built"
    for program, binary in (("jakirod", JAKIROD), ("jakiroctl", JAKIROCTL)):
        text = man_text(MAN_PAGES[program])
        assert f"{program} -" in text, "NAME section"
        help_text = run(binary, "--help").stdout
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", help_text))
        assert options, help_text
        missing = sorted(o for o in options if o not in text)
        assert not missing, f"{program}(8) lacks {missing}"
        if program == "jakiroctl":
            commands = re.findall(r"^  ([a-z]+)\b", help_text.split("options:")[0], re.M)
            assert {"status", "stats", "qos", "metrics", "apply"} <= set(commands), commands
            missing = sorted(c for c in commands if not re.search(rf"^\s+{c}\b", text, re.M))
            assert not missing, f"jakiroctl(8) lacks the commands {missing}"
    assert "78" in man_text(MAN_PAGES["jakirod"]), "exit status of a bad configuration"


def unit_with_build_paths(tmp_path):
    """The built unit, its binaries pointed into the build tree (they exist before install)."""
    text = UNIT.read_text()
    text = text.replace(f"{BINDIR}/jakirod ", f"{JAKIROD} ").replace(
        f"{BINDIR}/jakiroctl ", f"{JAKIROCTL} ")
    unit = tmp_path / "jakirod@.service"
    unit.write_text(text)
    # Documentation=man:jakirod(8): verify looks the pages up with man(1).
    man8 = tmp_path / "man" / "man8"
    man8.mkdir(parents=True)
    for page in MAN_PAGES.values():
        shutil.copy(page, man8)
    return unit


def verify(unit_dir, env=None):
    r = run("systemd-analyze", "verify", Path(unit_dir) / "jakirod@h1.service", check=False,
            env=env, timeout=60)
    print(f"systemd-analyze verify {unit_dir}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r


def test_systemd_unit_verifies(tmp_path):
    unit = unit_with_build_paths(tmp_path)
    text = unit.read_text()
    for line in ("Type=notify", "WatchdogSec=", "ExecReload=", "RestartPreventExitStatus=78",
                 "CapabilityBoundingSet=", "/etc/jakiro/%i.yaml"):
        assert line in text, line
    # `systemctl restart` keeps the state: a store, and jakirod told its size (systemd 252
    # does not export it).
    store_max = re.search(r"^FileDescriptorStoreMax=(\d+)$", text, re.M)
    assert store_max and f"--fd-store {store_max.group(1)}" in text, text
    env = dict(os.environ, MANPATH=f"{tmp_path / 'man'}:")
    r = verify(tmp_path, env)
    assert r.returncode == 0
    # verify exits 0 on unknown keys and bad values too: it must say nothing about our unit.
    assert "jakirod" not in r.stdout + r.stderr, r.stdout + r.stderr
    # A broken unit does fail (the check can tell).
    unit.write_text(text.replace("Type=notify", "Type=notify\nExecStart=/nonexistent/jakirod"))
    assert verify(tmp_path, env).returncode != 0


def test_installed_unit_verifies():
    """After `meson install` (tools/test-all installs before testing): the unit as installed,
    its binaries and man pages where it says."""
    if not INSTALLED_UNIT.exists():
        pytest.skip(f"{INSTALLED_UNIT} not installed (run meson install)")
    assert f"ExecStart={BINDIR}/jakirod --config /etc/jakiro/%i.yaml" in INSTALLED_UNIT.read_text()
    r = verify(INSTALLED_UNIT.parent)
    assert r.returncode == 0
    assert "jakirod" not in r.stdout + r.stderr


# ---------------------------------------------------------------- with the test bed


def unit_setting(key):
    for line in UNIT.read_text().splitlines():
        if line.startswith(key + "="):
            return line.split("=", 1)[1]
    raise AssertionError(f"no {key}= in {UNIT}")


def ready(host):
    r = run(JAKIROCTL, "--host", host, "status", "--json", check=False, timeout=5)
    return r.returncode == 0 and json.loads(r.stdout).get("ready") is True


def stop_h1():
    pid = int((RUN_DIR / "h1.pid").read_text())
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not alive(pid), 15, "h1's jakirod to stop")


def start_h1(prefix=(), env=None, log_name="h1.log"):
    """jakirod for h1 as the test bed starts it, behind `prefix` (a wrapper command)."""
    cmd = ["ip", "netns", "exec", "jk-h1", *map(str, prefix), JAKIROD, "--config",
           str(RUN_DIR / "h1.yaml")]
    log = open(RUN_DIR / log_name, "ab")
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                         start_new_session=True, env=env)
    (RUN_DIR / "h1.pid").write_text(f"{p.pid}\n")
    return p


def restart_h1_plain():
    stop_h1()
    p = start_h1()
    wait_until(lambda: ready("h1"), 30, "h1 ready again")
    return p


def scrape(host):
    return ns(f"jk-{host}", "curl", "-sf", "--max-time", "5", METRICS_URL, timeout=15).stdout


def parse_metrics(text):
    """{(name, frozenset(labels)): value} of a Prometheus text scrape."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, f"unparsable line {line!r}"
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no {name}{labels} in the scrape"
    return samples[key]


@contextlib.contextmanager
def traffic(seconds=8):
    """TCP t1 -> t2 across hosts, pings both ways, and drops (a denied port, a tenant RoCE
    frame), for `seconds`."""
    with iperf3_server(T2, 5301):
        with ns_bg(T1, "iperf3", "-c", IP[T2], "-p", 5301, "-t", seconds, "-b", "200M"), \
                ns_bg(T2, "ping", "-i", "0.05", "-w", seconds, IP[T1]):
            # Tenant UDP to the RoCEv2 port: dropped as tenant_roce.
            ns(T1, "bash", "-c", f"for i in $(seq 20); do echo x > /dev/udp/{IP[T2]}/4791; done",
               check=False)
            time.sleep(1.5)
            yield


@pytest.mark.usefixtures("testbed")
class TestWithTestbed:
    def test_every_host_serves_metrics_on_9417(self):
        for host in ("h1", "h2"):
            samples = parse_metrics(scrape(host))
            assert metric(samples, "jakiro_info", host=host, version=run(
                JAKIROD, "--version").stdout.split()[1]) == 1
            assert metric(samples, "jakiro_ready") == 1
        # jakiroctl metrics prints the same families.
        text = jakiroctl("h1", "metrics").stdout
        assert "jakiro_vnic_packets_total" in parse_metrics(text).__repr__()
        assert metric(parse_metrics(text), "jakiro_vnics") == 3
        # The listener is inside each host's namespace only.
        r = run("curl", "-sf", "--max-time", "2", METRICS_URL, check=False)
        assert r.returncode != 0 or "jakiro_info" not in r.stdout

    def test_the_man_page_names_every_metric_a_scrape_serves(self):
        """jakirod(8)'s METRICS section is where an operator looks a name up: every family a
        scrape has (# TYPE lines) must be named there."""
        families = set(re.findall(r"^# TYPE (\S+) ", jakiroctl("h1", "metrics").stdout, re.M))
        assert len(families) > 50, families
        # man(1) hyphenates a long name at the end of a line: join it again.
        page = re.sub(r"[\u2010-]\n\s*", "", man_text(MAN_PAGES["jakirod"]))
        missing = sorted(f for f in families if not re.search(rf"\b{f}\b", page))
        assert not missing, f"jakirod(8) does not name {missing}"

    def test_promtool_accepts_a_scrape_taken_under_traffic(self, tmp_path):
        with traffic():
            for host in ("h1", "h2"):
                text = scrape(host)
                (tmp_path / f"{host}.prom").write_text(text)
                r = run("promtool", "check", "metrics", input=text, check=False, timeout=30)
                print(f"promtool check metrics ({host}, {len(text.splitlines())} lines): "
                      f"exit {r.returncode} {r.stdout}{r.stderr}")
                assert r.returncode == 0, r.stdout + r.stderr
                assert r.stdout + r.stderr == "", "promtool's lint found problems"
        samples = parse_metrics((tmp_path / "h1.prom").read_text())
        assert metric(samples, "jakiro_vnic_packets_total", vnic="t1", direction="egress") > 0
        assert metric(samples, "jakiro_encapsulated_packets_total") > 0
        assert metric(samples, "jakiro_drops_total", reason="tenant_roce") > 0

    def test_a_scrape_lies_between_two_stats_taken_around_it(self):
        """Every counter the scrape shares with `jakiroctl stats --json` (and qos --json) is at
        least what the stats before it said and at most what the stats after it said."""
        # Shape t1 so QoS has numbers too; the test bed's YAML plus a qos block.
        base = (RUN_DIR / "h1.yaml").read_text()
        shaped = RUN_DIR / "h1-shaped.yaml"
        shaped.write_text(re.sub(r"(  - \{name: t1,.*)\}$",
                                 r"\1, qos: {rate: 300Mbit, rdma: {weight: 3}, tcp: {weight: 1}}}",
                                 base, count=1, flags=re.M))
        jakiroctl("h1", "apply", shaped)
        try:
            with traffic():
                before = stats("h1")
                qos_before = json.loads(jakiroctl("h1", "qos", "--json").stdout)
                samples = parse_metrics(scrape("h1"))
                after = stats("h1")
                qos_after = json.loads(jakiroctl("h1", "qos", "--json").stdout)
        finally:
            jakiroctl("h1", "apply", RUN_DIR / "h1.yaml")
        checked = []
        moved = 0

        def between(name, labels, path_in_stats, a=before, b=after):
            low, high = a, b
            for key in path_in_stats:
                low, high = low[key], high[key]
            value = metric(samples, name, **labels)
            assert low <= value <= high, f"{name}{labels} = {value} not in [{low}, {high}]"
            checked.append(name)
            return high > low

        for port in before["ports"]:
            for d in ("rx", "tx"):
                moved += between("jakiro_port_packets_total", {"port": port, "direction": d},
                                 ["ports", port, f"{d}_packets"])
                moved += between("jakiro_port_bytes_total", {"port": port, "direction": d},
                                 ["ports", port, f"{d}_bytes"])
                between("jakiro_port_errors_total", {"port": port, "direction": d},
                        ["ports", port, f"{d}_errors"])
                between("jakiro_port_superframes_total", {"port": port, "direction": d},
                        ["ports", port, f"{d}_superframes"])
            between("jakiro_port_missed_total", {"port": port}, ["ports", port, "rx_missed"])
        vnic_fields = [("jakiro_vnic_packets_total", "ingress", "to_tenant_packets"),
                       ("jakiro_vnic_packets_total", "egress", "from_tenant_packets"),
                       ("jakiro_vnic_bytes_total", "ingress", "to_tenant_bytes"),
                       ("jakiro_vnic_bytes_total", "egress", "from_tenant_bytes"),
                       ("jakiro_vnic_rdma_packets_total", "ingress", "rdma_rx_packets"),
                       ("jakiro_vnic_rdma_packets_total", "egress", "rdma_tx_packets"),
                       ("jakiro_sg_allowed_total", "ingress", "sg_allowed_ingress"),
                       ("jakiro_sg_allowed_total", "egress", "sg_allowed_egress"),
                       ("jakiro_sg_denied_total", "ingress", "sg_denied_ingress"),
                       ("jakiro_sg_denied_total", "egress", "sg_denied_egress")]
        for vnic in before["vnics"]:
            for name, d, field in vnic_fields:
                moved += between(name, {"vnic": vnic, "direction": d}, ["vnics", vnic, field])
            between("jakiro_vnic_drops_total", {"vnic": vnic}, ["vnics", vnic, "drops"])
        for i, rule in enumerate(before["rules"]):
            moved += between("jakiro_sg_rule_hits_total",
                             {"vpc": rule["vpc"], "group": rule["group"],
                              "direction": rule["direction"], "rule": str(rule["index"]),
                              "line": str(rule["line"])}, ["rules", i, "hits"])
        for name, field in (("created", "created"), ("evicted", "evicted"),
                            ("expired", "expired"), ("classifications", "classifications")):
            between(f"jakiro_conntrack_{name}_total", {}, ["conntrack", field])
        for reason in before["drops"]:
            moved += between("jakiro_drops_total", {"reason": reason}, ["drops", reason])
        overlay = {"encapsulated": ("jakiro_encapsulated_packets_total", {}),
                   "decapsulated": ("jakiro_decapsulated_packets_total", {}),
                   "switched_locally": ("jakiro_switched_locally_packets_total", {}),
                   "rdma_local_messages": ("jakiro_rdma_local_messages_total", {}),
                   "arp_replies_to_tenants": ("jakiro_arp_replies_total", {"to": "tenants"}),
                   "arp_replies_on_underlay": ("jakiro_arp_replies_total", {"to": "underlay"}),
                   "arp_replies_in_overlay": ("jakiro_arp_replies_total", {"to": "overlay"}),
                   "arp_requests_sent": ("jakiro_arp_requests_sent_total", {}),
                   "nd_replies_to_tenants": ("jakiro_nd_replies_to_tenants_total", {}),
                   "nd_replies_in_overlay": ("jakiro_nd_replies_in_overlay_total", {}),
                   "ce_marked_on_decap": ("jakiro_ecn_ce_marked_on_decap_total", {}),
                   "qos_ce_marked": ("jakiro_qos_ce_marked_total", {}),
                   "busy_polls": ("jakiro_worker_busy_polls_total", {"worker": "0"}),
                   "idle_sleeps": ("jakiro_worker_idle_sleeps_total", {"worker": "0"}),
                   "throttled_sleeps": ("jakiro_worker_throttled_sleeps_total", {"worker": "0"}),
                   "rx_wakes": ("jakiro_worker_rx_wakes_total", {"worker": "0"}),
                   "doorbell_wakes": ("jakiro_worker_doorbell_wakes_total", {"worker": "0"}),
                   "slow_yields": ("jakiro_worker_slow_yields_total", {"worker": "0"}),
                   "waiting_naps": ("jakiro_worker_waiting_naps_total", {"worker": "0"}),
                   "handed_fabric": ("jakiro_worker_handed_fabric_total", {"worker": "0"}),
                   "handed_port": ("jakiro_worker_handed_port_total", {"worker": "0"}),
                   "handed_roce": ("jakiro_worker_handed_roce_total", {"worker": "0"}),
                   "taken_handoffs": ("jakiro_worker_taken_handoffs_total", {"worker": "0"})}
        assert set(overlay) == set(before["overlay"]), "a global counter has no metric"
        for key, (name, labels) in overlay.items():
            moved += between(name, labels, ["overlay", key])
        # QoS per vNIC and class (jakiroctl qos --json is a list of shaped vNICs).
        qos_fields = {"sent_bytes": "jakiro_qos_sent_bytes_total",
                      "sent_packets": "jakiro_qos_sent_packets_total",
                      "tail_drops": "jakiro_qos_tail_drops_total",
                      "received_bytes": "jakiro_qos_received_bytes_total",
                      "received_packets": "jakiro_qos_received_packets_total",
                      "ce_marked": "jakiro_qos_ingress_ce_marked_total",
                      "ingress_dropped": "jakiro_qos_ingress_dropped_total",
                      "cnps": "jakiro_qos_cnps_total",
                      "busy_grants": "jakiro_qos_busy_grants_total"}
        assert [v["vnic"] for v in qos_before] == ["t1"]
        for c, entry in enumerate(qos_before[0]["classes"]):
            labels = {"vnic": "t1", "class": entry["class"]}
            for field, name in qos_fields.items():
                moved += between(name, labels, [0, "classes", c, field], qos_before, qos_after)
            assert metric(samples, "jakiro_qos_share_bps", **labels) == entry["share_bps"]
            assert metric(samples, "jakiro_qos_weight", **labels) == entry["weight"]
        print(f"{len(checked)} counters compared, {moved} moved between the two stats")
        assert moved >= 10, "no traffic moved the counters: the test proves nothing"

    def test_rdma_metrics_lie_between_two_qps_taken_around_them(self):
        """QP counts by state, and each vNIC's QP counters (packets, retransmits, NAKs, RNR
        NAKs, CNPs) against the sum over `jakiroctl qps --json` before and after the scrape,
        while an ibv_rc_pingpong keeps its QPs busy."""
        def qps():
            return [q for q in json.loads(jakiroctl("h1", "qps", "--json").stdout)["qps"]
                    if q["vnic"] == "t1"]
        assert qps() == [], "no QP of t1 before the test"
        base = parse_metrics(scrape("h1"))  # what QPs destroyed before counted
        env = dict(os.environ, JAKIRO_VERBS_LIB=str(BUILD / "verbs_shim" / "libjakiro_verbs.so"))
        args = ["ibv_rc_pingpong", "-g", "0", "-n", "1000000", "-p", "18612"]
        with ns_bg(T2, JAKIRO_RUN, "--", *args, env=env), \
                ns_bg(T1, "bash", "-c", f"sleep 1; exec {JAKIRO_RUN} -- {' '.join(args)} {IP[T2]}",
                      env=env):
            wait_until(lambda: any(q["state"] == "RTS" and q["packets_sent"] > 100
                                   for q in qps()), 20, "t1's QP sending")
            before = qps()
            samples = parse_metrics(scrape("h1"))
            after = qps()
        assert [q["qpn"] for q in before] == [q["qpn"] for q in after], "the same QPs throughout"
        states = {}
        for q in before:
            states[(q["type"], q["state"])] = states.get((q["type"], q["state"]), 0) + 1
        for (kind, state), n in states.items():
            assert metric(samples, "jakiro_rdma_qps", vnic="t1", type=kind, state=state) == n
        fields = [("jakiro_rdma_qp_packets_total", {"direction": "tx"}, "packets_sent"),
                  ("jakiro_rdma_qp_packets_total", {"direction": "rx"}, "packets_received"),
                  ("jakiro_rdma_qp_bytes_total", {"direction": "tx"}, "bytes_sent"),
                  ("jakiro_rdma_retransmitted_packets_total", {}, "retransmitted"),
                  ("jakiro_rdma_timeouts_total", {}, "timeouts"),
                  ("jakiro_rdma_naks_total", {"direction": "rx"}, "naks_received"),
                  ("jakiro_rdma_naks_total", {"direction": "tx"}, "naks_sent"),
                  ("jakiro_rdma_rnr_naks_total", {"direction": "rx"}, "rnr_naks_received"),
                  ("jakiro_rdma_rnr_naks_total", {"direction": "tx"}, "rnr_naks_sent"),
                  ("jakiro_rdma_cnps_total", {"direction": "rx"}, "cnps_received"),
                  ("jakiro_rdma_cnps_total", {"direction": "tx"}, "cnps_sent"),
                  ("jakiro_rdma_completions_total", {}, "completions"),
                  ("jakiro_rdma_error_completions_total", {}, "error_completions")]
        for name, labels, field in fields:
            labels = dict(labels, vnic="t1")
            earlier = base.get((name, frozenset(labels.items())), 0)
            low = earlier + sum(q[field] for q in before)
            high = earlier + sum(q[field] for q in after)
            value = metric(samples, name, **labels)
            assert low <= value <= high, f"{name}{labels} = {value} not in [{low}, {high}]"
        assert metric(samples, "jakiro_rdma_qp_packets_total", vnic="t1", direction="tx") > 100
        # Once the QPs are gone their counts stay in the totals (the totals never go down).
        wait_until(lambda: qps() == [], 10, "t1's QPs destroyed")
        time.sleep(1.2)  # the control thread looks at the QPs every second
        later = parse_metrics(scrape("h1"))
        for name, labels, _ in fields:
            key = (name, frozenset(dict(labels, vnic="t1").items()))
            assert later[key] >= samples[key], f"{key} went down after the QPs went away"

    def test_telemetry_has_the_same_metrics(self):
        sock = Path("/run/dpdk/jakiro-h1/dpdk_telemetry.v2")
        assert sock.exists(), "DPDK telemetry socket"
        query = ("import json, socket, sys\n"
                 "s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
                 "s.connect(sys.argv[1]); s.recv(16384)\n"
                 "for c in sys.argv[2:]:\n"
                 "    s.send(c.encode()); print(s.recv(65536).decode())\n")
        text = scrape("h1")
        before = parse_metrics(text)
        out = run(PYTHON, "-c", query, sock, "/jakiro/metrics",
                  "/jakiro/metric,jakiro_vnic_packets_total", "/jakiro/metric,jakiro_ready",
                  "/jakiro/metric,jakiro_no_such").stdout.splitlines()
        after = parse_metrics(scrape("h1"))
        names = json.loads(out[0])["/jakiro/metrics"]
        assert "jakiro_drops_total" in names and "jakiro_qos_share_bps" in names
        assert set(names) == set(re.findall(r"^# TYPE (\w+) ", text, re.M))
        packets = json.loads(out[1])["/jakiro/metric"]
        for vnic in ("t1", "t5", "t3"):
            for d in ("ingress", "egress"):
                low = metric(before, "jakiro_vnic_packets_total", vnic=vnic, direction=d)
                high = metric(after, "jakiro_vnic_packets_total", vnic=vnic, direction=d)
                assert low <= packets[f"{d}/{vnic}"] <= high
        assert json.loads(out[2])["/jakiro/metric"] == {"value": 1}
        assert json.loads(out[3])["/jakiro/metric"] is None

    def test_sd_notify_ready_after_ports_up_then_status_watchdog_stopping(self, tmp_path):
        notify = tmp_path / "notify.sock"
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        listener.bind(str(notify))
        listener.settimeout(0.2)
        messages = []  # (monotonic time, text)

        def receive_until(predicate, timeout):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    messages.append((time.monotonic(), listener.recv(4096).decode()))
                except socket.timeout:
                    continue
                if predicate(messages[-1][1]):
                    return messages[-1]
            raise AssertionError(f"timed out; got {messages}")

        stop_h1()
        env = dict(os.environ, NOTIFY_SOCKET=str(notify), WATCHDOG_USEC="2000000")
        env.pop("WATCHDOG_PID", None)
        started = time.monotonic()
        p = start_h1(env=env)
        try:
            t_ready, text = receive_until(lambda m: "READY=1" in m.split("\n"), 30)
            # At READY=1 the ports are up and the control socket answers at once.
            status = json.loads(jakiroctl("h1", "status", "--json").stdout)
            assert len(status["ports"]) == 4 and all(port["link_up"] for port in status["ports"])
            assert re.search(r"^STATUS=(not )?ready: 4/4 ports up", text, re.M), text
            # STATUS= follows the state: ready once h2's underlay MAC is resolved.
            receive_until(lambda m: m.startswith("STATUS=ready: 4/4 ports up, underlay "
                                                 "neighbours 1/1 resolved"), 10)
            # WATCHDOG=1 every half period (1 s) while the worker polls.
            pings = [receive_until(lambda m: m == "WATCHDOG=1", 3)[0] for _ in range(3)]
            assert 0.5 < pings[-1] - pings[0] < 3.5, pings
            # Reload as systemd does it: the unit's ExecReload, on this host.
            reload_cmd = unit_setting("ExecReload").replace(f"{BINDIR}/jakiroctl", JAKIROCTL)
            reload_cmd = reload_cmd.replace("/run/jakiro/%i.sock", "/run/jakiro/h1.sock")
            bad = tmp_path / "h1-bad.yaml"
            bad.write_text((RUN_DIR / "h1.yaml").read_text()
                           .replace("name: default", "name: 1x", 1).replace("vni: 100", "vni: 0"))
            r = run(*reload_cmd.replace("/etc/jakiro/%i.yaml", str(bad)).split(), check=False)
            assert r.returncode != 0 and "nothing changed" in r.stdout + r.stderr
            r = run(*reload_cmd.replace("/etc/jakiro/%i.yaml", str(RUN_DIR / "h1.yaml")).split())
            assert "applied" in r.stdout
            # STOPPING=1 on SIGTERM, and a clean exit.
            os.kill(p.pid, signal.SIGTERM)
            receive_until(lambda m: "STOPPING=1" in m.split("\n"), 10)
            assert p.wait(timeout=15) == 0
            print(f"READY=1 {t_ready - started:.2f}s after start; {len(messages)} messages")
        finally:
            listener.close()
            if p.poll() is None:
                stop(p)
            restart_h1_plain()

    def test_the_units_capabilities_are_enough(self, tmp_path):
        """jakirod with exactly CapabilityBoundingSet= of the unit (as uid 0 under systemd):
        ports, overlay traffic, a live apply, and a verbs client's RDMA traffic."""
        caps = unit_setting("CapabilityBoundingSet").split()
        assert caps and all(c.startswith("CAP_") for c in caps)
        bounding = "-all," + ",".join("+" + c[4:].lower() for c in caps)
        stop_h1()
        p = start_h1(prefix=["setpriv", f"--bounding-set={bounding}", "--inh-caps=-all",
                             "--no-new-privs"])
        try:
            wait_until(lambda: ready("h1"), 30, "h1 ready with the unit's capabilities")
            with open(f"/proc/{p.pid}/status") as f:
                eff = int(re.search(r"CapEff:\s+(\w+)", f.read()).group(1), 16)
            assert bin(eff).count("1") == len(caps), f"CapEff {eff:x} for {caps}"
            assert run("ip", "netns", "exec", T1, "ping", "-c", "3", "-i", "0.2", "-W", "2",
                       IP[T2], check=False).returncode == 0
            jakiroctl("h1", "apply", RUN_DIR / "h1.yaml")
            shim = BUILD / "verbs_shim" / "libjakiro_verbs.so"
            env = dict(os.environ, JAKIRO_VERBS_LIB=str(shim))
            args = ["ibv_rc_pingpong", "-g", "0", "-n", "20", "-p", "18611"]
            with ns_bg(T2, JAKIRO_RUN, "--", *args, env=env):
                time.sleep(1)
                r = ns(T1, JAKIRO_RUN, "--", *args, IP[T2], env=env, timeout=30, check=False)
            print(r.stdout, r.stderr)
            assert r.returncode == 0 and "20 iters in" in r.stdout, r.stderr
        finally:
            restart_h1_plain()

    def test_started_on_one_cpu_every_thread_stays_there(self):
        """A unit's CPUAffinity= (here as taskset does it) keeps the whole daemon on the CPUs
        it names, the workers and EAL's threads included: the dataplane's cores apart from the
        tenants'."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            pytest.skip("one CPU: no affinity narrower than every CPU")
        dataplane_cpu = cpus[-1]
        stop_h1()
        p = start_h1(prefix=["taskset", "-c", dataplane_cpu])
        try:
            wait_until(lambda: ready("h1"), 30, "h1 ready on one CPU")
            # Traffic through the worker, which is on that CPU and serves.
            assert run("ip", "netns", "exec", T1, "ping", "-c", "3", "-i", "0.2", "-W", "2",
                       IP[T2], check=False).returncode == 0
            names, elsewhere = [], {}
            for tid in os.listdir(f"/proc/{p.pid}/task"):
                comm = Path(f"/proc/{p.pid}/task/{tid}/comm").read_text().strip()
                names.append(comm)
                allowed = os.sched_getaffinity(int(tid))
                if allowed != {dataplane_cpu}:
                    elsewhere[f"{tid} {comm}"] = sorted(allowed)
            # The worker lcore, EAL's control threads and the vNICs' verbs endpoints among them.
            assert any(n.startswith("jk-verbs-") for n in names), names
            assert not elsewhere, f"threads beyond CPU {dataplane_cpu}: {elsewhere}"
        finally:
            restart_h1_plain()

    def test_logs_are_structured_rate_limited_and_never_per_packet(self, tmp_path):
        log = RUN_DIR / "h1.log"
        lines_before = log.read_text(errors="replace").splitlines()
        drops_before = sum(stats("h1")["drops"].values())
        # 3000 frames jakirod drops (tenant RoCE from t1), then a burst of rejected applies.
        ns(T1, "bash", "-c", f"for i in $(seq 3000); do echo x; done > /dev/udp/{IP[T2]}/4791",
           check=False, timeout=60)
        wait_until(lambda: sum(stats("h1")["drops"].values()) >= drops_before + 2000, 10,
                   "the frames to be dropped")
        bad = tmp_path / "bad.yaml"
        bad.write_text("host: {name: h1}\n")
        for _ in range(30):
            r = run(JAKIROCTL, "--host", "h1", "apply", bad, check=False)
            assert r.returncode == 1
        time.sleep(0.5)
        new = log.read_text(errors="replace").splitlines()[len(lines_before):]
        print("\n".join(new[:5]), f"\n... {len(new)} new lines")
        rejected = [line for line in new if "event=apply_rejected" in line]
        # At most 20 lines of one event per 10 s (fewer if this jakirod logged some already).
        assert 1 <= len(rejected) <= 20, f"{len(rejected)} apply_rejected lines (burst is 20)"
        assert len(new) < 30, "thousands of drops must not log a line each"
        for line in new:
            assert re.match(r'^ts=\S+Z level=(error|warning|notice|info|debug) event=\w+ '
                            r'host=h1 msg=', line), line
        samples = parse_metrics(scrape("h1"))
        assert metric(samples, "jakiro_log_lines_suppressed_total") >= 10

    def test_metrics_address_changes_live_with_apply(self, tmp_path):
        moved = tmp_path / "h1-moved.yaml"
        moved.write_text((RUN_DIR / "h1.yaml").read_text().replace("127.0.0.1:9417",
                                                                   "127.0.0.1:9418"))
        r = jakiroctl("h1", "apply", moved)
        assert "metrics on 127.0.0.1:9418" in r.stdout
        try:
            out = ns("jk-h1", "curl", "-sf", "--max-time", "5",
                     "http://127.0.0.1:9418/metrics").stdout
            assert "jakiro_info" in out
            assert ns("jk-h1", "curl", "-sf", "--max-time", "2", METRICS_URL,
                      check=False).returncode != 0, "the old address is closed"
            # A port that is taken rejects the whole apply.
            with ns_bg("jk-h1", PYTHON, "-m", "http.server", "9419", "--bind", "127.0.0.1"):
                wait_until(lambda: ns("jk-h1", "ss", "-Hltn", "sport = :9419").stdout.strip(),
                           5, "a listener on 9419")
                taken = tmp_path / "h1-taken.yaml"
                taken.write_text(moved.read_text().replace("9418", "9419"))
                r = run(JAKIROCTL, "--host", "h1", "apply", taken, check=False)
                assert r.returncode == 1 and "nothing changed" in r.stdout + r.stderr
            assert "jakiro_info" in ns("jk-h1", "curl", "-sf", "--max-time", "5",
                                       "http://127.0.0.1:9418/metrics").stdout
        finally:
            jakiroctl("h1", "apply", RUN_DIR / "h1.yaml")
        assert "jakiro_info" in scrape("h1")

    def test_sighup_applies_the_config_file_again(self, tmp_path):
        pid = int((RUN_DIR / "h1.pid").read_text())
        log = RUN_DIR / "h1.log"
        before = len(log.read_text(errors="replace").splitlines())
        os.kill(pid, signal.SIGHUP)
        wait_until(lambda: any("event=applied" in line for line in
                               log.read_text(errors="replace").splitlines()[before:]),
                   5, "SIGHUP's apply in the log")
        assert alive(pid) and ready("h1")
