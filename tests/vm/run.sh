#!/usr/bin/env bash
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

Inside the VM: GPUNVME_BDF, KERNEL_NVME_BDF, EDU_BDF, GPUNVME_DIR=/opt/gpunvme
and GPUNVME_TEST_TIMEOUT are exported; PATH includes /opt/gpunvme; nvme.ko and
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
readonly GPUNVME_SLOT=04 KERNEL_NVME_SLOT=05 EDU_SLOT=06
readonly GPUNVME_BDF=0000:00:$GPUNVME_SLOT.0
readonly KERNEL_NVME_BDF=0000:00:$KERNEL_NVME_SLOT.0
readonly EDU_BDF=0000:00:$EDU_SLOT.0
readonly DISK_SIZE=64M

# Patterns in the kernel log that fail the run ("kernel log clean").
# Case-sensitive on purpose: the boot banners "kasan:"/"kfence:" and lockdep's
# "MAX_LOCKDEP_*" table are fine; their reports ("BUG: KASAN: ...") are not.
# The last pattern is a failed KUnit case or suite (KTAP in the kernel log,
# e.g. from a test module's kunit_test_suite at insmod).
readonly KLOG_BAD='WARNING:|BUG:|Oops|KASAN|KFENCE|possible circular locking|INFO: possible|inconsistent lock state|lockdep (disabled|off)|DEBUG_LOCKS_WARN_ON|Call Trace:|Kernel panic|general protection fault|UBSAN:|detected stalls|blocked for more than|^\[ *[0-9.]+\] +not ok [0-9]+ '

kdir= kimage= kmodules= keep_images= timeout=600 test_timeout=300 boot_timeout=120 log= append=
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

# ---- temp dir, cleanup -----------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-vm.XXXXXX")
qemu_pid=
cleanup() {
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill -KILL "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
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
GPUNVME_DIR=/opt/gpunvme
GPUNVME_TEST_TIMEOUT=$test_timeout
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
for d in gpunvme0 kernel0; do
    rm -f "$imgdir/$d.img"      # always fresh
    if command -v qemu-img >/dev/null; then
        qemu-img create -q -f raw "$imgdir/$d.img" "$DISK_SIZE"
    else
        truncate -s "$DISK_SIZE" "$imgdir/$d.img"   # raw = plain zeroed file
    fi
done

# ---- QEMU --------------------------------------------------------------------
cmdline="console=ttyS0 intel_iommu=on iommu.strict=1 loglevel=7 panic=-1 $append"
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
    -drive "file=$imgdir/gpunvme0.img,if=none,id=gpunvme0-disk,format=raw"
    -device "nvme,id=gpunvme0,serial=gpunvme0,drive=gpunvme0-disk,bus=pcie.0,addr=$GPUNVME_SLOT.0$gpunvme_opts"
    -drive "file=$imgdir/kernel0.img,if=none,id=kernel0-disk,format=raw"
    -device "nvme,id=kernel0,serial=kernel0,drive=kernel0-disk,bus=pcie.0,addr=$KERNEL_NVME_SLOT.0$kernel_opts"
    -device "edu,dma_mask=0xffffffffffffffff,bus=pcie.0,addr=$EDU_SLOT.0"
)
# shellcheck disable=SC2206 # word splitting is the documented contract
[ -z "${QEMU_EXTRA:-}" ] || qemu_args+=($QEMU_EXTRA)

echo "# run.sh: kernel $bzimage"
echo "# run.sh: console log $log"
echo "# run.sh: GPUNVME_BDF=$GPUNVME_BDF KERNEL_NVME_BDF=$KERNEL_NVME_BDF EDU_BDF=$EDU_BDF"
[ -z "$keep_images" ] || echo "# run.sh: disk images $imgdir/gpunvme0.img $imgdir/kernel0.img"
echo "# run.sh: $QEMU $(printf '%q ' "${qemu_args[@]}")"

start=$SECONDS
# The console goes to our stdout and, without the UART's \r, to the log.
exec {console_fd}> >(sed -u 's/\r$//' | tee -a "$log")
console_pid=$!
# stdin from /dev/null: QEMU leaves the terminal alone.
"$QEMU" "${qemu_args[@]}" </dev/null >&"$console_fd" 2>&1 &
qemu_pid=$!

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
elapsed=$((SECONDS - start))

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
boot_bad=$(grep -E "$KLOG_BAD" <<<"$boot_part" || true)
bad=$(grep -E "$KLOG_BAD" <<<"$run_part" || true)
if [ -n "$boot_bad" ]; then
    skipped=$((skipped + 1))
    notes+=$'\n'"SKIP kernel log during early boot (before /init, before any gpunvme code) was not clean:"
    notes+=$'\n'"$(head -n 12 <<<"$boot_bad" | sed 's/^/    /')"
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
