#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The userspace passthrough back end (userspace/gpunvme/src/passthrough) on
# namespaces the kernel drives: no gpunvme module is loaded. Roles (the
# PT_ROLES list in /opt/gpunvme/passthrough.env; default "local loopback"):
#
#  local     the namespace of the controller nvme.ko drives ($KERNEL_NVME_BDF,
#            nvme.ko loaded with poll_queues=2) gets an MBR: p1 (16 MiB) is
#            the passthrough window, p2 (the rest) an ext4 file system,
#            mounted, with files of known content. Then: the mounted p2, the
#            whole namespace and an LBA window reaching into p2 are refused
#            (the message names the mount); `gpunvme bind` of the controller
#            is refused; the CLI writes and verifies a pattern through p1
#            and p1's own block device holds it at its LBA 0 (dd, every
#            byte); writes and reads past p1's end are refused with LBA Out
#            of Range (they would land on p2's superblock); hostrun (the
#            device library with threads as lanes: group API, per-thread
#            API, the example kernels, PRP lists, rejected SQEs) runs on p1
#            through the back end, every byte checked; bench measures the
#            back end beside the kernel's own io_uring on p1 (and fio's
#            io_uring_cmd engine when $DIR/fio exists); last p2 is unmounted,
#            e2fsck -fn is clean and every file is intact.
#  loopback  NVMe over TCP inside this VM: nvmet (configfs) exports the
#            kernel controller's namespace 2 on 127.0.0.1:4420, the host
#            connects by writing to /dev/nvme-fabrics (no nvme-cli), and the
#            same checks run on the fabrics namespace (bind aside: no PCI
#            device); then, with a bench running, the target's port loses
#            the subsystem: the CLI ends with an error (a path error or an
#            aborted command, or the library's deadline), not a hang; the
#            subsystem comes back, the controller reconnects and the pattern
#            written before verifies; last it is disconnected.
#  target    two VMs (tests/vm/fabrics2.sh): serve the kernel controller's
#            namespace 1 over nvmet-tcp on $PT_TARGET_ADDR (port 1) and, with
#            PT_RDMA=1, over nvmet-rdma on a Soft-RoCE device (rdma_rxe on
#            eth0, port 2), take "stop N", "start N" (port N) and "done"
#            from the host VM on a control port (busybox nc), stop when
#            told or at the deadline.
#  host      two VMs: connect to $PT_TARGET_ADDR over TCP and run the
#            loopback role's checks, the outage asked of the target over
#            the control port; with PT_RDMA=1 the same again over NVMe/RDMA
#            (rxe0 on eth0 here too), then "done".
#
# Needs in $DIR (run.sh --file): gpunvme (the CLI), gpunvme_hostrun_pt,
# mke2fs and e2fsck (e2fsprogs': busybox's mke2fs makes only ext2),
# gpunvme.ko for the local role's bind check (loaded for it alone),
# iproute2's rdma for PT_RDMA=1 (Soft-RoCE devices are made over netlink),
# and optionally fio.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
PATH=$DIR:$PATH
[ -f /etc/gpunvme-vm.env ] && . /etc/gpunvme-vm.env
[ -f "$DIR/passthrough.env" ] && . "$DIR/passthrough.env"
ROLES=${PT_ROLES:-local loopback}
KBDF=${KERNEL_NVME_BDF:-0000:00:05.0}
MKFS=$DIR/mke2fs
FSCK=$DIR/e2fsck
HOSTRUN=$DIR/gpunvme_hostrun_pt
NQN=nqn.2026-12.io.gpunvme:passthrough
CFS=/sys/kernel/config/nvmet
CTL_PORT=${PT_CTL_PORT:-5555}
T=/tmp/pt
mkdir -p "$T"

# Window: p1 = 32768 sectors (16 MiB) from sector 2048; p2 (ext4) after it.
P1_START=2048
P1_SECTORS=32768
P2_START=$((P1_START + P1_SECTORS))

