// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The relay threads: a small pool shared by the pairs of one back end.
//!
//! A new pair gets an idle thread, or a thread of its own while the pool
//! is below its cap, else the thread with the fewest pairs; it stays on
//! that thread for its whole life (one relay state, never reset). Each
//! thread owns one submitter (an io_uring ring) for all its pairs: a pass
//! reaps the ring and mirrors what came back, runs [`super::relay::Relay::step`]
//! on every pair, and hands what they pushed to the kernel in one system
//! call. Idle, it keeps polling for its spin time (`Options::relay_spin`,
//! 20 ms by default, as io_uring's SQPOLL thread polls for its
//! `sq_thread_idle`) after the last progress, then sleeps (or, with
//! commands in flight on an interrupt-driven ring, waits in the kernel for
//! one) from 20 µs doubling to 1 ms; any progress snaps it back. The GPU
//! cannot wake a sleeping thread, so the spin time is the price of latency:
//! a spin shorter than one command's round trip (200 µs was: the client's
//! turnaround in a TCG guest is longer) makes every QD1 command pay a
//! sleep. A thread without pairs blocks until it gets one.
//!
//! Taking a pair off (DESTROY_QPAIR) waits, up to a deadline, until the
//! commands it had in flight came back: until then the kernel may still
//! use what they name. A pair that does not drain in time stays on its
//! thread, taking nothing new, and its memory stays (the destroy fails).
//!
//! Inline (`Options::relay_inline`) there is no thread: the same state is
//! run one pass at a time by whichever thread of the process waits on one
//! of the pairs ([`crate::QueuePair`]'s reaps call [`RelayPool::drive`]),
//! as io_uring without SQPOLL is driven by its callers. A CPU client then
//! needs one CPU, not two; a client that polls the CQ mirror from
//! elsewhere (a GPU) never has its commands relayed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::addr::Table;
use super::check::{check, check_cost, Limits, Reach, Reject};
use super::relay::{untag, Counters, Relay};
use super::shadow::PairMemory;
use super::submit::{Done, Submit};

/// Poll this long after the last progress before backing off (default).
pub(crate) const DEFAULT_SPIN: Duration = Duration::from_millis(20);
const SLEEP_MIN: Duration = Duration::from_micros(20);
const SLEEP_MAX: Duration = Duration::from_millis(1);

/// One pair as its relay thread sees it.
#[derive(Debug)]
pub(crate) struct PairShared {
    pub(crate) qid: u16,
    pub(crate) depth: u32,
    pub(crate) mem: PairMemory,
    pub(crate) counters: Arc<Counters>,
    pub(crate) limits: Limits,
}

/// The region table every relay validates against, and its generation.
#[derive(Debug, Default)]
pub(crate) struct TableCell {
    cur: Mutex<Arc<Table>>,
    gen: AtomicU64,
}

impl TableCell {
    /// The current table and its generation.
    pub(crate) fn snapshot(&self) -> (Arc<Table>, u64) {
        let t = self.cur.lock().unwrap_or_else(|p| p.into_inner());
        (t.clone(), self.gen.load(Ordering::Acquire))
    }

    /// Changes the table (under its lock) and publishes the result.
    pub(crate) fn update<R>(&self, f: impl FnOnce(&mut Table) -> R) -> R {
        let mut t = self.cur.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = (**t).clone();
        let r = f(&mut next);
        *t = Arc::new(next);
        self.gen.fetch_add(1, Ordering::Release);
        r
    }

    pub(crate) fn generation(&self) -> u64 {
        self.gen.load(Ordering::Acquire)
    }
}

/// Makes one thread's submitter (in that thread).
pub(crate) type MakeSubmit = Arc<dyn Fn() -> std::io::Result<Box<dyn Submit + Send>> + Send + Sync>;

#[derive(Default)]
struct CtlState {
    add: Vec<Arc<PairShared>>,
    remove: Vec<u16>,
    drained: Vec<u16>,
    stop: bool,
}

#[derive(Default)]
struct Ctl {
    m: Mutex<CtlState>,
    cv: Condvar,
    pending: AtomicBool,
}

impl Ctl {
    fn lock(&self) -> std::sync::MutexGuard<'_, CtlState> {
        self.m.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Worker {
    ctl: Arc<Ctl>,
    join: Option<JoinHandle<()>>,
    pairs: usize,
}

/// Who runs the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Drivers {
    /// A pool of at most this many threads.
    Threads(usize),
    /// No thread: the process's threads that wait on a pair run one pass
    /// over every pair per poll ([`RelayPool::drive`]).
    Inline,
}

/// The relay run by the waiters (`Drivers::Inline`).
struct Inline {
    ctl: Arc<Ctl>,
    /// Made with the first pair, in the thread that adds it.
    core: Mutex<Option<Core>>,
}

