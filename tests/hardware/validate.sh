#!/usr/bin/env bash
# shellcheck disable=SC2317  # the helpers below run through step/check
# SPDX-License-Identifier: GPL-2.0-only
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
#   --owner-mode M      every step runs in shared mode (the default queue
#                       pairs, each command checked by the module's relay);
#                       M decides owner mode (--owner: raw queue pairs,
#                       controller-wide DMA authority bounded only by the
#                       IOMMU):
#                       auto (default): where GET_INFO offers it with a
#                         translating IOMMU, the CPU steps run again with
#                         --owner and must pass, and the GPU's --owner run is
#                         tried (refused on many GPUs: recorded, not a
#                         failure); where it is not offered, the claim must
#                         be refused (EPERM) and the reason is recorded
#                       require: owner mode must be offered and every owner
#                         step must pass, GPU included; with the module's
#                         allow_unsafe_no_iommu=1 and no translating IOMMU
#                         this claims anyway, which TAINTS THE KERNEL
#                       skip: no owner step
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
SKIP_BUILD='' SKIP_GPU='' OWNER_MODE=auto QUEUES=4 DEPTH=64 BLOCKS='' RESULTS='' KEEP_BOUND=''
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
        --owner-mode) OWNER_MODE=${2:?}; shift ;;
        --gpu-mode) die "--gpu-mode is gone with UAPI version 2 (no direct/bridged pairs): GPU runs use shared pairs, and --owner-mode auto|require|skip decides the raw (owner mode) runs" ;;
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
case $OWNER_MODE in auto|require|skip) ;; *) die "--owner-mode is auto, require or skip" ;; esac
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
    echo "kdir: $KDIR"; echo "owner mode: $OWNER_MODE; gpu queues $QUEUES, depth $DEPTH"
    echo "cmdline: $(cat /proc/cmdline)"
    echo "lockdown: $(cat /sys/kernel/security/lockdown 2>/dev/null || echo 'unknown (no /sys/kernel/security/lockdown)')"
    echo "iommu groups: $(find /sys/kernel/iommu_groups -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)"
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
    step "kernel tree can build gpunvme" "the kernel build tree $KDIR is missing, has no Rust support, or wants another rustc/clang: the lines above name both versions (rust/README.md: Requirements)" \
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
    "$GPUNVME" list -o json | python3 -c '
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
        "$GPUNVME" bench --block-device "$KBLK" --qd 1,32 --qpairs 1 --runtime 1s -o json > "$RESULTS/bench-kernel.json"
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
step "gpunvme bind" "see the log: 'is in use: ...' names the mount, swap, holder or pid (free it first); 'gpunvme did not bind' (the kernel log says why: not ready within CAP.TO, fatal status, admin timeout)" \
    "$GPUNVME" bind "$BDF"
step "gpunvme list (bound)" "the CLI cannot read sysfs" "$GPUNVME" list
check "listed as bound to gpunvme" "gpunvme list does not show $BDF on gpunvme with a /dev/gpunvme node" grep -Eq "^$BDF .*gpunvme .*/dev/gpunvme[0-9]" "$LAST_LOG"
step "gpunvme info" "GET_INFO failed: 'Permission denied' means the node's file mode keeps you out (root-only unless a udev rule); EINVAL means a CLI built for UAPI version 1 (make userspace); ENODEV means the controller was unbound meanwhile" "$GPUNVME" info "$BDF"
"$GPUNVME" info "$BDF" -o json > "$RESULTS/info.json" 2>&1
read -r LBA_SIZE CAPACITY IOMMU OWNER_OK SHARED_OK NODE < <(python3 -c '
import json, sys
i = json.load(open(sys.argv[1]))
ns = [n for n in i["namespaces"] if n["nsid"] == int(sys.argv[2])]
m = i.get("modes") or {}
print(ns[0]["lba_size"] if ns else 0, ns[0]["capacity_lbas"] if ns else 0, i.get("iommu_mode") or "unknown",
      int(bool(m.get("owner"))), int(bool(m.get("shared"))), i.get("node") or "-")' "$RESULTS/info.json" "$NSID" 2>/dev/null || echo "0 0 unknown 0 0 -")
check "namespace $NSID exists with a usable format" "GET_INFO lists no namespace $NSID (see $RESULTS/info.json): pick another --nsid" test "${LBA_SIZE:-0}" -gt 0
check "the scratch range fits the namespace" "LBAs $LBA..$((LBA + COUNT - 1)) are beyond namespace $NSID's $CAPACITY blocks" test $((LBA + COUNT)) -le "${CAPACITY:-0}"
check "shared mode is offered (no other file owns the controller)" "GET_INFO lacks the shared mode: another process owns the controller (owner mode); close it first" test "$SHARED_OK" = 1
log "# namespace $NSID: $CAPACITY blocks of $LBA_SIZE bytes; IOMMU: $IOMMU; owner mode offered: $([ "$OWNER_OK" = 1 ] && echo yes || echo no)"
LOCKDOWN=$(sed -n 's/.*\[\([a-z]*\)\].*/\1/p' /sys/kernel/security/lockdown 2>/dev/null)
LOCKDOWN=${LOCKDOWN:-unknown}
case $IOMMU in strict|lazy) TRANSLATING=1 ;; *) TRANSLATING='' ;; esac

