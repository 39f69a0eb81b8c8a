// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The kernel baseline with the same knobs: a block device (or a file)
//! opened O_DIRECT, one io_uring of QD I/Os per worker (interrupt or
//! IORING_SETUP_IOPOLL completions), or QD x queue-pairs synchronous
//! pread/pwrite threads. Behind a passthrough run it measures the same
//! blocks: from the window's byte offset, no further than that run went.

use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use gpunvme::Direction;
use io_uring::{opcode, types, IoUring};

use super::stats::Measured;
use super::{
    cells, check_interrupt, plan_for, range_bytes, run_cell, skipped, BenchArgs, CpuClock,
    KernelMode, Plan, Run, TARGET_KERNEL_IRQ, TARGET_KERNEL_POLL, TARGET_KERNEL_PREAD,
};
use crate::habits::{Progress, Unit};

/// Anonymous page-aligned memory of `n` slots of `bs` bytes, for O_DIRECT.
struct Aligned {
    ptr: *mut u8,
    slot: usize,
    n: usize,
}

impl Aligned {
    fn new(n: usize, bs: usize) -> std::io::Result<Self> {
        let slot = bs.div_ceil(4096) * 4096;
        // SAFETY: a fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * slot,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Aligned {
            ptr: p.cast(),
            slot,
            n,
        })
    }

    fn block(&self, i: usize) -> *mut u8 {
        assert!(i < self.n);
        // SAFETY: inside the mapping.
        unsafe { self.ptr.add(i * self.slot) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: our mapping of n slots.
        unsafe { libc::munmap(self.ptr.cast(), self.n * self.slot) };
    }
}

/// A ring of `entries` for one worker, polled (IOPOLL) or not.
fn ring(entries: u32, mode: KernelMode) -> std::io::Result<IoUring> {
    let mut b = IoUring::builder();
    if mode == KernelMode::Poll {
        b.setup_iopoll();
    }
    b.build(entries)
}

/// Queues one I/O of `bs` bytes on `buf`'s slot `slot` at byte `off`,
/// tagged `slot`.
fn push(
    ring: &mut IoUring,
    fd: i32,
    buf: &Aligned,
    slot: usize,
    (dir, off): (Direction, u64),
    bs: u32,
) -> Result<(), String> {
    let e = match dir {
        Direction::Read => opcode::Read::new(types::Fd(fd), buf.block(slot), bs)
            .offset(off)
            .build(),
        Direction::Write => opcode::Write::new(types::Fd(fd), buf.block(slot), bs)
            .offset(off)
            .build(),
    }
    .user_data(slot as u64);
    // SAFETY: the I/O targets slot `slot` of `buf`, which the worker unmaps
    // only after every I/O it queued has completed (on an early return it
    // leaks `buf`); each slot has at most one I/O in flight.
    unsafe { ring.submission().push(&e) }.map_err(|_| "io_uring submission queue full".to_string())
}

