#!/usr/bin/env bash
# shellcheck disable=SC2317  # the helpers below run through step/check
# SPDX-License-Identifier: GPL-2.0
# validate.sh: the hardware validation plan of tests/hardware/README.md, run
# step by step on a real machine with a spare NVMe SSD (and a GPU). It stops
# at the first failure, says what that failure means, and leaves every
# command's output in a results directory.
#
# IT WRITES TO THE SSD: it refuses to run without the controller's PCI
# address and --yes-destroy-data, and refuses a controller that holds the
# root file system, a mounted file system or active swap.
#
# Usage (as root, from anywhere):
#   tests/hardware/validate.sh BDF --yes-destroy-data [options]
#
# Options:
#   --nsid N            namespace to use (default 1)
#   --lba N             first LBA of the scratch range (default 0)
#   --count N           blocks in the scratch range (default 2048); every
#                       write of this script stays inside [lba, lba + count)
#   --seed N            pattern seed (default 42)
#   --kdir DIR          kernel build tree (default /lib/modules/$(uname -r)/build)
#   --skip-build        use the binaries already built (their freshness is
#                       still checked)
#   --skip-gpu          validate the module and the CPU paths only
#   --gpu-mode M        auto (default), direct or bridged: the mode of the
#                       main GPU runs; with auto, direct and bridged are each
#                       tried once more on their own (direct may be refused
#                       on this machine: recorded, not a failure)
#   --queues N --depth D --blocks B   GPU run shape (default 4 queues of
#                       depth 64; B = 4096 / LBA size blocks per command)
#   --results DIR       where to write (default /var/tmp/gpunvme-validate-<bdf>-<time>)
#   --keep-bound        leave the controller bound to gpunvme at the end
#                       (default: hand it back to the nvme driver and
#                       cross-check the data through it)
#   -h, --help
#
# Output: one "ok N - step" / "not ok N - step" line per step, then
# "N passed, N failed"; results/summary.txt has the same lines.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GPUNVME=$ROOT/userspace/target/release/gpunvme
KO=$ROOT/gpunvme.ko
CODE_OBJECTS=$ROOT/kernels/build

usage() { sed -n '4,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "validate: $*" >&2; exit 2; }

BDF='' YES='' NSID=1 LBA=0 COUNT=2048 SEED=42 KDIR=/lib/modules/$(uname -r)/build
SKIP_BUILD='' SKIP_GPU='' GPU_MODE=auto QUEUES=4 DEPTH=64 BLOCKS='' RESULTS='' KEEP_BOUND=''
while [ $# -gt 0 ]; do
    case $1 in
        --yes-destroy-data) YES=1 ;;
        --nsid) NSID=${2:?}; shift ;;
        --lba) LBA=${2:?}; shift ;;
        --count) COUNT=${2:?}; shift ;;
        --seed) SEED=${2:?}; shift ;;
        --kdir) KDIR=${2:?}; shift ;;
        --skip-build) SKIP_BUILD=1 ;;
        --skip-gpu) SKIP_GPU=1 ;;
        --gpu-mode) GPU_MODE=${2:?}; shift ;;
        --queues) QUEUES=${2:?}; shift ;;
        --depth) DEPTH=${2:?}; shift ;;
        --blocks) BLOCKS=${2:?}; shift ;;
        --results) RESULTS=${2:?}; shift ;;
        --keep-bound) KEEP_BOUND=1 ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$BDF" ] || die "one controller at a time (got $BDF and $1)"; BDF=$1 ;;
    esac
    shift
done

[ -n "$BDF" ] || { usage >&2; die "no controller given: pass the PCI address of the spare NVMe SSD (see \`gpunvme list\`)"; }
[ -n "$YES" ] || die "this writes to the SSD at $BDF (LBAs $LBA..$((LBA + COUNT - 1)) of namespace $NSID, or wherever --lba/--count say): add --yes-destroy-data if its data may be lost"
[[ $BDF =~ ^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] && BDF=0000:$BDF
[[ $BDF =~ ^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] || die "$BDF is not a PCI address like 0000:01:00.0"
BDF=${BDF,,}
for v in NSID LBA COUNT SEED QUEUES DEPTH; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v,,} must be a number, not '${!v}'"
done
[ -z "$BLOCKS" ] || [[ $BLOCKS =~ ^[1-9][0-9]*$ ]] || die "--blocks must be a positive number"
case $GPU_MODE in auto|direct|bridged) ;; *) die "--gpu-mode is auto, direct or bridged" ;; esac
[ "$(id -u)" = 0 ] || die "run as root: loading the module, binding the controller and opening /dev/gpunvme* need it"

