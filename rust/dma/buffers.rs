// SPDX-License-Identifier: GPL-2.0-only

//! The DMA pages one open file mapped (MAP_HOST, MAP_DMABUF): the only
//! pages its shared-mode commands may name. Shared by the file and the
//! relay threads of its queue pairs.
//!
//! It also counts the commands its relays accepted and the controller has
//! not completed, so that an exporter's revoke of an imported buffer can
//! wait for the commands that may still name it (`revoke`, `drain`).
//! Counting is by epoch, as SRCU does: a command is counted in the epoch
//! current when it was checked, and a revoke flips the epoch, so the
//! commands that may name the revoked pages are exactly those of the old
//! epoch.
//!
//! Relays check without the lock, against a copy of the pages of their own
//! (`View`), so relay threads serving one file's pairs share no cache line
//! per command: every change to the pages or the epoch bumps `generation`
//! under the lock, a relay copies again when it moved, and it counts a
//! command in its own counter shard before it looks at `generation` once
//! more (see `admit_checked` for why that is enough).

use kernel::{
    new_mutex,
    prelude::*,
    sync::{
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
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

/// Counter shards: a relay counts in the one its pair picks (`shard_of`).
pub(crate) const SHARDS: usize = 8;

/// The shard of a pair: consecutive queue IDs (which the relay pool hands
/// to different threads) count apart.
pub(crate) fn shard_of(qid: u16) -> usize {
    usize::from(qid) % SHARDS
}

/// One shard's counts per epoch, on a cache line of its own.
#[repr(align(64))]
struct Shard([Atomic<u32>; 2]);

impl Shard {
    const fn new() -> Self {
        Self([Atomic::new(0), Atomic::new(0)])
    }
}

/// A relay's copy of the file's pages and epoch, good while the file's
/// `generation` is the one it was copied at.
pub(crate) struct View {
    generation: u64,
    list: KVec<Range>,
    longest: u64,
    epoch: Epoch,
}

impl View {
    pub(crate) fn new() -> Self {
        Self {
            // Never a generation: the first check copies.
            generation: u64::MAX,
            list: KVec::new(),
            longest: 0,
            epoch: 0,
        }
    }
}

/// The pages a check may look at: a relay's copy, or (without memory for
/// one) the file's own under the lock.
pub(crate) enum Owned<'a> {
    View(&'a View),
    Locked(&'a Ranges),
}

impl Owned<'_> {
    /// Is the 4 KiB page at DMA address `page` one of this file's?
    pub(crate) fn owns_page(&self, page: u64) -> bool {
        match self {
            Owned::View(v) => owns(&v.list, v.longest, page),
            Owned::Locked(r) => owns(&r.list, r.longest, page),
        }
    }
}

/// Does a range of `list` (sorted by start, none longer than `longest`)
/// hold the 4 KiB page at `page`?
fn owns(list: &[Range], longest: u64, page: u64) -> bool {
    let at = list.partition_point(|r| r.start <= page);
    list[..at]
        .iter()
        .rev()
        .take_while(|r| r.start + longest > page)
        .any(|r| page.checked_add(PAGE).is_some_and(|end| end <= r.end))
}

#[pin_data]
pub(crate) struct Buffers {
    #[pin]
    ranges: Mutex<Ranges>,
    /// Bumped, with `ranges` locked, by every change to the pages or the
    /// epoch.
    generation: Atomic<u64>,
    /// Commands the file's relays accepted and saw no completion for, per
    /// shard and epoch; including those of stopped relays whose queue
    /// deletion the controller never confirmed (see `Outstanding`).
    in_flight: [Shard; SHARDS],
    /// The file's raw pairs that the controller may still run.
    raw_pairs: Atomic<u32>,
}

impl Buffers {
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            ranges <- new_mutex!(Ranges::default()),
            generation: Atomic::new(0),
            in_flight: [const { Shard::new() }; SHARDS],
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
        self.changed();
        Ok(())
    }

    /// The pages or the epoch changed (call with `ranges` locked).
    fn changed(&self) {
        // Fully ordered: a revoke reads the counts after this (see
        // `admit_checked`).
        self.generation.fetch_add(1, Full);
    }

    /// Check one command (`check`, given the pages it may name) and, if it
    /// passes, count it in flight in shard `shard`; returns what `check`
    /// returned and the epoch for `complete`. `view` is the caller's copy
    /// of the pages, refreshed when they changed. `check` may run twice.
    ///
    /// Why the copy is enough: the command is counted (a fully ordered
    /// increment) before `generation` is read again; a change bumps
    /// `generation` (fully ordered) before a revoke reads the counts. So
    /// either the revoke sees this count and waits for the command, or
    /// this sees the bump, takes the count back and checks again against
    /// the pages as they are now.
    pub(crate) fn admit_checked<R, E>(
        &self,
        view: &mut View,
        shard: usize,
        mut check: impl FnMut(Owned<'_>) -> core::result::Result<R, E>,
    ) -> core::result::Result<(R, Epoch), E> {
        let counts = &self.in_flight[shard % SHARDS].0;
        loop {
            if self.generation.load(Acquire) != view.generation && !self.refresh(view) {
                // No memory for a copy: check and count with the lock held,
                // which a revoke takes too.
                let g = self.ranges.lock();
                let r = check(Owned::Locked(&g))?;
                counts[usize::from(g.epoch)].fetch_add(1, Relaxed);
                return Ok((r, g.epoch));
            }
            let r = check(Owned::View(view))?;
            let e = view.epoch;
            counts[usize::from(e)].fetch_add(1, Full);
            if self.generation.load(Relaxed) == view.generation {
                return Ok((r, e));
            }
            counts[usize::from(e)].fetch_sub(1, Release);
        }
    }

    /// Copy the pages into `view`; false (and `view` marked stale) without
    /// memory for the copy.
    fn refresh(&self, view: &mut View) -> bool {
        let g = self.ranges.lock();
        view.list.clear();
        if view.list.reserve(g.list.len(), GFP_KERNEL).is_err() {
            view.generation = u64::MAX;
            return false;
        }
        for r in g.list.iter() {
            // Capacity was reserved above.
            let _ = view.list.push_within_capacity(*r);
        }
        view.longest = g.longest;
        view.epoch = g.epoch;
        // Bumped only with the lock held, which this holds.
        view.generation = self.generation.load(Relaxed);
        true
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
        let mut g = self.ranges.lock();
        g.list.retain(|r| r.handle != handle);
        self.changed();
    }

    /// `n` commands counted in epoch `e` in shard `shard` completed (or
    /// their relay learned that the controller will never run them).
    pub(crate) fn complete(&self, e: Epoch, n: u32, shard: usize) {
        if n != 0 {
            self.in_flight[shard % SHARDS].0[usize::from(e & 1)].fetch_sub(n, Release);
        }
    }

    /// Commands counted in epoch `e`, over all shards.
    fn counted(&self, e: Epoch) -> u32 {
        self.in_flight.iter().fold(0u32, |n, s| {
            n.wrapping_add(s.0[usize::from(e & 1)].load(Acquire))
        })
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
            let p = if self.counted(old ^ 1) == 0 {
                // Commands checked from now on cannot name the pages.
                g.epoch = old ^ 1;
                Pending::Epoch(old)
            } else {
                Pending::All
            };
            self.changed();
            p
        };
        if self.raw_pairs.load(Acquire) != 0 {
            return (Pending::Unknown, 0);
        }
        (pending, self.count(pending))
    }

    fn count(&self, p: Pending) -> u32 {
        match p {
            Pending::Epoch(e) => self.counted(e),
            Pending::All => self.counted(0).saturating_add(self.counted(1)),
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
        let g = self.ranges.lock();
        owns(&g.list, g.longest, page)
    }

    /// A command that names no page, admitted in shard 0 (KUnit).
    #[cfg(CONFIG_KUNIT)]
    fn admit(&self) -> Epoch {
        match self.admit_checked(&mut View::new(), 0, |_| Ok::<(), ()>(())) {
            Ok(((), e)) => e,
            Err(()) => 0,
        }
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
        let before = b.admit();
        let (p, n) = b.revoke(1);
        assert_eq!((p, n), (Pending::Epoch(before), 1));
        assert!(!b.owns_page(0x10000));
        // A command checked after the revoke is not waited for...
        let after = b.admit();
        assert!(after != before);
        assert!(!b.drain(p, 0));
        b.complete(before, 1, 0);
        assert!(b.drain(p, 0));
        // ...but a second revoke while it runs waits for it.
        let (p2, n2) = b.revoke(2);
        assert_eq!((p2, n2), (Pending::Epoch(after), 1));
        b.complete(after, 1, 0);
        assert!(b.drain(p2, 0));
    }

    #[test]
    fn an_undrained_epoch_makes_later_revokes_wait_for_everything() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        b.add(1, &[0x10000]).unwrap();
        b.add(2, &[0x20000]).unwrap();
        let stuck = b.admit();
        let (p, _) = b.revoke(1);
        assert!(!b.drain(p, 0)); // given up on: the mapping is kept
        let newer = b.admit();
        // The stuck command may name mapping 2 as well.
        assert_eq!(b.revoke(2), (Pending::All, 2));
        b.complete(newer, 1, 0);
        assert!(!b.drain(Pending::All, 0));
        b.complete(stuck, 1, 0);
        assert!(b.drain(Pending::All, 0));
    }

    /// A check that passes against pages revoked while it ran is taken
    /// back and made again against the pages as they are now.
    #[test]
    fn a_revoke_during_a_check_is_seen_by_the_check() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        b.add(1, &[0x10000]).unwrap();
        let mut v = View::new();
        let page = |o: Owned<'_>| {
            if o.owns_page(0x10000) {
                Ok(())
            } else {
                Err(())
            }
        };
        assert!(b.admit_checked(&mut v, 3, page).is_ok());
        let mut runs = 0;
        let raced = b.admit_checked(&mut v, 3, |o| {
            runs += 1;
            if runs == 1 {
                // The copy still has the page: this pass would pass.
                let _ = b.revoke(1);
            }
            page(o)
        });
        assert_eq!((raced.map(|_| ()), runs), (Err(()), 2));
        // Only the first command is counted (in shard 3), in the old epoch.
        assert_eq!(b.count(Pending::All), 1);
        b.complete(0, 1, 3);
        assert_eq!(b.count(Pending::All), 0);
    }

    #[test]
    fn views_follow_adds_and_shards_add_up() {
        let b = Arc::pin_init(Buffers::new(), GFP_KERNEL).unwrap();
        let mut v = View::new();
        let page = |o: Owned<'_>| {
            if o.owns_page(0x30000) {
                Ok(())
            } else {
                Err(())
            }
        };
        assert!(b.admit_checked(&mut v, 1, page).is_err());
        b.add(1, &[0x30000]).unwrap();
        let ((), e) = b.admit_checked(&mut v, 1, page).unwrap();
        let ((), e2) = b.admit_checked(&mut View::new(), 2 + SHARDS, page).unwrap();
        assert_eq!((e, e2), (0, 0));
        assert_eq!(b.count(Pending::Epoch(0)), 2);
        b.complete(0, 1, 2);
        b.complete(0, 1, 1);
        assert_eq!(b.count(Pending::Epoch(0)), 0);
        assert_eq!(shard_of(1), shard_of(1 + SHARDS as u16));
        assert!(shard_of(1) != shard_of(2));
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
