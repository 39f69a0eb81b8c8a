// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Test fixture, compiled only for this crate's unit tests: an in-process
//! model of what the module and the controller do behind a queue pair, so
//! [`QueuePair`] and [`crate::Io`] run through real memory without a
//! device.
//!
//! - The ioctls a [`Controller`] issues go to [`Model::ioctl`]: MAP_HOST
//!   (DMA addresses are the process's own addresses, an identity IOMMU),
//!   UNMAP (EBUSY while the file has queue pairs, as the module does) and
//!   DESTROY_QPAIR (stops the queue's controller thread first; or fails,
//!   leaving it running, when told to). Each is logged.
//! - A queue pair gets anonymous memory laid out as the module lays it out
//!   (SQ of 64-byte entries, CQ of 16-byte entries, a doorbell page with
//!   the SQ tail at 0 and the CQ head at 64, a PRP pool), and a thread that
//!   plays the controller over it: it reads the SQ tail doorbell, fetches
//!   SQEs, copies data between a RAM disk and the PRP addresses (PRP1,
//!   PRP2, PRP lists with chaining), and posts CQEs (SQ head, SQ id, CID,
//!   status, phase tag stored last) without overrunning the CQ head.
//! - Knobs: `stall` holds fetched commands without completing them (a
//!   timeout), and clearing it completes them late; `fail_destroy` makes
//!   DESTROY_QPAIR fail with EIO.

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use gpunvme_sys as sys;

use crate::command::opcode;
use crate::controller::Controller;
use crate::map::Mapping;
use crate::qpair::{Mode, PrpPool, QueuePair};

/// One ioctl the model answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    MapHost(u32),
    MapDmabuf(u32),
    Unmap(u32, Result<(), i32>),
    Destroy(u16, Result<(), i32>),
}

/// What the tests turn.
#[derive(Debug, Default)]
pub(crate) struct Knobs {
    /// Fetch commands but complete none (until cleared).
    pub(crate) stall: AtomicBool,
    /// DESTROY_QPAIR fails with EIO and the queue keeps running.
    pub(crate) fail_destroy: AtomicBool,
}

#[derive(Debug, Default)]
struct State {
    next_handle: u32,
    maps: Vec<u32>,
    /// Each imported dma-buf's memory, mapped here: its addresses are its
    /// "DMA" addresses (kept mapped until its UNMAP).
    dmabufs: Vec<(u32, Mapping)>,
    live_pairs: usize,
    next_qid: u16,
    log: Vec<Event>,
}

/// A queue's controller thread.
#[derive(Debug)]
struct Queue {
    qid: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Queue {
    fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().expect("model queue thread panicked");
        }
    }
}

/// The model: the module's bookkeeping, the RAM disk and the queues.
#[derive(Debug)]
pub(crate) struct Model {
    state: Mutex<State>,
    queues: Mutex<Vec<Queue>>,
    pub(crate) knobs: Arc<Knobs>,
    pub(crate) disk: Arc<Mutex<Vec<u8>>>,
    pub(crate) lba_size: usize,
}

/// Status codes the model answers (SCT 0).
const SC_INVALID_OPCODE: u16 = 0x01;
const SC_INVALID_NS: u16 = 0x0b;
const SC_LBA_RANGE: u16 = 0x80;

impl Model {
    /// A controller whose namespace 1 has `blocks` blocks of `lba_size`
    /// bytes, answered by a fresh model.
    pub(crate) fn controller(blocks: usize, lba_size: usize) -> (Arc<Controller>, Arc<Model>) {
        let model = Arc::new(Model {
            state: Mutex::new(State {
                next_handle: 1,
                next_qid: 1,
                ..Default::default()
            }),
            queues: Mutex::new(Vec::new()),
            knobs: Arc::new(Knobs::default()),
            disk: Arc::new(Mutex::new(vec![0u8; blocks * lba_size])),
            lba_size,
        });
        let mut c = Controller::open("/dev/null").expect("open /dev/null");
        c.model = Some(model.clone());
        (Arc::new(c), model)
    }

    /// The ioctls answered so far.
    pub(crate) fn log(&self) -> Vec<Event> {
        self.state.lock().unwrap().log.clone()
    }

