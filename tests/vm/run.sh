#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/vm/run.sh: boot the test kernel in QEMU (TCG) with two emulated NVMe
# controllers and the edu device behind an Intel vIOMMU, run tests inside,
# and count their KTAP/TAP results.  `run.sh --help` for the interface.
set -euo pipefail

usage() {
    cat <<'EOF'
usage: tests/vm/run.sh [options] [--] [TEST...]

Boots the test kernel in QEMU and runs, in command-line order, each TEST
(static executable or busybox-sh script printing KTAP/TAP; copied to
/opt/gpunvme/tests/) and each --script.  Last line: "N passed, N failed"
(", N skipped" when nonzero).  Exit status 0 iff nothing failed.

  --kdir DIR           kernel build dir (default: tests/kernel/build.sh output)
  --kernel FILE        boot this kernel image instead of DIR/arch/x86/boot/bzImage
  --modules DIR        a lib/modules directory for the VM instead of
                       DIR/modinstall/lib/modules (with --kernel: no --kdir needed)
  --file SRC[:DEST]    copy SRC (file or directory) into the VM; DEST defaults
                       to /opt/gpunvme/<basename>, a relative DEST is under
                       /opt/gpunvme.  Dynamically linked ELF files bring their
                       shared libraries and ELF interpreter (ldd).
  --script FILE        run FILE with busybox sh; its exit status is one result
  --keep-images DIR    keep the NVMe disk images in DIR (default: temp dir)
  --timeout SECS       overall deadline (default 600)
  --test-timeout SECS  per TEST/--script deadline inside the VM (default 300)
  --boot-timeout SECS  deadline for the VM to reach /init (default 120)
  --log FILE           console log (default: a new file under ${TMPDIR:-/tmp})
  --append ARGS        extra kernel command-line arguments
  --sriov              add an SR-IOV NVMe PF (QEMU's model, in an nvme-subsys)
                       behind a root port, at 0000:01:00.0 (SRIOV_PF_BDF in
                       /etc/gpunvme-vm.env): 1 VF (0000:01:00.1), 4 flexible
                       queue and 2 flexible interrupt resources; namespace 1
                       (64 MiB) is the PF's, namespace 2 (64 MiB) is private
                       and detached, for a VF.  The other devices and their
                       BDFs do not change.
  --subsys             add an nvme-subsys of two controllers sharing namespace 1
                       (64 MiB, 512 B blocks; QEMU's formats 0-7: 4 is 4 KiB, 1-3
                       and 5-7 carry metadata): SUBSYS_GPUNVME_BDF (0000:00:08.0,
                       driver_override preset to gpunvme) and SUBSYS_KERNEL_BDF
                       (0000:00:09.0, for nvme.ko, whose admin queue can
                       detach, format and attach the namespace under gpunvme)
  --hotplug            put the gpunvme controller behind a pcie-root-port
                       (GPUNVME_BDF becomes 0000:01:00.0; the other devices
                       keep their addresses), its disk a -blockdev that
                       outlives the device, QMP on a socket in the temp dir,
                       and let tests unplug and replug it: a test prints
                       "@@gpunvme HOTPLUG <seq> del" or "... <seq> add" and
                       the host (tests/vm/qmp.py) runs device_del or
                       device_add once per <seq>; the guest sees the result
                       in sysfs (pciehp; the unplug is a graceful one, ~5 s)
  -h, --help

Environment:
  KERNEL_VARIANT     variant for tests/kernel/build.sh (default: default)
  QEMU               QEMU binary (default: qemu-system-x86_64)
  QEMU_EXTRA         extra QEMU arguments, word-split, appended last
                     (e.g. "-global nvme.mdts=3", "-trace vtd_*",
                      "-drive file=ns2.img,if=none,id=ns2,format=raw
                       -device nvme-ns,drive=ns2,bus=gpunvme0,nsid=2")
  GPUNVME_NVME_OPTS  extra ",key=val" options for the gpunvme controller
                     (e.g. "mdts=3,max_ioqpairs=4,logical_block_size=4096")
  KERNEL_NVME_OPTS   the same for the controller left to the kernel driver
  GPUNVME_VM_KEEP_WORK  non-empty: keep the temp dir (initramfs tree, cpio,
                     results.txt = the second UART's raw output)
  GPUNVME_VM_FIRST_BOOT_APPEND  kernel arguments for the first boot only
                     (the runner's self-test makes it die before /init)

A kernel that dies before it starts /init (a report in the console, no
code of ours run yet) is booted once more; the first boot counts as a
skip and its console is kept beside the log (LOG.boot1).

Inside the VM: GPUNVME_BDF, KERNEL_NVME_BDF, EDU_BDF, GPUNVME_DIR=/opt/gpunvme,
GPUNVME_TEST_TIMEOUT and GPUNVME_HOTPLUG (1 with --hotplug, else 0) are exported; PATH includes /opt/gpunvme; nvme.ko and
nvme-core.ko are in /lib/modules (modprobe nvme); debugfs is mounted.
GPUNVME_BDF's driver_override is preset to "gpunvme" so that nvme.ko cannot
take it; the controller at KERNEL_NVME_BDF is left for nvme.ko.
A TEST's top-level "ok N"/"not ok N" lines count ("# SKIP": skipped); one
more failure if it times out, prints no plan or fewer results than planned,
or exits non-zero (other than 4, KSFT_SKIP) without a "not ok".  The kernel
log is scanned for warnings, BUGs, lockdep/KASAN/KFENCE reports, call traces
and failed KUnit tests: one more result, "kernel log clean".
EOF
}

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

# Fixed PCI addresses (addr= on each -device), so tests can rely on them.
# intel-iommu is a sysbus device on q35, not a PCI function.
# With --hotplug a pcie-root-port takes the gpunvme controller's slot and
# the controller sits on the port's secondary bus (1, the only bridge).
readonly GPUNVME_SLOT=04 KERNEL_NVME_SLOT=05 EDU_SLOT=06
GPUNVME_BDF=0000:00:$GPUNVME_SLOT.0
readonly KERNEL_NVME_BDF=0000:00:$KERNEL_NVME_SLOT.0
readonly EDU_BDF=0000:00:$EDU_SLOT.0
readonly DISK_SIZE=64M
# --sriov: the PF behind a root port at slot 07 (bus 1); its VF is 01:00.1.
readonly SRIOV_RP_SLOT=07 SRIOV_PF_BDF=0000:01:00.0
# --subsys: two controllers of one subsystem at slots 08 and 09.
readonly SUBSYS_GPUNVME_SLOT=08 SUBSYS_KERNEL_SLOT=09
readonly SUBSYS_GPUNVME_BDF=0000:00:$SUBSYS_GPUNVME_SLOT.0 SUBSYS_KERNEL_BDF=0000:00:$SUBSYS_KERNEL_SLOT.0

# Patterns in the kernel log that fail the run ("kernel log clean").
# Case-sensitive on purpose: the boot banners "kasan:"/"kfence:" and lockdep's
# "MAX_LOCKDEP_*" table are fine; their reports ("BUG: KASAN: ...") are not.
# The last pattern is a failed KUnit case or suite (KTAP in the kernel log,
# e.g. from a test module's kunit_test_suite at insmod).
readonly KLOG_BAD='WARNING:|BUG:|Oops|KASAN|KFENCE|possible circular locking|INFO: possible|inconsistent lock state|lockdep (disabled|off)|DEBUG_LOCKS_WARN_ON|Call Trace:|Kernel panic|general protection fault|UBSAN:|detected stalls|blocked for more than|^\[ *[0-9.]+\] +not ok [0-9]+ '

kdir= kimage= kmodules= keep_images= sriov= subsys= timeout=600 test_timeout=300 boot_timeout=120 log= append= hotplug=0
files=() entries=()   # entries: "KIND<TAB>SRC" in command-line order

die() { echo "run.sh: $*" >&2; exit 2; }
need_arg() { [ $# -ge 2 ] || die "$1 needs an argument"; }
is_uint() { [[ $1 =~ ^[0-9]+$ ]] && [ "$1" -gt 0 ]; }

while [ $# -gt 0 ]; do
    case $1 in
        --kdir)         need_arg "$@"; kdir=$2; shift 2 ;;
        --kernel)       need_arg "$@"; kimage=$2; shift 2 ;;
        --modules)      need_arg "$@"; kmodules=$2; shift 2 ;;
        --file)         need_arg "$@"; files+=("$2"); shift 2 ;;
        --script)       need_arg "$@"; entries+=("script	$2"); shift 2 ;;
        --keep-images)  need_arg "$@"; keep_images=$2; shift 2 ;;
        --timeout)      need_arg "$@"; timeout=$2; shift 2 ;;
        --test-timeout) need_arg "$@"; test_timeout=$2; shift 2 ;;
        --boot-timeout) need_arg "$@"; boot_timeout=$2; shift 2 ;;
        --log)          need_arg "$@"; log=$2; shift 2 ;;
        --append)       need_arg "$@"; append=$2; shift 2 ;;
        --sriov)        sriov=1; shift ;;
        --subsys)       subsys=1; shift ;;
        --hotplug)      hotplug=1; shift ;;
        -h|--help)      usage; exit 0 ;;
        --)             shift; for t in "$@"; do entries+=("test	$t"); done; break ;;
        -*)             die "unknown option $1 (see --help)" ;;
        *)              entries+=("test	$1"); shift ;;
    esac
