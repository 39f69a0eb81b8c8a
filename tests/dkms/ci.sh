#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/dkms/ci.sh: the DKMS proof.  Builds and installs gpunvme through DKMS
# against the cached test kernel tree, in DKMS trees under a temp dir (the
# host's /usr/src, /var/lib/dkms and /lib/modules are not touched), then boots
# the test VM with the DKMS-built gpunvme.ko and runs the module selftest.
# Also runs the toolchain-check tests and checks that DKMS refuses a kernel
# tree built by another rustc.  KTAP-ish; the last line sums everything:
# "N passed, N failed"; exit status 0 iff nothing failed.
#   KDIR              kernel tree (default: tests/kernel/build.sh, cached)
#   GPUNVME_DKMS_KEEP non-empty: keep the temp dir
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export PATH=${HOME:-/root}/.cargo/bin:$PATH

T=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-dkms-ci.XXXXXX")
[ -n "${GPUNVME_DKMS_KEEP:-}" ] && echo "# temp dir $T kept (GPUNVME_DKMS_KEEP)" ||
    trap 'rm -rf "$T"' EXIT
export DKMS_TREE=$T/var/lib/dkms DKMS_SOURCE_TREE=$T/usr/src DKMS_INSTALL_TREE=$T/lib/modules
trees=(--dkmstree "$DKMS_TREE" --sourcetree "$DKMS_SOURCE_TREE" --installtree "$DKMS_INSTALL_TREE")