# ---- 5. the CPU path in shared mode: write, verify, and prove verify can fail ----
R=("$BDF" --namespace-id "$NSID" --start-block "$LBA" --block-count "$COUNT")
used_pair() { # KIND LOG: the summary in LOG names a KIND (shared or raw) pair
    grep -q " on $1 qid [0-9]" "$2" || { echo "no 'on $1 qid N' in $2" >&2; return 1; }
}
step "write pattern (shared pair)" "a write through a shared queue pair failed: the NVMe status is in the log (with DNR: the module's checks refused it; see rust/README.md 'A command completes with Invalid Field ...'); a timeout: the relay did not hand it on (rust/bridge/bridge.md)" \
    "$GPUNVME" write "${R[@]}" --pattern "$SEED"
check "the default queue pair is a shared one" "the write's summary does not say 'on shared qid N': this CLI is not UAPI version 2's" used_pair shared "$LAST_LOG"
step "verify pattern (shared pair)" "the data read back differs from what was written (first mismatch in the log), or the read failed" "$GPUNVME" verify "${R[@]}" --pattern "$SEED"
verify_must_fail() {
    if "$GPUNVME" verify "$@"; then
        echo "verify with the wrong seed passed: it cannot tell data apart" >&2
        return 1
    fi
    return 0
}
step "verify with a wrong seed fails (negative control)" "verify accepted the wrong pattern: no later 'verified' can be trusted" verify_must_fail "${R[@]}" --pattern $((SEED + 1))
must_fail_with() { # PATTERN CMD...: CMD fails, and its output matches PATTERN
    local pat=$1 out rc; shift
    out=$("$@" 2>&1); rc=$?
    echo "$out"
    if [ $rc -eq 0 ]; then
        echo "validate: this had to fail (with '$pat') but succeeded" >&2
        return 1
    fi
    grep -Eq "$pat" <<<"$out" || { echo "validate: it failed, but not with '$pat'" >&2; return 1; }
}
step "a shared pair refuses a read past the namespace's end (LBA Out of Range)" "the read of LBA $CAPACITY (one past the end) did not fail with LBA Out of Range: shared mode's range check (rust/bridge/validate.rs) is broken, or the relay hung" \
    must_fail_with 'LBA Out of Range' "$GPUNVME" read "$BDF" --namespace-id "$NSID" --start-block "$CAPACITY" --block-count 1 --no-range-check
NSNODE=''
if [ "$NODE" != - ] && [ "$NSID" -ge 1 ] && [ "$NSID" -le 4 ]; then
    NSNODE=${NODE}n$NSID
    check "namespace node $NSNODE exists" "namespace $NSID should have a node of its own ($NSNODE): see dmesg" test -c "$NSNODE"
    step "verify through the namespace node $NSNODE" "a file of the namespace node could not read its own namespace: see the log" \
        "$GPUNVME" verify "$NSNODE" --namespace-id "$NSID" --start-block "$LBA" --block-count "$COUNT" --pattern "$SEED"
    step "the namespace node refuses owner mode" "CLAIM_OWNER on a namespace node must fail with EPERM ('a namespace node gives shared mode only'): a namespace-limited file could otherwise take the whole controller" \
        must_fail_with 'CLAIM_OWNER.*Operation not permitted' "$GPUNVME" read "$NSNODE" --namespace-id "$NSID" --start-block "$LBA" --block-count 1 --owner
fi

