#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: dies before printing a plan: one failure.
echo "# about to die"
exit 3
