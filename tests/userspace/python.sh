#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The Python package (userspace/gpunvme-python), in the virtual environment
# of tests/userspace/python_env.sh:
#   python.sh build     maturin builds the abi3 wheel into userspace/target/wheels
#                       (its path is the last line)
#   python.sh install   build, then install it into the environment (last
#                       line: the environment's directory)
#   python.sh test      install, then the tests that need no device (pytest;
#                       closing line "python: N passed, N failed[, N skipped]")
# Extra arguments of `test` go to pytest. The device tests run in the VM:
# tests/vm/python.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PKG=$ROOT/userspace/gpunvme-python
WHEELS=$ROOT/userspace/target/wheels
export PATH="$HOME/.cargo/bin:$PATH"
cmd=${1:-}
[ $# -gt 0 ] && shift

VENV=$(bash "$ROOT/tests/userspace/python_env.sh" | tail -n1)

build() {
    mkdir -p "$WHEELS"
    rm -f "$WHEELS"/gpunvme-*.whl
    # maturin builds with the workspace's lock file (locked = true in
    # pyproject.toml) into userspace/target, beside the other crates.
    (cd "$PKG" && "$VENV/bin/maturin" build --release --quiet -i "$VENV/bin/python" -o "$WHEELS") >&2
    local w
    w=$(ls "$WHEELS"/gpunvme-*.whl)
    [ -f "$w" ] || { echo "python.sh: maturin made no wheel" >&2; return 1; }
    echo "$w"
}

install() {
    local w
    w=$(build | tail -n1)
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$w" >&2
}

case $cmd in
    build) build ;;
    install) install; echo "$VENV" ;;
    test)
        install
        cd "$PKG/tests"
        exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@" . ;;
    *) echo "usage: $0 build|install|test [pytest args]" >&2; exit 2 ;;
esac
