#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# tests/vm/selftest.sh: test the VM runner itself (eight VM boots, ~2 min).
# Runs known-good and known-bad fixtures from tests/vm/selftest/ and checks
# run.sh's exit status, its last line and a few of its messages.
# Extra arguments (e.g. --kdir DIR) are passed to every run.sh call.
# Exit 0 iff every check held; prints KTAP.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FX=$HERE/selftest
work=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-vm-selftest.XXXXXX")
trap 'rm -rf "$work"' EXIT

n=0 failed=0
result() {  # result OK NAME
    n=$((n + 1))
    if [ "$1" = 1 ]; then echo "ok $n $2"; else echo "not ok $n $2"; failed=$((failed + 1)); fi
}

# expect NAME WANT_RC WANT_LAST_LINE [GREP_PATTERN...] -- RUN.SH ARGS...
expect() {
    local name=$1 want_rc=$2 want_last=$3 pats=() rc=0 out last ok=1 p
    shift 3
    while [ "$1" != -- ]; do pats+=("$1"); shift; done
    shift
    out=$work/$name.out
    "$HERE/run.sh" --log "$work/$name.log" "$@" "${common[@]}" >"$out" 2>&1 || rc=$?
    last=$(tail -n1 "$out")
    echo "# $name: exit $rc, last line \"$last\""
    if [ "$want_rc" = nonzero ]; then [ "$rc" -ne 0 ] || ok=0; else [ "$rc" -eq "$want_rc" ] || ok=0; fi
    [ "$last" = "$want_last" ] || { ok=0; echo "#   want last line \"$want_last\""; }
    for p in ${pats[@]+"${pats[@]}"}; do
        grep -q -- "$p" "$out" || { ok=0; echo "#   missing: $p"; }
    done
    if [ "$ok" != 1 ]; then
        echo "#   run.sh output (last 40 lines):"
        tail -n 40 "$out" | sed 's/^/#     /'
    fi
    result "$ok" "$name"
}

common=("$@")
echo "TAP version 13"
echo "1..6"

# pass.sh: 2 ok (its indented "not ok" is a subtest); skip.sh: 1 skipped;
# plus "kernel log clean".
expect passing 0 "3 passed, 0 failed, 1 skipped" \
    -- --file /usr/bin/basename:hostbasename "$FX/pass.sh" "$FX/skip.sh"

# fail.sh 2/1/1, noplan.sh 0/1, hang.sh 1/1 (timeout), script-fail 0/1,
# kmsg-warn 1/0, kernel log 0/1.
expect failing 1 "4 passed, 5 failed, 1 skipped" \
    'FAIL fail.sh: not ok 2 second' 'FAIL noplan.sh: no TAP plan' \
    'FAIL hang.sh: timed out' 'FAIL script-fail.sh: exit status 1' \
    'FAIL kernel log clean' 'WARNING: injected by the gpunvme VM runner self-test' \
    -- --test-timeout 5 --script "$FX/script-fail.sh" --script "$FX/kmsg-warn.sh" \
       "$FX/fail.sh" "$FX/noplan.sh" "$FX/hang.sh"

# Overall deadline while hang.sh hangs: its "ok 1", the deadline and the
# unfinished test fail; the console log (no dmesg dump) is clean.
expect deadline nonzero "2 passed, 2 failed" \
    'deadline of 20s hit' 'last 60 console lines' \
    -- --timeout 20 --test-timeout 300 "$FX/hang.sh"

# --hotplug: the host unplugs and replugs the controller when asked; the
# pciehp-shaped lockdep report is a skip, the one naming gpunvme a failure.
# hotplug.sh 3/0, the script 1/0, kernel log 0/1, plus one skip.
expect hotplug 1 "4 passed, 1 failed, 1 skipped" \
    'hotplug: gpunvme0 deleted' 'hotplug: device_add gpunvme0 done' \
    'SKIP kernel log: 1 lockdep report' 'FAIL kernel log clean' 'WARNING: possible circular locking' \
    -- --hotplug "$FX/hotplug.sh" --script "$FX/pciehp-lockdep.sh"

# A kernel that dies before /init (no root fs: rdinit names nothing) on
# the first boot only: shown, counted as a skip, booted again, and the
# second boot's results count. pass.sh 2/0 plus "kernel log clean".
GPUNVME_VM_FIRST_BOOT_APPEND=rdinit=/nonexistent \
expect early-crash-once 0 "3 passed, 0 failed, 1 skipped" \
    'crashed before /init (no gpunvme code had run)' \
    'SKIP a first boot crashed before /init' 'Kernel panic - not syncing: VFS' \
    -- --file /usr/bin/basename:hostbasename "$FX/pass.sh"

# The same on every boot: booted twice, never more, and the run fails:
# pass.sh never started, no /init, the console's panic.
expect early-crash-always 1 "0 passed, 3 failed, 1 skipped" \
    'SKIP a first boot crashed before /init' 'FAIL boot: the VM never reached /init' \
    'FAIL kernel log clean' \
    -- --append rdinit=/nonexistent "$FX/pass.sh"

echo "# $((n - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
