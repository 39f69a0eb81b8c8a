// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! CPU-initiated transfers between a namespace and GPU memory (the job of
//! cuFile's `cuFileRead`/`cuFileWrite` and hipFile's): byte or block
//! ranges of a registered [`GpuBuffer`] (or of host memory, a
//! [`DmaBuffer`], for comparison), split at MDTS and spread over several
//! queue pairs, synchronous or asynchronous ([`Transfer`] is the handle of
//! one in flight).
//!
//! # How it runs
//!
//! No thread of its own: each queue pair is a *lane* behind a mutex, with
//! a backlog of pieces that did not fit its queue. Whoever submits or
//! waits drives the lanes its transfer uses: reaps their completions (for
//! any transfer), refills their queues from the backlog and rings. So
//! several threads may submit and wait at once, and a transfer's pieces
//! progress whenever any transfer on the same lanes is waited for.
//!
//! # What the controller may write, and when a buffer comes back
//!
//! Every command has a deadline ([`TransferOptions::timeout`]). One that
//! passes it poisons its lane: that queue pair takes no more commands, and
//! every transfer with a piece in flight on it fails with
//! [`Error::Timeout`]; the pair keeps those transfers' buffers (a host
//! buffer, the GPU buffer and the allocation it owns) until it is
//! destroyed, when the [`Transfers`] is dropped, and leaks them if the
//! destroy fails. A host buffer is handed back ([`Completed::buffer`],
//! [`TransferError::buffer`]) only when none of its commands can still be
//! in flight. Later transfers use the lanes left.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::command::opcode;
use crate::controller::{Controller, Info, Namespace};
use crate::dma::DmaBuffer;
use crate::error::{Error, Result};
use crate::gpu_buffer::GpuBuffer;
use crate::io::{Io, Target, TransferError};
use crate::qpair::{Mode, DEFAULT_TIMEOUT};

/// Which way data moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// From the namespace into the buffer (NVMe Read).
    Read,
    /// From the buffer to the namespace (NVMe Write).
    Write,
}

impl Direction {
    fn opcode(self) -> u8 {
        match self {
            Direction::Read => opcode::READ,
            Direction::Write => opcode::WRITE,
        }
    }

