// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The argument blocks of the example kernels (`kernels/examples/`), as
//! `#[repr(C)]` mirrors of `gpunvme::qpair` (queue.h), `gpunvme::pqueue`
//! and its shared state (pqueue.h), `gx::io_args` / `gx::io_result`
//! (example.h) and `guide_args` (guide_read.hip). The offsets are asserted here and, with the
//! same numbers, by `static_assert`s in example.h, so a change on either
//! side stops the build instead of corrupting a launch.

use std::mem::{offset_of, size_of};

/// `gpunvme::qpair`: one queue pair as the device code sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QPair {
    /// SQ ring, device address.
    pub sq: u64,
    /// CQ ring (or the bridge's mirror), device address.
    pub cq: u64,
    /// SQ tail doorbell (MMIO or shadow cell), device address.
    pub sq_db: u64,
    /// CQ head doorbell, device address.
    pub cq_db: u64,
    /// Host stop flag (non-zero aborts every wait), device address; 0 = none.
    pub stop: u64,
    /// Per-wait deadline in wall-clock ticks (the device caps it at 2 s).
    pub timeout_ticks: u64,
    /// Wall-clock ticks per second on this GPU.
    pub tick_hz: u64,
    /// Entries in the SQ and in the CQ.
    pub depth: u32,
    /// Ring position, advanced by the kernel and written back by lane 0.
    pub sq_tail: u32,
    /// Ring position.
    pub cq_head: u32,
    /// Phase expected at `cq_head`: 1 for a fresh queue.
    pub phase: u32,
    /// Commands submitted and not reaped.
    pub inflight: u32,
    /// First failure; non-zero means the pair must be recreated.
    pub error: i32,
}

/// `gx::io_args`: what a launch of write / read_verify / sweep does.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoArgs {
    /// First LBA of the whole run.
    pub slba: u64,
    /// Bus address of the data buffer (the controller's view), for PRPs.
    pub buf_dma: u64,
    /// The same buffer's GPU virtual address.
    pub buf: u64,
    /// Pattern seed.
    pub seed: u64,
    /// Namespace.
    pub nsid: u32,
    /// log2 of the LBA size.
    pub lba_shift: u32,
    /// Blocks per command.
    pub blocks_per_cmd: u32,
    /// Commands per queue pair (per workgroup).
    pub cmds_per_queue: u32,
    /// Controller memory page size (CC.MPS).
    pub page_size: u32,
    /// Sweep only: batches per queue.
    pub rounds: u32,
}

/// `gx::io_result`: one per queue pair, written by its workgroup.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoResult {
    /// First error: < 0 a negated errno from the device library, > 0 an
    /// NVMe status field.
    pub status: i32,
    /// Commands completed.
    pub completed: u32,
    /// read_verify: 64-bit words that differed from the pattern.
    pub mismatches: u32,
    /// Padding.
    pub pad: u32,
    /// Wall-clock ticks from the first ring to the last reap.
    pub ticks_total: u64,
    /// Sweep: the slowest batch, in ticks.
    pub ticks_max_round: u64,
}

/// `gpunvme::pqueue`: one queue pair as the per-thread API sees it. Every
/// pointer is a device address; [`PQueue::attach`] points the three
/// shared-state pointers into memory that [`pq_shared_init`] filled.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PQueue {
    /// SQ ring (a shared pair's shadow SQ).
    pub sq: u64,
    /// CQ ring (a shared pair's mirror).
    pub cq: u64,
    /// SQ tail doorbell.
    pub sq_db: u64,
    /// CQ head doorbell.
    pub cq_db: u64,
    /// Host stop flag (non-zero aborts every wait); 0 = none.
    pub stop: u64,
    /// Shared state (`pq_shared`, [`pq_bytes`] in all).
    pub st: u64,
    /// Ready marks, inside the shared state.
    pub ready: u64,
    /// Command slots, inside the shared state.
    pub slots: u64,
    /// The PRP pool as the GPU sees it (a shared pair's imported pool).
    pub prp_va: u64,
    /// Per-page DMA addresses of the pool (owner mode); 0: use `prp_dma`.
    pub prp_page_dma: u64,
    /// The address naming the pool's first byte in a PRP2.
    pub prp_dma: u64,
    /// Per-wait deadline in wall-clock ticks (the device caps it at 2 s).
    pub timeout_ticks: u64,
    /// Wall-clock ticks per second on this GPU.
    pub tick_hz: u64,
    /// Entries in the SQ and in the CQ.
    pub depth: u32,
    /// Bytes of the pool per command slot ([`pq_prp_stride`]); 0: no pool.
    pub prp_stride: u32,
    /// Largest transfer of one command in bytes; 0: no limit.
    pub max_transfer: u32,
    /// 1: pause between polls that found nothing.
    pub backoff: u32,
}

