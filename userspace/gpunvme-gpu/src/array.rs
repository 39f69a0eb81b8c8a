// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A storage array for `gpunvme::array<T>` (kernels/include/gpunvme/array.h):
//! a page cache in GPU memory over several controllers, striped or
//! replicated, built once for any number of launches.
//!
//! [`StorageArray::build`] checks the whole plan first ([`plan`]: page and
//! cache geometry, namespaces, capacities, queue limits, transfer sizes),
//! then for every controller: claims owner mode where asked
//! ([`Mode::Raw`]), maps the one frames allocation (payload memory:
//! uncached on RDNA, [`Gpu::alloc_payload`]), exported as a dma-buf once,
//! into the controller ([`DmabufMapping`]: a DMA address table per
//! controller), creates the queue pairs and maps their queue memory (and
//! PRP pool) into the GPU, and fills the per-thread API's descriptors and
//! shared state; then the array's descriptor ([`ArrayDesc`]) and its
//! zeroed bookkeeping, all in VRAM. Hand [`StorageArray::desc`] to a
//! kernel and the array itself to [`Gpu::launch`] as what the kernel may
//! reach: nothing of it is freed while the kernel runs, and dropping it
//! tears down in the safe order: the GPU's mappings and the queue pairs
//! (the controllers stop), then each controller's mapping of the frames,
//! the dma-buf, the VRAM, the host memory.

use std::mem::size_of;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use gpunvme::{Controller, DmaBuffer, DmabufMapping, ExportKind, Info, Mode, QueuePair};

use crate::error::{GpuError, Result};
use crate::gpu::{DeviceMemory, Gpu, HostMapped};
use crate::import::{ImportReport, Imported, Region};
use crate::kernel_abi::{
    array_meta_bytes, pq_bytes, pq_prp_stride, pq_shared_init, ArrayCtrl, ArrayDesc, ArrayStats,
    PQueue, ARRAY_REPLICATE, ARRAY_STRIPE,
};

/// Where the array's pages live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Page p on controller (p / chunk_pages) % n.
    Stripe {
        /// Pages per stripe unit (at least 1).
        chunk_pages: u32,
    },
    /// Every page on every controller; reads from a healthy one, write-backs to all.
    Replicate,
}

/// The array's shape and its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayConfig {
    /// Array length in bytes.
    pub bytes: u64,
    /// log2 of the page size: 12 (4 KiB) to 16 (64 KiB).
    pub page_shift: u32,
    /// Cache frames (one page each): a multiple of `ways`.
    pub frames: u32,
    /// Frames per set: a power of two, 1 to 16.
    pub ways: u32,
    /// Stripe or replicate.
    pub layout: Layout,
    /// Queue pairs per controller (a thread uses the one of its SM/CU).
    pub pairs_per_ctrl: u32,
    /// Depth of each pair: at least 65 on AMD wave64 (a wave's lanes may
    /// all claim on one pair), 33 for wave32 and NVIDIA.
    pub depth: u32,
    /// Each wait (a page another lane loads: 3x), capped at 2 s on a GPU.
    pub timeout: Duration,
}

impl Default for ArrayConfig {
    fn default() -> Self {
        ArrayConfig {
            bytes: 0,
            page_shift: 12,
            frames: 4096,
            ways: 8,
            layout: Layout::Stripe { chunk_pages: 1 },
            pairs_per_ctrl: 4,
            depth: 128,
            timeout: Duration::from_secs(1),
        }
    }
}

/// One controller of the array.
#[derive(Debug, Clone)]
pub struct ArrayTarget {
    /// The controller's open file.
    pub ctrl: Arc<Controller>,
    /// Shared (validated) pairs, or raw ones (claims owner mode).
    pub mode: Mode,
    /// Namespace.
    pub nsid: u32,
    /// The array's first LBA there.
    pub base_lba: u64,
}

/// What [`plan`] works out for one controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetPlan {
    /// log2 of its LBA size.
    pub lba_shift: u32,
    /// LBAs the array uses there, from the base.
    pub lbas: u64,
    /// PRP pool bytes per command slot a raw pair needs (0: no list).
    pub prp_stride: u32,
}

