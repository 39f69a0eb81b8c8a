// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Lanes: the queue pairs of a namespace and what each transfer needs.
//!
//! A [`Lane`] is one [`Io`] (a queue pair of its own), its bounce buffer
//! for host memory, and, made on first use, a second pair for dma-buf
//! transfers. [`Lanes`] hands a free lane to each transfer (several run at
//! once from several threads, or from the async workers and waiters) and replaces a
//! lane whose pair a timeout poisoned: the next transfer gets a fresh one.
//!
//! Host memory of Python objects is never a DMA target: a read lands in
//! the bounce buffer and is copied out, a write is copied in first. So a
//! timed-out command can only ever write the bounce buffer, which the
//! poisoned pair keeps until it is destroyed.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gpunvme::{Controller, DmaBuffer, Info, Io, Mode, Namespace};

use crate::dmabuf_io::{DmabufIo, DmabufTransfers};
use crate::errors::{fail, FResult, Fail, Kind};
use crate::plan::{Dir, Plan};
use crate::target::Target;

/// How long a transfer waits for a free lane before giving up. Each lane
/// in use finishes or times out (every wait on the device has a deadline),
/// so this is only reached when many threads share few lanes.
const LANE_WAIT: Duration = Duration::from_secs(120);

/// What every lane of a namespace is made with.
#[derive(Debug, Clone)]
pub(crate) struct LaneConfig {
    pub(crate) ctrl: Arc<Controller>,
    pub(crate) info: Info,
    pub(crate) ns: Namespace,
    pub(crate) depth: u32,
    pub(crate) mode: Mode,
    pub(crate) timeout: Duration,
    pub(crate) bounce_bytes: usize,
    pub(crate) lanes: usize,
}

fn range_check(plan: &Plan) -> gpunvme::RangeCheck {
    if plan.unchecked {
        gpunvme::RangeCheck::Unchecked
    } else {
        gpunvme::RangeCheck::Checked
    }
}

/// One queue pair of a namespace, with its buffers.
pub(crate) struct Lane {
    // Drop order: the pairs go before the bounce buffer (whose UNMAP the
    // module refuses while pairs of the file live: it is then parked).
    io: Io,
    dma: Option<DmabufIo>,
    /// `None` after a timeout: the poisoned pair keeps it.
    bounce: Option<DmaBuffer>,
}

impl Lane {
    fn new(cfg: &LaneConfig) -> FResult<Self> {
        let mut io = Io::new_with(&cfg.ctrl, &cfg.info, cfg.ns.nsid, cfg.depth, cfg.mode)?;
        io.set_timeout(cfg.timeout);
        // Whole blocks, at least one.
        let bs = cfg.ns.lba_size as usize;
        let bytes = (cfg.bounce_bytes / bs).max(1) * bs;
        let bounce = DmaBuffer::with_len(&cfg.ctrl, bytes)?;
        Ok(Lane {
            io,
            dma: None,
            bounce: Some(bounce),
        })
    }

    /// Whether it can take more transfers.
    fn healthy(&self) -> bool {
        !self.io.qpair().is_poisoned()
            && self.bounce.is_some()
            && !self.dma.as_ref().is_some_and(|d| d.is_poisoned())
    }

    /// The bounce buffer's size in whole blocks.
    fn bounce_blocks(&self, bs: usize) -> u64 {
        self.bounce.as_ref().map_or(0, |b| (b.len() / bs) as u64)
    }

