#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# In the VM (tests/vm/python.sh, after python_test.sh): the Python package's
# per-call overhead at 4 KiB QD1 against the Rust library, on one queue
# pair; a table and a JSON line, never asserted (the script's result is
# only that it ran). Then, shorter, Rust's one-at-a-time reads against 8
# in a row: how the emulated controller's latency moves with the guest's
# CPU work around a read.
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
. "$DIR/python.env" || exit 1
export PYTHONPATH PYTHONDONTWRITEBYTECODE=1
"$PYTHON" -s "$DIR/python-tests/bench_overhead.py" "$BDF" --iters 2000 || exit 1
exec "$PYTHON" -s "$DIR/python-tests/bench_overhead.py" "$BDF" --iters 400 --sides rust,rust_back_to_back
