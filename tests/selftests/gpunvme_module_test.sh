#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Module lifecycle against QEMU's NVMe: load (with its KUnit suites), bind
# by driver_override only, the device nodes (the controller's and one per
# namespace), unbind, unload, and unload refused while a file is open.
. "$(dirname "$0")/ktap.sh"
DIR=${GPUNVME_DIR:-/opt/gpunvme}
BDF=${GPUNVME_BDF:-0000:00:04.0}
DEV=/sys/bus/pci/devices/$BDF

driver_of() { basename "$(readlink "/sys/bus/pci/devices/$1/driver" 2>/dev/null)" 2>/dev/null; }

load() {
	[ -d /sys/module/gpunvme ] && rmmod gpunvme
	insmod "$DIR/gpunvme.ko" || return 1
	[ -d /sys/bus/pci/drivers/gpunvme ]
}

# Every KUnit case the module carries ran at load and passed.
kunit_passed() {
	r=$(cat /sys/kernel/debug/kunit/gpunvme_*/results 2>/dev/null) || { echo "no KUnit results in debugfs"; return 1; }
	echo "$r" | grep -E '^ *(not )?ok ' | sed 's/^ */kunit: /'
	n_ok=$(echo "$r" | grep -cE '^ +ok ')
	n_bad=$(echo "$r" | grep -cE '^ +not ok ')
	[ "$n_ok" -ge 5 ] && [ "$n_bad" = 0 ]
}

# Loading alone must not take the controller: no class match.
not_bound_by_class() {
	d=$(driver_of "$BDF")
	[ "$d" != gpunvme ] || { echo "bound to gpunvme without driver_override"; return 1; }
}

bind() {
	d=$(driver_of "$BDF")
	[ -n "$d" ] && echo "$BDF" > "/sys/bus/pci/drivers/$d/unbind"
	echo gpunvme > "$DEV/driver_override" && echo "$BDF" > /sys/bus/pci/drivers_probe
	[ "$(driver_of "$BDF")" = gpunvme ] || { echo "driver is '$(driver_of "$BDF")'"; return 1; }
}

ctrl_node() { ls /sys/class/misc | grep '^gpunvme[0-9]*$' | head -1; }

node_appears() {
	n=$(ctrl_node)
	[ -n "$n" ] || return 1
	[ -c "/dev/$n" ] || { echo "/dev/$n missing"; return 1; }
	dmesg | grep "gpunvme $BDF: NVMe .* -> /dev/$n" | tail -1
}

# QEMU's controller has namespace 1: /dev/gpunvme<N>n1, root-only like the
# controller node.
ns_node_appears() {
	n=$(ctrl_node)
	[ -c "/dev/${n}n1" ] || { echo "/dev/${n}n1 missing"; ls -l /dev | grep gpunvme; return 1; }
	ls -l "/dev/${n}n1"
	[ "$(stat -c %a "/dev/${n}n1")" = 600 ] && [ "$(stat -c %a "/dev/$n")" = 600 ]
}

unload_refused_while_open() {
	n=$(ctrl_node)
	exec 3<"/dev/$n" || return 1
	if rmmod gpunvme 2>/dev/null; then exec 3<&-; echo "rmmod succeeded with an open file"; return 1; fi
	exec 3<&-
	[ -d /sys/module/gpunvme ]
}

# Every node goes, the namespace nodes too.
unbind() {
	echo "$BDF" > /sys/bus/pci/drivers/gpunvme/unbind || return 1
	[ -z "$(driver_of "$BDF")" ] || return 1
	! ls /sys/class/misc | grep -q '^gpunvme[0-9]' || return 1
	! ls /dev | grep -q '^gpunvme[0-9]'
}

unload() { rmmod gpunvme && [ ! -d /sys/module/gpunvme ]; }

# Rebind after unload/reload: nothing stale left behind.
reload_and_rebind() { load && bind && node_appears >/dev/null && unbind && unload; }

# Start from a clean slate: earlier tests may have left the module loaded
# or driver_override set.
[ -d /sys/module/gpunvme ] && rmmod gpunvme
echo "" > "$DEV/driver_override"

ktap_plan 10
ktap_check "load" load
# A kernel without KUnit (CONFIG_KUNIT off, as in Debian's stock kernel:
# no /sys/module/kunit) cannot run the module's suites, and the module was
# built without them: skipped with the reason, not failed.
if [ -d /sys/module/kunit ]; then
	ktap_check "kunit suites pass" kunit_passed
else
	__ktap_n=$((__ktap_n + 1))
	echo "ok $__ktap_n kunit suites pass # SKIP kernel $(uname -r) has no KUnit (CONFIG_KUNIT off: /sys/module/kunit missing)"
fi
ktap_check "no bind by class" not_bound_by_class
ktap_check "bind via driver_override" bind
ktap_check "device node appears" node_appears
ktap_check "namespace node appears, root-only" ns_node_appears
ktap_check "unload refused while a file is open" unload_refused_while_open
ktap_check "unbind removes the node" unbind
ktap_check "unload" unload
ktap_check "reload and rebind" reload_and_rebind
echo "" > "$DEV/driver_override"
ktap_done
