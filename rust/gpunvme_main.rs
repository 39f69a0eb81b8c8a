// SPDX-License-Identifier: GPL-2.0-only

//! gpunvme: owns an NVMe controller so that a GPU can drive it directly.
//!
//! The driver never matches by PCI class: it binds only to a controller that
//! userspace hands it through `driver_override`, so it can never take the
//! boot disk from the in-kernel nvme driver by accident.

use kernel::{
    device::Core,
    dma::{Coherent, Device as _, DmaMask},
    io::Io,
    pci,
    prelude::*,
    sync::{aref::ARef, atomic::Atomic, Arc},
};

// One folder per subsystem.
mod bridge; // shared mode's relay threads and the command validator
mod controller; // registers, bring-up, admin queue, failure paths, shared state
mod dma; // the registry of DMA memory, a file's pages, dma-buf export/import
mod queues; // I/O queue pairs and NVMe command encoding
mod shim; // the C the 7.3 Rust crate cannot reach, behind typed owners
mod uapi; // the ioctl ABI, device nodes and per-file operations

use controller::{admin, debugfs, identify, lifecycle, regs, shared, BAR0_MIN};
use uapi::{chardev, owner};

// PRP entries and MAP_HOST hand out one DMA address per 4 KiB page, which
// is one kernel page only where PAGE_SIZE is 4 KiB.
const _: () = assert!(
    kernel::page::PAGE_SIZE == 4096,
    "gpunvme needs 4 KiB kernel pages"
);

/// PCI class code of an NVM Express controller (mass storage, NVM, NVMe).
const PCI_CLASS_NVME: u32 = 0x01_08_02;

struct GpunvmeDriver;

