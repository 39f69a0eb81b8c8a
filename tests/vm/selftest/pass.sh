#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: passes.  Indented KTAP subtest lines must not be counted.
echo "TAP version 13"
echo "1..2"
echo "    KTAP version 1"
echo "    1..1"
echo "    not ok 1 indented_subtest_is_not_counted"
[ "$GPUNVME_DIR" = /opt/gpunvme ] && [ -n "$GPUNVME_BDF" ] && [ -n "$KERNEL_NVME_BDF" ] &&
    [ -n "$EDU_BDF" ] && echo "ok 1 env_exported" || echo "not ok 1 env_exported"
# A dynamically linked host binary passed with --file (libraries via ldd).
[ "$(hostbasename /a/b/c)" = c ] && echo "ok 2 dynamic_file_runs" || echo "not ok 2 dynamic_file_runs"
