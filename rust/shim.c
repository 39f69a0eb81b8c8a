// SPDX-License-Identifier: GPL-2.0
/*
 * The few kernel calls the Rust crate of 7.3 does not wrap. Each function is
 * a thin forwarder; callers are in rust/shim.rs, which states the contract.
 */
#include <linux/pci.h>
#include "shim.h"

void gpunvme_shim_clear_master(struct device *dev)
{
	pci_clear_master(to_pci_dev(dev));
}