    /// Handles the model still has mapped.
    pub(crate) fn mapped(&self) -> Vec<u32> {
        self.state.lock().unwrap().maps.clone()
    }

    /// Answers an ioctl as the module would (the subset the library uses
    /// once a pair exists).
    ///
    /// # Safety
    /// `arg` points to the struct `request` encodes.
    pub(crate) unsafe fn ioctl(
        &self,
        request: sys::IoctlRequest,
        arg: *mut libc::c_void,
    ) -> Result<libc::c_int, i32> {
        let mut st = self.state.lock().unwrap();
        if request == sys::GPUNVME_IOC_MAP_HOST {
            // SAFETY: the caller passes a struct gpunvme_map_host whose
            // dma_addrs has room for len / 4096 entries.
            let m = unsafe { &mut *(arg as *mut sys::gpunvme_map_host) };
            let pages = (m.len / 4096) as usize;
            for i in 0..pages {
                // SAFETY: as above.
                unsafe { *(m.dma_addrs as *mut u64).add(i) = m.addr + i as u64 * 4096 };
            }
            m.handle = st.next_handle;
            st.next_handle += 1;
            let h = m.handle;
            st.maps.push(h);
            st.log.push(Event::MapHost(h));
            Ok(0)
        } else if request == sys::GPUNVME_IOC_MAP_DMABUF {
            // A memfd (or any mappable fd) stands in for the dma-buf: its
            // pages, mapped into this process, are the "DMA" addresses.
            // SAFETY: the caller passes a struct gpunvme_map_dmabuf whose
            // dma_addrs has room for max_pages entries.
            let m = unsafe { &mut *(arg as *mut sys::gpunvme_map_dmabuf) };
            // SAFETY: lseek on the caller's open descriptor.
            let len = unsafe { libc::lseek(m.fd, 0, libc::SEEK_END) };
            if len <= 0 || len % 4096 != 0 || (len / 4096) as u64 > m.max_pages {
                return Err(libc::EINVAL);
            }
            let map = Mapping::shared(m.fd, 0, len as usize).map_err(|_| libc::EINVAL)?;
            for i in 0..(len / 4096) as usize {
                // SAFETY: as above, i < max_pages.
                unsafe { *(m.dma_addrs as *mut u64).add(i) = map.ptr() as u64 + i as u64 * 4096 };
            }
            m.handle = st.next_handle;
            m.len = len as u64;
            st.next_handle += 1;
            let h = m.handle;
            st.maps.push(h);
            st.dmabufs.push((h, map));
            st.log.push(Event::MapDmabuf(h));
            Ok(0)
        } else if request == sys::GPUNVME_IOC_UNMAP {
            // SAFETY: the caller passes a struct gpunvme_unmap.
            let h = unsafe { (*(arg as *mut sys::gpunvme_unmap)).handle };
            let r = if st.live_pairs > 0 {
                Err(libc::EBUSY)
            } else if let Some(i) = st.maps.iter().position(|&m| m == h) {
                st.maps.remove(i);
                st.dmabufs.retain(|(d, _)| *d != h);
                Ok(())
            } else {
                Err(libc::ENOENT)
            };
            st.log.push(Event::Unmap(h, r));
            r.map(|_| 0)
        } else if request == sys::GPUNVME_IOC_DESTROY_QPAIR {
            // SAFETY: the caller passes a struct gpunvme_qpair_destroy.
            let qid = unsafe { (*(arg as *mut sys::gpunvme_qpair_destroy)).qid };
            let r = if self.knobs.fail_destroy.load(Ordering::Acquire) {
                Err(libc::EIO)
            } else {
                let mut qs = self.queues.lock().unwrap();
                match qs.iter().position(|q| q.qid == qid) {
                    Some(i) => {
                        // Deleting the SQ ends its commands: after this
                        // the queue's thread touches no memory.
                        qs.remove(i).stop();
                        st.live_pairs -= 1;
                        Ok(())
                    }
                    None => Err(libc::ENOENT),
                }
            };
            st.log.push(Event::Destroy(qid, r));
            r.map(|_| 0)
        } else {
            Err(libc::ENOTTY)
        }
    }

