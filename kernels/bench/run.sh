#!/bin/bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
#
# Build and run the gpunvme bench on an NVIDIA GPU machine: owner (raw) vs
# shared (validated) queue pairs against the software NVMe fixture, and the
# CPU-only relay microbenchmark. Needs nvcc (and the host compiler it uses)
# on PATH; nothing else, no network. The software NVMe controller is a
# benchmark fixture (sw_nvme_fixture.h), never a test, and not an SSD.
#
#   kernels/bench/run.sh [OUTDIR]        default OUTDIR: kernels/bench/results
#   BENCH_ARGS="--quick" kernels/bench/run.sh /tmp/r
#
# Writes into OUTDIR:
#   results.json      every measurement, its checks, and the targets
#   bench.log         the bench's own log (one line per run)
#   host_test.log     relay.h unit test (the port of bridge.rs/validate.rs/
#                     buffers.rs and their KUnit tests), run first
#   build.log         nvcc output
#   env.txt           nvidia-smi, nvcc --version, CPU, kernel
#   sass_fences.txt   fence / system-scope instructions in the built kernels
#   bench.png         only where python3 has matplotlib (plot.py OUTDIR)
#   array.json, array.log, array_build.log   the storage array's bench
#                     (array_bench.cu; ARRAY_ARGS="--quick" for a short run)
#   array.png         only where python3 has matplotlib (plot_array.py OUTDIR)
# Exit status: 0 when the build worked and every check passed (never
# depends on a time), 1 otherwise. About 2 minutes on the H200 machine,
# plus the array bench's (not yet measured; bounded at 10 minutes).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-$here/results}" && cd "${1:-$here/results}" && pwd)
build=$here/../build/bench      # kernels/build/ is git-ignored
mkdir -p "$build"
rc=0
t0=$(date +%s)

{
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.max.sm --format=csv
	nvidia-smi
	nvcc --version
	echo "host compiler: $(${CXX:-g++} --version 2>/dev/null | head -1)"
	echo "nproc: $(nproc)"
	grep -m1 'model name' /proc/cpuinfo || true
	uname -r
	echo "git: $(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)"
} > "$out/env.txt" 2>&1

# 1. The relay port's unit test (host C++ only; seconds).
cxx=${CXX:-g++}
if command -v "$cxx" > /dev/null; then
	if "$cxx" -O2 -std=c++17 -Wall -Wextra -pthread -I"$here/../include" -I"$here" \
		"$here/relay_host_test.cpp" -o "$build/relay_host_test" > "$out/host_test.log" 2>&1 &&
		timeout 60 "$build/relay_host_test" >> "$out/host_test.log" 2>&1; then
		echo "host test: $(tail -1 "$out/host_test.log")"
	else
		echo "host test FAILED (see host_test.log): $(tail -1 "$out/host_test.log")"
		rc=1
	fi
else
	echo "host test skipped: no $cxx" | tee "$out/host_test.log"
fi

# 2. The bench.
if ! nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo --Werror all-warnings -I"$here/../include" \
	-Xcompiler -Wall,-Wextra,-pthread \
	"$here/gpunvme_bench.cu" -o "$build/gpunvme_bench" > "$out/build.log" 2>&1; then
	cat "$out/build.log"
	echo "nvcc build FAILED"
	exit 1
fi
echo "built in $(( $(date +%s) - t0 )) s"

cuobjdump -sass "$build/gpunvme_bench" |
	grep -oE '(MEMBAR|FENCE|ERRBAR|CCTL)[.A-Z_]*|(LDG|STG|LD|ST)\.E[.A-Z0-9_]*(STRONG|SYS|VOLATILE)[.A-Z0-9_]*' |
	sort | uniq -c > "$out/sass_fences.txt" || true

# Bounded even if something hangs: every GPU wait also ends after 1 s.
timeout 300 "$build/gpunvme_bench" --out "$out" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
brc=${PIPESTATUS[0]}
[ "$brc" = 0 ] || { echo "bench exit status $brc"; rc=1; }

# 3. The storage array (array_bench.cu): array against the raw per-thread
# API and a plain gather, 1..8 fixture controllers, the hit-rate curve.
if nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo --Werror all-warnings -I"$here/../include" \
	-Xcompiler -Wall,-Wextra,-pthread \
	"$here/array_bench.cu" -o "$build/array_bench" > "$out/array_build.log" 2>&1; then
	timeout 600 "$build/array_bench" --out "$out" ${ARRAY_ARGS:-} 2>&1 | tee "$out/array.log"
	arc=${PIPESTATUS[0]}
	[ "$arc" = 0 ] || { echo "array bench exit status $arc"; rc=1; }
else
	cat "$out/array_build.log"
	echo "nvcc build of array_bench FAILED"
	rc=1
fi

if python3 -c 'import matplotlib' 2> /dev/null; then
	python3 "$here/plot.py" "$out" || true
	python3 "$here/plot_array.py" "$out" || true
fi
echo "total $(( $(date +%s) - t0 )) s; results in $out"
exit $rc