RESULTS=${RESULTS:-/var/tmp/gpunvme-validate-$BDF-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS" || die "cannot create $RESULTS"
SUMMARY=$RESULTS/summary.txt
: > "$SUMMARY"
DEV=/sys/bus/pci/devices/$BDF
n=0 passed=0 failed=0

log() { echo "$*" | tee -a "$SUMMARY"; }
SAMPLER=
stop_sampler() {
    [ -n "$SAMPLER" ] || return 0
    touch "$RESULTS/.stop-sampling"
    wait "$SAMPLER" 2>/dev/null
    rm -f "$RESULTS/.stop-sampling"
    SAMPLER=
}
trap stop_sampler EXIT
finish() {
    stop_sampler
    log "1..$n"
    log "$passed passed, $failed failed"
    log "results: $RESULTS"
    [ "$failed" = 0 ]
    exit
}
fail_now() {
    local name=$1 logf=$2 why=$3
    failed=$((failed + 1))
    log "not ok $n - $name"
    [ -n "$logf" ] && [ -s "$logf" ] && { echo "# last lines of $logf:"; tail -n 15 "$logf" | sed 's/^/#   /'; }
    while IFS= read -r line; do log "# $line"; done <<<"$why"
    dmesg 2>/dev/null | tail -n +"$((DMESG_START + 1))" > "$RESULTS/dmesg.txt"
    log "# kernel log since the start: $RESULTS/dmesg.txt"
    finish
}
pass() { passed=$((passed + 1)); log "ok $n - $1"; }

# step NAME WHY-IF-IT-FAILS CMD...: run CMD, output to results/NN-NAME.log.
step() {
    local name=$1 why=$2; shift 2
    n=$((n + 1))
    local logf
    logf=$RESULTS/$(printf '%02d' "$n")-${name//[^A-Za-z0-9]/-}.log
    echo "# $n: $*" | tee -a "$SUMMARY"
    { echo "\$ $*"; "$@"; } > "$logf" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        fail_now "$name" "$logf" "exit status $rc. $why"
    fi
    pass "$name"
    LAST_LOG=$logf
}
# check NAME WHY CONDITION-CMD...: a check without its own log.
check() {
    local name=$1 why=$2; shift 2
    n=$((n + 1))
    "$@" || fail_now "$name" "" "$why"
    pass "$name"
}

DMESG_START=$(dmesg 2>/dev/null | wc -l)
LAST_LOG=
{
    echo "date: $(date -Is)"; echo "host: $(uname -a)"; echo "bdf: $BDF nsid: $NSID lba: $LBA count: $COUNT seed: $SEED"
    echo "kdir: $KDIR"; echo "gpu mode: $GPU_MODE, queues $QUEUES, depth $DEPTH"
    echo "cmdline: $(cat /proc/cmdline)"
    git -C "$ROOT" log -1 --format='commit: %H %s' 2>/dev/null
    git -C "$ROOT" status --short 2>/dev/null | sed 's/^/dirty: /'
} > "$RESULTS/environment.txt"
log "# validating $BDF; results in $RESULTS"

# ---- 1. the controller is the one you think, and not in use -----------------
namespaces_of() { # block devices of the controller's namespaces and their partitions
    local d name p
    for d in "$DEV"/nvme/nvme*/nvme*n*; do
        name=${d##*/}
        # One path of a multipath namespace (nvme0c0n1): its block device is nvme0n1.
        [[ $name =~ ^nvme([0-9]+)c[0-9]+n([0-9]+)$ ]] && name=nvme${BASH_REMATCH[1]}n${BASH_REMATCH[2]}
        [[ $name =~ ^nvme[0-9]+n[0-9]+$ ]] || continue
        echo "$name"
        for p in /sys/class/block/"$name"/"$name"p*; do
            [ -e "$p" ] && echo "${p##*/}"
        done
    done | sort -u
}
is_nvme_class() { [ "$(cat "$DEV/class" 2>/dev/null)" = 0x010802 ]; }
not_root_disk() {
    local src disks ns
    src=$(findmnt -no SOURCE / 2>/dev/null)
    disks=$(lsblk -no NAME,PKNAME -s "$src" 2>/dev/null | awk '{print $1; print $2}' | sed 's/^[^[:alnum:]]*//')
    for ns in $(namespaces_of); do
        if grep -qx "$ns" <<<"$disks"; then
            echo "the root file system ($src) lives on $ns, a namespace of $BDF" >&2
            return 1
        fi
    done
    return 0
}
not_mounted_or_swap() {
    local ns busy=0
    for ns in $(namespaces_of); do
        if grep -q "^/dev/$ns " /proc/mounts || grep -q "^/dev/$ns " /proc/swaps; then
            echo "/dev/$ns is mounted or used as swap" >&2
            busy=1
        fi
    done
    return "$busy"
}
have_python() { command -v python3 >/dev/null; }
check "python3 is installed" "the script reads the CLI's JSON with python3" have_python
check "controller exists" "no PCI device $BDF: see \`lspci -D\` or \`gpunvme list\` for the right address" test -d "$DEV"
check "controller is NVMe" "$BDF is not an NVMe controller (PCI class $(cat "$DEV/class" 2>/dev/null), want 0x010802)" is_nvme_class
check "controller does not hold the root file system" "refusing: this is the boot disk. Use a spare SSD." not_root_disk
check "no namespace mounted or swapped on" "unmount its file systems and swapoff first (gpunvme bind refuses too)" not_mounted_or_swap

# ---- 2. build (the exact kernel toolchain), and prove the binaries are fresh --
if [ -z "$SKIP_BUILD" ]; then
    step "kernel tree can build gpunvme" "the kernel build tree $KDIR is missing, has no Rust support, or wants another rustc/clang: the lines above name both versions (README: Hardware and kernel requirements)" \
        bash "$ROOT/tests/dkms/check-toolchain.sh" "$KDIR"
    read -r -a MAKEVARS < <(bash "$ROOT/tests/dkms/check-toolchain.sh" --make-vars "$KDIR")
    step "build gpunvme.ko" "the module did not build against $KDIR: see the log" \
        make -C "$KDIR" M="$ROOT" "${MAKEVARS[@]}" modules
    step "build the gpunvme CLI" "cargo build failed: see the log (needs Rust from rustup)" make -C "$ROOT" userspace
    if [ -z "$SKIP_GPU" ]; then
        step "build the GPU code objects" "make kernels failed (needs clang-19 and lld-19)" make -C "$ROOT" kernels
    fi
fi
newer_than() { # FILE DIR...: FILE exists and no source file under DIR is newer
    local f=$1; shift
    [ -f "$f" ] || { echo "$f does not exist" >&2; return 1; }
    local newer
    newer=$(find "$@" -type f \( -name '*.rs' -o -name '*.c' -o -name '*.h' -o -name '*.hip' -o -name Kbuild -o -name Cargo.toml \) -newer "$f" -print -quit)
    [ -z "$newer" ] || { echo "$newer is newer than $f: rebuild" >&2; return 1; }
}
vermagic_matches() {
    local vm
    vm=$(modinfo -F vermagic "$KO" 2>/dev/null)
    [ "${vm%% *}" = "$(uname -r)" ] || { echo "gpunvme.ko is for '${vm%% *}', the running kernel is $(uname -r)" >&2; return 1; }
}
check "gpunvme.ko is newer than its sources" "stale module: rebuild it (the field report lost days to a stale binary)" newer_than "$KO" "$ROOT/rust" "$ROOT/uapi" "$ROOT/Kbuild"
check "gpunvme.ko is built for the running kernel" "build it against /lib/modules/\$(uname -r)/build (--kdir)" vermagic_matches
check "the gpunvme CLI is newer than its sources" "stale CLI: make userspace" newer_than "$GPUNVME" "$ROOT/userspace/gpunvme" "$ROOT/userspace/gpunvme-cli" "$ROOT/userspace/gpunvme-gpu" "$ROOT/userspace/gpunvme-sys" "$ROOT/uapi"
if [ -z "$SKIP_GPU" ]; then
    check "GPU code objects exist" "no code objects in $CODE_OBJECTS: make kernels" test -d "$CODE_OBJECTS"
    for f in "$CODE_OBJECTS"/gfx*/*.o "$CODE_OBJECTS"/sm_*/*.ptx; do
        [ -e "$f" ] || continue
        newer_than "$f" "$ROOT/kernels/include" "$ROOT/kernels/examples" 2>>"$RESULTS/stale-objects.txt" || true
    done
    check "GPU code objects are newer than their sources" "stale code objects (see $RESULTS/stale-objects.txt): make kernels" \
        test ! -s "$RESULTS/stale-objects.txt"
fi
{ sha256sum "$KO" "$GPUNVME"; find "$CODE_OBJECTS" -name '*.o' -exec sha256sum {} + 2>/dev/null; modinfo "$KO"; "$GPUNVME" --version; } \
    > "$RESULTS/artifacts.txt" 2>&1

# ---- 3. what the kernel's driver sees first (read-only baseline) --------------
kernel_block_device() { # the namespace's block device while nvme drives it
    "$GPUNVME" list --json | python3 -c '
import json, sys
bdf, nsid = sys.argv[1], sys.argv[2]
for c in json.load(sys.stdin):
    if c["bdf"] == bdf and c["driver"] == "nvme":
        for ns in c["namespaces"]:
            if ns.endswith("n" + nsid):
                print("/dev/" + ns); sys.exit(0)
sys.exit(1)' "$BDF" "$NSID"
}
step "gpunvme list (before)" "the CLI cannot read sysfs: see the log" "$GPUNVME" list
if KBLK=$(kernel_block_device) && [ -b "$KBLK" ]; then
    step "kernel nvme baseline bench (read-only)" "the kernel's own driver cannot read $KBLK: the SSD or its slot has a problem before gpunvme is involved" \
        "$GPUNVME" bench --block-device "$KBLK" --qd 1,32 --qpairs 1 --duration-ms 1000 --json "$RESULTS/bench-kernel.json"
else
    log "# no kernel block device for namespace $NSID of $BDF now: no baseline"
fi

# ---- 4. load and bind -----------------------------------------------------------
load_module() {
    if [ -d /sys/module/gpunvme ]; then
        local have want
        have=$(cat /sys/module/gpunvme/srcversion 2>/dev/null)
        want=$(modinfo -F srcversion "$KO")
        [ "$have" = "$want" ] && { echo "gpunvme already loaded (srcversion $have, this build)"; return 0; }
        echo "another gpunvme module is loaded (srcversion $have, this build is $want): rmmod gpunvme first" >&2
        return 1
    fi
    insmod "$KO"
}
step "insmod gpunvme.ko" "'Unknown symbol _RNv...': built against another build of this kernel (rebuild); 'Invalid module format': another kernel version; 'Key was rejected by service' / lockdown: Secure Boot wants signed modules" load_module
check "gpunvme driver registered" "no /sys/bus/pci/drivers/gpunvme after insmod: see dmesg" test -d /sys/bus/pci/drivers/gpunvme
step "gpunvme bind" "see the log: 'in use by the kernel nvme driver' (unmount first); 'gpunvme did not bind' (the kernel log says why: not ready within CAP.TO, fatal status, admin timeout)" \
    "$GPUNVME" bind "$BDF"
step "gpunvme list (bound)" "the CLI cannot read sysfs" "$GPUNVME" list
check "listed as bound to gpunvme" "gpunvme list does not show $BDF on gpunvme with a /dev/gpunvme node" grep -Eq "^$BDF .*gpunvme .*/dev/gpunvme[0-9]" "$LAST_LOG"
step "gpunvme info" "GET_INFO failed: EPERM means not root (CAP_SYS_RAWIO); ENODEV means the controller was unbound meanwhile" "$GPUNVME" info "$BDF"
"$GPUNVME" info "$BDF" --json > "$RESULTS/info.json" 2>&1
read -r LBA_SIZE CAPACITY < <(python3 -c '
import json, sys
ns = [n for n in json.load(open(sys.argv[1]))["namespaces"] if n["nsid"] == int(sys.argv[2])]
print(ns[0]["lba_size"], ns[0]["capacity_lbas"]) if ns else print(0, 0)' "$RESULTS/info.json" "$NSID" 2>/dev/null || echo "0 0")
check "namespace $NSID exists with a usable format" "GET_INFO lists no namespace $NSID (see $RESULTS/info.json): pick another --nsid" test "${LBA_SIZE:-0}" -gt 0
check "the scratch range fits the namespace" "LBAs $LBA..$((LBA + COUNT - 1)) are beyond namespace $NSID's $CAPACITY blocks" test $((LBA + COUNT)) -le "${CAPACITY:-0}"
log "# namespace $NSID: $CAPACITY blocks of $LBA_SIZE bytes"

# ---- 5. the CPU paths: write, verify, and prove verify can fail ----------------
R=("$BDF" --nsid "$NSID" --lba "$LBA" --count "$COUNT")
step "write pattern (direct pair)" "a write through gpunvme's queue pair failed: the NVMe status is in the log" "$GPUNVME" write "${R[@]}" --pattern "$SEED"
step "verify pattern (direct pair)" "the data read back differs from what was written (first mismatch in the log), or the read failed" "$GPUNVME" verify "${R[@]}" --pattern "$SEED"
verify_must_fail() {
    if "$GPUNVME" verify "$@"; then
        echo "verify with the wrong seed passed: it cannot tell data apart" >&2
        return 1
    fi
    return 0
}
step "verify with a wrong seed fails (negative control)" "verify accepted the wrong pattern: no later 'verified' can be trusted" verify_must_fail "${R[@]}" --pattern $((SEED + 1))
step "write pattern (bridged pair)" "a write through a bridged pair failed: the bridge thread did not relay (see rust/bridge.md)" "$GPUNVME" write "${R[@]}" --pattern $((SEED + 2)) --bridged
step "verify pattern (bridged pair)" "data through the bridged pair differs or the read timed out" "$GPUNVME" verify "${R[@]}" --pattern $((SEED + 2)) --bridged
step "gpunvme bench (direct and bridged)" "the polled benchmark failed: see the log" \
    "$GPUNVME" bench "$BDF" --nsid "$NSID" --qd 1,8,32 --qpairs 1,4 --bridged --duration-ms 1000 --json "$RESULTS/bench.json"

# ---- 6. the GPU path ----------------------------------------------------------------
sample_counters() { # copy the bridge's debugfs counters until told to stop
    local out=$RESULTS/bridge-counters.txt d f
    while [ ! -e "$RESULTS/.stop-sampling" ]; do
        for d in /sys/kernel/debug/gpunvme-"$BDF"-q*; do
            [ -d "$d" ] || continue
            { echo "== $(date +%T.%N) ${d##*/}"; for f in "$d"/*; do echo "${f##*/} $(cat "$f")"; done; } > "$out.tmp" && cat "$out.tmp" >> "$out"
        done
        sleep 0.2
    done
    rm -f "$out.tmp"
}
gpu_run() { # gpu-run ARGS...; fails on a non-zero exit or a non-zero mismatch count
    local out rc
    out=$("$GPUNVME" gpu-run "$@" 2>&1); rc=$?
    echo "$out"
    [ $rc -eq 0 ] || return $rc
    if grep -Eiq '(^|[^0-9])[1-9][0-9]* mismatch|mismatch(es)?[ :=]+[1-9]' <<<"$out"; then
        echo "validate: mismatches reported" >&2
        return 1
    fi
}
gpu_run_must_fail() {
    if gpu_run "$@"; then
        echo "read-verify with the wrong seed reported no mismatch: it cannot tell data apart" >&2
        return 1
    fi
    return 0
}
if [ -z "$SKIP_GPU" ]; then
    step "gpunvme probe" "the probe itself failed: see the log" "$GPUNVME" probe
    check "a GPU runtime and a GPU were found" "no GPU: install ROCm (libamdhip64.so) or the NVIDIA driver (libcuda.so.1) and check access to /dev/kfd and /dev/dri (render group) or /dev/nvidia*; or rerun with --skip-gpu" \
        grep -q '^GPUs:$' "$LAST_LOG"
    "$GPUNVME" probe --json > "$RESULTS/probe.json" 2>&1
    BLOCKS=${BLOCKS:-$((4096 / LBA_SIZE > 0 ? 4096 / LBA_SIZE : 1))}
    CMDS=$((COUNT / (QUEUES * BLOCKS)))
    check "the GPU run fits the scratch range" "--count $COUNT is too small for $QUEUES queues x $BLOCKS blocks per command" test "$CMDS" -ge 1
    check "one GPU command moves at most 8 KiB" "--blocks $BLOCKS x $LBA_SIZE bytes: the device library builds PRP1+PRP2 only (kernels/include/gpunvme/nvme.h)" \
        test $((BLOCKS * LBA_SIZE)) -le 8192
    G=("$BDF" --queues "$QUEUES" --depth "$DEPTH" --cmds "$CMDS" --blocks "$BLOCKS" --slba "$LBA" --code-objects "$CODE_OBJECTS")
    rm -f "$RESULTS/.stop-sampling"
    sample_counters & SAMPLER=$!
    step "gpu-run write ($GPU_MODE)" "the GPU could not write: the log says which import route failed and why, and the status (< 0: errno, e.g. -110 no completion before the deadline; > 0: NVMe status); see README Troubleshooting" \
        gpu_run "${G[@]}" --kernel write --seed "$SEED" --mode "$GPU_MODE"
    step "gpu-run read-verify ($GPU_MODE), same seed: 0 mismatches" "the SSD DMAed other data into VRAM than the GPU wrote, or commands failed: see the log" \
        gpu_run "${G[@]}" --kernel read-verify --seed "$SEED" --mode "$GPU_MODE"
    step "gpu-run read-verify with a wrong seed reports mismatches (negative control)" "read-verify cannot fail: no GPU verification can be trusted" \
        gpu_run_must_fail "${G[@]}" --kernel read-verify --seed $((SEED + 1)) --mode "$GPU_MODE"
    step "gpu-run sweep ($GPU_MODE)" "the read sweep failed: see the log (latency per batch is printed when it works)" \
        gpu_run "${G[@]}" --kernel sweep --seed "$SEED" --mode "$GPU_MODE"
    if [ "$GPU_MODE" = auto ]; then
        step "gpu-run read-verify (bridged)" "the bridged path failed where auto worked: see the log and $RESULTS/bridge-counters.txt" \
            gpu_run "${G[@]}" --kernel read-verify --seed "$SEED" --mode bridged
        n=$((n + 1))
        logf=$RESULTS/$(printf '%02d' "$n")-gpu-run-direct-attempt.log
        if gpu_run "${G[@]}" --kernel read-verify --seed "$SEED" --mode direct > "$logf" 2>&1; then
            pass "gpu-run read-verify (direct): this machine has the direct doorbell path"
        else
            pass "gpu-run read-verify (direct) refused here, as it may be (why: $logf); the bridged path is the one to use"
        fi
    fi
    stop_sampler
fi

# ---- 7. give it back, and read the data through the kernel's driver ---------------
if [ -z "$KEEP_BOUND" ]; then
    # The GPU kernels' pattern (kernels/examples/example.h) is not the CLI's:
    # put the CLI's back so the kernel's driver can be checked against it.
    step "rewrite the pattern for the cross-check" "a write through gpunvme failed" "$GPUNVME" write "${R[@]}" --pattern "$SEED"
    step "gpunvme unbind --to-nvme" "the controller did not go back to the nvme driver: see the log and dmesg" "$GPUNVME" unbind --to-nvme "$BDF"
    wait_block_device() { for _ in $(seq 100); do KBLK=$(kernel_block_device) && [ -b "$KBLK" ] && return 0; sleep 0.1; done; return 1; }
    check "the nvme driver shows the namespace again" "no block device for namespace $NSID after 10 s: see dmesg" wait_block_device
    cross_check() {
        cmp <("$GPUNVME" pattern --seed "$SEED" --lba "$LBA" --count "$COUNT" --lba-size "$LBA_SIZE") \
            <(dd if="$KBLK" bs="$LBA_SIZE" skip="$LBA" count="$COUNT" iflag=direct status=none)
    }
    step "the kernel nvme driver reads what gpunvme wrote" "the data on the SSD is not what gpunvme's queues wrote (or dd failed): see the log" cross_check
    step "rmmod gpunvme" "the module is still in use (an open /dev/gpunvme* or an exported dma-buf)" rmmod gpunvme
fi

# ---- 8. the kernel log --------------------------------------------------------------
dmesg 2>/dev/null | tail -n +"$((DMESG_START + 1))" > "$RESULTS/dmesg.txt"
BAD_KLOG='WARNING:|BUG:|Oops|general protection|IO_PAGE_FAULT|DMAR: \[DMA|iommu.*fault'
klog_clean() { ! grep -Eiq "$BAD_KLOG" "$RESULTS/dmesg.txt"; }
check "kernel log has no WARNING, BUG, Oops or IOMMU fault" "see $RESULTS/dmesg.txt: $(grep -Eim3 "$BAD_KLOG" "$RESULTS/dmesg.txt" | tr '\n' ' ')" klog_clean
finish