/// The checked geometry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Pages of the array.
    pub pages: u64,
    /// Pages on each controller.
    pub local_pages: u64,
    /// Cache sets.
    pub sets: u32,
    /// Bytes of the frames.
    pub frame_bytes: u64,
    /// Per controller.
    pub targets: Vec<TargetPlan>,
}

/// Checks an array of `cfg` over controllers described by their info,
/// mode, namespace and base LBA, before anything is allocated.
pub fn plan(targets: &[(Info, Mode, u32, u64)], cfg: &ArrayConfig) -> Result<Plan> {
    let bad = |m: String| Err(GpuError(format!("storage array: {m}")));
    if targets.is_empty() {
        return bad("no controller".into());
    }
    if !(12..=16).contains(&cfg.page_shift) {
        return bad(format!(
            "page_shift {} (a page is 4 to 64 KiB: 12..=16)",
            cfg.page_shift
        ));
    }
    if cfg.ways == 0 || cfg.ways > 16 || !cfg.ways.is_power_of_two() {
        return bad(format!("{} ways (a power of two, 1 to 16)", cfg.ways));
    }
    if cfg.frames == 0 || cfg.frames % cfg.ways != 0 {
        return bad(format!(
            "{} frames (a non-zero multiple of {} ways)",
            cfg.frames, cfg.ways
        ));
    }
    let page = 1u64 << cfg.page_shift;
    let frame_bytes = (cfg.frames as u64) << cfg.page_shift;
    if frame_bytes > gpunvme::sys::GPUNVME_MAX_MAP_BYTES as u64 {
        return bad(format!(
            "{frame_bytes} bytes of frames; one dma-buf maps at most {}",
            gpunvme::sys::GPUNVME_MAX_MAP_BYTES
        ));
    }
    if cfg.bytes == 0 || cfg.bytes % 8 != 0 {
        return bad(format!("{} bytes (a non-zero multiple of 8)", cfg.bytes));
    }
    let pages = cfg.bytes.div_ceil(page);
    if pages > (1u64 << 38) - 2 {
        return bad(format!("{pages} pages (at most 2^38 - 2)"));
    }
    let n = targets.len() as u64;
    let local_pages = match cfg.layout {
        Layout::Replicate => pages,
        Layout::Stripe { chunk_pages: 0 } => return bad("a stripe of 0 pages".into()),
        Layout::Stripe { chunk_pages } => {
            let per = chunk_pages as u64 * n;
            pages.div_ceil(per) * chunk_pages as u64
        }
    };
    if cfg.pairs_per_ctrl == 0 || cfg.depth < 2 {
        return bad(format!(
            "{} pairs of depth {} per controller",
            cfg.pairs_per_ctrl, cfg.depth
        ));
    }
    let mut out = Vec::new();
    for (info, mode, nsid, base) in targets {
        let who = &info.bdf;
        let Some(ns) = info.namespaces.iter().find(|x| x.nsid == *nsid) else {
            return bad(format!("{who} has no active namespace {nsid}"));
        };
        if !ns.lba_size.is_power_of_two() || ns.lba_size < 512 || ns.lba_size as u64 > page {
            return bad(format!(
                "{who}: LBA size {} and pages of {page} bytes",
                ns.lba_size
            ));
        }
        let lba_shift = ns.lba_size.trailing_zeros();
        let lbas = local_pages << (cfg.page_shift - lba_shift);
        if base
            .checked_add(lbas)
            .is_none_or(|end| end > ns.capacity_lbas)
        {
            return bad(format!(
                "{who} namespace {nsid}: the array needs LBAs {base}..{} of {}",
                base.saturating_add(lbas),
                ns.capacity_lbas
            ));
        }
        if let Some(m) = info.max_transfer_for(*mode) {
            if (m as u64) < page {
                return bad(format!(
                    "{who}: one {} command carries at most {m} bytes, a page is {page}",
                    mode.name()
                ));
            }
        }
        if cfg.pairs_per_ctrl > info.io_queues || cfg.depth > info.max_queue_entries {
            return bad(format!(
                "{who}: {} pairs of depth {} (the controller: {} of at most {})",
                cfg.pairs_per_ctrl, cfg.depth, info.io_queues, info.max_queue_entries
            ));
        }
        // A page past PRP1 and PRP2 needs a list of page/4096 - 1 entries.
        let entries = (page / 4096).saturating_sub(1);
        let prp_stride = if entries <= 1 {
            0
        } else {
            (entries * 8).next_power_of_two() as u32
        };
        out.push(TargetPlan {
            lba_shift,
            lbas,
            prp_stride,
        });
    }
    Ok(Plan {
        pages,
        local_pages,
        sets: cfg.frames / cfg.ways,
        frame_bytes,
        targets: out,
    })
}

