"""docs/containers.md's podman walk-through, run as written: every ```sh block of its podman
section, in the document's order, on the host its first line names (`# on h1`, `# on h2`, `#
on every host`), so that a step that stops working, or a document that stops saying what
works, fails here.

A host is a test-bed host seen as a machine of its own: its network namespace (where its
jakirod runs), its own host name, and a mount namespace in which /etc, /var/lib and /usr/local
are overlays on the machine's. The blocks write the real paths (/etc/cni/net.d, /etc/cdi,
/etc/containers/containers.conf.d, jakiro-cni's leases in /var/lib/jakiro/cni) and the machine
keeps none of it. What the walk-through takes as given is laid in beforehand: what
`meson install` puts in /usr/local (this build's jakiro-cni, libjakiro_verbs.so and jakiro-run),
/etc/jakiro/<host>.yaml (the test bed's host YAML, etcd control plane), and podman's storage
in the test's directory (storage.conf, the engine's tmp_dir). One line is not run: `apt-get
install -y PACKAGES` is checked as `dpkg-query -W PACKAGES` (tools/bootstrap installs them; a
test installs nothing).

Costs about 8 s on the 2-core machine, the test bed's start included: two images made of the
host's binaries, three containers, two 2-second ib_write_bw runs.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from cni_runtime import CNI, vnic_links
from conftest import JAKIROCTL, JAKIROD, RUN_DIR, SRC, ns

TESTBED_ARGS = ["--control", "etcd"]
ETCD_URL = "http://198.18.0.250:2379"
DOC = SRC / "docs" / "containers.md"
HOSTS = ("h1", "h2")
BLOCK_TIMEOUT_S = 120
SHIM = Path(JAKIROD).resolve().parents[1] / "verbs_shim" / "libjakiro_verbs.so"
TRIPLET = f"{os.uname().machine}-linux-gnu"
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "HOME": "/root", "LANG": "C.UTF-8"}


def walkthrough(text):
    """[(hosts, script)] of the podman section's ```sh blocks, in order."""
    section = re.search(r"^## podman.*?(?=^## )", text, re.M | re.S)
    assert section, f"{DOC}: no '## podman' section"
    steps = []
    for block in re.findall(r"^```sh\n(.*?)^```", section.group(0), re.M | re.S):
        first = block.splitlines()[0]
        on = re.match(r"# on (every host|h1|h2)\b", first)
        assert on, f"{DOC}: a walk-through block must say where it runs: {first!r}"
        steps.append((HOSTS if on.group(1) == "every host" else (on.group(1),), block))
    return steps


def as_run_here(script):
    """The script, with `apt-get install -y P...` checked instead of run."""
    return re.sub(r"^apt-get install -y (.*)$", r"dpkg-query -W \1", script, flags=re.M)


class Host:
    """Host `name`: a process holding its namespaces, and commands run inside them."""

    def __init__(self, name, work):
        self.name, self.dir = name, work / name
        for d in ("etc.up", "etc.work", "varlib.up", "varlib.work", "usrlocal.up",
                  "usrlocal.work", "storage", "runroot", "tmp"):
            (self.dir / d).mkdir(parents=True)
        # What `meson install` puts under /usr/local, from this build.
        up = self.dir / "usrlocal.up"
        for src, dest in ((CNI, "libexec/cni/jakiro-cni"),
                          (SHIM, f"lib/{TRIPLET}/libjakiro_verbs.so"),
                          (SRC / "tools" / "jakiro-run", "bin/jakiro-run")):
            (up / dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(src).resolve(), up / dest)
        d = self.dir
        # The overlays stay in this mount namespace (the mounts holding /etc, /var/lib and
        # /usr/local made private first), but /run/netns keeps its propagation: jakirod, in the
        # machine's mount namespace, finds a container's network namespace there.
        setup = f"""set -e
hostname {name}
for p in /etc /var/lib /usr/local; do
  mount --make-private "$(findmnt -n -o TARGET --target $p)"
done
mount -t overlay overlay -o lowerdir=/etc,upperdir={d}/etc.up,workdir={d}/etc.work /etc
mount -t overlay overlay -o lowerdir=/var/lib,upperdir={d}/varlib.up,workdir={d}/varlib.work \
/var/lib
mount -t overlay overlay -o lowerdir=/usr/local,upperdir={d}/usrlocal.up,workdir={d}/usrlocal.work \
/usr/local
mkdir -p /etc/jakiro /etc/containers/containers.conf.d
ln -s {RUN_DIR}/{name}.yaml /etc/jakiro/{name}.yaml
printf '[storage]\\ndriver = "overlay"\\ngraphroot = "{d}/storage"\\nrunroot = "{d}/runroot"\\n' \
  > /etc/containers/storage.conf
printf '[engine]\\ntmp_dir = "{d}/tmp"\\n' > /etc/containers/containers.conf.d/00-testbed.conf
echo ready
exec sleep 3600
"""
        self.holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/jk-{name}", "unshare", "--mount", "--uts",
             "--propagation", "unchanged", "bash", "-c", setup],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        line = self.holder.stdout.readline()
        assert line == "ready\n", f"{name}: {line}{self.holder.stderr.read()}"

    def sh(self, script, timeout=BLOCK_TIMEOUT_S):
        return subprocess.run(
            ["nsenter", "-t", str(self.holder.pid), "-m", "-u", "-n", "--", "bash", "-euo",
             "pipefail", "-c", script], capture_output=True, text=True, timeout=timeout,
            env=ENV, cwd="/", stdin=subprocess.DEVNULL)

    def remove(self):
        self.sh("podman rm -f -t 0 --all; podman rmi -a -f", timeout=120)
        self.holder.kill()
        self.holder.wait(timeout=10)