PLAN=9
n=0 pass=0 fail=0
echo "KTAP version 1"
echo "1..$PLAN"
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n $1"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n $1"; }
result() { if [ "$1" = 0 ]; then ok "$2"; else not_ok "$2"; fi; }
indent() { sed 's/^/    /'; }
tailog() { tail -n "${2:-25}" "$1" | sed 's/^/# /'; }
# add_counts LOG: add a sub-suite's closing "N passed, N failed" line to the
# totals (its results count individually); no such line: returns 1.
add_counts() {
    local line p f
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -n1)
    [ -n "$line" ] || return 1
    p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
    pass=$((pass + p)); fail=$((fail + f))
    echo "# counted: $line"
}
host_state() {
    { ls -A /var/lib/dkms 2>/dev/null; ls -d /usr/src/gpunvme-* 2>/dev/null;
      ls /lib/modules/*/updates/dkms/gpunvme.ko* 2>/dev/null; } | sha256sum
}
before=$(host_state)

KDIR=${KDIR:-$(bash "$ROOT/tests/kernel/build.sh" | tail -n1)} || KDIR=
if [ ! -f "$KDIR/.config" ]; then
    echo "Bail out! no test kernel tree (tests/kernel/build.sh failed)"
    echo "0 passed, 1 failed"; exit 1
fi
export KDIR
KREL=$(cat "$KDIR/include/config/kernel.release")
echo "# kernel tree: $KDIR ($KREL)"
echo "# dkms trees under $T"

# 1: the toolchain-check tests (each result counts)
echo "# subtest: toolchain check"
bash "$HERE/test-toolchain-check.sh" >"$T/toolchain.log" 2>&1; rc=$?
indent <"$T/toolchain.log"
if add_counts "$T/toolchain.log"; then result "$rc" "toolchain-check suite"
else not_ok "toolchain-check suite (no result line, exit $rc)"; fi

# 2: dkms add + build + install, temp trees
bash "$HERE/install.sh" >"$T/install1.out" 2>"$T/install1.log"; rc=$?
ko=$(tail -n1 "$T/install1.out")
result "$rc" "dkms add/build/install for $KREL"
[ "$rc" = 0 ] || tailog "$T/install1.log" 40

# 3: again: replaces the previous install cleanly
bash "$HERE/install.sh" >"$T/install2.out" 2>"$T/install2.log"; rc=$?
status=$(dkms status -m gpunvme "${trees[@]}" 2>/dev/null)
echo "$status" | sed 's/^/# dkms status: /'
if [ "$rc" = 0 ] && [ "$(grep -c . <<<"$status")" = 1 ] && grep -q "installed" <<<"$status" &&
   [ "$(tail -n1 "$T/install2.out")" = "$ko" ]; then
    ok "re-running install.sh replaces the previous install (one version, installed)"
else
    not_ok "re-running install.sh replaces the previous install (one version, installed)"; tailog "$T/install2.log" 40
fi

# 4: the installed module is DKMS's, for this kernel, built by the kernel's toolchain
vermagic=$(modinfo -F vermagic "$ko" 2>/dev/null)
mklog=$DKMS_TREE/gpunvme/$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$ROOT/dkms.conf")/$KREL/$(uname -m)/log/make.log
vars=$("$HERE/check-toolchain.sh" --make-vars "$KDIR" 2>/dev/null)
if [ -f "$ko" ] && [[ $ko == "$DKMS_INSTALL_TREE/$KREL/updates/dkms/"* ]] &&
   [ "${vermagic%% *}" = "$KREL" ] && grep -qF -- "$vars" "$mklog"; then
    ok "DKMS-built module: $ko, vermagic '$vermagic', make ran with $vars"
else
    not_ok "DKMS-built module (ko='$ko' vermagic='$vermagic', '$vars' in make.log?)"
fi

# 5: DKMS refuses a kernel tree built by another rustc, naming both versions
fake=$T/fake-kernel
mkdir -p "$fake/include/config" "$fake/rust"
sed -e 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.78.0 (9b00956e5 2024-04-29)"/' \
    -e 's/^CONFIG_RUSTC_VERSION=.*/CONFIG_RUSTC_VERSION=107800/' "$KDIR/.config" >"$fake/.config"
touch "$fake/rust/libcore.rmeta" "$fake/rust/libkernel.rmeta"
echo "$KREL-fake" >"$fake/include/config/kernel.release"
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$ROOT/dkms.conf")
dkms build -m gpunvme -v "$ver" -k "$KREL-fake" --kernelsourcedir "$fake" "${trees[@]}" >"$T/fake.log" 2>&1; rc=$?
flog=$DKMS_TREE/gpunvme/$ver/build/make.log
have=$(rustc --version)
if [ "$rc" != 0 ] && grep -qF "rustc 1.78.0 (9b00956e5 2024-04-29)" "$flog" && grep -qF "$have" "$flog" &&
   ! grep -q 'RUSTC \[M\]\|CC \[M\]' "$flog"; then
    ok "dkms build refuses a kernel built by another rustc (exit $rc, no compile)"
else
    not_ok "dkms build refuses a kernel built by another rustc (exit $rc)"; tailog "$T/fake.log"
fi
grep 'error:' "$flog" 2>/dev/null | sed 's/^/# /'
rm -rf "${DKMS_TREE:?}/gpunvme/$ver/build"

# 6: the host's DKMS state is untouched
result "$([ "$(host_state)" = "$before" ]; echo $?)" "host /var/lib/dkms, /usr/src, /lib/modules untouched"

# 7: the selftests
make -s -C "$ROOT/tests/selftests" >"$T/selftests.log" 2>&1; rc=$?
result "$rc" "selftests build"
[ "$rc" = 0 ] || tailog "$T/selftests.log"

# 8: the VM with the DKMS-built module (each VM result counts)
echo "# subtest: VM with $ko"
if [ -f "$ko" ] && [ -x "$ROOT/tests/selftests/build/gpunvme_module_test.sh" ]; then
    bash "$ROOT/tests/vm/run.sh" --kdir "$KDIR" --file "$ko" \
        -- "$ROOT/tests/selftests/build/gpunvme_module_test.sh" >"$T/vm.log" 2>&1; rc=$?
    # The console is long: on success only the results and run.sh's notes
    # (the full console log stays in the file run.sh names).
    if [ "$rc" = 0 ]; then
        grep -aE '^(TAP |KTAP |1\.\.|ok |not ok |# |[0-9]+ passed)' "$T/vm.log" | indent
    else
        indent <"$T/vm.log"
    fi
    if add_counts "$T/vm.log"; then result "$rc" "VM module test with the DKMS-built gpunvme.ko"
    else not_ok "VM module test with the DKMS-built gpunvme.ko (no result line, exit $rc)"; fi
else
    not_ok "VM module test with the DKMS-built gpunvme.ko (no module or selftest)"
fi

# 9: dkms remove leaves nothing behind in the temp trees
dkms remove "gpunvme/$ver" --all "${trees[@]}" --no-depmod >"$T/remove.log" 2>&1; rc=$?
left=$(find "$DKMS_INSTALL_TREE" -name 'gpunvme.ko*' 2>/dev/null; ls "$DKMS_TREE/gpunvme" 2>/dev/null)
if [ "$rc" = 0 ] && [ -z "$left" ]; then ok "dkms remove uninstalls cleanly"
else not_ok "dkms remove uninstalls cleanly (exit $rc, left: $left)"; tailog "$T/remove.log"; fi

[ "$n" -eq "$PLAN" ] || { echo "# ran $n of $PLAN steps"; fail=$((fail + PLAN - n)); }
echo "# Totals: pass:$pass fail:$fail"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
