// SPDX-License-Identifier: GPL-2.0-only

//! Shared mode's gate: every SQE a file submits is checked here before it
//! can reach the controller. Pure logic, KUnit-tested.
//!
//! What passes: Flush, Write, Read and Write Zeroes, on a namespace the file
//! may address, inside that namespace's LBA range, with PRPs only (no SGL,
//! no metadata pointer, no fused pair, no protection information), and
//! with PRP1, PRP2 and every PRP-list entry on a page the file itself
//! mapped. A PRP list is read from the pair's PRP pool once, checked, and
//! copied into a list the file cannot reach; the SQE that goes to the
//! controller is built field by field, never copied whole.

use kernel::{prelude::*, sync::Arc};

use crate::controller::geometry::{Geometry, NsState};
use crate::queues::command::Sqe;

/// NVM command set opcodes allowed in shared mode.
pub(crate) mod opcode {
    pub(crate) const FLUSH: u8 = 0x00;
    pub(crate) const WRITE: u8 = 0x01;
    pub(crate) const READ: u8 = 0x02;
    pub(crate) const WRITE_ZEROES: u8 = 0x08;
}

/// Why an SQE was refused: the generic status code (SCT 0) it completes with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reject {
    /// Invalid Command Opcode.
    Opcode = 0x01,
    /// Invalid Field in Command (PRPs, SGL, metadata, fused, reserved bits).
    Field = 0x02,
    /// Invalid Namespace or Format.
    Namespace = 0x0b,
    /// LBA Out of Range.
    LbaRange = 0x80,
    /// Namespace Not Ready: it changed and is being identified again.
    NotReady = 0x82,
}

impl Reject {
    /// The CQE status field (without the phase tag): SCT 0, this SC, DNR
    /// (not for Namespace Not Ready, which a retry may pass).
    pub(crate) fn status(self) -> u16 {
        let dnr = if self == Reject::NotReady { 0 } else { 1 << 15 };
        dnr | ((self as u16) << 1)
    }
}

/// One namespace a file may address: its ID and its index in the
/// controller's `Geometry`.
#[derive(Clone, Copy, Default, Debug)]
pub(crate) struct Ns {
    pub(crate) nsid: u32,
    pub(crate) index: usize,
}

/// What a pair's submissions are checked against: the namespaces are fixed
/// for its life, their size and format are read per command from the
/// controller's geometry, which a namespace change updates.
pub(crate) struct Limits {
    pub(crate) ns: KVec<Ns>,
    pub(crate) geometry: Arc<Geometry>,
    /// Largest transfer of one command, bytes (at most one list page's worth).
    pub(crate) max_transfer: u64,
}

impl Limits {
    /// LBA shift and capacity of namespace `nsid`, as it is now.
    fn namespace(&self, nsid: u32) -> Result<(u32, u64), Reject> {
        let ns = self
            .ns
            .iter()
            .find(|n| n.nsid == nsid)
            .ok_or(Reject::Namespace)?;
        match self.geometry.get(ns.index) {
            NsState::Usable {
                lba_shift,
                capacity,
            } => Ok((lba_shift, capacity)),
            NsState::Changing => Err(Reject::NotReady),
            NsState::Refused => Err(Reject::Namespace),
        }
    }
}

/// The memory a validation reads besides the SQE.
pub(crate) trait Memory {
    /// Does the file own the 4 KiB page at DMA address `page` (aligned)?
    fn owns_page(&self, page: u64) -> bool;
    /// The 8-byte PRP-pool entry at DMA address `addr`, or `None` when
    /// `addr` is not an aligned address inside the pool.
    fn pool_entry(&self, addr: u64) -> Option<u64>;
}

const PAGE: u64 = 4096;
const ENTRIES_PER_PAGE: u64 = PAGE / 8;

/// cdw12 bits a Read or Write may set besides NLB: LR (31) and FUA (30).
const RW_CDW12_ALLOWED: u32 = (1 << 31) | (1 << 30) | 0xffff;
/// Write Zeroes may also set DEAC (25).
const WZ_CDW12_ALLOWED: u32 = RW_CDW12_ALLOWED | (1 << 25);

