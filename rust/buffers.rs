// SPDX-License-Identifier: GPL-2.0

//! The DMA pages one open file mapped (MAP_HOST, MAP_DMABUF): the only
//! pages its shared-mode commands may name. Shared by the file and the
//! relay threads of its queue pairs.

use kernel::{new_mutex, prelude::*, sync::Mutex};

const PAGE: u64 = 4096;

/// Pages `[start, end)` of mapping `handle`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    handle: u32,
}

/// Ranges sorted by start; `longest` bounds how far back a lookup scans.
#[derive(Default)]
pub(crate) struct Ranges {
    list: KVec<Range>,
    longest: u64,
}

#[pin_data]
pub(crate) struct Buffers {
    #[pin]
    ranges: Mutex<Ranges>,
}

impl Buffers {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self { ranges <- new_mutex!(Ranges::default()) })
    }

    /// Record the pages of mapping `handle` (one DMA address per 4 KiB
    /// page), merging runs of contiguous pages.
    pub(crate) fn add(&self, handle: u32, pages: &[u64]) -> Result {
        let mut runs: KVec<Range> = KVec::new();
        for &p in pages {
            match runs.last_mut() {
                Some(r) if r.end == p => r.end += PAGE,
                _ => runs.push(Range { start: p, end: p + PAGE, handle }, GFP_KERNEL)?,
            }
        }
        let mut g = self.ranges.lock();
        g.list.reserve(runs.len(), GFP_KERNEL)?;
        for r in runs {
            let at = g.list.partition_point(|x| x.start <= r.start);
            g.longest = g.longest.max(r.end - r.start);
            // Capacity was reserved above.
            g.list.insert_within_capacity(at, r).map_err(|_| ENOMEM)?;
        }
        Ok(())
    }

    /// Forget mapping `handle`: from now on no new command may name it.
    pub(crate) fn remove(&self, handle: u32) {
        self.ranges.lock().list.retain(|r| r.handle != handle);
    }

    /// The pages as they are now, held still for one command's checks (one
    /// lock per command, not per PRP entry).
    pub(crate) fn lock(&self) -> Pages<'_> {
        Pages(self.ranges.lock())
    }

    /// Is the 4 KiB page at DMA address `page` one of this file's?
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        self.lock().owns_page(page)
    }
}

/// The file's pages, locked: MAP/UNMAP and revokes wait meanwhile.
pub(crate) struct Pages<'a>(kernel::sync::lock::Guard<'a, Ranges, kernel::sync::lock::mutex::MutexBackend>);

impl Pages<'_> {
    /// Is the 4 KiB page at DMA address `page` one of this file's?
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        let g = &self.0;
        let at = g.list.partition_point(|r| r.start <= page);
        g.list[..at]
            .iter()
            .rev()
            .take_while(|r| r.start + g.longest > page)
            .any(|r| page + PAGE <= r.end)
    }
}

#[kernel::prelude::kunit_tests(gpunvme_buffers)]
mod tests {
    use super::*;
    use kernel::sync::Arc;

    #[test]
    fn pages_are_owned_until_removed() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        // Mapping 1: three contiguous pages and a stray one; mapping 2 overlaps.
        b.add(1, &[0x10000, 0x11000, 0x12000, 0x40000]).unwrap();
        b.add(2, &[0x11000, 0x12000, 0x13000]).unwrap();
        for p in [0x10000u64, 0x11000, 0x12000, 0x13000, 0x40000] {
            assert!(b.owns_page(p));
        }
        for p in [0x0f000u64, 0x14000, 0x3f000, 0x41000, 0] {
            assert!(!b.owns_page(p));
        }
        b.remove(2);
        assert!(!b.owns_page(0x13000));
        assert!(b.owns_page(0x12000));
        b.remove(1);
        assert!(!b.owns_page(0x10000) && !b.owns_page(0x40000));
    }

    #[test]
    fn long_range_found_behind_short_ones() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        let mut long = KVec::new();
        for i in 0..64u64 {
            long.push(0x100000 + i * PAGE, GFP_KERNEL).unwrap();
        }
        b.add(1, &long).unwrap();
        b.add(2, &[0x101000, 0x120000]).unwrap();
        assert!(b.owns_page(0x13f000));
        assert!(!b.owns_page(0x140000));
    }
}
