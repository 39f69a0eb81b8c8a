#!/bin/bash
# SPDX-License-Identifier: MIT OR GPL-2.0-only
# h200-v9: the committed bench (PT loops without the poison store and the
# extra fence), then the bench before that change and after it, alternated,
# the PT runs only, in the same call.
export PATH=/usr/local/cuda/bin:$PATH
O=$1; mkdir -p $O/bench $O/variants
bash kernels/bench/run.sh $O/bench > $O/run.log 2>&1; echo "run.sh rc=$?" >> $O/run.log
I=kernels/include
nvcc -std=c++17 -O2 -arch=sm_90 -lineinfo -I$I -Ikernels/bench -Xcompiler -Wall,-Wextra,-pthread kernels/build/bench_before.cu -o /tmp/bench_before > $O/variants/build_before.log 2>&1 || echo "build before failed" >> $O/variants/build_before.log
cp kernels/build/bench/gpunvme_bench /tmp/bench_after
for v in before after before after; do
  n=$((${n:-0}+1)); mkdir -p /tmp/o_$v$n
  timeout 200 /tmp/bench_$v --out /tmp/o_$v$n --no-microbench > $O/variants/${n}_$v.log 2>&1
  echo "== $n $v rc=$?" >> $O/variants/summary.txt
  grep -E "^(PT|TARGET per|CHECKS)" $O/variants/${n}_$v.log | cut -c1-260 >> $O/variants/summary.txt
done
cd $O && tar czf all.tgz bench run.log variants && rm -rf bench variants run.log
