#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
# first_contact_test.sh: first_contact.sh against a stand-in gpunvme CLI (a
# script that logs its arguments and answers with canned JSON), no GPU, no
# SSD, no root: it refuses without --yes-destroy-data; every step runs
# with the arguments documented, within the scratch range; the report is
# one JSON document with every step, its command, exit status and parsed
# output; the negative control must exit 3; a failing self-test is the
# first failure while the later steps still run and are recorded.
# KTAP out; "N passed, N failed".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0 pass=0 fail=0
ok() { n=$((n + 1)); if [ "$1" = 0 ]; then pass=$((pass + 1)); echo "ok $n $2"; else fail=$((fail + 1)); echo "not ok $n $2${3:+ # $3}"; fi; }

# The stand-in: logs argv, prints JSON per command; read-verify with a seed
# other than 42 exits 3 (mismatches); with PROBE_FAILS set, probe exits 1.
cat >"$tmp/gpunvme" <<'EOF'
#!/usr/bin/env bash
printf '%s\n' "$*" >>"$STUB_LOG"
case $1 in
--version) echo "gpunvme 0.1.0" ;;
list) echo '[]' ;;
info) echo '{"bdf": "0000:03:00.0", "namespaces": [{"nsid": 1, "lba_size": 4096}]}' ;;
probe)
    echo '{"self_test": {"skipped": false, "passed": true, "cells": []}}'
    [ -z "${PROBE_FAILS:-}" ] || { echo "gpunvme: probe: the round-trip self-test failed" >&2; exit 1; } ;;
gpu-run)
    seed=42
    args=("$@")
    for ((i = 0; i < ${#args[@]}; i++)); do [ "${args[i]}" = -p ] && seed=${args[i + 1]}; done
    echo "{\"ok\": $([ "$seed" = 42 ] && echo true || echo false), \"self_test\": {\"passed\": true}}"
    [ "$seed" = 42 ] || { echo "gpunvme: gpu-run: 512 64-bit word(s) differ" >&2; exit 3; } ;;
verify) echo '{"ok": true}' ;;
*) echo "stub: unknown $1" >&2; exit 2 ;;
esac
EOF
chmod +x "$tmp/gpunvme"
export GPUNVME=$tmp/gpunvme CODE_OBJECTS=$tmp/co FIRST_CONTACT_TEST=1 STUB_LOG=$tmp/log

echo "KTAP version 1"
echo "1..10"

"$here/first_contact.sh" 0000:03:00.0 --report "$tmp/r0.json" >"$tmp/out0" 2>&1
rc=$?
ok "$([ $rc = 2 ] && [ ! -e "$tmp/r0.json" ] && [ ! -e "$STUB_LOG" ] && echo 0 || echo 1)" \
    "refused without --yes-destroy-data, before running anything" "exit $rc"

"$here/first_contact.sh" 03:00.0 --yes-destroy-data --lba 1000 --seed 42 --report "$tmp/r1.json" >"$tmp/out1" 2>&1
rc=$?
ok "$([ $rc = 0 ] && grep -q '^12 passed, 0 failed$' "$tmp/out1" && echo 0 || echo 1)" \
    "all twelve steps pass against a CLI that answers as it should" "exit $rc: $(tail -2 "$tmp/out1" | tr '\n' ' ')"

check() { # desc python-expression-over-the-report-r-and-stub-log-lines
    python3 - "$tmp/r1.json" "$STUB_LOG" "$2" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
log = open(sys.argv[2]).read().splitlines()
sys.exit(0 if eval(sys.argv[3]) else 1)
EOF
    ok $? "$1"
}
check "the report: one JSON document with the run's parameters, summary and environment" \
    'r["report"] == "gpunvme first contact" and r["controller"] == "0000:03:00.0" and r["lba"] == 1000 and r["lba_size"] == 4096 and r["summary"] == {"passed": 12, "failed": 0, "first_failure": None} and {"kernel", "cmdline", "lockdown", "commit", "rocm", "kfd_targets"} <= set(r["environment"])'
check "every step is recorded with its command, exit status and parsed JSON" \
    'len(r["steps"]) == 12 and all(s["ok"] and s["command"][0].endswith("gpunvme") and isinstance(s["output"], (dict, list)) for s in r["steps"][1:])'
check "probe runs the self-test on the controller, from the code objects" \
    'any(l.startswith("probe 0000:03:00.0 --code-objects ") and " -o json" in l for l in log)'
check "every GPU run and the verify stay in the 256 KiB at LBA 1000 (4 KiB LBAs: 64 blocks)" \
    'all(" -s 1000 " in l for l in log if l.startswith(("gpu-run", "verify"))) and any(l.startswith("verify") and " -c 64 " in l for l in log) and all(" --cmd-blocks 1 " in l or " --cmd-blocks 4 " in l for l in log if l.startswith("gpu-run"))'
check "the negative control reads with another seed and must exit 3" \
    '[s["expected_exit_status"] for s in r["steps"] if "another seed" in s["name"]] == [3] and any("-p 43" in l for l in log)'
check "the latency sweep runs at QD 1, 8 and 32, and the per-thread API with 16 KiB commands" \
    'sum(1 for l in log if "--kernel sweep" in l) == 3 and all(f"--qd {q} --cmds {q}" in " ".join(log) for q in (1, 8, 32)) and any("--api thread" in l and "--cmd-blocks 4 " in l for l in log)'

# The real CLI's parser takes every command the kit ran (it fails to open
# the controller here, exit 1, never a usage error, exit 2).
real=""
for b in "$here"/../../userspace/target/{release,debug}/gpunvme; do [ -x "$b" ] && real=$b && break; done
if [ -z "$real" ]; then
    n=$((n + 1)); pass=$((pass + 1)); echo "ok $n every command parses with the real CLI # SKIP not built"
else
    bad=""
    while read -r -a argv; do
        "$real" "${argv[@]}" --sysfs-root "$tmp/no-sysfs" >/dev/null 2>"$tmp/err"
        [ $? = 2 ] && bad="$bad; ${argv[*]}: $(head -1 "$tmp/err")"
    done <"$STUB_LOG"
    ok "$([ -z "$bad" ] && echo 0 || echo 1)" "every command parses with the real CLI" "usage errors$bad"
fi

rm -f "$STUB_LOG"
PROBE_FAILS=1 "$here/first_contact.sh" 0000:03:00.0 --yes-destroy-data --report "$tmp/r2.json" >"$tmp/out2" 2>&1
rc=$?
python3 - "$tmp/r2.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["summary"]
sys.exit(0 if s["failed"] == 1 and s["first_failure"].startswith("self-test") and len(r["steps"]) == 12 else 1)
EOF
ok "$([ $? = 0 ] && [ $rc = 1 ] && echo 0 || echo 1)" \
    "a failing self-test is the first failure, exit 1, and the later steps are still recorded" "exit $rc"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
