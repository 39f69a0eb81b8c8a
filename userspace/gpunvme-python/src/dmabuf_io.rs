// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Block transfers between a namespace and a dma-buf the module imported
//! ([`DmabufMapping`]: GPU memory, or a udmabuf standing in for it).
//!
//! [`DmabufTransfers`] is what this package needs from the library. Issue
//! 27 item 2 gives `gpunvme::Io` that ability (`Io::transfer_gpu` on a
//! registered `GpuBuffer`, CPU-initiated transfers into GPU memory, on
//! the user-gpu branch); until it lands here, [`DmabufIo`] does it over
//! the library's public `unsafe` queue-pair entry points, the way `Io`
//! does for a [`DmaBuffer`]: split at MDTS (at the module's cap on a
//! shared pair), pipelined up to the queue's capacity, PRP lists in the
//! shared pair's pool or, on a raw pair, in list pages of its own. Then
//! this file shrinks to `impl DmabufTransfers for Io` (calling
//! `transfer_gpu`), and a lane needs no second queue pair.
//!
//! Why it is sound: a dma-buf mapping hands out no Rust reference to its
//! memory (the exporter owns it), and the module keeps its own reference
//! to the dma-buf until UNMAP, which it refuses (EBUSY) while this file
//! has queue pairs; so even after a timeout, when commands may still be in
//! flight, the memory they name stays alive and mapped for the device.

use std::sync::Arc;
use std::time::Duration;

use gpunvme::command::{build_prps, opcode, pages_spanned, prp_list_pages, PrpListMem};
use gpunvme::{
    Controller, DmaBuffer, DmabufMapping, Error, Info, Mode, Namespace, QueuePair, Result, Sqe,
    NO_MDTS_CAP, PAGE_SIZE,
};

/// Transfers between a namespace and a dma-buf mapping: what the package
/// needs from `gpunvme::Io` (issue 27 item 2).
pub(crate) trait DmabufTransfers {
    /// Moves `count` blocks at `lba` between the namespace and `map` at
    /// byte `offset` (dword aligned): `op` is [`opcode::READ`] (into the
    /// mapping) or [`opcode::WRITE`]. Returns once every command
    /// completed; after a timeout the queue pair is poisoned. (The shape
    /// of `gpunvme::Io::transfer_gpu` of issue 27 item 2.)
    fn transfer_gpu(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        map: &DmabufMapping,
        offset: usize,
    ) -> Result<()>;

    /// Whether the queue pair takes no more commands (a wait timed out).
    fn is_poisoned(&self) -> bool;
}

/// The interim implementation (see the module docs).
#[derive(Debug)]
pub(crate) struct DmabufIo {
    // Drop order: the pair first (it keeps `lists` until destroyed, see Drop).
    qp: QueuePair,
    lists: Option<DmaBuffer>,
    ns: Namespace,
    max_bytes: usize,
    list_pages_per_cmd: usize,
    list_entries_per_cmd: usize,
    slot_of_cid: Vec<Option<usize>>,
    free_slots: Vec<usize>,
}

impl Drop for DmabufIo {
    fn drop(&mut self) {
        // The pair's commands may read the lists until it is destroyed.
        if let Some(l) = self.lists.take() {
            self.qp.keep_until_destroyed(l);
        }
    }
}

