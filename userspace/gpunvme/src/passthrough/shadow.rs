// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A passthrough pair's shadow memory, laid out exactly as the module lays
//! out a shared pair (`GPUNVME_IOC_CREATE_QPAIR`): a shadow SQ of 64-byte
//! entries, a CQ mirror of 16-byte entries, a 4 KiB page of doorbell cells
//! (SQ tail at byte 0, CQ head at byte 64, each on its own cache line) and
//! a PRP pool, each a whole number of 4 KiB pages. The device library
//! (`kernels/include/gpunvme/queue.h`, `pqueue.h`) drives it unchanged.
//!
//! It lives in one memfd per back end (the [`Arena`]), so the same pages
//! are mapped twice: by the relay (locked in memory where the limit
//! allows) and by whoever drives the queue (`QueuePair` maps it at the
//! offsets CREATE_QPAIR returned, as it maps the module's; a GPU registers
//! that mapping with its runtime). A pair's range is never handed out
//! again: once the pair is gone its pages are punched out of the file.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{fence, Ordering};
use std::sync::Mutex;

use super::relay::Port;
use crate::map::Mapping;

const PAGE: u64 = 4096;

/// Byte offsets of the doorbell cells in the doorbell page.
pub(crate) const SQ_TAIL_CELL: u32 = 0;
pub(crate) const CQ_HEAD_CELL: u32 = 64;

fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

/// The memfd that holds every pair's shadow memory.
#[derive(Debug)]
pub(crate) struct Arena {
    file: File,
    next: Mutex<u64>,
}

impl Arena {
    pub(crate) fn new() -> std::io::Result<Self> {
        let name = c"gpunvme-passthrough";
        // SAFETY: a NUL-terminated name; memfd_create has no other input.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arena {
            // SAFETY: a fresh descriptor nothing else owns.
            file: unsafe { File::from_raw_fd(fd) },
            next: Mutex::new(0),
        })
    }

    pub(crate) fn file(&self) -> &File {
        &self.file
    }

    /// A fresh range of `len` bytes (page multiple), zero-filled.
    fn alloc(&self, len: u64) -> std::io::Result<u64> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let off = *next;
        self.file.set_len(off + len)?;
        *next = off + len;
        Ok(off)
    }

    /// Gives a range's pages back (the file keeps its size; the range is
    /// never handed out again, so nothing maps it by accident).
    pub(crate) fn release(&self, off: u64, len: u64) {
        // SAFETY: fallocate on our own descriptor; punching a hole in a
        // range nobody maps any more only frees its pages.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                off as libc::off_t,
                len as libc::off_t,
            )
        };
    }
}

/// Where one pair's parts are in the arena (what CREATE_QPAIR returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) base: u64,
    pub(crate) sq: (u64, u64),
    pub(crate) cq: (u64, u64),
    pub(crate) db: (u64, u64),
    pub(crate) pool: (u64, u64),
}

impl Layout {
    /// The parts of a pair of `depth` entries whose pool holds `entries`
    /// list entries per command, from arena offset `base`.
    pub(crate) fn new(base: u64, depth: u32, entries: u64) -> Self {
        let sq = pages(u64::from(depth) * 64);
        let cq = pages(u64::from(depth) * 16);
        let pool = pages(u64::from(depth) * entries * 8);
        Layout {
            base,
            sq: (base, sq),
            cq: (base + sq, cq),
            db: (base + sq + cq, PAGE),
            pool: (base + sq + cq + PAGE, pool),
        }
    }

    pub(crate) fn len(&self) -> u64 {
        self.pool.0 + self.pool.1 - self.base
    }
}

/// The relay's own mapping of one pair's shadow memory.
#[derive(Debug)]
pub(crate) struct PairMemory {
    map: Mapping,
    layout: Layout,
    depth: u32,
}

impl PairMemory {
    /// Allocates and maps the memory of a pair of `depth` entries.
    pub(crate) fn new(arena: &Arena, depth: u32, entries: u64) -> std::io::Result<Self> {
        let probe = Layout::new(0, depth, entries);
        let base = arena.alloc(probe.len())?;
        let layout = Layout::new(base, depth, entries);
        let map = Mapping::shared(arena.file.as_raw_fd(), base, layout.len() as usize)?;
        // Pinned where RLIMIT_MEMLOCK allows; where it does not, the GPU
        // runtime's registration of the queue's mapping pins the pages the
        // GPU uses anyway, so a failure is not an error.
        // SAFETY: our own live mapping; mlock only pins its pages.
        let _ = unsafe { libc::mlock(map.ptr().cast(), map.len()) };
        Ok(PairMemory { map, layout, depth })
    }

    pub(crate) fn layout(&self) -> Layout {
        self.layout
    }