    /// A queue pair of `depth` entries on `ctrl`, with its controller
    /// thread running. A shared pair gets a PRP pool of `depth` pages.
    pub(crate) fn qpair(&self, ctrl: &Arc<Controller>, depth: u32, mode: Mode) -> QueuePair {
        let bytes = |n: usize| n.div_ceil(4096) * 4096;
        let sq = Mapping::anonymous(bytes(depth as usize * 64)).unwrap();
        let cq = Mapping::anonymous(bytes(depth as usize * 16)).unwrap();
        let db = Mapping::anonymous(4096).unwrap();
        let pool = (mode == Mode::Shared).then(|| {
            let m = Mapping::anonymous(depth as usize * 4096).unwrap();
            let dma = m.ptr() as u64;
            PrpPool::new(m, dma).unwrap()
        });
        let qid = {
            let mut st = self.state.lock().unwrap();
            st.live_pairs += 1;
            st.next_qid += 1;
            st.next_qid - 1
        };
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = QueueCtx {
            qid,
            depth,
            sq: sq.ptr() as usize,
            cq: cq.ptr() as usize,
            db: db.ptr() as usize,
            stop: stop.clone(),
            knobs: self.knobs.clone(),
            disk: self.disk.clone(),
            lba_size: self.lba_size,
        };
        let thread = std::thread::spawn(move || ctx.run());
        self.queues.lock().unwrap().push(Queue {
            qid,
            stop,
            thread: Some(thread),
        });
        QueuePair::from_model_memory(ctrl.clone(), qid, mode, depth, sq, cq, db, pool)
    }

    /// What closing the file does: every queue stops.
    pub(crate) fn close(&self) {
        for mut q in std::mem::take(&mut *self.queues.lock().unwrap()) {
            q.stop();
        }
    }
}

/// What a queue's thread works on: addresses of the pair's mappings, which
/// outlive the thread (a pair unmaps its memory only after a successful
/// DESTROY_QPAIR, which joins the thread, or at close, which does too).
struct QueueCtx {
    qid: u16,
    depth: u32,
    sq: usize,
    cq: usize,
    db: usize,
    stop: Arc<AtomicBool>,
    knobs: Arc<Knobs>,
    disk: Arc<Mutex<Vec<u8>>>,
    lba_size: usize,
}

fn rd32(addr: usize) -> u32 {
    // SAFETY: callers pass addresses inside live queue memory or a mapped
    // buffer (the identity "DMA" of the model), dword aligned.
    unsafe { std::ptr::read_volatile(addr as *const u32) }
}

fn wr32(addr: usize, v: u32) {
    // SAFETY: as rd32.
    unsafe { std::ptr::write_volatile(addr as *mut u32, v) }
}

fn rd64(addr: usize) -> u64 {
    rd32(addr) as u64 | (rd32(addr + 4) as u64) << 32
}