impl PQueue {
    /// Points `st`, `ready` and `slots` into the shared state at device
    /// address `st` (what pqueue.h's `pq_attach` does); `depth` must be set.
    pub fn attach(&mut self, st: u64) {
        self.st = st;
        self.ready = st + PQ_SHARED_BYTES;
        self.slots = st + pq_slots_off(self.depth);
    }
}

/// `sizeof(pq_shared)`.
pub const PQ_SHARED_BYTES: u64 = 192;
/// Offset of `pq_shared::phase`.
const PQ_PHASE_OFFSET: usize = 136;

fn pq_slots_off(depth: u32) -> u64 {
    (PQ_SHARED_BYTES + 4 * depth as u64 + 63) & !63
}

/// Bytes of a pair's shared state (pqueue.h `pq_bytes`).
pub fn pq_bytes(depth: u32) -> u64 {
    pq_slots_off(depth) + 16 * depth as u64
}

/// The shared state of a fresh pair (pqueue.h `pq_init(mem, depth, 0, 0,
/// 1)`), to copy into GPU memory before the first launch.
pub fn pq_shared_init(depth: u32) -> Vec<u8> {
    let mut v = vec![0u8; pq_bytes(depth) as usize];
    v[PQ_PHASE_OFFSET..PQ_PHASE_OFFSET + 4].copy_from_slice(&1u32.to_ne_bytes());
    v
}

/// Pool bytes per command slot (pqueue.h `pq_prp_stride`): the largest
/// power of two, at most a page, that gives each of `depth` slots its own.
pub fn pq_prp_stride(pool_bytes: u64, depth: u32) -> u32 {
    let per = if depth == 0 {
        0
    } else {
        pool_bytes / depth as u64
    };
    let mut s = 4096u32;
    while s >= 8 && s as u64 > per {
        s >>= 1;
    }
    if s >= 8 {
        s
    } else {
        0
    }
}

/// `guide_args` of `kernels/examples/guide_read.hip`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GuideArgs {
    /// Device address of the DMA address of each 4 KiB page of `buf`.
    pub page_dma: u64,
    /// The data buffer, device address.
    pub buf: u64,
    /// Pages of `buf`.
    pub npages: u64,
    /// First LBA of thread 0.
    pub slba: u64,
    /// Pattern seed the blocks were written with.
    pub seed: u64,
    /// Namespace.
    pub nsid: u32,
    /// log2 of the LBA size.
    pub lba_shift: u32,
    /// LBAs per thread (one command).
    pub blocks: u32,
    /// Queue pairs in the `PQueue` array.
    pub npairs: u32,
}

/// NVMe I/O opcodes (`PtArgs::opc`).
pub const NVME_OPC_WRITE: u32 = 0x01;
/// NVMe read.
pub const NVME_OPC_READ: u32 = 0x02;

