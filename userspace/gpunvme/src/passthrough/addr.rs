// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough back end's address space: what a PRP names.
//!
//! With the module, a PRP holds a DMA address that `GPUNVME_IOC_MAP_HOST`
//! returned. Here no device sees the PRPs: the relay turns each one into
//! this process's address of the registered memory before io_uring gets
//! the command. So registration hands out made-up addresses ("IOVAs") that
//! no CPU or device dereferences: region `i` spans `IOVA_BASE + i << 32`
//! onwards, one 4 KiB page after the other, so a lookup is a shift and a
//! bounds check, and a PRP that is a plain pointer (a bug in the GPU code)
//! names no region and is refused instead of reaching some memory.
//!
//! Two kinds of region: payload (a buffer registered with MAP_HOST: PRP1,
//! PRP2 and PRP-list entries may name it) and PRP pool (a pair's pool:
//! only PRP2 of a list may point into it; data pointers into it are
//! refused, as the module refuses them).

/// Where the address space starts: high enough that a host pointer of a
/// 47-bit address space rarely falls inside, and never 0.
pub(crate) const IOVA_BASE: u64 = 0x5000_0000_0000;
/// log2 of the address space each region gets (4 GiB; a region holds at
/// most 64 MiB).
pub(crate) const REGION_SHIFT: u32 = 32;
/// Regions at most (payloads and pools together). Payload regions are
/// also io_uring fixed buffers at the same index, which allows 16384.
pub(crate) const MAX_REGIONS: usize = 4096;

const PAGE: u64 = 4096;

/// What a region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A registered buffer (MAP_HOST): data may go there.
    Payload,
    /// Queue pair `qid`'s PRP pool: lists may be read there, data never.
    Pool(u16),
}

/// One region: `len` bytes at `host` in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) host: u64,
    pub(crate) len: u64,
    pub(crate) kind: Kind,
}

/// Every region, by index. Immutable once published: changes make a new
/// table (the relay threads keep the one they validate against).
#[derive(Debug, Clone, Default)]
pub(crate) struct Table {
    slots: Vec<Option<Region>>,
}

impl Table {
    /// The IOVA of region `index`'s first byte.
    pub(crate) fn base(index: usize) -> u64 {
        IOVA_BASE + ((index as u64) << REGION_SHIFT)
    }