/// Per-binding state. Fields drop in order: the device node goes first, so
/// no new file can reach the controller once unbinding has begun.
#[pin_data]
struct Bound {
    /// Stopped first, at unbind: the CSTS watch and the PCI hooks.
    hooks: lifecycle::Hooks,
    /// `gpunvme-<bdf>`, what `debug` was made with.
    debug_name: kernel::str::CString,
    /// debugfs `gpunvme-<bdf>/`: removed at unbind, before the device goes
    /// (`pci_event` reaches it).
    #[pin]
    debug: kernel::debugfs::Scope<debugfs::Knobs>,
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
                dev_err!(
                    pdev,
                    "not an NVMe controller (class {:#08x}); refusing to bind\n",
                    class
                );
                return Err(ENODEV);
            }
            // The device node first: a controller we could not expose is never
            // enabled, so this failure leaves nothing running or allocated.
            let slot = chardev::Slot::claim().inspect_err(|_| {
                dev_err!(
                    pdev,
                    "no free /dev/gpunvme node; refusing to bind (controller left untouched)\n"
                );
            })?;
            pdev.enable_device_mem()?;
            pdev.set_master();
            // SAFETY: nothing has been allocated for DMA on this device yet.
            unsafe { pdev.dma_set_mask_and_coherent(DmaMask::new::<64>())? };
            // PRPs have no segment limit (the nvme driver says the same), so
            // a pinned buffer may map as one segment however long it is.
            // SAFETY: as above, no DMA mapping of this device exists yet.
            unsafe { pdev.dma_set_max_seg_size(u32::MAX) };

            let devres_bar = pdev
                .iomap_region_sized::<BAR0_MIN>(0, c"gpunvme/bar0")?
                .into_devres()?;
            let bar = devres_bar.access(pdev.as_ref())?;
            // Two 32-bit reads, low half first: the spec allows it and the BAR
            // mapping only guarantees 32-bit alignment.
            let cap = regs::Cap::from_halves(
                bar.read32(regs::offset::<regs::CAP>()),
                bar.read32(regs::offset::<regs::CAP>() + 4),
            );
            let vs = regs::Version(bar.read(regs::VS).into_raw());
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
            let no_fake = Atomic::new(0u32);
            let mut admin = admin::AdminQueue::new(dev)?;
            let buf: Coherent<[u8]> =
                Coherent::zeroed_slice(dev, identify::IDENTIFY_LEN, GFP_KERNEL)?;
            controller::disable(dev, bar, cap, &no_fake)?;
            // From here on a failure must stop the controller before the
            // admin queue and the Identify buffer are freed; if it will not
            // stop, both are kept (leaked) and bus mastering is cleared.
            let fail = |admin: admin::AdminQueue, buf: Coherent<[u8]>, e: Error| -> Error {
                if controller::disable(dev, bar, cap, &no_fake).is_err() {
                    dev_err!(
                        pdev,
                        "probe failed and the controller did not stop: keeping its queue memory\n"
                    );
                    shim::clear_bus_master(pdev);
                    core::mem::forget(admin);
                    core::mem::forget(buf);
                }
                e
            };
            if let Err(e) = controller::enable(dev, bar, cap, &admin) {
                return Err(fail(admin, buf, e));
            }
            let ring = |offset: usize, value: u32| bar.try_write32(value, offset);
            if let Err(e) = controller::identify(dev, &mut admin, cap, &ring, &buf, &mut info) {
                return Err(fail(admin, buf, e));
            }
            drop(buf);

            let iommu = shim::iommu_mode(dev);
            dev_info!(
                pdev,
                "IOMMU: {}; owner mode (raw access) {}\n",
                owner::iommu_name(iommu),
                match iommu {
                    uapi::IOMMU_STRICT => "allowed",
                    uapi::IOMMU_LAZY =>
                        "allowed (lazy: stale-IOTLB window after unmap; iommu.strict=1 closes it)",
                    _ if allow_unsafe_no_iommu() =>
                        "allowed by allow_unsafe_no_iommu (taints on claim)",
                    _ => "refused (shared mode only)",
                }
            );
            let bar_len = usize::try_from(pdev.resource_len(0)?).map_err(|_| EINVAL)?;
            let shared =
                shared::Shared::new(ARef::from(dev), info, cap, devres_bar, bar_len, admin)?;
            dev_info!(
                pdev,
                "NVMe {}.{}.{}, MQES {}, doorbell stride {}, CAP.TO {} ms -> /dev/{}\n",
                vs.major(),
                vs.minor(),
                vs.tertiary(),
                cap.max_queue_entries(),
                cap.doorbell_stride(),
                cap.ready_timeout_ms(),
                slot.name().to_str().unwrap_or("?")
            );
            let hooks = lifecycle::Hooks::new(dev, &shared)?;
            Ok(try_pin_init!(Bound {
                hooks,
                debug_name: debugfs::name(&shared)?,
                debug <- debugfs::directory(shared.clone(), debug_name),
                node <- chardev::Node::new(shared.clone(), slot),
                shared,
            }))
        })
    }

    fn unbind<'bound>(pdev: &'bound pci::Device<Core<'_>>, this: Pin<&Self::Data<'bound>>) {
        // No watch tick and no PCI callback runs from here on.
        this.hooks.stop();
        // Cut off every file (ENODEV; poll reports EPOLLERR | EPOLLHUP),
        // zap user mappings, revoke exports, stop relays, delete the
        // queues, CC.SHN, disable, then free every DMA buffer while the
        // device is still bound.
        this.shared.fail(shared::failure::Failure::Unbind);
        dev_info!(
            pdev,
            "unbound; /dev/{} removed\n",
            this.node.name().to_str().unwrap_or("?")
        );
    }
}

/// The module parameter waiving owner mode's IOMMU requirement.
pub(crate) fn allow_unsafe_no_iommu() -> bool {
    module_parameters::allow_unsafe_no_iommu.value()
}

/// The module parameter bounding the relay pool (0: one thread per CPU).
pub(crate) fn relay_threads() -> u32 {
    module_parameters::relay_threads.value()
}

kernel::module_pci_driver! {
    type: GpunvmeDriver,
    name: "gpunvme",
    authors: ["gpunvme developers"],
    description: "Lets a GPU drive an NVMe controller directly",
    license: "GPL",
    params: {
        allow_unsafe_no_iommu: bool {
            default: false,
            description: "Allow owner mode (raw access) without a translating IOMMU: the owner can then make the controller DMA anywhere in memory. Taints the kernel.",
        },
        relay_threads: u32 {
            default: 0,
            description: "Threads relaying shared-mode queue pairs, for all controllers (0: one per online CPU; never more).",
        },
    },
}