/// `pt_args` of `kernels/examples/pthread_io.hip`: every thread of the
/// launch runs `cmds_per_thread` commands of `bytes_per_cmd`, thread g's
/// k-th at buffer offset `(g * cmds_per_thread + k) * bytes_per_cmd`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PtArgs {
    /// Device address of the DMA address of each 4 KiB page of `buf`.
    pub page_dma: u64,
    /// The data buffer, device address.
    pub buf: u64,
    /// Pages of `buf`.
    pub npages: u64,
    /// LBA of buffer byte 0.
    pub slba: u64,
    /// Pattern seed.
    pub seed: u64,
    /// Namespace.
    pub nsid: u32,
    /// log2 of the LBA size.
    pub lba_shift: u32,
    /// Bytes per command, a multiple of the LBA size.
    pub bytes_per_cmd: u32,
    /// Commands per thread.
    pub cmds_per_thread: u32,
    /// Queue pairs in the `PQueue` array.
    pub npairs: u32,
    /// `NVME_OPC_WRITE` (1) or `NVME_OPC_READ` (2).
    pub opc: u32,
    /// 1: a thread picks its pair by its SM/CU id; 0: by its global index.
    pub by_unit: u32,
    /// Padding (0).
    pub pad: u32,
}

/// `gpunvme::array_ctrl` (array.h): one controller of a storage array.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayCtrl {
    /// Device address of this controller's `PQueue`s.
    pub qps: u64,
    /// The array's first LBA on this controller.
    pub base_lba: u64,
    /// LBAs the array may use there, from `base_lba`.
    pub lbas: u64,
    /// Queue pairs in `qps`.
    pub nqp: u32,
    /// Namespace.
    pub nsid: u32,
    /// log2 of the LBA size.
    pub lba_shift: u32,
    /// Padding (0).
    pub pad: u32,
}

/// `gpunvme::array_stats` (array.h): the slow path's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ArrayStats {
    /// Page reads submitted.
    pub loads: u64,
    /// Page writes submitted (a replicated page: one per controller).
    pub writebacks: u64,
    /// Valid pages a load replaced.
    pub evictions: u64,
    /// Lookups that found their page being loaded.
    pub waits: u64,
    /// Passes that found no frame of the set free.
    pub noframe: u64,
    /// Loads and write-backs that failed.
    pub failures: u64,
    /// Frames retired (a command without a completion).
    pub dead: u64,
    /// Padding.
    pub pad: u64,
}

/// `gpunvme::ARRAY_STRIPE`.
pub const ARRAY_STRIPE: u32 = 0;
/// `gpunvme::ARRAY_REPLICATE`.
pub const ARRAY_REPLICATE: u32 = 1;

/// `gpunvme::array_desc` (array.h): what every thread of an array kernel
/// holds. Every pointer is a device address.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayDesc {
    /// `ArrayCtrl[n_ctrl]`.
    pub ctrl: u64,
    /// The frames, `n_frames << page_shift` bytes.
    pub frames: u64,
    /// `u64[n_ctrl * frame_pages]`: controller c's DMA address of 4 KiB
    /// page k of the frames at `c * frame_pages + k`.
    pub frame_dma: u64,
    /// The cache's bookkeeping ([`array_meta_bytes`]): state words.
    pub state: u64,
    /// Why a frame's load failed.
    pub ferr: u64,
    /// The sets' locks.
    pub set_lock: u64,
    /// The sets' clock hands.
    pub hand: u64,
    /// `ArrayStats`, or 0.
    pub stats: u64,
    /// `operator[]`'s first error, or 0.
    pub error: u64,
    /// Host stop flag, or 0.
    pub stop: u64,
    /// Array length in bytes.
    pub bytes: u64,
    /// Per wait, in wall-clock ticks (capped on the GPU).
    pub timeout_ticks: u64,
    /// Wall-clock ticks per second.
    pub tick_hz: u64,
    /// Controllers.
    pub n_ctrl: u32,
    /// `ARRAY_STRIPE` or `ARRAY_REPLICATE`.
    pub layout: u32,
    /// Stripe unit in pages.
    pub chunk_pages: u32,
    /// log2 of the page size, 12..16.
    pub page_shift: u32,
    /// Frames: `n_sets * ways`.
    pub n_frames: u32,
    /// Frames per set, a power of two up to 16.
    pub ways: u32,
    /// Sets.
    pub n_sets: u32,
    /// 4 KiB pages of the frames.
    pub frame_pages: u32,
}

