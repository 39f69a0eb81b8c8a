#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# rust-artifacts.sh: give a distribution's kernel headers tree the Rust build
# artifacts it lacks, so that `make -C KDIR M=...` can build a Rust module.
#
# Debian's linux-headers-7.3.*-amd64 ship the kernel's .config, Makefiles and
# Module.symvers but not rust/*.rmeta, the proc-macro rust/*.so nor
# scripts/target.json.  They are rebuilt here from the same Debian version's
# linux-source-7.3 with the headers' own .config and the kernel's own compiler
# pair (the gcc and rustc named in that .config, plus its bindgen):
#   make O=... ARCH=x86 CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14 \
#        KERNELRELEASE=<release> olddefconfig modules_prepare
# (olddefconfig must change nothing: a changed .config means another
# toolchain, and is refused).  The result is cached per kernel release under
# $GPUNVME_CACHE/rust-artifacts/<release>/<key> (default /var/cache/gpunvme;
# key: the .config, the toolchain versions and the source version), so
# later builds (another DKMS module version, a reinstall) take seconds.
#
#   rust-artifacts.sh KDIR          ensure KDIR has them (nothing to do if it
#                                   has rust/libcore.rmeta and rust/libkernel.rmeta)
#   rust-artifacts.sh --remove KDIR remove what an earlier run installed into KDIR
#
# Installs KDIR/rust/*.rmeta, KDIR/rust/*.so and KDIR/scripts/target.json
# (Debian's headers link scripts/ to the shared linux-kbuild package), listed
# in KDIR/rust/.gpunvme-rust-artifacts.  Exit 1 with what to install when the
# source package or the exact toolchain is missing.  Called by
# check-toolchain.sh --prepare/--run (DKMS's PRE_BUILD and MAKE[0]).
#   GPUNVME_RUST_ARTIFACTS_JOBS  make -j for the rebuild (default: nproc)
set -uo pipefail
prog=rust-artifacts
RECIPE=1
say() { echo "$prog: $*" >&2; }
die() { echo "$prog: error: $*" >&2; exit 1; }

remove=
[ "${1:-}" = --remove ] && { remove=1; shift; }
case ${1:-} in -h|--help) sed -n '3,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -eq 1 ] || { echo "usage: $0 [--remove] KDIR" >&2; exit 2; }
[ -d "$1" ] || die "no kernel tree at $1"
KDIR=$(cd "$1" && pwd -P)
manifest=$KDIR/rust/.gpunvme-rust-artifacts

if [ -n "$remove" ]; then
    [ -f "$manifest" ] || { say "nothing installed by $prog in $KDIR"; exit 0; }
    while IFS= read -r f; do [ -n "$f" ] && rm -f "$f"; done <"$manifest"
    rm -f "$manifest"
    say "removed the rebuilt Rust artifacts from $KDIR"
    exit 0
fi

if [ -f "$KDIR/rust/libcore.rmeta" ] && [ -f "$KDIR/rust/libkernel.rmeta" ]; then
    exit 0
