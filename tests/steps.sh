# SPDX-License-Identifier: GPL-2.0-only
# Host-side check steps (sourced by the lint suites): `step NAME CMD...`
# runs CMD and prints "ok N - NAME" or, after the last 40 lines of its
# output as comments, "not ok N - NAME"; `steps_done` prints
# "N passed, N failed" and returns non-zero on any failure.
n=0 pass=0 fail=0
step() {
    local name=$1; shift
    n=$((n + 1))
    local log
    log=$("$@" 2>&1)
    if [ $? = 0 ]; then
        echo "ok $n - $name"; pass=$((pass + 1))
    else
        echo "$log" | tail -40 | sed 's/^/# /'
        echo "not ok $n - $name"; fail=$((fail + 1))
    fi
}
steps_done() {
    echo "$pass passed, $fail failed"
    [ "$fail" = 0 ]
}
