"""systemd's side of a Type=notify service with a file-descriptor store, for one jakirod of the
test bed (systemd is not PID 1 here). What it does is what systemd 252 does for
jakirod@.service (FileDescriptorStoreMax=, NotifyAccess=all; docs/restart.md):

- it owns the notify socket (AF_UNIX, SOCK_DGRAM, SO_PASSCRED) and starts the daemon with
  NOTIFY_SOCKET; a message is believed only from the service's process (its credentials);
- FDSTORE=1 keeps the message's descriptors under its FDNAME= (up to the store's size; beyond,
  they are closed), FDSTOREREMOVE=1 closes every descriptor of that name, BARRIER=1 is answered
  by closing its descriptor, descriptors of any other message are closed;
- a stored descriptor that reports POLLHUP or POLLERR is dropped;
- `restart`: SIGTERM, wait for the exit (SIGKILL after the stop timeout), start again with the
  store's descriptors at 3, 4, ... and LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID (the new process's
  own pid: `sh -c 'LISTEN_PID=$$ exec ...'`), the store kept;
- `stop`: the same SIGTERM, then the unit is inactive and the store is closed;
- the service runs at the unit's Nice=.
"""

import fcntl
import os
import select
import signal
import socket
import struct
import threading
import time

SCM_MAX_FD = 253
STOP_TIMEOUT_S = 20  # the unit's TimeoutStopSec=


