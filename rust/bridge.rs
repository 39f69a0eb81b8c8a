// SPDX-License-Identifier: GPL-2.0-only

//! Shared mode's relay: between a file (and its GPU) and the controller, a
//! kernel thread takes each SQE from the pair's shadow SQ, has it checked
//! (`bridge/validate.rs`), copies what passes into the real SQ under a command ID
//! it picks, and mirrors each completion back into the shadow CQ under the
//! file's own command ID. The real SQ, CQ and doorbells never leave the
//! kernel; a rejected SQE completes in the shadow CQ with an error status.
//!
//! Designed against the field report's traps:
//! - a real doorbell is written only when there is something new (no MMIO
//!   flood starving the controller's completion DMA);
//! - one relay lives as long as the queue pair, so its state is never
//!   reset and a stale tail is never re-rung;
//! - CQEs are written whole, the phase-tag dword last, so a reader that
//!   sees the new phase sees the whole entry;
//! - the thread backs off to 1 ms sleeps when idle (bounded CPU), and its
//!   counters are in debugfs.
//!
//! Flow control: at most depth - 1 commands are in flight on the real
//! queues, and a command is taken from the shadow SQ only when the shadow
//! CQ has room for its completion and for those of every command already
//! in flight, so neither CQ can overflow whatever the file does.
//!
//! `Relay` is the algorithm, pure and KUnit-tested; `rust/bridge/bridge_thread.c`
//! runs it on a small pool of threads shared by all pairs.

pub(crate) mod validate;

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::{
    device::Device,
    dma::{Coherent, CoherentView},
    io::{io_project, io_read, io_write, Io},
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        barrier::{dma_mb, Read, Write},
        Arc,
    },
};

use crate::controller::regs::Cap;
use crate::dma::buffers::{shard_of, Buffers, Epoch, Owned, View};
use crate::queues::command::{Cqe, Sqe};
use crate::queues::qpair::Shadow;
use validate::{Limits, Reject};

/// Offsets of the two shadow cells in the shadow page (own cache lines).
pub(crate) const SHADOW_SQ_TAIL: u32 = 0;
pub(crate) const SHADOW_CQ_HEAD: u32 = 64;

/// Counters shown in debugfs (`rust/bridge/bridge_thread.c` reads them as u64s,
/// in this order, under the names it lists).
#[repr(C)]
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) polls: u64,
    pub(crate) sq_doorbell_writes: u64,
    pub(crate) cq_doorbell_writes: u64,
    pub(crate) cqes_mirrored: u64,
    pub(crate) max_sq_tail: u64,
    pub(crate) bad_doorbell_values: u64,
    pub(crate) sqes_accepted: u64,
    pub(crate) sqes_rejected: u64,
    /// Nanoseconds the pool spent in this pair's passes (written by the C side).
    pub(crate) relay_ns: u64,
    /// The most page checks this pair's file was given in one pass of its
    /// relay thread while the thread served another file too (written by
    /// the C side): at most `BUDGET` plus one command's cost.
    pub(crate) file_pass_checks_max: u64,
}

/// What the relay pool spent on one file's shared pairs (debugfs
/// `gpunvme-<bdf>/relay_cpu_per_file`): a live pair's counters, or the sum
/// over the pairs already taken off the pool ([`RelayTotals`]).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub(crate) struct RelayCost {
    pub(crate) relay_ns: u64,
    pub(crate) accepted: u64,
    pub(crate) rejected: u64,
}

impl RelayCost {
    pub(crate) fn add(&mut self, o: RelayCost) {
        self.relay_ns = self.relay_ns.saturating_add(o.relay_ns);
        self.accepted = self.accepted.saturating_add(o.accepted);
        self.rejected = self.rejected.saturating_add(o.rejected);
    }

    /// Relay nanoseconds per command (accepted or rejected); 0 for none.
    pub(crate) fn ns_per_command(&self) -> u64 {
        match self.accepted.saturating_add(self.rejected) {
            0 => 0,
            n => self.relay_ns / n,
        }
    }
}

/// One file's running total of the pairs taken off the relay pool: each
/// [`Bridge`] of the file adds its final counters here when it stops, so
/// destroying a pair (and creating another) never makes its cost vanish
/// while the file is open. Shared by the file's bridges and its record in
/// the DMA registry (`dma::registry::FileRelay`).
pub(crate) struct RelayTotals {
    pairs: Atomic<u64>,
    relay_ns: Atomic<u64>,
    accepted: Atomic<u64>,
    rejected: Atomic<u64>,
}

impl RelayTotals {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Ok(Arc::new(
            Self {
                pairs: Atomic::new(0),
                relay_ns: Atomic::new(0),
                accepted: Atomic::new(0),
                rejected: Atomic::new(0),
            },
            GFP_KERNEL,
        )?)
    }

    fn add(&self, c: &Counters) {
        self.relay_ns.fetch_add(c.relay_ns, Relaxed);
        self.accepted.fetch_add(c.sqes_accepted, Relaxed);
        self.rejected.fetch_add(c.sqes_rejected, Relaxed);
        self.pairs.fetch_add(1, Relaxed);
    }

    /// How many pairs were taken off the pool, and what they cost.
    pub(crate) fn get(&self) -> (u64, RelayCost) {
        (
            self.pairs.load(Relaxed),
            RelayCost {
                relay_ns: self.relay_ns.load(Relaxed),
                accepted: self.accepted.load(Relaxed),
                rejected: self.rejected.load(Relaxed),
            },
        )
    }
}

