"""tools/jakiro-run finds libjakiro_verbs.so, or says where it looked and runs nothing.

A copy of the script in a scratch tree stands for a checkout (tools/jakiro-run beside an
optional build/): what it finds next to itself is what the test put there, and
JAKIRO_VERBS_LIBDIRS stands for the installed prefixes' lib directories. No root, no network.
"""
import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(os.environ.get("JAKIRO_SRC") or Path(__file__).resolve().parents[2])
TRIPLET = f"{platform.machine()}-linux-gnu"


@pytest.fixture
def checkout(tmp_path):
    """A tree with tools/jakiro-run and nothing else: no build/, no lib/."""
    (tmp_path / "tools").mkdir()
    shutil.copy(SRC / "tools" / "jakiro-run", tmp_path / "tools" / "jakiro-run")
    return tmp_path


def put_lib(directory):
    directory.mkdir(parents=True, exist_ok=True)
    lib = directory / "libjakiro_verbs.so"
    lib.write_bytes(b"")  # found by name; printenv runs whatever ld.so makes of it
    return lib


def jakiro_run(checkout, libdirs, *cmd, **env):
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("JAKIRO_VERBS_LIB", "LD_PRELOAD")}
    environment.update(env, JAKIRO_VERBS_LIBDIRS=":".join(map(str, libdirs)),
                       JAKIRO_VERBS_SOCKET="@jakiro/verbs/name/none")
    return subprocess.run([str(checkout / "tools" / "jakiro-run"), "--", *cmd],
                          env=environment, capture_output=True, text=True, timeout=30)


def test_no_library_anywhere_is_an_error_naming_every_place_looked_and_runs_nothing(
        checkout, tmp_path):
    installed = [tmp_path / "prefix" / "lib" / TRIPLET, tmp_path / "prefix" / "lib"]
    ran = tmp_path / "ran"
    r = jakiro_run(checkout, installed, "touch", str(ran))
    assert r.returncode == 2, r
    assert not ran.exists(), "the command ran without the shim"
    assert "libjakiro_verbs.so not found" in r.stderr
    for place in (checkout / "build" / "verbs_shim", checkout / "lib" / TRIPLET, *installed):
        assert str(place) in r.stderr, f"{place} not named in: {r.stderr}"
    assert "JAKIRO_VERBS_LIB" in r.stderr  # how to name one


def test_a_checkout_without_a_build_falls_back_to_the_installed_library(checkout, tmp_path):
    installed = tmp_path / "usr-local" / "lib" / TRIPLET
    lib = put_lib(installed)
    r = jakiro_run(checkout, [tmp_path / "nothing-here", installed], "printenv", "LD_PRELOAD")
    assert r.returncode == 0, r
    assert r.stdout.split(":")[0].strip() == str(lib)


def test_the_checkouts_own_build_comes_before_an_installed_library(checkout, tmp_path):
    built = put_lib(checkout / "build" / "verbs_shim")
    installed = tmp_path / "usr-local" / "lib" / TRIPLET
    put_lib(installed)
    r = jakiro_run(checkout, [installed], "printenv", "LD_PRELOAD")
    assert r.returncode == 0, r
    assert r.stdout.split(":")[0].strip() == str(built)


def test_jakiro_verbs_lib_that_does_not_exist_is_an_error(checkout, tmp_path):
    put_lib(checkout / "build" / "verbs_shim")
    missing = tmp_path / "missing" / "libjakiro_verbs.so"
    ran = tmp_path / "ran"
    r = jakiro_run(checkout, [], "touch", str(ran), JAKIRO_VERBS_LIB=str(missing))
    assert r.returncode == 2, r
    assert not ran.exists()
    assert f"JAKIRO_VERBS_LIB={missing} does not exist" in r.stderr


def test_the_default_installed_places_include_meson_installs_libdir(checkout):
    # Where `meson install` puts the shim by default (prefix /usr/local, Debian's
    # multiarch libdir): a checkout without a build must look there.
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("JAKIRO_VERBS_LIB", "JAKIRO_VERBS_LIBDIRS", "LD_PRELOAD")}
    installed = Path("/usr/local/lib") / TRIPLET / "libjakiro_verbs.so"
    r = subprocess.run([str(checkout / "tools" / "jakiro-run"), "--", "printenv", "LD_PRELOAD"],
                       env=dict(environment, JAKIRO_VERBS_SOCKET="@jakiro/verbs/name/none"),
                       capture_output=True, text=True, timeout=30)
    if installed.exists():
        assert r.returncode == 0, r
        assert r.stdout.split(":")[0].strip() == str(installed.resolve())
    else:
        assert r.returncode == 2, r
        assert str(installed.parent) in r.stderr
