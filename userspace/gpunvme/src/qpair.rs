// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! An I/O submission/completion queue pair, driven from this process
//! through mmap'ed queue memory and the doorbell page
//! (`GPUNVME_IOC_CREATE_QPAIR` / `GPUNVME_IOC_DESTROY_QPAIR`), shared
//! (validated, the default) or raw (owner mode): see [`Mode`].
//!
//! # Who may write what
//!
//! A command's PRPs are raw device addresses: the controller writes (or
//! reads) whatever they name. So the entry points that take a ready-made
//! [`Sqe`] ([`QueuePair::push`], [`submit`](QueuePair::submit),
//! [`execute`](QueuePair::execute)) are `unsafe fn`, with the contract
//! written on them; the safe ones take only commands that move no data
//! ([`QueuePair::execute_no_data`]), and [`crate::Io`] builds data
//! commands itself from buffers moved into it.
//!
//! A wait that times out **poisons** the pair: commands are still in
//! flight, so it refuses new ones ([`Error::Poisoned`]) and keeps every
//! buffer handed to it ([`QueuePair::keep_until_destroyed`]) until it is
//! destroyed. Destroying it (drop) deletes the queues on the controller,
//! which ends their commands; only a successful destroy releases the
//! buffers. A failed one keeps them, and the queue memory, mapped until
//! the file is closed ([`Controller::kept_until_close`]).
//!
//! Memory ordering: SQE stores are volatile, then a release fence (plus
//! `dsb st` on aarch64, where a DMB does not order normal memory against
//! device memory), then the volatile doorbell store. Completions are
//! polled with a volatile load of CQE DW3 (phase tag); on a match an
//! acquire fence comes before the rest of the entry is read.

use std::collections::VecDeque;
use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpunvme_sys as sys;

use crate::command::{Cqe, PrpListMem, Sqe, CQE_SIZE, PRP_ENTRIES_PER_PAGE, SQE_SIZE};
use crate::controller::Controller;
use crate::dma::{unmap_handle, unmap_outcome, DmaBuffer, Unmapped};
use crate::dmabuf::DmabufMapping;
use crate::error::{Error, Result};
use crate::fork::Owner;
use crate::map::Mapping;
use crate::status::Status;

/// Default deadline of every wait.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A completion, matched to the command that caused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// Command identifier.
    pub cid: u16,
    /// The submitted entry (opcode, LBA range, ...).
    pub sqe: Sqe,
    /// The completion entry.
    pub cqe: Cqe,
}

impl Completion {
    /// The status.
    pub fn status(&self) -> Status {
        self.cqe.status
    }

