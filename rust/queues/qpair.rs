// SPDX-License-Identifier: GPL-2.0-only

//! I/O queue pairs: their memory, the mmap offsets that name it, and the
//! admin commands that create and delete them on the controller.

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    prelude::*,
    ptr::KnownSize,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

use crate::controller::regs::{Cap, PAGE_SIZE};
use crate::queues::command::{self, Cqe, Sqe};

/// Queue memory is charged to the memory cgroup of the task that creates
/// the pair (where the DMA allocator takes pages from the page allocator:
/// through the IOMMU, or dma-direct without CMA), so a tenant's queues
/// count against its own `memory.max`.
const CHARGED: kernel::alloc::Flags = kernel::alloc::flags::GFP_KERNEL_ACCOUNT;

pub(crate) const SQE_BYTES: usize = core::mem::size_of::<Sqe>();
pub(crate) const CQE_BYTES: usize = core::mem::size_of::<Cqe>();

/// A shared pair's shadow doorbell page, as the relay reads it: 4 KiB of
/// u32 cells, the SQ tail at byte `bridge::SHADOW_SQ_TAIL` and the CQ head
/// at byte `bridge::SHADOW_CQ_HEAD` (own cache lines); the rest unused.
pub(crate) type Cells = [u32; PAGE_SIZE / 4];

/// The next queue pair generation.
static NEXT_GEN: Atomic<u64> = Atomic::new(1);

/// How many I/O queue pairs' memory is allocated, module-wide (debugfs
/// `gpunvme-<bdf>/qpairs_allocated`): what tests check to see memory freed.
pub(crate) static ALLOCATED: Atomic<u32> = Atomic::new(0);

/// What an mmap offset names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapKind {
    Sq = 1,
    Cq = 2,
    Doorbell = 3,
    PrpPool = 4,
}

/// mmap offset of `kind` for queue `qid`: one 4 KiB page index per object.
pub(crate) fn mmap_offset(kind: MapKind, qid: u16) -> u64 {
    (((kind as u64) << 16) | u64::from(qid)) * PAGE_SIZE as u64
}

/// Inverse of [`mmap_offset`] on a page offset (vm_pgoff).
pub(crate) fn decode_pgoff(pgoff: u64) -> Option<(MapKind, u16)> {
    let qid = (pgoff & 0xffff) as u16;
    let kind = match pgoff >> 16 {
        1 => MapKind::Sq,
        2 => MapKind::Cq,
        3 => MapKind::Doorbell,
        4 => MapKind::PrpPool,
        _ => return None,
    };
    (qid != 0).then_some((kind, qid))
}

pub(crate) fn round_to_page(n: usize) -> usize {
    n.div_ceil(PAGE_SIZE) * PAGE_SIZE
}

/// The bytes of one of a pair's allocations, for what hands the memory
/// on whole instead of reading it through typed views: mmap inserts its
/// pages, a dma-buf export gives the range to a peer.
#[derive(Clone, Copy)]
pub(crate) struct Bytes {
    /// Where the CPU sees it.
    pub(crate) cpu: *mut u8,
    /// Where the device sees it.
    pub(crate) dma: u64,
    /// Its size in bytes (whole pages, for every allocation of a pair).
    pub(crate) size: usize,
}

/// The bytes of `c` (see [`Bytes`]).
pub(crate) fn bytes<T: KnownSize + ?Sized>(c: &Coherent<T>) -> Bytes {
    Bytes {
        cpu: c.as_mut_ptr().cast(),
        dma: c.dma_address(),
        size: c.size(),
    }
}

/// Where this queue's doorbells are: the BAR0 page that holds them and
/// their offsets in it. `None` when the SQ and CQ doorbells fall on
/// different pages (a doorbell stride of 4 KiB or more, CAP.DSTRD >= 10).
pub(crate) fn doorbell_page(cap: Cap, qid: u16) -> Option<(usize, u32, u32)> {
    let sq = cap.sq_doorbell(qid);
    let cq = cap.cq_doorbell(qid);
    let page = sq / PAGE_SIZE * PAGE_SIZE;
    (cq / PAGE_SIZE * PAGE_SIZE == page).then_some((page, (sq - page) as u32, (cq - page) as u32))
}