/// What the relay reads and writes; the kernel thread's is real memory
/// and MMIO, the KUnit tests' a model.
pub(crate) trait Port {
    fn shadow_sq_tail(&self) -> u32;
    fn shadow_cq_head(&self) -> u32;
    /// A copy of shadow SQ slot `slot`: read once, then only the copy is used.
    fn shadow_sqe(&self, slot: u32) -> Sqe;
    /// Check `sqe`; the PRP list, if any, goes to command `cid`'s kernel
    /// list. What passes is counted in flight in the returned epoch.
    fn validate(&self, sqe: &Sqe, cid: u16) -> Result<(Sqe, Epoch), Reject>;
    /// What checking `sqe` costs at most, in page checks (`BUDGET`).
    fn cost(&self, _sqe: &Sqe) -> u32 {
        1
    }
    /// A command counted in epoch `e` completed.
    fn completed(&self, e: Epoch);
    /// Kernel command `cid` is no longer in flight: its PRP list slot goes
    /// back to zero, so a controller that computes a longer transfer than
    /// was checked (a namespace reformatted under the relay) finds zero
    /// entries past a command's list, never another command's stale ones.
    fn retire(&self, _cid: u16) {}
    /// Test knob: leave the real CQ alone (completions stay unseen).
    fn hold_completions(&self) -> bool;
    fn write_real_sqe(&self, slot: u32, sqe: &Sqe);
    fn ring_sq(&self, tail: u32);
    fn ring_cq(&self, head: u32);
    fn real_cqe(&self, slot: u32) -> Cqe;
    fn mirror_cqe(&self, slot: u32, cqe: &Cqe);
}

/// Page checks one pass spends on a file's commands at most (each SQE costs
/// one plus the PRP entries it may name, `validate::check_cost`; a step
/// given any budget takes its first SQE): a relay thread serves all its
/// pairs in turn, so one file's full queues of long PRP lists cannot hold
/// another file's commands back for a whole queue's worth of checking. The
/// pool thread shares it among the file's pairs when the thread serves
/// other files too (bridge_thread.c), and gives each pair its own when it
/// serves one file only (nobody to be fair to).
pub(crate) const BUDGET: u32 = 256;

/// `BUDGET`, for the pool thread.
#[no_mangle]
static gpunvme_bridge_budget: u32 = BUDGET;

/// What one `step` did: whether anything moved, and the page checks it
/// spent on new commands. `repr(C)`: the pool thread gets it as the return
/// value of `gpunvme_bridge_step`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) spent: u32,
    pub(crate) progress: bool,
}

/// Relay state for one queue pair, for its whole lifetime.
pub(crate) struct Relay {
    qid: u16,
    depth: u32,
    /// Next shadow SQ slot to take.
    sq_head: u32,
    /// Last in-range shadow tail the file wrote.
    tail: u32,
    real_tail: u32,
    real_head: u32,
    real_phase: bool,
    /// Next shadow CQ slot and its phase; the file's last in-range head.
    cq_tail: u32,
    cq_phase: bool,
    user_head: u32,
    /// The file's command ID (and admission epoch) of each kernel command
    /// ID in flight.
    inflight: KVec<Option<(u16, Epoch)>>,
    in_flight: u32,
    next_cid: u32,
    last_bad_tail: u32,
    last_bad_head: u32,
}

