#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR MIT
#
# Build and run the gpunvme device-library bench on an NVIDIA GPU box
# (nvcc on PATH). The software NVMe controller it runs against is a
# benchmark fixture (sw_nvme_fixture.h), never a test.
#
#   kernels/bench/run.sh [OUTDIR]        default OUTDIR: kernels/bench/results
#   BENCH_ARGS="--quick" kernels/bench/run.sh /tmp/r
#
# Writes OUTDIR/results.json, env.txt (nvidia-smi, nvcc --version, CPU),
# sass_fences.txt (the fence/sys-scope instructions in the built kernels).
# The PNG is made afterwards from the JSON: python3 kernels/bench/plot.py OUTDIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/results}" && cd "${1:-$here/results}" && pwd)
build=$here/../build/bench      # kernels/build/ is git-ignored
mkdir -p "$build"

nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I"$here/../include" \
	-Xcompiler -Wall,-Wextra,-pthread \
	"$here/gpunvme_bench.cu" -o "$build/gpunvme_bench"

{
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.max.sm --format=csv
	nvidia-smi
	nvcc --version
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	uname -r
} > "$out/env.txt" 2>&1

cuobjdump -sass "$build/gpunvme_bench" |
	grep -oE '(MEMBAR|FENCE|ERRBAR|CCTL)[.A-Z_]*|(LDG|STG|LD|ST)\.E[.A-Z0-9_]*(STRONG|SYS|VOLATILE)[.A-Z0-9_]*' |
	sort | uniq -c > "$out/sass_fences.txt" || true

"$build/gpunvme_bench" --out "$out" ${BENCH_ARGS:-}
