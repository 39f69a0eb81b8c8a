#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# make bench: the polled-path benchmark in the VM, against the in-kernel
# nvme driver in the same run. Writes bench.json and bench.svg to OUT
# (default: ./bench-results, not tracked), and gpu.json (CPU-initiated
# transfers into GPU memory against host memory: gpu-N.json per run, and
# their combination); then, in a second boot with one
# relay thread, tenant isolation (relay_isolation.c): isolation.json and
# isolation.svg; then, in a third boot without the module, the
# passthrough back end beside the kernel's polled io_uring and fio:
# passthrough.json (passthrough-MODE-N.json per run) and two SVGs.
# Numbers are QEMU/TCG numbers:
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
# The GPU runs: gpu-1.json ... (one JSON each), combined per cell into
# gpu.json's gpu_ratios_combined: the runs' mean GB/s, GPU over host.
python3 - "$log" "$OUT" <<'PY'
import json, sys
log, out = sys.argv[1], sys.argv[2]
runs, cur = [], None
for line in open(log, errors="replace"):
    line = line.rstrip("\r\n")
    if line.startswith("@@GPU-JSON-BEGIN"):
        cur = []
    elif line.startswith("@@GPU-JSON-END"):
        runs.append(json.loads("\n".join(cur)))
        cur = None
    elif cur is not None:
        cur.append(line)
if not runs:
    sys.exit("bench: no GPU run in the console log")
cells = {}
for i, d in enumerate(runs, 1):
    json.dump(d, open(f"{out}/gpu-{i}.json", "w"))
    for r in d.get("gpu_ratios", []):
        c = cells.setdefault((r["qpairs"], r["qd"]), {"gpu": [], "host": []})
        c["gpu"].append(r["gb_per_s_gpu"])
        c["host"].append(r["gb_per_s_host"])
combined = []
for (qp, qd), c in sorted(cells.items()):
    g, h = sum(c["gpu"]) / len(c["gpu"]), sum(c["host"]) / len(c["host"])
    ratio = g / h if h else None
    each = [round(a / b, 3) if b else None for a, b in zip(c["gpu"], c["host"])]
    combined.append({"qpairs": qp, "qd": qd, "runs": len(c["gpu"]), "gb_per_s_gpu_mean": g,
                     "gb_per_s_host_mean": h, "gbps_gpu_over_host": ratio,
                     "gbps_gpu_over_host_each_run": each})
    print(f"bench: GPU memory / host memory, 128 KiB reads, {qp} qpair(s) QD {qd}, mean of {len(each)} "
          f"alternating runs: {g:.3f} / {h:.3f} GB/s = {ratio if ratio is None else f'{ratio:.2f}'} (target 0.9; each run: "
          f"{', '.join(f'{x:.2f}' for x in each if x is not None)})")
doc = dict(runs[0])
doc["gpu_ratios_combined"] = combined
doc["gpu_runs"] = len(runs)
json.dump(doc, open(f"{out}/gpu.json", "w"), indent=1)
PY
# fio's own tool reads the bench's JSON (fio's jobs[] in it): CSVs, validated.
for j in "$OUT"/bench.json "$OUT"/gpu-*.json; do
	fio_jsonplus_clat2csv "$j" "${j%.json}-clat.csv" >/dev/null
	fio_jsonplus_clat2csv "$j" "${j%.json}-clat.csv" --validate
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

# The passthrough back end against the kernel's polled io_uring and fio:
# a third boot (no module), rounds alternating the relay threads and the
# inline relay; each run's ratios, their medians per mode, two plots.
plog="$OUT/passthrough-console.log"
bash "$ROOT/tests/vm/run.sh" --log "$plog" --file "$ROOT/userspace/target/release/gpunvme" \
	--file "$(command -v fio):/opt/gpunvme/fio" --timeout 900 --script "$ROOT/tests/bench/vm-passthrough.sh"
python3 "$ROOT/tests/bench/passthrough_ratios.py" "$plog" "$OUT"
for mode in threads inline; do
	python3 "$ROOT/tests/bench/plot.py" "$OUT/passthrough-$mode-1.json" "$OUT/passthrough-$mode.svg"
done
echo "bench: $OUT/passthrough.json $OUT/passthrough-threads.svg $OUT/passthrough-inline.svg"
