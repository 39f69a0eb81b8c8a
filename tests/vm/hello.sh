#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Demo for `tests/vm/run.sh --script tests/vm/hello.sh`: a plain script, its
# exit status is the result.
echo "hello from $(uname -r) in the gpunvme VM"
echo "GPUNVME_BDF=$GPUNVME_BDF KERNEL_NVME_BDF=$KERNEL_NVME_BDF EDU_BDF=$EDU_BDF"
for d in /sys/bus/pci/devices/*; do
    echo "  ${d##*/} $(cat "$d/vendor"):$(cat "$d/device") class $(cat "$d/class")"
done