impl DmabufIo {
    /// A queue pair of `depth` entries and `mode` for namespace `ns`.
    pub(crate) fn new(
        ctrl: &Arc<Controller>,
        info: &Info,
        ns: Namespace,
        depth: u32,
        mode: Mode,
        timeout: Duration,
    ) -> Result<Self> {
        let mut qp = QueuePair::create_with(ctrl, depth, mode)?;
        qp.set_timeout(timeout);
        let mdts = info
            .max_transfer_for(mode)
            .map_or(NO_MDTS_CAP, |m| m as usize);
        let lba = ns.lba_size as usize;
        let max_bytes = (mdts / lba).min(65536) * lba;
        if max_bytes == 0 {
            return Err(Error::Invalid(format!(
                "the largest {mode} transfer, {mdts} bytes, is smaller than one {lba}-byte block"
            )));
        }
        // Worst case: a command starting just short of a page end.
        let list_pages_per_cmd = prp_list_pages(PAGE_SIZE - 4, max_bytes).max(1);
        let list_entries_per_cmd = pages_spanned(PAGE_SIZE - 4, max_bytes) - 1;
        let (slots, lists) = match qp.prp_pool() {
            Some(pool) => {
                let slots = pool.slots(list_entries_per_cmd).min(qp.capacity());
                if list_pages_per_cmd > 1 || slots == 0 {
                    return Err(Error::Invalid(format!(
                        "the PRP pool of qid {} holds no list for a {max_bytes}-byte command",
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
        Ok(DmabufIo {
            slot_of_cid: vec![None; qp.capacity()],
            free_slots: (0..slots).rev().collect(),
            qp,
            lists,
            ns,
            max_bytes,
            list_pages_per_cmd,
            list_entries_per_cmd,
        })
    }

    /// The pair's qid.
    pub(crate) fn qid(&self) -> u16 {
        self.qp.qid()
    }

    fn check(&self, op: u8, lba: u64, count: u64, map: &DmabufMapping, offset: u64) -> Result<()> {
        self.qp.controller().check_process()?;
        if let Some(why) = self.qp.poison_reason() {
            return Err(Error::Poisoned {
                qid: self.qp.qid(),
                why: why.to_string(),
            });
        }
        if op != opcode::READ && op != opcode::WRITE {
            return Err(Error::Invalid(format!("transfer of opcode 0x{op:02x}")));
        }
        if !Arc::ptr_eq(map.controller(), self.qp.controller()) {
            return Err(Error::Invalid(
                "the dma-buf is registered on another open file of the device".into(),
            ));
        }
        let bytes = count.checked_mul(self.ns.lba_size as u64);
        if bytes
            .and_then(|b| b.checked_add(offset))
            .is_none_or(|end| end > map.len())
        {
            return Err(Error::Invalid(format!(
                "{count} blocks at offset {offset} do not fit the {}-byte dma-buf",
                map.len()
            )));
        }
        if offset % 4 != 0 {
            return Err(Error::Invalid(format!(
                "dma-buf offset {offset} is not dword aligned"
            )));
        }
        if lba
            .checked_add(count)
            .is_none_or(|end| end > self.ns.capacity_lbas)
        {
            return Err(Error::Invalid(format!(
                "LBAs {lba}..+{count} are beyond namespace {}'s {} blocks",
                self.ns.nsid, self.ns.capacity_lbas
            )));
        }
        Ok(())
    }

    fn submit_piece(
        &mut self,
        op: u8,
        lba: u64,
        n: u64,
        map: &DmabufMapping,
        off: u64,
    ) -> Result<()> {
        let len = (n * self.ns.lba_size as u64) as usize;
        let slot = *self.free_slots.last().expect("a free slot");
        let lists: PrpListMem<'_> = match (&mut self.lists, self.qp.prp_pool_mut()) {
            (Some(b), _) => {
                b.list_pages(slot * self.list_pages_per_cmd, self.list_pages_per_cmd)?
            }
            (None, Some(pool)) => pool.list_slot(slot, self.list_entries_per_cmd)?,
            (None, None) => unreachable!("list pages or a pool"),
        };
        let first = (off / PAGE_SIZE as u64) as usize;
        let prp = build_prps(
            &map.dma_addrs()[first..],
            (off % PAGE_SIZE as u64) as usize,
            len,
            Some(lists),
        )
        .map_err(Error::Invalid)?;
        let sqe = if op == opcode::READ {
            Sqe::read(self.ns.nsid, lba, n as u32, prp)
        } else {
            Sqe::write(self.ns.nsid, lba, n as u32, prp)
        };
        // SAFETY: the PRPs name `len` bytes of `map` (checked to be a
        // mapping of this pair's controller, in range) and a PRP list in
        // slot `slot`, which no other outstanding command uses. No Rust
        // reference to dma-buf memory exists (DmabufMapping gives none),
        // and the module keeps that memory mapped until UNMAP, which it
        // refuses while this pair lives (EBUSY): so it stays valid until
        // the completion is taken or, after a timeout, until the pair is
        // destroyed. The list slot is reused only after its command
        // completed; the lists live as long as the pair (Drop).
        let cid = unsafe { self.qp.push(sqe)? };
        self.free_slots.pop();
        self.slot_of_cid[cid as usize] = Some(slot);
        Ok(())
    }
}

impl DmabufTransfers for DmabufIo {
    fn transfer_gpu(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        map: &DmabufMapping,
        offset: usize,
    ) -> Result<()> {
        let offset = offset as u64;
        self.check(op, lba, count, map, offset)?;
        let lba_size = self.ns.lba_size as u64;
        let per_cmd = self.max_bytes as u64 / lba_size;
        let mut next = 0u64;
        let mut first_err: Option<Error> = None;
        loop {
            while next < count && first_err.is_none() && !self.free_slots.is_empty() {
                let n = (count - next).min(per_cmd);
                match self.submit_piece(op, lba + next, n, map, offset + next * lba_size) {
                    Ok(()) => next += n,
                    Err(e) => first_err = Some(e),
                }
            }
            if self.qp.outstanding() == 0 {
                break;
            }
            // A timeout poisons the pair and returns at once: the memory
            // stays the module's (see the SAFETY note in submit_piece).
            let c = self.qp.wait_any_raw()?;
            if let Some(slot) = self.slot_of_cid[c.cid as usize].take() {
                self.free_slots.push(slot);
            }
            if let Err(e) = c.ok(self.qp.qid()) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn is_poisoned(&self) -> bool {
        self.qp.is_poisoned()
    }
}