/// Check `sqe`; on success return the SQE to put in the real SQ (its
/// command ID still to be set). `list` is the kernel's PRP list for this
/// command, at DMA address `list_dma`; it receives the checked entries.
pub(crate) fn check(
    sqe: &Sqe,
    lim: &Limits,
    mem: &impl Memory,
    list: &mut [u64],
    list_dma: u64,
) -> Result<Sqe, Reject> {
    // Fused (bits 1:0), reserved (5:2) and PSDT (7:6, anything but PRPs).
    if sqe.flags != 0 {
        return Err(Reject::Field);
    }
    let allowed = match sqe.opcode {
        opcode::FLUSH => None,
        opcode::READ | opcode::WRITE => Some(RW_CDW12_ALLOWED),
        opcode::WRITE_ZEROES => Some(WZ_CDW12_ALLOWED),
        _ => return Err(Reject::Opcode),
    };
    let (lba_shift, capacity) = lim.namespace(sqe.nsid)?;
    let mut out = Sqe {
        opcode: sqe.opcode,
        nsid: sqe.nsid,
        ..Default::default()
    };
    let Some(allowed) = allowed else {
        return Ok(out);
    };
    if sqe.mptr != 0 || sqe.cdw14 != 0 || sqe.cdw15 != 0 || sqe.cdw12 & !allowed != 0 {
        return Err(Reject::Field);
    }
    let slba = u64::from(sqe.cdw10) | (u64::from(sqe.cdw11) << 32);
    let nlb = u64::from(sqe.cdw12 & 0xffff) + 1;
    match slba.checked_add(nlb) {
        Some(end) if end <= capacity => {}
        _ => return Err(Reject::LbaRange),
    }
    out.cdw10 = sqe.cdw10;
    out.cdw11 = sqe.cdw11;
    out.cdw12 = sqe.cdw12;
    if sqe.opcode == opcode::WRITE_ZEROES {
        return Ok(out);
    }
    // Dataset management hints only; directives are not passed on.
    out.cdw13 = sqe.cdw13 & 0xff;
    let len = nlb << lba_shift;
    if len > lim.max_transfer {
        return Err(Reject::Field);
    }
    let (prp1, prp2) = check_prps(sqe.prp1, sqe.prp2, len, mem, list, list_dma)?;
    out.prp1 = prp1;
    out.prp2 = prp2;
    Ok(out)
}

/// PRP1/PRP2 for a transfer of `len` bytes (NVMe base spec 2.0, 4.1.1).
fn check_prps(
    prp1: u64,
    prp2: u64,
    len: u64,
    mem: &impl Memory,
    list: &mut [u64],
    list_dma: u64,
) -> Result<(u64, u64), Reject> {
    if prp1 & 3 != 0 || !mem.owns_page(prp1 & !(PAGE - 1)) {
        return Err(Reject::Field);
    }
    let first = PAGE - (prp1 & (PAGE - 1));
    if len <= first {
        return Ok((prp1, 0));
    }
    if len <= first + PAGE {
        if prp2 & (PAGE - 1) != 0 || !mem.owns_page(prp2) {
            return Err(Reject::Field);
        }
        return Ok((prp1, prp2));
    }
    // A list: PRP2 points at it (8-byte aligned, in the pool); the last
    // entry of a list page points at the next page when more entries follow.
    let n = (len - first).div_ceil(PAGE);
    if n > list.len() as u64 {
        return Err(Reject::Field);
    }
    let mut at = prp2;
    for (i, slot) in list.iter_mut().take(n as usize).enumerate() {
        let remaining = n - i as u64;
        if at % PAGE == PAGE - 8 && remaining > 1 {
            let next = mem.pool_entry(at).ok_or(Reject::Field)?;
            if next % PAGE != 0 {
                return Err(Reject::Field);
            }
            at = next;
        }
        let entry = mem.pool_entry(at).ok_or(Reject::Field)?;
        // Never 0: a zero ends a list slot's entries (`Port::retire`).
        if entry == 0 || entry % PAGE != 0 || !mem.owns_page(entry) {
            return Err(Reject::Field);
        }
        *slot = entry;
        at += 8;
    }
    Ok((prp1, list_dma))
}

