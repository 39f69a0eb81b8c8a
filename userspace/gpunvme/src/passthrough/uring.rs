// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Checked commands to the kernel: NVMe passthrough on the namespace's
//! generic character device (`/dev/ngXnY`) through io_uring, with
//! `IORING_OP_URING_CMD` and `NVME_URING_CMD_IO` (Linux 5.19+): 128-byte
//! SQEs carrying a `struct nvme_uring_cmd`, 32-byte CQEs carrying the NVMe
//! status (`res`) and completion dword 0 (`big_cqe[0]`).
//!
//! - Polled (`IORING_SETUP_IOPOLL`) when every path to the namespace has
//!   poll queues; else completions come by interrupt and the relay reads
//!   them from the CQ ring without a system call.
//! - Contiguous data goes through an io_uring fixed buffer (the payload
//!   region registered once, `IORING_URING_CMD_FIXED`: no page pinning per
//!   command) where registration worked, by address otherwise;
//!   scattered data as an iovec array (`NVME_URING_CMD_IO_VEC`).
//! - The command timeout is the kernel's (`nvme_core.io_timeout`, 30 s)
//!   unless set: a timeout makes the kernel abort the command and may reset
//!   the controller, which on a shared SSD is everyone's problem.
//!
//! The `io-uring` crate provides the ring (its `Entry128`/`Entry32` set up
//! SQE128 and CQE32, `UringCmd80` the command): its mmap and memory-order
//! code is maintained and tested, which hand-written syscalls would not be
//! here.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::check::{Checked, Data};
use super::submit::{Done, Submit, Via};

/// `_IOWR('N', 0x80, struct nvme_uring_cmd)` (72 bytes).
pub(crate) const NVME_URING_CMD_IO: u32 = 0xC048_4E80;
/// `_IOWR('N', 0x81, struct nvme_uring_cmd)`: `addr` is an iovec array,
/// `data_len` its length.
pub(crate) const NVME_URING_CMD_IO_VEC: u32 = 0xC048_4E81;

/// `struct nvme_uring_cmd` (include/uapi/linux/nvme_ioctl.h) in the SQE's
/// 80 command bytes.
pub(crate) fn uring_cmd(c: &Checked, addr: u64, data_len: u32, timeout_ms: u32) -> [u8; 80] {
    let mut b = [0u8; 80];
    b[0] = c.opcode;
    // flags (1), rsvd1 (2..4), cdw2/3 (8..16), metadata (16..24),
    // metadata_len (32..36), cdw14/15 (56..64), rsvd2 (68..72): zero.
    b[4..8].copy_from_slice(&c.nsid.to_ne_bytes());
    b[24..32].copy_from_slice(&addr.to_ne_bytes());
    b[36..40].copy_from_slice(&data_len.to_ne_bytes());
    b[40..44].copy_from_slice(&(c.slba as u32).to_ne_bytes());
    b[44..48].copy_from_slice(&((c.slba >> 32) as u32).to_ne_bytes());
    b[48..52].copy_from_slice(&c.cdw12.to_ne_bytes());
    b[52..56].copy_from_slice(&c.cdw13.to_ne_bytes());
    b[64..68].copy_from_slice(&timeout_ms.to_ne_bytes());
    b
}

/// One relay thread's ring.
pub(crate) struct Uring {
    ring: IoUring<squeue::Entry128, cqueue::Entry32>,
    fd: RawFd,
    iopoll: bool,
    timeout_ms: u32,
    /// Which fixed-buffer slots hold a region (false: none, or the
    /// registration failed).
    fixed: Vec<bool>,
    fixed_ok: bool,
    /// The iovecs last registered, to update only what changed.
    last: Vec<(usize, usize)>,
}

impl Uring {
    /// A ring of `entries` for `fd` (an open `/dev/ngXnY`); polled with
    /// `iopoll`. Fixed-buffer slots are reserved when `fixed_buffers`.
    pub(crate) fn new(
        fd: RawFd,
        entries: u32,
        iopoll: bool,
        timeout_ms: u32,
        fixed_buffers: bool,
    ) -> io::Result<Self> {
        let mut b = IoUring::<squeue::Entry128, cqueue::Entry32>::builder();
        if iopoll {
            b.setup_iopoll();
        }
        // Room for every pair's completions at once in the common case;
        // beyond it the kernel keeps them (reap() flushes).
        b.setup_cqsize(entries * 16);
        let ring = b.build(entries)?;
        let fixed_ok = fixed_buffers
            && ring
                .submitter()
                .register_buffers_sparse(super::addr::MAX_REGIONS as u32)
                .is_ok();
        Ok(Uring {
            ring,
            fd,
            iopoll,
            timeout_ms,
            fixed: Vec::new(),
            fixed_ok,
            last: Vec::new(),
        })
    }
}

