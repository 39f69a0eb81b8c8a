#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/dkms/debian-stock.sh: gpunvme through DKMS on Debian's own stock 7.3
# kernel, then tested on that kernel.
#  1. a Debian trixie root (debian-root.sh; cached in /var/cache/gpunvme/trixie)
#     with trixie's rustc/rust-src/bindgen/dkms/gcc-14 and Debian's
#     linux-headers-7.3.4+deb13-amd64 and linux-source-7.3;
#  2. the headers are put back as Debian ships them (no rust/*.rmeta), a wrong
#     rustc is refused naming the Debian package and version to install;
#  3. tests/dkms/install.sh (what `make dkms-install` runs) in the root: DKMS
#     rebuilds the missing Rust artifacts (rust-artifacts.sh; cached per
#     kernel release in /var/cache/gpunvme/rust-artifacts, a bind mount) and
#     builds and installs gpunvme;
#  4. QEMU boots Debian's own vmlinuz (linux-image-7.3.4+deb13-amd64) with its
#     own nvme modules and the DKMS-built gpunvme.ko, and runs the module, I/O
#     and shared-mode selftests (tests/vm/run.sh --kernel --modules); then once
#     more under Debian's IOMMU default (lazy): the owner claim, shared pairs.
# KTAP; the last line sums everything: "N passed, N failed[, N skipped]".
# Needs root, `make selftests userspace` (tests/selftests/build, the CLI).
#   DEBIAN_KREL        kernel release (default 7.3.4+deb13-amd64)
#   GPUNVME_CACHE      cache root (default /var/cache/gpunvme)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
KREL=${DEBIAN_KREL:-7.3.4+deb13-amd64}
B=$ROOT/tests/selftests/build
CLI=$ROOT/userspace/target/release/gpunvme
T=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-debian.XXXXXX")
mounts=()
cleanup() {
    local i
    for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "${mounts[i]}" 2>/dev/null || true; done
    [ -n "${GPUNVME_DEBIAN_KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

PLAN=9
n=0 pass=0 fail=0 skip=0
echo "KTAP version 1"
echo "1..$PLAN"
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n $1"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n $1"; }
result() { if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; fi; }
tailog() { tail -n "${2:-25}" "$1" | sed 's/^/# /'; }
finish() {
    [ "$n" -eq "$PLAN" ] || { echo "# ran $n of $PLAN steps"; fail=$((fail + PLAN - n)); }
    echo "# Totals: pass:$pass fail:$fail skip:$skip"
    if [ "$skip" -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
    [ "$fail" -eq 0 ]; exit
}
t0=$SECONDS

# ---- 1: the trixie root ----------------------------------------------------------------
s=$SECONDS
R=$(bash "$HERE/debian-root.sh" 2>"$T/root.log" | tail -n1)
if [ -n "$R" ] && [ -f "$R/.complete" ]; then
    ok "trixie root $R ($((SECONDS - s))s)"
    sed 's/^/# /' "$T/root.log"; sed 's/^/# package: /' "$R/.versions"
else
    not_ok "trixie root (debian-root.sh)"; tailog "$T/root.log" 40; finish
fi
# One run at a time in a root (its DKMS state, /root/gpunvme, the mounts).
exec 9>"$R/.run.lock"
flock -w 3600 9 || { not_ok "another debian-stock.sh has held $R/.run.lock for an hour"; finish; }
KDIR=/usr/src/linux-headers-$KREL
in_root() { chroot "$R" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
mkdir -p "$CACHE/rust-artifacts" "$R/var/cache/gpunvme/rust-artifacts"
mount -t proc proc "$R/proc" && mounts+=("$R/proc")
mount --bind /dev "$R/dev" && mounts+=("$R/dev")
# The rebuilt Rust artifacts outlive the root: the host's cache, bind-mounted.
mount --bind "$CACHE/rust-artifacts" "$R/var/cache/gpunvme/rust-artifacts" &&
    mounts+=("$R/var/cache/gpunvme/rust-artifacts")

# ---- 2: the headers as Debian ships them ------------------------------------------------
# Copy this tree's source into the root (tracked and new files, no build products).
rm -rf "$R/root/gpunvme"; mkdir -p "$R/root/gpunvme"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- Kbuild Makefile dkms.conf rust uapi tests/dkms |
    xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
    tar --null -T - -cf -) | tar -C "$R/root/gpunvme" -xf -
in_root /root/gpunvme/tests/dkms/rust-artifacts.sh --remove "$KDIR" >"$T/reset.log" 2>&1
shipped=$(in_root dpkg -L "linux-headers-$KREL" | grep -cE '/rust/[^/]*\.(rmeta|so)$')
if [ "$shipped" = 0 ] && [ ! -e "$R$KDIR/rust/libkernel.rmeta" ] && [ ! -e "$R$KDIR/rust/libcore.rmeta" ]; then
    ok "linux-headers-$KREL ships no Rust artifacts (0 rust/*.rmeta, *.so), and none are installed now"
else
    not_ok "the headers lack the Rust artifacts ($shipped shipped; $(ls "$R$KDIR"/rust/*.rmeta 2>/dev/null | wc -l) present)"
fi
want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"/\1/p' "$R$KDIR/.config")
echo "# headers' .config: $(grep -E '^CONFIG_(CC_VERSION_TEXT|RUSTC_VERSION_TEXT|BINDGEN_VERSION_TEXT|MODULE_SIG|MODULE_SIG_FORCE|SECURITY_LOCKDOWN_LSM|LOCK_DOWN_KERNEL_FORCE_[A-Z]*|INTEL_IOMMU_DEFAULT_ON|IOMMU_DEFAULT_[A-Z_]*|KUNIT)=' "$R$KDIR/.config" | tr '\n' ' ')"

# ---- 3, 4: another rustc is refused, naming Debian's package and version ---------------------
rver=$(in_root dpkg-query -W -f='${Version}' rustc)
printf '#!/bin/sh\necho "rustc 1.93.0 (254b59607 2026-01-19)"\n' >"$R/tmp/rustc-other"; chmod +x "$R/tmp/rustc-other"
in_root env RUSTC=/tmp/rustc-other /root/gpunvme/tests/dkms/check-toolchain.sh --prepare "$KDIR" >"$T/wrong.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -qF "apt install rustc=$rver" "$T/wrong.log" && grep -qF "$want" "$T/wrong.log" &&
   [ ! -e "$R$KDIR/rust/libkernel.rmeta" ]; then
    ok "a rustc other than '$want' is refused: the message says 'apt install rustc=$rver'"
else
    not_ok "a wrong rustc is refused, naming 'apt install rustc=$rver' (exit $rc)"
fi
grep 'error' "$T/wrong.log" | head -n 4 | sed 's/^/# /'
bver=$(in_root dpkg-query -W -f='${Version}' bindgen)
wantb=$(sed -n 's/^CONFIG_BINDGEN_VERSION_TEXT="\(.*\)"/\1/p' "$R$KDIR/.config")
printf '#!/bin/sh\necho "bindgen 0.72.0"\n' >"$R/tmp/bindgen-other"; chmod +x "$R/tmp/bindgen-other"
in_root env BINDGEN=/tmp/bindgen-other /root/gpunvme/tests/dkms/check-toolchain.sh --prepare "$KDIR" >"$T/wrongb.log" 2>&1; rc=$?
if [ "$rc" != 0 ] && grep -qF "apt install bindgen=$bver" "$T/wrongb.log" && grep -qF "'$wantb'" "$T/wrongb.log" &&
   [ ! -e "$R$KDIR/rust/libkernel.rmeta" ]; then
    ok "a bindgen other than '$wantb' is refused: the message says 'apt install bindgen=$bver'"
else
    not_ok "a wrong bindgen is refused, naming 'apt install bindgen=$bver' (exit $rc)"
fi
grep 'error' "$T/wrongb.log" | head -n 2 | sed 's/^/# /'

# ---- 5: DKMS (make dkms-install's script) in the root ---------------------------------------
s=$SECONDS
in_root env KDIR="/lib/modules/$KREL/build" KERNELRELEASE="$KREL" \
    bash /root/gpunvme/tests/dkms/install.sh >"$T/install.out" 2>"$T/install.log"; rc=$?
dkms_s=$((SECONDS - s))
grep -E '^(rust-artifacts|check-toolchain): ' "$T/install.log" | sed 's/^/# /'
ko=$(tail -n1 "$T/install.out")
if [ "$rc" = 0 ] && [ -n "$ko" ] && [ -f "$R$ko" ] && [ -f "$R$KDIR/rust/libkernel.rmeta" ]; then
    ok "dkms add/build/install of gpunvme for Debian's $KREL, Rust artifacts restored (${dkms_s}s)"
else
    not_ok "dkms add/build/install of gpunvme for Debian's $KREL (exit $rc)"; tailog "$T/install.log" 40
fi

# ---- 6: the module is for that kernel, built by its rustc, every symbol resolved ------------
mod=$T/gpunvme.ko
case $ko in
    *.ko.xz)  xz -dc "$R$ko" >"$mod" ;;
    *.ko.zst) zstd -qdc "$R$ko" >"$mod" ;;
    *.ko)     cp "$R$ko" "$mod" ;;
