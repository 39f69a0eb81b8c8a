// SPDX-License-Identifier: GPL-2.0-only

//! The DMA pages one open file mapped (MAP_HOST, MAP_DMABUF): the only
//! pages its shared-mode commands may name. Shared by the file and the
//! relay threads of its queue pairs.
//!
//! It also counts the commands its relays accepted and the controller has
//! not completed, so that an exporter's revoke of an imported buffer can
//! wait for the commands that may still name it (`revoke`, `drain`).
//! Counting is by epoch, as SRCU does: a command is counted in the epoch
//! current when it was checked (under the same lock as the check), and a
//! revoke flips the epoch with the same lock held, so the commands that
//! may name the revoked pages are exactly those of the old epoch.

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Relaxed, Release},
        Mutex,
    },
};

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
    /// The epoch newly accepted commands are counted in (0 or 1).
    epoch: Epoch,
}

/// The admission epoch a command was counted in (see the module comment).
pub(crate) type Epoch = u8;

/// What a revoke must wait for before the pages may be unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pending {
    /// The commands of one epoch.
    Epoch(Epoch),
    /// Every counted command: the other epoch had not drained (an earlier
    /// revoke gave up on it), so either may name the pages.
    All,
    /// This file has raw pairs: their commands are not seen by the module,
    /// so whether one still names the pages is unknown.
    Unknown,
}

/// How long a revoke waits for accepted commands before it keeps the
/// mapping instead (an NVMe command normally takes micro- to milliseconds).
pub(crate) const REVOKE_WAIT_MS: u32 = 1000;

#[pin_data]
pub(crate) struct Buffers {
    #[pin]
    ranges: Mutex<Ranges>,
    /// Commands the file's relays accepted and saw no completion for, per
    /// epoch; including those of stopped relays whose queue deletion the
    /// controller never confirmed (see `Outstanding`).
    in_flight: [Atomic<u32>; 2],
    /// The file's raw pairs that the controller may still run.
    raw_pairs: Atomic<u32>,
}

impl Buffers {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            ranges <- new_mutex!(Ranges::default()),
            in_flight: [Atomic::new(0), Atomic::new(0)],
            raw_pairs: Atomic::new(0),
        })
    }

    /// Record the pages of mapping `handle` (one DMA address per 4 KiB
    /// page), merging runs of contiguous pages.
    pub(crate) fn add(&self, handle: u32, pages: &[u64]) -> Result {
        self.add_unless_revoked(handle, pages, || false)
    }

    /// As `add`, but ENODEV (nothing added) if `revoked()` says so under
    /// the lock an exporter's revoke takes to remove the pages: a revoke
    /// that set its flag before this saw nothing to remove, and one after
    /// it removes what this added, so unmapped pages are never published.
    pub(crate) fn add_unless_revoked(
        &self,
        handle: u32,
        pages: &[u64],
        revoked: impl Fn() -> bool,
    ) -> Result {
        let mut runs: KVec<Range> = KVec::new();
        for &p in pages {
            match runs.last_mut() {
                Some(r) if r.end == p => r.end += PAGE,
                _ => runs.push(
                    Range {
                        start: p,
                        end: p + PAGE,
                        handle,
                    },
                    GFP_KERNEL,
                )?,
            }
        }
        let mut g = self.ranges.lock();
        if revoked() {
            return Err(ENODEV);
        }
        g.list.reserve(runs.len(), GFP_KERNEL)?;
        for r in runs {
            let at = g.list.partition_point(|x| x.start <= r.start);
            g.longest = g.longest.max(r.end - r.start);
            // Capacity was reserved above.
            g.list.insert_within_capacity(at, r).map_err(|_| ENOMEM)?;
        }
        Ok(())
    }

    /// Where mapping `handle` starts for the controller and how long it is,
    /// when it is one run of contiguous DMA addresses (`None` when it is
    /// not mapped, or in several runs).
    pub(crate) fn single_run(&self, handle: u32) -> Option<(u64, u64)> {
        let g = self.ranges.lock();
        let mut runs = g.list.iter().filter(|r| r.handle == handle);
        let r = runs.next()?;
        runs.next().is_none().then_some((r.start, r.end - r.start))
    }

    /// How many runs mapping `handle` has (0: not mapped).
    pub(crate) fn runs(&self, handle: u32) -> usize {
        self.ranges
            .lock()
            .list
            .iter()
            .filter(|r| r.handle == handle)
            .count()
    }

    /// Forget mapping `handle`: from now on no new command may name it.
    pub(crate) fn remove(&self, handle: u32) {
        self.ranges.lock().list.retain(|r| r.handle != handle);
    }

    /// The pages as they are now, held still for one command's checks (one
    /// lock per command, not per PRP entry).
    pub(crate) fn lock(&self) -> Pages<'_> {
        Pages(self, self.ranges.lock())
    }

    /// A command counted in epoch `e` completed (or its relay learned that
    /// the controller will never run it).
    pub(crate) fn complete(&self, e: Epoch, n: u32) {
        if n != 0 {
            self.in_flight[usize::from(e & 1)].fetch_sub(n, Release);
        }
    }

    /// A raw pair of this file was created on the controller.
    pub(crate) fn raw_pair_created(&self) {
        self.raw_pairs.fetch_add(1, Relaxed);
    }

    /// The controller confirmed the deletion of one of this file's raw pairs.
    pub(crate) fn raw_pair_deleted(&self) {
        self.raw_pairs.fetch_sub(1, Release);
    }

    /// An exporter revokes mapping `handle`: no new command may name its
    /// pages from now on. Returns what must drain before they may be
    /// unmapped, and how many commands that is now.
    pub(crate) fn revoke(&self, handle: u32) -> (Pending, u32) {
        let pending = {
            let mut g = self.ranges.lock();
            g.list.retain(|r| r.handle != handle);
            let old = g.epoch;
            if self.in_flight[usize::from(old ^ 1)].load(Relaxed) == 0 {
                // Commands checked from now on cannot name the pages.
                g.epoch = old ^ 1;
                Pending::Epoch(old)
            } else {
                Pending::All
            }
        };
        if self.raw_pairs.load(Acquire) != 0 {
            return (Pending::Unknown, 0);
        }
        (pending, self.count(pending))
    }

    fn count(&self, p: Pending) -> u32 {
        let [a, b] = &self.in_flight;
        match p {
            Pending::Epoch(e) => self.in_flight[usize::from(e & 1)].load(Acquire),
            Pending::All => a.load(Acquire).saturating_add(b.load(Acquire)),
            Pending::Unknown => u32::MAX,
        }
    }

    /// Wait up to `ms` milliseconds for `p` to drain; true when it did (the
    /// controller completed every command that might name the pages).
    pub(crate) fn drain(&self, p: Pending, ms: u32) -> bool {
        for _ in 0..ms {
            if self.count(p) == 0 {
                return true;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
        }
        self.count(p) == 0
    }

    /// Is the 4 KiB page at DMA address `page` one of this file's?
    #[cfg(CONFIG_KUNIT)]
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        self.lock().owns_page(page)
    }
}

