#!/bin/bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
# One of the device calls behind h200-v8/variants (bench_main, bench_repoll4,
# bench_repoll2), run from the repository root with experiment.diff applied;
# bench_stats.log came from the same script with build stats "-DGPUNVME_PQ_STATS".
export PATH=/usr/local/cuda/bin:$PATH
I=kernels/include
build() { nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I$I -Ikernels/bench -Xcompiler -Wall,-Wextra,-pthread $2 kernels/bench/gpunvme_bench.cu -o /tmp/bench_$1 > /tmp/build_$1.log 2>&1 || { echo "build $1 failed"; cat /tmp/build_$1.log; }; }
build main ""; build r4 "-DGPUNVME_PQ_REPOLL=4"; build r2 "-DGPUNVME_PQ_REPOLL=2"
for v in main r4 r2; do mkdir -p /tmp/o_$v
  timeout 200 /tmp/bench_$v --out /tmp/o_$v --no-microbench > $OUT/$v.log 2>&1
  echo "== $v rc=$?"; grep -E "^(PT|TARGET per|CHECKS)" $OUT/$v.log | cut -c1-250
done
