// SPDX-License-Identifier: GPL-2.0

//! Safe wrappers over `rust/shim.c`.

use kernel::{bindings, device::Device, pci};

extern "C" {
    // `struct device` is opaque to the shim's callers: pass it as a void pointer.
    fn gpunvme_shim_clear_master(dev: *mut core::ffi::c_void);
}

/// Stop a PCI device from mastering the bus: the last resort when it cannot
/// be disabled and memory it might DMA into is about to outlive the binding.
pub(crate) fn clear_bus_master(pdev: &pci::Device<kernel::device::Bound>) {
    let dev: &Device<kernel::device::Bound> = pdev.as_ref();
    // SAFETY: `Device` is `repr(transparent)` over `struct device`, and this
    // one is embedded in a bound `struct pci_dev`, as to_pci_dev() expects.
    unsafe { gpunvme_shim_clear_master(raw(dev).cast()) };
}

/// The C `struct device` behind a `Device` (its `as_raw` is crate-private).
pub(crate) fn raw<Ctx: kernel::device::DeviceContext>(dev: &Device<Ctx>) -> *mut bindings::device {
    core::ptr::from_ref(dev).cast::<bindings::device>().cast_mut()
}