fi
conf=$KDIR/.config
[ -f "$conf" ] || die "$KDIR has no .config"
kconf() { local v; v=$(sed -n "s/^CONFIG_$1=//p" "$conf" | tail -n1); v=${v#\"}; v=${v%\"}; printf '%s' "$v"; }
[ "$(kconf RUST)" = y ] || die "the kernel of $KDIR has no Rust support (CONFIG_RUST is not set)"
krel=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null) || die "$KDIR has no include/config/kernel.release"

# deb_hint PKG UPSTREAM: "apt install PKG=<Debian version of UPSTREAM>", from
# the versions this machine's apt sources offer; else a sentence.
deb_hint() {
    local v
    v=$(apt-cache madison "$1" 2>/dev/null | awk -v u="$2" '{ v = $3 } index(v, u) == 1 && substr(v, length(u) + 1, 1) ~ /^[-+~]?$/ { print v; exit }')
    if [ -n "$v" ]; then echo "apt install $1=$v"
    else echo "install Debian's $1 $2 (it is in Debian trixie; 'apt-cache policy $1' lists what your sources offer)"; fi
}

# ---- which Debian package, which source ------------------------------------------
command -v dpkg-query >/dev/null || die "$KDIR lacks rust/*.rmeta and this is not a Debian system: build the kernel with CONFIG_RUST=y and keep its build tree"
hpkg=$(dpkg -S "$KDIR" 2>/dev/null | sed -n 's/^\([^:, ]*\): .*/\1/p' | grep '^linux-headers-' | head -n1)
[ -n "$hpkg" ] || die "$KDIR lacks rust/*.rmeta and belongs to no Debian linux-headers package: nothing to rebuild them from (build the kernel with CONFIG_RUST=y and keep its build tree)"
hver=$(dpkg-query -W -f='${Version}' "$hpkg")
mm=$(sed -E 's/^([0-9]+\.[0-9]+).*/\1/' <<<"$krel")
spkg=linux-source-$mm
sver=$(dpkg-query -W -f='${db:Status-Abbrev} ${Version}' "$spkg" 2>/dev/null | awk '$1 == "ii" { print $2 }')
if [ "$sver" != "$hver" ]; then
    die "$hpkg $hver has no Rust artifacts (rust/*.rmeta); they are rebuilt from the kernel source of the same version, ${sver:+but $spkg $sver is installed; }install it: apt install $spkg=$hver"
fi
tarball=$(ls /usr/src/"$spkg".tar.* 2>/dev/null | head -n1)
[ -n "$tarball" ] || die "$spkg is installed but /usr/src/$spkg.tar.* is missing (apt install --reinstall $spkg=$hver)"

# ---- the kernel's own toolchain ------------------------------------------------------
want_rustc=$(kconf RUSTC_VERSION_TEXT) want_bindgen=$(kconf BINDGEN_VERSION_TEXT) want_cc=$(kconf CC_VERSION_TEXT)
rustc=${RUSTC:-rustc} bindgen=${BINDGEN:-bindgen}
have_rustc=$("$rustc" --version 2>/dev/null | head -n1)
have_bindgen=$("$bindgen" --version 2>/dev/null | head -n1)
errs=()
if [ "$have_rustc" != "$want_rustc" ]; then
    u=$(awk '{ print $2 }' <<<"$want_rustc")
    errs+=("the kernel was built with '$want_rustc' but '$rustc' is '${have_rustc:-not installed}': $(deb_hint rustc "$u") $(deb_hint rust-src "$u" | sed -n 's/^apt install //p')")
else
    # The right rustc: its standard library source (rust-src) builds core.
    rustlib=$("$rustc" --print sysroot 2>/dev/null)/lib/rustlib/src/rust/library/core/src/lib.rs
    [ -f "$rustlib" ] || errs+=("the Rust standard library source is missing ($rustlib): $(deb_hint rust-src "$(awk '{ print $2 }' <<<"$want_rustc")")")
fi
if [ -n "$want_bindgen" ] && [ "$have_bindgen" != "$want_bindgen" ]; then
    errs+=("the kernel was built with '$want_bindgen' but '$bindgen' is '${have_bindgen:-not installed}': $(deb_hint bindgen "$(awk '{ print $2 }' <<<"$want_bindgen")")")
fi
llvm=() cross=() cc=()
if [ "$(kconf CC_IS_CLANG)" = y ]; then
    major=$(( $(kconf CLANG_VERSION) / 10000 ))
    command -v "clang-$major" >/dev/null || errs+=("the kernel was built with '$want_cc': apt install clang-$major lld-$major")
    llvm=(LLVM=-"$major")
else
    ccbin=${want_cc%% *}
    have_cc=$("$ccbin" --version 2>/dev/null | head -n1)
    if [ -z "$have_cc" ]; then
        gccpkg=$(sed -nE 's/^.*(gcc-[0-9]+)$/\1/p' <<<"$ccbin")
        errs+=("the kernel was built with '$want_cc' but $ccbin is not installed: apt install ${gccpkg:-gcc}")
    elif [ "$have_cc" != "$want_cc" ]; then
        say "warning: the kernel was built with '$want_cc', $ccbin is '$have_cc' (same compiler: allowed)"
    fi
    # x86_64-linux-gnu-gcc-14 -> CROSS_COMPILE=x86_64-linux-gnu- CC=x86_64-linux-gnu-gcc-14
    pre=$(sed -nE 's/^(.*-)gcc(-[0-9]+)?$/\1/p' <<<"$ccbin")
    [ -z "$pre" ] || cross=(CROSS_COMPILE="$pre")
    cc=(CC="$ccbin")
fi
# What Kconfig and modules_prepare themselves run: without them olddefconfig
# gives another .config (e.g. OPENSSL_SUPPORTS_ML_DSA probes the openssl binary).
need=(make:make flex:flex bison:bison bc:bc)
[ "$(kconf OPENSSL_SUPPORTS_ML_DSA)" = y ] && need+=(openssl:openssl)
[ "$(kconf PAHOLE_VERSION)" -gt 0 ] 2>/dev/null && need+=(pahole:dwarves)
for nd in "${need[@]}"; do
    command -v "${nd%%:*}" >/dev/null || errs+=("the kernel's build needs ${nd%%:*}: apt install ${nd#*:}")
done
if [ ${#errs[@]} -gt 0 ]; then
    for e in "${errs[@]}"; do echo "$prog: error: $e" >&2; done
    die "cannot rebuild the Rust artifacts of $hpkg $hver"
fi
case $(uname -m) in
    x86_64|i?86) arch=x86 ;; aarch64) arch=arm64 ;; riscv64) arch=riscv ;; *) arch=$(uname -m) ;;