/// The file's pages, locked: MAP/UNMAP and revokes wait meanwhile.
pub(crate) struct Pages<'a>(
    &'a Buffers,
    kernel::sync::lock::Guard<'a, Ranges, kernel::sync::lock::mutex::MutexBackend>,
);

impl Pages<'_> {
    /// Count a command whose checks passed as in flight; the lock is still
    /// held, so a revoke either came before the checks or flips the epoch
    /// after this count. Returns the epoch for `Buffers::complete`.
    pub(crate) fn admit(&self) -> Epoch {
        let e = self.1.epoch;
        self.0.in_flight[usize::from(e)].fetch_add(1, Relaxed);
        e
    }

    /// Is the 4 KiB page at DMA address `page` one of this file's?
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        let g = &self.1;
        let at = g.list.partition_point(|r| r.start <= page);
        g.list[..at]
            .iter()
            .rev()
            .take_while(|r| r.start + g.longest > page)
            .any(|r| page.checked_add(PAGE).is_some_and(|end| end <= r.end))
    }
}

#[kernel::prelude::kunit_tests(gpunvme_buffers)]
mod tests {
    use super::*;
    use kernel::sync::Arc;

    #[test]
    fn a_revoked_import_adds_nothing() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        assert_eq!(b.add_unless_revoked(1, &[0x10000], || true), Err(ENODEV));
        assert!(!b.owns_page(0x10000));
        b.add_unless_revoked(1, &[0x10000], || false).unwrap();
        assert!(b.owns_page(0x10000));
    }

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
    fn a_revoke_waits_only_for_commands_checked_before_it() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        b.add(1, &[0x10000]).unwrap();
        b.add(2, &[0x20000]).unwrap();
        let before = b.lock().admit();
        let (p, n) = b.revoke(1);
        assert_eq!((p, n), (Pending::Epoch(before), 1));
        assert!(!b.owns_page(0x10000));
        // A command checked after the revoke is not waited for...
        let after = b.lock().admit();
        assert!(after != before);
        assert!(!b.drain(p, 0));
        b.complete(before, 1);
        assert!(b.drain(p, 0));
        // ...but a second revoke while it runs waits for it.
        let (p2, n2) = b.revoke(2);
        assert_eq!((p2, n2), (Pending::Epoch(after), 1));
        b.complete(after, 1);
        assert!(b.drain(p2, 0));
    }

    #[test]
    fn an_undrained_epoch_makes_later_revokes_wait_for_everything() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        b.add(1, &[0x10000]).unwrap();
        b.add(2, &[0x20000]).unwrap();
        let stuck = b.lock().admit();
        let (p, _) = b.revoke(1);
        assert!(!b.drain(p, 0)); // given up on: the mapping is kept
        let newer = b.lock().admit();
        // The stuck command may name mapping 2 as well.
        assert_eq!(b.revoke(2), (Pending::All, 2));
        b.complete(newer, 1);
        assert!(!b.drain(Pending::All, 0));
        b.complete(stuck, 1);
        assert!(b.drain(Pending::All, 0));
    }

    #[test]
    fn raw_pairs_make_the_outcome_unknown() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        b.add(1, &[0x10000]).unwrap();
        b.raw_pair_created();
        assert_eq!(b.revoke(1), (Pending::Unknown, 0));
        assert!(!b.drain(Pending::Unknown, 0));
        b.raw_pair_deleted();
        b.add(2, &[0x20000]).unwrap();
        assert_eq!(b.revoke(2).1, 0);
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
