// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Block I/O on one namespace through one queue pair: LBA ranges into and
//! out of a [`DmaBuffer`], split at the controller's MDTS (on a shared pair
//! at the module's shared-mode limit), pipelined up to the queue's
//! capacity. Commands of more than two pages get a PRP list: on a shared
//! pair in the pair's [`crate::PrpPool`] (where the module reads it), on a
//! raw pair in a buffer the `Io` maps for that.
//!
//! A transfer takes its [`DmaBuffer`] by value and hands it back when
//! every command on it has completed (in `Ok`, or in the
//! [`TransferError`] if one failed with a status). If a wait times out the
//! queue pair is poisoned and keeps the buffer until it is destroyed, and
//! the error carries no buffer: nothing in this process can read or reuse
//! memory the controller may still write.

use std::sync::Arc;

use crate::command::{opcode, pages_spanned, prp_list_pages, PrpListMem, Sqe};
use crate::controller::{Controller, Info, Namespace};
use crate::dma::{DmaBuffer, PAGE_SIZE};
use crate::error::{Error, Result};
use crate::gpu_buffer::GpuBuffer;
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

/// A failed [`Io`] transfer: the error, and the buffer if it is safe to
/// have back (every command on it completed: a command failed with a
/// status, or the request was refused before anything was submitted).
/// `buffer` is `None` when commands may still be in flight (a timeout):
/// the poisoned queue pair keeps the buffer until it is destroyed.
#[derive(Debug)]
pub struct TransferError {
    /// What went wrong.
    pub error: Error,
    /// The buffer, when no command can still reach it.
    pub buffer: Option<DmaBuffer>,
}

impl std::fmt::Display for TransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for TransferError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<TransferError> for Error {
    /// The error; the buffer, if any, is dropped (UNMAPped).
    fn from(e: TransferError) -> Error {
        e.error
    }
}

/// What [`Io::transfer`] returns: the buffer back, or why not.
pub type TransferResult = std::result::Result<DmaBuffer, TransferError>;

/// Reads and writes of one namespace through a queue pair it owns.
///
/// ```no_run
/// use std::sync::Arc;
/// use gpunvme::{pattern, Controller, DmaBuffer, Io};
///
/// fn main() -> gpunvme::Result<()> {
///     let ctrl = Arc::new(Controller::open_index(0)?);
///     let info = ctrl.info()?;
///     let mut io = Io::new(&ctrl, &info, 1, 32)?;
///     let lba = io.namespace().lba_size as usize;
///     let mut buf = DmaBuffer::with_len(&ctrl, 8 * lba)?;
///     pattern::fill(7, 0, lba, buf.as_mut_slice());
///     let buf = io.write(0, 8, buf, 0)?;
///     io.flush()?;
///     let buf = io.read(0, 8, buf, 0)?;
///     assert_eq!(pattern::first_mismatch(7, 0, lba, &buf.as_slice()[..8 * lba]), None);
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct Io {
    // Field order is drop order: the queue pair goes first (Drop hands it
    // the PRP list buffer, which it releases only once it is destroyed).
    qp: QueuePair,
    /// A raw pair's PRP list pages; `None` on a shared pair, whose lists
    /// go in its PRP pool.
    lists: Option<DmaBuffer>,
    ns: Namespace,
    max_bytes: usize,
    list_pages_per_cmd: usize,
    list_entries_per_cmd: usize,
    slot_of_cid: Vec<Option<usize>>,
    free_slots: Vec<usize>,
    slots: usize,
    commands: u64,
}

impl Drop for Io {
    fn drop(&mut self) {
        // The pair's commands may still read the lists until it is destroyed.
        if let Some(l) = self.lists.take() {
            self.qp.keep_until_destroyed(l);
        }
    }
}

impl Io {
    /// Creates a shared queue pair of `depth` entries on `ctrl` for
    /// namespace `nsid` (which must be in `info`).
    pub fn new(ctrl: &Arc<Controller>, info: &Info, nsid: u32, depth: u32) -> Result<Self> {
        Self::new_with(ctrl, info, nsid, depth, Mode::Shared)
    }