impl Submit for Uring {
    fn room(&mut self) -> usize {
        let sq = self.ring.submission();
        sq.capacity() - sq.len()
    }

    fn push(&mut self, tag: u64, c: &Checked, iov: &[libc::iovec]) -> Via {
        let fd = types::Fd(self.fd);
        let (e, via) = match c.data {
            Data::None => (
                opcode::UringCmd80::new(fd, NVME_URING_CMD_IO)
                    .cmd(uring_cmd(c, 0, 0, self.timeout_ms))
                    .build(),
                Via::Plain,
            ),
            Data::Contig { addr, region } => {
                // Only where this ring's registration of that slot covers
                // the data: never an older buffer's pages.
                let fixed = self.fixed.get(region).copied().unwrap_or(false)
                    && self.last.get(region).is_some_and(|&(b, l)| {
                        addr as usize >= b && addr as usize + c.data_len as usize <= b + l
                    });
                let e = opcode::UringCmd80::new(fd, NVME_URING_CMD_IO).cmd(uring_cmd(
                    c,
                    addr,
                    c.data_len,
                    self.timeout_ms,
                ));
                if fixed {
                    (e.buf_index(Some(region as u16)).build(), Via::Fixed)
                } else {
                    (e.build(), Via::Plain)
                }
            }
            Data::Vectored { n } => (
                opcode::UringCmd80::new(fd, NVME_URING_CMD_IO_VEC)
                    .cmd(uring_cmd(c, iov.as_ptr() as u64, n as u32, self.timeout_ms))
                    .build(),
                Via::Vectored,
            ),
        };
        let e = e.user_data(tag);
        // SAFETY: the command names memory of registered payload regions
        // (checked), which stays mapped while a pair can have commands in
        // flight (UNMAP is refused while pairs live), and the iovecs,
        // which the relay keeps untouched until the command completes.
        // The relay checked room() first.
        let pushed = unsafe { self.ring.submission().push(&e) };
        debug_assert!(pushed.is_ok(), "push after room() said there was room");
        via
    }

