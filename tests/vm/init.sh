#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-only
# /init of the gpunvme test VM (PID 1, busybox sh).  run.sh copies this file
# into the initramfs next to:
#   /etc/gpunvme-vm.env     settings (BDFs, per-test timeout), sourced below
#   /opt/gpunvme/run.list   what to run, in order: "KIND<TAB>PATH<TAB>NAME"
#                           KIND: elf (exec it), sh (busybox sh PATH),
#                                 script (sh PATH; exit status = one result)
#
# Two output channels:
#   /dev/console (ttyS0)  everything: kernel messages (loglevel=7) and tests.
#   /dev/ttyS1            only the markers, test output and the final dmesg.
# The host parses ttyS1, because on ttyS0 a printk can land in the middle of a
# test's "ok N" line (a module's pr_info while the test prints, say).
#
# Markers (on both channels), "@@gpunvme" at the start of the line:
#   @@gpunvme INIT                    /init is running (host's boot deadline)
#   @@gpunvme BEGIN KIND NAME
#   @@gpunvme END KIND NAME rc=RC timeout=0|1
#   @@gpunvme BEGIN dmesg / @@gpunvme END dmesg
#   @@gpunvme DONE

/bin/busybox mkdir -p /dev /proc /sys /tmp /bin /sbin /usr/bin /usr/sbin
/bin/busybox mount -t devtmpfs devtmpfs /dev
# The initramfs has no /dev/console node, so PID 1 started without stdio.
exec </dev/console >/dev/console 2>&1
/bin/busybox --install -s
export PATH=/opt/gpunvme:/bin:/sbin:/usr/bin:/usr/sbin
export HOME=/tmp TERM=dumb
umask 022

echo "@@gpunvme INIT"

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null ||
    echo "# init: debugfs not available"
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts 2>/dev/null
mount -t tmpfs tmpfs /dev/shm

# The result channel.  Without a second UART it degrades to the console only
# (the host then falls back to parsing the console log).
if [ -c /dev/ttyS1 ] && exec 3>/dev/ttyS1 2>/dev/null; then
    # raw: no \n -> \r\n, no echo; the host reads bytes as written.
    stty -F /dev/ttyS1 raw -echo 115200 2>/dev/null
else
    echo "# init: /dev/ttyS1 missing: results on the console only"
    exec 3>/dev/null
fi

emit() { echo "$*"; echo "$*" >&3; }

. /etc/gpunvme-vm.env
export GPUNVME_BDF KERNEL_NVME_BDF EDU_BDF GPUNVME_DIR GPUNVME_TEST_TIMEOUT GPUNVME_HOTPLUG
# Dynamically linked --file binaries bring their libraries (run.sh copies
# what ldd names); make sure the loader looks where they were put.
export LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64:/usr/lib64

# Reserve the gpunvme controller before anything loads nvme.ko: the in-kernel
# driver matches by class and would take both controllers.  Only a driver
# named "gpunvme" can bind it now; a test may write another name.
echo gpunvme >"/sys/bus/pci/devices/$GPUNVME_BDF/driver_override" ||
    echo "# init: could not set driver_override of $GPUNVME_BDF"
if [ -n "${SUBSYS_GPUNVME_BDF:-}" ]; then
    export SUBSYS_GPUNVME_BDF SUBSYS_KERNEL_BDF
    echo gpunvme >"/sys/bus/pci/devices/$SUBSYS_GPUNVME_BDF/driver_override" ||
        echo "# init: could not set driver_override of $SUBSYS_GPUNVME_BDF"
fi

echo "# init: kernel $(uname -r), GPUNVME_BDF=$GPUNVME_BDF KERNEL_NVME_BDF=$KERNEL_NVME_BDF EDU_BDF=$EDU_BDF"

# run_one KIND PATH NAME: run one entry under a per-entry timeout, output
# streamed to the console and copied to the result channel.
run_one() {
    kind=$1 path=$2 name=$3
    emit "@@gpunvme BEGIN $kind $name"
    rm -f /tmp/.gpunvme-out /tmp/.gpunvme-timedout
    mkfifo /tmp/.gpunvme-out
    # tee's fd 3 is ours: the result channel.
    tee /proc/self/fd/3 </tmp/.gpunvme-out &
    teepid=$!
    case $kind in
        elf) set -- "$path" ;;
        *)   set -- sh "$path" ;;
    esac
    # setsid: the entry gets its own process group, so a timeout (or a
    # daemon it left behind) can be killed as a whole and tee sees EOF.
    (cd /tmp && exec setsid "$@" </dev/null >/tmp/.gpunvme-out 2>&1) &
    pid=$!
    setsid sh -c "sleep $GPUNVME_TEST_TIMEOUT; touch /tmp/.gpunvme-timedout;
                  kill -KILL -$pid $pid" </dev/null >/dev/null 2>&1 &
    wd=$!
    wait $pid
    rc=$?
    kill -KILL -$wd $wd 2>/dev/null
    # Leftovers of the entry (same process group): gone, so the fifo closes.
    kill -KILL -$pid 2>/dev/null
    i=0
    while kill -0 $teepid 2>/dev/null && [ $i -lt 50 ]; do
        sleep 0.1; i=$((i + 1))
    done
    kill -KILL $teepid 2>/dev/null
    wait $teepid 2>/dev/null
    timedout=0
    if [ -e /tmp/.gpunvme-timedout ]; then
        timedout=1
        emit "# init: $name killed after ${GPUNVME_TEST_TIMEOUT}s"
    fi
    emit "@@gpunvme END $kind $name rc=$rc timeout=$timedout"
}

# fd 4: the list, so nothing a test does with stdin can eat it.
exec 4</opt/gpunvme/run.list
while IFS="	" read -r kind path name <&4; do
    [ -n "$kind" ] || continue
    run_one "$kind" "$path" "$name"
done
exec 4<&-

emit "@@gpunvme BEGIN dmesg"
dmesg | tee /proc/self/fd/3
emit "@@gpunvme END dmesg"
emit "@@gpunvme DONE"

# Let both UARTs drain before the power goes (poweroff -f does not wait).
exec 3>&-
sync
sleep 1
poweroff -f
# Not reached unless ACPI poweroff failed; -no-reboot turns this into an exit.
reboot -f