# ---- 5b. owner mode (raw pairs) where the IOMMU bounds it, else proof it is refused --
klog_since_start() { dmesg 2>/dev/null | tail -n +"$((DMESG_START + 1))"; }
klog_has() { # (not a pipe into grep -q: with pipefail, its early exit would fail the pipe)
    grep -Eq "$1" <<<"$(klog_since_start)" || { echo "no kernel log line matching '$1' since the start" >&2; return 1; }
}
OWNER_RUN=''
if [ "$OWNER_MODE" != skip ]; then
    if [ "$OWNER_OK" = 1 ] && [ -n "$TRANSLATING" ]; then
        OWNER_RUN=1
    elif [ "$OWNER_OK" = 1 ]; then
        log "# owner mode is offered although the IOMMU is '$IOMMU': the module was loaded with allow_unsafe_no_iommu=1; a claim TAINTS THE KERNEL and the owner could make the controller DMA anywhere in memory"
        check "the bind log says the IOMMU check is waived" "GET_INFO offers owner mode with IOMMU '$IOMMU', but the kernel log has no 'allowed by allow_unsafe_no_iommu' line: the module's owner policy is broken" \
            klog_has 'owner mode \(raw access\) allowed by allow_unsafe_no_iommu'
        if [ "$OWNER_MODE" = require ]; then
            OWNER_RUN=1
        else
            log "# owner steps skipped: reload gpunvme without allow_unsafe_no_iommu, or rerun with --owner-mode require to claim anyway (taints)"
        fi
    else
        # Not offered: the claim itself must be refused, and the log says why.
        KLOG_MARK=$(klog_since_start | wc -l)
        step "owner claim refused (EPERM), as GET_INFO says" "GET_INFO does not offer owner mode, yet CLAIM_OWNER did not fail with EPERM: the module's owner policy is broken" \
            must_fail_with 'CLAIM_OWNER.*Operation not permitted' "$GPUNVME" read "$BDF" --namespace-id "$NSID" --start-block "$LBA" --block-count 1 --owner
        WHY=$(klog_since_start | tail -n +"$((KLOG_MARK + 1))" | grep -o 'CLAIM_OWNER: .*' | tail -n 1)
        log "# owner mode refused here (IOMMU '$IOMMU', lockdown '$LOCKDOWN'): ${WHY:-no CLAIM_OWNER line in the kernel log}"
        if [ -z "$TRANSLATING" ] || [ "$LOCKDOWN" = integrity ] || [ "$LOCKDOWN" = confidentiality ]; then
            check "the kernel log says why the claim was refused" "the kernel log has no 'CLAIM_OWNER: IOMMU mode is ...' (or lockdown) line: see $RESULTS/dmesg.txt" \
                klog_has 'CLAIM_OWNER: (IOMMU mode is|refused under kernel lockdown)'
        elif [ "$LOCKDOWN" = none ]; then
            check "owner mode is offered to root with a translating IOMMU and no lockdown" "IOMMU '$IOMMU', lockdown none, running as root, yet GET_INFO does not offer owner mode (${WHY:-no CLAIM_OWNER line}): file an issue with the results" false
        fi
        if [ "$OWNER_MODE" = require ]; then
            check "owner mode is available (--owner-mode require)" "owner mode is refused here: ${WHY:-see dmesg}. It needs CAP_SYS_RAWIO, no kernel lockdown (now: $LOCKDOWN) and a translating IOMMU (now: $IOMMU; boot with intel_iommu=on iommu.strict=1 or iommu.strict=1 on AMD)" false
        fi
    fi
fi
OWNER_FAIL="the claim failed or the raw pair's I/O did: 'Operation not permitted' (dmesg 'CLAIM_OWNER: ...' says which check), 'Device or resource busy' (another process has queue pairs or buffers on the controller: close it), an NVMe status or a timeout (IOMMU faults in dmesg?)"
if [ -n "$OWNER_RUN" ]; then
    step "write pattern (raw pair, owner mode)" "$OWNER_FAIL" "$GPUNVME" write "${R[@]}" --pattern $((SEED + 2)) --owner
    check "the --owner write used a raw pair" "the write's summary does not say 'on raw qid N'" used_pair raw "$LAST_LOG"
    if [ "$IOMMU" = lazy ]; then
        check "the claim warned about the lazy IOMMU" "a claim in a lazy (DMA-FQ) domain must log 'CLAIM_OWNER: lazy IOMMU ...': see dmesg" klog_has 'CLAIM_OWNER: lazy IOMMU'
        log "# lazy IOMMU: an unmapped buffer stays reachable by the controller until the next IOTLB flush; boot with iommu.strict=1 to close that window"
    fi
    step "verify pattern (raw pair, owner mode)" "data through the raw pair differs, or the read failed: $OWNER_FAIL" "$GPUNVME" verify "${R[@]}" --pattern $((SEED + 2)) --owner
    step "a shared pair reads what the owner wrote" "after the owner's file closed, a shared pair could not be created (ownership outlived the file) or read other data: see the log" \
        "$GPUNVME" verify "${R[@]}" --pattern $((SEED + 2))
    step "gpunvme bench (shared and raw pairs)" "the polled benchmark failed: see the log ($OWNER_FAIL)" \
        "$GPUNVME" bench "$BDF" --namespace-id "$NSID" --qd 1,8,32 --qpairs 1,4 --owner --runtime 1s -o json > "$RESULTS/bench.json"
    has_owner_ratios() {
        python3 -c 'import json, sys; r = json.load(open(sys.argv[1])).get("owner_ratios"); sys.exit(0 if r else 1)' "$RESULTS/bench.json"
    }
    check "bench.json has shared/raw ratios" "bench --owner wrote no owner_ratios to $RESULTS/bench.json" has_owner_ratios
