#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only
"""Packs a Python for the test VM: run with the interpreter to pack (the
virtual environment of tests/userspace/python_env.sh, with the gpunvme
wheel, pytest and NumPy installed in it).

    python_image.py OUT_DIR

Copies into OUT_DIR the standard library (without its tests, IDLE, Tk,
ensurepip, lib2to3 and the build configuration) and the environment's
site-packages (without pip, setuptools and maturin, and without NumPy's
tests), writes OUT_DIR/python.env for the guest (PYTHON, PYTHONPATH),
and prints the tests/vm/run.sh --file arguments that put them in the VM,
one per line:

- the interpreter and the standard library at their paths on this
  machine (the interpreter finds its library relative to itself);
- site-packages at OUT_DIR/site, the same path in the VM (so not under
  /tmp, where the VM mounts a tmpfs): run.sh copies
  the libraries each ELF file needs (ldd) to the paths ldd names, and
  NumPy's bundled ones are named relative to the copy itself, so they are
  then already in place and not copied twice.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

STDLIB_DROP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
               "site-packages", "dist-packages", "__phello__"}
SITE_DROP_PREFIXES = ("pip", "setuptools", "_distutils_hack", "distutils-precedence", "maturin",
                      "wheel", "pkg_resources")


def stdlib_ignore(root: str):
    def ignore(path: str, names: list[str]) -> set[str]:
        out = set()
        top = os.path.abspath(path) == root
        for n in names:
            if top and (n in STDLIB_DROP or n.startswith("config-")):
                out.add(n)
            elif n in ("idle_test",) or n.endswith((".opt-1.pyc", ".opt-2.pyc")):
                out.add(n)
            elif os.path.basename(path) == "lib-dynload" and n.startswith(("_tkinter", "_test", "xxlimited",
                                                                            "_ctypes_test")):
                out.add(n)
        return out
    return ignore


def site_ignore(root: str):
    def ignore(path: str, names: list[str]) -> set[str]:
        out = set()
        top = os.path.abspath(path) == root
        for n in names:
            if top and n.startswith(SITE_DROP_PREFIXES):
                out.add(n)
            elif n == "tests" and "numpy" in os.path.relpath(path, root).split(os.sep)[:1]:
                out.add(n)
            elif n.endswith((".opt-1.pyc", ".opt-2.pyc")):
                out.add(n)
        return out
    return ignore


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = os.path.abspath(sys.argv[1])
    exe = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    for mod in ("gpunvme", "pytest", "numpy"):
        try:
            __import__(mod)
        except ImportError as e:
            print(f"python_image: {mod} is not installed in {sys.prefix}: {e}", file=sys.stderr)
            return 1
    os.makedirs(out, exist_ok=True)
    shutil.copytree(stdlib, os.path.join(out, "stdlib"), ignore=stdlib_ignore(stdlib),
                    ignore_dangling_symlinks=True, dirs_exist_ok=True)
    shutil.copytree(site, os.path.join(out, "site"), ignore=site_ignore(site),
                    ignore_dangling_symlinks=True, dirs_exist_ok=True)
    with open(os.path.join(out, "python.env"), "w") as f:
        f.write(f"PYTHON={exe}\nPYTHONPATH={out}/site\n")
    files = [f"{exe}:{exe}", f"{out}/stdlib:{stdlib}", f"{out}/site:{out}/site",
             f"{out}/python.env:/opt/gpunvme/python.env"]
    for spec in files:
        print("--file")
        print(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
