#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: one result, then hangs (a child too): killed by the
# per-test timeout: 1 passed + 1 failed.
echo "TAP version 13"
echo "1..2"
echo "ok 1 before_hang"
sleep 1000 &
sleep 1000
echo "ok 2 never"
