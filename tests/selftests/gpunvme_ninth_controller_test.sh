#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# More controllers than device nodes: gpunvme has 8 (/dev/gpunvme0..7). The
# ninth controller's probe must fail before it touches the controller (no
# Identify, never enabled, PCI command register untouched), say why, and leave the other
# eight working; once a node is free the ninth binds and does I/O.
# Needs a boot with at least nine NVMe controllers besides KERNEL_NVME_BDF
# (tests/vm/suite.sh adds eight); the Makefile builds it under build/boot/.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
T=$(mktemp -d)

# Every NVMe controller (class 010802) except the one left to nvme.ko.
ctrls=""
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/class")" = 0x010802 ] || continue
	b=${d##*/}
	[ "$b" = "${KERNEL_NVME_BDF:-}" ] || ctrls="$ctrls $b"
done
set -- $ctrls
ktap_plan 8
if [ $# -lt 9 ]; then
	ktap_not_ok "this boot has $# controllers for gpunvme, the test needs 9"
	ktap_done; exit 1
fi
[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko"

bind() { echo gpunvme > "/sys/bus/pci/devices/$1/driver_override" && echo "$1" > /sys/bus/pci/drivers/gpunvme/bind; }
bound() { [ "$(basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)")" = gpunvme ]; }

eight_bind() {
	n=0
	for b in "$@"; do
		n=$((n + 1)); [ $n -le 8 ] || break
		bound "$b" || bind "$b" || { echo "bind $b failed"; return 1; }
	done
	for i in 0 1 2 3 4 5 6 7; do [ -c /dev/gpunvme$i ] || { echo "/dev/gpunvme$i missing"; return 1; }; done
}
ktap_check "eight controllers bind, /dev/gpunvme0..7" eight_bind "$@"

shift 8; ninth=$1
command_reg() { od -An -tx2 -j4 -N2 "/sys/bus/pci/devices/$ninth/config" | tr -d ' '; }
cmd_before=$(command_reg)
dmesg -c > /dev/null
ninth_refused() {
	if bind "$ninth" 2> "$T/err"; then echo "bind of $ninth succeeded"; return 1; fi
	cat "$T/err"
	grep -q "No space left on device" "$T/err" && ! bound "$ninth"
}
ktap_check "the ninth bind fails with ENOSPC" ninth_refused
ktap_check "the log says why (no free /dev/gpunvme node)" sh -c "dmesg | grep '$ninth: no free /dev/gpunvme node'"
# The old probe identified and enabled the controller before it found the
# nodes full, then disabled it and freed its admin queue.
ktap_check "the ninth controller was never identified or enabled" sh -c "! dmesg | grep -E '$ninth: (QEMU|NVMe [0-9])'"
# The firmware may have set bus mastering already; the probe must not
# have changed the command register either way.
command_unchanged() {
	echo "PCI command register before the bind: $cmd_before, after: $(command_reg)"
	[ "$(command_reg)" = "$cmd_before" ]
}
ktap_check "the ninth controller's PCI command register is as the firmware left it" command_unchanged

eighth=$(for b in $ctrls; do echo "$b"; done | sed -n 8p)
node_of() { gpunvme list | awk -v b="$1" '$1 == b { print $5 }'; }
swap_in() {
	freed=$(node_of "$eighth")
	echo "$eighth" > /sys/bus/pci/drivers/gpunvme/unbind || return 1
	bind "$ninth" || return 1
	echo "$ninth took $(node_of "$ninth") (freed: $freed)"
	[ -n "$freed" ] && [ "$(node_of "$ninth")" = "$freed" ]
}
ktap_check "with a node free, the ninth binds and takes it" swap_in
ninth_io() {
	gpunvme write "$ninth" --pattern 909 --start-block 0 --block-count 64 &&
	gpunvme verify "$ninth" --pattern 909 --start-block 0 --block-count 64 &&
	! gpunvme verify "$ninth" --pattern 910 --start-block 0 --block-count 64 2>/dev/null
}
ktap_check "write and verify on the ninth controller" ninth_io
others_io() {
	first=$(for b in $ctrls; do echo "$b"; done | sed -n 1p)
	gpunvme write "$first" --pattern 101 --start-block 8 --block-count 8 && gpunvme verify "$first" --pattern 101 --start-block 8 --block-count 8
}
ktap_check "the first controller still does I/O" others_io
rm -rf "$T"
ktap_done