/// One io_uring "queue pair": `qd` O_DIRECT I/Os in flight, at `base`
/// plus the plan's offsets. In poll mode `submit_and_wait` polls the
/// driver's poll queue instead of sleeping.
fn uring_worker(
    fd: i32,
    base: u64,
    plan: &Plan,
    index: u64,
    mode: KernelMode,
) -> Result<Measured, String> {
    let (qd, bs) = (plan.qd as usize, plan.bs as u32);
    // Dropped only once no I/O is in flight: an early return leaks it
    // rather than unmap memory the device may still write.
    let buf =
        std::mem::ManuallyDrop::new(Aligned::new(qd, bs as usize).map_err(|e| e.to_string())?);
    let mut ring = ring(plan.qd, mode).map_err(|e| format!("io_uring_setup({qd}): {e}"))?;
    let mut ops = plan.ops(index);
    let mut inflight: Vec<(Direction, Instant)> = vec![(Direction::Read, Instant::now()); qd];
    let mut m = Measured::new();
    let mut clock = CpuClock::new();
    let (mut measured, mut outstanding) = (0u64, 0usize);
    let mut failure = None;
    let mut next = |slot: usize,
                    ring: &mut IoUring,
                    inflight: &mut Vec<(Direction, Instant)>,
                    measured: &mut u64| {
        let (dir, off) = ops.next_op();
        let op = (dir, base + off);
        let t = Instant::now();
        inflight[slot] = (op.0, t);
        if plan.stop.measuring(t) {
            *measured += 1;
        }
        push(ring, fd, &buf, slot, op, bs)
    };
    for slot in 0..qd {
        if plan.stop.done(measured) {
            break;
        }
        next(slot, &mut ring, &mut inflight, &mut measured)?;
        outstanding += 1;
    }
    let mut done = Vec::with_capacity(qd);
    while outstanding > 0 {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("io_uring_enter: {e}"));
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        let now = Instant::now();
        clock.tick(&plan.stop, now);
        for &(slot, res) in &done {
            outstanding -= 1;
            let (dir, t0) = inflight[slot];
            if res != bs as i32 {
                failure.get_or_insert_with(|| match res {
                    r if r == -libc::EOPNOTSUPP && mode == KernelMode::Poll => {
                        "polled I/O refused (EOPNOTSUPP): the nvme driver has no poll queues; load it with poll_queues=N".to_string()
                    }
                    r if r < 0 => format!("io_uring {}: {}", dir.name(), std::io::Error::from_raw_os_error(-r)),
                    r => format!("io_uring {} moved {r} bytes of {bs}", dir.name()),
                });
                continue;
            }
            if plan.stop.measuring(t0) {
                m.dir(dir).record(now - t0, bs as u64);
            }
            if failure.is_none() && !plan.stop.done(measured) {
                next(slot, &mut ring, &mut inflight, &mut measured)?;
                outstanding += 1;
            }
        }
    }
    m.cpu = clock.used();
    drop(ring);
    drop(std::mem::ManuallyDrop::into_inner(buf));
    failure.map_or(Ok(m), Err)
}

/// The pread/pwrite fallback: qd x qpairs synchronous threads.
fn pread_cell(
    a: &BenchArgs,
    fd: i32,
    base: u64,
    range: u64,
    qpairs: u32,
    qd: u32,
) -> Result<super::Cell, String> {
    let threads = qpairs * qd;
    let mut plan = plan_for(a, range, 1, threads);
    plan.qd = qd;
    let failed = AtomicBool::new(false);
    run_cell(
        a,
        qpairs,
        &plan,
        threads as usize,
        |i| -> Result<Measured, String> {
            let bs = plan.bs as usize;
            let buf = Aligned::new(1, bs).map_err(|e| e.to_string())?;
            let mut ops = plan.ops(i as u64);
            let mut m = Measured::new();
            let mut clock = CpuClock::new();
            let mut n = 0u64;
            while !plan.stop.done(n) && !failed.load(Ordering::Relaxed) {
                let (dir, off) = ops.next_op();
                let off = base + off;
                let t0 = Instant::now();
                clock.tick(&plan.stop, t0);
                // SAFETY: buf is bs bytes, ours; fd is open; the call is synchronous.
                let r = unsafe {
                    match dir {
                        Direction::Read => {
                            libc::pread(fd, buf.block(0).cast(), bs, off as libc::off_t)
                        }
                        Direction::Write => {
                            libc::pwrite(fd, buf.block(0).cast(), bs, off as libc::off_t)
                        }
                    }
                };
                if r != bs as isize {
                    failed.store(true, Ordering::Relaxed);
                    return Err(format!(
                        "{} at {off}: {}",
                        dir.name(),
                        std::io::Error::last_os_error()
                    ));
                }
                if plan.stop.measuring(t0) {
                    m.dir(dir).record(t0.elapsed(), bs as u64);
                    n += 1;
                }
            }
            m.cpu = clock.used();
            Ok(m)
        },
    )
}