/// Plain-data types copied to the device byte for byte.
trait Pod: Copy {}
impl Pod for PQueue {}
impl Pod for ArrayCtrl {}
impl Pod for ArrayDesc {}
impl Pod for u64 {}

fn bytes_of<T: Pod>(v: &[T]) -> &[u8] {
    // SAFETY: Pod types are repr(C) integers without padding (their sizes
    // are asserted in kernel_abi.rs), so every byte is initialized.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// One queue pair of the array. Field order is drop order: the GPU's
/// mappings of its queue memory, the pair (destroyed: the controller
/// stops), its PRP pool (the GPU's mapping, then the memory), its shared
/// state and page table.
struct ArrayPair<'g> {
    imports: Vec<Imported<'g>>,
    #[allow(dead_code)] // held for its drop order
    qp: QueuePair,
    pool_import: Option<Imported<'g>>,
    #[allow(dead_code)]
    pool: Option<DmaBuffer>,
    #[allow(dead_code)]
    state: DeviceMemory<'g>,
    #[allow(dead_code)]
    pool_pages: Option<DeviceMemory<'g>>,
}

/// A built array (see the module docs). Field order is drop order.
pub struct StorageArray<'g> {
    pairs: Vec<ArrayPair<'g>>,
    #[allow(dead_code)]
    frame_maps: Vec<DmabufMapping>,
    #[allow(dead_code)]
    frames_dmabuf: OwnedFd,
    #[allow(dead_code)]
    frames: DeviceMemory<'g>,
    tables: Vec<DeviceMemory<'g>>,
    meta: DeviceMemory<'g>,
    desc_mem: DeviceMemory<'g>,
    stop: HostMapped<'g>,
    desc: ArrayDesc,
    plan: Plan,
    reports: Vec<ImportReport>,
}

impl std::fmt::Debug for StorageArray<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StorageArray")
            .field("desc", &self.desc)
            .field("plan", &self.plan)
            .field("pairs", &self.pairs.len())
            .finish()
    }
}

fn err(what: impl std::fmt::Display) -> GpuError {
    GpuError(format!("storage array: {what}"))
}

