#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# make check: every suite, each result counted once, one closing line.
#   host   cargo test of the userspace crates (--locked)
#   lint   userspace hygiene: rustfmt, clippy -D warnings, bindings regenerate
#          to the committed ones, rust-version (and a cargo check with it), cargo doc, examples
#   python the Python package's wheel built by maturin, and its tests that need
#          no device (pytest: errors, buffer parsing with fake DLPack capsules,
#          transfer checks, the .pyi against the module)
#   gpu    the device library as host C++ (kernels/ host-test: queue, per-thread API, self-test harness,
#          the array over model controllers, array_host.h as C11)
#   relay  the H200 bench's port of the shared-mode relay and checks, as host C++
#   ptmodel the device library (kernels/hostrun) through the userspace passthrough
#          back end on its model namespace (no device, no VM)
#   isa    every doorbell, poll, release, acquire and payload site of every AMD object (+ negative tests)
#   guide  kernels/README.md's code is the code that is built and run
#   kcache two builds of one test kernel at once: one waits, the kernel is built once
#   runner the VM runner itself: passing, failing and hung tests are counted right
#   vm     kselftests + KUnit in the QEMU VM, against the emulated NVMe (the
#          Python package's device tests in its own boot)
#   modlint the module: rustfmt with the kernel's .rustfmt.toml, clippy (CLIPPY=1)
#   dkms   the module built through DKMS, then loaded and smoke-tested in the VM
#   docs   uapi/gpunvme.md matches uapi/gpunvme.h (+ its self-test); links and SVGs in the docs
#   kit    the hardware first-contact kit (tests/hardware/first_contact.sh) against a stand-in CLI
# A suite that fails to build or run counts as one failure.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LOGS=${CHECK_LOGS:-$(mktemp -d /tmp/gpunvme-check.XXXXXX)}
mkdir -p "$LOGS"
pass=0 fail=0 skip=0 broken=()

# Add the counts from a log's closing "N passed, N failed[, N skipped]" line.
count_plain() {
    local line
    line=$(grep -E '^(# )?([A-Za-z]+: )?[0-9]+ passed, [0-9]+ failed' "$1" | tail -1)
    [ -n "$line" ] || return 1
    line=${line#\# }
    pass=$((pass + $(sed -E 's/^([A-Za-z]+: )?([0-9]+) passed.*/\2/' <<<"$line")))
    fail=$((fail + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
    grep -q skipped <<<"$line" && skip=$((skip + $(sed -E 's/.* ([0-9]+) skipped.*/\1/' <<<"$line")))
    return 0
}

# A suite made of several runners, each closing with its own line: add them all.
count_plain_all() {
    local p f n=0
    while read -r p f; do
        pass=$((pass + p)); fail=$((fail + f)); n=$((n + 1))
    done < <(sed -nE 's/^([A-Za-z]+: )?([0-9]+) passed, ([0-9]+) failed.*/\2 \3/p' "$1")
    [ "$n" -gt 0 ]
}

# cargo prints one "test result:" line per test binary.
count_cargo() {
    local p f n=0
    while read -r p f; do
        pass=$((pass + p)); fail=$((fail + f)); n=$((n + 1))
    done < <(sed -nE 's/^test result: [a-zA-Z]+\. ([0-9]+) passed; ([0-9]+) failed.*/\1 \2/p' "$1")
    [ "$n" -gt 0 ]
}

suite() {
    local name=$1 counter=$2; shift 2
    echo "=== $name: $*"
    "$@" 2>&1 | tee "$LOGS/$name.log"
    local rc=${PIPESTATUS[0]}
    if ! "$counter" "$LOGS/$name.log"; then
        echo "=== $name: no results (exit $rc)"; fail=$((fail + 1)); broken+=("$name")
    elif [ "$rc" != 0 ]; then
        # Results were counted; a non-zero exit without a failed test still fails.
        grep -qE '[1-9][0-9]* failed|^not ok' "$LOGS/$name.log" || { fail=$((fail + 1)); broken+=("$name"); }
    fi
}

suite host count_cargo make -s -C "$ROOT" host-test
suite lint count_plain bash "$ROOT"/tests/userspace/lint.sh
suite python count_plain make -s -C "$ROOT" python-test
suite gpu count_plain_all make -s -C "$ROOT"/kernels host-test
suite relay count_plain make -s -C "$ROOT"/kernels bench-host-test
suite ptmodel count_plain make -s -C "$ROOT" hostrun-pt-model
suite isa count_plain_all make -s -C "$ROOT" isa-check
suite guide count_plain make -s -C "$ROOT"/kernels guide-check
suite kcache count_plain bash "$ROOT"/tests/kernel/build_lock_test.sh
suite runner count_plain bash "$ROOT"/tests/vm/selftest.sh
suite vm count_plain make -s -C "$ROOT" vm-test
suite modlint count_plain bash "$ROOT"/tests/module/lint.sh
suite dkms count_plain make -s -C "$ROOT" dkms-check
suite docs count_plain bash "$ROOT"/tests/docs/check_uapi_reference.sh
suite kit count_plain bash "$ROOT"/tests/hardware/first_contact_test.sh

echo "logs: $LOGS"
((${#broken[@]})) && echo "suites that did not finish cleanly: ${broken[*]}"
if [ "$skip" -gt 0 ]; then
    echo "$pass passed, $fail failed, $skip skipped"
else
    echo "$pass passed, $fail failed"
fi
[ "$fail" = 0 ]