esac
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$ROOT/dkms.conf")
mklog=$R/var/lib/dkms/gpunvme/$ver/$KREL/x86_64/log/make.log
vermagic=$(modinfo -F vermagic "$mod" 2>/dev/null)
comment=$(readelf -p .comment "$mod" 2>/dev/null | grep -o 'rustc version [^)]*)' | sort -u | head -n1)
if [ -s "$mod" ] && [ "${vermagic%% *}" = "$KREL" ] && [ -n "$comment" ] && [[ $want == "rustc ${comment#rustc version }"* ]] &&
   [ -f "$mklog" ] && ! grep -q 'undefined!' "$mklog"; then
    ok "gpunvme.ko: vermagic '$vermagic', $comment, no undefined symbol at modpost"
else
    not_ok "gpunvme.ko for $KREL (vermagic '$vermagic', '$comment', kernel '$want', make.log $mklog)"
    [ -f "$mklog" ] && grep -E 'undefined!|error' "$mklog" | head -n 10 | sed 's/^/# /'
fi
echo "# modinfo: depends='$(modinfo -F depends "$mod" 2>/dev/null)' sig_id='$(modinfo -F sig_id "$mod" 2>/dev/null)' signer='$(modinfo -F signer "$mod" 2>/dev/null)'"

# ---- 7: Debian's own kernel image and nvme modules for the VM --------------------------------
img=$R/opt/linux-image
vmlinuz=$R$(readlink "$img/vmlinuz")   # links made by debian-root.sh
kmods=$R$(readlink "$img/modules")
M=$T/modroot/lib/modules/$KREL
mkdir -p "$M"
cp "$kmods"/modules.builtin* "$M/" 2>/dev/null
# nvme and what it depends on, decompressed (busybox insmod/modprobe read plain .ko).
declare -A path_of=()
while IFS= read -r f; do b=${f##*/}; b=${b%%.ko*}; path_of[${b//-/_}]=$f; done < <(find "$kmods/kernel" -name '*.ko*')
todo=(nvme) done_mods=()
while [ ${#todo[@]} -gt 0 ]; do
    m=${todo[0]}; todo=("${todo[@]:1}"); m=${m//-/_}
    [[ " ${done_mods[*]} " == *" $m "* ]] && continue
    f=${path_of[$m]:-}; [ -n "$f" ] || continue   # built in
    done_mods+=("$m")
    rel=${f#"$kmods/"}; dest=$M/${rel%.xz}; dest=${dest%.zst}
    mkdir -p "$(dirname "$dest")"
    case $f in *.xz) xz -dc "$f" >"$dest" ;; *.zst) zstd -qdc "$f" >"$dest" ;; *) cp "$f" "$dest" ;; esac
    IFS=, read -r -a deps <<<"$(modinfo -F depends "$dest")"
    todo+=("${deps[@]}")
done
depmod -b "$T/modroot" "$KREL" 2>"$T/depmod.log"
if [ -f "$vmlinuz" ] && [[ " ${done_mods[*]} " == *" nvme "* ]] && [[ " ${done_mods[*]} " == *" nvme_core "* ]] &&
   grep -q 'nvme.ko:' "$M/modules.dep"; then
    ok "Debian's vmlinuz-$KREL and its modules ${done_mods[*]} (decompressed, depmod)"
else
    not_ok "Debian's vmlinuz-$KREL and its nvme modules (found: ${done_mods[*]:-none})"; tailog "$T/depmod.log"
fi

# ---- 8: the VM on Debian's kernel: module, I/O and shared-mode suites ------------------------
tests=("$ROOT/tests/vm/vm-env.sh" "$B/gpunvme_module_test.sh" "$B/gpunvme_info_test" "$B/gpunvme_qpair_test"
       "$B/gpunvme_trust_test" "$B/gpunvme_relay_test" "$B/gpunvme_dmabuf_test" "$B/gpunvme_owner_test"
       "$B/gpunvme_io_test.sh")
missing=()
for f in "${tests[@]}" "$CLI"; do [ -e "$f" ] || missing+=("$f"); done
if [ ${#missing[@]} -gt 0 ]; then
    not_ok "VM on Debian's kernel: missing ${missing[*]} (make selftests userspace)"; finish
fi
echo "# subtest: VM booting Debian's own $KREL with the DKMS-built gpunvme.ko"
s=$SECONDS
# tsc=unstable: under TCG the clocksource watchdog marks the TSC unstable
# about 2 s into boot, and Debian's kernel then live-patches the
# sched_clock static branch while the other vCPU runs it; TCG can execute
# the stale int3 ("Oops: int3" in sched_clock_cpu, seen once in CI). Starting
# with the TSC unstable leaves nothing to patch.
bash "$ROOT/tests/vm/run.sh" --kernel "$vmlinuz" --modules "$T/modroot/lib/modules" --append "tsc=unstable" \
    --file "$mod" --file "$CLI" -- "${tests[@]}" >"$T/vm.log" 2>&1; rc=$?
vm_s=$((SECONDS - s))
grep -aE '^(TAP |KTAP |1\.\.|ok |not ok |# |[0-9]+ passed)' "$T/vm.log" | sed 's/^/    /'
[ "$rc" = 0 ] || grep -aE 'taint|lockdown|Lockdown|module verification|DMAR|iommu' "$T/vm.log" | head -n 20 | sed 's/^/# console: /'
grep -aE 'module verification failed|loading out-of-tree module taints|Kernel is locked down|iommu: Default domain type|DMA domain TLB invalidation policy' "$T/vm.log" |
    sed -E 's/^\[ *[0-9.]+\] //' | sort -u | sed 's/^/# stock kernel: /'
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/vm.log" | tail -n1)
if [ -n "$line" ]; then
    p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    sk=0; grep -q skipped <<<"$line" && sk=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + sk))
    echo "# counted: $line"
    result "$rc" "VM suite on Debian's $KREL with the DKMS-built module (${vm_s}s)"
else
    not_ok "VM suite on Debian's $KREL (no result line, exit $rc)"; tailog "$T/vm.log" 60
fi
# ---- 9: Debian's IOMMU defaults: translated, lazy ------------------------------------------
# run.sh boots with intel_iommu=on iommu.strict=1; Debian's kernel has the
# Intel IOMMU on by default already (INTEL_IOMMU_DEFAULT_ON_INTGPU_OFF) but
# lazy (IOMMU_DEFAULT_DMA_LAZY): iommu.strict=0 (the later one wins) gives
# exactly its default. The owner test works out the answer from sysfs
# (lazy: the claim works, with the module's warning); shared mode works.
echo "# subtest: Debian's IOMMU default (lazy, DMA-FQ): owner claim and shared queue pairs"
s=$SECONDS
bash "$ROOT/tests/vm/run.sh" --kernel "$vmlinuz" --modules "$T/modroot/lib/modules" --append "iommu.strict=0 tsc=unstable" \
    --file "$mod" -- "$B/gpunvme_owner_test" "$B/gpunvme_qpair_test" >"$T/vm2.log" 2>&1; rc=$?
vm2_s=$((SECONDS - s))
grep -aE '^(TAP |KTAP |1\.\.|ok |not ok |# |[0-9]+ passed)' "$T/vm2.log" | sed 's/^/    /'
grep -aE 'iommu: Default domain type|DMA domain TLB invalidation policy|CLAIM_OWNER' "$T/vm2.log" |
    sed -E 's/^\[ *[0-9.]+\] //' | sort -u | sed 's/^/# Debian default: /'
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$T/vm2.log" | tail -n1)
if [ -n "$line" ] && grep -aq 'DMA domain TLB invalidation policy: lazy mode' "$T/vm2.log"; then
    p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    sk=0; grep -q skipped <<<"$line" && sk=$(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + sk))
    echo "# counted: $line"
    result "$rc" "VM on Debian's $KREL under its IOMMU default (lazy): owner claim and shared pairs (${vm2_s}s)"
else
    not_ok "VM on Debian's $KREL under its IOMMU default (lazy) (no result line or not lazy, exit $rc)"; tailog "$T/vm2.log" 40
fi
echo "# times: dkms ${dkms_s:-?}s, VM ${vm_s:-?}s + ${vm2_s:-?}s, total $((SECONDS - t0))s"
finish
