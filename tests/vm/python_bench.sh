#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# In the VM (tests/vm/python.sh, after python_test.sh): the Python package's
# per-call overhead at 4 KiB QD1 against the Rust library, on one queue
# pair; tables and JSON lines, never asserted (the script's result is only
# that it ran).
# - Issue 27's figure, in owner mode: no relay thread keeps the second
#   vCPU busy, so the emulated controller's latency does not move with the
#   work around a read (see rust_back_to_back below). The async side runs
#   apart: it wakes worker threads, which would share the other vCPU.
# - The same in shared mode (through the relay, the default for users).
# - Rust's one-at-a-time reads against 8 in a row, in both modes: how the
#   read's own latency moves with what runs around it.
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
. "$DIR/python.env" || exit 1
export PYTHONPATH PYTHONDONTWRITEBYTECODE=1
bench() { "$PYTHON" -s "$DIR/python-tests/bench_overhead.py" "$BDF" "$@" || exit 1; }
bench --owner --iters 2000 --sides rust,rust_copy,python_numpy,python_host_buffer
bench --owner --iters 1000 --sides rust,rust_copy,python_async
bench --iters 2000
bench --owner --iters 400 --sides rust,rust_back_to_back
bench --iters 400 --sides rust,rust_back_to_back
