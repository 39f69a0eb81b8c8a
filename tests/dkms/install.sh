#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/dkms/install.sh (make dkms-install): register gpunvme with DKMS, build
# it for one kernel and install it.  Idempotent: every gpunvme version DKMS
# knows is removed first, so a re-run replaces the previous install cleanly.
#
# Environment:
#   KDIR               kernel build tree (default /lib/modules/$(uname -r)/build)
#   KERNELRELEASE      its release (default: KDIR/include/config/kernel.release)
#   DKMS               dkms binary (default dkms)
#   DKMS_TREE          dkms --dkmstree    (default /var/lib/dkms)
#   DKMS_SOURCE_TREE   dkms --sourcetree  (default /usr/src)
#   DKMS_INSTALL_TREE  dkms --installtree (default /lib/modules); when set,
#                      depmod is run with -b on it (if it ends in /lib/modules)
#                      instead of on the host's /lib/modules
# Prints the installed module's path on the last line.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PATH=$PATH:${HOME:-/root}/.cargo/bin   # rustup's rustc, if PATH lacks one
say() { echo "dkms-install: $*" >&2; }
die() { say "error: $*"; exit 1; }

DKMS=${DKMS:-dkms}
command -v "$DKMS" >/dev/null || die "dkms not found (apt-get install dkms)"
NAME=$(sed -n 's/^PACKAGE_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/dkms.conf")
VER=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$ROOT/dkms.conf")
[ -n "$NAME" ] && [ -n "$VER" ] || die "cannot read PACKAGE_NAME/PACKAGE_VERSION from $ROOT/dkms.conf"

KDIR=${KDIR:-/lib/modules/$(uname -r)/build}
[ -d "$KDIR" ] || die "no kernel build tree at $KDIR (install the kernel headers, or set KDIR=...)"
KDIR=$(cd "$KDIR" && pwd -P)
if [ -z "${KERNELRELEASE:-}" ]; then
    if [ -f "$KDIR/include/config/kernel.release" ]; then
        KERNELRELEASE=$(cat "$KDIR/include/config/kernel.release")
    else
        KERNELRELEASE=$(make -s -C "$KDIR" kernelrelease) || die "cannot tell the release of $KDIR"
    fi
fi

trees=()
src_tree=/usr/src
[ -z "${DKMS_TREE:-}" ] || trees+=(--dkmstree "$DKMS_TREE")
[ -z "${DKMS_SOURCE_TREE:-}" ] || { trees+=(--sourcetree "$DKMS_SOURCE_TREE"); src_tree=$DKMS_SOURCE_TREE; }
install_tree=/lib/modules depmod=()
if [ -n "${DKMS_INSTALL_TREE:-}" ]; then
    trees+=(--installtree "$DKMS_INSTALL_TREE"); install_tree=$DKMS_INSTALL_TREE
    depmod=(--no-depmod)   # dkms's depmod would look at the host's /lib/modules
fi
mkdir -p "$src_tree" ${DKMS_TREE:+"$DKMS_TREE"}
[ -w "$src_tree" ] || die "$src_tree is not writable (run as root, or set DKMS_SOURCE_TREE/DKMS_TREE/DKMS_INSTALL_TREE)"

# Fail before touching DKMS if this toolchain cannot build for KDIR (Debian's
# stock headers first get the Rust artifacts they lack: rust-artifacts.sh).
"$ROOT/tests/dkms/check-toolchain.sh" --prepare "$KDIR" || exit 1

# ---- remove every registered version (and its /usr/src copy) ---------------------
while read -r v; do
    [ -n "$v" ] || continue
    say "removing previously registered $NAME/$v"
    "$DKMS" remove "$NAME/$v" --all "${trees[@]}" "${depmod[@]}" >&2 || die "dkms remove $NAME/$v failed"
    if [ "$v" != "$VER" ] && grep -qs "^PACKAGE_NAME=\"\{0,1\}$NAME\"\{0,1\}$" "$src_tree/$NAME-$v/dkms.conf"; then
        rm -rf "${src_tree:?}/$NAME-$v"
    fi
done < <("$DKMS" status -m "$NAME" "${trees[@]}" 2>/dev/null | sed -nE "s|^$NAME[/,] ?([^,:]+)[,:].*|\1|p" | sort -u)

# ---- copy the source: tracked (and new, not ignored) files only -------------------
dest=$src_tree/$NAME-$VER
rm -rf "$dest"; mkdir -p "$dest"
paths=(Kbuild Makefile dkms.conf rust uapi tests/dkms/check-toolchain.sh tests/dkms/rust-artifacts.sh)
is_build_product() {
    case ${1##*/} in
        *.o|*.ko|*.mod|*.mod.c|*.cmd|*.order|Module.symvers|*.rmeta|*.tmp|*.d|*~) return 0 ;;
    esac
    return 1
}
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # --others --exclude-standard: a new file not committed yet still builds;
    # build products are ignored by .gitignore and never copied.
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- "${paths[@]}" |
        while IFS= read -r -d '' f; do
            [ -e "$ROOT/$f" ] || continue   # deleted in the working tree
            is_build_product "$f" && continue   # e.g. a concurrent build's *.o.tmp
            mkdir -p "$dest/$(dirname "$f")"; cp -p "$ROOT/$f" "$dest/$f"
        done
else
    (cd "$ROOT" && find "${paths[@]}" -type f -print0 |
        while IFS= read -r -d '' f; do
            is_build_product "$f" && continue
            mkdir -p "$dest/$(dirname "$f")"; cp -p "$f" "$dest/$f"
        done)
fi
for f in "${paths[@]}"; do [ -e "$dest/$f" ] || die "$f missing from the copy in $dest"; done
say "source copied to $dest ($(find "$dest" -type f | wc -l) files)"

# ---- add, build, install -----------------------------------------------------------
"$DKMS" add -m "$NAME" -v "$VER" "${trees[@]}" >&2 || die "dkms add failed"
if ! "$DKMS" build -m "$NAME" -v "$VER" -k "$KERNELRELEASE" --kernelsourcedir "$KDIR" "${trees[@]}" >&2; then
    log=${DKMS_TREE:-/var/lib/dkms}/$NAME/$VER/build/make.log
    [ -f "$log" ] && { say "tail of $log:"; tail -n 40 "$log" >&2; }
    die "dkms build of $NAME/$VER for $KERNELRELEASE failed"
fi
# dkms install refuses a kernel without a module directory; a KDIR built outside
# a package (like the test kernel) has none until its modules are installed.
mkdir -p "$install_tree/$KERNELRELEASE"
"$DKMS" install -m "$NAME" -v "$VER" -k "$KERNELRELEASE" --kernelsourcedir "$KDIR" --force \
    "${trees[@]}" "${depmod[@]}" >&2 || die "dkms install failed"
ko=$(find "$install_tree/$KERNELRELEASE/updates/dkms" -name "$NAME.ko*" 2>/dev/null | head -n1)
[ -n "$ko" ] || die "dkms install reported success but no $NAME.ko under $install_tree/$KERNELRELEASE/updates/dkms"
if [ -n "${DKMS_INSTALL_TREE:-}" ] && [ "${install_tree%/lib/modules}" != "$install_tree" ]; then
    # (a bare tree has no modules.order/modules.builtin: not worth a warning)
    depmod -b "${install_tree%/lib/modules}" "$KERNELRELEASE" 2>&1 |
        grep -v 'could not open modules\.' | sed 's/^/dkms-install: depmod: /' >&2 || true
fi
"$DKMS" status -m "$NAME" "${trees[@]}" >&2
say "installed $NAME/$VER for $KERNELRELEASE"
echo "$ko"
