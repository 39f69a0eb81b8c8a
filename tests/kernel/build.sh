#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# Build (or reuse) the test kernel. Prints the build directory (KDIR) on stdout.
# The cache key covers the source version, the config fragments, RECIPE below
# and the toolchain, so a kernel is rebuilt only when one of those changes.
# Builds of one variant are serialised by a lock in the cache: a second run
# (another terminal, `make demo` beside `make check`) waits for the first and
# then reuses its kernel instead of deleting a half-built tree.
#   KERNEL_VARIANT=debug  adds tests/kernel/debug.config (KASAN, lockdep, KFENCE)
#   GPUNVME_KERNEL_LOCK_TIMEOUT  seconds to wait for another build (default 5400)
#   build.sh --dir        print the directory the kernel is (or would be) in; build nothing
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${GPUNVME_CACHE:-/var/cache/gpunvme}
VARIANT=${KERNEL_VARIANT:-default}
SRC=$(ls -d "$CACHE"/src/linux-source-7.3* 2>/dev/null | head -1)
[ -n "$SRC" ] || { echo "kernel: no Linux 7.3 source in $CACHE/src; run 'make deps'" >&2; exit 1; }

frags=("$here/gpunvme.config")
case "$VARIANT" in
    default) ;;
    debug) frags+=("$here/debug.config") ;;
    *) echo "kernel: unknown KERNEL_VARIANT '$VARIANT' (default|debug)" >&2; exit 2 ;;
esac

# Bump when the build steps below change what is built; comments and messages
# do not need a rebuild.
RECIPE=2

export LIBCLANG_PATH=/usr/lib/llvm-19/lib
MAKEFLAGS_K=(LLVM=-19)
srcver=$(make -s -C "$SRC" kernelversion)
key=$( { echo "$srcver"; cat "${frags[@]}"; echo "recipe $RECIPE"; rustc --version;
         clang-19 --version | head -1; bindgen --version; } | sha256sum | cut -c1-16)
OUT="$CACHE/kernel/$VARIANT-$srcver-$key"
[ "${1:-}" != --dir ] || { echo "$OUT"; exit 0; }

if [ -f "$OUT/.gpunvme-built" ]; then
    echo "$OUT"; exit 0
fi

# One builder per variant; whoever gets the lock second finds the kernel built.
mkdir -p "$CACHE/kernel"
exec 9>"$CACHE/kernel/.$VARIANT.lock"
wait_s=${GPUNVME_KERNEL_LOCK_TIMEOUT:-5400}
if ! flock -n 9; then
    echo "kernel: another build of the $VARIANT kernel is running; waiting (up to ${wait_s}s)" >&2
    flock -w "$wait_s" 9 || { echo "kernel: gave up after ${wait_s}s waiting for $CACHE/kernel/.$VARIANT.lock" >&2; exit 1; }
fi
if [ -f "$OUT/.gpunvme-built" ]; then
    echo "$OUT"; exit 0
fi

echo "kernel: building $VARIANT $srcver into $OUT (5-10 minutes)" >&2
rm -rf "$OUT"; mkdir -p "$OUT"
{
    make -C "$SRC" O="$OUT" "${MAKEFLAGS_K[@]}" rustavailable
    make -C "$SRC" O="$OUT" "${MAKEFLAGS_K[@]}" tinyconfig
    "$SRC/scripts/kconfig/merge_config.sh" -m -O "$OUT" "$OUT/.config" "${frags[@]}"
    make -C "$SRC" O="$OUT" "${MAKEFLAGS_K[@]}" olddefconfig
} >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; exit 1; }

# Every line of the fragments must survive olddefconfig: a dropped option means
# a missing dependency, and a silently weaker kernel would test less.
missing=0
for f in "${frags[@]}"; do
    while IFS= read -r line; do
        case "$line" in ''|'#'*) continue ;; esac
        opt=${line%%=*}; val=${line#*=}
        if [ "$val" = n ]; then
            grep -qx "$opt=y\|$opt=m" "$OUT/.config" && { echo "kernel: $opt should be off" >&2; missing=1; }
        else
            grep -qx "$line" "$OUT/.config" || { echo "kernel: $line did not take (got: $(grep "^$opt=\|$opt is not set" "$OUT/.config"))" >&2; missing=1; }
        fi
    done <"$f"
done
[ "$missing" = 0 ] || { echo "kernel: config fragment not satisfied; fix tests/kernel/*.config" >&2; exit 1; }

if ! make -C "$SRC" O="$OUT" "${MAKEFLAGS_K[@]}" -j"$(nproc)" bzImage modules >>"$OUT/build.log" 2>&1; then
    grep -m20 -E 'error|Error' "$OUT/build.log" >&2 || true
    tail -30 "$OUT/build.log" >&2
    exit 1
fi
# Modules (the in-kernel nvme driver) are installed into a staging dir for the initramfs.
make -C "$SRC" O="$OUT" "${MAKEFLAGS_K[@]}" INSTALL_MOD_PATH="$OUT/modinstall" modules_install >>"$OUT/build.log" 2>&1
touch "$OUT/.gpunvme-built"
echo "$OUT"
