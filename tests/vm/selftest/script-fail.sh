# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: a --script that fails.
echo "failing on purpose"
exit 1
