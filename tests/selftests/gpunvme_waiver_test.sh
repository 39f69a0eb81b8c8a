#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The IOMMU waiver: reload gpunvme with allow_unsafe_no_iommu=1 and run the
# owner-policy test (gpunvme_owner_test) again. Meant for a boot whose
# IOMMU does not translate (the suite's iommu=pt boot): the claim must then
# work and the kernel be tainted. The taint value from before the load goes
# to the test (GPUNVME_TAINT_BEFORE), so a taint applied at load time counts
# as well as one applied at the claim.
# Not part of the default boot: the Makefile builds it under build/boot/.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
TEST=$DIR/tests/gpunvme_owner_test
[ -x "$TEST" ] || TEST=$DIR/gpunvme_owner_test

fail() { ktap_plan 1; ktap_not_ok "$1"; ktap_done; exit 1; }

[ -x "$TEST" ] || fail "gpunvme_owner_test is not in the VM (pass it as a test or with --file)"
if [ -d /sys/module/gpunvme ]; then
	rmmod gpunvme || fail "rmmod gpunvme (a file still open?)"
fi
before=$(cat /proc/sys/kernel/tainted)
insmod "$DIR/gpunvme.ko" allow_unsafe_no_iommu=1 || fail "insmod gpunvme.ko allow_unsafe_no_iommu=1"
echo "# tainted before loading: $before, after: $(cat /proc/sys/kernel/tainted)"
dmesg | grep -i 'allow_unsafe_no_iommu' | tail -3 | sed 's/^/# klog: /'
echo gpunvme > "/sys/bus/pci/devices/$BDF/driver_override"
echo "$BDF" > /sys/bus/pci/drivers_probe 2>/dev/null
GPUNVME_EXPECT_WAIVER=1 GPUNVME_TAINT_BEFORE=$before exec "$TEST"