impl Relay {
    pub(crate) fn new(qid: u16, depth: u32) -> Result<Self> {
        let mut inflight = KVec::with_capacity(depth as usize, GFP_KERNEL)?;
        for _ in 0..depth {
            inflight.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            qid,
            depth,
            sq_head: 0,
            tail: 0,
            real_tail: 0,
            real_head: 0,
            real_phase: true,
            cq_tail: 0,
            cq_phase: true,
            user_head: 0,
            inflight,
            in_flight: 0,
            next_cid: 0,
            last_bad_tail: u32::MAX,
            last_bad_head: u32::MAX,
        })
    }

    /// Commands started on the controller and not yet completed.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The commands in flight, per admission epoch.
    pub(crate) fn outstanding(&self) -> [u32; 2] {
        let mut n = [0u32; 2];
        for (_, e) in self.inflight.iter().flatten() {
            n[usize::from(*e & 1)] += 1;
        }
        n
    }

    fn next(&self, i: u32) -> u32 {
        if i + 1 == self.depth {
            0
        } else {
            i + 1
        }
    }

    /// Free entries of the shadow CQ, as the file's head says.
    fn cq_room(&self) -> u32 {
        let used = (self.cq_tail + self.depth - self.user_head) % self.depth;
        self.depth - 1 - used
    }

    fn post(&mut self, port: &impl Port, cid: u16, result: u32, status: u16) {
        let cqe = Cqe {
            result,
            rsvd: 0,
            sq_head: self.sq_head as u16,
            sq_id: self.qid,
            cid,
            status: (status & !1) | u16::from(self.cq_phase),
        };
        port.mirror_cqe(self.cq_tail, &cqe);
        self.cq_tail = self.next(self.cq_tail);
        if self.cq_tail == 0 {
            self.cq_phase = !self.cq_phase;
        }
    }

    fn alloc_cid(&mut self) -> Option<u16> {
        for _ in 0..self.depth {
            let cid = self.next_cid;
            self.next_cid = self.next(cid);
            if self.inflight[cid as usize].is_none() {
                return Some(cid as u16);
            }
        }
        None
    }

    /// One pass with a whole `BUDGET`; true when anything moved.
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn step(&mut self, port: &impl Port, c: &mut Counters) -> bool {
        self.step_within(port, c, BUDGET).progress
    }

    /// One pass: completions are all mirrored (they only free room); new
    /// commands are taken while fewer than `budget` page checks were spent
    /// (none with a budget of 0).
    pub(crate) fn step_within(&mut self, port: &impl Port, c: &mut Counters, budget: u32) -> Step {
        let mut progress = false;
        c.polls += 1;

        let head = port.shadow_cq_head();
        if head < self.depth {
            self.user_head = head;
        } else if head != self.last_bad_head {
            c.bad_doorbell_values += 1;
            self.last_bad_head = head;
        }

        // Completions first: they make room for new commands.
        let mut reaped = false;
        while self.cq_room() > 0 && !port.hold_completions() {
            let cqe = port.real_cqe(self.real_head);
            if cqe.phase() != self.real_phase {
                break;
            }
            self.real_head = self.next(self.real_head);
            if self.real_head == 0 {
                self.real_phase = !self.real_phase;
            }
            reaped = true;
            // Only the relay submits on this queue, so every command ID is
            // one it gave out; anything else is dropped, not mirrored.
            let Some((user_cid, epoch)) = self
                .inflight
                .get_mut(cqe.cid as usize)
                .and_then(Option::take)
            else {
                continue;
            };
            self.in_flight -= 1;
            self.post(port, user_cid, cqe.result, cqe.status);
            port.retire(cqe.cid);
            port.completed(epoch);
            c.cqes_mirrored += 1;
        }
        if reaped {
            port.ring_cq(self.real_head);
            c.cq_doorbell_writes += 1;
            progress = true;
        }

        let tail = port.shadow_sq_tail();
        if tail < self.depth {
            self.tail = tail;
        } else if tail != self.last_bad_tail {
            // Out of range: never acted on; counted once per distinct value.
            c.bad_doorbell_values += 1;
            self.last_bad_tail = tail;
        }
        if self.tail != self.sq_head {
            // The shadow SQEs up to the tail were written before it.
            dma_mb(Read);
        }
        let mut submitted = false;
        let mut spent = 0u32;
        // The mirror must hold a completion for this command and for every
        // one in flight; as it holds at most depth - 1, so many are in
        // flight at most, and a free command ID always exists.
        while self.tail != self.sq_head && self.in_flight < self.cq_room() && spent < budget {
            let Some(cid) = self.alloc_cid() else { break };
            let sqe = port.shadow_sqe(self.sq_head);
            spent = spent.saturating_add(port.cost(&sqe));
            self.sq_head = self.next(self.sq_head);
            progress = true;
            match port.validate(&sqe, cid) {
                Ok((mut real, epoch)) => {
                    real.cid = cid;
                    port.write_real_sqe(self.real_tail, &real);
                    self.real_tail = self.next(self.real_tail);
                    self.inflight[cid as usize] = Some((sqe.cid, epoch));
                    self.in_flight += 1;
                    c.sqes_accepted += 1;
                    submitted = true;
                }
                Err(why) => {
                    // A list refused halfway was partly copied.
                    port.retire(cid);
                    self.post(port, sqe.cid, 0, why.status());
                    c.sqes_rejected += 1;
                }
            }
        }
        if submitted {
            port.ring_sq(self.real_tail);
            c.sq_doorbell_writes += 1;
            c.max_sq_tail = c.max_sq_tail.max(self.real_tail.into());
        }
        Step { spent, progress }
    }
}

/// What the kernel thread works on: the relay's state and counters, and
/// the pair's memory through [`PairMemory`]'s own clones of its `Arc`s.
/// Owned by the `Bridge` (boxed, handed to the C pool as a pointer) from
/// `Bridge::start` to its stop.
pub(crate) struct Ctx {
    relay: Relay,
    pub(crate) counters: Counters,
    port: KernelPort,
}

/// One shared pair's memory, for its relay: clones of the `Arc`s of the
/// pair's `QPair` (the real queues and `qpair::Shadow`), reached only
/// through the kernel crate's typed views of them (`io_project!`, bounds
/// checked, volatile), as the admin queue reaches its own. The clones make
/// that safe Rust whatever happens to the pair's registry entry (its `KVec`
/// moves as it grows); they do not extend the pair's life in practice: the
/// `Bridge` is always stopped before its pair is dropped, quarantined or
/// lent (`dma::registry::QueueEntry::let_go`), so the relay never drives a
/// pair that the controller may still be finishing or an importer holds.
/// `Bridge::start` checks the sizes against the depth.
pub(crate) struct PairMemory {
    pub(crate) real_sq: Arc<Coherent<[Sqe]>>,
    pub(crate) real_cq: Arc<Coherent<[Cqe]>>,
    pub(crate) shadow: Arc<Shadow>,
}

impl PairMemory {
    /// Whether every ring holds `depth` entries and the kernel's PRP list
    /// area `list_entries` per command ID of `depth`; the relay's views
    /// then never fall past an end (it passes slots and command IDs below
    /// `depth`). The PRP pool may be any size: each entry the file names in
    /// it is bounds-checked.
    fn fits(&self, depth: u32) -> bool {
        let d = depth as usize;
        let s = &*self.shadow;
        let lists = d.checked_mul(s.list_entries);
        d >= 2
            && self.real_sq.len() >= d
            && self.real_cq.len() >= d
            && s.sq.len() >= d
            && s.cq.len() >= d
            && s.list_entries > 0
            && lists.is_some_and(|n| n <= s.lists.len())
    }
}

