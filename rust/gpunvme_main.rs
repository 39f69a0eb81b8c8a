// SPDX-License-Identifier: GPL-2.0

//! gpunvme: owns an NVMe controller so that a GPU can drive it directly.
//!
//! The driver never matches by PCI class: it binds only to a controller that
//! userspace hands it through `driver_override`, so it can never take the
//! boot disk from the in-kernel nvme driver by accident.

use kernel::{
    io::Io,
    device::Core,
    pci,
    prelude::*,
    sync::aref::ARef,
};

mod chardev;
mod regs;
mod uapi;

/// PCI class code of an NVM Express controller (mass storage, NVM, NVMe).
const PCI_CLASS_NVME: u32 = 0x01_08_02;
/// Registers plus the admin doorbells: the least any NVMe BAR0 maps.
const BAR0_MIN: usize = 0x2000;

struct GpunvmeDriver;

/// Per-binding state. Fields drop in order: the device node goes first, so
/// no new file can reach the controller while the BAR is being unmapped.
#[pin_data]
struct Bound<'bound> {
    #[pin]
    node: chardev::Node,
    shared: kernel::sync::Arc<chardev::Shared>,
    _bar: pci::Bar<'bound, BAR0_MIN>,
}

// Deliberately empty: binding happens only through driver_override.
kernel::pci_device_table!(PCI_TABLE, <GpunvmeDriver as pci::Driver>::IdInfo, []);

impl pci::Driver for GpunvmeDriver {
    type IdInfo = ();
    type Data<'bound> = Bound<'bound>;

    const ID_TABLE: pci::IdTable<Self::IdInfo> = &PCI_TABLE;

    fn probe<'bound>(
        pdev: &'bound pci::Device<Core<'_>>,
        _info: Option<&'bound Self::IdInfo>,
    ) -> impl PinInit<Self::Data<'bound>, Error> + 'bound {
        pin_init::pin_init_scope(move || {
            let class = pdev.pci_class().as_raw();
            if class != PCI_CLASS_NVME {
                dev_err!(pdev, "not an NVMe controller (class {:#08x}); refusing to bind\n", class);
                return Err(ENODEV);
            }
            pdev.enable_device_mem()?;
            pdev.set_master();
            let bar = pdev.iomap_region_sized::<BAR0_MIN>(0, c"gpunvme/bar0")?;

            // Two 32-bit reads, low half first: the spec allows it and the BAR
            // mapping only guarantees 32-bit alignment.
            let cap = regs::Cap(
                u64::from(bar.read32(regs::CAP)) | (u64::from(bar.read32(regs::CAP + 4)) << 32),
            );
            let vs = regs::Version(bar.read32(regs::VS));
            if cap.0 == u64::MAX {
                dev_err!(pdev, "CAP reads all-ones: controller not responding\n");
                return Err(EIO);
            }

            let mut info = uapi::Info {
                cap: cap.0,
                vs: vs.0,
                pci_vendor: pdev.vendor_id().as_raw(),
                pci_device: pdev.device_id(),
                max_queue_entries: cap.max_queue_entries(),
                doorbell_stride: cap.doorbell_stride(),
                ready_timeout_ms: cap.ready_timeout_ms(),
                ..Default::default()
            };
            let name = pdev.as_ref().name().to_bytes();
            let n = name.len().min(uapi::BDF_LEN - 1);
            info.bdf[..n].copy_from_slice(&name[..n]);

            let shared = chardev::Shared::new(ARef::from(pdev.as_ref()), info)?;
            let slot = chardev::Slot::claim()?;
            dev_info!(
                pdev,
                "NVMe {}.{}.{}, MQES {}, doorbell stride {}, CAP.TO {} ms -> /dev/{}\n",
                vs.major(), vs.minor(), vs.tertiary(),
                cap.max_queue_entries(), cap.doorbell_stride(), cap.ready_timeout_ms(),
                slot.name().to_str().unwrap_or("?")
            );
            Ok(try_pin_init!(Bound {
                node <- chardev::Node::new(shared.clone(), slot),
                shared,
                _bar: bar,
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        this.shared.revoke();
        dev_info!(pdev, "unbound; /dev/{} removed\n", this.node.name().to_str().unwrap_or("?"));
    }
}

kernel::module_pci_driver! {
    type: GpunvmeDriver,
    name: "gpunvme",
    authors: ["gpunvme developers"],
    description: "Lets a GPU drive an NVMe controller directly",
    license: "GPL",
}
