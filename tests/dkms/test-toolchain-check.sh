#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# test-toolchain-check.sh: check-toolchain.sh passes on the real test kernel
# tree and refuses crafted ones (another rustc, no CONFIG_RUST, no Rust
# crates, another clang), naming both versions.  KTAP; last line
# "N passed, N failed"; exit status 0 iff nothing failed.
#   KDIR  the real kernel tree (default: tests/kernel/build.sh, cached)
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CHECK=$HERE/check-toolchain.sh
export PATH=$PATH:${HOME:-/root}/.cargo/bin

KDIR=${KDIR:-$(bash "$ROOT/tests/kernel/build.sh" 2>/dev/null | tail -n1)}
T=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-tcheck.XXXXXX")
trap 'rm -rf "$T"' EXIT

n=0 pass=0 fail=0 PLAN=11
echo "KTAP version 1"
echo "1..$PLAN"
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n $1"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n $1"; }
diag() { sed 's/^/# /'; }

# expect_fail NAME KDIR NEEDLE... : the check exits non-zero and its
# message contains every NEEDLE (fixed strings).
expect_fail() {
    local name=$1 kdir=$2; shift 2
    local out rc miss=
    out=$("$CHECK" "$kdir" 2>&1); rc=$?
    for s in "$@"; do grep -qF -- "$s" <<<"$out" || miss+=" '$s'"; done
    if [ "$rc" -ne 0 ] && [ -z "$miss" ]; then ok "$name"; else
        not_ok "$name"; echo "exit $rc; message lacks:${miss:- nothing}" | diag; fi
    grep 'error:' <<<"$out" | diag
}

# fake_kdir NAME SED_EXPR [NO_RMETA]: a kernel "tree" with the real .config
# edited by SED_EXPR, an include/ dir, and (unless NO_RMETA) empty rmeta files.
fake_kdir() {
    local d=$T/$1
    mkdir -p "$d/include" "$d/rust"
    sed -e "$2" "$KDIR/.config" >"$d/.config"
    [ -n "${3:-}" ] || touch "$d/rust/libcore.rmeta" "$d/rust/libkernel.rmeta"
    echo "$d"
}

if [ ! -f "$KDIR/.config" ]; then
    echo "# no real kernel tree (KDIR=$KDIR): run tests/kernel/build.sh"
    echo "Bail out! no kernel tree"
    echo "0 passed, 1 failed"; exit 1
fi
have=$(rustc --version 2>/dev/null | head -n1)
want=$(sed -n 's/^CONFIG_RUSTC_VERSION_TEXT="\(.*\)"$/\1/p' "$KDIR/.config")
cc_text=$(sed -n 's/^CONFIG_CC_VERSION_TEXT="\(.*\)"$/\1/p' "$KDIR/.config")
echo "# real tree: $KDIR"
echo "# kernel rustc: $want; rustc on PATH: $have"

# 1: the real tree passes
if out=$("$CHECK" "$KDIR" 2>&1); then ok "real kernel tree passes"; else not_ok "real kernel tree passes"; fi
diag <<<"$out"

# 2: the make variables for the real tree
vars=$("$CHECK" --make-vars "$KDIR" 2>/dev/null)
major=$(( $(sed -n 's/^CONFIG_CLANG_VERSION=//p' "$KDIR/.config") / 10000 ))
if grep -q "CONFIG_CC_IS_CLANG=y" "$KDIR/.config"; then expect_llvm="LLVM=-$major"; else expect_llvm=; fi
if [[ " $vars " == *" $expect_llvm "* ]] && [[ $vars == *RUSTC=/* ]]; then
    ok "--make-vars gives ${expect_llvm:-no LLVM=} and an absolute RUSTC"
else not_ok "--make-vars gives ${expect_llvm:-no LLVM=} and an absolute RUSTC"; echo "got '$vars'" | diag; fi

# 3: --run drops dkms's CC=clang LD=ld.lld and appends the variables
out=$("$CHECK" --run "$KDIR" echo make modules CC=clang LD=ld.lld 2>/dev/null)
if [ "$out" = "make modules $vars" ]; then ok "--run execs the command with the toolchain variables"
else not_ok "--run execs the command with the toolchain variables"; echo "got '$out'" | diag; fi

# 4: a kernel claiming another rustc
d=$(fake_kdir other-rustc 's/^CONFIG_RUSTC_VERSION_TEXT=.*/CONFIG_RUSTC_VERSION_TEXT="rustc 1.78.0 (9b00956e5 2024-04-29)"/; s/^CONFIG_RUSTC_VERSION=.*/CONFIG_RUSTC_VERSION=107800/')
expect_fail "kernel built by another rustc is refused, naming both" "$d" \
    "rustc 1.78.0 (9b00956e5 2024-04-29)" "$have" "rustc mismatch"

# 5: the rustc on PATH is another one (a stub first on PATH), real tree
mkdir -p "$T/bin"
printf '#!/bin/sh\necho "rustc 1.80.1 (3f5fd8dd4 2024-08-06)"\n' >"$T/bin/rustc"; chmod +x "$T/bin/rustc"
out=$(PATH=$T/bin:$PATH "$CHECK" "$KDIR" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "rustc 1.80.1 (3f5fd8dd4 2024-08-06)" <<<"$out" && grep -qF "$want" <<<"$out"; then
    ok "another rustc on PATH is refused, naming both"
else not_ok "another rustc on PATH is refused, naming both"; echo "exit $rc" | diag; fi
grep 'error:' <<<"$out" | diag

# 6: RUSTC pointing at nothing
out=$(RUSTC=$T/no-such-rustc "$CHECK" "$KDIR" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF "$want" <<<"$out"; then ok "missing RUSTC is refused, naming the kernel's rustc"
else not_ok "missing RUSTC is refused, naming the kernel's rustc"; fi
grep 'error:' <<<"$out" | diag

# 7: no CONFIG_RUST
d=$(fake_kdir no-rust 's/^CONFIG_RUST=y/# CONFIG_RUST is not set/')
expect_fail "kernel without CONFIG_RUST is refused" "$d" "CONFIG_RUST is not set"

# 8: no Rust crates in the tree
d=$(fake_kdir no-rmeta 's/^$//' no-rmeta)
expect_fail "kernel tree without rust/*.rmeta is refused" "$d" "rust/libcore.rmeta" "rust/libkernel.rmeta"

# 9: built by a clang that is not installed
d=$(fake_kdir other-clang 's/^CONFIG_CLANG_VERSION=.*/CONFIG_CLANG_VERSION=990100/; s/^CONFIG_CC_VERSION_TEXT=.*/CONFIG_CC_VERSION_TEXT="clang version 99.1.0"/')
expect_fail "kernel built by an absent clang is refused, naming both" "$d" \
    "clang version 99.1.0" "CONFIG_CLANG_VERSION=990100" "$cc_text"

# 10: --run on a mismatch never runs the command
d=$T/other-rustc
"$CHECK" --run "$d" touch "$T/ran" >/dev/null 2>&1; rc=$?
if [ $rc -ne 0 ] && [ ! -e "$T/ran" ]; then ok "--run does not build on a mismatch"
else not_ok "--run does not build on a mismatch"; echo "exit $rc, command ran: $([ -e "$T/ran" ] && echo yes || echo no)" | diag; fi

# 11: not a kernel tree at all
expect_fail "a directory that is not a kernel tree is refused" "$T/bin" "not a configured kernel build tree"

[ "$n" -eq "$PLAN" ] || { echo "# ran $n of $PLAN"; fail=$((fail + PLAN - n)); }
echo "# Totals: pass:$pass fail:$fail"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
