// SPDX-License-Identifier: GPL-2.0

//! The CPU bridge: for a GPU that cannot map the doorbell page or snoop the
//! controller's CQ writes, a kernel thread relays its shadow doorbells to
//! the real ones and mirrors the real CQ into a shadow CQ it can read.
//!
//! Designed against the field report's traps:
//! - a doorbell is written only when its shadow value changed (no MMIO
//!   flood starving the controller's completion DMA);
//! - one relay lives as long as the queue pair, so its "last written"
//!   state is never reset and a stale tail is never re-rung;
//! - CQEs are copied whole, the phase-tag dword last, so a reader that sees
//!   the new phase sees the whole entry;
//! - the thread backs off to 1 ms sleeps when idle (bounded CPU), and its
//!   counters are in debugfs.
//!
//! `Relay` is the algorithm, pure and KUnit-tested; `rust/bridge_thread.c`
//! runs it.

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::{
    io::Io,
    prelude::*,
    sync::barrier::{dma_mb, Read, Write},
};

use crate::command::Cqe;
use crate::regs::Cap;
use crate::shared::Shared;

/// Offsets of the two shadow cells in the shadow page (own cache lines).
pub(crate) const SHADOW_SQ_TAIL: u32 = 0;
pub(crate) const SHADOW_CQ_HEAD: u32 = 64;

/// Counters shown in debugfs (`rust/bridge_thread.c` reads them as u64s).
#[repr(C)]
#[derive(Default, Debug, PartialEq, Eq)]
pub(crate) struct Counters {
    pub(crate) polls: u64,
    pub(crate) sq_doorbell_writes: u64,
    pub(crate) cq_doorbell_writes: u64,
    pub(crate) cqes_mirrored: u64,
    pub(crate) max_sq_tail: u64,
    pub(crate) bad_doorbell_values: u64,
}

/// What the relay reads and writes; the kernel thread's is real memory
/// and MMIO, the KUnit tests' a model.
pub(crate) trait Port {
    fn shadow_sq_tail(&self) -> u32;
    fn shadow_cq_head(&self) -> u32;
    fn ring_sq(&self, tail: u32);
    fn ring_cq(&self, head: u32);
    fn real_cqe(&self, slot: u32) -> Cqe;
    fn mirror_cqe(&self, slot: u32, cqe: &Cqe);
}

/// Relay state for one queue pair, for its whole lifetime.
pub(crate) struct Relay {
    depth: u32,
    last_tail: u32,
    last_head: u32,
    cq_slot: u32,
    phase: bool,
    last_bad_tail: u32,
    last_bad_head: u32,
}

impl Relay {
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            depth,
            last_tail: 0,
            last_head: 0,
            cq_slot: 0,
            phase: true,
            last_bad_tail: u32::MAX,
            last_bad_head: u32::MAX,
        }
    }

    /// One pass; true when anything moved.
    pub(crate) fn step(&mut self, port: &impl Port, c: &mut Counters) -> bool {
        let mut progress = false;
        c.polls += 1;

        let tail = port.shadow_sq_tail();
        if tail != self.last_tail {
            if tail < self.depth {
                port.ring_sq(tail);
                self.last_tail = tail;
                c.sq_doorbell_writes += 1;
                c.max_sq_tail = c.max_sq_tail.max(tail.into());
                progress = true;
            } else if tail != self.last_bad_tail {
                // Out of range: never forwarded (the controller would flag
                // it); counted once per distinct value.
                c.bad_doorbell_values += 1;
                self.last_bad_tail = tail;
            }
        }

        // Mirror every new completion; the controller cannot reuse a slot
        // before the reader's head (forwarded below) has passed it.
        loop {
            let cqe = port.real_cqe(self.cq_slot);
            if cqe.phase() != self.phase {
                break;
            }
            port.mirror_cqe(self.cq_slot, &cqe);
            c.cqes_mirrored += 1;
            self.cq_slot += 1;
            if self.cq_slot == self.depth {
                self.cq_slot = 0;
                self.phase = !self.phase;
            }
            progress = true;
        }

        let head = port.shadow_cq_head();
        if head != self.last_head {
            if head < self.depth {
                port.ring_cq(head);
                self.last_head = head;
                c.cq_doorbell_writes += 1;
                progress = true;
            } else if head != self.last_bad_head {
                c.bad_doorbell_values += 1;
                self.last_bad_head = head;
            }
        }
        progress
    }
}

/// What the kernel thread works on: raw pointers into one queue pair's
/// memory, valid while the `Bridge` that owns this lives (it is stopped
/// before that memory is freed; see `dma_registry::QueueEntry`).
pub(crate) struct Ctx {
    relay: Relay,
    pub(crate) counters: Counters,
    port: KernelPort,
}

/// The real memory and doorbells of one bridged queue pair.
struct KernelPort {
    shared: *const Shared,
    cap: Cap,
    qid: u16,
    real_cq: *const Cqe,
    shadow: *mut u8,
    shadow_cq: *mut Cqe,
}

