#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/vm/python.sh: the Python package's tests inside the test VM, against
# the real module: the interpreter, the standard library, pytest, NumPy and
# the gpunvme wheel packed into the initramfs (tests/vm/python_image.py),
# then one boot that runs
#   python_test.sh   the pytest suite of userspace/gpunvme-python/tests
#                    (host buffers, HostBuffer, udmabuf-backed dma-bufs,
#                    async, a fork during transfers, timeouts under a held
#                    relay, owner mode), one TAP line per test;
#   python_bench.sh  the per-call overhead bench (4 KiB QD1, Python against
#                    the Rust library), printed, never asserted.
# Expects `make module userspace` (make python-vm does that); builds the
# wheel itself. Extra arguments go to run.sh. Last line: "N passed, N failed".
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ko=$ROOT/gpunvme.ko
cli=$ROOT/userspace/target/release/gpunvme
[ -f "$ko" ] || { echo "python.sh: $ko missing (make module)" >&2; exit 1; }
[ -x "$cli" ] || { echo "python.sh: $cli missing (make userspace)" >&2; exit 1; }

venv=$(bash "$ROOT/tests/userspace/python.sh" install | tail -n1)
# Not under /tmp: the image's site-packages keeps its path in the VM (see
# python_image.py), and the VM mounts a tmpfs on /tmp. So not in the
# checkout either, which may be under /tmp: in the cache, beside the venv.
img=${GPUNVME_CACHE:-/var/cache/gpunvme}/python-vm
case "$img" in /tmp/*) echo "python.sh: $img is under /tmp, which the VM mounts a tmpfs on: set GPUNVME_CACHE elsewhere" >&2; exit 1 ;; esac
mkdir -p "$(dirname "$img")"
rm -rf "$img"
"$venv/bin/python" "$HERE/python_image.py" "$img" >"$img.files"
mapfile -t image <"$img.files"
echo "# python.sh: $(du -sh "$img" | cut -f1) of Python for the VM"

bash "$HERE/run.sh" --test-timeout 900 --timeout 1800 \
    --file "$ko" --file "$cli" "${image[@]}" \
    --file "$ROOT/userspace/gpunvme-python/tests:/opt/gpunvme/python-tests" \
    "$@" "$HERE/python_test.sh" --script "$HERE/python_bench.sh"
