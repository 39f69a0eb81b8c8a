#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# check-toolchain.sh: refuse to build gpunvme against a kernel tree whose
# toolchain we cannot reproduce.  A Rust module must be compiled by exactly
# the rustc that built the kernel (the .rmeta files in KDIR/rust/ are only
# readable by that rustc), and a clang-built kernel wants its modules built
# with the same LLVM.
#
#   check-toolchain.sh [-q] KDIR              check; exit 1 naming both versions on mismatch
#   check-toolchain.sh --make-vars KDIR       check, then print the make variables
#                                             (e.g. "LLVM=-19 RUSTC=/root/.cargo/bin/rustc")
#   check-toolchain.sh --run KDIR CMD [ARG..] check, then exec CMD ARG.. <make variables>
#                                             (DKMS MAKE[0]: the build cannot start on a mismatch;
#                                             drops the CC=clang LD=ld.lld that dkms 3.0 appends)
#   check-toolchain.sh --prepare KDIR         check (DKMS PRE_BUILD, make dkms-install)
# --prepare and --run first give a Debian headers tree that lacks rust/*.rmeta
# its Rust artifacts (rust-artifacts.sh beside this script: rebuilt from
# linux-source of the same version, cached per kernel release).
#
# What Linux 7.3 records in KDIR/.config and KDIR/include/config/auto.conf:
#   CONFIG_RUST, CONFIG_RUSTC_VERSION (e.g. 109500), CONFIG_RUSTC_VERSION_TEXT
#   (`rustc --version` of the kernel's rustc), CONFIG_CC_IS_CLANG,
#   CONFIG_CLANG_VERSION (e.g. 190107), CONFIG_CC_VERSION_TEXT, CONFIG_LD_IS_LLD.
#
# rustc: $RUSTC if set, else `rustc` on PATH, else $HOME/.cargo/bin/rustc or
# /root/.cargo/bin/rustc (rustup's place; DKMS autoinstall at kernel upgrade
# runs with a PATH that lacks it).  The one checked is the one passed to make.
set -uo pipefail

prog=check-toolchain
mode=check quiet= prepare=
case ${1:-} in
    --make-vars) mode=vars; shift ;;
    --run) mode=run; shift ;;
    --prepare) mode=check prepare=1; shift ;;
    -q|--quiet) quiet=1; shift ;;
    -h|--help) sed -n '3,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -ge 1 ] || { echo "$prog: usage: $0 [-q|--make-vars|--run] KDIR [CMD ARGS...]" >&2; exit 2; }
