// SPDX-License-Identifier: GPL-2.0-only

//! Controller bring-up and shutdown, in the order drivers/nvme/host/pci.c
//! uses: disable and wait, admin queue, enable and wait, identify, then the
//! number of I/O queues. Every wait is bounded by CAP.TO.

pub(crate) mod admin;
pub(crate) mod debugfs;
pub(crate) mod geometry;
pub(crate) mod identify;
pub(crate) mod lifecycle;
pub(crate) mod regs;
pub(crate) mod shared;

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    io::{poll::read_poll_timeout, Io},
    pci,
    prelude::*,
    sync::atomic::{Atomic, Relaxed},
    time::Delta,
};

use crate::controller::admin::{AdminQueue, ADMIN_DEPTH};
use crate::queues::command;
use crate::uapi;
use regs::{Cap, ACQ, ASQ, CC, CSTS};

/// Registers plus the doorbells of the first 64 queue pairs at the
/// smallest stride: the least any NVMe BAR0 maps.
pub(crate) const BAR0_MIN: usize = 0x2000;
pub(crate) type Bar0<'a> = pci::Bar<'a, BAR0_MIN>;

/// `Shared::fake_csts` values (debugfs `fake_csts`: off, cfs, ones).
pub(crate) const FAKE_CFS: u32 = 1;
pub(crate) const FAKE_ONES: u32 = 2;

/// `fake_csts`: 0 off, `FAKE_CFS`, `FAKE_ONES`; read and written by name.
/// Here, beside `disable`, which honours it, rather than in debugfs.rs,
/// which shows it: the shared state holds one, and debugfs uses the shared
/// state, not the other way.
pub(crate) struct FakeCsts(Atomic<u32>);

impl FakeCsts {
    pub(crate) const fn new() -> Self {
        Self(Atomic::new(0))
    }
}

impl core::ops::Deref for FakeCsts {
    type Target = Atomic<u32>;
    fn deref(&self) -> &Atomic<u32> {
        &self.0
    }
}

/// I/O queue pairs asked for; the controller may grant fewer.
const WANT_IO_QUEUES: u16 = 64;

fn ready_timeout(cap: Cap) -> Delta {
    // CAP.TO of 0 is legal but useless as a deadline; use 500 ms then.
    Delta::from_millis(i64::from(cap.ready_timeout_ms().max(500)))
}

/// A 64-bit register as two 32-bit writes, low half first.
fn write64(bar: &Bar0<'_>, offset: usize, value: u64) {
    let (lo, hi) = regs::halves(value);
    bar.write32(lo, offset);
    bar.write32(hi, offset + 4);
}

/// Clear CC.EN and wait for CSTS.RDY to drop. After this the controller
/// does no more DMA. `fake` is the `fake_csts` knob (`Shared::fake_csts`):
/// all-ones makes every read all-ones; a faked CFS is cleared by the
/// disable, as a reset clears a real one.
pub(crate) fn disable(dev: &Device, bar: &Bar0<'_>, cap: Cap, fake: &Atomic<u32>) -> Result {
    let ones = || fake.load(Relaxed) == FAKE_ONES;
    let cc = if ones() {
        CC::from_raw(u32::MAX)
    } else {
        bar.read(CC)
    };
    if cc.into_raw() == u32::MAX {
        dev_err!(dev, "controller gone (CC reads all-ones)\n");
        return Err(ENODEV);
    }
    bar.write_reg(cc.with_en(false));
    let _ = fake.cmpxchg(FAKE_CFS, 0, Relaxed);
    read_poll_timeout(
        || {
            Ok(if ones() {
                CSTS::from_raw(u32::MAX)
            } else {
                bar.read(CSTS)
            })
        },
        |s: &CSTS| s.into_raw() != u32::MAX && !s.rdy(),
        Delta::from_millis(1),
        ready_timeout(cap),
    )
    .map(|_| ())
    .inspect_err(|_| {
        dev_err!(
            dev,
            "controller did not become idle within {} ms\n",
            ready_timeout(cap).as_millis()
        )
    })
}

