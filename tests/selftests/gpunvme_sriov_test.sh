#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# SR-IOV (tests/vm/run.sh --sriov, QEMU's SR-IOV NVMe in an nvme-subsys): the
# PF stays with nvme.ko, an ext4 file system on its namespace 1 mounted,
# while `gpunvme sriov` gives a VF queues and interrupts, brings its
# secondary controller online and attaches namespace 2 to it alone; gpunvme
# then writes and verifies patterns through the VF (shared and raw queue
# pairs) while the PF's file system is written too. The PF's files are
# checked byte for byte before the PF reset, after it, after the VF I/O and
# after a remount and an fsck; the VF is handed back to nvme (which must
# read gpunvme's patterns), unbound and the VFs disabled.
# Needs mke2fs (+ e2fsck) in the VM: run.sh --file /usr/sbin/mke2fs ...
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
[ -f /etc/gpunvme-vm.env ] && . /etc/gpunvme-vm.env
PF=${SRIOV_PF_BDF:-}
if [ -z "$PF" ] || [ ! -e "/sys/bus/pci/devices/$PF/sriov_totalvfs" ]; then
	echo "TAP version 13"
	echo "1..0 # SKIP no SR-IOV PF (tests/vm/run.sh --sriov)"
	exit 4
fi
# e2fsprogs' (busybox's mke2fs makes only ext2).
MKFS=$DIR/mke2fs
FSCK=$DIR/e2fsck
PFDIR=/sys/bus/pci/devices/$PF
MNT=/mnt/sriov-pf
SUMS=/tmp/sriov-pf.sha256
T=/tmp/sriov
mkdir -p "$MNT" "$T"

driver_of() { d=$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null) && echo "${d##*/}"; }
# wait_for CMD...: up to 30 s.
wait_for() {
	i=0
	while ! "$@" 2>/dev/null; do
		[ $i -ge 300 ] && return 1
		sleep 0.1
		i=$((i + 1))
	done
}
# Predicates for wait_for, evaluated at every poll (an argument such as
# "$(ctrl_of X)" would be expanded once, before the first).
has_ctrl() { test -n "$(ctrl_of "$1")"; }
has_blk() { test -n "$(blk_of "$1" "$2")"; }
blk_is_there() { test -b "/dev/$(blk_of "$1" "$2")"; }
ctrl_of() { ls "/sys/bus/pci/devices/$1/nvme" 2>/dev/null | head -1; }
# The block device of namespace NSID of kernel nvme controller CTRL.
blk_of() { for d in /sys/class/nvme/$1/$1n*; do [ -e "$d" ] && [ "$(cat "$d/nsid")" = "$2" ] && echo "${d##*/}"; done; }
expect_fail() { # expect_fail ERRNO-TEXT cmd...: fails, and says so with that text
	want=$1
	shift
	if out=$("$@" 2>&1); then echo "succeeded: $out"; return 1; fi
	echo "$out"
	echo "$out" | grep -q -- "$want"
}

ktap_plan 45

# ---- the PF with nvme.ko and an ext4 file system -------------------------------
pf_up() {
	modprobe nvme || return 1
	[ "$(driver_of "$PF")" = nvme ] || echo "$PF" >/sys/bus/pci/drivers/nvme/bind
	wait_for has_ctrl "$PF" || return 1
	PFC=$(ctrl_of "$PF")
	wait_for blk_is_there "$PFC" 1 || return 1
	PFB=$(blk_of "$PFC" 1)
	echo "$PF: $PFC, namespace 1 is /dev/$PFB; $(ls /sys/class/nvme/"$PFC" | grep -c "^${PFC}n") namespace(s)"
	[ "$(driver_of "$PF")" = nvme ]
}
ktap_check "PF $PF bound to nvme, namespace 1 as a block device" pf_up
PFC=$(ctrl_of "$PF")
PFB=$(blk_of "$PFC" 1)
ktap_check "PF sees only its namespace 1 (namespace 2 is detached)" test -z "$(blk_of "$PFC" 2)"