# wait_for SECONDS CMD...: poll every 0.2 s.
wait_for() {
	local n=$(($1 * 5))
	shift
	while ! "$@" 2>/dev/null; do
		n=$((n - 1))
		[ $n -gt 0 ] || return 1
		sleep 0.2
	done
}
# Predicates for wait_for: each poll evaluates them again (an argument
# like "$(cat state)" would be expanded once, before the first poll).
state_is() { test "$(cat "/sys/class/nvme/$1/state" 2>/dev/null)" = "$2"; }
has_ns() { test -n "$(ns_of "$1" "$2")"; }
has_nvme_child() { test -n "$(ls "/sys/bus/pci/devices/$1/nvme" 2>/dev/null)"; }
driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }
# expect_fail TEXT CMD...: fails, and its message says TEXT.
expect_fail() {
	local want=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "succeeded: $out"
		return 1
	fi
	echo "$out"
	echo "$out" | grep -q -- "$want" || { echo "the message lacks: $want"; return 1; }
}
# The block device (multipath head if any) of namespace NSID reached
# through kernel controller CTRL, as `gpunvme list --namespaces` sees it.
ns_of() {
	gpunvme list --namespaces 2>/dev/null |
		sed -n "s/^  \(nvme[0-9]*n[0-9]*\) (.*nsid $2): .* via \(.*, \)\{0,1\}$1 .*/\1/p" | head -1
}
le32() { for s in 0 8 16 24; do printf '\\%03o' $((($1 >> s) & 255)); done; }
mbr_entry() { printf '%s' "\\000\\000\\000\\000\\$(printf %03o "$1")\\000\\000\\000$(le32 "$2")$(le32 "$3")"; }