/// Bytes of a CQ of `depth` entries (whole pages).
pub(crate) fn cq_bytes(depth: u32) -> usize {
    round_to_page(depth as usize * CQE_BYTES)
}

/// An I/O SQ and its CQ. The memory is freed only on drop, and a `QPair`
/// is dropped only once the controller no longer uses it (deleted, or the
/// controller disabled).
///
/// The queues and the shadows are typed coherent allocations behind
/// `Arc`s: a shared pair's relay (`bridge::Ctx`) holds clones of them and
/// reaches the memory through the kernel crate's typed views, as the admin
/// queue does. Clones, not borrows: the pair lives in the DMA registry's
/// `KVec`, which moves as it grows, and a view borrows its allocation for a
/// lifetime that a context handed through C cannot carry. The rule that
/// keeps the relay's reach within the pair's life stays as it was: a pair's
/// `Bridge` is stopped before the pair is dropped, quarantined or lent
/// (`dma::registry::QueueEntry::let_go`), so the clones go with the relay's
/// context before the pair does and never keep memory past it.
pub(crate) struct QPair {
    /// Never reused (unlike `qid`): what a user mapping of it is tied to.
    pub(crate) gen: u64,
    pub(crate) qid: u16,
    pub(crate) depth: u32,
    /// The real SQ: `depth` entries or more (whole pages).
    pub(crate) sq: Arc<Coherent<[Sqe]>>,
    /// The real CQ: `depth` entries or more (whole pages).
    pub(crate) cq: Arc<Coherent<[Cqe]>>,
    /// A raw pair whose CQ the controller writes into a mapping of the
    /// file instead of `cq` (`GPUNVME_QPAIR_CQ_IN_MAP`): its handle and DMA
    /// address. `cq` is then one unused page, never mapped or exported.
    pub(crate) cq_in_map: Option<(u32, u64)>,
    /// Shared (validated) pairs only: what the file sees instead of the
    /// real queues and doorbells (see `bridge.rs`). `None` for an owner's
    /// raw pair.
    pub(crate) shadow: Option<Arc<Shadow>>,
}

/// A shared pair's shadows, and the kernel's copy of its PRP lists.
pub(crate) struct Shadow {
    /// The doorbell cells (SQ tail, CQ head): one page.
    pub(crate) cells: Coherent<Cells>,
    /// The shadow SQ the file writes: as many entries as the real SQ.
    pub(crate) sq: Coherent<[Sqe]>,
    /// The CQ mirror the relay writes: as many entries as the real CQ.
    pub(crate) cq: Coherent<[Cqe]>,
    /// Where the file builds PRP lists; the relay reads them from here.
    pub(crate) pool: Coherent<[u64]>,
    /// The checked lists the controller reads: `list_entries` per command
    /// ID, `depth` command IDs (whole pages: maybe more).
    pub(crate) lists: Coherent<[u64]>,
    pub(crate) list_entries: usize,
}

impl Drop for QPair {
    fn drop(&mut self) {
        // The memory goes with the fields, right after this. Who could
        // still reach it, and why none can here: the controller, if the
        // pair's delete was not confirmed (such a pair is quarantined
        // instead, freed once the controller is disabled); its relay (the
        // Bridge is stopped in `let_go`, before the pair is deleted,
        // quarantined or lent, so its context's clones of the `Arc`s are
        // gone and these are the last); a peer holding an export (revoked
        // first; a pair an importer still holds is lent,
        // `Quarantined::Lent`, until it lets go); user mappings (zapped at
        // destroy, close or unbind).
        ALLOCATED.fetch_sub(1, Relaxed);
    }
}