def describe(fd):
    """What a descriptor is, for a report: 'socket SOCK_SEQPACKET', 'memfd', ..."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "?"
    if target.startswith("socket:"):
        kind = socket.socket(fileno=os.dup(fd))
        try:
            return f"socket {socket.SocketKind(kind.type).name}"
        finally:
            kind.close()
    return target


class ServiceManager:
    def __init__(self, directory, namespace, argv, store_max, log_path, nice=0):
        self.namespace, self.argv, self.store_max = namespace, [str(a) for a in argv], store_max
        self.nice = nice  # the unit's Nice=
        self.log_path = log_path
        self.path = str(directory / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(self.path)
        self.store = []  # [(name, fd)] in the order stored
        self.messages = []  # [(pid, text)] believed
        self.refused = []  # [(pid, text)] from another process
        self.dropped = []  # names of stored descriptors dropped on POLLHUP/POLLERR or overflow
        self.pid = None
        self.exit_status = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ the notify socket

    def _serve(self):
        while not self._stop.is_set():
            self._drop_hung_up()
            ready, _, _ = select.select([self.sock], [], [], 0.05)
            if not ready:
                continue
            try:
                data, ancillary, _, _ = self.sock.recvmsg(
                    4096, socket.CMSG_SPACE(SCM_MAX_FD * 4) + socket.CMSG_SPACE(12),
                    socket.MSG_CMSG_CLOEXEC)
            except OSError:
                continue
            fds, pid = [], None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds += list(struct.unpack(f"{len(payload) // 4}i",
                                              payload[:len(payload) // 4 * 4]))
                elif level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid = struct.unpack("3i", payload[:12])[0]
            self._handle(pid, data.decode(errors="replace"), fds)

    def _handle(self, pid, text, fds):
        with self._lock:
            if pid is None or pid != self.pid:
                self.refused.append((pid, text))
                self._close(fds)
                return
            self.messages.append((pid, text))
            fields = dict(line.split("=", 1) for line in text.split("\n") if "=" in line)
            if fields.get("FDSTORE") == "1":
                name = fields.get("FDNAME", "stored")
                for fd in fds:
                    if len(self.store) >= self.store_max:
                        self.dropped.append(name)
                        os.close(fd)
                    else:
                        self.store.append((name, fd))
                return
            if fields.get("FDSTOREREMOVE") == "1":
                keep = []
                for stored_name, fd in self.store:
                    if stored_name == fields.get("FDNAME"):
                        os.close(fd)
                    else:
                        keep.append((stored_name, fd))
                self.store = keep
            self._close(fds)  # BARRIER=1's among them: closing it answers the barrier

    def _drop_hung_up(self):
        with self._lock:
            if not self.store:
                return
            poller = select.poll()
            for _, fd in self.store:
                poller.register(fd, 0)  # POLLHUP and POLLERR are always reported
            bad = {fd for fd, events in poller.poll(0)
                   if events & (select.POLLHUP | select.POLLERR | select.POLLNVAL)}
            if bad:
                self.dropped += [f"{name} ({describe(fd)})" for name, fd in self.store
                                 if fd in bad]
                self._close(bad)
                self.store = [(name, fd) for name, fd in self.store if fd not in bad]

    @staticmethod
    def _close(fds):
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def names(self):
        with self._lock:
            return [name for name, _ in self.store]

    def texts(self, since=0):
        with self._lock:
            return [text for _, text in self.messages[since:]]

    # ------------------------------------------------------------ the service's process

    def start(self, extra_env=None, listen_pid=None):
        """Starts the service with the store's descriptors; `listen_pid` overrides LISTEN_PID
        (a test of descriptors meant for another process)."""
        with self._lock:
            stored = list(self.store)
        env = dict(os.environ, NOTIFY_SOCKET=self.path, **(extra_env or {}))
        for key in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_USEC", "FDSTORE"):
            env.pop(key, None)
        actions = []
        high = []
        if stored:
            env["LISTEN_FDS"] = str(len(stored))
            env["LISTEN_FDNAMES"] = ":".join(name for name, _ in stored)
            # Above every number 3.. that the copies go to, so none is overwritten first.
            base = 3 + len(stored) + max(fd for _, fd in stored) + 16
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, base) for _, fd in stored]
            actions = [(os.POSIX_SPAWN_DUP2, fd, 3 + i) for i, fd in enumerate(high)]
        pid_word = "$$" if listen_pid is None else str(listen_pid)
        # nice(1) execs the service in the same process: LISTEN_PID stays its pid.
        run = f'exec nice -n {self.nice} "$0" "$@"'
        script = f"LISTEN_PID={pid_word} {run}" if stored else run
        log = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        try:
            argv = ["ip", "netns", "exec", self.namespace, "sh", "-c", script, *self.argv]
            with self._lock:
                self.exit_status = None
                self.pid = os.posix_spawnp(
                    "ip", argv, env, setsid=True,
                    file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, log, 1),
                                  (os.POSIX_SPAWN_DUP2, log, 2), *actions])
        finally:
            self._close([log, null, *high])
        return self.pid

    def running(self):
        if self.pid is None or self.exit_status is not None:
            return False
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return True
        self.exit_status = os.waitstatus_to_exitcode(status)
        return False

    def wait_ready(self, since, timeout):
        """Waits for READY=1 among the messages from `since` on; False if the service exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("READY=1" in t.split("\n") for t in self.texts(since)):
                return True
            if not self.running():
                return False
            time.sleep(0.05)
        raise AssertionError(f"no READY=1 within {timeout}s")

    def terminate(self):
        """SIGTERM; SIGKILL after the stop timeout; returns the exit status."""
        if not self.running():
            return self.exit_status
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.002)
        if self.running():
            os.kill(self.pid, signal.SIGKILL)
            while self.running():
                time.sleep(0.02)
        return self.exit_status

    def restart(self, extra_env=None, listen_pid=None, timeout=60):
        """`systemctl restart`: stop (the store stays: a start job is queued), then start.
        Returns (the old process's exit status, whether the new one reported READY=1)."""
        status = self.terminate()
        since = len(self.messages)
        self.start(extra_env, listen_pid)
        return status, self.wait_ready(since, timeout)

    def stop(self):
        """`systemctl stop`: the unit goes inactive and systemd closes its store."""
        status = self.terminate()
        self.close_store()
        return status

    def close_store(self):
        with self._lock:
            self._close([fd for _, fd in self.store])
            self.store = []

    def close(self):
        self._stop.set()
        self._thread.join(timeout=5)
        self.close_store()
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