/// The pool.
pub(crate) struct RelayPool {
    workers: Mutex<Vec<Worker>>,
    max: usize,
    spin: Duration,
    table: Arc<TableCell>,
    make: MakeSubmit,
    inline: Option<Inline>,
    /// Why fixed buffers could not be registered, the last time it failed.
    pub(crate) fixed_error: Arc<Mutex<Option<String>>>,
}

impl RelayPool {
    /// Relay threads (at most `max` of them, each polling `spin` after its
    /// last progress), or the inline relay.
    pub(crate) fn new(
        drivers: Drivers,
        spin: Duration,
        table: Arc<TableCell>,
        make: MakeSubmit,
    ) -> Self {
        let (max, inline) = match drivers {
            Drivers::Threads(n) => (n.max(1), None),
            Drivers::Inline => (
                0,
                Some(Inline {
                    ctl: Arc::new(Ctl::default()),
                    core: Mutex::new(None),
                }),
            ),
        };
        RelayPool {
            workers: Mutex::new(Vec::new()),
            max,
            spin,
            table,
            make,
            inline,
            fixed_error: Arc::new(Mutex::new(None)),
        }
    }

    /// Threads running (none inline).
    pub(crate) fn threads(&self) -> usize {
        self.workers.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether the waiters run the relay.
    pub(crate) fn is_inline(&self) -> bool {
        self.inline.is_some()
    }

    /// Inline: one pass over every pair, unless another thread is making
    /// one (it relays this caller's commands too). Threads: nothing.
    pub(crate) fn drive(&self) {
        let Some(inl) = &self.inline else { return };
        let mut g = match inl.core.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::WouldBlock) => return,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        };
        self.inline_pass(inl, g.as_mut());
    }

    /// Inline: the control requests, then one pass (the core's lock held).
    fn inline_pass(&self, inl: &Inline, core: Option<&mut Core>) {
        let Some(core) = core else { return };
        if inl.ctl.pending.load(Ordering::Acquire) {
            let mut st = inl.ctl.lock();
            inl.ctl.pending.store(false, Ordering::Relaxed);
            core.control(&mut st);
        }
        core.pass(&inl.ctl, &self.table, &self.fixed_error);
    }

    /// Puts `pair` on a thread; which one (for [`remove`](Self::remove)).
    pub(crate) fn add(&self, pair: Arc<PairShared>) -> std::io::Result<usize> {
        if let Some(inl) = &self.inline {
            // Lock order: the core, then its control state (as drive()).
            let mut core = inl.core.lock().unwrap_or_else(|p| p.into_inner());
            if core.is_none() {
                *core = Some(Core::new(&self.table, (self.make)()?, &self.fixed_error));
            }
            inl.ctl.lock().add.push(pair);
            inl.ctl.pending.store(true, Ordering::Release);
            return Ok(0);
        }
        let mut ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        let idle = ws.iter().position(|w| w.pairs == 0);
        let i = match idle {
            Some(i) => i,
            None if ws.len() < self.max => {
                let ctl = Arc::new(Ctl::default());
                let (tx, rx) = std::sync::mpsc::channel();
                let (c, t, make, fe, spin) = (
                    ctl.clone(),
                    self.table.clone(),
                    self.make.clone(),
                    self.fixed_error.clone(),
                    self.spin,
                );
                let join = std::thread::Builder::new()
                    .name(format!("gpunvme-pt-relay{}", ws.len()))
                    .spawn(move || match make() {
                        Ok(sub) => {
                            let _ = tx.send(Ok(()));
                            run(&c, &t, sub, &fe, spin);
                        }
                        Err(e) => {
                            let _ = tx.send(Err(e));
                        }
                    })?;
                match rx.recv() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        let _ = join.join();
                        return Err(e);
                    }
                    Err(_) => {
                        let _ = join.join();
                        return Err(std::io::Error::other("the relay thread died at start"));
                    }
                }
                ws.push(Worker {
                    ctl,
                    join: Some(join),
                    pairs: 0,
                });
                ws.len() - 1
            }
            None => ws
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| w.pairs)
                .map(|(i, _)| i)
                .expect("at least one worker"),
        };
        let w = &mut ws[i];
        w.pairs += 1;
        let mut st = w.ctl.lock();
        st.add.push(pair);
        w.ctl.pending.store(true, Ordering::Release);
        w.ctl.cv.notify_all();
        Ok(i)
    }

    /// Takes pair `qid` off thread `worker`; true once every command it
    /// had in flight came back (within `deadline`), false if some did not
    /// (the pair then stays on the thread, taking nothing new).
    pub(crate) fn remove(&self, worker: usize, qid: u16, deadline: Duration) -> bool {
        if let Some(inl) = &self.inline {
            return self.remove_inline(inl, qid, deadline);
        }
        let ctl = {
            let ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
            match ws.get(worker) {
                Some(w) => w.ctl.clone(),
                None => return true,
            }
        };
        let mut st = ctl.lock();
        st.remove.push(qid);
        ctl.pending.store(true, Ordering::Release);
        ctl.cv.notify_all();
        let end = Instant::now() + deadline;
        loop {
            if let Some(p) = st.drained.iter().position(|&q| q == qid) {
                st.drained.remove(p);
                drop(st);
                let mut ws = self.workers.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(w) = ws.get_mut(worker) {
                    w.pairs = w.pairs.saturating_sub(1);
                }
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            st = ctl
                .cv
                .wait_timeout(st, end - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

impl RelayPool {
    /// Inline: the caller relays until the pair's commands came back.
    fn remove_inline(&self, inl: &Inline, qid: u16, deadline: Duration) -> bool {
        {
            let mut st = inl.ctl.lock();
            st.remove.push(qid);
            inl.ctl.pending.store(true, Ordering::Release);
        }
        let end = Instant::now() + deadline;
        loop {
            {
                let mut core = inl.core.lock().unwrap_or_else(|p| p.into_inner());
                self.inline_pass(inl, core.as_mut());
            }
            let mut st = inl.ctl.lock();
            if let Some(p) = st.drained.iter().position(|&q| q == qid) {
                st.drained.remove(p);
                return true;
            }
            drop(st);
            if Instant::now() >= end {
                return false;
            }
            std::thread::yield_now();
        }
    }
}

impl Drop for RelayPool {
    fn drop(&mut self) {
        if let Some(inl) = self.inline.take() {
            if let Some(core) = inl.core.into_inner().unwrap_or_else(|p| p.into_inner()) {
                core.finish();
            }
        }
        let mut ws = std::mem::take(self.workers.get_mut().unwrap_or_else(|p| p.into_inner()));
        for w in &ws {
            w.ctl.lock().stop = true;
            w.ctl.pending.store(true, Ordering::Release);
            w.ctl.cv.notify_all();
        }
        for w in &mut ws {
            if let Some(j) = w.join.take() {
                let _ = j.join();
            }
        }
    }
}

struct Served {
    shared: Arc<PairShared>,
    relay: Relay,
    removing: bool,
}

/// One relay's state: its pairs, its submitter and the region table it
/// checks against. A relay thread runs it, or (inline) whichever thread of
/// the process waits on one of its pairs.
struct Core {
    served: Vec<Option<Served>>,
    tab: Arc<Table>,
    gen: u64,
    sub: Box<dyn Submit + Send>,
    dones: Vec<Done>,
}

impl Core {
    fn new(
        table: &TableCell,
        sub: Box<dyn Submit + Send>,
        fixed_error: &Mutex<Option<String>>,
    ) -> Self {
        let (tab, gen) = table.snapshot();
        let mut c = Core {
            served: Vec::new(),
            tab,
            gen,
            sub,
            dones: Vec::new(),
        };
        c.set_buffers(fixed_error);
        c
    }

    fn set_buffers(&mut self, fixed_error: &Mutex<Option<String>>) {
        if let Err(e) = self.sub.set_buffers(&self.tab.iovecs()) {
            *fixed_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
        }
    }

    fn has_pairs(&self) -> bool {
        self.served.iter().any(Option::is_some)
    }

    /// Takes the pairs to add and the removals asked for.
    fn control(&mut self, st: &mut CtlState) {
        for p in st.add.drain(..) {
            let s = Served {
                relay: Relay::new(p.qid, p.depth),
                shared: p,
                removing: false,
            };
            match self.served.iter().position(Option::is_none) {
                Some(i) => self.served[i] = Some(s),
                None => self.served.push(Some(s)),
            }
        }
        for q in std::mem::take(&mut st.remove) {
            for s in self.served.iter_mut().flatten() {
                if s.shared.qid == q {
                    s.removing = true;
                }
            }
        }
    }

    /// One pass: reaps the submitter and mirrors what came back, steps
    /// every pair, hands what they pushed to the kernel; drops a removed
    /// pair once its commands came back (telling `ctl`). Returns whether
    /// anything moved and how many commands are in flight.
    fn pass(
        &mut self,
        ctl: &Ctl,
        table: &TableCell,
        fixed_error: &Mutex<Option<String>>,
    ) -> (bool, u32) {
        // After the control requests: a pair added has its pool in the
        // table of this generation or a later one.
        if table.generation() != self.gen {
            (self.tab, self.gen) = table.snapshot();
            self.set_buffers(fixed_error);
        }
        let Core {
            served,
            tab,
            gen,
            sub,
            dones,
        } = self;
        dones.clear();
        sub.reap(dones);
        let mut progress = !dones.is_empty();
        for d in dones.iter() {
            let (pi, slot) = untag(d.tag);
            if let Some(Some(s)) = served.get_mut(pi as usize) {
                s.relay.complete(&s.shared.mem, slot, d, &s.shared.counters);
            }
        }
        let mut in_flight = 0u32;
        for (pi, entry) in served.iter_mut().enumerate() {
            let Some(s) = entry else { continue };
            if s.removing {
                if s.relay.in_flight() == 0 {
                    let qid = s.shared.qid;
                    *entry = None;
                    ctl.lock().drained.push(qid);
                    ctl.cv.notify_all();
                } else {
                    in_flight += s.relay.in_flight();
                }
                continue;
            }
            let t0 = Instant::now();
            let shared = &s.shared;
            let lim = &shared.limits;
            let (tab_ref, gen_ref) = (&mut *tab, &mut *gen);
            progress |= s.relay.step(
                &shared.mem,
                pi as u32,
                &mut **sub,
                &shared.counters,
                |sqe, scratch| {
                    let mut r = check(
                        sqe,
                        lim,
                        &Reach {
                            table: tab_ref,
                            qid: lim.qid,
                        },
                        scratch,
                    );
                    // A buffer registered after this pass took its table: look
                    // again with the new one before refusing.
                    if r == Err(Reject::Field) && table.generation() != *gen_ref {
                        (*tab_ref, *gen_ref) = table.snapshot();
                        r = check(
                            sqe,
                            lim,
                            &Reach {
                                table: tab_ref,
                                qid: lim.qid,
                            },
                            scratch,
                        );
                    }
                    (r, check_cost(sqe, lim))
                },
            );
            let ns = t0.elapsed().as_nanos() as u64;
            let c = &shared.counters.relay_ns;
            c.store(c.load(Ordering::Relaxed) + ns, Ordering::Relaxed);
            in_flight += s.relay.in_flight();
        }
        if let Err(e) = sub.flush(in_flight > 0) {
            // The ring refused the submission as a whole (not one command:
            // those fail in their completions). Nothing can be done here
            // but to try again next pass; say so once.
            let mut fe = fixed_error.lock().unwrap_or_else(|p| p.into_inner());
            fe.get_or_insert_with(|| format!("io_uring_enter failed: {e}"));
        }
        (progress, in_flight)
    }

    /// Waits at most `timeout` for a completion, where the submitter can.
    fn wait(&mut self, timeout: Duration) {
        self.sub.wait(timeout);
    }

    /// The end: with commands in flight the kernel may still read their
    /// iovecs and the pairs' memory, so that is never freed.
    fn finish(self) {
        for s in self.served.into_iter().flatten() {
            if s.relay.in_flight() > 0 {
                std::mem::forget(s);
            }
        }
    }
}

/// The thread: serves its pairs until told to stop.
fn run(
    ctl: &Ctl,
    table: &TableCell,
    sub: Box<dyn Submit + Send>,
    fixed_error: &Mutex<Option<String>>,
    spin: Duration,
) {
    let mut core = Core::new(table, sub, fixed_error);
    let mut last = Instant::now();
    let mut sleep = SLEEP_MIN;
    let mut empty = 0u32;
    loop {
        if ctl.pending.load(Ordering::Acquire) {
            let mut st = ctl.lock();
            ctl.pending.store(false, Ordering::Relaxed);
            if st.stop {
                break;
            }
            core.control(&mut st);
            // With no pair, wait for one (or the stop).
            while !core.has_pairs() && st.add.is_empty() && !st.stop {
                st = ctl.cv.wait(st).unwrap_or_else(|p| p.into_inner());
                ctl.pending.store(true, Ordering::Relaxed);
            }
            last = Instant::now();
            sleep = SLEEP_MIN;
        }
        let (progress, in_flight) = core.pass(ctl, table, fixed_error);
        if progress {
            last = Instant::now();
            sleep = SLEEP_MIN;
            empty = 0;
        } else if last.elapsed() < spin {
            // Polling: give the CPU away now and then, so that on a busy
            // machine the thread that will write the next command (the
            // CPU side of a GPU launch, a hostrun lane, a client) runs.
            empty = empty.wrapping_add(1);
            if empty % 32 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        } else {
            if in_flight > 0 {
                core.wait(sleep);
            } else {
                std::thread::sleep(sleep);
            }
            sleep = (sleep * 2).min(SLEEP_MAX);
        }
    }
    core.finish();
}
