#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: 2 passed, 1 failed, 1 skipped; exits 1 like kselftest.
echo "TAP version 13"
echo "1..4"
echo "ok 1 first"
echo "# a diagnostic"
echo "not ok 2 second"
echo "ok 3 third # SKIP not here"
echo "ok 4 fourth"
exit 1