impl ArrayDesc {
    /// Points the bookkeeping pointers into an allocation of
    /// [`array_meta_bytes`] at device address `meta` (array.h's
    /// `array_meta_attach`); `n_frames` and `n_sets` must be set.
    pub fn attach_meta(&mut self, meta: u64) {
        let (f, s) = (self.n_frames, self.n_sets);
        self.state = meta;
        self.ferr = meta + 8 * f as u64;
        self.set_lock = meta + array_meta_lock_off(f);
        self.hand = meta + array_meta_lock_off(f) + 4 * s as u64;
        self.stats = meta + array_meta_stats_off(f, s);
        self.error = self.stats + size_of::<ArrayStats>() as u64;
    }
}

fn array_meta_lock_off(n_frames: u32) -> u64 {
    (12 * n_frames as u64 + 63) & !63
}

/// Offset of the `ArrayStats` in the bookkeeping.
pub fn array_meta_stats_off(n_frames: u32, n_sets: u32) -> u64 {
    (array_meta_lock_off(n_frames) + 8 * n_sets as u64 + 63) & !63
}

/// Bytes of an array's bookkeeping (array.h `array_meta_bytes`), all
/// zero at the start.
pub fn array_meta_bytes(n_frames: u32, n_sets: u32) -> u64 {
    array_meta_stats_off(n_frames, n_sets) + size_of::<ArrayStats>() as u64 + 64
}

/// `array_args` of `kernels/examples/guide_array.hip`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArrayArgs {
    /// The pattern's seed.
    pub seed: u64,
    /// First element.
    pub first: u64,
    /// Elements.
    pub count: u64,
    /// Threads in the launch.
    pub threads: u32,
    /// Flush: write back with FUA.
    pub fua: u32,
}

// The same numbers are asserted in kernels/examples/example.h,
// guide_read.hip, pthread_io.hip, guide_array.hip and array.h.
const _: () = {
    assert!(size_of::<PtArgs>() == 72);
    assert!(offset_of!(PtArgs, nsid) == 40);
    assert!(offset_of!(PtArgs, by_unit) == 64);
    assert!(size_of::<QPair>() == 80);
    assert!(offset_of!(QPair, stop) == 32);
    assert!(offset_of!(QPair, tick_hz) == 48);
    assert!(offset_of!(QPair, depth) == 56);
    assert!(offset_of!(QPair, error) == 76);
    assert!(size_of::<IoArgs>() == 56);
    assert!(offset_of!(IoArgs, buf) == 16);
    assert!(offset_of!(IoArgs, nsid) == 32);
    assert!(offset_of!(IoArgs, rounds) == 52);
    assert!(size_of::<IoResult>() == 32);
    assert!(offset_of!(IoResult, ticks_total) == 16);
    assert!(offset_of!(IoResult, ticks_max_round) == 24);
    assert!(size_of::<PQueue>() == 120);
    assert!(offset_of!(PQueue, st) == 40);
    assert!(offset_of!(PQueue, prp_va) == 64);
    assert!(offset_of!(PQueue, timeout_ticks) == 88);
    assert!(offset_of!(PQueue, depth) == 104);
    assert!(offset_of!(PQueue, backoff) == 116);
    assert!(size_of::<ArrayCtrl>() == 40);
    assert!(size_of::<ArrayStats>() == 64);
    assert!(size_of::<ArrayDesc>() == 136);
    assert!(offset_of!(ArrayDesc, bytes) == 80);
    assert!(offset_of!(ArrayDesc, n_ctrl) == 104);
    assert!(offset_of!(ArrayDesc, frame_pages) == 132);
    assert!(size_of::<ArrayArgs>() == 32);
    assert!(offset_of!(ArrayArgs, fua) == 28);
    assert!(size_of::<GuideArgs>() == 56);
    assert!(offset_of!(GuideArgs, nsid) == 40);
    assert!(offset_of!(GuideArgs, npairs) == 52);
};

