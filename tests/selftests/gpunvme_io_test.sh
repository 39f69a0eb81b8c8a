#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Block I/O through queue pairs driven by the `gpunvme` CLI (the Rust
# library): patterns written and verified byte-exact, single I/O, 2 and 4
# queue pairs at once, queue wrap, multi-round, a transfer of exactly MDTS,
# the last LBA, LBA Out of Range reaching the caller; then the controller
# goes back to the kernel nvme driver and dd must read the same bytes.
#
# The CLI's queue pairs are shared (validated) ones by default. When the
# run asks for owner mode ($GPUNVME_DIR/mode.env with
# GPUNVME_TEST_QPAIR_MODE=owner: the suite's owner-mode boot), every I/O
# command gets the CLI's owner-mode option (raw queue pairs of the one
# owner); tests that need several processes with queue pairs at once are
# skipped then, since only one file can own the controller.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
PATH=$DIR:$PATH
T=/tmp/gpunvme_io.$$
mkdir -p "$T"
[ -f "$DIR/mode.env" ] && . "$DIR/mode.env"

# The CLI's option for owner mode (claim the controller, raw queue pairs).
owner_option() {
	h=$(gpunvme write --help 2>&1)
	for o in --owner --raw; do
		echo "$h" | grep -qE -- "$o([ ,=]|\$)" && { echo "$o"; return 0; }
	done
	return 1
}
OWNER=$(owner_option)
M=
OWNER_MODE=
KIND=shared	# the CLI's name for the queue pairs this run uses
if [ "${GPUNVME_TEST_QPAIR_MODE:-shared}" = owner ]; then
	OWNER_MODE=1
	M=$OWNER
	KIND=raw
fi

driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }

