"""The files the project owns under its source root, for the lint tests that check every folder.

A directory walk rather than a fixed folder list, so that a new folder is checked the day it
appears. Skipped: hidden directories (.git), __pycache__, and meson build directories (build/,
build-asan/ or any other holding meson-private/), whose generated files are not the project's.
"""
import os

CXX_SUFFIXES = (".cc", ".hh", ".c", ".h", ".cpp", ".hpp")


def _walk(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames
                             if not d.startswith(".") and d != "__pycache__"
                             and not os.path.isdir(os.path.join(dirpath, d, "meson-private")))
        for name in sorted(filenames):
            yield os.path.join(dirpath, name)


def cxx_files(root):
    """Every C and C++ source and header, as paths relative to ROOT."""
    return [os.path.relpath(p, root) for p in _walk(root) if p.endswith(CXX_SUFFIXES)]


def cxx_and_def_files(root):
    """Every C and C++ file and every X-macro list (.def) it includes, relative to ROOT."""
    return [os.path.relpath(p, root) for p in _walk(root) if p.endswith(CXX_SUFFIXES + (".def",))]


def _python_shebang(path):
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return False
    return first.startswith(b"#!") and b"python" in first


def python_files(root):
    """Every .py file and every script whose #! line names python (tools/testbed, perf/qos_plot),
    as paths relative to ROOT."""
    return [os.path.relpath(p, root) for p in _walk(root)
            if p.endswith(".py") or (os.path.splitext(p)[1] == "" and _python_shebang(p))]