    fn flush(&mut self, waiting: bool) -> io::Result<()> {
        let queued = !self.ring.submission().is_empty();
        if !(queued || self.iopoll && waiting) {
            return Ok(());
        }
        loop {
            // In polled mode this also polls (IORING_ENTER_GETEVENTS).
            match self.ring.submit() {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                // The CQ ring is full or the kernel is short of memory for
                // a moment: the SQEs stay queued for the next pass.
                Err(e) if matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EAGAIN)) => {
                    return Ok(())
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn reap(&mut self, out: &mut Vec<Done>) {
        // Completions that found the CQ ring full wait in the kernel
        // (IORING_FEAT_NODROP) until an io_uring_enter flushes them.
        if self.ring.submission().cq_overflow() {
            let _ = self.ring.submit();
        }
        for c in self.ring.completion() {
            out.push(Done {
                tag: c.user_data(),
                res: c.result(),
                result: c.big_cqe()[0],
            });
        }
    }

    fn wait(&mut self, timeout: Duration) {
        if self.iopoll || !self.ring.completion().is_empty() {
            return;
        }
        let ts = types::Timespec::new()
            .sec(timeout.as_secs())
            .nsec(timeout.subsec_nanos());
        let args = types::SubmitArgs::new().timespec(&ts);
        // ETIME (the timeout) and EINTR are the usual answers.
        let _ = self.ring.submitter().submit_with_args(1, &args);
    }

    fn set_buffers(&mut self, iovecs: &[libc::iovec]) -> Result<(), String> {
        if !self.fixed_ok {
            self.fixed.clear();
            return Err("this ring has no fixed-buffer table".into());
        }
        let mut failed = None;
        let n = iovecs.len().max(self.last.len());
        self.fixed.resize(n, false);
        self.last.resize(n, (0, 0));
        for i in 0..n {
            let want = iovecs
                .get(i)
                .map_or((0, 0), |v| (v.iov_base as usize, v.iov_len));
            if self.last[i] == want {
                continue;
            }
            let v = [libc::iovec {
                iov_base: want.0 as *mut libc::c_void,
                iov_len: want.1,
            }];
            // SAFETY: a payload region's memory, which stays mapped until
            // it is removed from the region table, and then from this
            // table (an empty iovec) before anything reuses it for a new
            // region; the kernel pins the pages meanwhile.
            match unsafe {
                self.ring
                    .submitter()
                    .register_buffers_update(i as u32, &v, None)
            } {
                Ok(()) => {
                    self.last[i] = want;
                    self.fixed[i] = want.1 != 0;
                }
                Err(e) => {
                    self.fixed[i] = false;
                    failed.get_or_insert_with(|| {
                        format!(
                            "registering {} bytes as io_uring fixed buffer {i}: {e}",
                            want.1
                        )
                    });
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers_and_the_command_layout_are_the_kernels() {
        // _IOWR('N', 0x80, 72 bytes): dir 3 << 30, size 72 << 16, type 'N' << 8.
        assert_eq!(
            NVME_URING_CMD_IO,
            (3 << 30) | (72 << 16) | (b'N' as u32) << 8 | 0x80
        );
        assert_eq!(NVME_URING_CMD_IO_VEC, NVME_URING_CMD_IO + 1);
        let c = Checked {
            opcode: 0x02,
            nsid: 7,
            slba: 0x1_2345_6789,
            cdw12: 0x8000_0007,
            cdw13: 0x12,
            data_len: 4096,
            data: Data::None,
        };
        let b = uring_cmd(&c, 0xdead_beef_0000, 4096, 250);
        let dw = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
        assert_eq!(b[0], 0x02);
        assert_eq!(b[1], 0, "flags: no SGL, not fused");
        assert_eq!(dw(4), 7);
        assert_eq!((dw(8), dw(12)), (0, 0), "cdw2/3");
        assert_eq!(
            u64::from_ne_bytes(b[16..24].try_into().unwrap()),
            0,
            "no metadata"
        );
        assert_eq!(
            u64::from_ne_bytes(b[24..32].try_into().unwrap()),
            0xdead_beef_0000
        );
        assert_eq!((dw(32), dw(36)), (0, 4096), "metadata_len, data_len");
        assert_eq!((dw(40), dw(44)), (0x2345_6789, 1), "SLBA");
        assert_eq!((dw(48), dw(52)), (0x8000_0007, 0x12));
        assert_eq!((dw(56), dw(60), dw(64), dw(68)), (0, 0, 250, 0));
        assert!(b[72..].iter().all(|&x| x == 0));
    }

    /// The ring against /dev/null, not an NVMe namespace: each command goes
    /// to the kernel and comes back under its tag, one through the fixed
    /// buffer registered, one by address; /dev/null answers uring_cmd with
    /// success since Linux 6.2 (its benchmarking stub), EOPNOTSUPP before.
    /// Needs io_uring with SQE128 (Linux 5.19+).
    #[test]
    fn commands_go_through_the_kernel_and_come_back_by_tag() {
        if let Err(why) = crate::passthrough::uring_support() {
            eprintln!("SKIP: {why}");
            return;
        }
        let f = std::fs::File::open("/dev/null").unwrap();
        use std::os::fd::AsRawFd;
        let mut u = Uring::new(f.as_raw_fd(), 8, false, 0, true).unwrap();
        let mut page = vec![0u8; 8192];
        let base = page.as_mut_ptr() as usize;
        let v = [libc::iovec {
            iov_base: page.as_mut_ptr().cast(),
            iov_len: page.len(),
        }];
        assert!(u.set_buffers(&v).is_ok(), "fixed buffer 0 registered");
        let c = Checked {
            opcode: 0x02,
            nsid: 1,
            slba: 0,
            cdw12: 0,
            cdw13: 0,
            data_len: 4096,
            data: Data::Contig {
                addr: base as u64,
                region: 0,
            },
        };
        assert!(u.room() >= 1);
        assert_eq!(u.push(0xfeed_0001, &c, &[]), Via::Fixed);
        // Outside the registered buffer: by address, not fixed.
        let c2 = Checked {
            data: Data::Contig {
                addr: base as u64 + 4096,
                region: 3,
            },
            ..c
        };
        assert_eq!(u.push(0xfeed_0002, &c2, &[]), Via::Plain);
        u.flush(true).unwrap();
        let mut done = Vec::new();
        let start = std::time::Instant::now();
        while done.len() < 2 && start.elapsed() < Duration::from_secs(5) {
            u.wait(Duration::from_millis(10));
            u.reap(&mut done);
        }
        done.sort_by_key(|d| d.tag);
        assert_eq!(
            done.iter().map(|d| d.tag).collect::<Vec<_>>(),
            [0xfeed_0001, 0xfeed_0002]
        );
        assert!(
            done.iter()
                .all(|d| d.res == 0 || d.res == -libc::EOPNOTSUPP),
            "{done:?}"
        );
        drop(page);
    }
}
