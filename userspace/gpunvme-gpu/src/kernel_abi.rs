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

// The same numbers are asserted in kernels/examples/example.h,
// guide_read.hip and pthread_io.hip.
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
    assert!(size_of::<GuideArgs>() == 56);
    assert!(offset_of!(GuideArgs, nsid) == 40);
    assert!(offset_of!(GuideArgs, npairs) == 52);
};

/// The device library's negative results (queue.h), by name.
pub fn status_name(status: i32) -> String {
    match status {
        0 => "ok".into(),
        -5 => "EIO: queue pair poisoned by an earlier failure".into(),
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
    fn statuses_are_named() {
        assert!(status_name(-110).starts_with("ETIMEDOUT"));
        assert!(
            status_name(0x281).contains("SCT 2"),
            "{}",
            status_name(0x281)
        );
    }
}