    /// Runs `plan` against `target`.
    pub(crate) fn run(
        &mut self,
        cfg: &LaneConfig,
        plan: &Plan,
        target: &mut Target,
    ) -> FResult<()> {
        let op = plan.dir.opcode();
        match target {
            Target::Host(mem) => {
                let bs = cfg.ns.lba_size as usize;
                let chunk = self.bounce_blocks(bs).max(1);
                let mut done = 0u64;
                while done < plan.count {
                    let n = (plan.count - done).min(chunk);
                    let bytes = n as usize * bs;
                    let at = plan.buf_offset + done as usize * bs;
                    let mut bounce = self
                        .bounce
                        .take()
                        .ok_or_else(|| fail(Kind::Invalid, "the lane lost its bounce buffer"))?;
                    if plan.dir == Dir::Write {
                        mem.copy_out(at, &mut bounce.as_mut_slice()[..bytes]);
                    }
                    match self
                        .io
                        .transfer(op, plan.lba + done, n, bounce, 0, range_check(plan))
                    {
                        Ok(b) => {
                            if plan.dir == Dir::Read {
                                mem.copy_in(at, &b.as_slice()[..bytes]);
                            }
                            self.bounce = Some(b);
                        }
                        Err(e) => {
                            // Back when every command completed; kept by the
                            // poisoned pair after a timeout.
                            self.bounce = e.buffer;
                            return Err(Fail::Lib(e.error));
                        }
                    }
                    done += n;
                }
                Ok(())
            }
            Target::Pinned(loan) => {
                let buf = loan.take();
                match self.io.transfer(
                    op,
                    plan.lba,
                    plan.count,
                    buf,
                    plan.buf_offset,
                    range_check(plan),
                ) {
                    Ok(b) => {
                        loan.back(Some(b));
                        Ok(())
                    }
                    Err(e) => {
                        loan.back(e.buffer);
                        Err(Fail::Lib(e.error))
                    }
                }
            }
            Target::Dmabuf(map, base) => {
                if self.dma.is_none() {
                    self.dma = Some(DmabufIo::new(
                        &cfg.ctrl,
                        &cfg.info,
                        cfg.ns,
                        cfg.depth,
                        cfg.mode,
                        cfg.timeout,
                    )?);
                }
                let dma = self.dma.as_mut().expect("made above");
                let offset = usize::try_from(*base + plan.buf_offset as u64).map_err(|_| {
                    fail(
                        Kind::OutOfRange,
                        "a dma-buf offset beyond the address space",
                    )
                })?;
                dma.transfer_gpu(op, plan.lba, plan.count, map, offset)?;
                Ok(())
            }
        }
    }

    /// A 4 KiB-class read loop in Rust alone, for the overhead bench: the
    /// library's own latency through this lane's pair and bounce buffer.
    /// `copy`: each read is then copied into a `Vec` (the copy a read
    /// into host memory makes), inside its timing.
    pub(crate) fn rust_read_loop(
        &mut self,
        cfg: &LaneConfig,
        lba: u64,
        count: u64,
        iters: usize,
        copy: bool,
    ) -> FResult<Vec<u64>> {
        let mut lat = Vec::with_capacity(iters);
        let bs = cfg.ns.lba_size as usize;
        if count > self.bounce_blocks(bs) {
            return Err(fail(
                Kind::OutOfRange,
                "more blocks than the bounce buffer holds",
            ));
        }
        let bytes = count as usize * bs;
        let mut out = vec![0u8; if copy { bytes } else { 0 }];
        let mut buf = self
            .bounce
            .take()
            .ok_or_else(|| fail(Kind::Invalid, "the lane lost its bounce buffer"))?;
        for _ in 0..iters {
            let t = Instant::now();
            match self.io.read(lba, count, buf, 0) {
                Ok(b) => buf = b,
                Err(e) => {
                    self.bounce = e.buffer;
                    return Err(Fail::Lib(e.error));
                }
            }
            if copy {
                out.copy_from_slice(&buf.as_slice()[..bytes]);
            }
            lat.push(t.elapsed().as_nanos() as u64);
        }
        std::hint::black_box(&out);
        self.bounce = Some(buf);
        Ok(lat)
    }

    /// Flush, or Write Zeroes of `count` blocks at `lba`.
    pub(crate) fn io(&mut self) -> &mut Io {
        &mut self.io
    }
}

struct PoolState {
    /// Boxed: a lane is over a kilobyte, and it moves out of the pool and
    /// back on every transfer (under TCG a memcpy of that is microseconds).
    #[allow(clippy::vec_box)]
    idle: Vec<Box<Lane>>,
    /// Lanes in existence (idle and in use).
    live: usize,
    /// Threads in `with_lane` waiting for a lane: a lane given back
    /// notifies only when there are some (a notify is a system call).
    waiting: usize,
    closed: bool,
}

/// The lanes of a namespace.
pub(crate) struct Lanes {
    pub(crate) cfg: LaneConfig,
    state: Mutex<PoolState>,
    freed: Condvar,
}

impl Lanes {
    /// Makes every lane now, so that a device that cannot give as many
    /// queue pairs says so at once.
    pub(crate) fn new(cfg: LaneConfig) -> FResult<Self> {
        let mut idle = Vec::with_capacity(cfg.lanes);
        for _ in 0..cfg.lanes {
            idle.push(Box::new(Lane::new(&cfg)?));
        }
        Ok(Lanes {
            state: Mutex::new(PoolState {
                live: idle.len(),
                idle,
                waiting: 0,
                closed: false,
            }),
            freed: Condvar::new(),
            cfg,
        })
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`gpunvme::Error::Forked`] in a child of fork(): checked before any
    /// lock, which the parent may have held at the fork.
    pub(crate) fn check_process(&self) -> FResult<()> {
        Ok(self.cfg.ctrl.check_process()?)
    }

