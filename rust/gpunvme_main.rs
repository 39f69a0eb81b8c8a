// SPDX-License-Identifier: GPL-2.0

//! gpunvme: owns an NVMe controller so that a GPU can drive it directly.
//!
//! The driver never matches by PCI class: it binds only to a controller that
//! userspace hands it through `driver_override`, so it can never take the
//! boot disk from the in-kernel nvme driver by accident.

use kernel::{
    device::Core,
    dma::{Device as _, DmaMask},
    io::Io,
    pci,
    prelude::*,
    sync::{aref::ARef, Arc},
};

mod admin;
mod bridge;
mod chardev;
mod file;
mod qpair;
mod shared;
mod command;
mod controller;
mod dma_registry;
mod identify;
mod regs;
mod shim;
mod uapi;

use controller::BAR0_MIN;

/// PCI class code of an NVM Express controller (mass storage, NVM, NVMe).
const PCI_CLASS_NVME: u32 = 0x01_08_02;

struct GpunvmeDriver;

/// Per-binding state. Fields drop in order: the device node goes first, so
/// no new file can reach the controller once unbinding has begun.
#[pin_data]
struct Bound {
    #[pin]
    node: chardev::Node,
    shared: Arc<shared::Shared>,
}

// Deliberately empty: binding happens only through driver_override.
kernel::pci_device_table!(PCI_TABLE, <GpunvmeDriver as pci::Driver>::IdInfo, []);

impl pci::Driver for GpunvmeDriver {
    type IdInfo = ();
    type Data<'bound> = Bound;

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
            // SAFETY: nothing has been allocated for DMA on this device yet.
            unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };

            let devres_bar = pdev.iomap_region_sized::<BAR0_MIN>(0, c"gpunvme/bar0")?.into_devres()?;
            let bar = devres_bar.access(pdev.as_ref())?;
            // Two 32-bit reads, low half first: the spec allows it and the BAR
            // mapping only guarantees 32-bit alignment.
            let cap = regs::Cap(u64::from(bar.read32(regs::CAP)) | (u64::from(bar.read32(regs::CAP + 4)) << 32));
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

            let dev = pdev.as_ref();
            let mut admin = admin::AdminQueue::new(dev)?;
            controller::disable(dev, bar, cap)?;
            controller::enable(dev, bar, cap, &admin)?;
            let ring = |offset: usize, value: u32| bar.try_write32(value, offset);
            if let Err(e) = controller::identify(dev, &mut admin, cap, &ring, &mut info) {
                // The admin queue is freed on return: stop the controller first.
                let _ = controller::disable(dev, bar, cap);
                return Err(e);
            }

            let shared = shared::Shared::new(ARef::from(dev), info, cap, devres_bar, admin)?;
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
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        let shared = &this.shared;
        // Fail new calls, zap user mappings, stop the controller, then free
        // every DMA buffer while the device is still bound.
        shared.shut_down(|| match shared.bar.access(pdev.as_ref()) {
            Ok(bar) => {
                if controller::disable(pdev.as_ref(), bar, shared.cap).is_err() {
                    dev_err!(pdev, "disable failed; clearing bus mastering instead\n");
                    shim::clear_bus_master(pdev);
                }
            }
            Err(_) => {
                dev_err!(pdev, "BAR0 already revoked at unbind; clearing bus mastering\n");
                shim::clear_bus_master(pdev);
            }
        });
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
