# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test: a --script that passes but puts a warning in the kernel
# log: "kernel log clean" must fail.
echo "<4>WARNING: injected by the gpunvme VM runner self-test" >/dev/kmsg