    /// Adds a region in the lowest free slot; its index, or `None` when
    /// all `MAX_REGIONS` are taken.
    pub(crate) fn insert(&mut self, r: Region) -> Option<usize> {
        debug_assert!(r.len > 0 && r.len <= 1 << REGION_SHIFT);
        let i = match self.slots.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.slots.len() < MAX_REGIONS => {
                self.slots.push(None);
                self.slots.len() - 1
            }
            None => return None,
        };
        self.slots[i] = Some(r);
        Some(i)
    }

    /// Removes region `index`; what it was.
    pub(crate) fn remove(&mut self, index: usize) -> Option<Region> {
        self.slots.get_mut(index).and_then(Option::take)
    }

    /// The region `iova` falls in, its index and the offset in it.
    #[inline]
    pub(crate) fn find(&self, iova: u64) -> Option<(usize, &Region, u64)> {
        let rel = iova.checked_sub(IOVA_BASE)?;
        let index = (rel >> REGION_SHIFT) as usize;
        let off = rel & ((1 << REGION_SHIFT) - 1);
        let r = self.slots.get(index)?.as_ref()?;
        (off < r.len).then_some((index, r, off))
    }

    /// Is the 4 KiB page at `page` (aligned) payload memory?
    #[inline]
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        matches!(self.find(page), Some((_, r, off)) if r.kind == Kind::Payload && off + PAGE <= r.len)
    }

    /// This process's address of `len` bytes at `iova` (inside one page of
    /// one payload region) and the region's index.
    #[inline]
    pub(crate) fn translate(&self, iova: u64, len: u64) -> Option<(u64, usize)> {
        let (i, r, off) = self.find(iova)?;
        (r.kind == Kind::Payload && off.checked_add(len)? <= r.len).then_some((r.host + off, i))
    }

    /// The 8-byte PRP-list entry at `iova` in queue pair `qid`'s pool, read
    /// once (the GPU may write the pool at any time).
    #[inline]
    pub(crate) fn pool_entry(&self, qid: u16, iova: u64) -> Option<u64> {
        let (_, r, off) = self.find(iova)?;
        if r.kind != Kind::Pool(qid) || off % 8 != 0 || off + 8 > r.len {
            return None;
        }
        // SAFETY: `off + 8 <= len`, 8-byte aligned, inside the pool's live
        // mapping, which the device keeps mapped while its region is in a
        // table a relay may use (the pair is taken off its relay before the
        // pool is unmapped). The GPU may write it concurrently: a volatile
        // read of a plain integer, and only that copy is used.
        Some(unsafe { std::ptr::read_volatile((r.host + off) as *const u64) })
    }

    /// The payload regions as io_uring fixed buffers: index `i` is region
    /// `i` (an empty iovec where there is none, or a pool).
    pub(crate) fn iovecs(&self) -> Vec<libc::iovec> {
        self.slots
            .iter()
            .map(|s| match s {
                Some(r) if r.kind == Kind::Payload => libc::iovec {
                    iov_base: r.host as *mut libc::c_void,
                    iov_len: r.len as usize,
                },
                _ => libc::iovec {
                    iov_base: std::ptr::null_mut(),
                    iov_len: 0,
                },
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_are_found_by_shift_and_bounds() {
        let mut t = Table::default();
        let a = t
            .insert(Region {
                host: 0x7000_0000,
                len: 3 * PAGE,
                kind: Kind::Payload,
            })
            .unwrap();
        let p = t
            .insert(Region {
                host: 0x9000_0000,
                len: PAGE,
                kind: Kind::Pool(3),
            })
            .unwrap();
        assert_eq!((a, p), (0, 1));
        let base = Table::base(a);
        assert!(t.owns_page(base) && t.owns_page(base + 2 * PAGE));
        assert!(!t.owns_page(base + 3 * PAGE), "one past the end");
        assert!(!t.owns_page(Table::base(p)), "a pool is not payload");
        assert!(!t.owns_page(0x7000_0000), "a host pointer names nothing");
        assert!(!t.owns_page(0));
        assert_eq!(t.translate(base + 0x1010, 16), Some((0x7000_1010, 0)));
        assert_eq!(
            t.translate(base + 3 * PAGE - 8, 16),
            None,
            "runs off the end"
        );
        assert_eq!(t.translate(Table::base(p), 8), None);
        // Freed slots are reused; the removed region names nothing.
        assert_eq!(t.remove(a).map(|r| r.host), Some(0x7000_0000));
        assert!(!t.owns_page(base));
        assert_eq!(
            t.insert(Region {
                host: 0x8000_0000,
                len: PAGE,
                kind: Kind::Payload
            }),
            Some(0)
        );
        let iov = t.iovecs();
        assert_eq!((iov.len(), iov[0].iov_len, iov[1].iov_len), (2, 4096, 0));
    }

    #[test]
    fn pool_entries_are_read_only_from_that_pairs_pool() {
        let mut pool = vec![0u64; 512];
        pool[3] = 0xabcd_0000;
        let mut t = Table::default();
        let i = t
            .insert(Region {
                host: pool.as_mut_ptr() as u64,
                len: PAGE,
                kind: Kind::Pool(7),
            })
            .unwrap();
        let b = Table::base(i);
        assert_eq!(t.pool_entry(7, b + 24), Some(0xabcd_0000));
        assert_eq!(t.pool_entry(8, b + 24), None, "another pair's pool");
        assert_eq!(t.pool_entry(7, b + 20), None, "not 8-byte aligned");
        assert_eq!(t.pool_entry(7, b + PAGE), None, "past the pool");
    }
}
