#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# make bench: the polled-path benchmark in the VM, against the in-kernel
# nvme driver in the same run. Writes bench.json and bench.svg to OUT
# (default: ./bench-results, not tracked); then, in a second boot with one
# relay thread, tenant isolation (relay_isolation.c): isolation.json and
# isolation.svg. Numbers are QEMU/TCG numbers:
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
sed -n '/^@@GPU-JSON-BEGIN/,/^@@GPU-JSON-END/p' "$log" | sed '1d;$d' | tr -d '\r' > "$OUT/gpu.json"
python3 - "$OUT/gpu.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("gpu_ratios", []):
    print(f"bench: GPU memory / host memory, 128 KiB reads, {r['qpairs']} qpair(s) QD {r['qd']}: "
          f"{r['gb_per_s_gpu']:.3f} / {r['gb_per_s_host']:.3f} GB/s = {r['gbps_gpu_over_host']:.2f} (target 0.9)")
PY
# fio's own tool reads the bench's JSON (fio's jobs[] in it): CSVs, validated.
for j in bench gpu; do
	fio_jsonplus_clat2csv "$OUT/$j.json" "$OUT/$j-clat.csv" >/dev/null
	fio_jsonplus_clat2csv "$OUT/$j.json" "$OUT/$j-clat.csv" --validate
done

# Tenant isolation on one relay thread: a second boot (relay_threads=1).
ilog="$OUT/isolation-console.log"
bash "$ROOT/tests/vm/run.sh" --log "$ilog" --file "$ROOT/gpunvme.ko" \
	--file "$ROOT/userspace/target/release/gpunvme" --file "$ROOT/tests/bench/build/relay_isolation" \
	--timeout 900 --script "$ROOT/tests/bench/vm-isolation.sh"
sed -n '/^@@ISOLATION-JSON-BEGIN/,/^@@ISOLATION-JSON-END/p' "$ilog" | sed '1d;$d' | tr -d '\r' > "$OUT/isolation.json"
grep -E '^(#|victim|idle|attacker|TARGET)' "$ilog" | tr -d '\r' || true
python3 "$ROOT/tests/bench/plot_isolation.py" "$OUT/isolation.json" "$OUT/isolation.svg"
echo "bench: $OUT/isolation.json $OUT/isolation.svg"
