#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# first_contact.sh: the first run of gpunvme on a GPU it has never run on
# (every AMD GPU, so far), in one command, with one JSON report to attach
# to an issue. It runs, in order, and records every command, its exit
# status, its JSON and its stderr:
#   the environment (kernel, command line, lockdown, ROCm or CUDA, KFD
#     targets, the GPU and SSD on PCI, this checkout's commit);
#   gpunvme info and gpunvme probe DEVICE: the GPU runtime and GPUs, and
#     the round-trip self-test of the queue memory on a shared queue pair
#     (per region: import route, memory type, pass or what failed);
#   a short gpu-run write (the group API), the CPU's verify of what the GPU
#     wrote, gpu-run read-verify with the same seed (0 mismatches) and
#     with another (must report mismatches), a per-thread API read-verify
#     of 16 KiB commands (PRP lists); every gpu-run runs the self-test
#     again on its own queues;
#   the latency sweep: gpu-run --kernel sweep at QD 1, 8 and 32;
#   the kernel log lines of the run (amdgpu, gpunvme, IOMMU).
# A failed step does not stop the others (each GPU wait has a deadline);
# the report says which failed first.
#
# IT WRITES TO THE SSD: LBAs --lba .. --lba + 64 x (4096 / LBA size) - 1
# (256 KiB) of --nsid; it refuses to run without --yes-destroy-data. The
# controller must be bound to gpunvme already (tests/hardware/README.md,
# steps 4-5: modprobe gpunvme; gpunvme bind BDF).
#
# Usage (as root, in a checkout after `make userspace kernels`):
#   tests/hardware/first_contact.sh BDF --yes-destroy-data [options]
#
# Options:
#   --nsid N            namespace (default 1)
#   --lba N             first LBA of the scratch range (default 0)
#   --seed N            pattern seed (default 42)
#   --gpu N             GPU index in its runtime (default 0)
#   --with-owner        also try a raw pair (owner mode) read-verify; a
#                       refusal is recorded, not counted as a failure
#   --report FILE       where the JSON goes (default
#                       /var/tmp/gpunvme-first-contact-<bdf>-<time>.json)
#   -h, --help
# Environment: GPUNVME (the CLI, default userspace/target/release/gpunvme),
# CODE_OBJECTS (default kernels/build); FIRST_CONTACT_TEST=1 lets its test
# (first_contact_test.sh) run it unprivileged against a stand-in CLI.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
GPUNVME=${GPUNVME:-$ROOT/userspace/target/release/gpunvme}
CODE_OBJECTS=${CODE_OBJECTS:-$ROOT/kernels/build}

usage() { sed -n '4,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "first_contact: $*" >&2; exit 2; }

BDF='' YES='' NSID=1 LBA=0 SEED=42 GPU=0 OWNER='' REPORT=''
while [ $# -gt 0 ]; do
    case $1 in
        --yes-destroy-data) YES=1 ;;
        --nsid) NSID=${2:?}; shift ;;
        --lba) LBA=${2:?}; shift ;;
        --seed) SEED=${2:?}; shift ;;
        --gpu) GPU=${2:?}; shift ;;
        --with-owner) OWNER=1 ;;
        --report) REPORT=${2:?}; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) [ -z "$BDF" ] || die "one controller at a time (got $BDF and $1)"; BDF=$1 ;;
    esac
    shift