/// The kernel driver's matrix in one completion mode (None: pread), on
/// `dev` from byte `base`, over at most `cap` bytes when given.
pub(super) fn run(
    sysfs: &gpunvme::sysfs::Sysfs,
    a: &BenchArgs,
    dev: &PathBuf,
    base: u64,
    cap: Option<u64>,
    mode: Option<KernelMode>,
) -> Result<Run, Box<dyn std::error::Error>> {
    use std::os::fd::AsRawFd;
    let writes = a.rw.writes();
    let mut o = std::fs::OpenOptions::new();
    o.read(true).write(writes);
    // Writes: O_EXCL, which a block device refuses while it is mounted.
    let flags = libc::O_DIRECT | if writes { libc::O_EXCL } else { 0 };
    let f = o.custom_flags(flags).open(dev).map_err(|e| {
        format!(
            "cannot open {} with O_DIRECT{}: {e}",
            dev.display(),
            if writes {
                " and O_EXCL for writing (mounted or in use?)"
            } else {
                ""
            }
        )
    })?;
    let fd = f.as_raw_fd();
    // SAFETY: plain lseek on our descriptor.
    let size = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    let left = (size.max(0) as u64).saturating_sub(base);
    if left < a.bs {
        return Err(format!(
            "{}: size {size}, less than one {}-byte I/O from byte {base}",
            dev.display(),
            a.bs
        )
        .into());
    }
    let range = range_bytes(a, cap.map_or(left, |c| c.min(left)));
    // Without poll queues IOPOLL I/O would complete by interrupt: say so
    // and skip instead of publishing an interrupt figure as a polled one.
    let no_poll = (mode == Some(KernelMode::Poll))
        .then(|| gpunvme::passthrough::namespace::polling(sysfs, dev).err())
        .flatten();
    let (target, method) = match mode {
        Some(KernelMode::Irq) => (TARGET_KERNEL_IRQ, "kernel block device: O_DIRECT io_uring (io-uring crate), one ring of qd I/Os per queue-pair thread, interrupt completions"),
        Some(KernelMode::Poll) => (TARGET_KERNEL_POLL, "kernel block device: O_DIRECT io_uring with IORING_SETUP_IOPOLL (io-uring crate), one ring of qd I/Os per queue-pair thread, completions polled on the driver's poll queues"),
        None => (TARGET_KERNEL_PREAD, "kernel block device: O_DIRECT pread/pwrite, qd x qpairs synchronous threads"),
    };
    let mut results = Vec::new();
    let mut bar = Progress::new("bench", cells(a), Unit::Items);
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&results)?;
            bar.set_what(format!("bench {target} {qpairs} qpair(s) QD {qd}"));
            bar.set(results.len() as u64);
            if let Some(why) = &no_poll {
                results.push(skipped(qpairs, qd, why.clone()));
                continue;
            }
            let r = match mode {
                Some(m) => {
                    let plan = plan_for(a, range, qd, qpairs);
                    run_cell(a, qpairs, &plan, qpairs as usize, |i| {
                        uring_worker(fd, base, &plan, i as u64, m)
                    })
                }
                None => pread_cell(a, fd, base, range, qpairs, qd),
            };
            // A mode the driver cannot do is a skipped cell with its reason,
            // not a failed bench: the other modes still run.
            results.push(r.or_else(|why| {
                if why.contains("EOPNOTSUPP") || why.contains("io_uring_setup") {
                    Ok(skipped(qpairs, qd, why))
                } else {
                    Err(why)
                }
            })?);
        }
    }
    bar.finish();
    drop(f);
    check_interrupt(&results)?;
    Ok(Run {
        target,
        device: dev.display().to_string(),
        method: method.into(),
        range_bytes: range,
        results,
    })
}