done
for v in timeout test_timeout boot_timeout; do
    is_uint "${!v}" || die "--${v//_/-} wants a positive number of seconds"
done

if [ -z "$kdir" ] && ! { [ -n "$kimage" ] && [ -n "$kmodules" ]; }; then
    kdir=$(KERNEL_VARIANT=${KERNEL_VARIANT:-default} bash "$REPO/tests/kernel/build.sh" | tail -n1) ||
        die "tests/kernel/build.sh failed"
fi
bzimage=${kimage:-$kdir/arch/x86/boot/bzImage}
[ -f "$bzimage" ] || die "no kernel image at $bzimage"
modroot=${kmodules:-$kdir/modinstall/lib/modules}
[ -d "$modroot" ] || die "no installed modules at $modroot"
QEMU=${QEMU:-qemu-system-x86_64}
command -v "$QEMU" >/dev/null || die "$QEMU not found (apt-get install qemu-system-x86)"
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 ||
    die "need a static busybox (apt-get install busybox-static)"
command -v cpio >/dev/null || die "cpio not found"
[ "$hotplug$sriov" != 11 ] || die "--hotplug and --sriov both put a device at 0000:01:00.0; use one"
if [ "$hotplug" = 1 ]; then
    command -v python3 >/dev/null || die "--hotplug needs python3 (make deps)"
    GPUNVME_BDF=0000:01:00.0
