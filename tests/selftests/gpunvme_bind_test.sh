#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# `gpunvme bind` must not take a disk that is in use. The controller the
# kernel nvme driver drives ($KERNEL_NVME_BDF) gets a partition table (p1
# 8 MiB, p2 16 MiB), a file system on p2 (busybox mke2fs: ext2, mounted by
# the ext4 driver) holding a file of known random content, and then, one at
# a time:
#   - p2 mounted;
#   - p2 mounted the way the kernel mounts root: the mount table says
#     /dev/root (the node is removed after the mount, as at boot);
#   - p1 an active swap area;
#   - the whole namespace held O_EXCL by a process (gpunvme_bind_helper);
#   - the whole namespace open (not exclusively) by a process, and the
#     same for the controller's and the namespace's character devices;
#   - a device-mapper device on p2 (made by the DM ioctls), mounted;
#   - p2 mounted where the caller cannot see it: in another mount namespace
#     (unshare -m), and outside the root of a chrooted caller.
# Each time bind must fail (non-zero exit) with a message naming what holds
# the disk (mount point, swap, dm name, pid), the controller must still be
# bound to nvme with its block devices, and the file must read back intact.
# Between its check and the unbind, bind holds every block device O_EXCL:
# paused there (a test-only knob), a mount, a swapon and an exclusive open
# must fail. Last, with everything released, bind succeeds, gpunvme has
# the controller, and `unbind --to-nvme` gives it back with the file intact.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
KBDF=${KERNEL_NVME_BDF:-0000:00:05.0}
PATH=$DIR:$PATH
HELPER=$DIR/gpunvme_bind_helper
T=/tmp/gpunvme_bind.$$
M=/mnt/gpunvme_bind
DM_NAME=gpunvme-bind-test
mkdir -p "$T" "$M"

driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }

# The namespace block device of $KBDF (nvme<N>n1) once nvme has bound it.
find_ns() {
	i=0
	while [ $i -lt 100 ]; do
		for d in /sys/bus/pci/devices/"$KBDF"/nvme/nvme*/nvme*n1; do
			[ -e "$d" ] || continue
			NS=${d##*/}
			[ -b "/dev/$NS" ] && return 0
		done
		sleep 0.1
		i=$((i + 1))
	done
	return 1
}

wait_blk() { # path: up to 10 s for a block node to appear
	i=0
	while [ ! -b "$1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -b "$1" ]
}

# Four little-endian bytes of $1, as printf escapes (text: NUL bytes cannot
# pass through a command substitution, so one printf at the end makes them).
le32() {
	for s in 0 8 16 24; do printf '\\%03o' $((($1 >> s) & 255)); done
}
mbr_entry() { # type start sectors
	printf '%s' "\\000\\000\\000\\000\\$(printf %03o "$1")\\000\\000\\000$(le32 "$2")$(le32 "$3")"
}

setup() {
	[ -x "$HELPER" ] || { echo "missing $HELPER"; return 1; }
	[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || return 1
	modprobe nvme 2>/dev/null
	if [ "$(driver_of "$KBDF")" != nvme ]; then
		echo nvme > "/sys/bus/pci/devices/$KBDF/driver_override"
		echo "$KBDF" > /sys/bus/pci/drivers_probe
	fi
	[ "$(driver_of "$KBDF")" = nvme ] || { echo "$KBDF not bound to nvme"; return 1; }
	find_ns || { echo "no namespace block device for $KBDF"; return 1; }
	echo "$KBDF is /dev/$NS"
	dd if=/dev/zero of="/dev/$NS" bs=512 count=2048 2>/dev/null || return 1
	# An MBR: p1 type 0x82 at 2048, 16384 sectors; p2 0x83 at 18432, 32768
	# (small: mke2fs and each check stay quick on the debug kernel).
	printf "$(mbr_entry 130 2048 16384)$(mbr_entry 131 18432 32768)" |
		dd of="/dev/$NS" bs=1 seek=446 conv=notrunc 2>/dev/null || return 1
	printf '\125\252' | dd of="/dev/$NS" bs=1 seek=510 conv=notrunc 2>/dev/null || return 1
	sync
	blockdev --rereadpt "/dev/$NS" || return 1
	wait_blk "/dev/${NS}p1" && wait_blk "/dev/${NS}p2" || { ls /sys/block/"$NS"; return 1; }
	mke2fs -F "/dev/${NS}p2" >/dev/null || return 1
	dd if=/dev/urandom of="$T/ref" bs=4096 count=64 2>/dev/null || return 1
	mount "/dev/${NS}p2" "$M" || return 1
	cp "$T/ref" "$M/data" && umount "$M" || return 1
	mkswap "/dev/${NS}p1" >/dev/null
}

# Mounts p2 read-only somewhere and compares the file with the reference.
data_intact() {
	local rc
	mkdir -p "$T/chk"
	mount -o ro "${1:-/dev/${NS}p2}" "$T/chk" || { echo "cannot mount p2 to check it"; return 1; }
	cmp "$T/chk/data" "$T/ref"
	rc=$?
	umount "$T/chk"
	[ $rc = 0 ] || echo "the file on p2 differs from what was written"
	return $rc
}

# bind must fail, print every given string, and leave the controller on
# nvme with its disk. $OUT keeps the message.
refused() {
	local rc ok want
	OUT=$(gpunvme bind "$KBDF" 2>&1)
	rc=$?
	echo "bind: rc=$rc: $OUT"
	ok=0
	[ $rc != 0 ] || { echo "bind succeeded"; ok=1; }
	for want in "$@"; do
		echo "$OUT" | grep -qF -- "$want" || { echo "message lacks: $want"; ok=1; }
	done
	# Every busy device must be explained here (a claim of this very check
	# must not make a partition look busy, either).
	echo "$OUT" | grep -qF "not visible here" && { echo "an unexplained busy device"; ok=1; }
	[ "$(driver_of "$KBDF")" = nvme ] || { echo "$KBDF is now bound to '$(driver_of "$KBDF")'"; ok=1; }
	[ -b "/dev/$NS" ] && [ -b "/dev/${NS}p2" ] || { echo "the block devices are gone"; ok=1; }
	return $ok
}

# After a bind that should not have happened: put things back so the next
# case starts from the same state.
recover() {
	[ "$(driver_of "$KBDF")" = nvme ] && return 0
	echo "recovering: giving $KBDF back to nvme"
	umount -l "$M" 2>/dev/null
	swapoff -a 2>/dev/null
	gpunvme unbind --to-nvme "$KBDF" >/dev/null 2>&1
	find_ns && wait_blk "/dev/${NS}p2"
}

case_mounted() {
	mount "/dev/${NS}p2" "$M" || return 1
	refused "${NS}p2 mounted on $M" "nothing was unbound"
	rc=$?
	cmp "$M/data" "$T/ref" || { echo "data differs while mounted"; rc=1; }
	umount "$M" 2>/dev/null || umount -l "$M"
	recover
	data_intact && return $rc
}

case_dev_root() {
	# The kernel mounts its root from a node named /dev/root that does not
	# exist afterwards: do the same with p2's device number.
	mm=$(cat "/sys/class/block/${NS}p2/dev")
	rm -f /dev/root
	mknod /dev/root b "${mm%:*}" "${mm#*:}" || return 1
	mount /dev/root "$M" || return 1
	rm -f /dev/root
	grep -q "^/dev/root $M " /proc/mounts || { echo "mount table does not say /dev/root"; umount "$M"; return 1; }
	refused "${NS}p2 mounted on $M (as /dev/root"
	rc=$?
	cmp "$M/data" "$T/ref" || { echo "data differs while mounted"; rc=1; }
	umount "$M" 2>/dev/null || umount -l "$M"
	recover
	data_intact && return $rc
}

case_swap() {
	swapon "/dev/${NS}p1" || return 1
	refused "${NS}p1 active swap"
	rc=$?
	swapoff "/dev/${NS}p1" || { echo "swapoff failed"; rc=1; }
	cat /proc/swaps
	recover
	data_intact && return $rc
}

case_excl_process() {
	rm -f "$T/ready"
	"$HELPER" excl "/dev/$NS" "$T/ready" >/dev/null 2>&1 &
	pid=$!
	i=0
	while [ ! -e "$T/ready" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e "$T/ready" ] || { kill $pid; return 1; }
	refused "$NS held open exclusively by pid $pid (gpunvme_bind_he)"
	rc=$?
	kill $pid
	wait $pid 2>/dev/null
	recover
	data_intact && return $rc
}

case_raw_opener() {
	sleep 600 < "/dev/$NS" >/dev/null 2>&1 &
	pid=$!
	sleep 0.2
	refused "$NS open by pid $pid (sleep)"
	rc=$?
	kill $pid
	wait $pid 2>/dev/null
	recover
	data_intact && return $rc
}

# The same for the controller's character device (/dev/nvmeN, admin
# passthrough) and the namespace's generic one (/dev/ngNn1).
case_char_openers() {
	ctrl=$(basename /sys/bus/pci/devices/"$KBDF"/nvme/nvme*)
	ng=ng${ctrl#nvme}n1
	[ -c "/dev/$ctrl" ] && [ -c "/dev/$ng" ] || { echo "no /dev/$ctrl or /dev/$ng"; return 1; }
	rc=0
	for c in "$ctrl" "$ng"; do
		sleep 600 < "/dev/$c" >/dev/null 2>&1 &
		pid=$!
		sleep 0.2
		refused "$c open by pid $pid (sleep)" || rc=1
		kill $pid
		wait $pid 2>/dev/null
		recover
	done
	return $rc
}

case_dm() {
	dm=$("$HELPER" dm-create "$DM_NAME" "/dev/${NS}p2") || return 1
	echo "$DM_NAME is $dm"
	wait_blk "/dev/$dm" || { "$HELPER" dm-remove "$DM_NAME"; return 1; }
	[ -e "/sys/class/block/${NS}p2/holders/$dm" ] || echo "sysfs shows no holder link"
	mount "/dev/$dm" "$M" || { "$HELPER" dm-remove "$DM_NAME"; return 1; }
	refused "${NS}p2 held by $dm (device-mapper $DM_NAME)" "$dm mounted on $M"
	rc=$?
	cmp "$M/data" "$T/ref" || { echo "data differs through the dm device"; rc=1; }
	umount "$M" 2>/dev/null || umount -l "$M"
	"$HELPER" dm-remove "$DM_NAME" || rc=1
	recover
	data_intact && return $rc
}

# A mount in another mount namespace: not in the caller's mount table.
case_other_namespace() {
	rm -f "$T/ready"
	unshare -m sh -c "mount /dev/${NS}p2 $M && touch $T/ready && exec sleep 600" >/dev/null 2>&1 &
	pid=$!
	i=0
	while [ ! -e "$T/ready" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e "$T/ready" ] || { kill $pid; return 1; }
	rc=0
	grep -q " $M " /proc/self/mountinfo && { echo "the mount is visible here"; rc=1; }
	refused "${NS}p2 mounted on $M as seen by pid" || rc=1
	kill $pid
	wait $pid 2>/dev/null
	# The namespace dies with its last process; its mounts go a little
	# later (deferred): wait until p2 is no longer held.
	rm -f "$T/free"
	i=0
	while ! timeout 1 "$HELPER" excl "/dev/${NS}p2" "$T/free" >/dev/null 2>&1 && [ $i -lt 50 ]; do
		[ -e "$T/free" ] && break
		sleep 0.1; i=$((i + 1))
	done
	recover
	data_intact && return $rc
}

# A mount outside the root of a chrooted caller: not in its mount table
# either (the kernel hides mounts a process cannot reach). The jail's /dev
# is an empty directory, so bind must make its own device nodes (and
# remove them).
case_other_root() {
	J=$T/jail
	mkdir -p "$J/proc" "$J/sys" "$J/dev" "$J/bin" "$J/opt" "$J/tmp"
	cp /bin/busybox "$J/bin/" && cp "$DIR/gpunvme" "$J/opt/" || return 1
	for l in /lib/x86_64-linux-gnu /lib64 /usr/lib/x86_64-linux-gnu; do
		[ -d "$l" ] && mkdir -p "$J$l" && cp -a "$l/." "$J$l/"
	done
	mount -t proc proc "$J/proc" && mount -t sysfs sysfs "$J/sys" || return 1
	mount "/dev/${NS}p2" "$M" || return 1
	rc=0
	if chroot "$J" /bin/busybox cat /proc/self/mountinfo | grep -q " $M "; then
		echo "the mount is visible in the chroot"; rc=1
	fi
	OUT=$(chroot "$J" /opt/gpunvme bind "$KBDF" 2>&1)
	r=$?
	echo "chrooted bind: rc=$r: $OUT"
	[ $r != 0 ] || { echo "bind succeeded"; rc=1; }
	echo "$OUT" | grep -qF "${NS}p2 mounted on $M as seen by pid 1 (init)" || { echo "message lacks the mount"; rc=1; }
	[ "$(driver_of "$KBDF")" = nvme ] || { echo "$KBDF is now bound to '$(driver_of "$KBDF")'"; rc=1; }
	[ -z "$(ls -A "$J/dev")" ] || { echo "left in the jail's /dev:"; ls -la "$J/dev"; rc=1; }
	cmp "$M/data" "$T/ref" || { echo "data differs while mounted"; rc=1; }
	umount "$M" 2>/dev/null || umount -l "$M"
	umount "$J/sys" "$J/proc"
	recover
	data_intact && return $rc
}

# The window between the check and the unbind: bind holds its O_EXCL
# claim there. The CLI's test-only pause (GPUNVME_TEST_BIND_PAUSE) stops it
# at that point; a mount, a swapon and an exclusive open must all fail
# then, and the bind must go on once released.
case_window() {
	rm -f "$T/go" "$T/go.held"
	GPUNVME_TEST_BIND_PAUSE=$T/go gpunvme bind "$KBDF" > "$T/bind.out" 2>&1 &
	pid=$!
	i=0
	while [ ! -e "$T/go.held" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
	[ -e "$T/go.held" ] || { echo "bind never paused"; cat "$T/bind.out"; kill $pid; return 1; }
	echo "bind paused holding $(cat "$T/go.held") block device(s)"
	rc=0
	if mount "/dev/${NS}p2" "$M" 2>"$T/err"; then
		echo "mount of p2 succeeded in the window"; umount "$M"; rc=1
	else
		echo "mount: $(cat "$T/err")"
	fi
	if swapon "/dev/${NS}p1" 2>"$T/err"; then
		echo "swapon of p1 succeeded in the window"; swapoff "/dev/${NS}p1"; rc=1
	else
		echo "swapon: $(cat "$T/err")"
	fi
	for d in "$NS" "${NS}p2"; do
		if timeout 2 "$HELPER" excl "/dev/$d" "$T/got" 2>"$T/err"; [ -e "$T/got" ]; then
			echo "O_EXCL open of $d succeeded in the window"; rm -f "$T/got"; rc=1
		else
			echo "O_EXCL $d: $(cat "$T/err")"
		fi
	done
	[ "$(driver_of "$KBDF")" = nvme ] || { echo "unbound before the pause ended"; rc=1; }
	touch "$T/go"
	wait $pid || { echo "bind failed:"; rc=1; }
	cat "$T/bind.out"
	[ "$(driver_of "$KBDF")" = gpunvme ] || { echo "driver is '$(driver_of "$KBDF")'"; rc=1; }
	gpunvme unbind --to-nvme "$KBDF" || rc=1
	find_ns && wait_blk "/dev/${NS}p2" || return 1
	data_intact && return $rc
}

# Everything released: bind works, gpunvme has the controller; then back.
case_free() {
	out=$(gpunvme bind "$KBDF" 2>&1)
	rc=$?
	echo "bind: rc=$rc: $out"
	[ $rc = 0 ] || return 1
	[ "$(driver_of "$KBDF")" = gpunvme ] || { echo "driver is '$(driver_of "$KBDF")'"; return 1; }
	gpunvme list | grep "^$KBDF" | grep -q gpunvme || { gpunvme list; return 1; }
	gpunvme info "$KBDF" >/dev/null || return 1
	gpunvme unbind --to-nvme "$KBDF" || return 1
	find_ns && wait_blk "/dev/${NS}p2" || return 1
	data_intact
}

ktap_plan 12
ktap_check "setup: $KBDF on nvme, partitioned, a file system on p2 with a known file" setup
find_ns
ktap_check "refused: a partition is mounted (names the mount point)" case_mounted
ktap_check "refused: mounted as /dev/root like a kernel-mounted root" case_dev_root
ktap_check "refused: a partition is active swap" case_swap
ktap_check "refused: a process holds the namespace O_EXCL (names the pid)" case_excl_process
ktap_check "refused: a process has the namespace open (names the pid)" case_raw_opener
ktap_check "refused: a process has /dev/nvmeN or /dev/ngNn1 open (names the pid)" case_char_openers
ktap_check "refused: a device-mapper device on a partition, mounted (names dm-N and its name)" case_dm
ktap_check "refused: mounted in another mount namespace (names the mount, the pid)" case_other_namespace
ktap_check "refused: mounted outside a chrooted caller's root (no /dev nodes there)" case_other_root
ktap_check "between check and unbind: mount, swapon, O_EXCL all refused" case_window
ktap_check "released: bind succeeds, gpunvme has it; unbind --to-nvme, data intact" case_free
rm -rf "$T"
ktap_done
