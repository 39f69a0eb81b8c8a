#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# make demo, inside the VM: the path as far as it exists today.
# Two NVMe controllers. The kernel's nvme driver takes both by class;
# gpunvme binds nothing by itself and takes one over only when asked.
set -e
step() { printf '\n==> %s\n' "$*"; }

# The VM runner pre-sets driver_override on the gpunvme controller; start
# from a plain machine instead.
echo "" > "/sys/bus/pci/devices/$GPUNVME_BDF/driver_override"

step "load nvme and gpunvme: nvme claims both controllers, gpunvme none"
modprobe nvme
insmod "$GPUNVME_DIR/gpunvme.ko"
i=0
until ls /sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/*/ 2>/dev/null | grep -q 'n1$'; do
	i=$((i + 1)); [ $i -lt 200 ] || break; sleep 0.05
done
gpunvme list

step "move $GPUNVME_BDF from nvme to gpunvme (driver_override, never by class)"
gpunvme bind "$GPUNVME_BDF"
gpunvme list

step "what the controller says about itself (GET_INFO: registers, Identify, IOMMU mode, the modes you may use)"
gpunvme info "$GPUNVME_BDF"

step "its device nodes: the controller's and one per namespace, root-only (a udev rule can give a group one)"
ls -l /dev/gpunvme*

step "write a known pattern through a shared queue pair, read it back, verify every byte"
echo "(shared mode: the module checks every command against this file's own buffers and the namespace before the controller sees it)"
gpunvme write "$GPUNVME_BDF" --start-block 0 --block-count 256 --pattern 42
gpunvme verify "$GPUNVME_BDF" --start-block 0 --block-count 256 --pattern 42

step "a command the checks refuse never reaches the controller: the module completes it with LBA Out of Range"
gpunvme read "$GPUNVME_BDF" --start-block 999999999 --block-count 1 --no-range-check || true

step "owner mode: one file claims the controller and gets raw queue pairs (root, translating IOMMU)"
gpunvme write "$GPUNVME_BDF" --owner --start-block 256 --block-count 64 --pattern 43
gpunvme verify "$GPUNVME_BDF" --start-block 256 --block-count 64 --pattern 43

step "the GPU device library (kernels/, compiled as host C++, threads as lanes) drives the queues"
echo "(the same source builds for AMD and NVIDIA GPUs; here every lane is a host thread)"
gpunvme_hostrun | grep -E '^(ok|not ok)|passed'

step "polled path (gpunvme) vs the kernel nvme driver on the other controller"
kdev=/dev/$(ls "/sys/bus/pci/devices/$KERNEL_NVME_BDF/nvme/")n1
echo "(QEMU/TCG numbers: compare the two paths with each other, not with hardware)"
gpunvme bench "$GPUNVME_BDF" --block-device "$kdev" --qd 1,8 --qpairs 1 --runtime 300ms

step "what this machine can do for a GPU"
gpunvme probe || true
echo "(on a machine with a GPU, this runs the example kernel on the GPU against the controller;"
echo " in this VM it must say clearly that there is no GPU and leave the controller untouched)"
gpunvme gpu-run "$GPUNVME_BDF" --kernel write || true

step "give the controller back to the kernel's nvme driver; the data is still there"
gpunvme unbind --to-nvme "$GPUNVME_BDF"
gpunvme list
rmmod gpunvme
echo
echo "demo: done"