fi
readonly GPUNVME_BDF

# ---- temp dir, cleanup -----------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-vm.XXXXXX")
qemu_pid= qmp_pid=
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill -KILL "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    if [ -n "$qmp_pid" ] && kill -0 "$qmp_pid" 2>/dev/null; then
        kill "$qmp_pid" 2>/dev/null || true
        wait "$qmp_pid" 2>/dev/null || true
    fi
    [ -n "${GPUNVME_VM_KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

[ -z "${GPUNVME_VM_KEEP_WORK:-}" ] || echo "# run.sh: work dir $work kept (GPUNVME_VM_KEEP_WORK)"
[ -n "$log" ] || log=$(mktemp "${TMPDIR:-/tmp}/gpunvme-vm.XXXXXX.log")
: >"$log"
results=$work/results.txt   # second UART: the clean result channel
: >"$results"

# ---- initramfs ---------------------------------------------------------------
root=$work/root
mkdir -p "$root"/{bin,dev,etc,proc,sys,tmp,lib/modules,opt/gpunvme/tests,opt/gpunvme/scripts}
cp "$busybox" "$root/bin/busybox"
install -m 0755 "$HERE/init.sh" "$root/init"
cp -a "$modroot/." "$root/lib/modules/"
# build/source point at the whole kernel tree.
rm -f "$root"/lib/modules/*/build "$root"/lib/modules/*/source

is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

# copy_libs FILE: the shared libraries and interpreter FILE needs, same paths.
copy_libs() {
    is_elf "$1" || return 0
    local out lib
    out=$(ldd "$1" 2>/dev/null) || return 0   # static: "not a dynamic executable"
    while read -r lib; do
        [ -f "$lib" ] || continue
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out")
}

# copy_in SRC DEST: DEST is a path inside the VM.
copy_in() {
    local src=$1 dest=$2 f
    [ -e "$src" ] || die "no such file: $src"
    mkdir -p "$root$(dirname "$dest")"
    cp -rL "$src" "$root$dest"
    if [ -d "$src" ]; then
        while IFS= read -r -d '' f; do copy_libs "$f"; done < <(find "$src" -type f -print0)
    else
        copy_libs "$src"
    fi
}

for spec in ${files[@]+"${files[@]}"}; do
    src=${spec%%:*} dest=
    [ "$src" = "$spec" ] || dest=${spec#*:}
    case $dest in
        "")  dest=/opt/gpunvme/$(basename "$src") ;;
        */)  dest=${dest%/}/$(basename "$src") ;;
    esac
    case $dest in /*) ;; *) dest=/opt/gpunvme/$dest ;; esac
    copy_in "$src" "$dest"
done

runlist=$root/opt/gpunvme/run.list
: >"$runlist"
names=()
for e in ${entries[@]+"${entries[@]}"}; do
    kind=${e%%	*} src=${e#*	}
    [ -f "$src" ] || die "no such test: $src"
    name=$(basename "$src")
    for n in ${names[@]+"${names[@]}"}; do
        [ "$n" != "$name" ] || die "two tests named $name"
    done
    [[ $name != *[[:space:]]* ]] || die "test names must not contain whitespace: $src"
    names+=("$name")
    if [ "$kind" = script ]; then
        dest=/opt/gpunvme/scripts/$name
    else
        dest=/opt/gpunvme/tests/$name
        if is_elf "$src"; then kind=elf; else kind=sh; fi
    fi
    copy_in "$src" "$dest"
    chmod 0755 "$root$dest"
    printf '%s\t%s\t%s\n' "$kind" "$dest" "$name" >>"$runlist"
done

cat >"$root/etc/gpunvme-vm.env" <<EOF
GPUNVME_BDF=$GPUNVME_BDF
KERNEL_NVME_BDF=$KERNEL_NVME_BDF
EDU_BDF=$EDU_BDF
${sriov:+SRIOV_PF_BDF=$SRIOV_PF_BDF}
${subsys:+SUBSYS_GPUNVME_BDF=$SUBSYS_GPUNVME_BDF}
${subsys:+SUBSYS_KERNEL_BDF=$SUBSYS_KERNEL_BDF}
GPUNVME_DIR=/opt/gpunvme
GPUNVME_TEST_TIMEOUT=$test_timeout
GPUNVME_HOTPLUG=$hotplug
EOF

# Uncompressed: the kernel unpacks it faster than it would decompress it
# under TCG.
initrd=$work/initramfs.cpio
(cd "$root" && find . -print0 | LC_ALL=C sort -z |
    cpio --null -o -H newc -R 0:0 --quiet) >"$initrd"

# ---- disk images ---------------------------------------------------------------
imgdir=$work
if [ -n "$keep_images" ]; then
    mkdir -p "$keep_images"
    imgdir=$(cd "$keep_images" && pwd)
fi
for d in gpunvme0 kernel0 ${sriov:+sriov-ns1 sriov-ns2} ${subsys:+subsys-ns1}; do
    rm -f "$imgdir/$d.img"      # always fresh
    if command -v qemu-img >/dev/null; then
        qemu-img create -q -f raw "$imgdir/$d.img" "$DISK_SIZE"
    else
        truncate -s "$DISK_SIZE" "$imgdir/$d.img"   # raw = plain zeroed file
    fi
done

# ---- QEMU --------------------------------------------------------------------
# tsc=reliable: under TCG the vCPUs' TSC is the host's (monotonic, the same
# on every vCPU), but the clocksource watchdog, itself delayed on a loaded
# host, sees "frequency skew" against the emulated HPET and switches the
# guest to it mid-boot; every clock read (ktime_get in the module, each
# clock_gettime in the benches) is then an HPET MMIO exit to QEMU, and
# latencies measured in the VM move by an order of magnitude.
cmdline="console=ttyS0 intel_iommu=on iommu.strict=1 loglevel=7 panic=-1 tsc=reliable $append"
gpunvme_opts=${GPUNVME_NVME_OPTS:+,$GPUNVME_NVME_OPTS}
kernel_opts=${KERNEL_NVME_OPTS:+,$KERNEL_NVME_OPTS}
qemu_args=(
    -M q35 -accel tcg -cpu max -smp 2 -m 2048
    -nographic -no-reboot -vga none -nic none
    # ttyS0: console on stdout (Ctrl-A x works when run by hand);
    # ttyS1: the result channel, a plain file.
    -serial mon:stdio -serial "file:$results"
    -kernel "$bzimage" -initrd "$initrd" -append "$cmdline"
    # The vIOMMU must exist before the PCI devices are realized.
    # Under TCG neither kernel-irqchip=split nor intremap=off is needed (both
    # boot); intremap=off because the kernel has no CONFIG_IRQ_REMAP, so an
    # advertised remapping unit would only sit unused.
    -device intel-iommu,intremap=off
)
if [ "$hotplug" = 0 ]; then
    qemu_args+=(
        -drive "file=$imgdir/gpunvme0.img,if=none,id=gpunvme0-disk,format=raw"
        -device "nvme,id=gpunvme0,serial=gpunvme0,drive=gpunvme0-disk,bus=pcie.0,addr=$GPUNVME_SLOT.0$gpunvme_opts"
    )
else
    # device_del would delete a -drive with its device; a -blockdev node
    # stays, so device_add can attach the same disk again.
    gpunvme_dev="nvme,id=gpunvme0,serial=gpunvme0,drive=gpunvme0-disk,bus=gpunvme-port,addr=00.0$gpunvme_opts"
    qemu_args+=(
        # Native PCIe hotplug (pciehp): q35's default since QEMU 6.1 is ACPI
        # hotplug, which the test kernel does not build (HOTPLUG_PCI_ACPI).
        -global ICH9-LPC.acpi-pci-hotplug-with-bridge-support=off
        -qmp "unix:$work/qmp.sock,server=on,wait=off"
        -device "pcie-root-port,id=gpunvme-port,bus=pcie.0,addr=$GPUNVME_SLOT.0,chassis=1,slot=1"
        -blockdev "driver=raw,node-name=gpunvme0-disk,file.driver=file,file.filename=$imgdir/gpunvme0.img"
        -device "$gpunvme_dev"
    )
fi
qemu_args+=(
    -drive "file=$imgdir/kernel0.img,if=none,id=kernel0-disk,format=raw"
    -device "nvme,id=kernel0,serial=kernel0,drive=kernel0-disk,bus=pcie.0,addr=$KERNEL_NVME_SLOT.0$kernel_opts"
    -device "edu,dma_mask=0xffffffffffffffff,bus=pcie.0,addr=$EDU_SLOT.0"
)
# QEMU 7.2's SR-IOV NVMe needs an nvme-subsys. Its namespaces default to
# shared (attached to every controller, VFs included): ns 1 is private to
# the PF; ns 2 is private and detached until Namespace Attachment gives it
# to one controller (the VF's).
[ -z "$sriov" ] || qemu_args+=(
    -device "pcie-root-port,id=sriov-rp,chassis=7,bus=pcie.0,addr=$SRIOV_RP_SLOT.0"
    -device nvme-subsys,id=sriov-subsys,nqn=gpunvme-sriov
    -device "nvme,id=sriov0,serial=sriov0,subsys=sriov-subsys,bus=sriov-rp,addr=00.0,sriov_max_vfs=1,sriov_vq_flexible=4,sriov_vi_flexible=2"
    -drive "file=$imgdir/sriov-ns1.img,if=none,id=sriov-ns1,format=raw"
    -device nvme-ns,drive=sriov-ns1,bus=sriov0,nsid=1,shared=off
    -drive "file=$imgdir/sriov-ns2.img,if=none,id=sriov-ns2,format=raw"
    -device nvme-ns,drive=sriov-ns2,bus=sriov0,nsid=2,shared=off,detached=on
)
# A shared namespace (attached to both controllers) of one subsystem (QEMU
# wants one serial number for all controllers of a subsystem).
[ -z "$subsys" ] || qemu_args+=(
    -device nvme-subsys,id=shared-subsys,nqn=gpunvme-shared
    -device "nvme,id=subsys-a,serial=subsys0,subsys=shared-subsys,bus=pcie.0,addr=$SUBSYS_GPUNVME_SLOT.0"
    -device "nvme,id=subsys-b,serial=subsys0,subsys=shared-subsys,bus=pcie.0,addr=$SUBSYS_KERNEL_SLOT.0"
    -drive "file=$imgdir/subsys-ns1.img,if=none,id=subsys-ns1,format=raw"
    -device nvme-ns,drive=subsys-ns1,bus=subsys-a,nsid=1,shared=on
)
# shellcheck disable=SC2206 # word splitting is the documented contract
[ -z "${QEMU_EXTRA:-}" ] || qemu_args+=($QEMU_EXTRA)

echo "# run.sh: kernel $bzimage"
echo "# run.sh: console log $log"
echo "# run.sh: GPUNVME_BDF=$GPUNVME_BDF KERNEL_NVME_BDF=$KERNEL_NVME_BDF EDU_BDF=$EDU_BDF"
[ -z "$keep_images" ] || echo "# run.sh: disk images $imgdir/gpunvme0.img $imgdir/kernel0.img"
echo "# run.sh: $QEMU $(printf '%q ' "${qemu_args[@]}")"

# One boot: QEMU until it exits, the overall deadline, or no /init within
# the boot deadline. Sets deadline_hit, boot_hit, qemu_rc, elapsed.
# $1: kernel arguments for this boot only (the runner's self-test).
boot_once() {
    local args=("${qemu_args[@]}") i
    if [ -n "${1:-}" ]; then
        for i in "${!args[@]}"; do
            [ "${args[$i]}" != -append ] || args[i + 1]+=" $1"
        done
    fi
    start=$SECONDS
    # The console goes to our stdout and, without the UART's \r, to the log.
    exec {console_fd}> >(sed -u 's/\r$//' | tee -a "$log")
    console_pid=$!
    # stdin from /dev/null: QEMU leaves the terminal alone.
    "$QEMU" "${args[@]}" </dev/null >&"$console_fd" 2>&1 &
    qemu_pid=$!
    if [ "$hotplug" = 1 ]; then
        python3 "$HERE/qmp.py" "$work/qmp.sock" "$results" gpunvme0 "$gpunvme_dev" &
        qmp_pid=$!
    fi

    deadline_hit= boot_hit= booted=
    while kill -0 "$qemu_pid" 2>/dev/null; do
        sleep 1
        elapsed=$((SECONDS - start))
        if [ "$elapsed" -ge "$timeout" ]; then
            deadline_hit=1; break
        fi
        if [ -z "$booted" ] && grep -q '^@@gpunvme INIT' "$log"; then
            booted=1
        elif [ -z "$booted" ] && [ "$elapsed" -ge "$boot_timeout" ]; then
            boot_hit=1; break
        fi
    done
    if [ -n "$deadline_hit$boot_hit" ]; then
        kill -KILL "$qemu_pid" 2>/dev/null || true
    fi
    qemu_rc=0
    wait "$qemu_pid" || qemu_rc=$?
    qemu_pid=
    exec {console_fd}>&-
    wait "$console_pid" 2>/dev/null || true   # the log is complete after this
    if [ -n "$qmp_pid" ]; then
        # It exits when QEMU closes the socket; a stuck one is stopped.
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$qmp_pid" 2>/dev/null || break; sleep 0.5; done
        kill "$qmp_pid" 2>/dev/null || true
        wait "$qmp_pid" 2>/dev/null || true
        qmp_pid=
    fi
    elapsed=$((SECONDS - start))
}

# A kernel that dies before /init has run no code of ours (gpunvme is never
# built in, and /init loads everything); under TCG a stock kernel has been
# seen to oops that early (int3 in a jmp being patched, TCG's cross-
# modifying code). Such a boot is shown, kept, counted as a skip, and
# booted once more; a second early death fails the run as before.
early_crash=
boot_once "${GPUNVME_VM_FIRST_BOOT_APPEND:-}"
if ! grep -q '^@@gpunvme INIT\|Run /init as init process' "$log" && grep -Eq "$KLOG_BAD" "$log" &&
    [ -z "$deadline_hit" ]; then
    early_crash=$(grep -E "$KLOG_BAD" "$log" | head -n 12)
    mv "$log" "$log.boot1"
    : >"$results"
    echo "# run.sh: the kernel crashed before /init (no gpunvme code had run); console kept in $log.boot1; booting once more"
    boot_once
fi
echo
if [ -n "$boot_hit" ]; then
    echo "# run.sh: the VM did not reach /init within ${boot_timeout}s; last 60 console lines:"
    tail -n 60 "$log" | sed 's/^/#   /'
elif [ -n "$deadline_hit" ]; then
    echo "# run.sh: deadline of ${timeout}s hit, QEMU killed; last 60 console lines:"
    tail -n 60 "$log" | sed 's/^/#   /'
fi
echo "# run.sh: QEMU exited with $qemu_rc after ${elapsed}s"

# ---- results -----------------------------------------------------------------
# The result channel normally has everything; if the VM had no ttyS1, the
# console log carries the same markers.
channel=$(tr -d '\r' <"$results")
if ! grep -q '^@@gpunvme INIT\|^@@gpunvme BEGIN' <<<"$channel"; then
    channel=$(cat "$log")
fi

# Per entry: top-level "ok N"/"not ok N" lines (KTAP subtests are indented and
# rolled up by their parent).  "# SKIP" -> skipped; "# XFAIL", "not ok # TODO"
# -> passed.  One extra failure for an entry that timed out, printed no plan,
# printed fewer results than planned, or exited non-zero without a "not ok".
# Exit status 4 (KSFT_SKIP) with no results counts as one skip.
summary=$(awk -v tt="$test_timeout" '
function fail(msg) { failed++; print "FAIL " msg }
function finish(rc, to,    n) {
    n = ok + nok + skip
    if (kind == "script") {
        if (to)           fail(name ": timed out after " tt "s")
        else if (rc != 0) fail(name ": exit status " rc)
        else              passed++
        return
    }
    passed += ok; failed += nok; skipped += skip
    if (to)                          fail(name ": timed out after " tt "s")
    else if (n == 0 && (rc == 4 || plan == 0)) skipped++
    else if (plan < 0)               fail(name ": no TAP plan (exit status " rc ")")
    else if (n < plan)               fail(name ": " n " of " plan " results (exit status " rc ")")
    else if (rc != 0 && rc != 4 && nok == 0) fail(name ": exit status " rc)
    if (bail) fail(name ": Bail out!")
}
/^@@gpunvme BEGIN dmesg$/ { next }
/^@@gpunvme BEGIN / {
    kind = $3; name = $4; inside = 1; started++
    ok = nok = skip = bail = 0; plan = -1
    next
}
/^@@gpunvme END / && inside {
    rc = $5; sub(/^rc=/, "", rc); to = ($6 == "timeout=1")
    finish(rc + 0, to); inside = 0
    next
}
!inside || kind == "script" { next }
/^1\.\.[0-9]+/ { p = $0; sub(/^1\.\./, "", p); plan = p + 0; next }
/^Bail out!/ { bail = 1; next }
/^(not )?ok [0-9]+/ {
    if ($0 ~ /#[ \t]*[Ss][Kk][Ii][Pp]/) { skip++; print "SKIP " name ": " $0 }
    else if ($1 == "ok" || $0 ~ /#[ \t]*([Tt][Oo][Dd][Oo]|XFAIL)/) ok++
    else { nok++; print "FAIL " name ": " $0 }
}
END {
    if (inside) {   # cut short: what it printed still counts
        if (kind != "script") { passed += ok; failed += nok; skipped += skip }
        fail(name ": no end marker (VM died or deadline)")
    }
    printf "COUNTS %d %d %d %d\n", passed, failed, skipped, started
}' <<<"$channel")

read -r _ passed failed skipped started < <(grep '^COUNTS ' <<<"$summary")
notes=$(grep -v '^COUNTS ' <<<"$summary" || true)
# Entries the VM never got to (boot failure, crash, deadline).
if [ "$started" -lt "${#entries[@]}" ]; then
    n=$((${#entries[@]} - started))
    failed=$((failed + n))
    notes+=$'\n'"FAIL $n of ${#entries[@]} tests never started"
fi
if [ -n "$deadline_hit" ]; then
    failed=$((failed + 1)); notes+=$'\n'"FAIL overall deadline of ${timeout}s"
fi
if [ -n "$boot_hit" ]; then
    failed=$((failed + 1)); notes+=$'\n'"FAIL boot: no /init within ${boot_timeout}s"
elif ! grep -q '^@@gpunvme INIT' "$log"; then
    failed=$((failed + 1)); notes+=$'\n'"FAIL boot: the VM never reached /init"
fi

# Kernel log: the dmesg dump if the VM got that far, else whatever the
# console caught (a panic, a hang).
klog=$(awk '/^@@gpunvme END dmesg$/ { inside = 0 } inside { print }
            /^@@gpunvme BEGIN dmesg$/ { inside = 1 }' <<<"$channel")
if ! grep -q '^@@gpunvme END dmesg$' <<<"$channel"; then
    klog=$(grep -v '^@@gpunvme' "$log" || true)
fi
# Reports from before the kernel started /init come from the kernel's own
# boot (no module or test of ours has run yet: gpunvme is never built in).
# They are shown loudly and counted as skipped, not passed; everything from
# /init on fails the run.
boot_part=$(sed -n '1,/Run \/init as init process/p' <<<"$klog")
if grep -q 'Run /init as init process' <<<"$klog"; then
    run_part=$(sed -n '/Run \/init as init process/,$p' <<<"$klog")
else
    boot_part="" run_part=$klog
fi
# One known report of the kernel's own, only with --hotplug: Linux 7.3's
# pciehp_unconfigure_device() takes pci_rescan_remove_lock while its IRQ
# thread holds ctrl->reset_lock, drops reset_lock to unbind the slot's
# drivers and takes it again under pci_rescan_remove_lock, so lockdep
# reports a circular dependency on every hot-unplug (reproduced with no
# gpunvme code loaded). For such a report (its stack frames and locks name
# no gpunvme code) the lines that would fail the scan (the WARNING and its
# Call Trace) are left out and it is shown as a skip (lockdep is off for
# the rest of that boot); every other line, including other messages
# printed in the middle of it, is scanned as usual.
known_pciehp=0
if [ "$hotplug" = 1 ]; then
    run_part=$(awk '
        function flush(   i, mine) {
            mine = blk ~ /pciehp_unconfigure_device/ && blk ~ /&ctrl->reset_lock/ &&
                   blk ~ /pci_rescan_remove_lock/ && ours !~ /gpunvme/
            known += mine
            for (i = 1; i <= n; i++)
                if (!mine || lines[i] !~ /WARNING: possible circular locking|Call Trace:/)
                    print lines[i]
            n = 0; blk = ""; ours = ""; inblk = 0
        }
        /WARNING: possible circular locking dependency detected/ { if (inblk) flush(); inblk = 1 }
        inblk {
            lines[++n] = $0; blk = blk "\n" $0
            # stack frames ("fn+0x1/0x2") and lock lines ("(name){...}-{4:4}")
            if ($0 ~ /\+0x[0-9a-f]+\/0x[0-9a-f]+|\}-\{[0-9]+:[0-9]+\}/) ours = ours "\n" $0
            if ($0 ~ /<\/TASK>/) flush()
            next
        }
        { print }
        END { if (inblk) flush(); print "@@known " known + 0 }' <<<"$run_part")
    known_pciehp=$(tail -n1 <<<"$run_part" | awk '{ print $2 }')
    run_part=$(sed '$d' <<<"$run_part")
fi
if [ -n "$early_crash" ]; then
    skipped=$((skipped + 1))
    notes+=$'\n'"SKIP a first boot crashed before /init (before any gpunvme code; console in $log.boot1), booted again:"
    notes+=$'\n'"$(sed 's/^/    /' <<<"$early_crash")"
fi
boot_bad=$(grep -E "$KLOG_BAD" <<<"$boot_part" || true)
bad=$(grep -E "$KLOG_BAD" <<<"$run_part" || true)
if [ -n "$boot_bad" ]; then
    skipped=$((skipped + 1))
    notes+=$'\n'"SKIP kernel log during early boot (before /init, before any gpunvme code) was not clean:"
    notes+=$'\n'"$(head -n 12 <<<"$boot_bad" | sed 's/^/    /')"
fi
if [ "$known_pciehp" -gt 0 ]; then
    skipped=$((skipped + 1))
    notes+=$'\n'"SKIP kernel log: $known_pciehp lockdep report(s) of pciehp's own lock order at hot-unplug (pciehp_unconfigure_device re-takes ctrl->reset_lock under pci_rescan_remove_lock; no gpunvme frame) not counted; lockdep was off after it"
fi
if [ -n "$bad" ]; then
    failed=$((failed + 1))
    notes+=$'\n'"FAIL kernel log clean:"
    notes+=$'\n'"$(head -n 40 <<<"$bad" | sed 's/^/    /')"
elif [ -z "$boot_bad" ]; then
    passed=$((passed + 1))
fi

echo "# run.sh: console log $log"
[ -z "$keep_images" ] || echo "# run.sh: disk images kept: $imgdir/gpunvme0.img $imgdir/kernel0.img"
if [ -n "$(tr -d '[:space:]' <<<"$notes")" ]; then
    echo "# run.sh: failures and skips:"
    sed '/^$/d; s/^/#   /' <<<"$notes"
fi
line="$passed passed, $failed failed"
[ "$skipped" -eq 0 ] || line+=", $skipped skipped"
echo "$line"
[ "$failed" -eq 0 ]
