#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# In the VM (tests/vm/python.sh): the Python package's pytest suite against
# the gpunvme controller, one TAP line per test (its conftest.py). The
# interpreter and its environment come from /opt/gpunvme/python.env.
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
PATH=$DIR:$PATH

bail() { echo "not ok 1 setup: $*"; echo "1..1"; exit 1; }
[ -f "$DIR/python.env" ] || bail "no $DIR/python.env (tests/vm/python.sh packs it)"
. "$DIR/python.env"
[ -d /sys/module/gpunvme ] || insmod "$DIR/gpunvme.ko" || bail "insmod gpunvme.ko"
drv=$(basename "$(readlink "/sys/bus/pci/devices/$BDF/driver" 2>/dev/null)" 2>/dev/null)
[ "$drv" = gpunvme ] || gpunvme bind "$BDF" || bail "gpunvme bind $BDF"
echo "# python: $("$PYTHON" --version 2>&1) ($PYTHON), device $BDF"

export PYTHONPATH PYTHONDONTWRITEBYTECODE=1 GPUNVME_TAP=1 GPUNVME_BDF="$BDF"
# The package resolves the PCI address to the node, as the CLI does.
export GPUNVME_TEST_DEVICE="$BDF" GPUNVME_CLI="$DIR/gpunvme"
cd /tmp || bail "cd /tmp"
exec "$PYTHON" -s -m pytest -q -p no:cacheprovider "$DIR/python-tests"