impl Port for KernelPort {
    fn shadow_sq_tail(&self) -> u32 {
        // SAFETY: `shadow` points at the live 4 KiB shadow page (type invariant).
        unsafe { core::ptr::read_volatile(self.shadow.add(SHADOW_SQ_TAIL as usize).cast::<u32>()) }
    }
    fn shadow_cq_head(&self) -> u32 {
        // SAFETY: as above.
        unsafe { core::ptr::read_volatile(self.shadow.add(SHADOW_CQ_HEAD as usize).cast::<u32>()) }
    }
    fn ring_sq(&self, tail: u32) {
        self.ring(self.cap.sq_doorbell(self.qid), tail);
    }
    fn ring_cq(&self, head: u32) {
        self.ring(self.cap.cq_doorbell(self.qid), head);
    }
    fn real_cqe(&self, slot: u32) -> Cqe {
        // The dword with the phase tag first, then (after a read barrier)
        // the rest: whatever the phase says, the rest is at least as new.
        // SAFETY: `slot < depth` (Relay) and `real_cq` has `depth` entries;
        // `Cqe` is 16 bytes of plain integers (FromBytes), so any [u32; 4]
        // is a valid one.
        unsafe {
            let src = self.real_cq.add(slot as usize).cast::<u32>();
            let dw3 = core::ptr::read_volatile(src.add(3));
            dma_mb(Read);
            let mut words = [0u32; 4];
            for (i, w) in words.iter_mut().enumerate().take(3) {
                *w = core::ptr::read_volatile(src.add(i));
            }
            words[3] = dw3;
            core::mem::transmute::<[u32; 4], Cqe>(words)
        }
    }
    fn mirror_cqe(&self, slot: u32, cqe: &Cqe) {
        // SAFETY: `slot < depth` and `shadow_cq` has `depth` entries. The
        // first 12 bytes go first; the dword with the phase tag after a
        // write barrier, so a reader that sees the phase sees the entry.
        unsafe {
            let dst = self.shadow_cq.add(slot as usize).cast::<u32>();
            let src = core::ptr::from_ref(cqe).cast::<u32>();
            for i in 0..3 {
                core::ptr::write_volatile(dst.add(i), *src.add(i));
            }
            dma_mb(Write);
            core::ptr::write_volatile(dst.add(3), *src.add(3));
        }
    }
}

impl KernelPort {
    fn ring(&self, offset: usize, value: u32) {
        // SAFETY: `shared` outlives every bridge (type invariant).
        let shared = unsafe { &*self.shared };
        if let Some(bar) = shared.bar.try_access() {
            let _ = bar.try_write32(value, offset);
        }
    }
}

/// Called by the bridge thread in a loop.
#[no_mangle]
extern "C" fn gpunvme_bridge_step(ctx: *mut c_void) -> bool {
    // SAFETY: `ctx` is the `Ctx` given to gpunvme_shim_bridge_start, alive
    // until gpunvme_shim_bridge_stop has returned, and used by this thread only.
    let ctx = unsafe { &mut *ctx.cast::<Ctx>() };
    ctx.relay.step(&ctx.port, &mut ctx.counters)
}

extern "C" {
    fn gpunvme_shim_bridge_start(ctx: *mut c_void, counters: *mut u64, dev: *mut c_void, qid: u16, err: *mut i32) -> *mut c_void;
    fn gpunvme_shim_bridge_stop(bridge: *mut c_void);
}

/// A running bridge thread; stopped (and its context freed) on drop.
pub(crate) struct Bridge {
    thread: NonNull<c_void>,
    ctx: *mut Ctx,
}

// SAFETY: the thread handle and context are owned; stopping may happen on
// any thread.
unsafe impl Send for Bridge {}
// SAFETY: no `&self` method touches them.
unsafe impl Sync for Bridge {}

impl Bridge {
    /// Start relaying for queue `qid` of `depth` entries.
    ///
    /// # Safety
    ///
    /// `real_cq` and `shadow_cq` must have `depth` entries, `shadow` must be
    /// a 4 KiB page, and all three, and `shared`, must outlive the returned
    /// `Bridge` (it is dropped before them).
    pub(crate) unsafe fn start(
        shared: &Shared,
        qid: u16,
        depth: u32,
        real_cq: *const Cqe,
        shadow: *mut u8,
        shadow_cq: *mut Cqe,
    ) -> Result<Self> {
        let ctx = KBox::new(
            Ctx {
                relay: Relay::new(depth),
                counters: Counters::default(),
                port: KernelPort { shared: core::ptr::from_ref(shared), cap: shared.cap, qid, real_cq, shadow, shadow_cq },
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
                crate::shim::raw(&*shared.dev),
                qid,
                &mut err,
            )
        };
        match NonNull::new(t) {
            Some(thread) => Ok(Self { thread, ctx }),
            None => {
                // SAFETY: the thread never started; `ctx` is still ours.
                drop(unsafe { KBox::from_raw(ctx) });
                Err(Error::from_errno(err))
            }
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        // SAFETY: `thread` came from bridge_start; stop waits for the thread
        // to exit, after which `ctx` is ours again.
        unsafe {
            gpunvme_shim_bridge_stop(self.thread.as_ptr());
            drop(KBox::from_raw(self.ctx));
        }
    }
}

#[kernel::prelude::kunit_tests(gpunvme_bridge)]
mod tests {
    use super::*;
    use core::cell::{Cell, RefCell};

