// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A raw queue pair whose CQ the controller writes into a dma-buf
//! (`QueuePair::create_raw_cq_in`, `GPUNVME_QPAIR_CQ_IN_MAP`): a udmabuf
//! stands in for GPU memory, and this program polls the CQ through the
//! udmabuf's memfd mapping, as a GPU polls its CQ in its own memory.
//! Writes a page of a known pattern per command, reads it back, checks
//! every byte, over three passes of the CQ. Owner mode (root, translating
//! IOMMU); prints KTAP. Run in the test VM (tests/vm/suite.sh, boot 4):
//!
//!     cq_in_dmabuf /dev/gpunvme0

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use gpunvme::{pattern, Controller, DmaBuffer, DmabufMapping, Prp, QueuePair, Sqe};

const DEPTH: u32 = 16;
const CQ_BYTES: usize = 64 * 1024;

/// A udmabuf over a sealed memfd of `len` bytes, and the memfd's mapping.
fn udmabuf(len: usize) -> std::io::Result<(OwnedFd, *mut u8)> {
    #[repr(C)]
    struct UdmabufCreate {
        memfd: u32,
        flags: u32,
        offset: u64,
        size: u64,
    }
    const UDMABUF_CREATE: libc::c_ulong = 0x4018_7542; // _IOW('u', 0x42, struct udmabuf_create)
    let err = std::io::Error::last_os_error;
    // SAFETY: plain syscalls on descriptors this function owns; the
    // mapping is `len` bytes of the memfd, kept for the program's life.
    unsafe {
        let memfd = libc::memfd_create(c"cq".as_ptr(), libc::MFD_ALLOW_SEALING);
        if memfd < 0 || libc::ftruncate(memfd, len as i64) != 0 {
            return Err(err());
        }
        let memfd = OwnedFd::from_raw_fd(memfd);
        use std::os::fd::AsRawFd;
        if libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) != 0 {
            return Err(err());
        }
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            memfd.as_raw_fd(),
            0,
        );
        if p == libc::MAP_FAILED {
            return Err(err());
        }
        let dev = libc::open(c"/dev/udmabuf".as_ptr(), libc::O_RDWR);
        if dev < 0 {
            return Err(err());
        }
        let c = UdmabufCreate {
            memfd: memfd.as_raw_fd() as u32,
            flags: 0x01, // UDMABUF_FLAGS_CLOEXEC
            offset: 0,
            size: len as u64,
        };
        let fd = libc::ioctl(dev, UDMABUF_CREATE, &c);
        libc::close(dev);
        if fd < 0 {
            return Err(err());
        }
        Ok((OwnedFd::from_raw_fd(fd), p.cast()))
    }
}

struct Tap(u32, u32);

impl Tap {
    fn check(&mut self, ok: bool, what: &str) {
        self.0 += 1;
        if !ok {
            self.1 += 1;
        }
        println!("{}ok {} {what}", if ok { "" } else { "not " }, self.0);
    }
}

fn main() {
    let node = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "/dev/gpunvme0".into());
    println!("TAP version 13\n1..6");
    let mut t = Tap(0, 0);
    if let Err(e) = run(&node, &mut t) {
        println!("# {e}");
        while t.0 < 6 {
            t.check(false, "not reached");
        }
    }
    println!("# {} passed, {} failed", t.0 - t.1, t.1);
    std::process::exit(if t.1 == 0 { 0 } else { 1 });
}