impl<'g> StorageArray<'g> {
    /// Builds the array (see the module docs). Every step that fails says
    /// which controller and why; what was built so far is torn down.
    pub fn build(gpu: &'g Gpu, targets: &[ArrayTarget], cfg: &ArrayConfig) -> Result<Self> {
        let mut infos = Vec::new();
        for t in targets {
            if t.mode == Mode::Raw && t.ctrl.owner().is_none() {
                t.ctrl.claim_owner().map_err(err)?;
            }
            infos.push((t.ctrl.info().map_err(err)?, t.mode, t.nsid, t.base_lba));
        }
        let plan = plan(&infos, cfg)?;
        let hz = gpu.tick_hz()?;
        let n = targets.len();
        let frame_pages = (plan.frame_bytes / 4096) as usize;

        // The frames: one allocation, one dma-buf, mapped into each.
        let frames = gpu.alloc_payload(plan.frame_bytes as usize)?;
        let frames_dmabuf = gpu.export_dmabuf(&frames)?;
        let mut frame_maps = Vec::new();
        let mut frame_dma: Vec<u64> = Vec::with_capacity(n * frame_pages);
        for t in targets {
            let m =
                DmabufMapping::new(&t.ctrl, frames_dmabuf.as_fd(), frames.len()).map_err(err)?;
            if m.dma_addrs().len() < frame_pages {
                return Err(err(format!(
                    "the frames' dma-buf has {} pages, the cache {frame_pages}",
                    m.dma_addrs().len()
                )));
            }
            frame_dma.extend_from_slice(&m.dma_addrs()[..frame_pages]);
            frame_maps.push(m);
        }

        let stop = gpu.alloc_host_mapped(4096)?;
        let timeout_ticks = (hz as u128 * cfg.timeout.as_nanos() / 1_000_000_000) as u64;
        let mut pairs = Vec::new();
        let mut reports = Vec::new();
        let mut tables = Vec::new();
        let mut ctrls = Vec::new();
        for (k, t) in targets.iter().enumerate() {
            let (info, tp) = (&infos[k].0, plan.targets[k]);
            let mut views = Vec::new();
            for _ in 0..cfg.pairs_per_ctrl {
                let (p, q) = Self::pair(
                    gpu,
                    t,
                    info,
                    tp,
                    cfg,
                    hz,
                    timeout_ticks,
                    stop.dev(),
                    &mut reports,
                )?;
                pairs.push(p);
                views.push(q);
            }
            let mut qmem = gpu.alloc(size_of::<PQueue>() * views.len())?;
            qmem.write_at(0, bytes_of(&views))?;
            ctrls.push(ArrayCtrl {
                qps: qmem.ptr(),
                base_lba: t.base_lba,
                lbas: tp.lbas,
                nqp: cfg.pairs_per_ctrl,
                nsid: t.nsid,
                lba_shift: tp.lba_shift,
                pad: 0,
            });
            tables.push(qmem);
        }
        let mut ctrl_mem = gpu.alloc(size_of::<ArrayCtrl>() * n)?;
        ctrl_mem.write_at(0, bytes_of(&ctrls))?;
        let mut dma_mem = gpu.alloc(8 * frame_dma.len())?;
        dma_mem.write_at(0, bytes_of(&frame_dma))?;
        let meta_bytes = array_meta_bytes(cfg.frames, plan.sets) as usize;
        let mut meta = gpu.alloc(meta_bytes)?;
        meta.write_at(0, &vec![0u8; meta_bytes])?;
        let mut desc = ArrayDesc {
            ctrl: ctrl_mem.ptr(),
            frames: frames.ptr(),
            frame_dma: dma_mem.ptr(),
            stop: stop.dev(),
            bytes: cfg.bytes,
            timeout_ticks,
            tick_hz: hz,
            n_ctrl: n as u32,
            layout: match cfg.layout {
                Layout::Stripe { .. } => ARRAY_STRIPE,
                Layout::Replicate => ARRAY_REPLICATE,
            },
            chunk_pages: match cfg.layout {
                Layout::Stripe { chunk_pages } => chunk_pages,
                Layout::Replicate => 1,
            },
            page_shift: cfg.page_shift,
            n_frames: cfg.frames,
            ways: cfg.ways,
            n_sets: plan.sets,
            frame_pages: frame_pages as u32,
            ..Default::default()
        };
        desc.attach_meta(meta.ptr());
        let mut desc_mem = gpu.alloc(size_of::<ArrayDesc>())?;
        desc_mem.write_at(0, bytes_of(&[desc]))?;
        tables.push(ctrl_mem);
        tables.push(dma_mem);
        Ok(StorageArray {
            pairs,
            frame_maps,
            frames_dmabuf,
            frames,
            tables,
            meta,
            desc_mem,
            stop,
            desc,
            plan,
            reports,
        })
    }