setup() {
	[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || return 1
	[ "$(driver_of "$BDF")" = gpunvme ] || gpunvme bind "$BDF" || return 1
	gpunvme info "$BDF" -o json > "$T/info.json" || return 1
	LBA_SIZE=$(sed -n 's/.*"lba_size": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	CAP=$(sed -n 's/.*"capacity_lbas": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	MDTS=$(sed -n 's/.*"max_transfer_bytes": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	QUEUES=$(sed -n 's/.*"io_queues": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	[ -n "$MDTS" ] || MDTS=4194304   # "no limit": the library caps at 4 MiB (chained PRP lists)
	[ -n "$LBA_SIZE" ] && [ -n "$CAP" ] || { cat "$T/info.json"; return 1; }
	MDTS_BLOCKS=$((MDTS / LBA_SIZE))
	[ "$MDTS_BLOCKS" -gt 65536 ] && MDTS_BLOCKS=65536
	echo "lba_size $LBA_SIZE capacity $CAP mdts $MDTS ($MDTS_BLOCKS blocks) io_queues $QUEUES"
}

wv() { # seed lba count [extra args]: write then verify in a second process
	s=$1 l=$2 c=$3
	shift 3
	gpunvme write "$BDF" $M --pattern "$s" --start-block "$l" --block-count "$c" "$@" || return 1
	gpunvme verify "$BDF" $M --pattern "$s" --start-block "$l" --block-count "$c" "$@"
}


single_io() { wv 11 0 1; }

# No GPU in the VM: gpu-run must say so (naming every library tried),
# fail, and leave the controller as it was.
gpu_run_without_gpu() {
	out=$(gpunvme gpu-run "$BDF" --kernel write --qpairs 2 2>&1)
	rc=$?
	echo "$out"
	[ "$rc" -ne 0 ] || return 1
	echo "$out" | grep -q "^gpunvme: gpu-run: no GPU: no GPU runtime library could be loaded" || return 1
	echo "$out" | grep -q "libcuda.so.1: dlopen failed" || return 1
	wv 12 8 1
}

read_out_matches_pattern() {
	gpunvme read "$BDF" $M --start-block 0 --block-count 1 --data "$T/r0" || return 1
	gpunvme pattern --pattern 11 --start-block 0 --block-count 1 --block-size "$LBA_SIZE" > "$T/p0" || return 1
	cmp "$T/r0" "$T/p0"
}

# A mismatch is not a failure to run: its own exit status, 3.
verify_detects_a_wrong_seed() {
	out=$(gpunvme verify "$BDF" $M --pattern 12 --start-block 0 --block-count 1 2>&1)
	rc=$?
	echo "$out"
	[ "$rc" = 3 ] || { echo "verify with the wrong seed exited $rc, not 3"; return 1; }
	echo "$out" | grep -q "first mismatch at LBA 0"
}

multi_block() { wv 21 64 256; }

# Several rounds over one range with different seeds: each overwrite lands.
multi_round() {
	for s in 31 32 33 34; do wv $s 1024 96 --qd 7 || return 1; done
}

# depth 4 (3 in flight), one block per command: 96 commands, 24 laps of the
# SQ and CQ, so the phase tag flips many times.
queue_wrap() {
	out=$(gpunvme write "$BDF" $M --pattern 41 --start-block 2048 --block-count 96 --qd 3 --max-cmd-blocks 1 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "96 command(s) on $KIND qid [0-9]* of depth 4" || return 1
	gpunvme verify "$BDF" $M --pattern 41 --start-block 2048 --block-count 96 --qd 1 --max-cmd-blocks 3
}

# Shared (validated: shadow SQ and doorbells, mirrored CQ, a kernel thread
# checking and relaying) and owner (raw) queue pairs see the same disk: 96
# commands through depth 4 in one mode so the shadow tail and mirror phase
# wrap, verified in the other, and the other way round.
shared_owner_cross_check() {
	[ -n "$OWNER" ] || { echo "the CLI has no owner-mode option (--owner or --raw)"; return 1; }
	out=$(gpunvme write "$BDF" --pattern 43 --start-block 3072 --block-count 96 --qd 3 --max-cmd-blocks 1 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "96 command(s) on shared qid [0-9]* of depth 4" || return 1
	out=$(gpunvme verify "$BDF" "$OWNER" --pattern 43 --start-block 3072 --block-count 96 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "on raw qid" || return 1
	out=$(gpunvme write "$BDF" "$OWNER" --pattern 44 --start-block 3200 --block-count 96 --qd 3 --max-cmd-blocks 1 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "96 command(s) on raw qid [0-9]* of depth 4" || return 1
	gpunvme verify "$BDF" --pattern 44 --start-block 3200 --block-count 96 --qd 7 --max-cmd-blocks 5
}

qpairs_parallel() { # N: N processes, each with its own queue pair
	n=$1 i=0 pids=""
	while [ $i -lt "$n" ]; do
		gpunvme write "$BDF" $M --pattern $((50 + i)) --start-block $((4096 + i * 512)) --block-count 512 --max-cmd-blocks 8 > "$T/q$i.log" 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	rc=0
	for p in $pids; do wait "$p" || rc=1; done
	cat "$T"/q*.log
	[ $rc = 0 ] || return 1
	i=0
	while [ $i -lt "$n" ]; do
		gpunvme verify "$BDF" $M --pattern $((50 + i)) --start-block $((4096 + i * 512)) --block-count 512 || return 1
		i=$((i + 1))
	done
}
two_qpairs() { qpairs_parallel 2; }
four_qpairs() { qpairs_parallel 4; }

# 4 queue pairs in one process (one thread each) at QD 8, reads: shared
# pairs, then (--owner) raw pairs of the owner, and their ratios.
bench_four_qpairs() {
	[ -n "$OWNER" ] || { echo "the CLI has no owner-mode option"; return 1; }
	gpunvme bench "$BDF" "$OWNER" --qpairs 1,4 --qd 1,8 --ops 400 --range 4M -o json > "$T/bench.json" || return 1
	grep -q '"qpairs": 4' "$T/bench.json" || return 1
	grep -q '"target": "gpunvme"' "$T/bench.json" || return 1
	grep -q '"target": "gpunvme-raw"' "$T/bench.json" || return 1
	grep -q '"iops_shared_over_raw"' "$T/bench.json"
}

exactly_mdts() {
	out=$(gpunvme write "$BDF" $M --pattern 61 --start-block 8192 --block-count "$MDTS_BLOCKS" 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q " 1 command(s)" || return 1
	gpunvme verify "$BDF" $M --pattern 61 --start-block 8192 --block-count "$MDTS_BLOCKS" || return 1
	# One block more: two commands.
	l=$((8192 + MDTS_BLOCKS * 2))
	out=$(gpunvme write "$BDF" $M --pattern 62 --start-block $l --block-count $((MDTS_BLOCKS + 1)) 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q " 2 command(s)" || return 1
	gpunvme verify "$BDF" $M --pattern 62 --start-block $l --block-count $((MDTS_BLOCKS + 1))
}

last_lba() {
	wv 71 $((CAP - 1)) 1 || return 1
	wv 72 $((CAP - 9)) 8
}

# The client-side check refuses; --no-range-check lets the module's
# validator (shared mode) or the controller (owner mode) answer, with the
# same status.
lba_out_of_range() {
	if out=$(gpunvme read "$BDF" $M --start-block "$CAP" --block-count 1 2>&1); then echo "read past the end succeeded"; return 1; fi
	echo "client side: $out"
	echo "$out" | grep -q "beyond namespace" || return 1
	for args in "--start-block $CAP --block-count 1" "--start-block $((CAP - 1)) --block-count 2"; do
		# shellcheck disable=SC2086
		if out=$(gpunvme read "$BDF" $M $args --no-range-check 2>&1); then echo "unchecked read $args succeeded"; return 1; fi
		who=module
		[ -n "$OWNER_MODE" ] && who=controller
		echo "$who: $out"
		echo "$out" | grep -q "LBA Out of Range (SCT 0x0, SC 0x80" || return 1
	done
	# And a write that spans the end must not have written the in-range block.
	if gpunvme write "$BDF" $M --pattern 99 --start-block $((CAP - 1)) --block-count 2 --no-range-check 2>/dev/null; then return 1; fi
	gpunvme verify "$BDF" $M --pattern 71 --start-block $((CAP - 1)) --block-count 1
}

to_kernel_nvme() {
	modprobe nvme poll_queues=1 2>/dev/null
	gpunvme unbind --to-nvme "$BDF" || return 1
	i=0
	while [ $i -lt 100 ]; do
		NVME=$(gpunvme list | grep "^$BDF" | sed -n 's/.*: \(nvme[0-9]*n1\).*/\1/p')
		[ -n "$NVME" ] && [ -b "/dev/$NVME" ] && break
		sleep 0.1
		i=$((i + 1))
	done
	[ -b "/dev/$NVME" ] || { gpunvme list; return 1; }
	echo "$BDF is /dev/$NVME"
}

dd_cmp() { # seed lba count
	dd if="/dev/$NVME" of="$T/dd" bs="$LBA_SIZE" skip="$2" count="$3" 2>/dev/null || return 1
	gpunvme pattern --pattern "$1" --start-block "$2" --block-count "$3" --block-size "$LBA_SIZE" > "$T/ref" || return 1
	cmp "$T/dd" "$T/ref" || { echo "LBA $2 count $3 differs"; return 1; }
}

kernel_reads_same_bytes() {
	[ -n "$NVME" ] || return 1
	dd_cmp 11 0 1 && dd_cmp 21 64 256 && dd_cmp 34 1024 96 && dd_cmp 41 2048 96 &&
	dd_cmp 50 4096 512 && dd_cmp 51 4608 512 &&
	dd_cmp 61 8192 "$MDTS_BLOCKS" && dd_cmp 62 $((8192 + MDTS_BLOCKS * 2)) $((MDTS_BLOCKS + 1)) &&
	dd_cmp 71 $((CAP - 1)) 1 && dd_cmp 72 $((CAP - 9)) 8
}

# The bench JSON has all three runs, no skipped cell, both sets of ratios
# and the tail percentiles.
grep_bench() {
	grep -q '"target": "gpunvme"' "$1" && grep -q '"target": "kernel-irq"' "$1" &&
	grep -q '"target": "kernel-poll"' "$1" && ! grep -q '"skipped"' "$1" &&
	grep -q '"ratios_against": "kernel-poll"' "$1" && grep -q '"ratios_kernel_irq"' "$1" &&
	grep -q '"iops_gpunvme_over_kernel"' "$1" && grep -q '"lat_us_p999"' "$1"
}

# The same matrix on gpunvme and on the kernel driver's controller; the
# JSON holds the runs and their ratios.
bench_vs_kernel() {
	k=$(gpunvme list | grep "^${KERNEL_NVME_BDF:-none} " | sed -n 's/.*: \(nvme[0-9]*n1\).*/\1/p')
	[ -b "/dev/$k" ] || { echo "no block device for KERNEL_NVME_BDF=$KERNEL_NVME_BDF"; gpunvme list; return 1; }
	gpunvme bench "$BDF" --block-device "/dev/$k" --qpairs 1,4 --qd 1,8,32 --ops 600 --range 16M -o json > "$T/vs.json" || return 1
	# Both kernel modes measured (vm-env.sh loads nvme with a poll queue, so
	# no cell is skipped), ratios against the polled one, interrupt ones beside.
	grep_bench "$T/vs.json" || { cat "$T/vs.json"; return 1; }
}

ktap_skip() { __ktap_n=$((__ktap_n + 1)); echo "ok $__ktap_n $1 # SKIP $2"; }

back_to_gpunvme() {
	gpunvme bind "$BDF" || return 1
	gpunvme verify "$BDF" $M --pattern 21 --start-block 64 --block-count 256
}

if [ -n "$OWNER_MODE" ] && [ -z "$OWNER" ]; then
	ktap_plan 1
	ktap_not_ok "owner mode: the CLI has an owner-mode option (gpunvme write --help names neither --owner nor --raw)"
	ktap_done
	exit 1
fi
ktap_plan 19
ktap_check "setup: module loaded, controller bound${OWNER_MODE:+ (owner mode: $OWNER)}" setup
# setup ran in a subshell: read the values again here.
LBA_SIZE=$(sed -n 's/.*"lba_size": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
CAP=$(sed -n 's/.*"capacity_lbas": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
MDTS=$(sed -n 's/.*"max_transfer_bytes": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
QUEUES=$(sed -n 's/.*"io_queues": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
[ -n "$MDTS" ] || MDTS=4194304
MDTS_BLOCKS=$((MDTS / ${LBA_SIZE:-512}))
[ "$MDTS_BLOCKS" -gt 65536 ] && MDTS_BLOCKS=65536
ktap_check "single I/O: write + verify one block" single_io
ktap_check "gpu-run without a GPU fails clearly, controller untouched" gpu_run_without_gpu
ktap_check "read --data equals gpunvme pattern" read_out_matches_pattern
ktap_check "verify reports the first mismatch" verify_detects_a_wrong_seed
ktap_check "multi-block write + verify" multi_block
ktap_check "multi-round overwrite" multi_round
ktap_check "queue wrap (depth 4, 96 commands)" queue_wrap
ktap_check "shared and owner queue pairs: each reads what the other wrote" shared_owner_cross_check
if [ -n "$OWNER_MODE" ]; then
	# One owner at a time: the parallel writers would get EBUSY. Their
	# ranges still get the data the later checks read.
	i=0
	while [ $i -lt 2 ]; do
		gpunvme write "$BDF" $M --pattern $((50 + i)) --start-block $((4096 + i * 512)) --block-count 512 >/dev/null 2>&1
		i=$((i + 1))
	done
	ktap_skip "2 queue pairs in parallel" "owner mode: one process owns the controller"
else
	ktap_check "2 queue pairs in parallel" two_qpairs
fi
if [ "${QUEUES:-0}" -ge 4 ] && [ -z "$OWNER_MODE" ]; then
	ktap_check "4 queue pairs in parallel" four_qpairs
elif [ -n "$OWNER_MODE" ]; then
	ktap_skip "4 queue pairs in parallel" "owner mode: one process owns the controller"
else
	ktap_skip "4 queue pairs in parallel" "controller granted ${QUEUES:-?} I/O queues"
fi
if [ "${QUEUES:-0}" -ge 4 ]; then
	ktap_check "bench: 1 and 4 queue pairs in one process" bench_four_qpairs
else
	ktap_skip "bench: 1 and 4 queue pairs in one process" "controller granted ${QUEUES:-?} I/O queues"
fi
ktap_check "transfer of exactly MDTS (and MDTS + 1 block)" exactly_mdts
ktap_check "last LBA of the namespace" last_lba
ktap_check "LBA out of range reaches the caller" lba_out_of_range
ktap_check "rebind to the kernel nvme driver" to_kernel_nvme
NVME=$(gpunvme list | grep "^$BDF" | sed -n 's/.*: \(nvme[0-9]*n1\).*/\1/p')
ktap_check "kernel nvme reads the same bytes (dd vs gpunvme pattern)" kernel_reads_same_bytes
ktap_check "bind back to gpunvme, data intact" back_to_gpunvme
if [ "${QUEUES:-0}" -ge 4 ]; then
	ktap_check "bench vs kernel nvme (io_uring, interrupt and polled), JSON with all runs and ratios" bench_vs_kernel
else
	ktap_skip "bench vs kernel nvme (io_uring, interrupt and polled), JSON with all runs and ratios" "controller granted ${QUEUES:-?} I/O queues"
fi
rm -rf "$T"
ktap_done
