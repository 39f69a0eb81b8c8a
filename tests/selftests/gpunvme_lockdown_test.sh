#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Lockdown: raise it to "integrity" through securityfs, then run the
# owner-policy test (gpunvme_owner_test) again: every claim must now be
# refused with EPERM (LOCKDOWN_PCI_ACCESS), whatever the IOMMU or the
# waiver, while shared mode keeps working. Lockdown cannot be lowered
# again, and it stops unsigned modules from loading: run this last in its
# boot. Not part of the default boot: the Makefile builds it under
# build/boot/.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
TEST=$DIR/tests/gpunvme_owner_test
[ -x "$TEST" ] || TEST=$DIR/gpunvme_owner_test
L=/sys/kernel/security/lockdown

fail() { ktap_plan 1; ktap_not_ok "$1"; ktap_done; exit 1; }

[ -x "$TEST" ] || fail "gpunvme_owner_test is not in the VM (pass it as a test or with --file)"
# The module must be loaded before lockdown: unsigned modules are refused after.
[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || fail "insmod gpunvme.ko"
[ -e "$L" ] || mount -t securityfs none /sys/kernel/security
[ -e "$L" ] || fail "no $L (CONFIG_SECURITY_LOCKDOWN_LSM, securityfs)"
echo "# lockdown before: $(cat "$L")"
echo integrity > "$L" || fail "echo integrity > $L"
grep -q '\[integrity\]' "$L" || fail "lockdown is $(cat "$L"), not integrity"
echo "# lockdown now: $(cat "$L")"
exec "$TEST"