    /// [`new`](Self::new) on a queue pair of the given [`Mode`] (a raw pair
    /// needs [`Controller::claim_owner`] first).
    pub fn new_with(
        ctrl: &Arc<Controller>,
        info: &Info,
        nsid: u32,
        depth: u32,
        mode: Mode,
    ) -> Result<Self> {
        Self::namespace_of(ctrl, info, nsid)?;
        Self::with_qpair(QueuePair::create_with(ctrl, depth, mode)?, info, nsid)
    }

    fn namespace_of(ctrl: &Controller, info: &Info, nsid: u32) -> Result<Namespace> {
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
        Ok(ns)
    }

    /// An `Io` for namespace `nsid` (which must be in `info`) over a queue
    /// pair created already (its mode decides where PRP lists go). The
    /// pair must have nothing outstanding.
    pub fn with_qpair(qp: QueuePair, info: &Info, nsid: u32) -> Result<Self> {
        let ctrl = qp.controller().clone();
        let ns = Self::namespace_of(&ctrl, info, nsid)?;
        if qp.outstanding() != 0 || qp.is_poisoned() {
            return Err(Error::Invalid(format!(
                "qid {} has commands outstanding or is poisoned",
                qp.qid()
            )));
        }
        let mode = qp.mode();
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
                    Some(DmaBuffer::new(&ctrl, slots * list_pages_per_cmd)?),
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

    /// The queue pair (qid, depth, mode, poisoned?). Not writable: its
    /// ring and PRP-list slots are this `Io`'s bookkeeping.
    pub fn qpair(&self) -> &QueuePair {
        &self.qp
    }

    /// Sets the deadline of each wait (see [`QueuePair::set_timeout`]).
    pub fn set_timeout(&mut self, t: std::time::Duration) {
        self.qp.set_timeout(t);
    }

    /// Reads `count` blocks from `lba` into `buf` at byte `offset`; hands
    /// `buf` back once every command on it completed.
    pub fn read(&mut self, lba: u64, count: u64, buf: DmaBuffer, offset: usize) -> TransferResult {
        self.transfer(opcode::READ, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// Writes `count` blocks at `lba` from `buf` at byte `offset`; hands
    /// `buf` back once every command on it completed.
    pub fn write(&mut self, lba: u64, count: u64, buf: DmaBuffer, offset: usize) -> TransferResult {
        self.transfer(opcode::WRITE, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// Flushes the namespace.
    pub fn flush(&mut self) -> Result<()> {
        self.qp
            .execute_no_data(Sqe::flush(self.ns.nsid))
            .map(|_| ())
    }

    /// Write Zeroes of `count` blocks at `lba` (checked), split at 65536.
    pub fn write_zeroes(&mut self, lba: u64, count: u64) -> Result<()> {
        self.check_range(lba, count)?;
        let mut done = 0;
        while done < count {
            let n = (count - done).min(65536) as u32;
            self.qp
                .execute_no_data(Sqe::write_zeroes(self.ns.nsid, lba + done, n))?;
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
    /// flight. Returns `buf` once nothing is outstanding, or the first
    /// error: with the buffer when every command completed, without it
    /// when a wait timed out (the poisoned pair keeps it until destroyed).
    pub fn transfer(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        buf: DmaBuffer,
        offset: usize,
        check: RangeCheck,
    ) -> TransferResult {
        match self.pump(op, lba, count, Target::Host(&buf), offset, check) {
            Ok(()) => Ok(buf),
            Err(Failure::Completed(error)) => Err(TransferError {
                error,
                buffer: Some(buf),
            }),
            // Timeout or a protocol error: commands may still be in
            // flight on `buf` and on their PRP slots. The pair is
            // poisoned; it keeps the buffer until it is destroyed.
            Err(Failure::InFlight(error)) => {
                self.qp.keep_until_destroyed(buf);
                Err(TransferError {
                    error,
                    buffer: None,
                })
            }
        }
    }

    /// Reads `count` blocks from `lba` into GPU memory: `buf` at byte
    /// `offset` (dword aligned), split and pipelined as
    /// [`transfer`](Self::transfer) does. Rust holds no reference to that
    /// memory, so `buf` is only borrowed; if a wait times out the poisoned
    /// pair keeps a clone of it (and so the exporter's allocation it may
    /// own) until the pair is destroyed.
    pub fn read_gpu(&mut self, lba: u64, count: u64, buf: &GpuBuffer, offset: usize) -> Result<()> {
        self.transfer_gpu(opcode::READ, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// Writes `count` blocks at `lba` from GPU memory: `buf` at `offset`.
    pub fn write_gpu(
        &mut self,
        lba: u64,
        count: u64,
        buf: &GpuBuffer,
        offset: usize,
    ) -> Result<()> {
        self.transfer_gpu(opcode::WRITE, lba, count, buf, offset, RangeCheck::Checked)
    }

    /// [`transfer`](Self::transfer) between the namespace and a registered
    /// GPU buffer (see [`read_gpu`](Self::read_gpu)).
    pub fn transfer_gpu(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        buf: &GpuBuffer,
        offset: usize,
        check: RangeCheck,
    ) -> Result<()> {
        match self.pump(op, lba, count, Target::Gpu(buf), offset, check) {
            Ok(()) => Ok(()),
            Err(Failure::Completed(e)) => Err(e),
            Err(Failure::InFlight(e)) => {
                self.qp.keep_until_destroyed_other(buf.clone());
                Err(e)
            }
        }
    }

    /// The pipeline of [`transfer`](Self::transfer) on any target.
    fn pump(
        &mut self,
        op: u8,
        lba: u64,
        count: u64,
        target: Target<'_>,
        offset: usize,
        check: RangeCheck,
    ) -> std::result::Result<(), Failure> {
        self.check_target(op, lba, count, target, offset, check)
            .map_err(Failure::Completed)?;
        let lba_size = self.ns.lba_size as u64;
        let per_cmd = (self.max_bytes as u64) / lba_size;
        let mut next = 0u64; // blocks submitted
        let mut first_err: Option<Error> = None;
        loop {
            // Fill the queue.
            while next < count && first_err.is_none() && !self.free_slots.is_empty() {
                let n = (count - next).min(per_cmd);
                let off = offset + (next * lba_size) as usize;
                let len = (n * lba_size) as usize;
                match self.push_piece(op, lba + next, n, target, off, len) {
                    Ok(_) => next += n,
                    Err(e) => {
                        first_err = Some(e);
                    }
                }
            }
            if self.qp.outstanding() == 0 {
                break;
            }
            match self.qp.wait_any_raw() {
                Ok(c) => {
                    self.release_slot(c.cid);
                    if let Err(e) = c.ok(self.qp.qid()) {
                        first_err.get_or_insert(e);
                    }
                }
                Err(error) => return Err(Failure::InFlight(error)),
            }
        }
        match first_err {
            Some(error) => Err(Failure::Completed(error)),
            None => Ok(()),
        }
    }

    /// Checks a transfer of `count` blocks at `lba` with `target` at byte
    /// `offset` before anything is submitted.
    pub(crate) fn check_target(
        &self,
        op: u8,
        lba: u64,
        count: u64,
        target: Target<'_>,
        offset: usize,
        check: RangeCheck,
    ) -> Result<()> {
        // Before the PRP pool or the SQ is touched: neither is mapped in a
        // forked child.
        self.qp.controller().check_unforked()?;
        if let Some(why) = self.qp.poison_reason() {
            // Earlier commands may be in flight: nothing new goes in, and
            // (below) every outstanding command is this transfer's.
            return Err(Error::Poisoned {
                qid: self.qp.qid(),
                why: why.to_string(),
            });
        }
        if op != opcode::READ && op != opcode::WRITE {
            return Err(Error::Invalid(format!(
                "transfer of opcode 0x{op:02x}: only Read and Write"
            )));
        }
        if !Arc::ptr_eq(target.controller(), self.qp.controller()) {
            return Err(Error::Invalid(format!(
                "the {} is mapped for another open file than qid {}'s ({}): its DMA \
                 addresses mean nothing to this one",
                target.kind(),
                self.qp.qid(),
                self.qp.controller().path().display()
            )));
        }
        let lba_size = self.ns.lba_size as u64;
        count
            .checked_mul(lba_size)
            .filter(|&b| {
                (offset as u64)
                    .checked_add(b)
                    .is_some_and(|e| e <= target.len())
            })
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{count} blocks of {lba_size} bytes at offset {offset} do not fit a {}-byte {}",
                    target.len(),
                    target.kind()
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
        Ok(())
    }

    /// Whether a command can be pushed now: a PRP-list slot is free and
    /// the pair is not poisoned.
    pub(crate) fn can_push(&self) -> bool {
        !self.free_slots.is_empty() && !self.qp.is_poisoned()
    }

    /// Builds and pushes (without ringing) one command of `n` blocks at
    /// `lba` over `len` bytes of `target` at `off`, in a free PRP-list
    /// slot; returns its CID.
    ///
    /// The caller has checked the target ([`check_target`](Self::check_target))
    /// and keeps what it names alive and out of Rust's reach until the
    /// command's completion came back through [`poll`](Self::poll) or
    /// [`pump`](Self::pump), or else hands it to the pair
    /// ([`QueuePair::keep_until_destroyed`] and `_other`).
    pub(crate) fn push_piece(
        &mut self,
        op: u8,
        lba: u64,
        n: u64,
        target: Target<'_>,
        off: usize,
        len: usize,
    ) -> Result<u16> {
        let slot = *self.free_slots.last().ok_or_else(|| Error::QueueFull {
            qid: self.qp.qid(),
            outstanding: self.qp.outstanding(),
        })?;
        let lists: PrpListMem<'_> = match (&mut self.lists, self.qp.prp_pool_mut()) {
            (Some(b), _) => {
                b.list_pages(slot * self.list_pages_per_cmd, self.list_pages_per_cmd)?
            }
            (None, Some(pool)) => pool.list_slot(slot, self.list_entries_per_cmd)?,
            (None, None) => unreachable!("an Io has list pages or a pool"),
        };
        let prp = target.prp(off, len, Some(lists))?;
        let s = if op == opcode::READ {
            Sqe::read(self.ns.nsid, lba, n as u32, prp)
        } else {
            Sqe::write(self.ns.nsid, lba, n as u32, prp)
        };
        // SAFETY: the PRPs name `len` bytes of the target (a mapping of
        // this pair's controller, checked in check_target) and a list in
        // slot `slot`, which is not in use by another command. The caller
        // owns the target until every command on it completed, or hands it
        // to the pair when a wait fails (see above); the list slot is
        // reused only after its command completed, and the list memory
        // (pool or `lists`) lives as long as the pair.
        let cid = unsafe { self.qp.push(s)? };
        self.free_slots.pop();
        self.slot_of_cid[cid as usize] = Some(slot);
        self.commands += 1;
        Ok(cid)
    }

    /// Rings the doorbell for what was pushed and takes one completion
    /// that has arrived, if any (raw status), freeing its PRP-list slot.
    pub(crate) fn poll(&mut self) -> Result<Option<crate::Completion>> {
        let c = self.qp.poll_any_raw()?;
        if let Some(c) = &c {
            self.release_slot(c.cid);
        }
        Ok(c)
    }

    fn release_slot(&mut self, cid: u16) {
        if let Some(slot) = self.slot_of_cid[cid as usize].take() {
            self.free_slots.push(slot);
        }
    }

    /// The queue pair, writable: to poison it or hand it what a command
    /// may still reach.
    pub(crate) fn qpair_mut(&mut self) -> &mut QueuePair {
        &mut self.qp
    }
}

/// How a pipelined transfer failed.
enum Failure {
    /// Every command completed (one with an error status), or none was
    /// submitted: the target is free again.
    Completed(Error),
    /// A wait failed: commands may still be in flight on the target.
    InFlight(Error),
}

/// What a transfer moves data into or out of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Target<'a> {
    /// Host memory (the transfer owns it meanwhile).
    Host(&'a DmaBuffer),
    /// A registered dma-buf (GPU memory; Rust holds no reference into it).
    Gpu(&'a GpuBuffer),
}

impl Target<'_> {
    pub(crate) fn len(&self) -> u64 {
        match self {
            Target::Host(b) => b.len() as u64,
            Target::Gpu(b) => b.len(),
        }
    }

    fn controller(&self) -> &Arc<Controller> {
        match self {
            Target::Host(b) => b.controller(),
            Target::Gpu(b) => b.controller(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Target::Host(_) => "buffer",
            Target::Gpu(_) => "GPU buffer",
        }
    }

    fn prp(&self, off: usize, len: usize, lists: Option<PrpListMem<'_>>) -> Result<crate::Prp> {
        match self {
            Target::Host(b) => b.prp(off, len, lists),
            Target::Gpu(b) => b.mapping().prp(off as u64, len, lists),
        }
    }
}

/// `QueuePair` and `Io` through real memory, against the in-process model
/// of the controller's queue protocol (`crate::model`): data, PRP lists,
/// ring wrap, error statuses, timeouts, poisoning and when buffers come
/// back or are released.
#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::Ordering;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::model::{Event, Model};
    use crate::regs::Cap;
    use crate::{pattern, IommuMode, Modes, Prp};

    pub(crate) const LBA: usize = 512;
    const BLOCKS: usize = 4096; // 2 MiB namespace

    pub(crate) fn info(max_transfer: u32) -> Info {
        Info {
            bdf: "model".into(),
            pci_vendor: 0x1b36,
            pci_device: 0x0010,
            cap: Cap::from_raw(0x3ff),
            version: crate::Version::from_raw(0x0001_0400),
            max_queue_entries: 1024,
            doorbell_stride: 4,
            ready_timeout_ms: 0,
            serial: String::new(),
            model: String::new(),
            firmware: String::new(),
            max_transfer_bytes: Some(max_transfer),
            io_queues: 8,
            page_size: 4096,
            namespaces: vec![Namespace {
                nsid: 1,
                lba_size: LBA as u32,
                capacity_lbas: BLOCKS as u64,
            }],
            iommu_mode: IommuMode::Strict,
            modes: Modes {
                shared: true,
                owner: true,
            },
            shared_max_transfer_bytes: Some(max_transfer),
            node_nsid: None,
            quota_qpairs: None,
            quota_maps: None,
        }
    }

    pub(crate) fn io(
        depth: u32,
        mode: Mode,
        max_transfer: u32,
    ) -> (Arc<Controller>, Arc<Model>, Io) {
        let (ctrl, model) = Model::controller(BLOCKS, LBA);
        let qp = model.qpair(&ctrl, depth, mode);
        let io = Io::with_qpair(qp, &info(max_transfer), 1).unwrap();
        (ctrl, model, io)
    }

    fn disk_matches(model: &Model, seed: u64, lba: u64, count: usize) -> Option<String> {
        let d = model.disk.lock().unwrap();
        let at = lba as usize * LBA;
        pattern::first_mismatch(seed, lba, LBA, &d[at..at + count * LBA]).map(|m| m.to_string())
    }

    /// Writes a pattern through `io`, checks the model's disk, reads it back
    /// into a poisoned buffer and checks every byte.
    fn round_trip(ctrl: &Arc<Controller>, model: &Model, io: &mut Io, lba: u64, count: usize) {
        let mut buf = DmaBuffer::with_len(ctrl, count * LBA + 4096).unwrap();
        let off = 512; // not page aligned: PRP1 mid-page
        pattern::fill(9, lba, LBA, &mut buf.as_mut_slice()[off..off + count * LBA]);
        let mut buf = io.write(lba, count as u64, buf, off).unwrap();
        assert_eq!(disk_matches(model, 9, lba, count), None);
        buf.as_mut_slice().fill(0xa5);
        let buf = io.read(lba, count as u64, buf, off).unwrap();
        let s = buf.as_slice();
        assert_eq!(
            pattern::first_mismatch(9, lba, LBA, &s[off..off + count * LBA]),
            None
        );
        assert!(s[..off].iter().all(|&b| b == 0xa5), "read wrote before");
        assert!(
            s[off + count * LBA..].iter().all(|&b| b == 0xa5),
            "and after"
        );
    }

    #[test]
    fn shared_pair_moves_every_byte_with_prp_lists_in_the_pool() {
        // 64 KiB commands: 17 pages at a mid-page offset, a list in the pool.
        let (ctrl, model, mut io) = io(8, Mode::Shared, 64 << 10);
        assert!(io.lists.is_none());
        round_trip(&ctrl, &model, &mut io, 100, 700);
        assert_eq!(io.commands(), 2 * 700usize.div_ceil(128) as u64);
        io.flush().unwrap();
        io.write_zeroes(100, 3).unwrap();
        assert!(model.disk.lock().unwrap()[100 * LBA..103 * LBA]
            .iter()
            .all(|&b| b == 0));
    }

    #[test]
    fn raw_pair_moves_every_byte_with_lists_in_its_own_buffer() {
        // 1 MiB commands: 256 pages, one list page per command in the Io's
        // list buffer; the 2 MiB transfer pipelines on a depth-4 ring.
        let (ctrl, model, mut io) = io(4, Mode::Raw, 1 << 20);
        assert_eq!(io.lists.as_ref().unwrap().pages(), 3);
        round_trip(&ctrl, &model, &mut io, 0, BLOCKS);
    }

    #[test]
    fn single_block_commands_wrap_the_ring_many_times() {
        let (ctrl, model, mut io) = io(4, Mode::Shared, 64 << 10);
        io.limit_transfer_blocks(1);
        round_trip(&ctrl, &model, &mut io, 7, 50);
        assert_eq!(io.commands(), 100, "25 laps of a depth-4 ring");
    }

    #[test]
    fn an_error_status_hands_the_buffer_back_and_the_pair_goes_on() {
        let (ctrl, _model, mut io) = io(4, Mode::Shared, 64 << 10);
        let buf = DmaBuffer::new(&ctrl, 1).unwrap();
        let e = io
            .transfer(
                opcode::READ,
                BLOCKS as u64,
                1,
                buf,
                0,
                RangeCheck::Unchecked,
            )
            .unwrap_err();
        assert!(e.to_string().contains("LBA Out of Range"), "{e}");
        let buf = e
            .buffer
            .expect("every command completed: the buffer is back");
        assert!(!io.qpair().is_poisoned());
        // Refused client side: the buffer comes back too.
        let e = io.read(BLOCKS as u64, 1, buf, 0).unwrap_err();
        assert!(matches!(e.error, Error::Invalid(_)), "{e}");
        let buf = io.read(0, 8, e.buffer.unwrap(), 0).unwrap();
        assert_eq!(buf.len(), 4096);
    }

    /// An offset whose end wraps `u64` is refused as not fitting (it
    /// overflowed before the check, a panic in debug builds).
    #[test]
    fn an_offset_near_the_top_of_the_address_space_does_not_fit() {
        let (ctrl, _model, mut io) = io(4, Mode::Shared, 64 << 10);
        let buf = DmaBuffer::new(&ctrl, 1).unwrap();
        let e = io.read(0, 1, buf, usize::MAX - 3).unwrap_err();
        assert!(e.to_string().contains("do not fit"), "{e}");
        assert!(e.buffer.is_some(), "refused before any command");
        assert_eq!(io.commands(), 0);
    }

    #[test]
    fn a_buffer_of_another_file_is_refused() {
        let (_ctrl, _model, mut io) = io(4, Mode::Shared, 64 << 10);
        let (other, _m2) = Model::controller(8, LBA);
        let buf = DmaBuffer::new(&other, 1).unwrap();
        let e = io.read(0, 1, buf, 0).unwrap_err();
        assert!(e.to_string().contains("another open file"), "{e}");
        assert!(e.buffer.is_some());
        assert_eq!(io.commands(), 0);
    }

    /// The misuse the types forbid, at run time: a read that times out
    /// does not hand the buffer back; the controller completes it late,
    /// into memory that is still mapped and that nothing in Rust can
    /// reach; the buffer is UNMAPped only after the pair is destroyed.
    #[test]
    fn a_timeout_poisons_the_pair_which_keeps_the_buffer_until_destroyed() {
        let (ctrl, model, mut io) = io(4, Mode::Shared, 64 << 10);
        model.disk.lock().unwrap()[..8 * LBA].fill(0x5a);
        io.set_timeout(Duration::from_millis(100));
        let buf = DmaBuffer::new(&ctrl, 2).unwrap();
        let handle = buf.handle();
        model.knobs.stall.store(true, Ordering::Release);
        let t = Instant::now();
        let e = io.read(0, 8, buf, 0).unwrap_err();
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert!(matches!(e.error, Error::Timeout { .. }), "{e}");
        assert!(
            e.buffer.is_none(),
            "a timed-out read must not hand the buffer back"
        );
        assert!(io.qpair().is_poisoned());
        assert!(io.qpair().poison_reason().unwrap().contains("timeout"));
        assert_eq!(io.qpair().kept_buffers(), 1);

        // A poisoned pair takes nothing new, and gives the new buffer back.
        let other = DmaBuffer::new(&ctrl, 1).unwrap();
        let e = io.write(0, 1, other, 0).unwrap_err();
        assert!(matches!(e.error, Error::Poisoned { .. }), "{e}");
        assert!(e.to_string().contains("keeps their buffers"), "{e}");
        drop(e); // that buffer: UNMAP refused (a pair lives), parked
        assert_eq!(ctrl.deferred_unmaps(), 1);

        // The controller finishes late, into the kept (still mapped) buffer.
        model.knobs.stall.store(false, Ordering::Release);
        std::thread::sleep(Duration::from_millis(20));
        assert!(model.mapped().contains(&handle));
        drop(io);
        let log = model.log();
        let destroyed = log
            .iter()
            .position(|e| matches!(e, Event::Destroy(_, Ok(()))))
            .expect("destroyed");
        let unmapped = log
            .iter()
            .position(|e| *e == Event::Unmap(handle, Ok(())))
            .expect("the kept buffer is UNMAPped");
        assert!(destroyed < unmapped, "{log:?}");
        assert!(
            !log[..destroyed].contains(&Event::Unmap(handle, Ok(()))),
            "{log:?}"
        );
        assert_eq!(ctrl.deferred_unmaps(), 0, "the parked one went too");
        assert_eq!(ctrl.kept_until_close(), 0);
        assert!(model.mapped().is_empty(), "{:?}", model.mapped());
    }

    /// A pair that cannot be destroyed may still DMA: its buffers (and
    /// queue memory) stay mapped and are never UNMAPped while the file is
    /// open.
    #[test]
    fn a_failed_destroy_keeps_everything_until_close() {
        let (ctrl, model, mut io) = io(4, Mode::Raw, 64 << 10);
        io.set_timeout(Duration::from_millis(50));
        let buf = DmaBuffer::new(&ctrl, 1).unwrap();
        let handle = buf.handle();
        model.knobs.stall.store(true, Ordering::Release);
        assert!(io.write(0, 8, buf, 0).unwrap_err().buffer.is_none());
        model.knobs.fail_destroy.store(true, Ordering::Release);
        drop(io);
        let log = model.log();
        assert!(log
            .iter()
            .any(|e| matches!(e, Event::Destroy(_, Err(libc::EIO)))));
        assert!(
            !log.iter().any(|e| matches!(e, Event::Unmap(..))),
            "nothing UNMAPped: {log:?}"
        );
        // SQ, CQ, doorbell page, the data buffer and the PRP list buffer.
        assert_eq!(ctrl.kept_until_close(), 5);
        assert!(model.mapped().contains(&handle));
    }

    #[test]
    fn a_buffer_dropped_while_a_pair_lives_waits_for_it() {
        let (ctrl, model) = Model::controller(BLOCKS, LBA);
        let qp = model.qpair(&ctrl, 4, Mode::Shared);
        let buf = DmaBuffer::new(&ctrl, 1).unwrap();
        let h = buf.handle();
        drop(buf);
        assert_eq!(model.log().last(), Some(&Event::Unmap(h, Err(libc::EBUSY))));
        assert_eq!(ctrl.deferred_unmaps(), 1);
        drop(qp);
        assert_eq!(model.log().last(), Some(&Event::Unmap(h, Ok(()))));
        assert_eq!(ctrl.deferred_unmaps(), 0);
    }

    #[test]
    fn raw_queue_pair_commands() {
        let (ctrl, model) = Model::controller(BLOCKS, LBA);
        // A controller and its queues in one struct.
        struct Owner {
            qp: QueuePair,
            buf: DmaBuffer,
            _ctrl: Arc<Controller>,
        }
        let mut o = Owner {
            qp: model.qpair(&ctrl, 4, Mode::Raw),
            buf: DmaBuffer::new(&ctrl, 1).unwrap(),
            _ctrl: ctrl.clone(),
        };
        // Data-free commands are safe; a read is refused there.
        let c = o.qp.execute_no_data(Sqe::flush(1)).unwrap();
        assert_eq!(c.sqe.opcode(), opcode::FLUSH);
        let prp = Prp {
            prp1: o.buf.dma_addr(0),
            prp2: 0,
        };
        let e = o.qp.submit_no_data(Sqe::read(1, 0, 1, prp)).unwrap_err();
        assert!(e.to_string().contains("names memory"), "{e}");
        model.disk.lock().unwrap()[..LBA].fill(0x3c);
        // SAFETY: the read names the first 512 bytes of `o.buf`, a mapping
        // of this controller that nothing reads until execute returns the
        // completion (it does: the model completes it).
        let c = unsafe { o.qp.execute(Sqe::read(1, 0, 1, prp)) }.unwrap();
        assert!(c.status().is_success());
        assert!(o.buf.as_slice()[..LBA].iter().all(|&b| b == 0x3c));
        assert!(o.buf.as_slice()[LBA..].iter().all(|&b| b == 0));
        // Wrong namespace: the status comes back as an error.
        let e = o.qp.execute_no_data(Sqe::flush(1)).map(|_| ());
        assert!(e.is_ok());
        let e =
            o.qp.execute_no_data(Sqe::write_zeroes(2, 0, 1))
                .unwrap_err();
        assert_eq!(e.nvme_status().map(|s| s.sc), Some(0x0b), "{e}");
        drop(o);
        assert!(model.mapped().is_empty());
    }

    #[test]
    fn a_timed_out_raw_wait_poisons_too() {
        let (ctrl, model) = Model::controller(BLOCKS, LBA);
        let mut qp = model.qpair(&ctrl, 4, Mode::Raw);
        qp.set_timeout(Duration::from_millis(30));
        model.knobs.stall.store(true, Ordering::Release);
        let cid = qp.submit_no_data(Sqe::flush(1)).unwrap();
        assert!(matches!(qp.wait(cid), Err(Error::Timeout { .. })));
        assert!(qp.is_poisoned());
        assert!(matches!(
            qp.submit_no_data(Sqe::flush(1)),
            Err(Error::Poisoned { .. })
        ));
        // A late completion can still be collected.
        model.knobs.stall.store(false, Ordering::Release);
        qp.set_timeout(Duration::from_secs(5));
        assert!(qp.wait(cid).is_ok());
        assert!(qp.is_poisoned(), "poisoning is for good");
    }
}