/// Program the admin queue and set CC.EN; wait for CSTS.RDY (or CFS).
pub(crate) fn enable(dev: &Device, bar: &Bar0<'_>, cap: Cap, admin: &AdminQueue) -> Result {
    if cap.min_page_size() > regs::PAGE_SIZE as u64 || !cap.supports_nvm_command_set() {
        dev_err!(
            dev,
            "controller needs pages of {} bytes or lacks the NVM command set\n",
            cap.min_page_size()
        );
        return Err(ENODEV);
    }
    bar.write_reg(regs::aqa(ADMIN_DEPTH).ok_or(EINVAL)?);
    let asq = ASQ::from_raw(0).try_with_asqb(admin.sq_dma() >> 12)?;
    let acq = ACQ::from_raw(0).try_with_acqb(admin.cq_dma() >> 12)?;
    write64(bar, regs::offset::<ASQ>(), asq.into_raw());
    write64(bar, regs::offset::<ACQ>(), acq.into_raw());
    bar.write_reg(regs::cc_enable());
    let csts = read_poll_timeout(
        || Ok(bar.read(CSTS)),
        |s: &CSTS| s.rdy() || s.cfs(),
        Delta::from_millis(1),
        ready_timeout(cap),
    )
    .inspect_err(|_| {
        dev_err!(
            dev,
            "controller not ready within {} ms\n",
            ready_timeout(cap).as_millis()
        )
    })?;
    if csts.cfs() {
        dev_err!(
            dev,
            "controller fatal status (CSTS {:#x}) during enable\n",
            csts.into_raw()
        );
        return Err(EIO);
    }
    Ok(())
}

/// Identify the controller and its active namespaces, and ask for the I/O
/// queues; the results go into `info`.
pub(crate) fn identify(
    dev: &Device<Bound>,
    admin: &mut AdminQueue,
    cap: Cap,
    ring: &dyn Fn(usize, u32) -> Result,
    buf: &Coherent<[u8]>,
    info: &mut uapi::Info,
) -> Result {
    let read = |admin: &mut AdminQueue,
                cns: u32,
                nsid: u32,
                out: &mut [u8; identify::IDENTIFY_LEN]|
     -> Result {
        admin.submit(
            dev,
            cap,
            command::identify(cns, nsid, buf.dma_address()),
            ring,
        )?;
        // SAFETY: the command completed, so the controller is done writing
        // `buf`, and nothing else touches it.
        out.copy_from_slice(unsafe { buf.as_ref() });
        Ok(())
    };
    let mut data = KBox::new([0u8; identify::IDENTIFY_LEN], GFP_KERNEL)?;

    read(admin, command::cns::CONTROLLER, 0, &mut data)?;
    let ctrl = identify::controller(&data[..]);
    identify::ascii_field(ctrl.serial, &mut info.serial);
    identify::ascii_field(ctrl.model, &mut info.model);
    identify::ascii_field(ctrl.firmware, &mut info.firmware);
    info.mdts_bytes = identify::mdts_bytes(ctrl.mdts, regs::PAGE_SIZE);
    info.page_size = regs::PAGE_SIZE as u32;
    let nn = ctrl.nn;
    let oaes = ctrl.oaes;

    let mut list = KBox::new([0u8; identify::IDENTIFY_LEN], GFP_KERNEL)?;
    read(admin, command::cns::ACTIVE_NS_LIST, 0, &mut list)?;
    let mut count = 0;
    for nsid in identify::active_nsids(&list[..]) {
        if count == info.ns.len() {
            dev_warn!(
                dev,
                "more than {} namespaces; the rest are not used\n",
                info.ns.len()
            );
            break;
        }
        read(admin, command::cns::NAMESPACE, nsid, &mut data)?;
        match identify::namespace(&data[..]) {
            Some(ns) => {
                info.ns[count] = uapi::NsInfo { nsid, lba_size: ns.lba_size, capacity_lbas: ns.capacity_lbas };
                count += 1;
            }
            None => dev_warn!(dev, "namespace {} has no usable format (metadata, or an LBA size outside 512 B..64 KiB); skipped\n", nsid),
        }
    }
    info.num_namespaces = count as u32;

    // Namespace changes are announced only if asked for; without them they
    // are still seen at a restart and at CREATE_QPAIR.
    if oaes & command::AEN_NS_ATTR != 0 {
        if admin
            .submit(
                dev,
                cap,
                command::set_async_events(command::AEN_NS_ATTR),
                ring,
            )
            .is_err()
        {
            dev_warn!(dev, "namespace change events could not be enabled\n");
        }
    } else {
        dev_info!(dev, "the controller does not announce namespace changes; they are seen at a restart and at CREATE_QPAIR\n");
    }

    let cqe = admin.submit(dev, cap, command::set_num_queues(WANT_IO_QUEUES), ring)?;
    info.io_queues = command::granted_queues(cqe.result).min(WANT_IO_QUEUES.into());
    dev_info!(
        dev,
        "{} (fw {}): {} of {} namespaces, {} I/O queue pairs, MDTS {} bytes\n",
        cstr(&info.model),
        cstr(&info.firmware),
        count,
        nn,
        info.io_queues,
        info.mdts_bytes
    );
    Ok(())
}

/// The text of a NUL-terminated byte field, for log lines.
pub(crate) fn cstr(b: &[u8]) -> &str {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    core::str::from_utf8(&b[..n]).unwrap_or("?")
}
