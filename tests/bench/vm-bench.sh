#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Inside the VM: gpunvme's polled path on one emulated controller (shared
# queue pairs: the module's checking relay; then raw ones in owner mode) and
# the kernel nvme driver (io_uring, O_DIRECT; interrupt and polled) on the other, same controller
# model, one run. The JSON goes to the console between markers.
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
gpunvme bench "$GPUNVME_BDF" --block-device "/dev/${ctrl}n1" --owner --range 32M \
	--duration-ms "${BENCH_MS:-1000}" -o json > /tmp/bench.json
echo "@@BENCH-JSON-BEGIN"
cat /tmp/bench.json
echo
echo "@@BENCH-JSON-END"
