#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test (run.sh --hotplug): the controller sits behind the root
# port, the host unplugs it on request and plugs it back in.
d=/sys/bus/pci/devices/$GPUNVME_BDF
wait_for() {  # wait_for 0|1: until the device is absent|present, 30 s
    t=0
    while [ $t -lt 300 ]; do
        if [ -e "$d" ]; then [ "$1" = 1 ] && return 0; else [ "$1" = 0 ] && return 0; fi
        sleep 0.1; t=$((t + 1))
    done
    return 1
}
echo "TAP version 13"
echo "1..3"
if [ "$GPUNVME_BDF" = 0000:01:00.0 ] && [ "$(cat "$d/class")" = 0x010802 ] &&
   [ "$(basename "$(readlink -f "$d/..")")" = 0000:00:04.0 ]; then
    echo "ok 1 controller behind the root port at 00:04.0"
else
    echo "not ok 1 controller behind the root port at 00:04.0"
fi
echo "@@gpunvme HOTPLUG 1 del"
if wait_for 0; then echo "ok 2 unplugged on request"; else echo "not ok 2 unplugged on request"; fi
echo "@@gpunvme HOTPLUG 2 add"
if wait_for 1; then echo "ok 3 plugged back in on request"; else echo "not ok 3 plugged back in on request"; fi
