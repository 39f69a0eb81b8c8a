#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# The device library's per-thread API on two controllers at once (hostrun's
# pthread_two_controllers, shared and raw): run after
# gpunvme_ninth_controller_test.sh in the boot with nine controllers, which
# leaves eight bound to gpunvme. Picks the first two bound controllers and
# runs the hostrun binary (copied into the VM with --file) on them.
DIR=${GPUNVME_DIR:-/opt/gpunvme}
set -- $(ls -d /sys/bus/pci/drivers/gpunvme/0000:* 2>/dev/null | sed 's|.*/||')
if [ $# -lt 2 ] || [ ! -x "$DIR/gpunvme_hostrun" ]; then
	echo "TAP version 13"
	echo "1..1"
	echo "not ok 1 pthread_two_controllers: needs two controllers bound to gpunvme ($# bound) and $DIR/gpunvme_hostrun"
	exit 1
fi
GPUNVME_BDF=$1 GPUNVME_BDF2=$2 GPUNVME_HOSTRUN_ONLY=pthread_two_controllers exec "$DIR/gpunvme_hostrun"
