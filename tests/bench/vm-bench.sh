#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Inside the VM: gpunvme's polled path on one emulated controller (shared
# queue pairs: the module's checking relay; then raw ones in owner mode) and
# the kernel nvme driver (io_uring, O_DIRECT; interrupt and polled) on the other, same controller
# model, one run; and the library's transfers into GPU memory (udmabuf)
# against host memory. The JSON goes to the console between markers.
set -e
insmod "$GPUNVME_DIR/gpunvme.ko"
gpunvme bind "$GPUNVME_BDF"
# poll_queues: the kernel side is measured polled (IOPOLL) as well as by interrupt.
modprobe nvme poll_queues=1
echo nvme > "/sys/bus/pci/devices/$KERNEL_NVME_BDF/driver_override"
echo "$KERNEL_NVME_BDF" > /sys/bus/pci/drivers_probe
i=0
while [ -z "$(ls /sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/*/ 2>/dev/null | grep 'n1$')" ]; do
	i=$((i + 1)); [ $i -lt 200 ] || { echo "kernel nvme namespace did not appear"; exit 1; }
	sleep 0.05
done
ctrl=$(ls "/sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/")
# CPU-initiated transfers into GPU memory (a udmabuf standing in for VRAM)
# against the same transfers into host memory, 128 KiB sequential reads
# (issue 27's target: GPU/host at least 0.9; reported, not asserted).
# Each run alternates host and GPU per cell; GPU_RUNS short runs make that
# alternation several times, because under TCG a second's throughput moves
# by a third between neighbouring seconds (run.sh combines them).
# Before the owner-mode run, while shared pairs need no reset first.
n=0
while [ $n -lt "${GPU_RUNS:-5}" ]; do
	n=$((n + 1))
	gpunvme bench "$GPUNVME_BDF" --gpu udmabuf --rw read --bs 128k --qd 8,32 --qpairs 1 --range 32M \
		--runtime "${GPU_MS:-400}ms" --ramp-time 50ms -o json > /tmp/gpu-$n.json
done
gpunvme bench "$GPUNVME_BDF" --block-device "/dev/${ctrl}n1" --owner --range 32M \
	--runtime "${BENCH_MS:-1000}ms" -o json > /tmp/bench.json
echo "@@BENCH-JSON-BEGIN"
cat /tmp/bench.json
echo
echo "@@BENCH-JSON-END"
for f in /tmp/gpu-*.json; do
	echo "@@GPU-JSON-BEGIN"
	cat "$f"
	echo
	echo "@@GPU-JSON-END"
done