/// The largest transfer of one shared-mode command: MDTS (0: none),
/// capped so that one page of list entries covers it (2 MiB).
pub(crate) fn shared_max_transfer(mdts_bytes: u32) -> u32 {
    let cap = (ENTRIES_PER_PAGE * PAGE) as u32;
    if mdts_bytes == 0 {
        cap
    } else {
        mdts_bytes.min(cap)
    }
}

/// Entries one command's list needs at most, for `max_transfer` bytes.
pub(crate) fn list_entries(max_transfer: u64) -> u64 {
    max_transfer.div_ceil(PAGE).clamp(1, ENTRIES_PER_PAGE)
}

/// What checking `sqe` costs the relay at most, in page checks: one, plus
/// one per page a Read or Write of a known namespace may name (its PRP
/// entries), its length capped at the largest transfer checked. The relay
/// bounds its work per pair per pass by this, not by commands.
pub(crate) fn check_cost(sqe: &Sqe, lim: &Limits) -> u32 {
    if sqe.opcode != opcode::READ && sqe.opcode != opcode::WRITE {
        return 1;
    }
    let Ok((lba_shift, _)) = lim.namespace(sqe.nsid) else {
        return 1;
    };
    let len = (u64::from(sqe.cdw12 & 0xffff) + 1) << lba_shift;
    // A first page at an offset adds one.
    1 + (len.min(lim.max_transfer) / PAGE + 1) as u32
}

#[kernel::prelude::kunit_tests(gpunvme_validate)]
mod tests {
    use super::*;

    /// The file owns pages 0x10000..0x20000; the pool is 0x80000..0x82000.
    struct Model {
        pool: [u64; 1024],
    }

    impl Memory for Model {
        fn owns_page(&self, page: u64) -> bool {
            (0x10000..0x20000).contains(&page)
        }
        fn pool_entry(&self, addr: u64) -> Option<u64> {
            if addr % 8 != 0 || !(0x80000..0x82000).contains(&addr) {
                return None;
            }
            Some(self.pool[((addr - 0x80000) / 8) as usize])
        }
    }

    fn limits_of(lba_size: u32, capacity_lbas: u64) -> Limits {
        let mut info = crate::uapi::Info {
            num_namespaces: 1,
            ..Default::default()
        };
        info.ns[0] = crate::uapi::NsInfo {
            nsid: 1,
            lba_size,
            capacity_lbas,
        };
        let mut ns = KVec::new();
        ns.push(Ns { nsid: 1, index: 0 }, GFP_KERNEL).unwrap();
        Limits {
            ns,
            geometry: Arc::new(Geometry::new(&info), GFP_KERNEL).unwrap(),
            max_transfer: 512 * 1024,
        }
    }

    fn limits() -> Limits {
        limits_of(512, 1000)
    }

    #[test]
    fn check_cost_counts_the_pages_a_command_may_name() {
        let lim = limits();
        // 8 blocks of 512 B: one page, perhaps two with an offset.
        assert_eq!(check_cost(&read(0, 8, 0, 0), &lim), 3);
        // 1024 blocks = 512 KiB (the largest transfer): 128 pages + 1.
        assert_eq!(check_cost(&read(0, 1024, 0, 0), &lim), 130);
        // Longer than checked: capped at the largest transfer.
        assert_eq!(check_cost(&read(0, 65535, 0, 0), &lim), 130);
        let mut flush = read(0, 1, 0, 0);
        flush.opcode = opcode::FLUSH;
        assert_eq!(check_cost(&flush, &lim), 1);
        let mut other_ns = read(0, 1024, 0, 0);
        other_ns.nsid = 7;
        assert_eq!(check_cost(&other_ns, &lim), 1);
    }

    fn read(slba: u64, blocks: u32, prp1: u64, prp2: u64) -> Sqe {
        Sqe {
            opcode: opcode::READ,
            nsid: 1,
            prp1,
            prp2,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12: blocks - 1,
            ..Default::default()
        }
    }

    fn run(sqe: &Sqe, m: &Model) -> Result<Sqe, Reject> {
        let mut list = [0u64; 128];
        check(sqe, &limits(), m, &mut list, 0xdead000)
    }