KDIR=$1; shift
[ "$mode" = run ] && [ $# -eq 0 ] && { echo "$prog: --run needs a command" >&2; exit 2; }
[ "$mode" = check ] || quiet=1

errors=()
err() { errors+=("$*"); }
info() { [ -n "$quiet" ] || echo "$prog: $*" >&2; }
finish_fail() {
    local e
    for e in "${errors[@]}"; do echo "$prog: error: $e" >&2; done
    echo "$prog: refusing to build gpunvme against $KDIR" >&2
    exit 1
}

if [ ! -d "$KDIR" ]; then
    err "kernel build tree $KDIR does not exist"; finish_fail
fi
conf=
for c in "$KDIR/include/config/auto.conf" "$KDIR/.config"; do
    [ -f "$c" ] && { conf=$c; break; }
done
[ -n "$conf" ] || { err "$KDIR has neither include/config/auto.conf nor .config (not a configured kernel build tree)"; finish_fail; }

# kconf NAME: the value of CONFIG_NAME in the tree's config, quotes removed; empty if unset.
kconf() {
    local v
    v=$(sed -n "s/^CONFIG_$1=//p" "$conf" | tail -n1)
    v=${v#\"}; v=${v%\"}
    printf '%s' "$v"
}

# ---- Rust support in the kernel tree ----------------------------------------
# A distribution's headers (Debian's) lack the Rust artifacts: rebuild them.
if { [ -n "$prepare" ] || [ "$mode" = run ]; } && [ "$(kconf RUST)" = y ] &&
   { [ ! -f "$KDIR/rust/libcore.rmeta" ] || [ ! -f "$KDIR/rust/libkernel.rmeta" ]; } &&
   [ -x "$(dirname "$0")/rust-artifacts.sh" ]; then
    RUSTC=${RUSTC:-} "$(dirname "$0")/rust-artifacts.sh" "$KDIR" ||
        { rebuild_failed=1; err "$KDIR lacks rust/*.rmeta and they could not be rebuilt (rust-artifacts.sh says why, above)"; }
fi
if [ "$(kconf RUST)" != y ]; then
    err "kernel $KDIR was built without Rust support (CONFIG_RUST is not set in $conf); gpunvme is a Rust module and needs CONFIG_RUST=y"
fi
missing_rmeta=()
for m in core kernel; do
    [ -f "$KDIR/rust/lib$m.rmeta" ] || missing_rmeta+=("rust/lib$m.rmeta")
done
if [ ${#missing_rmeta[@]} -gt 0 ] && [ -z "${rebuild_failed:-}" ]; then
    err "kernel tree $KDIR lacks ${missing_rmeta[*]} (the kernel's Rust crates); build the kernel with CONFIG_RUST=y (a headers package must ship rust/*.rmeta)"
fi

# ---- rustc: exactly the kernel's ----------------------------------------------
# deb_hint RUSTC_VERSION_TEXT: on Debian, the rustc package version to install
# (from this machine's apt sources), e.g. " (Debian: apt install rustc=1.85.1+dfsg1-1+deb13u1
# rust-src=1.85.1+dfsg1-1+deb13u1)"; empty elsewhere.
deb_hint() {
    local u v
    command -v apt-cache >/dev/null || return 0
    u=$(awk '{ print $2 }' <<<"$1")
    v=$(apt-cache madison rustc 2>/dev/null | awk -v u="$u" '{ v = $3 } index(v, u) == 1 && substr(v, length(u) + 1, 1) ~ /^[-+~]?$/ { print v; exit }')
    [ -z "$v" ] || printf ' (Debian: apt install rustc=%s rust-src=%s)' "$v" "$v"
}
want_rustc=$(kconf RUSTC_VERSION_TEXT)
want_rustc_num=$(kconf RUSTC_VERSION)
rustc_path=
if [ -n "${RUSTC:-}" ]; then
    rustc_path=$(command -v "$RUSTC" 2>/dev/null || true)
    [ -n "$rustc_path" ] || err "RUSTC=$RUSTC is not an executable; the kernel was built with '$want_rustc'"
else
    rustc_path=$(command -v rustc 2>/dev/null || true)
    if [ -z "$rustc_path" ]; then
        for r in "${HOME:-/root}/.cargo/bin/rustc" /root/.cargo/bin/rustc; do
            [ -x "$r" ] && { rustc_path=$r; info "no rustc on PATH; using $r"; break; }
        done
    fi
fi
if [ "$(kconf RUST)" = y ]; then
    if [ -z "$want_rustc" ]; then
        err "$conf has CONFIG_RUST=y but no CONFIG_RUSTC_VERSION_TEXT; cannot tell which rustc built the kernel"
    elif [ -z "$rustc_path" ]; then
        [ -n "${RUSTC:-}" ] || err "no rustc found (PATH=$PATH); the kernel $KDIR was built with '$want_rustc' (CONFIG_RUSTC_VERSION=$want_rustc_num): install that exact rustc$(deb_hint "$want_rustc") or set RUSTC=/path/to/it"
    else
        have_rustc=$("$rustc_path" --version 2>/dev/null | head -n1)
        if [ "$have_rustc" != "$want_rustc" ]; then
            hint=
            for r in "${HOME:-/root}/.cargo/bin/rustc" /root/.cargo/bin/rustc; do
                [ -x "$r" ] && [ "$r" != "$rustc_path" ] &&
                    [ "$("$r" --version 2>/dev/null | head -n1)" = "$want_rustc" ] &&
                    { hint=" ($r is that one: put it first on PATH or set RUSTC=$r)"; break; }
            done
            err "rustc mismatch: the kernel $KDIR was built with '$want_rustc' (CONFIG_RUSTC_VERSION=$want_rustc_num) but $rustc_path is '${have_rustc:-unknown (--version failed)}'; a Rust module must be built by the kernel's exact rustc$hint$(deb_hint "$want_rustc")"
        else
            info "rustc ok: $rustc_path is '$have_rustc'"
        fi
    fi
fi

# ---- C compiler / linker: clang of the kernel's major version ---------------------
llvm=
if [ "$(kconf CC_IS_CLANG)" = y ]; then
    want_clang_num=$(kconf CLANG_VERSION)
    want_cc_text=$(kconf CC_VERSION_TEXT)
    want_major=$(( ${want_clang_num:-0} / 10000 ))
    cand_major() { "$1" --version 2>/dev/null | head -n1 | sed -nE 's/.*clang version ([0-9]+)\..*/\1/p'; }
    clang_bin=
    if command -v "clang-$want_major" >/dev/null 2>&1; then
        clang_bin=clang-$want_major llvm=-$want_major
    elif command -v clang >/dev/null 2>&1 && [ "$(cand_major clang)" = "$want_major" ]; then
        clang_bin=clang llvm=1
    fi
    if [ -z "$clang_bin" ]; then
        found=$(for c in $(compgen -c clang | grep -E '^clang(-[0-9]+)?$' | sort -u); do
                    printf '%s (%s), ' "$c" "$("$c" --version 2>/dev/null | head -n1)"; done)
        found=${found%, }
        err "clang mismatch: the kernel $KDIR was built with '$want_cc_text' (CONFIG_CLANG_VERSION=$want_clang_num, clang $want_major) but no clang $want_major is installed (found: ${found:-none}); install clang-$want_major and lld-$want_major"
    else
        have_cc_text=$("$clang_bin" --version 2>/dev/null | head -n1)
        if [ "$(kconf LD_IS_LLD)" = y ]; then
            lld=ld.lld; [ "$llvm" = 1 ] || lld=ld.lld$llvm
            command -v "$lld" >/dev/null 2>&1 ||
                err "the kernel $KDIR was linked with ld.lld (CONFIG_LLD_VERSION=$(kconf LLD_VERSION)) but $lld is not installed (apt-get install lld-$want_major)"
        fi
        if [ "$have_cc_text" != "$want_cc_text" ]; then
            info "warning: kernel built by '$want_cc_text', using '$have_cc_text' (same major version: allowed)"
        else
            info "clang ok: $clang_bin is '$have_cc_text'"
        fi
        info "make variable: LLVM=$llvm"
    fi
else
    # A GCC-built kernel: Kbuild's default CC; only say so.
    info "kernel built by '$(kconf CC_VERSION_TEXT)' (not clang): no LLVM= needed"
fi

[ ${#errors[@]} -eq 0 ] || finish_fail

vars=()
[ -n "$llvm" ] && vars+=("LLVM=$llvm")
[ -n "$rustc_path" ] && vars+=("RUSTC=$rustc_path")
case $mode in
    check) info "ok: $KDIR can build gpunvme (${vars[*]})" ;;
    vars) echo "${vars[*]}" ;;
    run)
        # dkms 3.0 appends "CC=clang" and/or "LD=ld.lld" to MAKE[0] when the
        # kernel was built by clang/lld; as command-line variables they would
        # beat LLVM=-NN and pick an unversioned clang that may not exist (or be
        # another version).  LLVM= sets CC, LD, AR, ... consistently: drop them.
        cmd=()
        for a in "$@"; do
            if [ -n "$llvm" ] && { [ "$a" = CC=clang ] || [ "$a" = LD=ld.lld ]; }; then
                echo "$prog: dropping dkms's '$a' (LLVM=$llvm selects the compiler and linker)" >&2
                continue
            fi
            cmd+=("$a")
        done
        echo "$prog: running: ${cmd[*]} ${vars[*]}" >&2
        exec "${cmd[@]}" "${vars[@]}" ;;
esac
exit 0
