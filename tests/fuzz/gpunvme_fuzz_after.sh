#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# After gpunvme_fuzz (run it first in the same boot): the controller still
# works and nothing leaked.
#  - the controller is bound to gpunvme again (rebound if the fuzzer's
#    unbind left it unbound) and known patterns written through the CLI read
#    back byte-exact, at the first and the last LBAs;
#  - nothing holds the modules: gpunvme_standin and gpunvme unload (a file,
#    dma-buf, import or module reference the fuzzer's processes leaked
#    would keep them), load again, bind, and the data written before the
#    reload is still there, then new patterns round-trip;
#  - with kmemleak on (kmemleak=on on the command line; the suite's debug
#    fuzz boot adds it, with slub_debug=P, without which this kernel's
#    kmemleak reports nothing) a scan finds no unreferenced object allocated
#    by gpunvme. No positive control here: the hot-unplug boot has one.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
PATH=$DIR:$PATH
T=/tmp/gpunvme_fuzz_after.$$
mkdir -p "$T"

driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }

bound() {
	[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || return 1
	if [ "$(driver_of "$BDF")" != gpunvme ]; then
		echo "not bound after the fuzz (driver '$(driver_of "$BDF")'): binding"
		echo gpunvme > "/sys/bus/pci/devices/$BDF/driver_override"
		echo "$BDF" > /sys/bus/pci/drivers/gpunvme/bind 2>/dev/null ||
			echo "$BDF" > /sys/bus/pci/drivers_probe
	fi
	[ "$(driver_of "$BDF")" = gpunvme ] || return 1
	geometry
}

# LBA_SIZE and CAP of namespace 1 (each ktap_check runs in a subshell:
# every check that needs them calls this).
geometry() {
	gpunvme info "$BDF" -o json > "$T/info.json" || return 1
	LBA_SIZE=$(sed -n 's/.*"lba_size": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	CAP=$(sed -n 's/.*"capacity_lbas": *\([0-9]*\).*/\1/p' "$T/info.json" | head -1)
	[ -n "$LBA_SIZE" ] && [ -n "$CAP" ] || { cat "$T/info.json"; return 1; }
	echo "lba_size $LBA_SIZE capacity $CAP"
}

wv() { # seed lba count: write, then verify in a second process
	gpunvme write "$BDF" --start-block "$2" --block-count "$3" --pattern "$1" &&
		gpunvme verify "$BDF" --start-block "$2" --block-count "$3" --pattern "$1"
}
verify() { gpunvme verify "$BDF" --start-block "$2" --block-count "$3" --pattern "$1"; }

patterns() {
	geometry || return 1
	wv 9101 0 256 && wv 9102 $((CAP - 64)) 64 && wv 9103 $((CAP / 2)) 7
}

# What still holds gpunvme: its reference count, what its DMA registry
# keeps (debugfs kept), every dma-buf and who maps it, the processes with a
# gpunvme node or a dma-buf open, and the log lines about kept memory.
holders() {
	echo "gpunvme refcnt $(cat /sys/module/gpunvme/refcnt 2>/dev/null)"
	for k in /sys/kernel/debug/gpunvme-*/kept; do
		[ -r "$k" ] && echo "$k: $(cat "$k")"
	done
	grep -v '^$' /sys/kernel/debug/dma_buf/bufinfo 2>/dev/null | head -n 40
	for p in /proc/[0-9]*; do
		for f in "$p"/fd/*; do
			l=$(readlink "$f" 2>/dev/null) || continue
			case $l in *gpunvme*|*dmabuf*) echo "$p ($(cat "$p/comm" 2>/dev/null)) fd $f: $l" ;; esac
		done
	done
	dmesg | grep -E 'still held|kept|leaked|let go' | tail -n 12
}

unload() {
	i=0
	# The fuzzer's processes are gone; give deferred releases a moment.
	while [ -d /sys/module/gpunvme_standin ] && ! rmmod gpunvme_standin 2>"$T/rmmod"; do
		i=$((i + 1)); [ $i -lt 50 ] || { cat "$T/rmmod"; lsmod; holders; return 1; }; sleep 0.1
	done
	i=0
	while ! rmmod gpunvme 2>"$T/rmmod"; do
		i=$((i + 1)); [ $i -lt 50 ] || { cat "$T/rmmod"; lsmod; holders; return 1; }; sleep 0.1
	done
	[ ! -d /sys/module/gpunvme ]
}

reload_and_read() {
	insmod "$DIR/gpunvme.ko" || return 1
	bound || return 1
	verify 9101 0 256 && verify 9102 $((CAP - 64)) 64 && wv 9104 1000 128
}

kmemleak() {
	k=/sys/kernel/debug/kmemleak
	# One scan (a scan of the whole memory takes minutes under TCG with
	# KASAN); objects younger than 5 s are never reported.
	cat $k > "$T/leaks"
	n=$(grep -c 'unreferenced object' "$T/leaks")
	echo "kmemleak: $n unreferenced objects in all"
	# An object counts against the module if its allocation backtrace
	# passes through gpunvme (or the stand-in).
	awk '/^unreferenced object/ { if (blk != "" && blk ~ /gpunvme/) print blk; blk = $0; next }
	     { blk = blk "\n" $0 } END { if (blk ~ /gpunvme/) print blk }' "$T/leaks" > "$T/ours"
	if [ -s "$T/ours" ]; then
		head -n 80 "$T/ours"
		return 1
	fi
	[ "$n" = 0 ] || head -n 40 "$T/leaks"
	return 0
}

ktap_plan 5
ktap_check "controller bound to gpunvme after the fuzz" bound
ktap_check "patterns written after the fuzz read back byte-exact" patterns
ktap_check "gpunvme_standin and gpunvme unload (nothing leaked holds them)" unload
ktap_check "reloaded and rebound: the data is still there, new patterns round-trip" reload_and_read
if ! [ -w /sys/kernel/debug/kmemleak ] || ! grep -q 'kmemleak=on' /proc/cmdline; then
	ktap_ok "kmemleak: no unreferenced object from gpunvme # SKIP kmemleak off (boot with kmemleak=on)"
elif ! timeout 600 sh -c 'echo scan > /sys/kernel/debug/kmemleak'; then
	ktap_ok "kmemleak: no unreferenced object from gpunvme # SKIP the scan did not finish within 600 s"
else
	ktap_check "kmemleak: no unreferenced object from gpunvme" kmemleak
fi
rm -rf "$T"
ktap_done
