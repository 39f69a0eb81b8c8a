#!/bin/bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
# The device call that produced this folder (run from the repository root
# with experiment.diff applied; $OUT is the device tool's output folder).
export PATH=/usr/local/cuda/bin:$PATH
I=kernels/include
build() { nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I$I -Ikernels/bench -Xcompiler -Wall,-Wextra,-pthread $2 kernels/bench/gpunvme_bench.cu -o /tmp/bench_$1 > /tmp/build_$1.log 2>&1 || { echo "build $1 failed"; cat /tmp/build_$1.log; }; }
for t in "r4:-DGPUNVME_PQ_REPOLL=4" "r4d:-DGPUNVME_PQ_REPOLL=4 -DGPUNVME_PQ_DB_FIRST"; do
  v=${t%%:*}; f=${t#*:}
  nvcc -std=c++17 -O2 -arch=sm_90 -I$I -Ikernels/tests $f kernels/tests/cuda_pqueue_test.cu -o /tmp/pqt_$v > /tmp/bpqt_$v.log 2>&1 && timeout 120 /tmp/pqt_$v > /tmp/pqt_$v.log 2>&1; echo "pqt $v rc=$? $(tail -1 /tmp/pqt_$v.log)"
done
build main ""; build r4 "-DGPUNVME_PQ_REPOLL=4"; build r4d "-DGPUNVME_PQ_REPOLL=4 -DGPUNVME_PQ_DB_FIRST"; build r16 "-DGPUNVME_PQ_REPOLL=16"
for v in main r4 r4d r16 main2; do
  b=/tmp/bench_${v%2}; mkdir -p /tmp/o_$v
  timeout 200 $b --out /tmp/o_$v --no-microbench > $OUT/$v.log 2>&1
  echo "== $v rc=$?"; grep -E "^(PT|TARGET per|CHECKS)" $OUT/$v.log | cut -c1-250
done