    #[test]
    fn allow_list_and_fields() {
        let m = Model { pool: [0; 1024] };
        assert!(run(&read(0, 8, 0x10000, 0), &m).is_ok());
        for op in [0x04u8, 0x05, 0x09, 0x0d, 0x7f, 0x80, 0xff] {
            assert_eq!(
                run(
                    &Sqe {
                        opcode: op,
                        ..read(0, 1, 0x10000, 0)
                    },
                    &m
                ),
                Err(Reject::Opcode)
            );
        }
        for flags in [1u8, 2, 0x40, 0x80, 0x04] {
            assert_eq!(
                run(
                    &Sqe {
                        flags,
                        ..read(0, 1, 0x10000, 0)
                    },
                    &m
                ),
                Err(Reject::Field)
            );
        }
        assert_eq!(
            run(
                &Sqe {
                    mptr: 0x10000,
                    ..read(0, 1, 0x10000, 0)
                },
                &m
            ),
            Err(Reject::Field)
        );
        assert_eq!(
            run(
                &Sqe {
                    cdw12: 1 << 26,
                    ..read(0, 1, 0x10000, 0)
                },
                &m
            ),
            Err(Reject::Field)
        );
        assert_eq!(
            run(
                &Sqe {
                    cdw14: 1,
                    ..read(0, 1, 0x10000, 0)
                },
                &m
            ),
            Err(Reject::Field)
        );
        for nsid in [0u32, 2, 0xffff_ffff] {
            assert_eq!(
                run(
                    &Sqe {
                        nsid,
                        ..read(0, 1, 0x10000, 0)
                    },
                    &m
                ),
                Err(Reject::Namespace)
            );
        }
        // Flush carries nothing but its namespace to the controller.
        let f = run(
            &Sqe {
                opcode: opcode::FLUSH,
                prp1: 0x1234,
                cdw10: 9,
                ..read(0, 1, 0, 0)
            },
            &m,
        )
        .unwrap();
        assert_eq!((f.prp1, f.cdw10, f.nsid), (0, 0, 1));
    }

    #[test]
    fn lba_range() {
        let m = Model { pool: [0; 1024] };
        assert!(run(&read(992, 8, 0x10000, 0), &m).is_ok());
        assert_eq!(run(&read(993, 8, 0x10000, 0), &m), Err(Reject::LbaRange));
        assert_eq!(
            run(&read(u64::MAX, 1, 0x10000, 0), &m),
            Err(Reject::LbaRange)
        );
        let wz = Sqe {
            opcode: opcode::WRITE_ZEROES,
            cdw12: (1 << 25) | 999,
            ..read(0, 1, 0, 0)
        };
        assert!(run(&wz, &m).is_ok());
        assert_eq!(run(&Sqe { cdw10: 1, ..wz }, &m), Err(Reject::LbaRange));
    }