mkfs_mount() {
	"$MKFS" -q -F -t ext4 "/dev/$PFB" && mount -t ext4 "/dev/$PFB" "$MNT" || return 1
	gpunvme pattern --pattern 7 --start-block 0 --block-count 2048 >"$MNT/pattern7.bin" &&
		gpunvme pattern --pattern 8 --start-block 5 --block-count 333 --block-size 4096 >"$MNT/pattern8.bin" &&
		echo "the PF's file system, written before SR-IOV" >"$MNT/note.txt" &&
		mkdir -p "$MNT/dir" && dd if=/dev/urandom of="$MNT/dir/random.bin" bs=4096 count=300 2>/dev/null &&
		sync || return 1
	(cd "$MNT" && sha256sum pattern7.bin pattern8.bin note.txt dir/random.bin) >"$SUMS"
	cat "$SUMS"
}
ktap_check "mkfs.ext4 on the PF's namespace 1, mounted, files written" mkfs_mount

# The PF's files, read from the disk (the page cache dropped), byte for byte.
pf_files_intact() {
	grep -q " $MNT ext4 " /proc/mounts || { echo "$MNT is not mounted"; return 1; }
	sync
	echo 3 >/proc/sys/vm/drop_caches
	(cd "$MNT" && sha256sum -c "$SUMS") || return 1
	gpunvme pattern --pattern 7 --start-block 0 --block-count 2048 >"$T/p7" && cmp "$T/p7" "$MNT/pattern7.bin" || return 1
	gpunvme pattern --pattern 8 --start-block 5 --block-count 333 --block-size 4096 >"$T/p8" && cmp "$T/p8" "$MNT/pattern8.bin"
}

# ---- gpunvme sriov: refusals and --print change nothing --------------------------
ktap_check "sriov on a controller without SR-IOV: EOPNOTSUPP" \
	expect_fail "errno 95" gpunvme sriov "$KERNEL_NVME_BDF"
ktap_check "sriov --flex-queues beyond the flexible resources: ENOSPC" \
	expect_fail "errno 28" gpunvme sriov "$PF" --vfs 1 --flex-queues 50
print_plan() {
	out=$(gpunvme sriov "/dev/$PFC" --vfs 1 --namespace-id 2 --print) || return 1
	echo "$out"
	echo "$out" | grep -q "^nvme virt-mgmt /dev/$PFC --cntlid=[0-9]* --rt=0 --act=1 --nr=0$" &&
		echo "$out" | grep -q "^nvme virt-mgmt /dev/$PFC --cntlid=[0-9]* --rt=0 --act=8 --nr=4$" &&
		echo "$out" | grep -q "^nvme virt-mgmt /dev/$PFC --cntlid=[0-9]* --act=9$" &&
		echo "$out" | grep -q "^nvme attach-ns /dev/$PFC --namespace-id=2 --controllers=[0-9]*$" &&
		echo "$out" | grep -q "^gpunvme bind ${PF%.0}.1$"
}
ktap_check "sriov --print prints the nvme-cli commands" print_plan
ktap_check "... and changes nothing (sriov_numvfs 0)" test "$(cat "$PFDIR/sriov_numvfs")" = 0
# util-linux setpriv (busybox's cannot change the uid), brought by --file.
if [ -x "$DIR/setpriv" ]; then
	nobody() { "$DIR/setpriv" --reuid=65534 --regid=65534 --clear-groups "$@"; }
	ktap_check "sriov as an unprivileged user: EPERM" expect_fail "errno 1:" nobody gpunvme sriov "$PF" --vfs 1
	print_unpriv() {
		out=$(nobody gpunvme sriov "$PF" --print) || return 1
		echo "$out"
		echo "$out" | grep -q -- "--cntlid=<SCID of VF 1> --act=9"
	}
	ktap_check "sriov --print as an unprivileged user: the commands, with placeholders" print_unpriv
else
	ktap_ok "sriov as an unprivileged user: EPERM # SKIP no util-linux setpriv in $DIR"
	ktap_ok "sriov --print as an unprivileged user # SKIP no util-linux setpriv in $DIR"
fi

