#!/usr/bin/env bash
# The VM suite: the module, the CLI and every selftest in one boot.
# Expects `make module selftests userspace` to have run (make vm-test does).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
[ -f "$ROOT/gpunvme.ko" ] || { echo "suite: $ROOT/gpunvme.ko missing (make module)" >&2; exit 1; }
# The bench's own check first (devices, IOMMU mode), then the selftests.
tests=("$ROOT"/tests/vm/vm-env.sh "$ROOT"/tests/selftests/build/*)
files=(--file "$ROOT/gpunvme.ko")
cli="$ROOT/userspace/target/release/gpunvme"
[ -x "$cli" ] && files+=(--file "$cli")
exec bash "$ROOT/tests/vm/run.sh" "${files[@]}" "$@" -- "${tests[@]}"