/// What a relay needs of the controller it serves: the device (for the
/// pool's threads), its capabilities, a doorbell write and the test knob
/// that holds a pair's completions. The controller's shared state provides
/// it (`controller/shared.rs`). The relay does not name that state, so the
/// imports run one way: the controller's state uses the DMA registry, which
/// holds the relays.
pub(crate) trait RelayHost {
    fn dev(&self) -> &Device;
    fn cap(&self) -> Cap;
    /// Write `value` to the BAR0 register at `offset` (a doorbell), unless
    /// BAR0 is gone (unbound).
    fn ring(&self, offset: usize, value: u32);
    /// Test knob (debugfs `relay_hold_qid`): the relay of pair `qid` leaves
    /// its real CQ alone.
    fn holds_completions(&self, qid: u16) -> bool;
}

/// The real memory and doorbells of one shared queue pair.
struct KernelPort {
    shared: *const dyn RelayHost,
    cap: Cap,
    qid: u16,
    mem: PairMemory,
    buffers: Arc<Buffers>,
    /// This relay's copy of the file's pages (only its thread uses it).
    view: core::cell::RefCell<View>,
    limits: Limits,
}

/// Slot `i` of ring `ring`: a typed view, bounds-checked (ERANGE past the
/// end, which cannot happen: `Bridge::start` checked that every ring holds
/// `depth` entries, and `Relay` passes slots below `depth`; were it to, a
/// read would see a zero entry and a write would be dropped).
fn nth<T>(ring: &Coherent<[T]>, i: u32) -> Result<CoherentView<'_, T>> {
    Ok(io_project!(ring, [try: i as usize]))
}

/// Command `cid`'s slot of the kernel's PRP lists, `n` entries long
/// (bounds-checked as [`nth`]: `cid < depth`, and `Bridge::start` checked
/// the area holds `n` entries per command ID of `depth`).
fn list_slot(lists: &Coherent<[u64]>, cid: u16, n: usize) -> Result<CoherentView<'_, [u64]>> {
    let at = usize::from(cid) * n;
    Ok(io_project!(lists, [try: at..at + n]))
}

