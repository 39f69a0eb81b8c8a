#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The module's hygiene (tests/check.sh: suite modlint), against the cached
# test kernel (tests/kernel/build.sh; built first if missing):
#   1 rustfmt   rust/**/*.rs formatted as the kernel's own `make rustfmtcheck`
#               would: rustfmt with the kernel tree's .rustfmt.toml
#   2 clippy    the module built with CLIPPY=1 (the kernel's clippy-driver
#               run, its lint levels and clippy.toml), in a scratch copy so
#               the tree's objects stay; any warning fails
# Output: "ok N - ..." / "not ok N - ...", then "N passed, N failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH"
LLVM=${LLVM:--19}
KDIR=${KDIR:-$(bash "$ROOT/tests/kernel/build.sh" --dir)}
if [ ! -f "$KDIR/Module.symvers" ]; then
    make -s -C "$ROOT" kernel >/dev/null || { echo "1..2"; echo "not ok 1 - test kernel"; echo "0 passed, 1 failed"; exit 1; }
    KDIR=$(bash "$ROOT/tests/kernel/build.sh" --dir)
fi
KSRC=$(make -s -C "$KDIR" --no-print-directory -f - <<<'all: ; @echo $(abs_srctree)' 2>/dev/null | tail -1)
[ -f "$KSRC/.rustfmt.toml" ] || KSRC=$(readlink -f "$KDIR/source" 2>/dev/null || true)
. "$ROOT/tests/steps.sh"

fmt() {
    [ -f "$KSRC/.rustfmt.toml" ] || { echo "no .rustfmt.toml in the kernel source ($KSRC)"; return 1; }
    find "$ROOT/rust" -name '*.rs' -print0 |
        xargs -0 rustfmt --check --edition 2021 --config-path "$KSRC/.rustfmt.toml"
}

clippy() {
    local tmp out
    tmp=$(mktemp -d /tmp/gpunvme-clippy.XXXXXX)
    # The tracked and new files as they are in the tree (uncommitted edits
    # count too), without build output.
    (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard Kbuild rust uapi |
        xargs -0 cp --parents -t "$tmp") || return 1
    out=$(make -C "$KDIR" M="$tmp" LLVM="$LLVM" CLIPPY=1 modules 2>&1)
    local rc=$?
    rm -rf "$tmp"
    echo "$out" | grep -E '^(warning|error)' -A8
    [ "$rc" = 0 ] && ! grep -qE '^(warning|error)' <<<"$out"
}

echo "1..2"
step "rustfmt (the kernel's .rustfmt.toml)" fmt
step "clippy (CLIPPY=1), no warnings" clippy
steps_done
