#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: a whole-program skip (kselftest's ksft_exit_skip).
echo "TAP version 13"
echo "1..0 # SKIP nothing to test here"
exit 4