    #[test]
    fn prps_must_be_the_files() {
        let m = Model { pool: [0; 1024] };
        // One page at an offset, two pages, foreign pages.
        assert!(run(&read(0, 1, 0x10200, 0), &m).is_ok());
        assert_eq!(run(&read(0, 1, 0x20000, 0), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 1, 0x0f000, 0), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 1, 0x10002, 0), &m), Err(Reject::Field));
        assert!(run(&read(0, 16, 0x10000, 0x11000), &m).is_ok());
        assert_eq!(run(&read(0, 16, 0x10000, 0x20000), &m), Err(Reject::Field));
        assert_eq!(run(&read(0, 16, 0x10000, 0x11008), &m), Err(Reject::Field));
        // Within the first page PRP2 is not used and not passed on.
        assert_eq!(run(&read(0, 1, 0x10000, 0x9999), &m).unwrap().prp2, 0);
    }

    #[test]
    fn lists_are_copied_and_checked() {
        let mut m = Model { pool: [0; 1024] };
        for i in 0..4 {
            m.pool[i] = 0x11000 + 0x1000 * i as u64;
        }
        let mut list = [0u64; 128];
        // 20 KiB from a page start: PRP1 + 4 list entries.
        let ok = check(
            &read(0, 40, 0x10000, 0x80000),
            &limits(),
            &m,
            &mut list,
            0xdead000,
        )
        .unwrap();
        assert_eq!(ok.prp2, 0xdead000);
        assert_eq!(&list[..4], &[0x11000, 0x12000, 0x13000, 0x14000]);
        // A list outside the pool, or an entry the file does not own.
        assert_eq!(run(&read(0, 40, 0x10000, 0x11000), &m), Err(Reject::Field));
        m.pool[2] = 0x20000;
        assert_eq!(run(&read(0, 40, 0x10000, 0x80000), &m), Err(Reject::Field));
        m.pool[2] = 0x13008;
        assert_eq!(run(&read(0, 40, 0x10000, 0x80000), &m), Err(Reject::Field));
    }

    #[test]
    fn lists_chain_across_pool_pages() {
        let mut m = Model { pool: [0; 1024] };
        // A list starting 2 entries before the end of pool page 0: entry 0
        // there, then the chain pointer to pool page 1, which holds the rest.
        m.pool[510] = 0x11000;
        m.pool[511] = 0x81000;
        for i in 0..3 {
            m.pool[512 + i] = 0x12000 + 0x1000 * i as u64;
        }
        let mut list = [0u64; 128];
        let ok = check(
            &read(0, 40, 0x10000, 0x80000 + 510 * 8),
            &limits(),
            &m,
            &mut list,
            0xd000,
        );
        assert!(ok.is_ok());
        assert_eq!(&list[..4], &[0x11000, 0x12000, 0x13000, 0x14000]);
        // A chain pointer out of the pool is refused.
        m.pool[511] = 0x12000;
        assert_eq!(
            run(&read(0, 40, 0x10000, 0x80000 + 510 * 8), &m),
            Err(Reject::Field)
        );
    }

    #[test]
    fn transfer_limit_and_status() {
        let m = Model { pool: [0; 1024] };
        // 1025 blocks of 512 B, inside a large namespace: over the 512 KiB limit.
        let lim = limits_of(512, 1 << 20);
        let mut list = [0u64; 128];
        assert_eq!(
            check(&read(0, 1025, 0x10000, 0x80000), &lim, &m, &mut list, 0),
            Err(Reject::Field)
        );
        assert_eq!(Reject::LbaRange.status(), 0x8100);
        assert_eq!(Reject::Field.status(), 0x8004);
        assert_eq!(list_entries(512 * 1024), 128);
        assert_eq!(list_entries(4 << 20), 512);
        assert_eq!(
            (
                shared_max_transfer(0),
                shared_max_transfer(4 << 20),
                shared_max_transfer(128 << 10)
            ),
            (2 << 20, 2 << 20, 128 << 10)
        );
    }

    #[test]
    fn a_namespace_change_is_seen_by_the_next_command() {
        let m = Model { pool: [0; 1024] };
        let lim = limits();
        let mut list = [0u64; 128];
        // One 512 B block at the end of a page: one page, no PRP2.
        let tail = read(0, 1, 0x10e00, 0);
        assert_eq!(check(&tail, &lim, &m, &mut list, 0).unwrap().prp2, 0);
        lim.geometry.set(0, NsState::Changing);
        assert_eq!(check(&tail, &lim, &m, &mut list, 0), Err(Reject::NotReady));
        assert_eq!(Reject::NotReady.status(), 0x0104);
        lim.geometry.set(0, NsState::Refused);
        assert_eq!(check(&tail, &lim, &m, &mut list, 0), Err(Reject::Namespace));
        // Formatted to 4 KiB blocks, 125 of them: the same command now
        // needs a second page and block 125 is out of range.
        lim.geometry.set(
            0,
            NsState::Usable {
                lba_shift: 12,
                capacity: 125,
            },
        );
        assert_eq!(check(&tail, &lim, &m, &mut list, 0), Err(Reject::Field));
        let two = read(0, 1, 0x10e00, 0x11000);
        assert_eq!(check(&two, &lim, &m, &mut list, 0).unwrap().prp2, 0x11000);
        assert_eq!(
            check(&read(125, 1, 0x10000, 0), &lim, &m, &mut list, 0),
            Err(Reject::LbaRange)
        );
        assert_eq!(check_cost(&read(0, 2, 0, 0), &lim), 4);
    }
}
