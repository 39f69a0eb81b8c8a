# SPDX-License-Identifier: GPL-2.0-only
# Runner self-test (run.sh --hotplug): two fake lockdep reports. The first
# has the shape of pciehp's own (see run.sh) and must be shown as a skip;
# the second names a gpunvme function and must fail "kernel log clean".
report() {  # report EXTRA_FRAME
    for l in "WARNING: possible circular locking dependency detected" \
             "irq/25-pciehp/36 is trying to acquire lock:" \
             " (&ctrl->reset_lock){.+.+}-{4:4}, at: pciehp_unconfigure_device+0x148/0x1d0" \
             " (pci_rescan_remove_lock){+.+.}-{4:4}, at: pciehp_unconfigure_device+0xa8/0x1d0" \
             "Call Trace:" " <TASK>" "$1" " pciehp_unconfigure_device+0x148/0x1d0" " </TASK>"; do
        echo "<4>$l" >/dev/kmsg
    done
}
report " pciehp_disable_slot+0x62/0x230"
report " gpunvme_fake_frame+0x10/0x20 [gpunvme]"