    /// This process's address of the relay's view of a part.
    fn at(&self, part: (u64, u64)) -> *mut u8 {
        // SAFETY: every part lies inside the mapping (Layout::new).
        unsafe { self.map.ptr().add((part.0 - self.layout.base) as usize) }
    }

    /// The relay's address of the PRP pool, and its length.
    pub(crate) fn pool(&self) -> (u64, u64) {
        (self.at(self.layout.pool) as u64, self.layout.pool.1)
    }

    /// The relay's view of the SQ, the mirror, the cells' page and the
    /// pool (for code that plays the GPU in the same process: the
    /// benchmark).
    pub(crate) fn parts(&self) -> [*mut u8; 4] {
        [
            self.at(self.layout.sq),
            self.at(self.layout.cq),
            self.at(self.layout.db),
            self.at(self.layout.pool),
        ]
    }

    fn cell(&self, off: u32) -> *const u32 {
        // SAFETY: both cells are inside the doorbell page.
        unsafe { self.at(self.layout.db).add(off as usize).cast() }
    }
}

impl Port for PairMemory {
    fn shadow_sq_tail(&self) -> u32 {
        // SAFETY: a dword of the live doorbell page; the GPU writes it
        // concurrently, so it is read once, volatile.
        u32::from_le(unsafe { std::ptr::read_volatile(self.cell(SQ_TAIL_CELL)) })
    }
    fn shadow_cq_head(&self) -> u32 {
        // SAFETY: as above.
        u32::from_le(unsafe { std::ptr::read_volatile(self.cell(CQ_HEAD_CELL)) })
    }
    fn shadow_sqe(&self, slot: u32) -> [u32; 16] {
        debug_assert!(slot < self.depth);
        let e = self.at(self.layout.sq).cast::<u32>();
        let mut dw = [0u32; 16];
        for (i, d) in dw.iter_mut().enumerate() {
            // SAFETY: slot < depth and the SQ holds depth 64-byte entries;
            // the GPU may write it: each dword read once into the copy.
            *d = u32::from_le(unsafe { std::ptr::read_volatile(e.add(slot as usize * 16 + i)) });
        }
        dw
    }
    fn mirror_cqe(&self, slot: u32, dw: [u32; 4]) {
        debug_assert!(slot < self.depth);
        let e = self.at(self.layout.cq).cast::<u32>();
        // SAFETY: slot < depth and the mirror holds depth 16-byte entries;
        // only this relay writes it. Dwords 0-2 first; the dword with the
        // phase after a release fence, so a reader that sees the phase sees
        // the entry.
        unsafe {
            let e = e.add(slot as usize * 4);
            for (i, w) in dw.iter().enumerate().take(3) {
                std::ptr::write_volatile(e.add(i), w.to_le());
            }
            fence(Ordering::Release);
            std::ptr::write_volatile(e.add(3), dw[3].to_le());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_the_modules() {
        // Depth 32, 128 entries per command: SQ 2 KiB -> a page, CQ 512 B
        // -> a page, the cells' page, a pool of 32 KiB.
        let l = Layout::new(8192, 32, 128);
        assert_eq!(l.sq, (8192, 4096));
        assert_eq!(l.cq, (12288, 4096));
        assert_eq!(l.db, (16384, 4096));
        assert_eq!(l.pool, (20480, 32768));
        assert_eq!(l.len(), 3 * 4096 + 32768);
        let l = Layout::new(0, 1024, 512);
        assert_eq!((l.sq.1, l.cq.1, l.pool.1), (65536, 16384, 4 << 20));
    }

    #[test]
    fn two_mappings_see_the_same_cells() {
        let a = Arena::new().unwrap();
        let m = PairMemory::new(&a, 8, 16).unwrap();
        let l = m.layout();
        // The queue's side maps the same range at CREATE_QPAIR's offsets.
        let user = Mapping::shared(a.file().as_raw_fd(), l.db.0, 4096).unwrap();
        // SAFETY: the live cell page, dword aligned.
        unsafe {
            std::ptr::write_volatile(user.ptr().cast::<u32>(), 5);
            std::ptr::write_volatile(user.ptr().add(64).cast::<u32>(), 3);
        }
        assert_eq!((m.shadow_sq_tail(), m.shadow_cq_head()), (5, 3));
        let cq = Mapping::shared(a.file().as_raw_fd(), l.cq.0, 4096).unwrap();
        m.mirror_cqe(1, [1, 2, 3, 4]);
        // SAFETY: the live mirror page.
        let e = unsafe { std::slice::from_raw_parts(cq.ptr().cast::<u32>(), 8) };
        assert_eq!(&e[4..8], &[1, 2, 3, 4]);
        // A second pair gets a range of its own.
        let m2 = PairMemory::new(&a, 8, 16).unwrap();
        assert!(m2.layout().base >= l.base + l.len());
    }
}