/// The device library's negative results (queue.h), by name.
pub fn status_name(status: i32) -> String {
    match status {
        0 => "ok".into(),
        -5 => "EIO: queue pair poisoned by an earlier failure".into(),
        -105 => "ENOBUFS: no frame of the page's cache set could be freed in time".into(),
        -16 => "EBUSY: not enough free slots".into(),
        -22 => "EINVAL: bad argument or queue pair setup".into(),
        -62 => "ETIME: the GPU wall clock does not advance".into(),
        -110 => "ETIMEDOUT: no completion before the deadline".into(),
        -125 => "ECANCELED: the host raised the stop flag".into(),
        s if s > 0 => format!(
            "NVMe status 0x{s:x} (SCT {}, SC 0x{:02x})",
            (s >> 8) & 7,
            s & 0xff
        ),
        s => format!("error {s}"),
    }
}

/// The data pattern of the example kernels (example.h `pattern`,
/// splitmix64): the 64-bit word at byte offset `off` of the disk.
pub fn pattern(seed: u64, off: u64) -> u64 {
    let mut z = seed.wrapping_add((off >> 3).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_splitmix64_reference() {
        // splitmix64's first output for state 0 + golden gamma, the
        // published reference value.
        assert_eq!(pattern(0, 8), 0xe220_a839_7b1d_cdaf);
        assert_ne!(pattern(1, 0), pattern(1, 8));
        assert_eq!(pattern(7, 8), pattern(7, 15), "one word per 8 bytes");
    }

    #[test]
    fn pqueue_shared_state_matches_pqueue_h() {
        // pq_slots_off(32) = (192 + 128 + 63) & ~63 = 320; + 16 * 32.
        assert_eq!(pq_bytes(32), 320 + 512);
        assert_eq!(pq_bytes(4), 256 + 64);
        let v = pq_shared_init(32);
        assert_eq!(v.len(), 832);
        assert_eq!(&v[136..140], &1u32.to_ne_bytes(), "phase 1");
        assert!(v.iter().enumerate().all(|(i, b)| *b == 0 || i == 136));
        let mut q = PQueue {
            depth: 32,
            ..Default::default()
        };
        q.attach(0x10_000);
        assert_eq!((q.ready, q.slots), (0x10_000 + 192, 0x10_000 + 320));
        assert_eq!(pq_prp_stride(4096 * 16, 32), 2048);
        assert_eq!(pq_prp_stride(4096, 32), 128);
        assert_eq!(pq_prp_stride(100, 32), 0);
    }

    #[test]
    fn array_meta_matches_array_h() {
        // array.h for 64 frames in 8 sets: state 512 B, ferr 256 B (768),
        // locks at 768, hands at 800, stats at (832 + 63) & ~63 = 832,
        // error at 896, 960 bytes in all.
        assert_eq!(array_meta_bytes(64, 8), 832 + 64 + 64);
        let mut d = ArrayDesc {
            n_frames: 64,
            n_sets: 8,
            ..Default::default()
        };
        d.attach_meta(0x1000);
        assert_eq!(
            (d.state, d.ferr, d.set_lock, d.hand, d.stats, d.error),
            (0x1000, 0x1200, 0x1300, 0x1320, 0x1340, 0x1380)
        );
        // 3 frames (one way each): locks at (36 + 63) & ~63 = 64.
        let mut e = ArrayDesc {
            n_frames: 3,
            n_sets: 3,
            ..Default::default()
        };
        e.attach_meta(0);
        assert_eq!((e.ferr, e.set_lock, e.hand, e.stats), (24, 64, 76, 128));
    }

    #[test]
    fn statuses_are_named() {
        assert!(status_name(-110).starts_with("ETIMEDOUT"));
        assert!(
            status_name(0x281).contains("SCT 2"),
            "{}",
            status_name(0x281)
        );
    }
}
