#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# KTAP smoke test of the VM itself: the devices are where run.sh says, the
# vIOMMU translates, and the in-kernel nvme driver binds only where told.
#   tests/vm/run.sh tests/vm/vm-env.sh
n=0
result() {  # result 0|1|skip NAME [REASON]
    n=$((n + 1))
    case $1 in
        0)    echo "ok $n $2" ;;
        skip) echo "ok $n $2 # SKIP $3" ;;
        *)    echo "not ok $n $2" ;;
    esac
}
check() { name=$1; shift; if "$@"; then result 0 "$name"; else result 1 "$name"; fi; }
sysfs() { cat "/sys/bus/pci/devices/$1/$2" 2>/dev/null; }
driver_of() { d=$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null) && echo "${d##*/}"; }

echo "TAP version 13"
echo "1..9"

check "gpunvme_bdf_is_nvme" [ "$(sysfs "$GPUNVME_BDF" class)" = 0x010802 ]
check "kernel_nvme_bdf_is_nvme" [ "$(sysfs "$KERNEL_NVME_BDF" class)" = 0x010802 ]
check "edu_bdf_is_edu" [ "$(sysfs "$EDU_BDF" vendor):$(sysfs "$EDU_BDF" device)" = 0x1234:0x11e8 ]

iommu_ok() {
    dmesg | grep -q 'DMAR: IOMMU enabled' &&
        dmesg | grep -q 'iommu: Default domain type: Translated' || return 1
    for b in "$GPUNVME_BDF" "$KERNEL_NVME_BDF" "$EDU_BDF"; do
        g=$(readlink "/sys/bus/pci/devices/$b/iommu_group") || return 1
        t=$(cat "/sys/kernel/iommu_groups/${g##*/}/type")
        echo "# $b: iommu group ${g##*/}, type $t"
        case $t in DMA|DMA-FQ) ;; *) return 1 ;; esac
    done
}
check "iommu_translated" iommu_ok

check "gpunvme_override_preset" [ "$(sysfs "$GPUNVME_BDF" driver_override)" = gpunvme ]

# A poll queue lets gpunvme bench measure the kernel driver polled, too.
bind_kernel_nvme() {
    modprobe nvme poll_queues=1 || return 1
    echo nvme >"/sys/bus/pci/devices/$KERNEL_NVME_BDF/driver_override"
    echo "$KERNEL_NVME_BDF" >/sys/bus/pci/drivers_probe
    [ "$(driver_of "$KERNEL_NVME_BDF")" = nvme ]
}
check "modprobe_and_bind_kernel_nvme" bind_kernel_nvme

disk_io() {
    i=0
    while [ ! -b /dev/nvme0n1 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    [ -b /dev/nvme0n1 ] || return 1
    echo "# $(cat /sys/block/nvme0n1/device/serial 2>/dev/null) $(cat /sys/block/nvme0n1/size) sectors"
    [ "$(cat /sys/block/nvme0n1/device/serial | tr -d ' ')" = kernel0 ] &&
        echo gpunvme-vm-test | dd of=/dev/nvme0n1 bs=512 count=1 conv=sync,fsync 2>/dev/null &&
        echo 1 >/proc/sys/vm/drop_caches &&
        [ "$(dd if=/dev/nvme0n1 bs=16 count=1 iflag=direct 2>/dev/null)" = gpunvme-vm-test ]
}
check "kernel_nvme_disk_io" disk_io

check "gpunvme_bdf_left_unbound" [ -z "$(driver_of "$GPUNVME_BDF")" ]

if [ -e /dev/mem ]; then
    # edu register 0: identification 0x010000ed.
    bar=$(sysfs "$EDU_BDF" resource | awk 'NR == 1 { print $1 }')
    check "edu_bar0_ident" [ "$(devmem "$bar" 32)" = 0x010000ED ]
else
    result skip "edu_bar0_ident" "no /dev/mem"
fi