# ---- the VF ------------------------------------------------------------------------
enable_json() { gpunvme sriov "$PF" --vfs 1 --namespace-id 2 -o json > "$T.json"; }
ktap_check "sriov --vfs 1 --namespace-id 2 -o json: VF enabled, resources assigned, online, namespace 2 attached" enable_json
VF=$(readlink "$PFDIR/virtfn0" 2>/dev/null)
VF=${VF##*/}
report_names_vf() {
	grep -q '"action": "enable"' "$T.json" && grep -q "\"bdf\": \"$VF\"" "$T.json" &&
		grep -q '"namespace": 2' "$T.json" && grep -q "\"bdf\": \"$PF\"" "$T.json" || { cat "$T.json"; return 1; }
}
ktap_check "... its JSON report (stdout) names the PF, VF $VF and namespace 2" report_names_vf
ktap_check "VF $VF exists, no driver probed it" test -n "$VF" -a -z "$(driver_of "$VF")"
ktap_check "PF still with nvme, file system still mounted" test "$(driver_of "$PF")" = nvme
ktap_check "PF files intact after the VF setup" pf_files_intact
ktap_check "sriov again while the VFs are enabled: EBUSY" expect_fail "errno 16" gpunvme sriov "$PF" --vfs 1

[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko"
ktap_check "gpunvme bind VF" gpunvme bind "$VF"
vf_namespaces() {
	info=$(gpunvme info "$VF") || return 1
	echo "$info"
	echo "$info" | grep -q '^ *namespace 2  *131072 blocks of 512 bytes' &&
		! echo "$info" | grep -q '^ *namespace 1 '
}
ktap_check "the VF's controller has namespace 2 only" vf_namespaces

# The PF's file system keeps being written while gpunvme works on the VF.
(gpunvme pattern --pattern 9 --start-block 0 --block-count 4096 >"$MNT/during.bin" && sync) &
bg=$!
ktap_check "VF shared queue pair: write ns 2 first blocks" \
	gpunvme write "$VF" --namespace-id 2 --start-block 0 --block-count 256 --pattern 41
ktap_check "VF shared queue pair: write ns 2 last blocks (1 block per command)" \
	gpunvme write "$VF" --namespace-id 2 --start-block $((131072 - 64)) --block-count 64 --max-cmd-blocks 1 --pattern 42
ktap_check "VF raw queue pair (owner): write ns 2 middle" \
	gpunvme write "$VF" --owner --namespace-id 2 --start-block 4096 --block-count 512 --pattern 43
wait $bg
ktap_check "VF: verify first blocks" gpunvme verify "$VF" --namespace-id 2 --start-block 0 --block-count 256 --pattern 41
ktap_check "VF: verify last blocks" gpunvme verify "$VF" --namespace-id 2 --start-block $((131072 - 64)) --block-count 64 --pattern 42
ktap_check "VF (owner): verify middle" gpunvme verify "$VF" --owner --namespace-id 2 --start-block 4096 --block-count 512 --pattern 43
ktap_check "VF: a wrong pattern does not verify" expect_fail mismatch \
	gpunvme verify "$VF" --namespace-id 2 --start-block 0 --block-count 8 --pattern 40
no_ns1() {
	test -n "$VF" && [ "$(driver_of "$VF")" = gpunvme ] &&
		expect_fail "" gpunvme read "$VF" --namespace-id 1 --start-block 0 --block-count 1 --no-range-check --data "$T/ns1"
}
ktap_check "VF's controller reports namespace 2 alone active; namespace 1 refused" no_ns1
during_ok() {
	grep -q " $MNT ext4 " /proc/mounts && gpunvme pattern --pattern 9 --start-block 0 --block-count 4096 >"$T/p9" && cmp "$T/p9" "$MNT/during.bin"
}
ktap_check "PF files intact after the VF I/O" pf_files_intact
ktap_check "PF file written during the VF I/O intact" during_ok
ktap_check "sriov --vfs 0 while gpunvme holds the VF: EBUSY" expect_fail "errno 16" gpunvme sriov "$PF" --vfs 0

# ---- hand the VF back ------------------------------------------------------------------
ktap_check "gpunvme unbind VF --to-nvme" gpunvme unbind "$VF" --to-nvme
vf_nvme_reads() {
	wait_for has_ctrl "$VF" || return 1
	c=$(ctrl_of "$VF")
	wait_for has_blk "$c" 2 || return 1
	b=$(blk_of "$c" 2)
	wait_for test -b "/dev/$b" || return 1
	echo "VF: $c, namespace 2 is /dev/$b"
	dd if="/dev/$b" of="$T/vf0" bs=512 count=256 iflag=direct 2>/dev/null &&
		gpunvme pattern --pattern 41 --start-block 0 --block-count 256 >"$T/p41" && cmp "$T/p41" "$T/vf0" &&
		dd if="/dev/$b" of="$T/vf1" bs=512 skip=4096 count=512 iflag=direct 2>/dev/null &&
		gpunvme pattern --pattern 43 --start-block 4096 --block-count 512 >"$T/p43" && cmp "$T/p43" "$T/vf1"
}
ktap_check "nvme.ko on the VF reads gpunvme's patterns from namespace 2" vf_nvme_reads
vf_release() {
	echo "$VF" >/sys/bus/pci/drivers/nvme/unbind && echo >"/sys/bus/pci/devices/$VF/driver_override" &&
		test -z "$(driver_of "$VF")"
}
ktap_check "VF unbound from nvme" vf_release
reclaim() {
	out=$(gpunvme sriov "$PF" --vfs 0 --namespace-id 2 --reclaim) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "reset (FLR).*the primary holds 4 flexible queues and 2 interrupts"
}
ktap_check "sriov --vfs 0 --reclaim: namespace 2 detached, VF offline, VFs disabled, resources back (PF reset)" reclaim
ktap_check "VF gone, sriov_numvfs 0" test ! -e "/sys/bus/pci/devices/$VF" -a "$(cat "$PFDIR/sriov_numvfs")" = 0
ktap_check "PF files intact after the VFs are disabled and the PF reset" pf_files_intact
ktap_check "PF still sees only namespace 1" test -z "$(blk_of "$PFC" 2)" -a -n "$(blk_of "$PFC" 1)"

# ---- again, now the primary must give up resources: a PF reset under the mount ----
round2() {
	out=$(gpunvme sriov "$PF" --vfs 1 --flex-queues 2 --flex-interrupts 1 --namespace-id 2) || { echo "$out"; return 1; }
	echo "$out"
	echo "$out" | grep -q "reset (FLR).*the primary holds 2 flexible queues and 1 interrupts" &&
		echo "$out" | grep -q "online with 2 queues (1 I/O queue pairs) and 1 interrupts"
}
ktap_check "sriov --flex-queues 2 --flex-interrupts 1: primary shrunk by a PF reset, VF online" round2
ktap_check "PF files intact after that PF reset" pf_files_intact
ktap_check "PF still with nvme, mounted" test "$(driver_of "$PF")" = nvme
vf_again() {
	gpunvme bind "$VF" || return 1
	info=$(gpunvme info "$VF") && echo "$info" | grep -q '^ *I/O queue pairs *1$' &&
		echo "$info" | grep -q '^ *namespace 2 ' && ! echo "$info" | grep -q '^ *namespace 1 '
}
ktap_check "VF bound to gpunvme again: 1 I/O queue pair, namespace 2 only" vf_again
ktap_check "VF: namespace 2 kept gpunvme's first blocks" gpunvme verify "$VF" --namespace-id 2 --start-block 0 --block-count 256 --pattern 41
ktap_check "VF: write + verify with one I/O queue pair" sh -c \
	"gpunvme write $VF --namespace-id 2 --start-block 8192 --block-count 1024 --pattern 44 && gpunvme verify $VF --namespace-id 2 --start-block 8192 --block-count 1024 --pattern 44"
ktap_check "gpunvme unbind VF (left without a driver)" sh -c "gpunvme unbind $VF && test ! -e /sys/bus/pci/devices/$VF/driver"
ktap_check "sriov --vfs 0 again" gpunvme sriov "$PF" --vfs 0 --namespace-id 2
ktap_check "PF files intact at the end, still mounted" pf_files_intact
remount_fsck() {
	umount "$MNT" || return 1
	"$FSCK" -f -n "/dev/$PFB" || return 1
	mount -t ext4 "/dev/$PFB" "$MNT"
}
ktap_check "PF file system unmounts, fsck finds it clean, mounts again" remount_fsck
ktap_check "PF files intact after the remount" pf_files_intact
umount "$MNT" 2>/dev/null
rmmod gpunvme 2>/dev/null
ktap_done
