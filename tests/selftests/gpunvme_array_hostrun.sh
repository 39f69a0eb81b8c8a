#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The device library's array (kernels/include/gpunvme/array.h) on real
# controllers: hostrun's array tests (the guide's array kernels, host
# threads as lanes), shared and raw pairs, over 1, 2 and 4 controllers.
# Run after gpunvme_ninth_controller_test.sh in the boot with nine
# controllers (it leaves eight bound to gpunvme): the first four bound
# controllers form the arrays, the fifth is hostrun's own (GPUNVME_BDF).
#  1. `gpunvme write` puts the CLI's pattern on the four at the array's
#     LBAs; hostrun checks every element against it (a cache of 8 frames,
#     far smaller than the arrays: eviction under load), 32 threads on one
#     page (one command), dirty write-back then read back, a controller
#     that stops answering (errors, bounded, the other goes on).
#  2. The blocks the write-back test wrote (both modes) are read back
#     through the kernel's nvme driver after unbind (dd against `gpunvme
#     pattern`); then the controllers go back to gpunvme.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
PATH=$DIR:$PATH
T=$(mktemp -d)
SEED=2501 LBA=8192 BLOCKS=1024
WB_SEED=2511 WB_LBA=12288 WB_BLOCKS=1024
TESTS=array_stripe_1_controller,array_stripe_2_controllers,array_stripe_4_controllers_chunk_2
TESTS=$TESTS,array_replicate_2_controllers,array_one_page_32_threads_one_command
TESTS=$TESTS,array_write_back_then_read_back,array_controller_stops_answering
HOSTRUN_RESULTS=14 # 7 tests, shared and raw

set -- $(ls -d /sys/bus/pci/drivers/gpunvme/0000:* 2>/dev/null | sed 's|.*/||')
if [ $# -lt 5 ] || [ ! -x "$DIR/gpunvme_hostrun" ]; then
	ktap_plan 1
	ktap_not_ok "array hostrun: needs five controllers bound to gpunvme ($# bound) and $DIR/gpunvme_hostrun"
	exit 1
fi
A1=$1 A2=$2 A3=$3 A4=$4 OWN=$5
ktap_plan $((1 + HOSTRUN_RESULTS + 1 + 4 + 1))

write_patterns() {
	for b in "$A1" "$A2" "$A3" "$A4"; do
		gpunvme write "$b" --pattern "$SEED" --start-block "$LBA" --block-count "$BLOCKS" || return 1
	done
}
ktap_check "the CLI's pattern $SEED at LBAs $LBA..$((LBA + BLOCKS)) of $A1 $A2 $A3 $A4" write_patterns

# hostrun's results become this test's (renumbered after ours).
GPUNVME_BDF=$OWN GPUNVME_ARRAY_BDFS=$A1,$A2,$A3,$A4 \
	GPUNVME_ARRAY_SEED=$SEED GPUNVME_ARRAY_LBA=$LBA GPUNVME_ARRAY_BLOCKS=$BLOCKS \
	GPUNVME_ARRAY_WB_SEED=$WB_SEED GPUNVME_ARRAY_WB_LBA=$WB_LBA GPUNVME_ARRAY_WB_BLOCKS=$WB_BLOCKS \
	GPUNVME_HOSTRUN_ONLY=$TESTS "$DIR/gpunvme_hostrun" > "$T/hostrun.log" 2>&1
rc=$?
got=0
while IFS= read -r line; do
	case $line in
	"ok "*) got=$((got + 1)); ktap_ok "${line#ok * }" ;;
	"not ok "*) got=$((got + 1)); ktap_not_ok "${line#not ok * }" ;;
	"#"*) echo "$line" ;;
	*) echo "# $line" ;;
	esac
done < "$T/hostrun.log"
while [ $got -lt $HOSTRUN_RESULTS ]; do
	got=$((got + 1))
	ktap_not_ok "hostrun result $got missing (exit status $rc)"
done

LBA_SIZE=$(gpunvme info "$A1" -o json | sed -n 's/.*"lba_size": *\([0-9]*\).*/\1/p' | head -1)
bdev_of() { gpunvme list | grep "^$1" | sed -n 's/.*: \(nvme[0-9]*n1\).*/\1/p'; }
to_nvme() {
	modprobe nvme poll_queues=1 2>/dev/null
	for b in "$A1" "$A2"; do
		gpunvme unbind --to-nvme "$b" || return 1
	done
	i=0
	while [ $i -lt 100 ]; do
		d1=$(bdev_of "$A1") d2=$(bdev_of "$A2")
		[ -n "$d1" ] && [ -b "/dev/$d1" ] && [ -n "$d2" ] && [ -b "/dev/$d2" ] && break
		sleep 0.1
		i=$((i + 1))
	done
	echo "$A1 is /dev/$d1, $A2 is /dev/$d2 (LBA size $LBA_SIZE)"
	[ -b "/dev/$d1" ] && [ -b "/dev/$d2" ]
}
ktap_check "$A1 and $A2 back to the kernel's nvme driver" to_nvme
dd_cmp() { # bdf seed lba count
	d=$(bdev_of "$1")
	[ -n "$d" ] || return 1
	dd if="/dev/$d" of="$T/dd" bs="$LBA_SIZE" skip="$3" count="$4" 2>/dev/null || return 1
	gpunvme pattern --pattern "$2" --start-block "$3" --block-count "$4" --block-size "$LBA_SIZE" > "$T/ref" || return 1
	cmp "$T/dd" "$T/ref" || { echo "/dev/$d LBAs $3..$(($3 + $4)) differ from pattern $2"; return 1; }
}
for mode in shared raw; do
	if [ $mode = shared ]; then s=$WB_SEED l=$WB_LBA; else s=$((WB_SEED + 1)) l=$((WB_LBA + WB_BLOCKS)); fi
	for b in "$A1" "$A2"; do
		name="nvme reads what the array wrote back on $mode pairs: $b LBAs $l..$((l + WB_BLOCKS)) hold pattern $s"
		if grep -q "array_write_back_then_read_back_$mode # SKIP" "$T/hostrun.log"; then
			ktap_ok "$name # SKIP hostrun skipped array_write_back_then_read_back_$mode"
		else
			ktap_check "$name" dd_cmp "$b" "$s" "$l" "$WB_BLOCKS"
		fi
	done
done
back() { gpunvme bind "$A1" && gpunvme bind "$A2"; }
ktap_check "$A1 and $A2 bound to gpunvme again" back
rm -rf "$T"
ktap_done