fn run(node: &str, t: &mut Tap) -> Result<(), Box<dyn std::error::Error>> {
    let ctrl = Arc::new(Controller::open(node)?);
    let info = ctrl.info()?;
    let ns = info.namespaces[0];
    ctrl.claim_owner()?;
    let (buf, cq) = udmabuf(CQ_BYTES)?;
    // SAFETY: `cq` is the memfd's CQ_BYTES mapping; nothing else uses it yet.
    unsafe { std::ptr::write_bytes(cq, 0, CQ_BYTES) };
    let map = DmabufMapping::new(&ctrl, buf.as_fd(), CQ_BYTES)?;
    let handle = map.handle();
    let mut qp = QueuePair::create_raw_cq_in(&ctrl, DEPTH, map)?;
    t.check(
        qp.memory().cq.is_null(),
        "create_raw_cq_in: the CQ is not mapped here",
    );
    t.check(
        matches!(qp.reap(), Err(gpunvme::Error::Invalid(_))),
        "reap() on it is refused",
    );

    let lbs = ns.lba_size as usize;
    let per = (4096 / lbs) as u32;
    let mut data = DmaBuffer::new(&ctrl, 2)?;
    // Driven through its memory as a GPU drives it (gpu-run --cq gpu):
    // SQEs into the SQ, the doorbells in BAR0, CQEs polled in the dma-buf.
    let m = qp.memory();
    let (mut tail, mut head, mut phase) = (0usize, 0usize, 1u32);
    let (mut bad_data, mut bad_cqe) = (0, 0);
    for i in 0..3 * DEPTH as u64 / 2 {
        let lba = 9500 + i * per as u64;
        pattern::fill(71 + i, lba, lbs, &mut data.as_mut_slice()[..4096]);
        data.as_mut_slice()[4096..].fill(0);
        for (n, (mut sqe, what)) in [
            (
                Sqe::write(
                    ns.nsid,
                    lba,
                    per,
                    Prp {
                        prp1: data.dma_addr(0),
                        prp2: 0,
                    },
                ),
                "write",
            ),
            (
                Sqe::read(
                    ns.nsid,
                    lba,
                    per,
                    Prp {
                        prp1: data.dma_addr(4096),
                        prp2: 0,
                    },
                ),
                "read",
            ),
        ]
        .into_iter()
        .enumerate()
        {
            let cid = (i * 2 + n as u64) as u16 + 1;
            sqe.set_cid(cid);
            // SAFETY: `tail` < DEPTH entries of the mapped SQ; the doorbell
            // offsets are dwords of the mapped page (checked at creation);
            // the SQE names `data`, which outlives the command (waited for
            // below before `data` is touched again).
            unsafe {
                let e = m.sq.add(tail * 64).cast::<u32>();
                for (k, w) in sqe.dw.iter().enumerate() {
                    std::ptr::write_volatile(e.add(k), w.to_le());
                }
                tail = (tail + 1) % DEPTH as usize;
                std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
                let db = m.doorbell_page.add(m.sq_db_offset as usize).cast::<u32>();
                std::ptr::write_volatile(db, tail as u32);
            }
            // SAFETY: `head` < DEPTH: inside the first 4 KiB of the mapping.
            let e = unsafe { cq.add(head * 16).cast::<u32>() };
            let t0 = std::time::Instant::now();
            while (unsafe { std::ptr::read_volatile(e.add(3)) } >> 16) & 1 != phase {
                if t0.elapsed() > std::time::Duration::from_secs(5) {
                    return Err(format!("{what} {i}: no completion in 5 s").into());
                }
            }
            std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
            // SAFETY: as above.
            let dw3 = unsafe { std::ptr::read_volatile(e.add(3)) };
            if dw3 & 0xffff != cid as u32 || (dw3 >> 17) != 0 {
                bad_cqe += 1;
            }
            head += 1;
            if head == DEPTH as usize {
                head = 0;
                phase ^= 1;
            }
            // SAFETY: the CQ head doorbell, a dword of the mapped page.
            unsafe {
                let db = m.doorbell_page.add(m.cq_db_offset as usize).cast::<u32>();
                std::ptr::write_volatile(db, head as u32);
            }
        }
        if pattern::first_mismatch(71 + i, lba, lbs, &data.as_slice()[4096..]).is_some() {
            bad_data += 1;
        }
    }
    t.check(
        bad_cqe == 0,
        "48 completions in the dma-buf: right command IDs, success",
    );
    t.check(
        bad_data == 0,
        "24 pages written and read back: every byte matches",
    );
    // SAFETY: bytes past the CQ's first page are the mapping's, untouched.
    let past = unsafe { std::slice::from_raw_parts(cq.add(4096), CQ_BYTES - 4096) };
    t.check(past.iter().all(|&b| b == 0), "nothing written past the CQ");
    drop(qp);
    // Destroyed first, so the UNMAP of its CQ's mapping went through: not
    // parked (EBUSY) and not left to close.
    t.check(
        ctrl.deferred_unmaps() == 0 && ctrl.kept_until_close() == 0,
        &format!("dropping the pair destroys it, then releases mapping {handle}"),
    );
    Ok(())
}
