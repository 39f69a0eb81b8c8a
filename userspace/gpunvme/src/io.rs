//! Block I/O on one namespace through one queue pair: LBA ranges into and
//! out of a [`DmaBuffer`], split at the controller's MDTS (on a shared pair
//! at the module's shared-mode limit), pipelined up to the queue's
//! capacity. Commands of more than two pages get a PRP list: on a shared
//! pair in the pair's [`crate::PrpPool`] (where the module reads it), on a
//! raw pair in a buffer the `Io` maps for that.

use crate::command::{opcode, pages_spanned, prp_list_pages, PrpListMem, Sqe};
use crate::controller::{Controller, Info, Namespace};
use crate::dma::{DmaBuffer, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::qpair::{Mode, QueuePair};

/// Largest transfer used when the controller reports no MDTS limit.
pub const NO_MDTS_CAP: usize = 4 << 20;

/// Whether [`Io`] checks LBA ranges against the namespace capacity before
/// submitting. The check is a convenience: the controller checks too and
/// answers LBA Out of Range, which `Unchecked` lets through to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeCheck {
    /// Refuse out-of-range requests client side ([`Error::Invalid`]).
    Checked,
    /// Send whatever is asked; the controller's status comes back as
    /// [`Error::Nvme`].
    Unchecked,
}

/// Reads and writes of one namespace through a queue pair it owns.
#[derive(Debug)]
pub struct Io<'c> {
    // Field order is drop order: the queue pair goes before the PRP list
    // buffer, so the list buffer's UNMAP is not refused with EBUSY.
    qp: QueuePair<'c>,
    /// A raw pair's PRP list pages; `None` on a shared pair, whose lists
    /// go in its PRP pool.
    lists: Option<DmaBuffer<'c>>,
    ns: Namespace,
    max_bytes: usize,
    list_pages_per_cmd: usize,
    list_entries_per_cmd: usize,
    slot_of_cid: Vec<Option<usize>>,
    free_slots: Vec<usize>,
    slots: usize,
    commands: u64,
}

impl<'c> Io<'c> {
    /// Creates a shared queue pair of `depth` entries on `ctrl` for
    /// namespace `nsid` (which must be in `info`).
    pub fn new(ctrl: &'c Controller, info: &Info, nsid: u32, depth: u32) -> Result<Self> {
        Self::new_with(ctrl, info, nsid, depth, Mode::Shared)
    }