/// Entry `i` of `slot` (bounds-checked).
fn entry(slot: CoherentView<'_, [u64]>, i: usize) -> Result<CoherentView<'_, u64>> {
    Ok(io_project!(slot, [try: i]))
}

/// A CQE as the four dwords the phase ordering is written in.
fn dwords(cqe: CoherentView<'_, Cqe>) -> Result<CoherentView<'_, [u32; 4]>> {
    cqe.try_cast()
}

/// What a validation may read: the file's pages (as of the command's
/// check) and the pair's PRP pool.
struct Reach<'a>(&'a KernelPort, Owned<'a>);

impl validate::Memory for Reach<'_> {
    fn owns_page(&self, page: u64) -> bool {
        self.1.owns_page(page)
    }
    fn pool_entry(&self, addr: u64) -> Option<u64> {
        let pool = &self.0.mem.shadow.pool;
        let off = addr.checked_sub(pool.dma_address())?;
        if off % 8 != 0 {
            return None;
        }
        let i = u32::try_from(off / 8).ok()?;
        // Bounds-checked (past the pool: None). The file may write the
        // entry concurrently, so it is read once, volatile, and only that
        // copy is used.
        nth(pool, i).ok().map(|e| e.read_val())
    }
}

impl Port for KernelPort {
    fn shadow_sq_tail(&self) -> u32 {
        io_read!(
            &self.mem.shadow.cells,
            [build: SHADOW_SQ_TAIL as usize / 4]
        )
    }
    fn shadow_cq_head(&self) -> u32 {
        io_read!(
            &self.mem.shadow.cells,
            [build: SHADOW_CQ_HEAD as usize / 4]
        )
    }
    fn shadow_sqe(&self, slot: u32) -> Sqe {
        // One volatile copy of the whole entry; `Sqe` is plain integers, so
        // whatever the file wrote is a valid value, and this copy is all
        // that is used afterwards.
        nth(&self.mem.shadow.sq, slot).map_or_else(|_| Sqe::default(), |v| v.copy_read())
    }
    fn validate(&self, sqe: &Sqe, cid: u16) -> Result<(Sqe, Epoch), Reject> {
        let s = &*self.mem.shadow;
        let Ok(slot) = list_slot(&s.lists, cid, s.list_entries) else {
            return Err(Reject::Field);
        };
        let list_dma = slot.dma_address();
        // SAFETY: the slot belongs to command `cid`, which is not in flight
        // (the relay only hands out free IDs, and validates only under
        // those): neither the controller nor the file reads or writes it
        // now (it is never mapped or exported), and only this relay's
        // thread, which holds the one reference to its `Ctx`, makes views
        // of it; this reference ends with the call.
        let list = unsafe { slot.as_mut() };
        let mut view = self.view.borrow_mut();
        self.buffers
            .admit_checked(&mut view, shard_of(self.qid), |owned| {
                validate::check(sqe, &self.limits, &Reach(self, owned), list, list_dma)
            })
    }
    fn cost(&self, sqe: &Sqe) -> u32 {
        validate::check_cost(sqe, &self.limits)
    }
    fn retire(&self, cid: u16) {
        let s = &*self.mem.shadow;
        // As in `validate`: `cid` is not in flight (its completion was
        // taken, or it was refused), so the controller does not read its
        // slot now.
        let Ok(list) = list_slot(&s.lists, cid, s.list_entries) else {
            return;
        };
        // Slots not in flight are all zero, and a command writes its
        // entries from the start: the first zero ends what it wrote (the
        // validator never passes a zero entry).
        for i in 0..s.list_entries {
            let Ok(e) = entry(list, i) else { break };
            if e.read_val() == 0 {
                break;
            }
            e.write_val(0);
        }
    }
    fn completed(&self, e: Epoch) {
        self.buffers.complete(e, 1, shard_of(self.qid));
    }
    fn hold_completions(&self) -> bool {
        // SAFETY: `shared` outlives every bridge (type invariant).
        let shared = unsafe { &*self.shared };
        shared.holds_completions(self.qid)
    }
    fn write_real_sqe(&self, slot: u32, sqe: &Sqe) {
        // The controller reads only slots published by the doorbell, and
        // this one is not (at most depth - 1 commands are in flight).
        if let Ok(v) = nth(&self.mem.real_sq, slot) {
            v.copy_write(*sqe);
        }
    }
    fn ring_sq(&self, tail: u32) {
        self.ring(self.cap.sq_doorbell(self.qid), tail);
    }
    fn ring_cq(&self, head: u32) {
        self.ring(self.cap.cq_doorbell(self.qid), head);
    }
    fn real_cqe(&self, slot: u32) -> Cqe {
        let Ok(w) = nth(&self.mem.real_cq, slot).and_then(dwords) else {
            return Cqe::default();
        };
        // The dword with the phase tag first, then (after a read barrier)
        // the rest: whatever the phase says, the rest is at least as new.
        let dw3 = io_read!(w, [build: 3]);
        dma_mb(Read);
        let words = [
            io_read!(w, [build: 0]),
            io_read!(w, [build: 1]),
            io_read!(w, [build: 2]),
            dw3,
        ];
        zerocopy::transmute!(words)
    }
    fn mirror_cqe(&self, slot: u32, cqe: &Cqe) {
        let Ok(w) = nth(&self.mem.shadow.cq, slot).and_then(dwords) else {
            return;
        };
        // The first 12 bytes go first; the dword with the phase tag after a
        // write barrier, so a reader that sees the phase sees the entry.
        let words: [u32; 4] = zerocopy::transmute!(*cqe);
        io_write!(w, [build: 0], words[0]);
        io_write!(w, [build: 1], words[1]);
        io_write!(w, [build: 2], words[2]);
        dma_mb(Write);
        io_write!(w, [build: 3], words[3]);
    }
}

impl KernelPort {
    fn ring(&self, offset: usize, value: u32) {
        // SAFETY: `shared` outlives every bridge (type invariant).
        let shared = unsafe { &*self.shared };
        shared.ring(offset, value);
    }
}

/// Called by the pool thread serving the pair, in a loop, with what is left
/// of its file's budget for this pass (bridge_thread.c).
#[no_mangle]
extern "C" fn gpunvme_bridge_step(ctx: *mut c_void, budget: u32) -> Step {
    // SAFETY: `ctx` is the `Ctx` given to gpunvme_shim_bridge_start, alive
    // until gpunvme_shim_bridge_stop has returned; only the one thread
    // serving the pair calls this, under that thread's lock, which stop
    // also takes, so no two references to it exist at once.
    let ctx = unsafe { &mut *ctx.cast::<Ctx>() };
    ctx.relay.step_within(&ctx.port, &mut ctx.counters, budget)
}

/// Whether the pair has commands on the controller: its thread then keeps
/// polling for their completions instead of sleeping.
#[no_mangle]
extern "C" fn gpunvme_bridge_busy(ctx: *mut c_void) -> bool {
    // SAFETY: as in gpunvme_bridge_step: the live `Ctx`, used only by the
    // thread serving the pair, under its lock; only read here.
    let ctx = unsafe { &*ctx.cast::<Ctx>() };
    ctx.relay.in_flight() != 0
}

extern "C" {
    fn gpunvme_shim_bridge_start(
        ctx: *mut c_void,
        counters: *mut u64,
        dev: *mut c_void,
        qid: u16,
        threads: u32,
        file: *const c_void,
        err: *mut i32,
    ) -> *mut c_void;
    fn gpunvme_shim_bridge_stop(bridge: *mut c_void);
}

/// A pair served by the relay pool; taken off it (and its context freed)
/// on drop or `stop`, after which no thread touches the pair's memory.
/// `ctx` is non-null until then (type invariant).
pub(crate) struct Bridge {
    thread: NonNull<c_void>,
    ctx: *mut Ctx,
    /// Its file's running total, which it adds into when it stops.
    totals: Arc<RelayTotals>,
}

// SAFETY: the thread handle and context are owned; stopping may happen on
// any thread.
unsafe impl Send for Bridge {}
// SAFETY: no `&self` method touches them.
unsafe impl Sync for Bridge {}

impl Bridge {
    /// Start relaying for shared queue `qid` of `depth` entries, over the
    /// pair memory `mem` (EINVAL unless its sizes fit `depth`, see
    /// [`PairMemory`]). Stop it before the pair is dropped, quarantined or
    /// lent (dropping the `Bridge` stops it).
    ///
    /// # Safety
    ///
    /// `shared` must outlive the returned `Bridge` (it is dropped before
    /// the controller's shared state).
    pub(crate) unsafe fn start(
        shared: &(dyn RelayHost + 'static),
        qid: u16,
        depth: u32,
        mem: PairMemory,
        buffers: Arc<Buffers>,
        limits: Limits,
        totals: Arc<RelayTotals>,
    ) -> Result<Self> {
        if !mem.fits(depth) {
            dev_warn!(
                shared.dev(),
                "relay: the memory of qid {} does not fit depth {}\n",
                qid,
                depth
            );
            return Err(EINVAL);
        }
        let ctx = KBox::new(
            Ctx {
                relay: Relay::new(qid, depth)?,
                counters: Counters::default(),
                port: KernelPort {
                    shared: core::ptr::from_ref(shared),
                    cap: shared.cap(),
                    qid,
                    mem,
                    buffers,
                    view: core::cell::RefCell::new(View::new()),
                    limits,
                },
            },
            GFP_KERNEL,
        )?;
        let ctx = KBox::into_raw(ctx);
        let mut err = 0i32;
        // SAFETY: `ctx` is a valid, exclusively owned `Ctx` until stop; the
        // counters are its `repr(C)` run of u64s.
        let t = unsafe {
            gpunvme_shim_bridge_start(
                ctx.cast(),
                core::ptr::addr_of_mut!((*ctx).counters).cast(),
                crate::shim::raw(shared.dev()),
                qid,
                crate::relay_threads(),
                // The file's key for its share of each pass: pairs of one
                // file have one running total (a `RelayTotals` per file).
                Arc::as_ptr(&totals).cast(),
                &mut err,
            )
        };
        match NonNull::new(t) {
            Some(thread) => Ok(Self {
                thread,
                ctx,
                totals,
            }),
            None => {
                // SAFETY: the thread never started; `ctx` is still ours.
                drop(unsafe { KBox::from_raw(ctx) });
                Err(Error::from_errno(err))
            }
        }
    }
}

/// Commands a stopped relay had in flight: still counted against its
/// file's buffers (so revokes keep waiting for them) until `release` says
/// the controller will never run them (their queue's deletion confirmed).
/// Dropped unreleased, they stay counted: what is unknown is kept.
pub(crate) struct Outstanding {
    buffers: Arc<Buffers>,
    n: [u32; 2],
    shard: usize,
}

impl Outstanding {
    pub(crate) fn release(self) {
        for (e, n) in self.n.iter().enumerate() {
            self.buffers.complete(e as Epoch, *n, self.shard);
        }
    }
}

impl Bridge {
    /// What the relay pool has spent on this pair so far.
    pub(crate) fn cost(&self) -> RelayCost {
        let c = self.ctx.cast_const();
        // SAFETY: `ctx` is live while the `Bridge` is (type invariant); the
        // pool thread updates the counters meanwhile, so each is read once,
        // volatile, as the debugfs counters are (aligned u64s: no torn
        // value on the 64-bit machines the module builds for).
        unsafe {
            RelayCost {
                relay_ns: core::ptr::read_volatile(core::ptr::addr_of!((*c).counters.relay_ns)),
                accepted: core::ptr::read_volatile(core::ptr::addr_of!(
                    (*c).counters.sqes_accepted
                )),
                rejected: core::ptr::read_volatile(core::ptr::addr_of!(
                    (*c).counters.sqes_rejected
                )),
            }
        }
    }

    /// Take the pair off the relay pool (once: `ctx` is null afterwards)
    /// and add its counters to its file's total; the context, ours again.
    fn finish(&mut self) -> Option<KBox<Ctx>> {
        if self.ctx.is_null() {
            return None;
        }
        // SAFETY: `thread` came from bridge_start and is stopped only here,
        // once (`ctx` is null afterwards); stop takes the pair off its
        // thread under the thread's lock, so once it returns no pass runs
        // or will run on `ctx`, which is ours again.
        let ctx = unsafe {
            gpunvme_shim_bridge_stop(self.thread.as_ptr());
            KBox::from_raw(self.ctx)
        };
        self.ctx = core::ptr::null_mut();
        self.totals.add(&ctx.counters);
        Some(ctx)
    }

    /// Take the pair off the relay pool; returns what it left in flight.
    pub(crate) fn stop(mut self) -> Option<Outstanding> {
        let ctx = self.finish()?;
        Some(Outstanding {
            buffers: ctx.port.buffers.clone(),
            n: ctx.relay.outstanding(),
            shard: shard_of(ctx.port.qid),
        })
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        drop(self.finish());
    }
}

#[kernel::prelude::kunit_tests(gpunvme_bridge)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};

    const D: usize = 4;

    /// A model of the memory the relay sees; opcode 0x7f is "invalid".
    struct Model {
        tail: Cell<u32>,
        head: Cell<u32>,
        shadow_sq: RefCell<[Sqe; D]>,
        real_sq: RefCell<[Sqe; D]>,
        sq_rings: RefCell<KVec<u32>>,
        cq_rings: RefCell<KVec<u32>>,
        real: RefCell<[Cqe; D]>,
        shadow: RefCell<[Cqe; D]>,
        epoch: Cell<Epoch>,
        admitted: Cell<u32>,
        done: [Cell<u32>; 2],
        hold: Cell<bool>,
        /// Kernel command IDs whose list slot was given back, in order.
        retired: RefCell<KVec<u16>>,
    }

    impl Port for Model {
        fn shadow_sq_tail(&self) -> u32 {
            self.tail.get()
        }
        fn shadow_cq_head(&self) -> u32 {
            self.head.get()
        }
        fn shadow_sqe(&self, s: u32) -> Sqe {
            self.shadow_sq.borrow()[s as usize]
        }
        fn validate(&self, sqe: &Sqe, _cid: u16) -> Result<(Sqe, Epoch), Reject> {
            if sqe.opcode == 0x7f {
                return Err(Reject::Opcode);
            }
            self.admitted.set(self.admitted.get() + 1);
            Ok((
                Sqe {
                    opcode: sqe.opcode,
                    ..Default::default()
                },
                self.epoch.get(),
            ))
        }
        fn completed(&self, e: Epoch) {
            self.done[usize::from(e)].set(self.done[usize::from(e)].get() + 1);
        }
        fn retire(&self, cid: u16) {
            let _ = self.retired.borrow_mut().push(cid, GFP_KERNEL);
        }
        fn hold_completions(&self) -> bool {
            self.hold.get()
        }
        fn write_real_sqe(&self, s: u32, sqe: &Sqe) {
            self.real_sq.borrow_mut()[s as usize] = *sqe;
        }
        fn ring_sq(&self, t: u32) {
            let _ = self.sq_rings.borrow_mut().push(t, GFP_KERNEL);
        }
        fn ring_cq(&self, h: u32) {
            let _ = self.cq_rings.borrow_mut().push(h, GFP_KERNEL);
        }
        fn real_cqe(&self, s: u32) -> Cqe {
            self.real.borrow()[s as usize]
        }
        fn mirror_cqe(&self, s: u32, c: &Cqe) {
            self.shadow.borrow_mut()[s as usize] = *c;
        }
    }

    fn model() -> Model {
        Model {
            tail: Cell::new(0),
            head: Cell::new(0),
            shadow_sq: RefCell::new([Sqe::default(); D]),
            real_sq: RefCell::new([Sqe::default(); D]),
            sq_rings: RefCell::new(KVec::new()),
            cq_rings: RefCell::new(KVec::new()),
            real: RefCell::new([Cqe::default(); D]),
            shadow: RefCell::new([Cqe::default(); D]),
            epoch: Cell::new(0),
            admitted: Cell::new(0),
            done: [Cell::new(0), Cell::new(0)],
            hold: Cell::new(false),
            retired: RefCell::new(KVec::new()),
        }
    }

    fn submit(m: &Model, slot: usize, opcode: u8, cid: u16) {
        m.shadow_sq.borrow_mut()[slot] = Sqe {
            opcode,
            cid,
            ..Default::default()
        };
    }

    /// The controller completes the command in real SQ slot `sq_slot` into real CQ slot `slot`.
    fn complete(m: &Model, slot: usize, sq_slot: usize, phase: bool) {
        let cid = m.real_sq.borrow()[sq_slot].cid;
        m.real.borrow_mut()[slot] = Cqe {
            cid,
            result: 0xabc,
            status: u16::from(phase),
            ..Default::default()
        };
    }

    #[test]
    fn accepted_commands_go_out_under_kernel_ids_and_come_back_under_the_files() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(7, D as u32).unwrap(),
            Counters::default(),
        );
        submit(&m, 0, 0x02, 0x1234);
        submit(&m, 1, 0x01, 0x5678);
        m.tail.set(2);
        r.step(&m, &mut c);
        assert_eq!(&m.sq_rings.borrow()[..], &[2]);
        assert_eq!((c.sqes_accepted, r.in_flight()), (2, 2));
        let (k0, k1) = (m.real_sq.borrow()[0].cid, m.real_sq.borrow()[1].cid);
        assert!(k0 != k1 && k0 != 0x1234);
        complete(&m, 0, 1, true);
        complete(&m, 1, 0, true);
        r.step(&m, &mut c);
        let sh = m.shadow.borrow();
        assert_eq!(
            (
                sh[0].cid,
                sh[0].sq_id,
                sh[0].sq_head,
                sh[0].result,
                sh[0].phase()
            ),
            (0x5678, 7, 2, 0xabc, true)
        );
        assert_eq!(sh[1].cid, 0x1234);
        assert_eq!(&m.cq_rings.borrow()[..], &[2]);
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn a_pass_spends_at_most_its_budget() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        for s in 0..3 {
            submit(&m, s, 0x02, s as u16);
        }
        m.tail.set(3);
        let done = r.step_within(&m, &mut c, 2);
        assert_eq!(
            done,
            Step {
                spent: 2,
                progress: true
            }
        );
        assert_eq!((c.sqes_accepted, &m.sq_rings.borrow()[..]), (2, &[2][..]));
        assert!(r.step(&m, &mut c));
        assert_eq!(
            (c.sqes_accepted, &m.sq_rings.borrow()[..]),
            (3, &[2, 3][..])
        );
    }

    /// A command's kernel list slot goes back (to zero, `KernelPort::retire`)
    /// when the command is refused, at once, and when its completion is
    /// taken, and never while it is in flight: a slot is never handed to
    /// a new command holding an older command's entries.
    #[test]
    fn list_slots_are_given_back_when_refused_or_completed_never_in_flight() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        submit(&m, 0, 0x02, 10);
        submit(&m, 1, 0x7f, 11);
        submit(&m, 2, 0x02, 12);
        m.tail.set(3);
        r.step(&m, &mut c);
        assert_eq!(c.sqes_rejected, 1);
        let (k0, k2) = (m.real_sq.borrow()[0].cid, m.real_sq.borrow()[1].cid);
        // Only the refused command's slot, at once: the two accepted are in flight.
        assert_eq!(m.retired.borrow().len(), 1);
        let refused = m.retired.borrow()[0];
        assert!(refused != k0 && refused != k2);
        complete(&m, 0, 1, true);
        r.step(&m, &mut c);
        assert_eq!(&m.retired.borrow()[..], &[refused, k2]);
        complete(&m, 1, 0, true);
        r.step(&m, &mut c);
        assert_eq!(&m.retired.borrow()[..], &[refused, k2, k0]);
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn a_step_without_budget_mirrors_completions_and_takes_no_command() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        submit(&m, 0, 0x02, 7);
        m.tail.set(1);
        assert!(r.step(&m, &mut c));
        submit(&m, 1, 0x02, 8);
        m.tail.set(2);
        complete(&m, 0, 0, true);
        let done = r.step_within(&m, &mut c, 0);
        assert_eq!(
            done,
            Step {
                spent: 0,
                progress: true
            }
        );
        assert_eq!((c.sqes_accepted, c.cqes_mirrored), (1, 1));
        assert_eq!(m.shadow.borrow()[0].cid, 7);
        // The command left waiting is taken by the next step with a budget.
        assert_eq!(
            r.step_within(&m, &mut c, 1),
            Step {
                spent: 1,
                progress: true
            }
        );
        assert_eq!(c.sqes_accepted, 2);
    }

    #[test]
    fn rejected_commands_never_reach_the_controller() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        submit(&m, 0, 0x7f, 42);
        m.tail.set(1);
        r.step(&m, &mut c);
        assert_eq!(m.sq_rings.borrow().len(), 0);
        assert_eq!((c.sqes_rejected, c.sqes_accepted), (1, 0));
        let cqe = m.shadow.borrow()[0];
        assert_eq!(
            (cqe.cid, cqe.phase(), cqe.status_code(), cqe.status >> 15),
            (42, true, (0, 0x01), 1)
        );
    }

    #[test]
    fn rings_only_on_change() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        for _ in 0..100 {
            r.step(&m, &mut c);
        }
        submit(&m, 0, 0x02, 1);
        m.tail.set(1);
        for _ in 0..100 {
            r.step(&m, &mut c);
        }
        assert_eq!(&m.sq_rings.borrow()[..], &[1]);
        assert_eq!(
            (c.polls, c.sq_doorbell_writes, c.cq_doorbell_writes),
            (200, 1, 0)
        );
    }

    #[test]
    fn a_full_shadow_cq_holds_back_new_commands() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        // Three rejected commands fill the shadow CQ (depth 4 holds 3).
        for s in 0..3 {
            submit(&m, s, 0x7f, s as u16);
        }
        m.tail.set(3);
        r.step(&m, &mut c);
        assert_eq!(c.sqes_rejected, 3);
        // The file has not consumed them: the next command waits.
        submit(&m, 3, 0x02, 9);
        m.tail.set(0);
        r.step(&m, &mut c);
        assert_eq!((c.sqes_accepted, m.sq_rings.borrow().len()), (0, 0));
        m.head.set(3);
        r.step(&m, &mut c);
        assert_eq!((c.sqes_accepted, r.in_flight()), (1, 1));
    }

    #[test]
    fn out_of_range_values_are_counted_not_used() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        m.tail.set(9);
        m.head.set(7);
        r.step(&m, &mut c);
        assert_eq!((m.sq_rings.borrow().len(), c.bad_doorbell_values), (0, 2));
        r.step(&m, &mut c);
        assert_eq!(c.bad_doorbell_values, 2);
        m.tail.set(0xffff_ffff);
        r.step(&m, &mut c);
        assert_eq!(c.bad_doorbell_values, 3);
        // A sane value afterwards works.
        submit(&m, 0, 0x02, 5);
        m.tail.set(1);
        r.step(&m, &mut c);
        assert_eq!(c.sqes_accepted, 1);
    }

    #[test]
    fn every_accepted_command_is_reported_complete_in_its_epoch() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        submit(&m, 0, 0x02, 10);
        m.tail.set(1);
        r.step(&m, &mut c);
        m.epoch.set(1);
        submit(&m, 1, 0x02, 11);
        submit(&m, 2, 0x7f, 12); // rejected: never counted
        m.tail.set(3);
        r.step(&m, &mut c);
        assert_eq!((m.admitted.get(), r.outstanding()), (2, [1, 1]));
        // Held completions are neither mirrored nor reported.
        complete(&m, 0, 0, true);
        complete(&m, 1, 1, true);
        m.hold.set(true);
        r.step(&m, &mut c);
        assert_eq!((c.cqes_mirrored, m.done[0].get() + m.done[1].get()), (0, 0));
        m.hold.set(false);
        r.step(&m, &mut c);
        assert_eq!(
            (c.cqes_mirrored, m.done[0].get(), m.done[1].get()),
            (2, 1, 1)
        );
        assert_eq!(r.outstanding(), [0, 0]);
    }

    #[test]
    fn completions_for_unknown_ids_are_dropped() {
        let (m, mut r, mut c) = (
            model(),
            Relay::new(1, D as u32).unwrap(),
            Counters::default(),
        );
        m.real.borrow_mut()[0] = Cqe {
            cid: 3,
            status: 1,
            ..Default::default()
        };
        r.step(&m, &mut c);
        assert_eq!(c.cqes_mirrored, 0);
        assert!(!m.shadow.borrow()[0].phase());
        // The real CQ slot was consumed and its head rung.
        assert_eq!(&m.cq_rings.borrow()[..], &[1]);
    }
}