impl QueueCtx {
    fn run(self) {
        let mut sq_head = 0u32;
        let mut cq_tail = 0u32;
        let mut phase = 1u32;
        let mut fetched: VecDeque<[u32; 16]> = VecDeque::new();
        while !self.stop.load(Ordering::Acquire) {
            let tail = rd32(self.db) % self.depth;
            fence(Ordering::Acquire);
            while sq_head != tail {
                let e = self.sq + sq_head as usize * 64;
                let mut dw = [0u32; 16];
                for (i, d) in dw.iter_mut().enumerate() {
                    *d = u32::from_le(rd32(e + 4 * i));
                }
                fetched.push_back(dw);
                sq_head = (sq_head + 1) % self.depth;
            }
            if !self.knobs.stall.load(Ordering::Acquire) {
                while let Some(dw) = fetched.front().copied() {
                    // Never overrun the host: the CQ is full when the next
                    // tail would meet the head it last reported.
                    let cq_head = rd32(self.db + 64) % self.depth;
                    if (cq_tail + 1) % self.depth == cq_head {
                        break;
                    }
                    fetched.pop_front();
                    let status = self.execute(&dw);
                    let e = self.cq + cq_tail as usize * 16;
                    wr32(e, 0);
                    wr32(e + 4, 0);
                    wr32(e + 8, (sq_head | (self.qid as u32) << 16).to_le());
                    // The phase tag is stored last.
                    fence(Ordering::Release);
                    wr32(
                        e + 12,
                        ((dw[0] >> 16) | phase << 16 | (status as u32) << 17).to_le(),
                    );
                    cq_tail += 1;
                    if cq_tail == self.depth {
                        cq_tail = 0;
                        phase ^= 1;
                    }
                }
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Runs one command; returns its status field (SC | SCT << 8).
    fn execute(&self, dw: &[u32; 16]) -> u16 {
        let op = dw[0] as u8;
        if op == opcode::FLUSH {
            return 0;
        }
        if !matches!(op, opcode::READ | opcode::WRITE | opcode::WRITE_ZEROES) {
            return SC_INVALID_OPCODE;
        }
        if dw[1] != 1 {
            return SC_INVALID_NS;
        }
        let slba = dw[10] as u64 | (dw[11] as u64) << 32;
        let nlb = (dw[12] & 0xffff) as u64 + 1;
        let mut disk = self.disk.lock().unwrap();
        let blocks = (disk.len() / self.lba_size) as u64;
        if slba.checked_add(nlb).is_none_or(|e| e > blocks) {
            return SC_LBA_RANGE;
        }
        let start = slba as usize * self.lba_size;
        let len = nlb as usize * self.lba_size;
        if op == opcode::WRITE_ZEROES {
            disk[start..start + len].fill(0);
            return 0;
        }
        let prp1 = dw[6] as u64 | (dw[7] as u64) << 32;
        let prp2 = dw[8] as u64 | (dw[9] as u64) << 32;
        let mut pos = start;
        for (addr, n) in segments(prp1, prp2, len) {
            let mem = addr as usize as *mut u8;
            // SAFETY: the model's DMA addresses are this process's
            // addresses of mapped buffers, which the library keeps mapped
            // (and away from Rust references) while the command runs: the
            // property these tests check.
            unsafe {
                if op == opcode::READ {
                    std::ptr::copy_nonoverlapping(disk.as_ptr().add(pos), mem, n);
                } else {
                    std::ptr::copy_nonoverlapping(mem, disk.as_mut_ptr().add(pos), n);
                }
            }
            pos += n;
        }
        0
    }
}

/// The memory segments a PRP pair names for `len` bytes: PRP1 to its page
/// end, then PRP2 as the second page or as a PRP list (whose last entry
/// in a page chains to the next list page while more than one page of
/// data remains).
fn segments(prp1: u64, prp2: u64, len: usize) -> Vec<(u64, usize)> {
    let first = len.min(4096 - (prp1 % 4096) as usize);
    let mut out = vec![(prp1, first)];
    let mut rem = len - first;
    if rem == 0 {
        return out;
    }
    if rem <= 4096 {
        out.push((prp2, rem));
        return out;
    }
    let mut entry = prp2 as usize;
    while rem > 0 {
        let last_in_page = (entry + 8) % 4096 == 0;
        let e = rd64(entry);
        if last_in_page && rem > 4096 {
            entry = e as usize;
            continue;
        }
        let n = rem.min(4096);
        out.push((e, n));
        rem -= n;
        entry += 8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prp_segments_follow_lists_and_chains() {
        assert_eq!(segments(0x1000 + 512, 0, 1024), vec![(0x1200, 1024)]);
        assert_eq!(
            segments(0x1000 + 2048, 0x5000, 4096),
            vec![(0x1800, 2048), (0x5000, 2048)]
        );
        // A chained list: 513 data pages after the first, in two list pages.
        let mut lists = Mapping::anonymous(2 * 4096).unwrap();
        let base = lists.ptr() as usize;
        // SAFETY: two live pages, exclusively ours.
        let l = unsafe { std::slice::from_raw_parts_mut(lists.ptr().cast::<u64>(), 1024) };
        for (i, e) in l.iter_mut().enumerate().take(511) {
            *e = 0x10_0000 + i as u64 * 4096;
        }
        l[511] = (base + 4096) as u64;
        l[512] = 0x90_0000;
        l[513] = 0x91_0000;
        let segs = segments(0x1000, base as u64, 514 * 4096);
        assert_eq!(segs.len(), 514);
        assert_eq!(segs[1], (0x10_0000, 4096));
        assert_eq!(segs[511], (0x10_0000 + 510 * 4096, 4096));
        assert_eq!(segs[512], (0x90_0000, 4096));
        assert_eq!(segs[513], (0x91_0000, 4096));
        let _ = &mut lists;
    }
}