    /// "read" or "write".
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// The memory of a transfer.
#[derive(Debug)]
pub enum Buffer {
    /// A registered GPU buffer (a clone of the handle: the caller keeps
    /// its own).
    Gpu(GpuBuffer),
    /// Host memory, moved in and handed back when the transfer is done.
    Host(DmaBuffer),
}

impl Buffer {
    fn len(&self) -> u64 {
        match self {
            Buffer::Gpu(b) => b.len(),
            Buffer::Host(b) => b.len() as u64,
        }
    }
}

/// How a [`Transfers`] is set up.
#[derive(Debug, Clone)]
pub struct TransferOptions {
    /// Queue pairs (lanes) to spread pieces over.
    pub qpairs: usize,
    /// Commands in flight per queue pair (the pair has `qd + 1` entries).
    pub qd: u32,
    /// Shared (validated) or raw (owner mode) queue pairs.
    pub mode: Mode,
    /// Largest command in bytes (rounded down to whole blocks; never above
    /// what the controller and mode allow). `None`: that limit.
    pub max_command_bytes: Option<usize>,
    /// Deadline of each command.
    pub timeout: Duration,
}

impl Default for TransferOptions {
    fn default() -> Self {
        TransferOptions {
            qpairs: 1,
            qd: 32,
            mode: Mode::Shared,
            max_command_bytes: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

/// Transfers between one namespace and registered GPU buffers (or host
/// buffers) over several queue pairs. Cloning shares the queue pairs; it
/// is `Send` and `Sync`.
///
/// ```no_run
/// use std::sync::Arc;
/// use gpunvme::{Controller, GpuBuffer, TransferOptions, Transfers};
///
/// # fn export_vram() -> std::os::fd::OwnedFd { unimplemented!() }
/// fn main() -> gpunvme::Result<()> {
///     let ctrl = Arc::new(Controller::open_index(0)?);
///     let info = ctrl.info()?;
///     let opts = TransferOptions { qpairs: 4, qd: 32, ..Default::default() };
///     let t = Transfers::new(&ctrl, &info, 1, &opts)?;
///     let buf = GpuBuffer::register(&ctrl, &export_vram())?;
///     // 8 MiB from byte 0 of the namespace into the buffer, synchronously.
///     t.read(&buf, 0, 8 << 20, 0)?;
///     // Two more in flight at once, then wait for both.
///     let a = t.read_async(&buf, 0, 1 << 20, 16 << 20)?;
///     let b = t.write_async(&buf, 1 << 20, 1 << 20, 32 << 20)?;
///     a.wait()?;
///     b.wait()?;
///     Ok(())
/// }
/// ```
#[derive(Debug, Clone)]
pub struct Transfers {
    engine: Arc<Engine>,
}

#[derive(Debug)]
struct Engine {
    ctrl: Arc<Controller>,
    ns: Namespace,
    max_bytes: u64,
    timeout: Duration,
    lanes: Vec<Mutex<Lane>>,
    next: AtomicUsize,
}

/// One queue pair and the pieces waiting for room in it.
#[derive(Debug)]
struct Lane {
    io: Io,
    /// The piece of each CID in flight.
    in_flight: Vec<Option<InFlight>>,
    backlog: VecDeque<Piece>,
    timeout: Duration,
}

#[derive(Debug)]
struct Piece {
    job: Arc<Job>,
    lba: u64,
    blocks: u64,
    offset: usize,
    len: usize,
}

#[derive(Debug)]
struct InFlight {
    piece: Piece,
    since: Instant,
}

/// One transfer's state, shared by its pieces and its handle.
#[derive(Debug)]
struct Job {
    dir: Direction,
    gpu: Option<GpuBuffer>,
    /// A host buffer, taken back by the handle once nothing can reach it.
    host: Mutex<Option<DmaBuffer>>,
    /// Pieces neither completed nor failed.
    left: AtomicUsize,
    /// A piece was in flight on a pair that then failed: its command may
    /// still run, so the buffer is never handed back.
    abandoned: AtomicBool,
    /// The handle was dropped: pieces not yet submitted are dropped too.
    cancelled: AtomicBool,
    error: Mutex<Option<Error>>,
    /// Lanes with pieces of this job.
    lanes: Vec<usize>,
    bytes: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Job {
    fn finish(&self, error: Option<Error>) {
        if let Some(e) = error {
            lock(&self.error).get_or_insert(e);
        }
        self.left.fetch_sub(1, Ordering::AcqRel);
    }

    fn done(&self) -> bool {
        self.left.load(Ordering::Acquire) == 0
    }
}

/// What [`Transfer::wait`] returns on success.
#[derive(Debug)]
pub struct Completed {
    /// Bytes moved.
    pub bytes: u64,
    /// The host buffer of a host transfer; `None` for GPU memory.
    pub buffer: Option<DmaBuffer>,
}

/// A transfer in flight. [`wait`](Self::wait) ends it; dropping it
/// without waiting drops its pieces that were not submitted yet (those in
/// flight complete and are reaped by later transfers, or end when the
/// queue pairs are destroyed). `Send` and `Sync`.
#[derive(Debug)]
pub struct Transfer {
    job: Arc<Job>,
    engine: Arc<Engine>,
}

impl Lane {
    fn is_dead(&self) -> bool {
        self.io.qpair().is_poisoned()
    }

    /// Reaps what completed, refills the queue from the backlog, rings,
    /// and fails the lane if its oldest command is past its deadline.
    fn progress(&mut self) {
        if self.is_dead() {
            return;
        }
        loop {
            match self.io.poll() {
                Ok(Some(c)) => {
                    let qid = self.io.qpair().qid();
                    if let Some(f) = self.in_flight[c.cid as usize].take() {
                        f.piece.job.finish(c.ok(qid).err());
                    }
                }
                Ok(None) => break,
                Err(e) => return self.fail(None, e.to_string()),
            }
        }
        while self.io.can_push() {
            let Some(p) = self.backlog.pop_front() else {
                break;
            };
            if p.job.cancelled.load(Ordering::Acquire) {
                p.job.finish(None);
                continue;
            }
            let pushed = {
                let host = lock(&p.job.host);
                let target = match (&p.job.gpu, host.as_ref()) {
                    (Some(g), _) => Target::Gpu(g),
                    (None, Some(h)) => Target::Host(h),
                    (None, None) => unreachable!("a job has a buffer while pieces are left"),
                };
                self.io
                    .push_piece(p.job.dir.opcode(), p.lba, p.blocks, target, p.offset, p.len)
            };
            match pushed {
                Ok(cid) => {
                    self.in_flight[cid as usize] = Some(InFlight {
                        piece: p,
                        since: Instant::now(),
                    })
                }
                // Not submitted: nothing of it can be in flight.
                Err(e) => p.job.finish(Some(e)),
            }
        }
        self.io.qpair_mut().ring();
        let now = Instant::now();
        let late = self
            .in_flight
            .iter()
            .flatten()
            .map(|f| now - f.since)
            .max()
            .filter(|&w| w >= self.timeout);
        if let Some(waited) = late {
            self.fail(Some(waited), String::new());
        }
    }

    /// The pair failed (a command past its deadline, or a completion it
    /// cannot match): poison it, fail every piece on it, and let the pair
    /// keep the jobs whose commands may still run until it is destroyed.
    fn fail(&mut self, waited: Option<Duration>, why: String) {
        let qid = self.io.qpair().qid();
        let why = match waited {
            Some(w) => format!("a command outstanding for {w:?} on qid {qid}, past its deadline"),
            None => why,
        };
        self.io.qpair_mut().poison(why.clone());
        for f in std::mem::take(&mut self.in_flight).into_iter().flatten() {
            let p = f.piece;
            p.job.abandoned.store(true, Ordering::Release);
            let e = match waited {
                Some(w) => Error::Timeout {
                    qid,
                    cid: None,
                    waited: w,
                    command: format!(
                        "{} of {} block(s) at LBA {}",
                        p.job.dir.name(),
                        p.blocks,
                        p.lba
                    ),
                },
                None => Error::Poisoned {
                    qid,
                    why: why.clone(),
                },
            };
            let job = p.job.clone();
            drop(p);
            job.finish(Some(e));
            self.io.qpair_mut().keep_until_destroyed_other(job);
        }
        for p in std::mem::take(&mut self.backlog) {
            p.job.finish(Some(Error::Poisoned {
                qid,
                why: why.clone(),
            }));
        }
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        // Commands still in flight (a transfer dropped unwaited): the pair
        // keeps what they reach until its destroy (the Io drops it next).
        for f in std::mem::take(&mut self.in_flight).into_iter().flatten() {
            let job = f.piece.job.clone();
            drop(f);
            self.io.qpair_mut().keep_until_destroyed_other(job);
        }
    }
}

impl Transfers {
    /// `opts.qpairs` queue pairs of `opts.qd` commands in flight on `ctrl`
    /// for namespace `nsid` (which must be in `info`).
    pub fn new(
        ctrl: &Arc<Controller>,
        info: &Info,
        nsid: u32,
        opts: &TransferOptions,
    ) -> Result<Self> {
        if opts.qpairs == 0 {
            return Err(Error::Invalid(
                "a Transfers needs at least one queue pair".into(),
            ));
        }
        let depth = opts
            .qd
            .checked_add(1)
            .ok_or_else(|| Error::Invalid(format!("qd {}", opts.qd)))?;
        let ios = (0..opts.qpairs)
            .map(|_| Io::new_with(ctrl, info, nsid, depth, opts.mode))
            .collect::<Result<Vec<_>>>()?;
        Self::from_ios(ctrl, ios, opts)
    }

    /// Over queue pairs set up already (one [`Io`] each, of one namespace).
    pub(crate) fn from_ios(
        ctrl: &Arc<Controller>,
        ios: Vec<Io>,
        opts: &TransferOptions,
    ) -> Result<Self> {
        let ns = ios[0].namespace();
        let lba = ns.lba_size as u64;
        let mut max_bytes = ios
            .iter()
            .map(|i| i.max_transfer_bytes())
            .min()
            .unwrap_or(0) as u64;
        if let Some(m) = opts.max_command_bytes {
            max_bytes = max_bytes.min(m as u64 / lba * lba);
        }
        if max_bytes == 0 {
            return Err(Error::Invalid(format!(
                "commands of at most {:?} bytes cannot carry one {lba}-byte block",
                opts.max_command_bytes
            )));
        }
        let lanes = ios
            .into_iter()
            .map(|io| {
                Mutex::new(Lane {
                    in_flight: (0..io.qpair().capacity()).map(|_| None).collect(),
                    io,
                    backlog: VecDeque::new(),
                    timeout: opts.timeout,
                })
            })
            .collect();
        Ok(Transfers {
            engine: Arc::new(Engine {
                ctrl: ctrl.clone(),
                ns,
                max_bytes,
                timeout: opts.timeout,
                lanes,
                next: AtomicUsize::new(0),
            }),
        })
    }

    /// The namespace.
    pub fn namespace(&self) -> Namespace {
        self.engine.ns
    }

    /// The open file (controller) its queue pairs belong to.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.engine.ctrl
    }

    /// Queue pairs, and how many of them still take commands (a command
    /// past its deadline takes its pair out for good).
    pub fn qpairs(&self) -> (usize, usize) {
        let live = self
            .engine
            .lanes
            .iter()
            .filter(|l| !lock(l).is_dead())
            .count();
        (self.engine.lanes.len(), live)
    }

    /// Largest command, in bytes.
    pub fn max_command_bytes(&self) -> u64 {
        self.engine.max_bytes
    }

    /// Deadline of each command.
    pub fn timeout(&self) -> Duration {
        self.engine.timeout
    }

    /// Read/write commands submitted so far on each queue pair.
    pub fn commands(&self) -> Vec<u64> {
        self.engine
            .lanes
            .iter()
            .map(|l| lock(l).io.commands())
            .collect()
    }

    /// Starts moving `len` bytes between byte `dev_offset` of the
    /// namespace and byte `buf_offset` of `buffer`, in commands of at most
    /// [`max_command_bytes`](Self::max_command_bytes) spread over the
    /// queue pairs. `dev_offset` and `len` are whole blocks, `buf_offset`
    /// is dword aligned (the controller's PRP rules), the range lies in
    /// the namespace. A refused request hands a host buffer back in the
    /// error.
    pub fn submit(
        &self,
        dir: Direction,
        buffer: Buffer,
        buf_offset: u64,
        len: u64,
        dev_offset: u64,
    ) -> std::result::Result<Transfer, TransferError> {
        let give_back = |error: Error, buffer: Buffer| TransferError {
            error,
            buffer: match buffer {
                Buffer::Host(b) => Some(b),
                Buffer::Gpu(_) => None,
            },
        };
        let e = &self.engine;
        let lba = e.ns.lba_size as u64;
        if let Err(err) = self.check(&buffer, buf_offset, len, dev_offset) {
            return Err(give_back(err, buffer));
        }
        // Healthy lanes, starting at the next one in turn.
        let n = e.lanes.len();
        let start = e.next.fetch_add(1, Ordering::Relaxed);
        let live: Vec<usize> = (0..n)
            .map(|i| (start + i) % n)
            .filter(|&i| !lock(&e.lanes[i]).is_dead())
            .collect();
        if live.is_empty() {
            let why = "every queue pair of this Transfers failed (a command past its deadline)";
            return Err(give_back(
                Error::Poisoned {
                    qid: 0,
                    why: why.into(),
                },
                buffer,
            ));
        }
        let pieces = len.div_ceil(e.max_bytes) as usize;
        let lanes: Vec<usize> = live.iter().copied().take(pieces).collect();
        let (gpu, host) = match buffer {
            Buffer::Gpu(g) => (Some(g), None),
            Buffer::Host(h) => (None, Some(h)),
        };
        let job = Arc::new(Job {
            dir,
            gpu,
            host: Mutex::new(host),
            left: AtomicUsize::new(pieces),
            abandoned: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            error: Mutex::new(None),
            lanes: lanes.clone(),
            bytes: len,
        });
        // Piece i goes to lane i mod the lanes used; each lane's pieces in
        // one go, then it is driven once so its queue fills.
        let mut per_lane: Vec<Vec<Piece>> = lanes.iter().map(|_| Vec::new()).collect();
        let mut done = 0u64;
        let mut i = 0usize;
        while done < len {
            let bytes = (len - done).min(e.max_bytes);
            per_lane[i % lanes.len()].push(Piece {
                job: job.clone(),
                lba: (dev_offset + done) / lba,
                blocks: bytes / lba,
                offset: (buf_offset + done) as usize,
                len: bytes as usize,
            });
            done += bytes;
            i += 1;
        }
        for (k, ps) in per_lane.into_iter().enumerate() {
            let mut lane = lock(&e.lanes[lanes[k]]);
            if lane.is_dead() {
                // Failed since the look above: these pieces never ran.
                let qid = lane.io.qpair().qid();
                for p in ps {
                    p.job.finish(Some(Error::Poisoned {
                        qid,
                        why: "the queue pair failed while the transfer was split".into(),
                    }));
                }
                continue;
            }
            lane.backlog.extend(ps);
            lane.progress();
        }
        Ok(Transfer {
            job,
            engine: e.clone(),
        })
    }

    fn check(&self, buffer: &Buffer, buf_offset: u64, len: u64, dev_offset: u64) -> Result<()> {
        let e = &self.engine;
        e.ctrl.check_unforked()?;
        let ctrl = match buffer {
            Buffer::Gpu(b) => b.controller(),
            Buffer::Host(b) => b.controller(),
        };
        if !Arc::ptr_eq(ctrl, &e.ctrl) {
            return Err(Error::Invalid(
                "the buffer is mapped for another open file than these queue pairs': its DMA \
                 addresses mean nothing to this one"
                    .into(),
            ));
        }
        let lba = e.ns.lba_size as u64;
        if len == 0 || len % lba != 0 || dev_offset % lba != 0 {
            return Err(Error::Invalid(format!(
                "{len} bytes at byte {dev_offset}: transfers are whole {lba}-byte blocks (offset and \
                 length multiples of the LBA size)"
            )));
        }
        if buf_offset % 4 != 0 {
            return Err(Error::Invalid(format!(
                "buffer offset {buf_offset} is not dword aligned"
            )));
        }
        if buf_offset
            .checked_add(len)
            .is_none_or(|end| end > buffer.len())
        {
            return Err(Error::Invalid(format!(
                "{len} bytes at offset {buf_offset} do not fit a {}-byte buffer",
                buffer.len()
            )));
        }
        let cap = e.ns.capacity_bytes();
        if dev_offset.checked_add(len).is_none_or(|end| end > cap) {
            return Err(Error::Invalid(format!(
                "bytes {dev_offset}..{} are beyond namespace {}'s {cap} bytes",
                dev_offset.saturating_add(len),
                e.ns.nsid
            )));
        }
        Ok(())
    }

    /// Starts a read of `len` bytes at byte `dev_offset` of the namespace
    /// into `buf` at `buf_offset` (`cuFileRead`'s arguments, in the order
    /// buffer, its offset, length, file offset).
    pub fn read_async(
        &self,
        buf: &GpuBuffer,
        buf_offset: u64,
        len: u64,
        dev_offset: u64,
    ) -> Result<Transfer> {
        self.submit(
            Direction::Read,
            Buffer::Gpu(buf.clone()),
            buf_offset,
            len,
            dev_offset,
        )
        .map_err(|e| e.error)
    }

    /// Starts a write of `len` bytes of `buf` at `buf_offset` to byte
    /// `dev_offset` of the namespace.
    pub fn write_async(
        &self,
        buf: &GpuBuffer,
        buf_offset: u64,
        len: u64,
        dev_offset: u64,
    ) -> Result<Transfer> {
        self.submit(
            Direction::Write,
            Buffer::Gpu(buf.clone()),
            buf_offset,
            len,
            dev_offset,
        )
        .map_err(|e| e.error)
    }

    /// [`read_async`](Self::read_async), then waits for it.
    pub fn read(&self, buf: &GpuBuffer, buf_offset: u64, len: u64, dev_offset: u64) -> Result<()> {
        self.read_async(buf, buf_offset, len, dev_offset)?
            .wait()
            .map(|_| ())
            .map_err(|e| e.error)
    }

    /// [`write_async`](Self::write_async), then waits for it.
    pub fn write(&self, buf: &GpuBuffer, buf_offset: u64, len: u64, dev_offset: u64) -> Result<()> {
        self.write_async(buf, buf_offset, len, dev_offset)?
            .wait()
            .map(|_| ())
            .map_err(|e| e.error)
    }

    /// Blocks instead of bytes: `count` blocks at `lba`, into or out of
    /// `buffer` at byte `offset`.
    pub fn submit_blocks(
        &self,
        dir: Direction,
        lba: u64,
        count: u64,
        buffer: Buffer,
        offset: u64,
    ) -> std::result::Result<Transfer, TransferError> {
        let b = self.engine.ns.lba_size as u64;
        match (lba.checked_mul(b), count.checked_mul(b)) {
            (Some(at), Some(len)) => self.submit(dir, buffer, offset, len, at),
            _ => Err(TransferError {
                error: Error::Invalid(format!(
                    "{count} blocks at LBA {lba} overflow a byte offset"
                )),
                buffer: match buffer {
                    Buffer::Host(h) => Some(h),
                    Buffer::Gpu(_) => None,
                },
            }),
        }
    }

    /// A flush of the namespace (on the first queue pair that works).
    pub fn flush(&self) -> Result<()> {
        for l in &self.engine.lanes {
            let mut lane = lock(l);
            if lane.is_dead() {
                continue;
            }
            // Settle what is in flight first, so the pair's own wait
            // below takes only the flush's completion.
            while lane.in_flight.iter().any(Option::is_some) || !lane.backlog.is_empty() {
                lane.progress();
                if lane.is_dead() {
                    break;
                }
                std::hint::spin_loop();
            }
            if lane.is_dead() {
                continue;
            }
            return lane.io.flush();
        }
        Err(Error::Poisoned {
            qid: 0,
            why: "every queue pair of this Transfers failed".into(),
        })
    }
}

impl Transfer {
    /// Drives the lanes once and says whether the transfer has ended.
    pub fn is_done(&self) -> bool {
        if !self.job.done() {
            self.drive();
        }
        self.job.done()
    }

    fn drive(&self) {
        for &i in &self.job.lanes {
            lock(&self.engine.lanes[i]).progress();
        }
    }

    /// Waits up to `d` for the transfer to end; says whether it did.
    pub fn wait_for(&self, d: Duration) -> bool {
        let t0 = Instant::now();
        let mut spins = 0u32;
        while !self.is_done() {
            if t0.elapsed() >= d {
                return false;
            }
            pause(&mut spins);
        }
        true
    }

    /// Bytes this transfer moves.
    pub fn bytes(&self) -> u64 {
        self.job.bytes
    }

    /// Which way.
    pub fn direction(&self) -> Direction {
        self.job.dir
    }

    /// Waits for every piece (each command has its deadline, so this ends)
    /// and returns the outcome: the host buffer comes back unless one of
    /// its commands may still be in flight (a timeout).
    pub fn wait(self) -> std::result::Result<Completed, TransferError> {
        if let Err(error) = self.engine.ctrl.check_unforked() {
            return Err(TransferError {
                error,
                buffer: None,
            });
        }
        let mut spins = 0u32;
        while !self.is_done() {
            pause(&mut spins);
        }
        let abandoned = self.job.abandoned.load(Ordering::Acquire);
        let buffer = if abandoned {
            None
        } else {
            lock(&self.job.host).take()
        };
        match lock(&self.job.error).take() {
            Some(error) => Err(TransferError { error, buffer }),
            None => Ok(Completed {
                bytes: self.job.bytes,
                buffer,
            }),
        }
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        // Pieces not yet submitted will not be; a host buffer then goes
        // with the last piece (or with the pair that keeps it).
        self.job.cancelled.store(true, Ordering::Release);
    }
}

/// Busy-polls at first (completions come in microseconds), then yields,
/// then sleeps briefly, as the queue pair's own waits do.
fn pause(spins: &mut u32) {
    *spins = spins.saturating_add(1);
    match *spins {
        0..=2000 => std::hint::spin_loop(),
        2001..=4000 => std::thread::yield_now(),
        _ => std::thread::sleep(Duration::from_micros(50)),
    }
}

#[cfg(test)]
mod tests;
