#!/bin/sh
# make demo, inside the VM: the path as far as it exists today.
# Two NVMe controllers: gpunvme takes one through driver_override, the
# in-kernel nvme driver keeps the other.
set -e
step() { printf '\n==> %s\n' "$*"; }

step "load gpunvme (it binds nothing by itself)"
insmod "$GPUNVME_DIR/gpunvme.ko"
modprobe nvme
gpunvme list

step "hand $GPUNVME_BDF to gpunvme"
gpunvme bind "$GPUNVME_BDF"
gpunvme list

step "what the controller says about itself (GET_INFO)"
gpunvme info "$GPUNVME_BDF"

step "what this machine can do for a GPU"
gpunvme probe || true

step "give the controller back to the kernel's nvme driver"
gpunvme unbind --to-nvme "$GPUNVME_BDF"
gpunvme list
rmmod gpunvme
echo
echo "demo: done"