done
[ -n "$BDF" ] || { usage >&2; die "no controller given: the PCI address of the spare SSD bound to gpunvme (gpunvme list)"; }
[[ $BDF =~ ^[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] && BDF=0000:$BDF
[[ $BDF =~ ^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]] || die "$BDF is not a PCI address like 0000:01:00.0"
BDF=${BDF,,}
for v in NSID LBA SEED GPU; do
    [[ ${!v} =~ ^[0-9]+$ ]] || die "--${v,,} must be a number, not '${!v}'"
done
[ -n "$YES" ] || die "this writes 256 KiB at LBA $LBA of namespace $NSID on $BDF: add --yes-destroy-data if that data may be lost"
# The kit's own test runs it unprivileged against a stand-in CLI.
[ "$(id -u)" = 0 ] || [ -n "${FIRST_CONTACT_TEST:-}" ] || die "run as root: /dev/gpunvme* and the GPU's import routes need it"
command -v python3 >/dev/null || die "python3 is needed to write the JSON report"
[ -x "$GPUNVME" ] || die "no gpunvme CLI at $GPUNVME: make userspace (or set GPUNVME)"

REPORT=${REPORT:-/var/tmp/gpunvme-first-contact-$BDF-$(date +%Y%m%d-%H%M%S).json}
tmp=$(mktemp -d) || die "mktemp failed"
trap 'rm -rf "$tmp"' EXIT
DMESG_START=$(dmesg 2>/dev/null | wc -l)
n=0 counted=0 failed=0

# step NAME EXPECT OPTIONAL CMD...: run CMD; it passes when it exits EXPECT
# (0, or 3 for the negative control). An OPTIONAL step's failure is
# recorded, not counted.
step() {
    local name=$1 expect=$2 optional=$3; shift 3
    n=$((n + 1))
    local s=$tmp/$(printf '%02d' "$n")
    printf '%s' "$name" >"$s.name"
    printf '%s\0' "$@" >"$s.cmd"
    echo "$expect $optional" >"$s.meta"
    "$@" >"$s.out" 2>"$s.err"
    local rc=$?
    echo "$rc" >"$s.rc"
    [ -n "$optional" ] || counted=$((counted + 1))
    if [ "$rc" = "$expect" ]; then
        echo "ok $n - $name"
    elif [ -n "$optional" ]; then
        echo "ok $n - $name # not counted: exit $rc ($(tail -1 "$s.err"))"
    else
        failed=$((failed + 1))
        echo "not ok $n - $name # exit $rc, want $expect: $(tail -1 "$s.err")"
    fi
    return "$rc"
}

echo "# first contact with $BDF (namespace $NSID, LBA $LBA, seed $SEED, GPU $GPU)"
step "gpunvme version" 0 "" "$GPUNVME" --version
step "controllers (gpunvme list)" 0 "" "$GPUNVME" list -o json
if ! step "controller bound to gpunvme (gpunvme info)" 0 "" "$GPUNVME" info "$BDF" -o json; then
    echo "# $BDF is not usable: load the module and bind it (tests/hardware/README.md, steps 4-5)"
fi
LBA_SIZE=$(python3 - "$tmp/03.out" "$NSID" <<'EOF'
import json, sys
try:
    info = json.load(open(sys.argv[1]))
    print(next(n["lba_size"] for n in info["namespaces"] if n["nsid"] == int(sys.argv[2])))
except Exception:
    print(512)
EOF
)
B=$((4096 / LBA_SIZE)); [ "$B" -ge 1 ] || B=1
TOTAL=$((64 * B))
C=(--code-objects "$CODE_OBJECTS" --gpu "$GPU")
R=(-n "$NSID" -s "$LBA")

step "self-test and probe (gpunvme probe DEVICE)" 0 "" "$GPUNVME" probe "$BDF" "${C[@]}" -o json
step "gpu-run write, group API, 2 pairs x 32 commands" 0 "" \
    "$GPUNVME" gpu-run "$BDF" --kernel write "${R[@]}" -p "$SEED" --qpairs 2 --qd 16 --cmds 32 --cmd-blocks "$B" "${C[@]}" -o json
step "the CPU verifies what the GPU wrote (gpunvme verify)" 0 "" \
    "$GPUNVME" verify "$BDF" "${R[@]}" -c "$TOTAL" -p "$SEED" -o json
step "gpu-run read-verify, same seed: 0 mismatches" 0 "" \
    "$GPUNVME" gpu-run "$BDF" --kernel read-verify "${R[@]}" -p "$SEED" --qpairs 2 --qd 16 --cmds 32 --cmd-blocks "$B" "${C[@]}" -o json
step "gpu-run read-verify, another seed: mismatches (exit 3)" 3 "" \
    "$GPUNVME" gpu-run "$BDF" --kernel read-verify "${R[@]}" -p "$((SEED + 1))" --qpairs 2 --qd 16 --cmds 32 --cmd-blocks "$B" "${C[@]}" -o json
step "gpu-run read-verify, per-thread API, 16 KiB commands (PRP lists)" 0 "" \
    "$GPUNVME" gpu-run "$BDF" --kernel read-verify --api thread "${R[@]}" -p "$SEED" --qpairs 2 --qd 8 --cmds 8 --cmd-blocks "$((4 * B))" "${C[@]}" -o json
for qd in 1 8 32; do
    step "latency sweep, QD $qd, 64 rounds" 0 "" \
        "$GPUNVME" gpu-run "$BDF" --kernel sweep "${R[@]}" --qpairs 1 --qd "$qd" --cmds "$qd" --rounds 64 --cmd-blocks "$B" "${C[@]}" -o json
done
if [ -n "$OWNER" ]; then
    step "gpu-run read-verify, raw pairs (owner mode)" 0 optional \
        "$GPUNVME" gpu-run "$BDF" --kernel read-verify --owner "${R[@]}" -p "$SEED" --qpairs 2 --qd 16 --cmds 32 --cmd-blocks "$B" "${C[@]}" -o json
fi

# The environment, and the kernel log of the run.
env_file=$tmp/environment.json
dmesg 2>/dev/null | tail -n +"$((DMESG_START + 1))" >"$tmp/dmesg.txt"
{
    echo "kernel=$(uname -a)"
    echo "cmdline=$(cat /proc/cmdline 2>/dev/null)"
    echo "lockdown=$(cat /sys/kernel/security/lockdown 2>/dev/null || echo unknown)"
    echo "commit=$(git -C "$ROOT" log -1 --format='%H %s' 2>/dev/null)"
    echo "dirty=$(git -C "$ROOT" status --short 2>/dev/null | wc -l) file(s) changed since the commit"
    echo "gpunvme_srcversion=$(cat /sys/module/gpunvme/srcversion 2>/dev/null || echo 'not loaded')"
    echo "rocm=$(cat /opt/rocm/.info/version 2>/dev/null || echo none)"
    echo "nvidia=$(cat /proc/driver/nvidia/version 2>/dev/null | head -1 || true)"
    echo "HSA_FORCE_FINE_GRAIN_PCIE=${HSA_FORCE_FINE_GRAIN_PCIE-unset}"
    echo "kfd_targets=$(cat /sys/class/kfd/kfd/topology/nodes/*/properties 2>/dev/null | sed -n 's/^gfx_target_version //p' | tr '\n' ' ')"
    echo "pci_gpus=$(lspci -D -nn 2>/dev/null | grep -Ei 'vga|display|3d controller' | tr '\n' ';')"
    echo "pci_ssd=$(lspci -D -nn -s "$BDF" 2>/dev/null)"
    echo "code_objects=$(find "$CODE_OBJECTS" -name 'selftest.*' 2>/dev/null | wc -l) self-test code object(s) in $CODE_OBJECTS"
} >"$tmp/environment.txt"

python3 - "$tmp" "$REPORT" "$BDF" "$NSID" "$LBA" "$SEED" "$GPU" "$LBA_SIZE" <<'EOF'
import glob, json, os, sys, time
tmp, report, bdf, nsid, lba, seed, gpu, lba_size = sys.argv[1:]
def text(p):
    try:
        return open(p, errors="replace").read()
    except OSError:
        return ""
steps = []
for meta in sorted(glob.glob(os.path.join(tmp, "[0-9][0-9].meta"))):
    s = meta[:-5]
    expect, *opt = text(meta).split()
    out, rc = text(s + ".out"), int(text(s + ".rc") or -1)
    try:
        parsed = json.loads(out)
    except ValueError:
        parsed = None
    steps.append({
        "name": text(s + ".name"),
        "command": [a for a in text(s + ".cmd").split("\0") if a],
        "exit_status": rc,
        "expected_exit_status": int(expect),
        "optional": bool(opt),
        "ok": rc == int(expect),
        "output": parsed if parsed is not None else out,
        "stderr": text(s + ".err").splitlines(),
    })
env = dict(l.split("=", 1) for l in text(os.path.join(tmp, "environment.txt")).splitlines() if "=" in l)
counted = [s for s in steps if not s["optional"]]
bad = [s["name"] for s in counted if not s["ok"]]
doc = {
    "report": "gpunvme first contact",
    "version": 1,
    "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    "controller": bdf, "nsid": int(nsid), "lba": int(lba), "seed": int(seed),
    "gpu": int(gpu), "lba_size": int(lba_size),
    "environment": env,
    "steps": steps,
    "summary": {"passed": len(counted) - len(bad), "failed": len(bad),
                "first_failure": bad[0] if bad else None},
    "kernel_log": text(os.path.join(tmp, "dmesg.txt")).splitlines(),
}
with open(report, "w") as f:
    json.dump(doc, f, indent=2)
    f.write("\n")
EOF
[ -s "$REPORT" ] || die "could not write $REPORT"
echo "$((counted - failed)) passed, $failed failed"
echo "# report: $REPORT (attach it to an issue)"
[ "$failed" = 0 ]