    /// Runs `f` on a free lane (waiting for one, making a replacement for
    /// a lane a timeout poisoned).
    ///
    /// Every caller made the full [`check_process`](Self::check_process)
    /// on entry (`Shared::check`), in this thread: the fork counter alone
    /// is checked again here (no system call).
    pub(crate) fn with_lane<R>(
        &self,
        f: impl FnOnce(&LaneConfig, &mut Lane) -> FResult<R>,
    ) -> FResult<R> {
        self.cfg.ctrl.check_unforked()?;
        // Read the clock only when a lane has to be waited for (under TCG
        // a clock read is microseconds).
        let mut deadline = None;
        // The pool's lock is held only while a lane is chosen (the block
        // drops it): not during the transfer, when other threads take other
        // lanes and Held's drop takes it again.
        let lane = {
            let mut st = self.lock();
            loop {
                if st.closed {
                    return Err(fail(Kind::Closed, "the namespace was closed"));
                }
                if let Some(l) = st.idle.pop() {
                    break l;
                }
                if st.live < self.cfg.lanes {
                    // A replacement: made without the lock held.
                    st.live += 1;
                    drop(st);
                    match Lane::new(&self.cfg) {
                        Ok(l) => break Box::new(l),
                        Err(e) => {
                            self.lock().live -= 1;
                            self.freed.notify_one();
                            return Err(e);
                        }
                    }
                }
                let now = Instant::now();
                let deadline = *deadline.get_or_insert(now + LANE_WAIT);
                if now >= deadline {
                    return Err(fail(
                        Kind::Timeout,
                        format!(
                            "all {} queue pair(s) of the namespace stayed busy for {} s",
                            self.cfg.lanes,
                            LANE_WAIT.as_secs()
                        ),
                    ));
                }
                st.waiting += 1;
                st = self
                    .freed
                    .wait_timeout(st, deadline - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                st.waiting -= 1;
            }
        };
        Held {
            lanes: self,
            lane: Some(lane),
        }
        .with(f)
    }

    /// An idle lane, without waiting: `None` when every lane is in use (or
    /// one is being replaced), the namespace is closed or this is a child
    /// of fork(). For a thread that would otherwise wait for a worker (an
    /// async transfer's waiter, which runs the job itself when it can).
    pub(crate) fn try_hold(&self) -> Option<Held<'_>> {
        if self.check_process().is_err() {
            return None;
        }
        let lane = {
            let mut st = self.lock();
            if st.closed {
                return None;
            }
            st.idle.pop()?
        };
        Some(Held {
            lanes: self,
            lane: Some(lane),
        })
    }

    /// The qids of the idle lanes' pairs: their `Io`s' (`dma` false) or
    /// their dma-buf pairs' (those made so far).
    pub(crate) fn qids(&self, dma: bool) -> Vec<u16> {
        let st = self.lock();
        if dma {
            st.idle
                .iter()
                .filter_map(|l| l.dma.as_ref().map(|d| d.qid()))
                .collect()
        } else {
            st.idle.iter().map(|l| l.io.qpair().qid()).collect()
        }
    }

    /// Refuses new transfers and destroys the idle lanes' queue pairs;
    /// lanes in use go when their transfer ends.
    pub(crate) fn close(&self) {
        let idle = {
            let mut st = self.lock();
            st.closed = true;
            st.live -= st.idle.len();
            std::mem::take(&mut st.idle)
        };
        drop(idle);
        self.freed.notify_all();
    }
}

/// A lane out of the pool; back (or replaced) when dropped, also on panic.
pub(crate) struct Held<'a> {
    lanes: &'a Lanes,
    lane: Option<Box<Lane>>,
}

impl Held<'_> {
    /// Runs `f` on the held lane.
    pub(crate) fn with<R>(
        &mut self,
        f: impl FnOnce(&LaneConfig, &mut Lane) -> FResult<R>,
    ) -> FResult<R> {
        f(&self.lanes.cfg, self.lane.as_mut().expect("held"))
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let lane = self.lane.take().expect("held");
        let mut st = self.lanes.lock();
        let waiters = st.waiting > 0;
        if lane.healthy() && !st.closed {
            st.idle.push(lane);
            drop(st);
        } else {
            st.live -= 1;
            drop(st);
            // Destroys its pairs (a poisoned one keeps what it may still
            // write until the destroy is confirmed).
            drop(lane);
        }
        // A waiter counted itself under the lock before it waits, and
        // waits on that same lock: none can be missed.
        if waiters {
            self.lanes.freed.notify_one();
        }
    }
}