impl QPair {
    /// `shared`: the largest transfer of one command of a shared pair;
    /// `None` for a raw pair.
    pub(crate) fn alloc(
        dev: &Device<Bound>,
        qid: u16,
        depth: u32,
        shared: Option<u64>,
        cq_in_map: Option<(u32, u64)>,
    ) -> Result<Self> {
        // Entries, each allocation whole pages (what mmap maps).
        let sq_len = round_to_page(depth as usize * SQE_BYTES) / SQE_BYTES;
        let cq_len = if cq_in_map.is_some() {
            PAGE_SIZE
        } else {
            cq_bytes(depth)
        } / CQE_BYTES;
        let shadow = match shared {
            None => None,
            Some(max_transfer) => {
                // A power of two of entries per command, so no list crosses a page.
                let list_entries = (crate::bridge::validate::list_entries(max_transfer) as usize)
                    .next_power_of_two();
                let lists = round_to_page(depth as usize * list_entries * 8) / 8;
                Some(Arc::new(
                    Shadow {
                        cells: Coherent::zeroed(dev, CHARGED)?,
                        sq: Coherent::zeroed_slice(dev, sq_len, CHARGED)?,
                        cq: Coherent::zeroed_slice(dev, cq_len, CHARGED)?,
                        pool: Coherent::zeroed_slice(dev, lists, CHARGED)?,
                        lists: Coherent::zeroed_slice(dev, lists, CHARGED)?,
                        list_entries,
                    },
                    GFP_KERNEL,
                )?)
            }
        };
        let q = Self {
            gen: NEXT_GEN.fetch_add(1, Relaxed),
            qid,
            depth,
            sq: Arc::new(Coherent::zeroed_slice(dev, sq_len, CHARGED)?, GFP_KERNEL)?,
            cq: Arc::new(Coherent::zeroed_slice(dev, cq_len, CHARGED)?, GFP_KERNEL)?,
            cq_in_map,
            shadow,
        };
        ALLOCATED.fetch_add(1, Relaxed);
        Ok(q)
    }

    /// The SQ the file maps: the shadow of a shared pair.
    pub(crate) fn visible_sq(&self) -> Bytes {
        bytes(self.shadow.as_ref().map_or(&*self.sq, |s| &s.sq))
    }

    /// The CQ the file maps: the mirror of a shared pair.
    pub(crate) fn visible_cq(&self) -> Bytes {
        bytes(self.shadow.as_ref().map_or(&*self.cq, |s| &s.cq))
    }

    /// Create CQ then SQ (the SQ names its CQ), as the spec requires.
    pub(crate) fn create_cmds(&self) -> [command::Sqe; 2] {
        [
            command::create_io_cq(
                self.qid,
                self.depth,
                self.cq_in_map.map_or(self.cq.dma_address(), |(_, dma)| dma),
            ),
            command::create_io_sq(self.qid, self.depth, self.sq.dma_address()),
        ]
    }

    /// Delete SQ then CQ: a CQ can't go while an SQ still posts to it.
    pub(crate) fn delete_cmds(&self) -> [command::Sqe; 2] {
        [
            command::delete_io_sq(self.qid),
            command::delete_io_cq(self.qid),
        ]
    }
}

#[kernel::prelude::kunit_tests(gpunvme_qpair)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip() {
        for kind in [
            MapKind::Sq,
            MapKind::Cq,
            MapKind::Doorbell,
            MapKind::PrpPool,
        ] {
            for qid in [1u16, 2, 63, 0xffff] {
                let off = mmap_offset(kind, qid);
                assert_eq!(off % PAGE_SIZE as u64, 0);
                assert_eq!(decode_pgoff(off / PAGE_SIZE as u64), Some((kind, qid)));
            }
        }
        assert_eq!(decode_pgoff(0), None);
        assert_eq!(decode_pgoff(5 << 16 | 1), None);
        assert_eq!(decode_pgoff(1 << 16), None);
    }

    #[test]
    fn doorbell_pages() {
        let cap = Cap(0); // stride 4
        assert_eq!(doorbell_page(cap, 1), Some((0x1000, 8, 12)));
        assert_eq!(doorbell_page(cap, 511), Some((0x1000, 0xff8, 0xffc)));
        assert_eq!(doorbell_page(cap, 512), Some((0x2000, 0, 4)));
        // Stride 4 KiB (DSTRD 10): SQ and CQ doorbells on separate pages.
        assert_eq!(doorbell_page(Cap(10 << 32), 1), None);
    }

    #[test]
    fn sizes_round_to_pages() {
        assert_eq!(round_to_page(2 * SQE_BYTES), 4096);
        assert_eq!(round_to_page(64 * SQE_BYTES), 4096);
        assert_eq!(round_to_page(65 * SQE_BYTES), 8192);
    }
}
