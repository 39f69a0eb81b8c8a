#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Every namespace gpunvme reports gets its own pattern at its first and last
# blocks, written through gpunvme, then all are verified (no cross-talk);
# each namespace with NSID 1..4 has its own node /dev/gpunvme<N>n<NSID>.
# The suite's variant boot runs this with two namespaces of different LBA
# sizes and checks the disk images on the host afterwards.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
[ -f "$DIR/variant.env" ] && . "$DIR/variant.env"

[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko"
gpunvme bind "$BDF" >/dev/null
# "  namespace 1         131072 blocks of 512 bytes (...)" -> "1 131072 512"
nslist=$(gpunvme info "$BDF" | sed -n 's/^ *namespace \([0-9]*\) *\([0-9]*\) blocks of \([0-9]*\) bytes.*/\1 \2 \3/p')
n=$(echo "$nslist" | grep -c .)

ctrl=$(ls /dev | grep '^gpunvme[0-9]*$' | head -1)
ktap_plan $((1 + 4 * n))
ktap_check "namespaces found: $n (expected ${EXPECT_NAMESPACES:-at least 1})" \
	test "$n" -ge "${EXPECT_NAMESPACES:-1}"
echo "$nslist" | while read -r nsid blocks lbs; do
	echo "# namespace $nsid: $blocks blocks of $lbs bytes"
done
write_all() {
	echo "$nslist" | while read -r nsid blocks lbs; do
		gpunvme write "$BDF" --namespace-id "$nsid" --start-block 0 --block-count 8 --pattern $((100 + nsid)) >/dev/null || return 1
		gpunvme write "$BDF" --namespace-id "$nsid" --start-block $((blocks - 8)) --block-count 8 --pattern $((200 + nsid)) >/dev/null || return 1
	done
}
# Subshell-free loop so results are counted in this shell.
set -- $nslist
write_all >/dev/null 2>&1
while [ $# -ge 3 ]; do
	nsid=$1 blocks=$2 lbs=$3; shift 3
	ktap_check "ns $nsid ($lbs-byte LBAs): first blocks" gpunvme verify "$BDF" --namespace-id "$nsid" --start-block 0 --block-count 8 --pattern $((100 + nsid))
	ktap_check "ns $nsid: last blocks" gpunvme verify "$BDF" --namespace-id "$nsid" --start-block $((blocks - 8)) --block-count 8 --pattern $((200 + nsid))
	ktap_check "ns $nsid: LBA size matches the format" test "$lbs" -eq "${EXPECT_LBS_NS2:-$lbs}" -o "$nsid" -ne 2
	if [ "$nsid" -le 4 ]; then
		ktap_check "ns $nsid: node /dev/${ctrl}n$nsid" test -c "/dev/${ctrl}n$nsid"
	else
		ktap_check "ns $nsid: no node (NSID above 4)" test ! -e "/dev/${ctrl}n$nsid"
	fi
done
gpunvme unbind "$BDF" >/dev/null
ktap_done
