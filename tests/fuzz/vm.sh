#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/fuzz/vm.sh: boot the test VM and run gpunvme_fuzz in it, then
# gpunvme_fuzz_after.sh (the controller still works, nothing leaked).
#
#   tests/fuzz/vm.sh [--seconds S] [--procs P] [--seed N] [-- run.sh options]
#
# KERNEL_VARIANT=debug boots the debug kernel (KASAN, lockdep, KFENCE,
# DMA-API debug) with kmemleak=on slub_debug=P. The last line is run.sh's
# "N passed, N failed" (the fuzzer's results, the after-checks and "kernel
# log clean"). Expects `make module userspace standin fuzz` to have run;
# GPUNVME_KO, STANDIN_KO and GPUNVME_CLI point elsewhere if wanted.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
seconds=30 procs=4 seed=
while [ $# -gt 0 ]; do
    case $1 in
        --seconds) seconds=$2; shift 2 ;;
        --procs)   procs=$2; shift 2 ;;
        --seed)    seed=$2; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        --)        shift; break ;;
        *)         break ;;
    esac
done
ko=${GPUNVME_KO:-$ROOT/gpunvme.ko}
standin=${STANDIN_KO:-$ROOT/tests/standin/gpunvme_standin.ko}
cli=${GPUNVME_CLI:-$ROOT/userspace/target/release/gpunvme}
F=$ROOT/tests/fuzz/build
for f in "$ko" "$standin" "$cli" "$F/gpunvme_fuzz" "$F/gpunvme_fuzz_after.sh"; do
    [ -e "$f" ] || { echo "fuzz/vm.sh: $f missing (make module userspace standin fuzz)" >&2; exit 2; }
done
[ -n "$seed" ] || seed=$(( $(date +%s) % 1000000 ))
work=$(mktemp -d /tmp/gpunvme-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
printf 'FUZZ_SEED=%s\nFUZZ_PROCS=%s\nFUZZ_SECONDS=%s\n' "$seed" "$procs" "$seconds" > "$work/fuzz.env"
append=
# slub_debug=P: without it 7.3's per-CPU sheaves keep a pointer to every
# object they handed out, and kmemleak reports no leak at all (see
# tests/selftests/gpunvme_hotplug_test.c, whose positive control shows it).
[ "${KERNEL_VARIANT:-default}" = debug ] && append="kmemleak=on slub_debug=P"
echo "# fuzz/vm.sh: seed $seed, $procs processes, $seconds s, kernel ${KERNEL_VARIANT:-default}"
# The fuzzer's grace time for its workers is 2 minutes; the after-checks
# take one or two (kmemleak scans under TCG); the debug kernel can take
# minutes to boot on a loaded machine.
bash "$ROOT/tests/vm/run.sh" --append "$append" \
    --boot-timeout 400 --test-timeout $((seconds + 1000)) --timeout $((seconds + 2400)) \
    --file "$ko:/opt/gpunvme/gpunvme.ko" --file "$cli:/opt/gpunvme/gpunvme" \
    --file "$standin:/opt/gpunvme/gpunvme_standin.ko" --file "$work/fuzz.env:/opt/gpunvme/fuzz.env" \
    "$@" -- "$F/gpunvme_fuzz" "$F/gpunvme_fuzz_after.sh"