    /// [`new`](Self::new) on a queue pair of the given [`Mode`] (a raw pair
    /// needs [`Controller::claim_owner`] first).
    pub fn new_with(
        ctrl: &'c Controller,
        info: &Info,
        nsid: u32,
        depth: u32,
        mode: Mode,
    ) -> Result<Self> {
        let ns = *info
            .namespaces
            .iter()
            .find(|n| n.nsid == nsid)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "namespace {nsid} on {} (active: {:?})",
                    info.bdf,
                    info.namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>()
                ))
            })?;
        if let Some(only) = info.node_nsid.filter(|&n| n != nsid) {
            return Err(Error::Invalid(format!(
                "{} is limited to namespace {only}, not {nsid}",
                ctrl.path().display()
            )));
        }
        if ns.lba_size == 0 || ns.lba_size as usize % 4 != 0 {
            return Err(Error::Invalid(format!(
                "namespace {nsid} has LBA size {}",
                ns.lba_size
            )));
        }
        let mdts = info
            .max_transfer_for(mode)
            .map_or(NO_MDTS_CAP, |m| m as usize);
        let lba = ns.lba_size as usize;
        // Whole blocks, at most 65536 of them (NLB is 16 bits).
        let max_bytes = (mdts / lba).min(65536) * lba;
        if max_bytes == 0 {
            return Err(Error::Invalid(format!(
                "the largest {mode} transfer, {mdts} bytes, is smaller than one {lba}-byte block"
            )));
        }
        // Worst case: the transfer starts just short of a page end.
        let list_pages_per_cmd = prp_list_pages(PAGE_SIZE - 4, max_bytes).max(1);
        let list_entries_per_cmd = pages_spanned(PAGE_SIZE - 4, max_bytes) - 1;
        let qp = QueuePair::create_with(ctrl, depth, mode)?;
        // One PRP slot per command in flight: on a raw pair whole pages of
        // a buffer of our own, on a shared pair a list slot of its pool (as
        // many as the pool holds, at most the queue's capacity).
        let (slots, lists) = match qp.prp_pool() {
            Some(pool) => {
                if list_pages_per_cmd > 1 {
                    return Err(Error::Invalid(format!(
                        "{max_bytes}-byte commands need chained PRP lists, which shared pairs do not take"
                    )));
                }
                let slots = pool.slots(list_entries_per_cmd).min(qp.capacity());
                if slots == 0 {
                    return Err(Error::Invalid(format!(
                        "the {}-byte PRP pool of qid {} holds no list of {list_entries_per_cmd} entries",
                        pool.len(),
                        qp.qid()
                    )));
                }
                (slots, None)
            }
            None => {
                let slots = qp.capacity();
                (
                    slots,
                    Some(DmaBuffer::new(ctrl, slots * list_pages_per_cmd)?),
                )
            }
        };
        Ok(Io {
            slot_of_cid: vec![None; qp.capacity()],
            free_slots: (0..slots).rev().collect(),
            slots,
            qp,
            lists,
            ns,
            max_bytes,
            list_pages_per_cmd,
            list_entries_per_cmd,
            commands: 0,
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> Namespace {
        self.ns
    }

    /// Commands this `Io` keeps in flight at most: the queue's capacity,
    /// or fewer when a shared pair's PRP pool holds fewer list slots.
    pub fn max_in_flight(&self) -> usize {
        self.slots
    }

    /// Largest transfer of one command, in bytes (whole blocks).
    pub fn max_transfer_bytes(&self) -> usize {
        self.max_bytes
    }

    /// Lowers the largest transfer of one command to `blocks` blocks (at
    /// least 1; never above MDTS), e.g. to make many small commands.
    pub fn limit_transfer_blocks(&mut self, blocks: u32) {
        let b = (blocks.max(1) as usize).saturating_mul(self.ns.lba_size as usize);
        self.max_bytes = self.max_bytes.min(b);
    }

    /// Read/write commands submitted so far by [`Io::transfer`].
    pub fn commands(&self) -> u64 {
        self.commands
    }

    /// The queue pair, for raw commands.
    pub fn qpair(&mut self) -> &mut QueuePair<'c> {
        &mut self.qp
    }

    /// Reads `count` blocks from `lba` into `buf` at byte `offset`.
    pub fn read(&mut self, lba: u64, count: u64, buf: &DmaBuffer<'_>, offset: usize) -> Result<()> {
        self.transfer(opcode::READ, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// Writes `count` blocks at `lba` from `buf` at byte `offset`.
    pub fn write(
        &mut self,
        lba: u64,
        count: u64,
        buf: &DmaBuffer<'_>,
        offset: usize,
    ) -> Result<()> {
        self.transfer(opcode::WRITE, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// Flushes the namespace.
    pub fn flush(&mut self) -> Result<()> {
        self.qp.execute(Sqe::flush(self.ns.nsid)).map(|_| ())
    }

    /// Write Zeroes of `count` blocks at `lba` (checked), split at 65536.
    pub fn write_zeroes(&mut self, lba: u64, count: u64) -> Result<()> {
        self.check_range(lba, count)?;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(65536) as u32;
            self.qp
                .execute(Sqe::write_zeroes(self.ns.nsid, lba + done, n))?;
            done += n as u64;
        }
        Ok(())
    }

    fn check_range(&self, lba: u64, count: u64) -> Result<()> {
        match lba.checked_add(count) {
            Some(end) if end <= self.ns.capacity_lbas => Ok(()),
            _ => Err(Error::Invalid(format!(
                "LBAs {lba}..{} are beyond namespace {} capacity of {} blocks \
                 (client-side check; an unchecked command lets the controller answer)",
                lba.saturating_add(count),
                self.ns.nsid,
                self.ns.capacity_lbas
            ))),
        }
    }

    /// Reads (`op` = [`opcode::READ`]) or writes ([`opcode::WRITE`])
    /// `count` blocks at `lba` with `buf` at byte `offset` (dword aligned),
    /// one command per MDTS-sized piece, up to the queue's capacity in
    /// flight. Returns the first error once nothing is outstanding.
    pub fn transfer(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        buf: &DmaBuffer<'_>,
        offset: usize,
        check: RangeCheck,
    ) -> Result<()> {
        if op != opcode::READ && op != opcode::WRITE {
            return Err(Error::Invalid(format!(
                "transfer of opcode 0x{op:02x}: only Read and Write"
            )));
        }
        if count == 0 {
            return Ok(());
        }
        let lba_size = self.ns.lba_size as u64;
        let bytes = count
            .checked_mul(lba_size)
            .filter(|&b| offset as u64 + b <= buf.len() as u64)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{count} blocks of {lba_size} bytes at offset {offset} do not fit a {}-byte buffer",
                    buf.len()
                ))
            })?;
        if offset % 4 != 0 {
            return Err(Error::Invalid(format!(
                "buffer offset {offset} is not dword aligned"
            )));
        }
        if check == RangeCheck::Checked {
            self.check_range(lba, count)?;
        }
        let per_cmd = (self.max_bytes as u64) / lba_size;
        let mut next = 0u64; // blocks submitted
        let mut first_err: Option<Error> = None;
        loop {
            // Fill the queue.
            while next < count && first_err.is_none() && !self.free_slots.is_empty() {
                let n = (count - next).min(per_cmd);
                let off = offset + (next * lba_size) as usize;
                let len = (n * lba_size) as usize;
                let slot = *self.free_slots.last().unwrap();
                let lists: PrpListMem<'_> = match (&mut self.lists, self.qp.prp_pool_mut()) {
                    (Some(b), _) => {
                        b.list_pages(slot * self.list_pages_per_cmd, self.list_pages_per_cmd)?
                    }
                    (None, Some(pool)) => pool.list_slot(slot, self.list_entries_per_cmd)?,
                    (None, None) => unreachable!("an Io has list pages or a pool"),
                };
                let prp = buf.prp(off, len, Some(lists))?;
                let s = if op == opcode::READ {
                    Sqe::read(self.ns.nsid, lba + next, n as u32, prp)
                } else {
                    Sqe::write(self.ns.nsid, lba + next, n as u32, prp)
                };
                let cid = self.qp.push(s)?;
                self.free_slots.pop();
                self.slot_of_cid[cid as usize] = Some(slot);
                self.commands += 1;
                next += n;
            }
            if self.qp.outstanding() == 0 {
                break;
            }
            let r = self.qp.wait_any_raw();
            match r {
                Ok(c) => {
                    if let Some(slot) = self.slot_of_cid[c.cid as usize].take() {
                        self.free_slots.push(slot);
                    }
                    if let Err(e) = c.ok(self.qp.qid()) {
                        first_err.get_or_insert(e);
                    }
                }
                // Timeout or a protocol error: commands may still be in
                // flight on their PRP slots; give up on this Io.
                Err(e) => return Err(first_err.unwrap_or(e)),
            }
        }
        let _ = bytes;
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