    /// A model of the memory the relay sees.
    struct Model {
        tail: Cell<u32>,
        head: Cell<u32>,
        sq_rings: RefCell<KVec<u32>>,
        cq_rings: RefCell<KVec<u32>>,
        real: RefCell<[Cqe; 4]>,
        shadow: RefCell<[Cqe; 4]>,
    }

    impl Port for Model {
        fn shadow_sq_tail(&self) -> u32 { self.tail.get() }
        fn shadow_cq_head(&self) -> u32 { self.head.get() }
        fn ring_sq(&self, t: u32) { let _ = self.sq_rings.borrow_mut().push(t, GFP_KERNEL); }
        fn ring_cq(&self, h: u32) { let _ = self.cq_rings.borrow_mut().push(h, GFP_KERNEL); }
        fn real_cqe(&self, s: u32) -> Cqe { self.real.borrow()[s as usize] }
        fn mirror_cqe(&self, s: u32, c: &Cqe) { self.shadow.borrow_mut()[s as usize] = *c; }
    }

    fn model() -> Model {
        Model {
            tail: Cell::new(0),
            head: Cell::new(0),
            sq_rings: RefCell::new(KVec::new()),
            cq_rings: RefCell::new(KVec::new()),
            real: RefCell::new([Cqe::default(); 4]),
            shadow: RefCell::new([Cqe::default(); 4]),
        }
    }

    fn post(m: &Model, slot: usize, cid: u16, phase: bool) {
        m.real.borrow_mut()[slot] = Cqe { cid, status: phase as u16, ..Default::default() };
    }

    #[test]
    fn rings_only_on_change() {
        let (m, mut r, mut c) = (model(), Relay::new(4), Counters::default());
        for _ in 0..100 {
            r.step(&m, &mut c);
        }
        assert_eq!(c.sq_doorbell_writes, 0);
        m.tail.set(3);
        for _ in 0..100 {
            r.step(&m, &mut c);
        }
        assert_eq!(&m.sq_rings.borrow()[..], &[3]);
        assert_eq!((c.polls, c.sq_doorbell_writes, c.max_sq_tail), (200, 1, 3));
    }

    #[test]
    fn mirrors_across_wrap_and_forwards_head() {
        let (m, mut r, mut c) = (model(), Relay::new(4), Counters::default());
        for (slot, cid) in [(0, 10), (1, 11), (2, 12)] {
            post(&m, slot, cid, true);
        }
        r.step(&m, &mut c);
        assert_eq!(c.cqes_mirrored, 3);
        assert_eq!(m.shadow.borrow()[2].cid, 12);
        m.head.set(3);
        r.step(&m, &mut c);
        // Next lap: slot 3 with phase 1, then slots 0, 1 with phase 0.
        post(&m, 3, 13, true);
        post(&m, 0, 14, false);
        post(&m, 1, 15, false);
        r.step(&m, &mut c);
        assert_eq!(c.cqes_mirrored, 6);
        assert_eq!((m.shadow.borrow()[0].cid, m.shadow.borrow()[0].phase()), (14, false));
        m.head.set(2);
        r.step(&m, &mut c);
        assert_eq!(&m.cq_rings.borrow()[..], &[3, 2]);
        // A stale entry (old phase) is not mirrored again.
        r.step(&m, &mut c);
        assert_eq!(c.cqes_mirrored, 6);
    }

    #[test]
    fn a_paused_submitter_never_causes_a_stale_ring() {
        let (m, mut r, mut c) = (model(), Relay::new(4), Counters::default());
        m.tail.set(3);
        r.step(&m, &mut c);
        // The submitter pauses (a kernel launch ends): the relay keeps its
        // state, so nothing is re-rung while idle...
        for _ in 0..1000 {
            r.step(&m, &mut c);
        }
        // ...and the wrapped tail of the next batch is rung exactly once.
        m.tail.set(2);
        r.step(&m, &mut c);
        r.step(&m, &mut c);
        assert_eq!(&m.sq_rings.borrow()[..], &[3, 2]);
    }

    #[test]
    fn out_of_range_values_are_not_forwarded() {
        let (m, mut r, mut c) = (model(), Relay::new(4), Counters::default());
        m.tail.set(9);
        m.head.set(7);
        r.step(&m, &mut c);
        assert_eq!(m.sq_rings.borrow().len(), 0);
        assert_eq!(m.cq_rings.borrow().len(), 0);
        // One bad tail and one bad head, each counted once while it stays.
        assert_eq!(c.bad_doorbell_values, 2);
        r.step(&m, &mut c);
        assert_eq!(c.bad_doorbell_values, 2);
        m.head.set(8);
        r.step(&m, &mut c);
        assert_eq!(c.bad_doorbell_values, 3);
        assert_eq!(m.cq_rings.borrow().len(), 0);
    }
}
