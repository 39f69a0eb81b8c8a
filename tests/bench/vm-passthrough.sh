#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Inside the VM (make bench's third boot; no gpunvme module): the
# userspace passthrough back end on the namespace of the controller nvme.ko
# drives (poll queues), beside the kernel's own polled io_uring (O_DIRECT)
# and fio's io_uring_cmd engine on the same /dev/ngXnY, in each run (issue
# 26's targets: QD1 p50 within 1.25x the kernel's, QD32 IOPS at least 0.9x;
# reported, not asserted). Rounds alternate the relay's two modes: relay
# threads (what a GPU client needs) and inline (--relay-inline: the bench's
# own thread relays, as a CPU client may). Each run's JSON goes to the
# console between markers.
set -e
modprobe nvme poll_queues=2
i=0
while [ -z "$(ls /sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/*/ 2>/dev/null | grep 'n1$')" ]; do
	i=$((i + 1)); [ $i -lt 200 ] || { echo "kernel nvme namespace did not appear"; exit 1; }
	sleep 0.05
done
ctrl=$(ls "/sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/")
ng=/dev/ng${ctrl#nvme}n1
n=0
while [ $n -lt "${PT_ROUNDS:-3}" ]; do
	n=$((n + 1))
	for mode in threads inline; do
		opt=
		[ $mode = threads ] || opt=--relay-inline
		# shellcheck disable=SC2086 # $opt is one flag or nothing
		gpunvme bench "$ng" --qd 1,32 --qpairs 1 --range 32M --runtime "${PT_MS:-2000}ms" \
			--kernel-mode poll --fio "$GPUNVME_DIR/fio" $opt -o json > /tmp/pt.json
		echo "@@PT-JSON-BEGIN $mode $n"
		cat /tmp/pt.json
		echo
		echo "@@PT-JSON-END"
	done
done
