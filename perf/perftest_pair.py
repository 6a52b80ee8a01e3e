"""Runs one perftest client/server pair between two tenants of the test bed, both unmodified
under tools/jakiro-run; shared by perf/rdma_throughput, perf/overlay_throughput and
perf/noisy_neighbour. A pair that does not produce its result row raises ProgramFailed with
what the server and the client said (a perftest that died at once is not a measurement)."""
import os
import time

from programs import Background, ProgramFailed, run as run_program, said

HERE = os.path.dirname(os.path.abspath(__file__))
JAKIRO_RUN = os.path.join(HERE, "..", "tools", "jakiro-run")
PERFTEST_PORT = 18515
LISTEN_WAIT_S = 20


def listening(ns, port):
    try:
        return bool(run_program(["ip", "netns", "exec", ns, "ss", "-Hltn",
                                 f"sport = :{port}"]).stdout.strip())
    except ProgramFailed:
        return False


def run(tool, server_ns, client_ns, server_ip, args, timeout=120):
    """Runs a perftest server and client under jakiro-run; returns the client's result row."""
    common = ["-x", "0", "-F", "-p", str(PERFTEST_PORT)] + args
    server = Background(["ip", "netns", "exec", server_ns, JAKIRO_RUN, "--", tool] + common,
                        name=f"{tool} server in {server_ns}")
    try:
        # perftest's out-of-band exchange is a TCP listener: start the client only once it is
        # up (a fixed pause was too short when jakiro-run started slowly on a loaded machine,
        # and the row then had no result).
        deadline = time.monotonic() + LISTEN_WAIT_S
        while not listening(server_ns, PERFTEST_PORT):
            if not server.running():
                raise ProgramFailed(f"{tool} server in {server_ns} exited "
                                    f"{server.proc.returncode} before it listened: "
                                    f"{said(server.output())}")
            if time.monotonic() > deadline:
                raise ProgramFailed(f"{tool} server in {server_ns} did not listen within "
                                    f"{LISTEN_WAIT_S} s: {said(server.output())}")
            time.sleep(0.1)
        try:
            client = run_program(["ip", "netns", "exec", client_ns, JAKIRO_RUN, "--", tool] +
                                 common + [server_ip], timeout=timeout)
        except ProgramFailed as e:
            raise ProgramFailed(f"{tool} client in {client_ns}: {e}; the server said: "
                                f"{said(server.output())}")
        lines = client.stdout.splitlines()
        for i, line in enumerate(lines):
            if line.strip().startswith("#bytes") and i + 1 < len(lines) and lines[i + 1].split():
                return lines[i + 1].split()
        raise ProgramFailed(f"{tool} client in {client_ns}: no result line: "
                            f"{said(client.stdout + client.stderr)}")
    finally:
        server.stop()


def bw_gbytes(row):
    """A bandwidth row's average in GB/s (perftest's MB is 10^6 bytes)."""
    return float(row[3]) / 1000.0