# ---- one disk: partitions, ext4, the window, refusals, I/O, hostrun, bench --
# disk_suite TAG NS PCI: NS is the namespace's block device (nvme0n1); PCI
# 1 when its controller is a PCI device (bind is checked then), else TAG is
# the fabrics transport (tcp, rdma). 11 results.
disk_suite() {
	TAG=$1 NS=$2 PCI=$3
	NG=/dev/ng${NS#nvme}
	MNT=/mnt/pt-$TAG
	SUMS=$T/$TAG.sha256
	mkdir -p "$MNT"

	partition() {
		local size p2
		size=$(cat "/sys/block/$NS/size") || return 1
		p2=$((size - P2_START - 8))
		[ "$p2" -ge 16384 ] || { echo "$NS: $size sectors, too small"; return 1; }
		dd if=/dev/zero of="/dev/$NS" bs=512 count=4096 2>/dev/null || return 1
		printf "$(mbr_entry 131 $P1_START $P1_SECTORS)$(mbr_entry 131 $P2_START "$p2")" |
			dd of="/dev/$NS" bs=1 seek=446 conv=notrunc 2>/dev/null || return 1
		printf '\125\252' | dd of="/dev/$NS" bs=1 seek=510 conv=notrunc 2>/dev/null || return 1
		sync
		# Those writes went through the disk's page cache; passthrough
		# bypasses it: no stale page of it may be read (or written) later.
		echo 3 >/proc/sys/vm/drop_caches
		blockdev --rereadpt "/dev/$NS" || return 1
		wait_for 10 test -b "/dev/${NS}p1" -a -b "/dev/${NS}p2" || { ls "/sys/block/$NS"; return 1; }
		echo "$NS: p1 sectors $P1_START+$P1_SECTORS (the window), p2 $P2_START+$p2 (ext4); $NG"
		test -c "$NG" || { echo "no $NG"; return 1; }
	}
	ktap_check "$TAG: $NS gets p1 (16 MiB, the window) and p2 (ext4)" partition

	ext4() {
		"$MKFS" -q -F -t ext4 "/dev/${NS}p2" && mount -t ext4 "/dev/${NS}p2" "$MNT" || return 1
		dd if=/dev/urandom of="$MNT/random.bin" bs=4096 count=256 2>/dev/null &&
			gpunvme pattern -p 5 -s 0 -c 2048 >"$MNT/pattern5.bin" &&
			echo "written before the passthrough tests" >"$MNT/note.txt" && sync || return 1
		(cd "$MNT" && sha256sum random.bin pattern5.bin note.txt) >"$SUMS"
		cat "$SUMS"
	}
	ktap_check "$TAG: ext4 on p2, mounted, files written" ext4

	ktap_check "$TAG: the mounted p2 is refused as a window, the mount named" \
		expect_fail "mounted on $MNT" gpunvme read "/dev/${NS}p2" -s 0 -c 1
	refused_wider() {
		expect_fail "mounted on $MNT" gpunvme read "$NG" -s 0 -c 1 || return 1
		expect_fail "mounted on $MNT" gpunvme read "$NG" --lba-window "$P1_START:$((P1_SECTORS + 8))" -s 0 -c 1
	}
	ktap_check "$TAG: the whole namespace, and an LBA window reaching into p2, are refused" refused_wider
	if [ "$PCI" = 1 ]; then
		# bind needs the module loaded: for this check only, then gone.
		bind_refused() {
			local rc
			[ -f "$DIR/gpunvme.ko" ] || { echo "no $DIR/gpunvme.ko"; return 1; }
			insmod "$DIR/gpunvme.ko" || return 1
			expect_fail "nothing was unbound" gpunvme bind "$KBDF"
			rc=$?
			rmmod gpunvme || rc=1
			[ "$(driver_of "$KBDF")" = nvme ] || { echo "$KBDF left nvme"; rc=1; }
			return $rc
		}
		ktap_check "$TAG: gpunvme bind of the controller is refused while p2 is mounted" bind_refused
	else
		fabrics_seen() {
			gpunvme list --namespaces | grep -A1 "^  $NS " | tee /dev/stderr | grep -q " $TAG "
		}
		ktap_check "$TAG: gpunvme list shows $NS reached over nvme-$TAG" fabrics_seen
	fi

	write_verify() {
		gpunvme write "$NG" --partition "/dev/${NS}p1" -s 0 -c 8192 -p 11 || return 1
		gpunvme verify "/dev/${NS}p1" -s 0 -c 8192 -p 11 || return 1
		gpunvme verify "/dev/${NS}p1" -s 100 -c 8 -p 11 -o json >"$T/v.json" || return 1
		cat "$T/v.json"
		grep -q '"backend": "passthrough"' "$T/v.json" && grep -q "\"window\": \"${NS}p1\"" "$T/v.json" &&
			grep -q '"window_start_lba": 2048' "$T/v.json" && grep -q '"relay": "threads"' "$T/v.json" || return 1
		# The same blocks with the relay run by the CLI's own thread.
		gpunvme verify "/dev/${NS}p1" -s 0 -c 8192 -p 11 --relay-inline -o json >"$T/vi.json" || return 1
		grep -q '"relay": "inline"' "$T/vi.json"
	}
	ktap_check "$TAG: the CLI writes 4 MiB through p1 and verifies them, with relay threads and inline (-o json names the window and the relay)" write_verify
	on_disk() {
		# The kernel's own view of p1: its LBA 0 is the window's LBA 0.
		# 64 KiB reads: over Soft-RoCE under TCG 8192 reads of 512 bytes took 6 minutes.
		dd if="/dev/${NS}p1" of="$T/p1.bin" bs=65536 count=64 iflag=direct 2>/dev/null ||
			dd if="/dev/${NS}p1" of="$T/p1.bin" bs=65536 count=64 2>/dev/null || return 1
		gpunvme pattern -p 11 -s 0 -c 8192 >"$T/want.bin" || return 1
		cmp "$T/p1.bin" "$T/want.bin" && echo "4 MiB byte-exact at p1's LBA 0 (sector $P1_START of $NS)"
	}
	ktap_check "$TAG: p1's block device holds the pattern at its own LBA 0, every byte" on_disk

	outside() {
		expect_fail "LBA Out of Range" gpunvme write "/dev/${NS}p1" -s "$P1_SECTORS" -c 8 -p 99 --no-range-check || return 1
		expect_fail "LBA Out of Range" gpunvme read "$NG" --partition "/dev/${NS}p1" \
			-s $((P1_SECTORS - 8)) -c 16 --no-range-check --data /dev/null
	}
	ktap_check "$TAG: a write past p1's end (p2's superblock) and a read across it are refused" outside

	hostrun() {
		[ -x "$HOSTRUN" ] || { echo "no $HOSTRUN"; return 1; }
		GPUNVME_PT_DEVICE=$NG GPUNVME_PT_OPTIONS="partition=/dev/${NS}p1${PT_HOSTRUN_OPTS:+,$PT_HOSTRUN_OPTS}" \
			GPUNVME_HOSTRUN_ONLY=${PT_HOSTRUN_ONLY:-} "$HOSTRUN" >"$T/hostrun-$TAG.log" 2>&1
		local rc=$?
		cat "$T/hostrun-$TAG.log"
		[ $rc = 0 ] && grep -Eq '^[0-9]+ passed, 0 failed' "$T/hostrun-$TAG.log" &&
			! grep -q '^not ok' "$T/hostrun-$TAG.log"
	}
	ktap_check "$TAG: hostrun (the device library, threads as lanes) through the back end on p1" hostrun

	bench() {
		local fio=""
		[ -x "$DIR/fio" ] && fio="--fio $DIR/fio"
		# shellcheck disable=SC2086 # $fio is one option and its value, or nothing
		gpunvme bench "$NG" --partition "/dev/${NS}p1" --qd 1,32 --qpairs 1 --runtime 300ms \
			$fio -o json >"$T/bench-$TAG.json" 2>"$T/bench-$TAG.err" || { cat "$T/bench-$TAG.err"; cat "$T/bench-$TAG.json"; return 1; }
		grep -E '"target"|"iops"|_over_|_latency_|skipped' "$T/bench-$TAG.json"
		grep -q '"target": "passthrough"' "$T/bench-$TAG.json" &&
			grep -q '"target": "kernel-irq"' "$T/bench-$TAG.json" &&
			grep -q '"target": "kernel-poll"' "$T/bench-$TAG.json" &&
			grep -q '"ratios_kernel_irq"' "$T/bench-$TAG.json" || return 1
		# fio packed: its cells ran (a skip here once hid a kernel without
		# SysV IPC, where fio exits at start).
		if [ -n "$fio" ] && grep -q '"skipped": "fio' "$T/bench-$TAG.json"; then
			echo "fio's cells were skipped"
			return 1
		fi
		# The relay run by the bench's own threads (--relay-inline).
		gpunvme bench "$NG" --partition "/dev/${NS}p1" --qd 1,32 --qpairs 1 --runtime 300ms \
			--relay-inline --kernel-mode poll -o json >"$T/bench-inline-$TAG.json" 2>"$T/bench-inline-$TAG.err" ||
			{ cat "$T/bench-inline-$TAG.err"; return 1; }
		grep -E '"iops"|_over_' "$T/bench-inline-$TAG.json"
		grep -q 'run inline by the worker threads' "$T/bench-inline-$TAG.json" &&
			grep -q '"target": "kernel-poll"\|"target": "kernel-irq"' "$T/bench-inline-$TAG.json" || return 1
		# Polled only over PCIe: nvme-tcp's poll path is not safe for
		# either side, the other fabrics are not tested polled (the
		# connection has a poll queue all the same).
		if [ "$PCI" != 1 ]; then
			grep -q "reached over $TAG: only PCIe controllers are polled" "$T/bench-$TAG.json" &&
				grep -q '"polled": false\|completions by interrupt' "$T/bench-$TAG.json" "$T/bench-$TAG.err"
		fi
	}
	ktap_check "$TAG: bench: the back end beside the kernel's io_uring (irq; poll on PCIe) and fio on p1, in one run; again with the relay inline" bench

	fsck_clean() {
		sync
		umount "$MNT" || return 1
		"$FSCK" -fn "/dev/${NS}p2" || return 1
		mount -o ro -t ext4 "/dev/${NS}p2" "$MNT" || return 1
		echo 3 >/proc/sys/vm/drop_caches
		(cd "$MNT" && sha256sum -c "$SUMS")
		local rc=$?
		umount "$MNT"
		return $rc
	}
	ktap_check "$TAG: p2 unmounted: e2fsck -fn clean, every file intact" fsck_clean
}

# ---- NVMe over Fabrics: nvmet over TCP (configfs), the host without nvme-cli --
# target_port ID TRTYPE ADDR: the subsystem on port ID, TRTYPE ADDR:4420.
target_port() {
	modprobe "nvmet-$2" || return 1
	P=$CFS/ports/$1
	mkdir "$P" && echo "$2" >"$P/addr_trtype" && echo ipv4 >"$P/addr_adrfam" &&
		echo "$3" >"$P/addr_traddr" && echo 4420 >"$P/addr_trsvcid" || return 1
	ln -s "$CFS/subsystems/$NQN" "$P/subsystems/$NQN" || return 1
	echo "nvmet: $NQN on $2 $3:4420 (port $1)"
}
target_up() { # target_up ADDR BACKING_BLOCK_DEVICE: the subsystem, on tcp (port 1)
	modprobe nvmet || return 1
	grep -q " /sys/kernel/config " /proc/mounts || mount -t configfs none /sys/kernel/config || return 1
	S=$CFS/subsystems/$NQN
	mkdir "$S" && echo 1 >"$S/attr_allow_any_host" || return 1
	mkdir "$S/namespaces/1" && printf '%s' "/dev/$2" >"$S/namespaces/1/device_path" &&
		echo 1 >"$S/namespaces/1/enable" || return 1
	echo "nvmet: $NQN, namespace 1 = /dev/$2"
	target_port 1 tcp "$1"
}
# target_stop [ID], target_start [ID]: the subsystem off and on port ID (1).
target_stop() { rm "$CFS/ports/${1:-1}/subsystems/$NQN"; }
target_start() { ln -s "$CFS/subsystems/$NQN" "$CFS/ports/${1:-1}/subsystems/$NQN"; }
target_down() {
	for P in "$CFS"/ports/*; do
		[ -d "$P" ] || continue
		rm -f "$P/subsystems/$NQN" 2>/dev/null
		rmdir "$P" 2>/dev/null
	done
	echo 0 >"$CFS/subsystems/$NQN/namespaces/1/enable" 2>/dev/null
	rmdir "$CFS/subsystems/$NQN/namespaces/1" "$CFS/subsystems/$NQN" 2>/dev/null
	return 0
}

# rxe_up NETDEV: a Soft-RoCE device, rxe0, on NETDEV (up, with its address).
rxe_up() {
	modprobe rdma_rxe || return 1
	[ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev "$1" || return 1
	wait_for 10 test -e /sys/class/infiniband/rxe0/ports/1/state ||
		{ echo "no rxe0 port 10 s after rdma link add"; return 1; }
	rdma link show
	grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state ||
		{ echo "rxe0 port 1: $(cat /sys/class/infiniband/rxe0/ports/1/state)"; return 1; }
}

connect() { # connect ADDR [TRANSPORT]: sets FC (nvmeN) and FNS (its namespace's block device)
	local tr=${2:-tcp} ans
	modprobe "nvme-$tr" || return 1
	[ -c /dev/nvme-fabrics ] || { echo "no /dev/nvme-fabrics"; return 1; }
	exec 5<>/dev/nvme-fabrics || return 1
	printf 'transport=%s,traddr=%s,trsvcid=4420,nqn=%s,nr_poll_queues=1,ctrl_loss_tmo=60,reconnect_delay=1\n' \
		"$tr" "$1" "$NQN" >&5 || { exec 5>&-; echo "connect refused (see dmesg)"; return 1; }
	read -r ans <&5
	exec 5>&-
	echo "/dev/nvme-fabrics: $ans"
	FC=nvme$(echo "$ans" | sed -n 's/.*instance=\([0-9]*\).*/\1/p')
	[ "$FC" != nvme ] || return 1
	wait_for 30 state_is "$FC" live ||
		{ echo "$FC: state $(cat /sys/class/nvme/$FC/state) after 30 s"; return 1; }
	wait_for 60 has_ns "$FC" 1 ||
		{ echo "no namespace 1 of $FC in 60 s:"; gpunvme list --namespaces; ls /sys/class/nvme/$FC; return 1; }
	FNS=$(ns_of "$FC" 1)
	wait_for 10 test -b "/dev/$FNS" -a -c "/dev/ng${FNS#nvme}" ||
		{ echo "no /dev/$FNS or /dev/ng${FNS#nvme} in 10 s"; ls -l /dev/nvme* /dev/ng*; return 1; }
	echo "$FC ($(cat /sys/class/nvme/$FC/transport) $(cat /sys/class/nvme/$FC/address)) is live: /dev/$FNS, /dev/ng${FNS#nvme}"
}
disconnect() { echo 1 >"/sys/class/nvme/$FC/delete_controller"; }

# outage STOP START [TAG]: a bench through the fabrics window, the target
# stopped under it (STOP), the error checked, the target back (START),
# reconnected, the earlier pattern verified. 2 results.
outage() {
	local tag=${3:-fabrics}
	stopped_run() {
		gpunvme bench "/dev/ng${FNS#nvme}" --partition "/dev/${FNS}p1" --qd 8 --qpairs 1 \
			--runtime 60s >"$T/outage.log" 2>&1 &
		local pid=$! n=0 rc
		sleep 3
		kill -0 $pid 2>/dev/null || { cat "$T/outage.log"; echo "the bench ended before the outage"; return 1; }
		$1 || { kill $pid; echo "could not stop the target"; return 1; }
		echo "target stopped under the bench; $FC is $(cat /sys/class/nvme/$FC/state)"
		# The library's deadline is 5 s per wait: 45 s is a hang.
		while kill -0 $pid 2>/dev/null && [ $n -lt 225 ]; do sleep 0.2; n=$((n + 1)); done
		if kill -0 $pid 2>/dev/null; then
			kill -KILL $pid
			cat "$T/outage.log"
			echo "the bench still ran 45 s after the target stopped: a hang"
			return 1
		fi
		wait $pid
		rc=$?
		cat "$T/outage.log"
		echo "bench exited $rc after $((n / 5)) s; $FC is $(cat /sys/class/nvme/$FC/state)"
		[ $rc = 1 ] && grep -Eq "Host Pathing Error|Command Aborted By Host|timeout after" "$T/outage.log"
	}
	ktap_check "$tag: the target stopped under a bench: the CLI ends with an error, not a hang" stopped_run "$1"
	back() {
		$1 || return 1
		wait_for 60 state_is "$FC" live || {
			echo "$FC is $(cat /sys/class/nvme/$FC/state) 60 s after the target came back"; return 1; }
		echo "$FC reconnected: $(cat /sys/class/nvme/$FC/state)"
		gpunvme verify "/dev/ng${FNS#nvme}" --partition "/dev/${FNS}p1" -s 0 -c 8192 -p 11
	}
	ktap_check "$tag: the target back: $FC reconnects and the pattern written before verifies" back "$2"
}

# ---- the roles ------------------------------------------------------------------
plan=0
for r in $ROLES; do
	case $r in
		local) plan=$((plan + 2 + 11)) ;;
		loopback) plan=$((plan + 2 + 11 + 2 + 1)) ;;
		target) plan=$((plan + 2 + ${PT_RDMA:-0})) ;;
		host) plan=$((plan + 1 + 11 + 2 + 1 + 1 + ${PT_RDMA:-0} * (1 + 11 + 2 + 1))) ;;
		*) echo "unknown role $r" >&2; exit 1 ;;
	esac