    /// One queue pair on target `t`, its memory in the GPU's address
    /// space, and its per-thread API descriptor.
    #[allow(clippy::too_many_arguments)]
    fn pair(
        gpu: &'g Gpu,
        t: &ArrayTarget,
        info: &Info,
        tp: TargetPlan,
        cfg: &ArrayConfig,
        hz: u64,
        timeout_ticks: u64,
        stop: u64,
        reports: &mut Vec<ImportReport>,
    ) -> Result<(ArrayPair<'g>, PQueue)> {
        let raw = t.mode == Mode::Raw;
        let qp = QueuePair::create_with(&t.ctrl, cfg.depth, t.mode).map_err(err)?;
        let m = qp.memory();
        let mut parts = vec![
            (
                ExportKind::Doorbell,
                "doorbell page",
                m.doorbell_page,
                4096,
                raw,
            ),
            (ExportKind::Sq, "SQ", m.sq, m.sq_len, false),
            (ExportKind::Cq, "CQ", m.cq, m.cq_len, false),
        ];
        if !raw {
            parts.push((
                ExportKind::PrpPool,
                "PRP pool",
                m.prp_pool,
                m.prp_pool_len,
                false,
            ));
        }
        let mut imports = Vec::new();
        for (kind, name, cpu, len, mmio) in parts {
            let what = format!("{} q{} {name} ({})", info.bdf, qp.qid(), qp.mode());
            let fd = qp.export(kind).map_err(err)?;
            let region = Region {
                what: &what,
                dmabuf: Some(fd.as_fd()),
                cpu: Some(cpu),
                len,
                mmio,
            };
            // SAFETY: `cpu` is qp's mapping of `len` bytes of its queue
            // memory, alive while qp is; the import is dropped before qp
            // (ArrayPair's field order). No Rust reference covers that
            // memory (QueuePair reaches it through raw pointers, and the
            // array never drives the pair from the CPU).
            let (imp, rep) = unsafe { gpu.import(&region) };
            let ok = imp.is_some();
            reports.push(rep.clone());
            match imp {
                Some(i) => imports.push(i),
                None if ok => unreachable!(),
                None => {
                    return Err(err(format!(
                        "the GPU could not map {what}: {}",
                        rep.describe()
                    )))
                }
            }
        }
        let mut st = gpu.alloc(pq_bytes(cfg.depth) as usize)?;
        st.write_at(0, &pq_shared_init(cfg.depth))?;
        let (sq_db, cq_db) = (
            imports[0].device_ptr + m.sq_db_offset as u64,
            imports[0].device_ptr + m.cq_db_offset as u64,
        );
        let mut q = PQueue {
            sq: imports[1].device_ptr,
            cq: imports[2].device_ptr,
            sq_db,
            cq_db,
            stop,
            timeout_ticks,
            tick_hz: hz,
            depth: cfg.depth,
            max_transfer: info.max_transfer_for(t.mode).unwrap_or(0),
            backoff: 1,
            ..Default::default()
        };
        q.attach(st.ptr());
        let (mut pool_import, mut pool, mut pool_pages) = (None, None, None);
        if !raw {
            q.prp_va = imports[3].device_ptr;
            q.prp_dma = m.prp_dma;
            q.prp_stride = pq_prp_stride(m.prp_pool_len as u64, cfg.depth);
        } else if tp.prp_stride != 0 {
            // An owner's pair has no module pool: host memory mapped for
            // the controller and for the GPU, and its page table in VRAM.
            let mut buf = DmaBuffer::with_len(&t.ctrl, tp.prp_stride as usize * cfg.depth as usize)
                .map_err(err)?;
            let what = format!("{} q{} PRP pool (raw)", info.bdf, qp.qid());
            let region = Region {
                what: &what,
                dmabuf: None,
                cpu: Some(buf.as_mut_slice().as_mut_ptr()),
                len: buf.len(),
                mmio: false,
            };
            // SAFETY: `buf` is this pair's DmaBuffer, kept after the import
            // in ArrayPair (dropped after it); Rust never reads or writes
            // it again (it is private here): only the GPU writes the lists
            // and the controller reads them.
            let (imp, rep) = unsafe { gpu.import(&region) };
            reports.push(rep.clone());
            let imp = imp
                .ok_or_else(|| err(format!("the GPU could not map {what}: {}", rep.describe())))?;
            let mut pages = gpu.alloc(8 * buf.dma_addrs().len())?;
            pages.write_at(0, bytes_of(buf.dma_addrs()))?;
            q.prp_va = imp.device_ptr;
            q.prp_page_dma = pages.ptr();
            q.prp_stride = pq_prp_stride(buf.len() as u64, cfg.depth);
            pool_import = Some(imp);
            pool = Some(buf);
            pool_pages = Some(pages);
        }
        Ok((
            ArrayPair {
                imports,
                qp,
                pool_import,
                pool,
                state: st,
                pool_pages,
            },
            q,
        ))
    }

