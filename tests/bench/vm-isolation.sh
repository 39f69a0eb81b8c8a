#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Inside the VM: one relay thread for every shared pair (relay_threads=1),
# then relay_isolation (a victim's QD1 latency idle and while another file
# floods its pairs with SQEs that are expensive to check). Its JSON goes to
# the console between markers.
set -e
insmod "$GPUNVME_DIR/gpunvme.ko" relay_threads=1
gpunvme bind "$GPUNVME_BDF"
"$GPUNVME_DIR/relay_isolation" "${ISOLATION_SAMPLES:-2000}" 1
