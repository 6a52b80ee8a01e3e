"""Runs one perftest client/server pair between two tenants of the test bed, both unmodified
under tools/jakiro-run; shared by perf/rdma_throughput and perf/overlay_throughput."""
import os
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JAKIRO_RUN = os.path.join(HERE, "..", "tools", "jakiro-run")
PERFTEST_PORT = 18515


def sh(cmd, timeout=60, check=True):
    return subprocess.run(cmd, shell=True, check=check, timeout=timeout, capture_output=True,
                          text=True)


def run(tool, server_ns, client_ns, server_ip, args, timeout=120):
    """Runs a perftest server and client under jakiro-run; returns the client's result row."""
    common = ["-x", "0", "-F", "-p", str(PERFTEST_PORT)] + args
    server = subprocess.Popen(["ip", "netns", "exec", server_ns, JAKIRO_RUN, "--", tool] + common,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        # perftest's out-of-band exchange is a TCP listener: start the client only once it is
        # up (a fixed pause was too short when jakiro-run started slowly on a loaded machine,
        # and the row then had no result).
        deadline = time.monotonic() + 20
        while not sh(f"ip netns exec {server_ns} ss -Hltn 'sport = :{PERFTEST_PORT}'",
                     check=False).stdout.strip():
            if server.poll() is not None or time.monotonic() > deadline:
                said = server.stdout.read()[-300:] if server.poll() is not None else ""
                raise RuntimeError(f"{tool} server never listened: {said}")
            time.sleep(0.1)
        client = subprocess.run(["ip", "netns", "exec", client_ns, JAKIRO_RUN, "--", tool] +
                                common + [server_ip], capture_output=True, text=True,
                                timeout=timeout)
        if client.returncode != 0:
            raise RuntimeError(f"{tool} exited {client.returncode}: "
                               f"{(client.stdout + client.stderr)[-300:]}")
        lines = client.stdout.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("#bytes") and i + 1 < len(lines):
                return lines[i + 1].split()
        raise RuntimeError(f"{tool}: no result line in {client.stdout[-300:]}")
    finally:
        try:
            os.killpg(server.pid, 9)
        except ProcessLookupError:
            pass
        server.wait(timeout=10)


def bw_gbytes(row):
    """A bandwidth row's average in GB/s (perftest's MB is 10^6 bytes)."""
    return float(row[3]) / 1000.0