else
    step "gpunvme bench (shared pairs)" "the polled benchmark failed: see the log" \
        "$GPUNVME" bench "$BDF" --namespace-id "$NSID" --qd 1,8,32 --qpairs 1,4 --runtime 1s -o json > "$RESULTS/bench.json"
fi

# ---- 6. the GPU path ----------------------------------------------------------------
sample_counters() { # copy the relay's debugfs counters until told to stop
    local out=$RESULTS/relay-counters.txt d f
    while [ ! -e "$RESULTS/.stop-sampling" ]; do
        for d in /sys/kernel/debug/gpunvme-"$BDF"-q*; do
            [ -d "$d" ] || continue
            { echo "== $(date +%T.%N) ${d##*/}"; for f in "$d"/*; do echo "${f##*/} $(cat "$f")"; done; } > "$out.tmp" && cat "$out.tmp" >> "$out"
        done
        sleep 0.2
    done
    rm -f "$out.tmp"
}
relay_counters_clean() { # no sample shows a rejected SQE or a bad doorbell value
    local f=$RESULTS/relay-counters.txt
    if [ ! -s "$f" ]; then
        log "# no relay counters were sampled (is debugfs mounted on /sys/kernel/debug?)"
        return 0
    fi
    awk '($1 == "sqes_rejected" || $1 == "bad_doorbell_values") && $2 != 0 { print "validate: " $0; bad = 1 } END { exit bad }' "$f" >&2
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
gpu_run_must_fail() { # the wrong seed: the run fails, and it is the data check that failed
    local out
    if out=$(gpu_run "$@"); then
        echo "$out"
        echo "read-verify with the wrong seed reported no mismatch: it cannot tell data apart" >&2
        return 1
    fi
    echo "$out"
    grep -Eq '(^|[^0-9])[1-9][0-9]* mismatches' <<<"$out" || { echo "validate: the run failed, but not with mismatches" >&2; return 1; }
}
routes_are() { # KIND: the last log has route lines, each for a KIND (shared or raw) pair
    awk -v k="$1:" '/^route q[0-9]+ / { n++; if ($3 != k) bad++ } END { exit !(n > 0 && bad == 0) }' "$LAST_LOG"
}
if [ -z "$SKIP_GPU" ]; then
    step "gpunvme probe, with the round-trip self-test on a shared pair" "the probe failed: if a 'FAILED' self-test line is in the log, the GPU and the CPU do not see each other's stores in that region through that route and memory type (tests/hardware/README.md, step 6); otherwise see the log" \
        "$GPUNVME" probe "$BDF" --code-objects "$CODE_OBJECTS"
    check "a GPU runtime and a GPU were found" "no GPU: install ROCm (libamdhip64.so) or the NVIDIA driver (libcuda.so.1) and check access to /dev/kfd and /dev/dri (render group) or /dev/nvidia*; or rerun with --skip-gpu" \
        grep -q '^GPUs:$' "$LAST_LOG"
    "$GPUNVME" probe "$BDF" --code-objects "$CODE_OBJECTS" -o json > "$RESULTS/probe.json" 2>&1
    BLOCKS=${BLOCKS:-$((4096 / LBA_SIZE > 0 ? 4096 / LBA_SIZE : 1))}
    CMDS=$((COUNT / (QUEUES * BLOCKS)))
    check "the GPU run fits the scratch range" "--count $COUNT is too small for $QUEUES queues x $BLOCKS blocks per command" test "$CMDS" -ge 1
    check "one GPU command moves at most 8 KiB" "--blocks $BLOCKS x $LBA_SIZE bytes: the device library builds PRP1+PRP2 only (kernels/include/gpunvme/nvme.h)" \
        test $((BLOCKS * LBA_SIZE)) -le 8192
    G=("$BDF" --namespace-id "$NSID" --qpairs "$QUEUES" --qd $((DEPTH - 1)) --cmds "$CMDS" --cmd-blocks "$BLOCKS" --start-block "$LBA" --code-objects "$CODE_OBJECTS")
    rm -f "$RESULTS/.stop-sampling"
    sample_counters & SAMPLER=$!
    step "gpu-run write (shared pairs)" "the GPU could not write: the log says which import route failed and why, and the status (< 0: errno, e.g. -110 no completion before the deadline; > 0: NVMe status, with DNR from shared mode's checks); see Troubleshooting in kernels/README.md and rust/README.md, and $RESULTS/relay-counters.txt" \
        gpu_run "${G[@]}" --kernel write --pattern "$SEED"
    check "the GPU drove shared pairs" "gpu-run's 'route qN ...' lines do not all say shared: this CLI is not UAPI version 2's" routes_are shared
    # One pattern for the CPU and the GPU: what the GPU wrote, the CLI verifies.
    step "the CPU verifies what the GPU wrote (gpunvme verify, same --pattern)" "the GPU's data differs from \`gpunvme pattern\`'s (first mismatch in the log): the GPU wrote elsewhere or other bytes" \
        "$GPUNVME" verify "$BDF" --namespace-id "$NSID" --start-block "$LBA" --block-count $((QUEUES * CMDS * BLOCKS)) --pattern "$SEED"
    step "gpu-run read-verify (shared pairs), same seed: 0 mismatches" "the SSD DMAed other data into VRAM than the GPU wrote, or commands failed: see the log" \
        gpu_run "${G[@]}" --kernel read-verify --pattern "$SEED"
    step "gpu-run read-verify with a wrong seed reports mismatches (negative control)" "read-verify did not report mismatches for the wrong seed: no GPU verification can be trusted" \
        gpu_run_must_fail "${G[@]}" --kernel read-verify --pattern $((SEED + 1))
    step "gpu-run sweep (shared pairs)" "the read sweep failed: see the log (latency per batch is printed when it works)" \
        gpu_run "${G[@]}" --kernel sweep --pattern "$SEED"
    stop_sampler
    check "relay counters: no SQE rejected, no bad doorbell value" "the relay refused commands of the example kernels or saw out-of-range doorbell cells (lines above, $RESULTS/relay-counters.txt): see rust/bridge/bridge.md" relay_counters_clean
    SAMPLES=$(grep -c '^== ' "$RESULTS/relay-counters.txt" 2>/dev/null)
    log "# relay counters: ${SAMPLES:-0} samples in $RESULTS/relay-counters.txt"
    if [ -n "$OWNER_RUN" ]; then
        OWNER_GPU_WHY="raw pairs on the GPU need it to map the controller's BAR0 doorbell page (a peer-to-peer route and a runtime that maps peer MMIO): the log says which import route failed and why"
        if [ "$OWNER_MODE" = require ]; then
            step "gpu-run read-verify (raw pairs, owner mode)" "$OWNER_GPU_WHY" gpu_run "${G[@]}" --kernel read-verify --pattern "$SEED" --owner
            OWNER_GPU=1
        else
            n=$((n + 1))
            logf=$RESULTS/$(printf '%02d' "$n")-gpu-run-owner-attempt.log
            if gpu_run "${G[@]}" --kernel read-verify --pattern "$SEED" --owner > "$logf" 2>&1; then
                pass "gpu-run read-verify (raw pairs, owner mode): the GPU rings the controller's doorbell itself on this machine"
                OWNER_GPU=1
            elif grep -Eq '(^|[^0-9])[1-9][0-9]* mismatches' "$logf"; then
                # It ran, and read other data: corruption, not a refusal.
                fail_now "gpu-run read-verify (raw pairs, owner mode)" "$logf" "the raw pairs ran but read other data than the shared write put there: keep the results, check dmesg for IOMMU faults"
            else
                pass "gpu-run read-verify (raw pairs, owner mode) refused here, as it may be (why: $logf); shared pairs are the path to use"
                OWNER_GPU=''
            fi
            LAST_LOG=$logf
        fi
        if [ -n "$OWNER_GPU" ]; then
            check "the GPU drove raw pairs" "gpu-run --owner's 'route qN ...' lines do not all say raw" routes_are raw
            step "gpu-run sweep (raw pairs, owner mode)" "the raw read-verify worked but the sweep did not: see the log" \
                gpu_run "${G[@]}" --kernel sweep --pattern "$SEED" --owner
        fi
    fi
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
        cmp <("$GPUNVME" pattern --pattern "$SEED" --start-block "$LBA" --block-count "$COUNT" --block-size "$LBA_SIZE") \
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