def etcd_keys(prefix):
    r = ns("jk-fabric", "etcdctl", "--endpoints", ETCD_URL, "get", "--prefix", "--keys-only",
           prefix, timeout=20, env=dict(os.environ, ETCDCTL_API="3"))
    return r.stdout.split()


def etcd_vnics():
    out = ns("jk-fabric", JAKIROCTL, "--etcd", ETCD_URL, "get", "vnics", timeout=20).stdout
    return [line.split()[0] for line in out.splitlines()[1:] if line.startswith("jc")]


@pytest.fixture(scope="module")
def hosts(testbed):
    assert shutil.which("podman"), "podman is missing (tools/bootstrap installs it)"
    # A short path: under pytest's deep tmp_path the paths of conmon's sockets and exit files
    # outgrow a socket address, and podman then learns of each container's exit only from a
    # fallback 20 s later.
    work = Path(tempfile.mkdtemp(prefix="jk-doc-", dir="/tmp"))
    made = {}
    try:
        for name in HOSTS:
            made[name] = Host(name, work)
        yield made
    finally:
        for h in made.values():
            h.remove()
        shutil.rmtree(work, ignore_errors=True)


def test_the_podman_walkthrough_of_docs_containers_runs_as_written(hosts):
    steps = walkthrough(DOC.read_text())
    said = {h: "" for h in HOSTS}
    started = time.monotonic()
    for on, script in steps:
        for name in on:
            t0 = time.monotonic()
            r = hosts[name].sh(as_run_here(script))
            print(f"{script.splitlines()[0]} ({name}): {time.monotonic() - t0:.1f} s")
            said[name] += r.stdout
            assert r.returncode == 0, (f"docs/containers.md, on {name}:\n{script}\nexited "
                                       f"{r.returncode}:\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    print(f"\nthe walk-through: {len(steps)} blocks in {time.monotonic() - started:.1f} s")
    print(said["h2"][-1500:])

    # What the walk-through says it shows.
    h1, h2 = said["h1"], said["h2"]
    assert re.search(r"^\S+\s+jakiro-blue\s+jakiro-cni\b", h1, re.M), h1
    assert "198.19.1.100" in h2.split(), h2  # podman inspect: b2's address
    devices = re.findall(r"^\s+(jakiro_\S+)", h2, re.M)
    assert len(devices) == 1, h2  # b2 sees one device, its own vNIC's
    for out in (h1, h2):  # client and server each measured a bandwidth over RDMA
        m = re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)", out, re.M)
        assert m and float(m.group(1)) > 0, out

    # DEL on `podman rm` and `run --rm`: no vNIC, veth, lease or etcd record is left.
    assert etcd_vnics() == [] and etcd_keys("/jakiro-cni/") == []
    for name in HOSTS:
        assert vnic_links(name) == []
        # <data_dir>/<network>/<address>, in the default data_dir the walk-through's ADDs made
        r = hosts[name].sh("find /var/lib/jakiro/cni -mindepth 2")
        assert r.returncode == 0 and r.stdout.split() == [], r.stdout + r.stderr
