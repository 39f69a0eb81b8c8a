//! A minimal io_uring (raw syscalls through libc, no crate): one ring,
//! IORING_OP_READ only, for the kernel-driver side of `gpunvme bench`.

use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicU32, Ordering};

const IORING_OFF_SQ_RING: i64 = 0;
const IORING_OFF_CQ_RING: i64 = 0x800_0000;
const IORING_OFF_SQES: i64 = 0x1000_0000;
const IORING_ENTER_GETEVENTS: u32 = 1;
const IORING_OP_READ: u8 = 22;

#[repr(C)]
#[derive(Default)]
struct SqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    flags: u32,
    dropped: u32,
    array: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct CqOffsets {
    head: u32,
    tail: u32,
    ring_mask: u32,
    ring_entries: u32,
    overflow: u32,
    cqes: u32,
    flags: u32,
    resv1: u32,
    user_addr: u64,
}

#[repr(C)]
#[derive(Default)]
struct Params {
    sq_entries: u32,
    cq_entries: u32,
    flags: u32,
    sq_thread_cpu: u32,
    sq_thread_idle: u32,
    features: u32,
    wq_fd: u32,
    resv: [u32; 3],
    sq_off: SqOffsets,
    cq_off: CqOffsets,
}

const _: () = assert!(std::mem::size_of::<Params>() == 120);

#[repr(C)]
#[derive(Default, Clone, Copy)]
struct RawSqe {
    opcode: u8,
    flags: u8,
    ioprio: u16,
    fd: i32,
    off: u64,
    addr: u64,
    len: u32,
    rw_flags: u32,
    user_data: u64,
    pad: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<RawSqe>() == 64);

#[repr(C)]
#[derive(Clone, Copy)]
struct RawCqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

struct Map(*mut u8, usize);
impl Map {
    fn new(fd: RawFd, len: usize, off: i64) -> io::Result<Self> {
        // SAFETY: fresh shared mapping of the ring fd.
        let p = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map(p.cast(), len))
    }
    fn at<T>(&self, off: u32) -> *mut T {
        // SAFETY: offsets come from the kernel and lie in the mapping.
        unsafe { self.0.add(off as usize).cast() }
    }
}
impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0.cast(), self.1) };
    }
}

/// One io_uring instance.
pub struct Uring {
    fd: RawFd,
    sq: Map,
    cq: Map,
    sqes: Map,
    p: Params,
    pending: u32,
}

// SAFETY: used by one thread at a time (moved into a worker).
unsafe impl Send for Uring {}

impl Uring {
    /// A ring with at least `entries` SQ entries.
    pub fn new(entries: u32) -> io::Result<Self> {
        let mut p = Params::default();
        // SAFETY: io_uring_setup(entries, params*): `p` is a valid params struct.
        let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, entries, &mut p as *mut Params) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = fd as RawFd;
        let ring = (|| {
            let sq = Map::new(
                fd,
                (p.sq_off.array + p.sq_entries * 4) as usize,
                IORING_OFF_SQ_RING,
            )?;
            let cq = Map::new(
                fd,
                (p.cq_off.cqes as usize) + p.cq_entries as usize * 16,
                IORING_OFF_CQ_RING,
            )?;
            let sqes = Map::new(fd, p.sq_entries as usize * 64, IORING_OFF_SQES)?;
            Ok::<_, io::Error>((sq, cq, sqes))
        })();
        match ring {
            Ok((sq, cq, sqes)) => Ok(Uring {
                fd,
                sq,
                cq,
                sqes,
                p,
                pending: 0,
            }),
            Err(e) => {
                // SAFETY: our fd.
                unsafe { libc::close(fd) };
                Err(e)
            }
        }
    }

    fn atomic(&self, m: &Map, off: u32) -> &AtomicU32 {
        // SAFETY: ring head/tail are aligned u32s shared with the kernel,
        // accessed atomically as liburing does.
        unsafe { &*m.at::<AtomicU32>(off) }
    }

    /// Queues a read of `len` bytes at `off` of `fd` into `buf`.
    pub fn push_read(&mut self, fd: RawFd, buf: *mut u8, len: u32, off: u64, user_data: u64) {
        let tail_a = self.atomic(&self.sq, self.p.sq_off.tail);
        let tail = tail_a.load(Ordering::Relaxed);
        // SAFETY: ring_mask is a u32 in the SQ ring.
        let mask = unsafe { *self.sq.at::<u32>(self.p.sq_off.ring_mask) };
        let idx = tail & mask;
        let sqe = RawSqe {
            opcode: IORING_OP_READ,
            fd,
            off,
            addr: buf as u64,
            len,
            user_data,
            ..Default::default()
        };
        // SAFETY: idx <= mask < sq_entries: inside the SQE array and the
        // index array.
        unsafe {
            ptr::write_volatile(self.sqes.at::<RawSqe>(0).add(idx as usize), sqe);
            ptr::write_volatile(
                self.sq.at::<u32>(self.p.sq_off.array).add(idx as usize),
                idx,
            );
        }
        tail_a.store(tail.wrapping_add(1), Ordering::Release);
        self.pending += 1;
    }

    /// Submits what was pushed and waits for at least `min` completions.
    pub fn enter(&mut self, min: u32) -> io::Result<()> {
        loop {
            // SAFETY: io_uring_enter on our ring fd, no sigset.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_io_uring_enter,
                    self.fd,
                    self.pending,
                    min,
                    IORING_ENTER_GETEVENTS,
                    ptr::null::<libc::c_void>(),
                    0usize,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            self.pending -= (r as u32).min(self.pending);
            return Ok(());
        }
    }

    /// Pops every completion: (user_data, res).
    pub fn reap(&mut self, out: &mut Vec<(u64, i32)>) {
        let head_a = self.atomic(&self.cq, self.p.cq_off.head);
        let tail = self
            .atomic(&self.cq, self.p.cq_off.tail)
            .load(Ordering::Acquire);
        let mut head = head_a.load(Ordering::Relaxed);
        // SAFETY: ring_mask is a u32 in the CQ ring.
        let mask = unsafe { *self.cq.at::<u32>(self.p.cq_off.ring_mask) };
        while head != tail {
            // SAFETY: head & mask indexes the CQE array.
            let c = unsafe {
                ptr::read_volatile(
                    self.cq
                        .at::<RawCqe>(self.p.cq_off.cqes)
                        .add((head & mask) as usize),
                )
            };
            out.push((c.user_data, c.res));
            head = head.wrapping_add(1);
        }
        head_a.store(head, Ordering::Release);
    }
}

impl Drop for Uring {
    fn drop(&mut self) {
        // SAFETY: our fd; the maps are dropped after (fields), which is fine
        // for io_uring (the mappings keep the ring alive).
        unsafe { libc::close(self.fd) };
    }
}