    /// `Ok(self)` on Successful Completion, else [`Error::Nvme`].
    pub fn ok(self, qid: u16) -> Result<Self> {
        if self.cqe.status.is_success() {
            Ok(self)
        } else {
            Err(Error::Nvme {
                qid,
                cid: self.cid,
                command: self.sqe.describe(),
                status: self.cqe.status,
            })
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Free,
    InFlight(Sqe),
    Done(Completion),
}

/// Pure queue bookkeeping (ring indices, phase, CIDs), separate from the
/// memory so it can be unit-tested.
#[derive(Debug)]
pub(crate) struct Ring {
    pub(crate) depth: u32,
    pub(crate) sq_tail: u32,
    pub(crate) cq_head: u32,
    pub(crate) phase: bool,
    slots: Vec<Slot>,
    free: Vec<u16>,
    ready: VecDeque<u16>,
    outstanding: usize,
}

impl Ring {
    pub(crate) fn new(depth: u32) -> Self {
        // At most depth - 1 commands in flight, so depth - 1 CIDs.
        let n = depth as usize - 1;
        Ring {
            depth,
            sq_tail: 0,
            cq_head: 0,
            phase: true,
            slots: vec![Slot::Free; n],
            free: (0..n as u16).rev().collect(),
            ready: VecDeque::new(),
            outstanding: 0,
        }
    }

    /// Takes a CID and an SQ slot; returns (cid, slot index).
    fn push(&mut self, mut sqe: Sqe) -> Option<(u16, u32, Sqe)> {
        let cid = self.free.pop()?;
        sqe.set_cid(cid);
        self.slots[cid as usize] = Slot::InFlight(sqe);
        self.outstanding += 1;
        let slot = self.sq_tail;
        self.sq_tail = (self.sq_tail + 1) % self.depth;
        Some((cid, slot, sqe))
    }

    /// Records a CQE that matched the phase; advances the head.
    fn complete(&mut self, cqe: Cqe) -> std::result::Result<(), String> {
        self.cq_head += 1;
        if self.cq_head == self.depth {
            self.cq_head = 0;
            self.phase = !self.phase;
        }
        let cid = cqe.cid;
        match self.slots.get(cid as usize) {
            Some(Slot::InFlight(sqe)) => {
                let sqe = *sqe;
                self.slots[cid as usize] = Slot::Done(Completion { cid, sqe, cqe });
                self.ready.push_back(cid);
                Ok(())
            }
            _ => Err(format!(
                "controller completed cid {cid}, which is not outstanding (status {})",
                cqe.status
            )),
        }
    }

    fn take(&mut self, cid: u16) -> Option<Completion> {
        match self.slots.get(cid as usize) {
            Some(Slot::Done(c)) => {
                let c = *c;
                self.slots[cid as usize] = Slot::Free;
                self.free.push(cid);
                self.outstanding -= 1;
                self.ready.retain(|&r| r != cid);
                Some(c)
            }
            _ => None,
        }
    }

    fn take_any(&mut self) -> Option<Completion> {
        let cid = *self.ready.front()?;
        self.take(cid)
    }

    fn in_flight(&self, cid: u16) -> Option<Sqe> {
        match self.slots.get(cid as usize) {
            Some(Slot::InFlight(s)) => Some(*s),
            _ => None,
        }
    }
}

/// Release barrier between queue-memory stores and a doorbell store.
#[inline(always)]
fn doorbell_barrier() {
    fence(Ordering::Release);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory.
    unsafe {
        std::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
}

/// Busy-poll pacing: spin, and past 256 empty polls give the CPU away
/// (returns at once on an idle core; keeps oversubscribed pollers, e.g.
/// more queue-pair threads than CPUs, from starving each other).
#[inline(always)]
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 256 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// How a queue pair reaches the controller. The code that drives the
/// queue is the same in both modes: only what the mappings are differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// A shared (validated) pair, `flags` 0: any number of files may have
    /// them. The SQ, CQ and doorbell page this process maps are shadows in
    /// memory the module owns (the doorbell page holds the SQ tail cell at
    /// `sq_db` 0 and the CQ head cell at `cq_db` 64; the CQ is a mirror).
    /// A module thread checks every new SQE (opcode Read, Write, Flush or
    /// Write Zeroes; namespace and LBA range; PRP1, PRP2 and every PRP-list
    /// entry inside a buffer this file mapped; PRP lists in the pair's
    /// [`PrpPool`]) before it copies it into the real SQ; a rejected one
    /// completes with an error status (SCT 0, SC 0x01, 0x02, 0x0b or 0x80,
    /// DNR) and never reaches the controller.
    #[default]
    Shared,
    /// `GPUNVME_QPAIR_RAW`: an owner-mode pair (the file must have
    /// [`Controller::claim_owner`]ed the controller): the real SQ, CQ and
    /// doorbell page (BAR0, shared with the admin queue and every other
    /// queue), nothing checked. PRP lists may be anywhere the controller
    /// can read, e.g. a [`crate::DmaBuffer`].
    Raw,
}

impl Mode {
    /// The `flags` word of `struct gpunvme_qpair_create`.
    pub fn flags(self) -> u32 {
        match self {
            Mode::Shared => 0,
            Mode::Raw => sys::GPUNVME_QPAIR_RAW,
        }
    }

    /// "shared" or "raw".
    pub fn name(self) -> &'static str {
        match self {
            Mode::Shared => "shared",
            Mode::Raw => "raw",
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What [`QueuePair::export`] exports (`GPUNVME_EXPORT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ExportKind {
    /// The 4 KiB page holding the pair's doorbells: the shadow page of a
    /// shared pair (memory), the BAR0 page of a raw pair (MMIO).
    Doorbell = sys::GPUNVME_EXPORT_DOORBELL as u16,
    /// The SQ memory (the shadow SQ of a shared pair).
    Sq = sys::GPUNVME_EXPORT_SQ as u16,
    /// The CQ memory (the mirror of a shared pair).
    Cq = sys::GPUNVME_EXPORT_CQ as u16,
    /// A shared pair's PRP pool.
    PrpPool = sys::GPUNVME_EXPORT_PRP_POOL as u16,
}

/// A shared pair's PRP pool, mapped here: where the PRP lists of its
/// commands must be built (the module reads each list there, checks every
/// entry and copies it before the command reaches the controller). A PRP2
/// names pool byte `o` as [`dma_base`](Self::dma_base) `+ o`.
///
/// The pool is carved into list slots ([`list_slot`](Self::list_slot)): a
/// slot of `entries` entries is that many rounded up to a power of two (at
/// most 512, one page) times 8 bytes, aligned to its size in the pool's
/// address space, so no list crosses a page boundary and none chains (a
/// shared transfer is at most 2 MiB: one list page covers it). The module
/// sizes the pool for one slot per queue entry of the list its largest
/// transfer needs.
#[derive(Debug)]
pub struct PrpPool {
    map: Mapping,
    dma: u64,
    /// The process the pool is mapped in (not copied into a child).
    owner: Owner,
    /// Addresses of the current slot layout (see `list_slot`), cached.
    layout: Option<(usize, Vec<u64>)>,
}

impl PrpPool {
    pub(crate) fn new(map: Mapping, dma: u64) -> Result<Self> {
        if dma % 8 != 0 || dma.checked_add(map.len() as u64).is_none() {
            return Err(Error::Invalid(format!(
                "CREATE_QPAIR returned PRP pool address {dma:#x} (size {}), not 8-byte aligned",
                map.len()
            )));
        }
        Ok(PrpPool {
            map,
            dma,
            owner: Owner::here(),
            layout: None,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Always false: a pool has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The address that names the pool's first byte in a PRP2
    /// (`prp_dma`).
    pub fn dma_base(&self) -> u64 {
        self.dma
    }

    /// Where the pool is mapped in this process (for code that builds
    /// lists itself, e.g. a GPU kernel after importing the pool's export).
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.ptr()
    }

    /// Bytes of a slot of `entries` entries (see the type's docs).
    pub fn slot_bytes(entries: usize) -> usize {
        entries.clamp(1, PRP_ENTRIES_PER_PAGE).next_power_of_two() * 8
    }

    /// Pool offset of the first slot of `slot_bytes`, and how many fit.
    fn geometry(&self, slot_bytes: usize) -> (usize, usize) {
        let sb = slot_bytes as u64;
        let first = ((sb - self.dma % sb) % sb) as usize;
        (first, self.len().saturating_sub(first) / slot_bytes)
    }

    /// How many slots of `entries` entries the pool holds.
    pub fn slots(&self, entries: usize) -> usize {
        self.geometry(Self::slot_bytes(entries)).1
    }

    /// Slot `slot` of `entries` entries, to build one command's PRP list
    /// in ([`crate::DmaBuffer::prp`], [`crate::command::build_prps`]). It
    /// must stay untouched until that command completes.
    pub fn list_slot(&mut self, slot: usize, entries: usize) -> Result<PrpListMem<'_>> {
        if !self.owner.unforked() {
            // The module's mapping of the pool is not in a forked child.
            return Err(Error::Forked {
                path: "(a queue pair's PRP pool)".into(),
                opened_by: self.owner.pid(),
                now: Owner::current_pid(),
            });
        }
        let bytes = Self::slot_bytes(entries);
        let (first, count) = self.geometry(bytes);
        if slot >= count {
            return Err(Error::Invalid(format!(
                "PRP list slot {slot} of {entries} entries: the {}-byte PRP pool holds {count}",
                self.len()
            )));
        }
        if self.layout.as_ref().map(|l| l.0) != Some(bytes) {
            let base = self.dma + first as u64;
            let addrs = (0..count as u64).map(|i| base + i * bytes as u64).collect();
            self.layout = Some((bytes, addrs));
        }
        let addrs = &self.layout.as_ref().expect("set above").1;
        // SAFETY: the slot lies inside the live mapping (slot < count),
        // 8-byte aligned (the mapping is page aligned, `first` and `bytes`
        // multiples of 8), does not cross a page of the pool's address
        // space (aligned to its power-of-two size, at most 4096); `&mut
        // self` keeps other Rust accesses out while the view lives.
        Ok(unsafe {
            PrpListMem::from_raw(
                self.map.ptr().add(first + slot * bytes),
                &addrs[slot..slot + 1],
                bytes / 8,
            )
        })
    }
}

/// A queue pair's memory as mapped in this process ([`QueuePair::memory`]).
#[derive(Debug, Clone, Copy)]
pub struct QueueMemory {
    /// SQ ring (64-byte entries; a shared pair's shadow SQ).
    pub sq: *mut u8,
    /// Bytes mapped at `sq`.
    pub sq_len: usize,
    /// CQ ring (16-byte entries; a shared pair's mirror); null when the CQ
    /// is in a dma-buf ([`QueuePair::create_raw_cq_in`]).
    pub cq: *mut u8,
    /// Bytes mapped at `cq`.
    pub cq_len: usize,
    /// The 4 KiB doorbell page (a shared pair's shadow page).
    pub doorbell_page: *mut u8,
    /// SQ tail doorbell's byte offset in that page.
    pub sq_db_offset: u32,
    /// CQ head doorbell's byte offset in that page.
    pub cq_db_offset: u32,
    /// A shared pair's PRP pool (null for a raw pair).
    pub prp_pool: *mut u8,
    /// Bytes mapped at `prp_pool` (0 for a raw pair).
    pub prp_pool_len: usize,
    /// The address naming the pool's first byte in a PRP2 (0 for a raw
    /// pair).
    pub prp_dma: u64,
}

/// An I/O queue pair owned by this process. Dropping it destroys the pair
/// on the controller (outstanding commands end when the SQ is deleted),
/// then unmaps the queue memory and releases the buffers it kept; if the
/// destroy fails, all of that stays mapped until the file is closed.
///
/// It holds an `Arc` of its [`Controller`], so both can live in one
/// struct. It is `Send` (one thread at a time drives it: every queue
/// operation takes `&mut self`) but not `Sync`.
///
/// Submitting a ready-made entry names raw device addresses, so it is
/// `unsafe`:
///
/// ```compile_fail,E0133
/// # use gpunvme::{Prp, QueuePair, Sqe};
/// fn scribble(qp: &mut QueuePair, addr: u64) {
///     // error[E0133]: call to unsafe function requires an unsafe block
///     qp.submit(Sqe::read(1, 0, 8, Prp { prp1: addr, prp2: 0 }));
/// }
/// ```
#[derive(Debug)]
pub struct QueuePair {
    ctrl: Arc<Controller>,
    qid: u16,
    mode: Mode,
    ring: Ring,
    sq: Option<Mapping>,
    cq: Option<Mapping>,
    db: Option<Mapping>,
    pool: Option<PrpPool>,
    sq_db: *mut u32,
    cq_db: *mut u32,
    sq_db_offset: u32,
    cq_db_offset: u32,
    unrung: bool,
    timeout: Duration,
    /// Why the pair refuses new commands (a wait timed out, or the
    /// controller completed a command that was not outstanding).
    poisoned: Option<String>,
    /// Buffers its commands may still DMA into: released only after the
    /// pair is destroyed.
    held: Vec<DmaBuffer>,
    /// Other things its commands may still reach (a registered GPU buffer
    /// and the exporter's memory behind it, a transfer's state): dropped
    /// only after the pair is destroyed, leaked if the destroy fails.
    held_other: Vec<Kept>,
    /// A raw pair's CQ memory when it is not the module's
    /// ([`create_raw_cq_in`](Self::create_raw_cq_in)): released only after
    /// the pair is destroyed.
    cq_in: Option<DmabufMapping>,
}

/// Something a poisoned pair keeps (see
/// [`QueuePair::keep_until_destroyed_other`]); opaque, so only its
/// presence is shown.
struct Kept(#[allow(dead_code)] Box<dyn Send>);

impl std::fmt::Debug for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kept(..)")
    }
}

// SAFETY: the raw pointers point into mappings owned by `self`; the
// controller is Sync. One thread at a time drives a QueuePair (`&mut
// self` on every queue operation).
unsafe impl Send for QueuePair {}

fn map_err(ctrl: &Controller, what: &str, e: std::io::Error) -> Error {
    Error::io(format!("mmap the {what}"), ctrl.path(), e)
}

impl QueuePair {
    /// Creates a shared queue pair of `depth` entries (2 ..=
    /// max_queue_entries) and maps its SQ, CQ, doorbell page and PRP pool.
    pub fn create(ctrl: &Arc<Controller>, depth: u32) -> Result<Self> {
        Self::create_with(ctrl, depth, Mode::Shared)
    }

    /// [`create`](Self::create) in either [`Mode`]: the mappings are at
    /// the offsets the module returns (shadows for a shared pair, the real
    /// queues and BAR0 doorbell page for a raw one), so nothing else
    /// differs but the PRP pool, which only a shared pair has. A raw pair
    /// needs [`Controller::claim_owner`] first (EPERM otherwise); while
    /// another file owns the controller a shared pair gets EBUSY.
    pub fn create_with(ctrl: &Arc<Controller>, depth: u32, mode: Mode) -> Result<Self> {
        Self::create_inner(ctrl, depth, mode, None)
    }

    /// Both creations: `cq_in` puts a raw pair's CQ in that dma-buf.
    fn create_inner(
        ctrl: &Arc<Controller>,
        depth: u32,
        mode: Mode,
        cq_in: Option<DmabufMapping>,
    ) -> Result<Self> {
        if !(sys::GPUNVME_MIN_QUEUE_DEPTH..=65536).contains(&depth) {
            return Err(Error::Invalid(format!(
                "queue depth {depth} is outside {}..=65536",
                sys::GPUNVME_MIN_QUEUE_DEPTH
            )));
        }
        let mut c = sys::gpunvme_qpair_create {
            size: std::mem::size_of::<sys::gpunvme_qpair_create>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            depth,
            flags: mode.flags()
                | if cq_in.is_some() {
                    sys::GPUNVME_QPAIR_CQ_IN_MAP
                } else {
                    0
                },
            cq_handle: cq_in.as_ref().map_or(0, |m| m.handle()),
            ..Default::default()
        };
        // Before the lock: a child may have inherited it held.
        ctrl.check_process()?;
        let mut st = ctrl.lifecycle();
        // SAFETY: GPUNVME_IOC_CREATE_QPAIR takes a struct
        // gpunvme_qpair_create; `c` is one.
        unsafe {
            ctrl.ioctl(
                "GPUNVME_IOC_CREATE_QPAIR",
                sys::GPUNVME_IOC_CREATE_QPAIR,
                &mut c as *mut _ as *mut _,
            )?
        };
        st.live_qpairs += 1;
        drop(st);
        // From here on, an early return drops `qp`, which destroys the pair
        // (and then releases `cq_in`).
        let mut qp = QueuePair::unmapped(ctrl.clone(), c.qid, mode, depth, c.sq_db, c.cq_db);
        let in_dmabuf = cq_in.is_some();
        qp.cq_in = cq_in;
        let d = depth as u64;
        if c.sq_size < d * SQE_SIZE as u64 || c.cq_size < d * CQE_SIZE as u64 {
            return Err(Error::Invalid(format!(
                "CREATE_QPAIR returned sq_size {} / cq_size {} for depth {depth}",
                c.sq_size, c.cq_size
            )));
        }
        if c.sq_db % 4 != 0 || c.cq_db % 4 != 0 || c.sq_db > 4092 || c.cq_db > 4092 {
            return Err(Error::Invalid(format!(
                "CREATE_QPAIR returned doorbell offsets {:#x}/{:#x}, not dwords in one page",
                c.sq_db, c.cq_db
            )));
        }
        let fd = ctrl.raw_fd();
        qp.sq = Some(
            Mapping::shared(fd, c.sq_offset, c.sq_size as usize)
                .map_err(|e| map_err(ctrl, "SQ", e))?,
        );
        if !in_dmabuf {
            qp.cq = Some(
                Mapping::shared(fd, c.cq_offset, c.cq_size as usize)
                    .map_err(|e| map_err(ctrl, "CQ", e))?,
            );
        }
        let db = Mapping::shared(fd, c.db_offset, 4096)
            .map_err(|e| map_err(ctrl, "doorbell page", e))?;
        qp.set_doorbells(db);
        if mode == Mode::Shared {
            if c.prp_size == 0 {
                return Err(Error::Invalid(
                    "CREATE_QPAIR returned no PRP pool (prp_size 0) for a shared pair".into(),
                ));
            }
            let map = Mapping::shared(fd, c.prp_offset, c.prp_size as usize)
                .map_err(|e| map_err(ctrl, "PRP pool", e))?;
            qp.pool = Some(PrpPool::new(map, c.prp_dma)?);
        }
        Ok(qp)
    }

    /// A raw pair (owner mode, [`Controller::claim_owner`] first) whose CQ
    /// the controller writes into the start of `cq`, a dma-buf of memory a
    /// GPU polls (`GPUNVME_QPAIR_CQ_IN_MAP`), instead of the module's
    /// memory. `cq` must be one run of DMA addresses of at least depth x 16
    /// bytes rounded up to 4 KiB, zeroed (phase 0) before this call; the
    /// pair keeps it and releases it only after the pair is destroyed.
    ///
    /// The CQ is not mapped here: this process does not reap this pair
    /// ([`reap`](Self::reap) and the waits fail with `Error::Invalid`), the
    /// GPU does; [`memory`](Self::memory) reports a null CQ.
    pub fn create_raw_cq_in(ctrl: &Arc<Controller>, depth: u32, cq: DmabufMapping) -> Result<Self> {
        if !Arc::ptr_eq(cq.controller(), ctrl) {
            return Err(Error::Invalid(
                "the CQ's dma-buf is mapped on another open file of the controller".into(),
            ));
        }
        Self::create_inner(ctrl, depth, Mode::Raw, Some(cq))
    }

    /// A pair the module created, before its memory is mapped.
    pub(crate) fn unmapped(
        ctrl: Arc<Controller>,
        qid: u16,
        mode: Mode,
        depth: u32,
        sq_db_offset: u32,
        cq_db_offset: u32,
    ) -> Self {
        QueuePair {
            ctrl,
            qid,
            mode,
            ring: Ring::new(depth),
            sq: None,
            cq: None,
            db: None,
            pool: None,
            sq_db: ptr::null_mut(),
            cq_db: ptr::null_mut(),
            sq_db_offset,
            cq_db_offset,
            unrung: false,
            timeout: DEFAULT_TIMEOUT,
            poisoned: None,
            held: Vec::new(),
            held_other: Vec::new(),
            cq_in: None,
        }
    }

    /// Sets the doorbell page; its offsets were checked to be dwords in it.
    pub(crate) fn set_doorbells(&mut self, db: Mapping) {
        debug_assert!(self.sq_db_offset <= 4092 && self.cq_db_offset <= 4092);
        // SAFETY: both offsets are dwords inside the 4 KiB page (checked
        // by the caller against the module's answer).
        unsafe {
            self.sq_db = db.ptr().add(self.sq_db_offset as usize).cast();
            self.cq_db = db.ptr().add(self.cq_db_offset as usize).cast();
        }
        self.db = Some(db);
    }

    /// Test fixture: a pair over memory the in-process controller model
    /// drives (see `crate::model`).
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_model_memory(
        ctrl: Arc<Controller>,
        qid: u16,
        mode: Mode,
        depth: u32,
        sq: Mapping,
        cq: Mapping,
        db: Mapping,
        pool: Option<PrpPool>,
    ) -> Self {
        ctrl.lifecycle().live_qpairs += 1;
        let mut qp = QueuePair::unmapped(ctrl, qid, mode, depth, 0, 64);
        qp.sq = Some(sq);
        qp.cq = Some(cq);
        qp.set_doorbells(db);
        qp.pool = pool;
        qp
    }

    /// The controller (the open file) this pair belongs to.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.ctrl
    }

    /// Whether the pair refuses new commands because a wait timed out (or
    /// the controller completed a command that was not outstanding): its
    /// commands may still be in flight until it is destroyed.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.is_some()
    }

