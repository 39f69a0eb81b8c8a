#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# make bench: the polled-path benchmark in the VM, against the in-kernel
# nvme driver in the same run. Writes bench.json and bench.svg to OUT
# (default: ./bench-results, not tracked). Numbers are QEMU/TCG numbers:
# compare the two paths with each other, never with hardware.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$PWD/bench-results}
mkdir -p "$OUT"
log="$OUT/console.log"
bash "$ROOT/tests/vm/run.sh" --log "$log" --file "$ROOT/gpunvme.ko" \
	--file "$ROOT/userspace/target/release/gpunvme" --timeout 900 --script "$ROOT/tests/bench/vm-bench.sh"
sed -n '/^@@BENCH-JSON-BEGIN/,/^@@BENCH-JSON-END/p' "$log" | sed '1d;$d' | tr -d '\r' > "$OUT/bench.json"
python3 "$ROOT/tests/bench/plot.py" "$OUT/bench.json" "$OUT/bench.svg"
echo "bench: $OUT/bench.json $OUT/bench.svg"
