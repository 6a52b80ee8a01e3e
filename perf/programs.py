"""The programs a benchmark starts, checked: each must have done its work, or the benchmark
fails with that program's own words. A figure computed from a program that died at once
(no library, no device, no peer) is a wrong number that looks like a measurement."""
import json
import os
import signal
import subprocess
import sys
import tempfile

TAIL = 800  # characters of a failed program's output shown: its error, not its whole log


class ProgramFailed(RuntimeError):
    """A program exited non-zero, ended early, or printed no result."""


def said(text):
    text = (text or "").strip()
    return text if len(text) <= TAIL else "..." + text[-TAIL:]


def describe(cmd):
    return cmd if isinstance(cmd, str) else " ".join(map(str, cmd))


def run(cmd, timeout=60, **kw):
    """Runs cmd to its end (a string goes through the shell); returns its CompletedProcess, or
    raises ProgramFailed with the program's output when it exits non-zero or times out."""
    try:
        r = subprocess.run(cmd if isinstance(cmd, str) else [str(c) for c in cmd],
                           shell=isinstance(cmd, str), capture_output=True, text=True,
                           timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"") + (e.stderr or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        raise ProgramFailed(f"{describe(cmd)}: still running after {timeout} s: {said(out)}")
    if r.returncode != 0:
        raise ProgramFailed(f"{describe(cmd)}: exited {r.returncode}: {said(r.stdout + r.stderr)}")
    return r


def iperf3_report(text, what="iperf3"):
    """iperf3 -J's report, or ProgramFailed with what it printed instead."""
    try:
        report = json.loads(text)
    except ValueError:
        raise ProgramFailed(f"{what}: no JSON report: {said(text)}")
    if "error" in report:
        raise ProgramFailed(f"{what}: {report['error']}")
    if "end" not in report:
        raise ProgramFailed(f"{what}: report without results: {said(text)}")
    return report


def iperf3_received_bps(text, what="iperf3"):
    bps = iperf3_report(text, what)["end"].get("sum_received", {}).get("bits_per_second", 0)
    if not bps:
        raise ProgramFailed(f"{what}: nothing received: {said(text)}")
    return bps


class Background:
    """A program running beside the measurement. Its output (stdout and stderr) goes to a file,
    never to a pipe nobody reads (a chatty program would block) nor away (its error would be
    lost); `check_running` and `finish` raise with it."""

    def __init__(self, cmd, name=None, **kw):
        self.name = name or describe(cmd)
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(cmd if isinstance(cmd, str) else [str(c) for c in cmd],
                                     shell=isinstance(cmd, str), stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     text=True, start_new_session=True, **kw)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def running(self):
        return self.proc.poll() is None

    def check_running(self):
        """Raises if the program has already ended (it was meant to be still at work)."""
        if not self.running():
            raise ProgramFailed(f"{self.name}: ended early (exit {self.proc.returncode}): "
                                f"{said(self.output())}")

    def finish(self, timeout, ok=(0,)):
        """Waits for the program's own end; returns its output, or raises if it did not end in
        time or exited with a code not in ok."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise ProgramFailed(f"{self.name}: still running after {timeout} s: "
                                f"{said(self.output())}")
        if self.proc.returncode not in ok:
            raise ProgramFailed(f"{self.name}: exited {self.proc.returncode}: "
                                f"{said(self.output())}")
        return self.output()

    def stop(self, sig=signal.SIGKILL):
        """Ends the program and everything it started (its session), and reaps it."""
        if self.running():
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def exit_if_failed(script, failures):
    """After the table is printed: a run in which any program failed exits non-zero, naming
    each failure with the program's own error."""
    if failures:
        for f in failures:
            print(f"{script}: FAILED: {f}", file=sys.stderr)
        sys.exit(1)
