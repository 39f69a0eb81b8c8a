#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# The userspace suite of `make check` (tests/check.sh: suite lint): crate
# hygiene of userspace/, every cargo step with --locked.
#   1 rustfmt           cargo fmt --check
#   2 clippy            warnings are errors, every target
#   3 clippy regenerate the bindings' build script (feature regenerate)
#   4 bindings fresh    regenerating gpunvme-sys from uapi/gpunvme.h gives
#                       the committed src/generated/ (bindgen + libclang)
#   5 rust-version      the workspace's rust-version is the newest any
#                       locked dependency needs (clippy's incompatible_msrv,
#                       in step 2, checks our own use of std against it)
#   6 msrv build        cargo check of every crate and target with the
#                       declared rust-version itself (the toolchain
#                       tests/deps.sh installs through rustup), --locked;
#                       its own target/msrv so the main build stays warm
#   7 docs              cargo doc, warnings as errors; target/doc/gpunvme is
#                       the library's page (the CLI binary is doc = false)
#   8 example           the device-free example runs
# Output: "ok N - ..." / "not ok N - ...", then "N passed, N failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT/userspace" || exit 1
export PATH="$HOME/.cargo/bin:$PATH"
CARGO=${CARGO:-cargo}
[ -n "${LIBCLANG_PATH:-}" ] || [ ! -d /usr/lib/llvm-19/lib ] || export LIBCLANG_PATH=/usr/lib/llvm-19/lib
. "$ROOT/tests/steps.sh"

msrv() {
    "$CARGO" metadata --locked --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
ws = set(m["workspace_members"])
def v(s): return (tuple(int(x) for x in s.split(".")) + (0, 0))[:3]
deps = [(v(p["rust_version"]), p["name"]) for p in m["packages"]
        if p["id"] not in ws and p.get("rust_version")]
need, who = max(deps)
ours = {p["rust_version"] for p in m["packages"] if p["id"] in ws}
need_s = ".".join(map(str, need))
print(f"locked dependencies need {need_s} ({who}); the crates declare {sorted(ours)}")
ok = len(ours) == 1 and v(ours.pop()) == need
sys.exit(0 if ok else 1)'
}

# The toolchain of the workspace's rust-version: "1.85" is 1.85.0.
msrv_toolchain() {
    local v
    v=$(sed -n 's/^rust-version *= *"\([0-9.]*\)"/\1/p' Cargo.toml | head -1)
    [ -n "$v" ] || return 1
    case $v in *.*.*) echo "$v" ;; *) echo "$v.0" ;; esac
}

msrv_build() {
    local tc
    tc=$(msrv_toolchain) || { echo "no rust-version in userspace/Cargo.toml"; return 1; }
    rustup run "$tc" rustc --version >/dev/null 2>&1 || {
        echo "toolchain $tc (the declared rust-version) is not installed: run make deps"
        return 1; }
    rustup run "$tc" cargo check --locked --workspace --all-targets --target-dir target/msrv
}

docs() {
    RUSTDOCFLAGS="-D warnings" "$CARGO" doc --locked --no-deps --workspace || return 1
    grep -q 'Safe userspace API' target/doc/gpunvme/index.html || {
        echo "target/doc/gpunvme/index.html is not the library's page"; return 1; }
}

echo "1..8"
step "rustfmt" "$CARGO" fmt --check
step "clippy -D warnings" "$CARGO" clippy --locked --workspace --all-targets -- -D warnings
step "clippy gpunvme-sys --features regenerate" \
    "$CARGO" clippy --locked -p gpunvme-sys --features regenerate --all-targets -- -D warnings
step "bindings regenerate to the committed files" \
    "$CARGO" test --locked -p gpunvme-sys --features regenerate --test generated
step "rust-version matches the lock file" msrv
step "cargo check with the declared rust-version" msrv_build
step "cargo doc: the library's own pages, no warnings" docs
step "example prp_plan runs" "$CARGO" run --locked -q -p gpunvme --example prp_plan
steps_done
