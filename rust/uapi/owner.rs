// SPDX-License-Identifier: GPL-2.0-only

//! Who may hold owner mode (raw access): the checks a claim must pass.
//!
//! Raw access is controller-wide DMA authority (the doorbell page holds
//! every queue's doorbells, and SQE PRPs are raw device addresses), so,
//! as for a VFIO device fd, it needs CAP_SYS_RAWIO, is refused under
//! lockdown, and is refused unless an IOMMU translates the controller's
//! DMA: only then is "any address mapped for the device" less than "all of
//! memory". `allow_unsafe_no_iommu` waives the last check and taints.

use kernel::{bindings, device::Device, prelude::*};

use crate::shim;
use crate::uapi;

/// The name of a `GPUNVME_IOMMU_*` mode, for log lines.
pub(crate) fn iommu_name(mode: u32) -> &'static str {
    match mode {
        uapi::IOMMU_NONE => "no IOMMU",
        uapi::IOMMU_IDENTITY => "identity (passthrough, iommu=pt)",
        uapi::IOMMU_STRICT => "translated, strict",
        uapi::IOMMU_LAZY => "translated, lazy (DMA-FQ)",
        _ => "blocked or unmanaged",
    }
}

fn translating(mode: u32) -> bool {
    mode == uapi::IOMMU_STRICT || mode == uapi::IOMMU_LAZY
}

/// Why the calling task may not own the controller now, or `Ok`.
/// `node_nsid` is nonzero for a namespace node's file. With `log`, each
/// refusal (and the lazy-IOMMU warning) goes to the kernel log.
pub(crate) fn may_own(dev: &Device, node_nsid: u32, allow_unsafe: bool, log: bool) -> Result {
    if node_nsid != 0 {
        if log {
            dev_warn!(
                dev,
                "CLAIM_OWNER: a namespace node gives shared mode only; use the controller node\n"
            );
        }
        return Err(EPERM);
    }
    let cap = bindings::CAP_SYS_RAWIO as i32;
    // A claim is audited (capable()); GET_INFO only asks whether one would
    // pass, so it must not log an LSM denial on every call (noaudit).
    let rawio = if log {
        // SAFETY: capable() only reads the current task's credentials.
        unsafe { bindings::capable(cap) }
    } else {
        // SAFETY: as capable(), against the initial user namespace, a
        // static the kernel never frees; only its address is taken.
        unsafe {
            bindings::ns_capable_noaudit(core::ptr::addr_of_mut!(bindings::init_user_ns), cap)
        }
    };
    if !rawio {
        if log {
            dev_warn!(dev, "CLAIM_OWNER: CAP_SYS_RAWIO required\n");
        }
        return Err(EPERM);
    }
    if shim::pci_locked_down() {
        if log {
            dev_warn!(
                dev,
                "CLAIM_OWNER: refused under kernel lockdown (raw PCI access)\n"
            );
        }
        return Err(EPERM);
    }
    let mode = shim::iommu_mode(dev);
    if !translating(mode) {
        if !allow_unsafe {
            if log {
                dev_warn!(
                    dev,
                    "CLAIM_OWNER: IOMMU mode is {}: an owner could DMA to all of memory; \
                                refused (allow_unsafe_no_iommu=1 waives this and taints)\n",
                    iommu_name(mode)
                );
            }
            return Err(EPERM);
        }
        if log {
            dev_warn!(
                dev,
                "CLAIM_OWNER: IOMMU mode is {}, allowed by allow_unsafe_no_iommu: the owner \
                            can make the controller DMA anywhere in memory; tainting the kernel\n",
                iommu_name(mode)
            );
            shim::taint_no_iommu();
        }
    } else if mode == uapi::IOMMU_LAZY && log {
        dev_warn!(
            dev,
            "CLAIM_OWNER: lazy IOMMU (DMA-FQ): an unmapped buffer stays reachable by the \
                        controller until the next IOTLB flush; iommu.strict=1 closes that window\n"
        );
    }
    Ok(())
}