done
ktap_plan $plan

nvme_up() {
	if [ ! -d /sys/module/nvme ]; then
		modprobe nvme poll_queues=2 || return 1
	fi
	echo "nvme.ko poll_queues=$(cat /sys/module/nvme/parameters/poll_queues 2>/dev/null)"
	if [ "$(driver_of "$KBDF")" != nvme ]; then
		echo nvme >"/sys/bus/pci/devices/$KBDF/driver_override"
		echo "$KBDF" >/sys/bus/pci/drivers_probe
	fi
	wait_for 30 has_nvme_child "$KBDF" || return 1
	KC=$(ls "/sys/bus/pci/devices/$KBDF/nvme" | head -1)
	wait_for 30 has_ns "$KC" 1 || return 1
	KNS=$(ns_of "$KC" 1)
	echo "$KBDF is $KC; namespace 1 is $KNS; namespace 2 is $(ns_of "$KC" 2)"
	test -z "$(ls /sys/module/gpunvme 2>/dev/null)" || { echo "the gpunvme module is loaded"; return 1; }
}

for r in $ROLES; do
	case $r in
	local)
		ktap_check "local: nvme.ko (poll queues) drives $KBDF; no gpunvme module" nvme_up
		KC=$(ls "/sys/bus/pci/devices/$KBDF/nvme" 2>/dev/null | head -1)
		KNS=$(ns_of "$KC" 1)
		ktap_check "local: gpunvme list: $KNS usable through passthrough" \
			sh -c "gpunvme list --namespaces; gpunvme list --namespaces | grep -A1 '^  $KNS ' | grep -q 'whole namespace: usable'"
		disk_suite local "$KNS" 1
		;;
	loopback)
		[ -n "${KC:-}" ] || nvme_up >/dev/null 2>&1
		KC=$(ls "/sys/bus/pci/devices/$KBDF/nvme" 2>/dev/null | head -1)
		BACK=$(ns_of "$KC" 2)
		lo_up() { ifconfig lo 127.0.0.1 netmask 255.0.0.0 up && target_up 127.0.0.1 "$BACK"; }
		ktap_check "loopback: nvmet-tcp target on 127.0.0.1:4420 exports ${BACK:-namespace 2 (missing)}" lo_up
		ktap_check "loopback: connected through /dev/nvme-fabrics (no nvme-cli)" connect 127.0.0.1
		FC=${FC:-$(ls /sys/class/nvme | while read -r c; do [ "$(cat /sys/class/nvme/$c/transport)" = tcp ] && echo "$c"; done | head -1)}
		FNS=${FNS:-$(ns_of "$FC" 1)}
		disk_suite tcp "$FNS" 0
		outage target_stop target_start
		down() { disconnect && wait_for 30 test ! -e "/sys/class/nvme/$FC" && target_down; }
		ktap_check "loopback: disconnected; the target removed" down
		;;
	target)
		KC=$(ls "/sys/bus/pci/devices/$KBDF/nvme" 2>/dev/null | head -1)
		[ -n "$KC" ] || nvme_up >/dev/null 2>&1
		KC=$(ls "/sys/bus/pci/devices/$KBDF/nvme" 2>/dev/null | head -1)
		serve() {
			ifconfig eth0 "$PT_TARGET_ADDR" netmask 255.255.255.0 up || return 1
			target_up "$PT_TARGET_ADDR" "$(ns_of "$KC" 1)"
		}
		ktap_check "target: nvmet-tcp on $PT_TARGET_ADDR:4420 exports the kernel controller's namespace 1" serve
		if [ "${PT_RDMA:-0}" = 1 ]; then
			serve_rdma() { rxe_up eth0 && target_port 2 rdma "$PT_TARGET_ADDR"; }
			ktap_check "target: nvmet-rdma on Soft-RoCE (rxe0 on eth0), $PT_TARGET_ADDR:4420, the same subsystem" serve_rdma
		fi
		control() {
			# One line per connection: ping, stop N, start N (port N), done.
			cat >"$T/ctl.sh" <<EOF
#!/bin/sh
read -r cmd port
case \$port in 1|2) ;; *) port=1 ;; esac
case \$cmd in
ping) echo pong ;;
stop) rm "$CFS/ports/\$port/subsystems/$NQN" && echo stopped ;;
start) ln -s "$CFS/subsystems/$NQN" "$CFS/ports/\$port/subsystems/$NQN" && echo started ;;
done) touch "$T/done"; echo bye ;;
esac
EOF
			chmod +x "$T/ctl.sh"
			nc -ll -p "$CTL_PORT" -e "$T/ctl.sh" &
			local nc=$!
			echo "control port $CTL_PORT (pid $nc); waiting for the host's done"
			wait_for "${PT_TARGET_DEADLINE:-900}" test -e "$T/done"
			local rc=$?
			kill $nc 2>/dev/null
			target_down
			[ $rc = 0 ] || echo "no done from the host within ${PT_TARGET_DEADLINE:-900} s"
			return $rc
		}
		ktap_check "target: served the host until it said done" control
		;;
	host)
		ctl() { echo "$1" | nc -w 5 "$PT_TARGET_ADDR" "$CTL_PORT"; }
		reach() {
			ifconfig eth0 "$PT_HOST_ADDR" netmask 255.255.255.0 up || return 1
			wait_for 300 sh -c "echo ping | nc -w 2 $PT_TARGET_ADDR $CTL_PORT | grep -q pong" ||
				{ echo "the target VM never answered on $PT_TARGET_ADDR:$CTL_PORT"; return 1; }
			connect "$PT_TARGET_ADDR"
		}
		ktap_check "host: the target VM reached; connected through /dev/nvme-fabrics (no nvme-cli)" reach
		FC=${FC:-$(ls /sys/class/nvme | while read -r c; do [ "$(cat /sys/class/nvme/$c/transport)" = tcp ] && echo "$c"; done | head -1)}
		FNS=${FNS:-$(ns_of "$FC" 1)}
		disk_suite tcp "$FNS" 0
		remote_stop() { ctl "stop $PORT" | grep -q stopped; }
		remote_start() { ctl "start $PORT" | grep -q started; }
		PORT=1
		outage remote_stop remote_start tcp
		gone() { disconnect && wait_for 30 test ! -e "/sys/class/nvme/$FC"; }
		ktap_check "host: $FC (tcp) disconnected" gone
		if [ "${PT_RDMA:-0}" = 1 ]; then
			FC= FNS=
			reach_rdma() { rxe_up eth0 && connect "$PT_TARGET_ADDR" rdma; }
			ktap_check "host: rxe0 on eth0; connected over NVMe/RDMA (Soft-RoCE) through /dev/nvme-fabrics" reach_rdma
			FC=${FC:-$(ls /sys/class/nvme | while read -r c; do [ "$(cat /sys/class/nvme/$c/transport)" = rdma ] && echo "$c"; done | head -1)}
			FNS=${FNS:-$(ns_of "$FC" 1)}
			disk_suite rdma "$FNS" 0
			PORT=2
			outage remote_stop remote_start rdma
			ktap_check "host: $FC (rdma) disconnected" gone
		fi
		ktap_check "host: the target told it is done" sh -c "echo done | nc -w 5 $PT_TARGET_ADDR $CTL_PORT | grep -q bye"
		;;
	esac
done
ktap_done