esac

# ---- cache ------------------------------------------------------------------------------
CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}/rust-artifacts
key=$( { echo "$RECIPE $hpkg $hver $arch"; echo "$want_rustc|$want_bindgen|$want_cc"; cat "$conf"; } | sha256sum | cut -c1-16)
C=$CACHE/$krel/$key
install_from_cache() {
    local f list=()
    mkdir -p "$KDIR/rust"
    for f in "$C"/rust/*; do cp -p "$f" "$KDIR/rust/" && list+=("$KDIR/rust/${f##*/}") || return 1; done
    cp -p "$C/target.json" "$KDIR/scripts/target.json" && list+=("$KDIR/scripts/target.json") || return 1
    printf '%s\n' "${list[@]}" >"$manifest"
    say "installed ${#list[@]} Rust artifacts into $KDIR (from $C)"
}
if [ -f "$C/.complete" ]; then
    say "cached: $C"
    install_from_cache || die "could not install into $KDIR (run as root)"
    exit 0
fi
mkdir -p "$CACHE/$krel" || die "cannot create $CACHE/$krel (run as root, or set GPUNVME_CACHE)"
exec 7>"$CACHE/$krel/.lock"
flock -w 3600 7 || die "another rebuild has held $CACHE/$krel/.lock for an hour"
if [ -f "$C/.complete" ]; then
    say "cached (built while we waited): $C"
    install_from_cache || die "could not install into $KDIR"
    exit 0
fi

# ---- rebuild ------------------------------------------------------------------------------
W=$(mktemp -d "$CACHE/$krel/build.XXXXXX")
trap 'rm -rf "$W"' EXIT
log=$CACHE/$krel/build-$key.log
start=$SECONDS
say "rebuilding the Rust artifacts of $hpkg $hver from $spkg ($tarball), with '$want_rustc', '$want_cc'; log: $log"
tar -C "$W" -xf "$tarball" || die "cannot unpack $tarball"
src=$(ls -d "$W"/linux-source-* | head -n1)
mkdir -p "$W/o"; cp "$conf" "$W/o/.config"
mk=(make -C "$src" O="$W/o" ARCH="$arch" "${cross[@]}" "${cc[@]}" "${llvm[@]}" RUSTC="$rustc" BINDGEN="$bindgen"
    KERNELRELEASE="$krel" -j"${GPUNVME_RUST_ARTIFACTS_JOBS:-$(nproc)}")
say "running: ${mk[*]} olddefconfig modules_prepare"
if ! "${mk[@]}" olddefconfig >"$log" 2>&1; then tail -n 30 "$log" >&2; die "olddefconfig failed (log: $log)"; fi
if ! diff -q <(grep '^CONFIG_' "$conf") <(grep '^CONFIG_' "$W/o/.config") >/dev/null; then
    diff <(grep '^CONFIG_' "$conf") <(grep '^CONFIG_' "$W/o/.config") | head -n 20 | sed "s/^/$prog: /" >&2
    die "olddefconfig changed the headers' .config with this toolchain: it is not the kernel's"
fi
if ! "${mk[@]}" modules_prepare >>"$log" 2>&1; then tail -n 30 "$log" >&2; die "modules_prepare failed (log: $log)"; fi
mkdir -p "$W/c/rust"
cp -p "$W"/o/rust/*.rmeta "$W"/o/rust/*.so "$W/c/rust/" && cp -p "$W/o/scripts/target.json" "$W/c/" ||
    die "modules_prepare left no rust/*.rmeta, rust/*.so or scripts/target.json in $W/o"
[ -f "$W/c/rust/libkernel.rmeta" ] || die "modules_prepare built no rust/libkernel.rmeta"
touch "$W/c/.complete"
rm -rf "$C"; mv "$W/c" "$C"
say "rebuilt in $((SECONDS - start))s: $(ls "$C/rust" | wc -l) files, $(du -sh "$C" | cut -f1), cached in $C"
install_from_cache || die "could not install into $KDIR"