    /// The device address of the array's descriptor: the kernel argument
    /// (`const array_desc *`).
    pub fn desc(&self) -> u64 {
        self.desc_mem.ptr()
    }

    /// The descriptor as built.
    pub fn descriptor(&self) -> &ArrayDesc {
        &self.desc
    }

    /// The checked geometry.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The host's stop flag every wait of the array (and of its pairs)
    /// polls: for [`crate::LaunchConfig::stop_flag`].
    pub fn stop_flag(&self) -> *mut u32 {
        self.stop.at::<u32>(0)
    }

    /// How every queue region was mapped into the GPU.
    pub fn reports(&self) -> &[ImportReport] {
        &self.reports
    }

    /// The cache's counters (a copy from the device; the array is not in
    /// a launch while `&self` is borrowed here).
    pub fn stats(&self) -> Result<ArrayStats> {
        let off = (self.desc.stats - self.meta.ptr()) as usize;
        let mut b = [0u8; size_of::<ArrayStats>()];
        self.meta.read_at(off, &mut b)?;
        // SAFETY: ArrayStats is eight u64s; any bytes are a valid one.
        Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast()) })
    }

    /// Empties the cache (zeroes its bookkeeping; dirty pages not yet
    /// written back are dropped: run a flush kernel first). Frames a failed
    /// command retired are usable again only once the pairs are recreated:
    /// build a new array after a failure.
    pub fn reset_cache(&mut self) -> Result<()> {
        let n = self.meta.len();
        self.meta.write_at(0, &vec![0u8; n])
    }

    /// Tables in VRAM the descriptor points to (kept for their lifetime).
    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    /// Whether the GPU maps every pair's PRP pool (owner mode with pages
    /// over 8 KiB needs one).
    pub fn pools_mapped(&self) -> usize {
        self.pairs
            .iter()
            .filter(|p| p.pool_import.is_some() || p.imports.len() == 4)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(bdf: &str, lba: u32, cap: u64, mdts: Option<u32>) -> Info {
        // CAP: MQES 1023, CQR, TO 20 (10 s), DSTRD 2, NVM command set.
        let cap_reg = 0x3ff | (1 << 16) | (20 << 24) | (2u64 << 32) | (1u64 << 37);
        let c = gpunvme::Cap::from_raw(cap_reg);
        let mut raw = gpunvme::sys::gpunvme_info {
            cap: cap_reg,
            num_namespaces: 1,
            page_size: 4096,
            io_queues: 8,
            max_queue_entries: c.max_queue_entries(),
            doorbell_stride: c.doorbell_stride(),
            ready_timeout_ms: c.ready_timeout_ms(),
            mdts_bytes: mdts.unwrap_or(0),
            shared_max_transfer: mdts.map_or(2 << 20, |m| m.min(2 << 20)),
            ..Default::default()
        };
        raw.bdf[0] = b'x' as _;
        let mut i = Info::from_raw(&raw).expect("info");
        i.bdf = bdf.into();
        i.namespaces = vec![gpunvme::Namespace {
            nsid: 1,
            lba_size: lba,
            capacity_lbas: cap,
        }];
        i
    }

    fn cfg(bytes: u64) -> ArrayConfig {
        ArrayConfig {
            bytes,
            page_shift: 14,
            frames: 64,
            ways: 8,
            layout: Layout::Stripe { chunk_pages: 2 },
            pairs_per_ctrl: 2,
            depth: 65,
            timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_stripe_over_four_needs_its_share_of_each() {
        let t: Vec<_> = (0..4)
            .map(|k| {
                (
                    info(&format!("0000:00:1{k}.0"), 512, 1 << 20, Some(512 << 10)),
                    Mode::Shared,
                    1,
                    1000,
                )
            })
            .collect();
        // 100 pages of 16 KiB in chunks of 2 over 4: 13 rounds of 8 pages,
        // 26 local pages of 32 LBAs each.
        let p = plan(&t, &cfg(100 * 16384)).expect("plan");
        assert_eq!((p.pages, p.local_pages, p.sets), (100, 26, 8));
        assert_eq!(p.targets[0].lbas, 26 * 32);
        assert_eq!(p.targets[0].lba_shift, 9);
        // 16 KiB: PRP1 + a list of 3 entries (32 bytes per slot).
        assert_eq!(p.targets[0].prp_stride, 32);
    }

    #[test]
    fn replicate_needs_the_whole_array_on_each() {
        let t = vec![
            (info("a", 4096, 64, None), Mode::Raw, 1, 0),
            (info("b", 4096, 64, None), Mode::Shared, 1, 0),
        ];
        let mut c = cfg(16 * 16384);
        c.layout = Layout::Replicate;
        let p = plan(&t, &c).expect("plan");
        assert_eq!((p.local_pages, p.targets[1].lbas), (16, 64));
        c.bytes += 8; // one page more: 68 LBAs of 64
        assert!(plan(&t, &c)
            .unwrap_err()
            .0
            .contains("needs LBAs 0..68 of 64"));
    }

    #[test]
    fn bad_plans_say_why() {
        let t = vec![(info("a", 512, 1 << 20, None), Mode::Raw, 1, 0)];
        let cases: Vec<(ArrayConfig, &str)> = vec![
            (
                ArrayConfig {
                    page_shift: 11,
                    ..cfg(4096)
                },
                "page_shift 11",
            ),
            (
                ArrayConfig {
                    ways: 3,
                    ..cfg(4096)
                },
                "3 ways",
            ),
            (
                ArrayConfig {
                    frames: 60,
                    ..cfg(4096)
                },
                "60 frames",
            ),
            (cfg(0), "0 bytes"),
            (
                ArrayConfig {
                    layout: Layout::Stripe { chunk_pages: 0 },
                    ..cfg(4096)
                },
                "stripe of 0",
            ),
            (
                ArrayConfig {
                    depth: 4096,
                    ..cfg(4096)
                },
                "depth 4096",
            ),
            (
                ArrayConfig {
                    frames: 1 << 20,
                    ways: 16,
                    ..cfg(4096)
                },
                "one dma-buf maps at most",
            ),
        ];
        for (c, want) in cases {
            let e = plan(&t, &c).unwrap_err().0;
            assert!(e.contains(want), "{want}: {e}");
        }
        // MDTS 8 KiB, 16 KiB pages.
        let small = vec![(info("a", 512, 1 << 20, Some(8192)), Mode::Raw, 1, 0)];
        let e = plan(&small, &cfg(4096)).unwrap_err().0;
        assert!(
            e.contains("one raw command carries at most 8192 bytes"),
            "{e}"
        );
        let none = plan(
            &[(info("a", 512, 1 << 20, None), Mode::Shared, 2, 0)],
            &cfg(4096),
        );
        assert!(none.unwrap_err().0.contains("no active namespace 2"));
        assert!(plan(&[], &cfg(4096))
            .unwrap_err()
            .0
            .contains("no controller"));
    }

    #[test]
    fn small_pages_need_no_pool() {
        let t = vec![(info("a", 512, 1 << 20, None), Mode::Raw, 1, 0)];
        for (shift, stride) in [(12, 0), (13, 0), (15, 64), (16, 128)] {
            let c = ArrayConfig {
                page_shift: shift,
                ..cfg(1 << 16)
            };
            assert_eq!(
                plan(&t, &c).expect("plan").targets[0].prp_stride,
                stride,
                "page_shift {shift}"
            );
        }
    }

    #[test]
    fn pod_bytes_are_the_structs() {
        let d = ArrayDesc {
            bytes: 0x1122,
            n_ctrl: 3,
            ..Default::default()
        };
        let b = bytes_of(std::slice::from_ref(&d));
        assert_eq!(b.len(), 136);
        assert_eq!(&b[80..88], &0x1122u64.to_ne_bytes());
        assert_eq!(&b[104..108], &3u32.to_ne_bytes());
    }
}