    /// Why the pair is poisoned, if it is.
    pub fn poison_reason(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Refuses new commands from now on (see [`is_poisoned`](Self::is_poisoned)).
    pub(crate) fn poison(&mut self, why: String) {
        self.poisoned.get_or_insert(why);
    }

    /// Keeps `buf` until this pair is destroyed (and, if the destroy fails,
    /// until the file is closed): for a buffer that a command of this pair
    /// may still DMA into, e.g. after a timed-out wait. [`crate::Io`] does
    /// this itself.
    pub fn keep_until_destroyed(&mut self, buf: DmaBuffer) {
        self.held.push(buf);
    }

    /// Keeps `thing` (whatever owns memory a command of this pair may
    /// still DMA into: a [`crate::GpuBuffer`], the allocation behind it)
    /// until this pair is destroyed; if the destroy fails it is leaked,
    /// never dropped, since the controller may still write that memory.
    pub fn keep_until_destroyed_other(&mut self, thing: impl Send + 'static) {
        self.held_other.push(Kept(Box::new(thing)));
    }

    /// Buffers kept by [`keep_until_destroyed`](Self::keep_until_destroyed)
    /// and [`keep_until_destroyed_other`](Self::keep_until_destroyed_other).
    pub fn kept_buffers(&self) -> usize {
        self.held.len() + self.held_other.len()
    }

    /// Takes the oldest completion that has arrived, if any, without
    /// waiting (raw status; rings the doorbell first if something was
    /// pushed).
    pub(crate) fn poll_any_raw(&mut self) -> Result<Option<Completion>> {
        self.ring();
        if let Some(c) = self.ring.take_any() {
            return Ok(Some(c));
        }
        self.reap()?;
        Ok(self.ring.take_any())
    }

    /// Exports part of this pair as a dma-buf (`GPUNVME_IOC_EXPORT`), for a
    /// GPU to import. A shared pair exports its shadows (doorbell cells,
    /// SQ, CQ mirror) and its PRP pool; a raw pair the real doorbell page
    /// and queues (and no pool). The module revokes every export when the
    /// pair is destroyed or the file closed.
    ///
    /// Whoever can write an exported SQ (and ring its doorbell) can aim
    /// the SSD at **every** buffer this pair's [`Controller`] (open file)
    /// mapped: a shared pair's module checks each PRP against the file's
    /// mappings, not against any one buffer, and a raw pair checks nothing.
    /// So while a GPU kernel drives an exported pair, no Rust code may
    /// read, write or drop any [`DmaBuffer`] of the same file that the
    /// kernel's commands could reach (the `gpunvme_gpu::Gpu::launch`
    /// contract). The simple way: open a `Controller` of its own for the
    /// GPU job (one [`Controller::open`] per job), holding only the pairs
    /// and buffers the kernel uses, and keep all of them in the launch.
    pub fn export(&self, kind: ExportKind) -> Result<OwnedFd> {
        if self.ctrl.passthrough().is_some() {
            return Err(Error::Refused(format!(
                "qid {}: a passthrough pair's memory is this process's (a memfd, mapped at \
                 QueuePair::memory()): a GPU registers that mapping with its runtime \
                 (hipHostRegister, cuMemHostRegister); there is no dma-buf to export",
                self.qid
            )));
        }
        let mut e = sys::gpunvme_export {
            size: std::mem::size_of::<sys::gpunvme_export>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            qid: self.qid,
            kind: kind as u16,
            flags: (libc::O_CLOEXEC | libc::O_RDWR) as u32,
            ..Default::default()
        };
        // SAFETY: GPUNVME_IOC_EXPORT takes a struct gpunvme_export; `e` is one.
        unsafe {
            self.ctrl.ioctl(
                "GPUNVME_IOC_EXPORT",
                sys::GPUNVME_IOC_EXPORT,
                &mut e as *mut _ as *mut _,
            )?
        };
        // SAFETY: on success the module installed a new descriptor that
        // nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(e.fd) })
    }

    /// Where this pair's memory is mapped in this process, for code that
    /// drives the ring itself (a GPU kernel after importing the exports, or
    /// a GPU runtime registering these mappings). Valid while `self` lives.
    pub fn memory(&self) -> QueueMemory {
        let sq = self.sq.as_ref().expect("live queue");
        QueueMemory {
            sq: sq.ptr(),
            sq_len: sq.len(),
            cq: self.cq.as_ref().map_or(ptr::null_mut(), |c| c.ptr()),
            cq_len: self.cq.as_ref().map_or(0, |c| c.len()),
            doorbell_page: self.db.as_ref().expect("live queue").ptr(),
            sq_db_offset: self.sq_db_offset,
            cq_db_offset: self.cq_db_offset,
            prp_pool: self.pool.as_ref().map_or(ptr::null_mut(), |p| p.as_ptr()),
            prp_pool_len: self.pool.as_ref().map_or(0, |p| p.len()),
            prp_dma: self.pool.as_ref().map_or(0, |p| p.dma_base()),
        }
    }

    /// The PRP pool of a shared pair (`None` for a raw pair), where its
    /// commands' PRP lists must be built.
    pub fn prp_pool(&self) -> Option<&PrpPool> {
        self.pool.as_ref()
    }

    /// [`prp_pool`](Self::prp_pool), writable: to build lists in it.
    pub fn prp_pool_mut(&mut self) -> Option<&mut PrpPool> {
        self.pool.as_mut()
    }

    /// Queue ID.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Shared or raw.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Entries per queue.
    pub fn depth(&self) -> u32 {
        self.ring.depth
    }

    /// Most commands outstanding at once: depth - 1.
    pub fn capacity(&self) -> usize {
        self.ring.depth as usize - 1
    }

    /// Commands submitted and not yet taken back (completed or not).
    pub fn outstanding(&self) -> usize {
        self.ring.outstanding
    }

    /// Deadline of each wait.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets the deadline of each wait.
    pub fn set_timeout(&mut self, t: Duration) {
        self.timeout = t;
    }

    /// Writes `sqe` (with a fresh CID) at the SQ tail without ringing the
    /// doorbell; [`QueuePair::ring`] makes it visible. Returns the CID.
    /// Fails with [`Error::Poisoned`] once a wait has timed out.
    ///
    /// # Safety
    ///
    /// The controller will read and write whatever the entry's addresses
    /// name (PRP1, PRP2, every PRP-list entry, the list itself, MPTR). The
    /// caller guarantees that, from this call until the command's
    /// completion has been taken from this pair (a `wait*`/`try_take`
    /// returned it) or, failing that, until the pair is destroyed (dropped;
    /// keep the memory with [`keep_until_destroyed`](Self::keep_until_destroyed)
    /// if it is a [`DmaBuffer`]):
    ///
    /// - every address names memory mapped for this controller's DMA
    ///   ([`DmaBuffer`], [`crate::DmabufMapping`], the pair's
    ///   [`PrpPool`]) that stays mapped that long;
    /// - no Rust reference reads or writes memory the command writes (data
    ///   of a Read), nor writes memory it reads (data of a Write, the PRP
    ///   list), that long.
    ///
    /// On a shared pair the module rejects addresses outside this file's
    /// mappings, but that does not keep the controller out of Rust's
    /// memory inside them.
    pub unsafe fn push(&mut self, sqe: Sqe) -> Result<u16> {
        // The SQ is not mapped in a forked child.
        self.ctrl.check_unforked()?;
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned {
                qid: self.qid,
                why: why.clone(),
            });
        }
        let (cid, slot, sqe) = self.ring.push(sqe).ok_or(Error::QueueFull {
            qid: self.qid,
            outstanding: self.ring.outstanding,
        })?;
        let base = self.sq.as_ref().expect("live queue").ptr();
        // SAFETY: slot < depth and the SQ mapping holds depth entries of
        // 64 bytes (checked at create); 64-byte entries keep dwords aligned.
        unsafe {
            let e = base.add(slot as usize * SQE_SIZE).cast::<u32>();
            for (i, w) in sqe.dw.iter().enumerate() {
                ptr::write_volatile(e.add(i), w.to_le());
            }
        }
        self.unrung = true;
        Ok(cid)
    }

    /// Rings the SQ tail doorbell if anything was pushed since the last ring.
    /// Does nothing in a forked child (the doorbell page is not mapped
    /// there; [`push`](Self::push) and [`reap`](Self::reap) fail with
    /// [`Error::Forked`]).
    pub fn ring(&mut self) {
        if !self.unrung || !self.ctrl.is_usable_here_fast() {
            return;
        }
        doorbell_barrier();
        // SAFETY: sq_db points at a dword of the live doorbell mapping.
        unsafe { ptr::write_volatile(self.sq_db, self.ring.sq_tail) };
        self.unrung = false;
    }

    /// [`push`](Self::push) then [`ring`](Self::ring).
    ///
    /// # Safety
    ///
    /// As for [`push`](Self::push).
    pub unsafe fn submit(&mut self, sqe: Sqe) -> Result<u16> {
        // SAFETY: the caller keeps push's contract.
        let cid = unsafe { self.push(sqe)? };
        self.ring();
        Ok(cid)
    }

    /// [`push`](Self::push) for a command that moves no data: Flush or
    /// Write Zeroes with PRP1, PRP2 and MPTR zero (anything else is
    /// refused with [`Error::Invalid`]).
    pub fn push_no_data(&mut self, sqe: Sqe) -> Result<u16> {
        if !sqe.moves_no_data() {
            return Err(Error::Invalid(format!(
                "qid {}: {} names memory; only a data-free Flush or Write Zeroes is safe here \
                 (use Io, or the unsafe push)",
                self.qid,
                sqe.describe()
            )));
        }
        // SAFETY: the command names no memory (checked above).
        unsafe { self.push(sqe) }
    }

    /// [`push_no_data`](Self::push_no_data) then [`ring`](Self::ring).
    pub fn submit_no_data(&mut self, sqe: Sqe) -> Result<u16> {
        let cid = self.push_no_data(sqe)?;
        self.ring();
        Ok(cid)
    }

    /// [`submit_no_data`](Self::submit_no_data), then waits for it.
    pub fn execute_no_data(&mut self, sqe: Sqe) -> Result<Completion> {
        let cid = self.submit_no_data(sqe)?;
        self.wait(cid)
    }

    /// Consumes every completion the controller has posted, then writes
    /// the CQ head doorbell once. Returns how many were consumed.
    pub fn reap(&mut self) -> Result<usize> {
        // The CQ and doorbells are not mapped in a forked child.
        self.ctrl.check_unforked()?;
        // A passthrough back end whose relay is run by its waiters: this
        // is one of them (what was rung is relayed, what came back mirrored).
        if let Some(pt) = self.ctrl.passthrough() {
            pt.drive();
        }
        let Some(cq) = self.cq.as_ref() else {
            return Err(Error::Invalid(format!(
                "qid {}: its CQ is in a dma-buf ({}), not mapped here; the GPU that polls it reaps it",
                self.qid,
                self.cq_in.as_ref().map_or(0, |m| m.handle())
            )));
        };
        let base = cq.ptr();
        let mut n = 0;
        let mut bad = None;
        loop {
            // SAFETY: cq_head < depth, the CQ mapping holds depth 16-byte
            // entries; volatile because the controller writes them.
            let cqe = unsafe {
                let e = base
                    .add(self.ring.cq_head as usize * CQE_SIZE)
                    .cast::<u32>();
                let dw3 = u32::from_le(ptr::read_volatile(e.add(3)));
                if (dw3 & (1 << 16) != 0) != self.ring.phase {
                    break;
                }
                fence(Ordering::Acquire);
                Cqe::from_dwords([
                    u32::from_le(ptr::read_volatile(e)),
                    u32::from_le(ptr::read_volatile(e.add(1))),
                    u32::from_le(ptr::read_volatile(e.add(2))),
                    dw3,
                ])
            };
            if let Err(m) = self.ring.complete(cqe) {
                bad.get_or_insert(m);
            }
            n += 1;
        }
        if n > 0 {
            // The entries were read (above) before the slots are handed back.
            doorbell_barrier();
            // SAFETY: cq_db points at a dword of the live doorbell mapping.
            unsafe { ptr::write_volatile(self.cq_db, self.ring.cq_head) };
        }
        match bad {
            Some(m) => {
                let m = format!("qid {}: {m}", self.qid);
                self.poison(m.clone());
                Err(Error::Invalid(m))
            }
            None => Ok(n),
        }
    }

    /// Takes a completion of `cid` if it has arrived (raw status).
    pub fn try_take(&mut self, cid: u16) -> Result<Option<Completion>> {
        self.reap()?;
        Ok(self.ring.take(cid))
    }

    fn timeout_err(&self, cid: Option<u16>, waited: Duration) -> Error {
        let command = match cid {
            Some(c) => self
                .ring
                .in_flight(c)
                .map(|s| s.describe())
                .unwrap_or_default(),
            None => format!("{} command(s) outstanding", self.ring.outstanding),
        };
        Error::Timeout {
            qid: self.qid,
            cid,
            waited,
            command,
        }
    }

    /// Waits for `cid` and returns its completion whatever its status.
    /// On timeout the command stays outstanding and the pair is poisoned.
    pub fn wait_raw(&mut self, cid: u16) -> Result<Completion> {
        self.ring();
        if self.ring.in_flight(cid).is_none()
            && !matches!(self.ring.slots.get(cid as usize), Some(Slot::Done(_)))
        {
            return Err(Error::Invalid(format!(
                "qid {}: cid {cid} is not outstanding",
                self.qid
            )));
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            self.reap()?;
            if let Some(c) = self.ring.take(cid) {
                return Ok(c);
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                let e = self.timeout_err(Some(cid), waited);
                self.poison(e.to_string());
                return Err(e);
            }
            backoff(&mut spins);
        }
    }

    /// Waits for `cid`; an error status becomes [`Error::Nvme`].
    pub fn wait(&mut self, cid: u16) -> Result<Completion> {
        let qid = self.qid;
        self.wait_raw(cid)?.ok(qid)
    }

    /// Waits for any outstanding command, oldest completion first, and
    /// returns it whatever its status. On timeout the pair is poisoned.
    pub fn wait_any_raw(&mut self) -> Result<Completion> {
        self.ring();
        if self.ring.outstanding == 0 {
            return Err(Error::Invalid(format!(
                "qid {}: nothing outstanding to wait for",
                self.qid
            )));
        }
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.ring.take_any() {
                return Ok(c);
            }
            self.reap()?;
            if let Some(c) = self.ring.take_any() {
                return Ok(c);
            }
            let waited = start.elapsed();
            if waited >= self.timeout {
                let e = self.timeout_err(None, waited);
                self.poison(e.to_string());
                return Err(e);
            }
            backoff(&mut spins);
        }
    }

    /// Waits for any outstanding command; an error status becomes
    /// [`Error::Nvme`] (carrying the CID).
    pub fn wait_any(&mut self) -> Result<Completion> {
        let qid = self.qid;
        self.wait_any_raw()?.ok(qid)
    }

    /// Waits for every outstanding command; returns the completions, or
    /// the first error once everything has completed (or timed out).
    pub fn drain(&mut self) -> Result<Vec<Completion>> {
        let mut out = Vec::with_capacity(self.ring.outstanding);
        let mut first = None;
        while self.ring.outstanding > 0 {
            match self.wait_any() {
                Ok(c) => out.push(c),
                Err(e @ Error::Nvme { .. }) => {
                    first.get_or_insert(e);
                }
                Err(e) => return Err(first.unwrap_or(e)),
            }
        }
        match first {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Submits one command and waits for it.
    ///
    /// # Safety
    ///
    /// As for [`push`](Self::push): on a timeout the command is still in
    /// flight, and the pair (poisoned) must outlive the memory's use.
    pub unsafe fn execute(&mut self, sqe: Sqe) -> Result<Completion> {
        // SAFETY: the caller keeps push's contract.
        let cid = unsafe { self.submit(sqe)? };
        self.wait(cid)
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if !self.ctrl.is_usable_here() {
            // A forked child: DESTROY_QPAIR would destroy the parent's
            // pair, and the queue mappings are not in this process (their
            // addresses may hold the child's own mappings by now). Leak
            // all of it; what it kept is the parent's business too.
            std::mem::forget(self.sq.take());
            std::mem::forget(self.cq.take());
            std::mem::forget(self.db.take());
            std::mem::forget(self.pool.take());
            for b in std::mem::take(&mut self.held) {
                std::mem::forget(b);
            }
            std::mem::forget(std::mem::take(&mut self.held_other));
            std::mem::forget(self.cq_in.take());
            return;
        }
        let mut st = self.ctrl.lifecycle();
        let mut d = sys::gpunvme_qpair_destroy {
            size: std::mem::size_of::<sys::gpunvme_qpair_destroy>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            qid: self.qid,
            ..Default::default()
        };
        // SAFETY: GPUNVME_IOC_DESTROY_QPAIR takes a struct
        // gpunvme_qpair_destroy; `d` is one.
        let r = unsafe {
            self.ctrl.ioctl(
                "GPUNVME_IOC_DESTROY_QPAIR",
                sys::GPUNVME_IOC_DESTROY_QPAIR,
                &mut d as *mut _ as *mut _,
            )
        };
        st.live_qpairs = st.live_qpairs.saturating_sub(1);
        // ENOENT: the module has no such pair (an unbind destroyed it).
        let destroyed = match &r {
            Ok(_) => true,
            Err(e) => e.errno() == Some(libc::ENOENT),
        };
        // No user access to the queues from here on.
        self.sq_db = ptr::null_mut();
        self.cq_db = ptr::null_mut();
        let maps = [self.sq.take(), self.cq.take(), self.db.take()];
        let pool = self.pool.take().map(|p| p.map);
        let held = std::mem::take(&mut self.held);
        let held_other = std::mem::take(&mut self.held_other);
        let cq_in = self.cq_in.take();
        if !destroyed {
            // The controller may still run this pair's commands (EIO,
            // ETIMEDOUT, ENODEV): nothing they can reach is unmapped or
            // UNMAPped while the file is open.
            st.until_close
                .extend(maps.into_iter().flatten().chain(pool));
            drop(st);
            for b in held {
                b.keep_until_close();
            }
            // No UNMAP, no free: what they own stays as it is for good.
            std::mem::forget(held_other);
            if let Some(m) = cq_in {
                m.keep_until_close();
            }
            return;
        }
        let retry = if st.live_qpairs == 0 {
            std::mem::take(&mut st.deferred)
        } else {
            Vec::new()
        };
        drop(st);
        drop((maps, pool));
        // Each UNMAPs now (or parks on EBUSY while other pairs live).
        drop(held);
        drop(held_other);
        drop(cq_in);
        for (handle, map) in retry {
            let mut st = self.ctrl.lifecycle();
            match unmap_outcome(unmap_handle(&self.ctrl, handle)) {
                Unmapped::Gone => drop(map),
                // A pair was created meanwhile: park again.
                Unmapped::Busy => st.deferred.push((handle, map)),
                Unmapped::Unknown => st.until_close.extend(map),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cqe(cid: u16, phase: bool, sc: u8) -> Cqe {
        Cqe::from_dwords([
            0,
            0,
            0,
            (cid as u32) | ((phase as u32) << 16) | ((sc as u32) << 17),
        ])
    }

    #[test]
    fn mode_flags_match_the_uapi() {
        assert_eq!(Mode::default(), Mode::Shared);
        assert_eq!(Mode::Shared.flags(), 0);
        assert_eq!(Mode::Raw.flags(), sys::GPUNVME_QPAIR_RAW);
        assert_eq!(
            sys::GPUNVME_QPAIR_RAW,
            1 << 1,
            "bit 0 (v1's bridged) is gone"
        );
        assert_eq!(Mode::Raw.to_string(), "raw");
        assert_eq!(Mode::Shared.to_string(), "shared");
        assert_eq!(ExportKind::PrpPool as u16, 4);
    }

    #[test]
    fn prp_pool_slots_never_cross_a_page() {
        assert_eq!(PrpPool::slot_bytes(0), 8);
        assert_eq!(PrpPool::slot_bytes(128), 1024);
        assert_eq!(PrpPool::slot_bytes(129), 2048);
        assert_eq!(PrpPool::slot_bytes(4000), 4096);

        // As the module sizes it: depth 32, 128 entries each: 8 pages.
        let mut p = PrpPool::new(Mapping::anonymous(8 * 4096).unwrap(), 0x8000_0000).unwrap();
        assert_eq!((p.len(), p.dma_base()), (8 * 4096, 0x8000_0000));
        assert_eq!(p.slots(128), 32);
        assert_eq!(p.slots(512), 8);
        assert_eq!(p.slots(100), 32, "rounded up to 128");
        let l = p.list_slot(3, 128).unwrap();
        assert_eq!(l.dma_addrs(), &[0x8000_0c00]);
        assert_eq!(l.entries(), 128);
        assert!(p
            .list_slot(32, 128)
            .unwrap_err()
            .to_string()
            .contains("holds 32"));
        // A 3-page transfer: a list of 2 entries, written in slot 3.
        let mut l = p.list_slot(3, 128).unwrap();
        let plan = crate::command::prp_plan(
            &[0x10_0000, 0x20_0000, 0x30_0000],
            0,
            3 * 4096,
            l.dma_addrs(),
        )
        .unwrap();
        assert_eq!(plan.prp.prp2, 0x8000_0c00);
        l.write(&plan).unwrap();
        // SAFETY: the mapping is live and 8 pages long.
        let mem = unsafe { std::slice::from_raw_parts(p.as_ptr(), p.len()) };
        let at = |o: usize| u64::from_le_bytes(mem[o..o + 8].try_into().unwrap());
        assert_eq!((at(0xc00), at(0xc08), at(0xc10)), (0x20_0000, 0x30_0000, 0));
        assert!(mem[..0xc00].iter().all(|&b| b == 0));

        // A list longer than its slot is refused, not truncated.
        let pages: Vec<u64> = (0..6).map(|i| 0x10_0000 + i * 4096).collect();
        let mut l = p.list_slot(0, 4).unwrap();
        let plan = crate::command::prp_plan(&pages, 0, 6 * 4096, l.dma_addrs()).unwrap();
        assert!(l.write(&plan).unwrap_err().contains("5 entries"));

        // An address 8-byte but not slot aligned: slots start at the first
        // slot boundary of the pool's address space; the tail is unused.
        let mut p = PrpPool::new(Mapping::anonymous(2 * 4096).unwrap(), 0x8000_0200).unwrap();
        assert_eq!(p.slots(512), 1);
        assert_eq!(p.slots(64), 16);
        assert_eq!(p.list_slot(0, 512).unwrap().dma_addrs(), &[0x8000_1000]);
        assert_eq!(p.list_slot(0, 64).unwrap().dma_addrs(), &[0x8000_0200]);

        assert!(PrpPool::new(Mapping::anonymous(4096).unwrap(), 0x1004).is_err());
    }

    #[test]
    fn ring_wraps_flips_phase_and_recycles_cids() {
        let mut r = Ring::new(4);
        assert_eq!(r.free.len(), 3, "depth - 1 in flight");
        let mut seen_slots = vec![];
        for lap in 0..5 {
            let mut cids = vec![];
            for _ in 0..3 {
                let (cid, slot, s) = r.push(Sqe::read(1, lap, 1, Default::default())).unwrap();
                assert_eq!(s.cid(), cid);
                seen_slots.push(slot);
                cids.push(cid);
            }
            assert!(r.push(Sqe::flush(1)).is_none(), "full at depth - 1");
            for &cid in cids.iter().rev() {
                let phase = r.phase;
                r.complete(cqe(cid, phase, 0)).unwrap();
            }
            // Out-of-order completions come back in arrival order.
            let c = r.take_any().unwrap();
            assert_eq!(c.cid, cids[2]);
            assert_eq!(c.sqe.slba(), lap);
            assert_eq!(r.take(cids[0]).unwrap().cid, cids[0]);
            assert!(r.take(cids[0]).is_none());
            assert!(r.take_any().is_some());
            assert_eq!(r.outstanding, 0);
        }
        // 15 entries through a 4-deep ring: tail went round 3 times.
        assert_eq!(&seen_slots[..8], &[0, 1, 2, 3, 0, 1, 2, 3]);
        assert_eq!(r.sq_tail, 15 % 4);
        assert_eq!(r.cq_head, 15 % 4);
        // Phase flipped on each of the 3 wraps: starts at 1, now 0.
        assert!(!r.phase);
    }

    #[test]
    fn unknown_cid_is_reported() {
        let mut r = Ring::new(2);
        assert!(r.complete(cqe(0, true, 0)).unwrap_err().contains("cid 0"));
        let mut r = Ring::new(2);
        let (cid, ..) = r.push(Sqe::flush(1)).unwrap();
        r.complete(cqe(cid, true, 0x80)).unwrap();
        let c = r.take(cid).unwrap();
        let e = c.ok(3).unwrap_err().to_string();
        assert!(e.contains("LBA Out of Range"), "{e}");
        assert!(e.contains("qid 3 cid 0"), "{e}");
    }
}
