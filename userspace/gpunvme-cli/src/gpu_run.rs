// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme gpu-run`: the whole path on real hardware. A GPU kernel from
//! kernels/examples drives queue pairs of a controller bound to gpunvme,
//! and the controller DMAs straight to and from VRAM.
//!
//! Steps, each failing with its own message: HSA_FORCE_FINE_GRAIN_PCIE
//! (before HIP loads), claim owner mode (--owner only), open the GPU, load
//! the code object for its architecture, allocate VRAM and export it as a
//! dma-buf for GPUNVME_IOC_MAP_DMABUF, create queue pairs and import their
//! doorbell page, SQ and CQ (and, for --api thread, a shared pair's PRP
//! pool) into the GPU (every route tried and reported), run the
//! round-trip self-test on every imported region and the host-mapped
//! memory (a failure refuses the launch, naming region, route and memory
//! type; --skip-self-test skips it and says so), launch one workgroup per
//! queue pair (--api group: it drives its pair in lockstep batches, PRP1
//! and PRP2 only; --api thread: pthread_io.hip, every thread submits and
//! waits on its own, on pair (thread index mod pairs), with the per-thread
//! API's shared state in VRAM and PRP lists up to MDTS), wait with a
//! deadline (the stop flag ends a stuck kernel), report, tear down in the
//! order that never frees memory the controller or GPU can still reach.
//!
//! On a namespace the kernel drives (DEVICE /dev/ngXnY, /dev/nvmeXnY or a
//! partition) the queue pairs are the passthrough back end's shadow pairs
//! (the library's relay checks each command and submits it through
//! io_uring) and the data buffer is host memory the GPU maps: io_uring
//! cannot take GPU memory on released kernels (the message says what is
//! missing). The kernels are the same.
//!
//! Queue pairs are shared by default: their doorbell page, SQ and CQ are
//! shadows in memory (the module checks each command and relays it), so
//! any GPU that can map host memory can drive them, and the data buffer
//! is VRAM this same file mapped, as the checks demand. With --owner they
//! are raw: the GPU rings the controller's BAR0 doorbell page itself,
//! which needs a GPU that can map peer MMIO (`gpunvme probe`: direct).

use std::mem::size_of;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use gpunvme::{DmaBuffer, DmabufMapping, ExportKind, Mode, QueuePair};
use gpunvme_gpu::import::{ImportReport, Imported, Region};
use gpunvme_gpu::kernel_abi::{
    pq_bytes, pq_prp_stride, pq_shared_init, status_name, IoArgs, IoResult, PQueue, PtArgs, QPair,
    NVME_OPC_READ, NVME_OPC_WRITE,
};
use gpunvme_gpu::{code_object, fine_grain, DeviceMemory, Gpu, LaunchConfig};
use serde_json::json;
use std::os::fd::OwnedFd;

use crate::habits::{
    interrupted, parse_device, DataMismatch, Device, Interrupted, Output, Progress, Unit,
};
use crate::passthrough_args::PassthroughArgs;
use crate::Res;

/// Which example kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kernel {
    /// Fill VRAM with the pattern of --pattern, write it out, flush.
    Write,
    /// Read into VRAM and check every 64-bit word against --pattern's.
    ReadVerify,
    /// Timed reads, --rounds batches per queue pair; no verification.
    Sweep,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Write => "write",
            Kernel::ReadVerify => "read_verify",
            Kernel::Sweep => "sweep",
        }
    }
}

/// Which device API drives the queue pairs (`--api`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Api {
    /// The group API (queue.h): one workgroup per queue pair, its lanes
    /// submit a batch and reap it together.
    Group,
    /// The per-thread API (pqueue.h, kernels/examples/pthread_io.hip):
    /// every thread submits and waits for its own commands, on queue pair
    /// (global thread index mod --qpairs), sharing it with the others.
    Thread,
}

/// Where a queue pair's CQ lives (`--cq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CqPlace {
    /// Memory of the module (host memory).
    Host,
    /// GPU memory, written by the controller peer to peer.
    Gpu,
}

#[derive(Args, Debug)]
pub struct GpuRunArgs {
    /// The controller: a PCI address (0000:01:00.0 or 01:00.0),
    /// /dev/gpunvmeN, gpunvmeN, or a namespace node /dev/gpunvmeNnM; or a
    /// namespace the kernel drives (/dev/ngXnY, /dev/nvmeXnY, a partition)
    /// through io_uring passthrough, the data buffer in host memory the
    /// GPU maps.
    #[arg(value_name = "DEVICE", value_parser = parse_device)]
    pub device: Device,
    /// The example kernel to launch.
    #[arg(long, value_enum)]
    pub kernel: Kernel,
    /// Queue pairs (one GPU workgroup each).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub qpairs: u32,
    /// The device API: `group` (one workgroup per pair, lockstep batches)
    /// or `thread` (every thread submits and waits on its own; --kernel
    /// write or read-verify; --cmds a multiple of min(QD, 64); commands up
    /// to MDTS through PRP lists).
    #[arg(long, value_enum, value_name = "API", default_value = "group")]
    pub api: Api,
    /// Commands in flight per queue pair: its workgroup has min(QD, 64)
    /// lanes and the pair QD + 1 entries.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub qd: u32,
    /// Commands per queue pair.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub cmds: u32,
    /// Blocks per command: at most 8 KiB per command with --api group
    /// (its kernels build PRP1 and PRP2, no PRP lists); with --api thread
    /// up to the controller's MDTS (at most 2 MiB), through PRP lists the
    /// GPU builds in the pair's PRP pool.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub cmd_blocks: u32,
    /// First logical block of the run; queue pair q's command k covers
    /// the blocks after those of the commands before it.
    #[arg(
        short = 's',
        long = "start-block",
        value_name = "LBA",
        default_value_t = 0
    )]
    pub start_block: u64,
    /// Pattern seed: the same data as `gpunvme write -p SEED` (so `gpunvme
    /// verify -p SEED` checks what --kernel write wrote, and the other way
    /// round).
    #[arg(short = 'p', long, value_name = "SEED", default_value_t = 1)]
    pub pattern: u64,
    /// Namespace ID (default: the node's namespace, else 1).
    #[arg(short = 'n', long = "namespace-id", value_name = "NSID")]
    pub nsid: Option<u32>,
    /// Sweep: batches per queue pair.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub rounds: u32,
    /// Claim owner mode and use raw queue pairs: the GPU rings the
    /// controller's doorbell itself (needs CAP_SYS_RAWIO, no lockdown, a
    /// translating IOMMU, and a GPU that can map the BAR0 doorbell page).
    /// Default: shared queue pairs, relayed and checked by the module.
    #[arg(long)]
    pub owner: bool,
    /// Where each queue pair's CQ lives: `host` (the module's memory, the
    /// GPU polls it over PCIe; a shared pair's mirror) or `gpu` (with
    /// --owner: GPU memory exported as a dma-buf, written by the controller
    /// peer to peer, polled locally: GPUNVME_QPAIR_CQ_IN_MAP). Default:
    /// host, except with --owner on RDNA (gfx10/11/12), where a host CQ is
    /// one the controller writes peer to peer, which the field report
    /// found stale there: gpu (an explicit --cq host is warned about).
    /// `gpunvme probe` recommends one per GPU.
    #[arg(long, value_enum, value_name = "WHERE")]
    pub cq: Option<CqPlace>,
    /// Launch without the round-trip self-test of the queue memory (the
    /// GPU and the CPU each store a value the other must see, in every
    /// imported region, before the kernel runs); the run says it was
    /// skipped.
    #[arg(long)]
    pub skip_self_test: bool,
    /// Where `make kernels` put the code objects.
    #[arg(long, value_name = "DIR", default_value = "kernels/build")]
    pub code_objects: PathBuf,
    /// GPU index in its runtime.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub gpu: u32,
    /// Deadline of each wait inside the kernel, in ms (capped at 2 s on
    /// the GPU, far below the ~10 s GPU watchdog).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub timeout_ms: u64,
    #[command(flatten)]
    pub passthrough: PassthroughArgs,
    #[command(flatten)]
    pub out: Output,
}

/// The data buffer and what maps it, in teardown order: VRAM the module
/// imported (its mapping, the dma-buf, the VRAM), or host memory the
/// passthrough back end registered (the GPU's mapping of it, the buffer).
enum Payload<'g> {
    Vram {
        vmap: DmabufMapping,
        _dmabuf: OwnedFd,
        vram: DeviceMemory<'g>,
    },
    Host {
        import: Imported<'g>,
        buf: DmaBuffer,
    },
}

impl Payload<'_> {
    /// The GPU's address of the buffer.
    fn gpu_ptr(&self) -> u64 {
        match self {
            Payload::Vram { vram, .. } => vram.ptr(),
            Payload::Host { import, .. } => import.device_ptr,
        }
    }

    /// The controller's (or the relay's) address of each 4 KiB page.
    fn dma_addrs(&self) -> &[u64] {
        match self {
            Payload::Vram { vmap, .. } => vmap.dma_addrs(),
            Payload::Host { buf, .. } => buf.dma_addrs(),
        }
    }

    /// What the data buffer is, for the report.
    fn memory(&self, gpu: &Gpu) -> String {
        match self {
            Payload::Vram { .. } => format!("{:?}", gpu.payload_memory()),
            Payload::Host { .. } => "host memory (passthrough back end)".into(),
        }
    }
}

/// Most bytes one command of the group API's kernels may move: PRP1 +
/// PRP2, no lists.
const MAX_CMD_BYTES: u64 = 8192;

/// Most bytes one command of the per-thread API may move here: PRP1's page
/// and one PRP-list page (512 entries) per command slot, no chaining.
const THREAD_MAX_CMD_BYTES: u64 = 2 << 20;

/// PRP-list entries a command of `bytes` may need at any 4-byte aligned
/// buffer offset (pqueue.h `prp_list_entries`, at its worst).
pub fn max_list_entries(bytes: u64) -> u64 {
    bytes.div_ceil(4096)
}

/// Where the CQs go (`--cq`, or its default), and a line to print about it.
/// With --owner on RDNA a host CQ is written by the controller peer to
/// peer, which the field report found stale on RDNA: the default there is
/// the GPU's memory, and an explicit `--cq host` gets a warning.
pub fn resolve_cq(
    arg: Option<CqPlace>,
    owner: bool,
    kind: gpunvme_gpu::RuntimeKind,
    arch: &str,
) -> (CqPlace, Option<String>) {
    let rdna = kind == gpunvme_gpu::RuntimeKind::Hip && fine_grain::is_rdna(arch);
    match (arg, owner && rdna) {
        (Some(CqPlace::Host), true) => (
            CqPlace::Host,
            Some(format!(
                "warning: --owner --cq host on {arch} (RDNA): the controller writes this CQ in host \
                 memory peer to peer, and a GPU poll of such memory was found stale on RDNA (the \
                 field report); --cq gpu puts it in GPU memory"
            )),
        ),
        (None, true) => (
            CqPlace::Gpu,
            Some(format!(
                "--owner on {arch} (RDNA): CQs in GPU memory (--cq gpu), not a host CQ the \
                 controller writes peer to peer (found stale on RDNA); --cq host to override"
            )),
        ),
        (arg, _) => (arg.unwrap_or(CqPlace::Host), None),
    }
}

/// Checks the arguments against the controller before anything is set up.
pub fn plan(
    a: &GpuRunArgs,
    lba_size: u32,
    capacity: u64,
    mdts: Option<u32>,
) -> Result<u64, String> {
    if a.qpairs == 0 || a.cmds == 0 || a.cmd_blocks == 0 || a.qd == 0 {
        return Err("--qpairs, --qd, --cmds and --cmd-blocks must be at least 1".into());
    }
    if a.passthrough.relay_inline {
        return Err(
            "--relay-inline: the GPU polls the CQ mirror itself, so no thread of this process \
             would wait on the pairs and relay their commands; leave it out (relay threads)"
                .into(),
        );
    }
    if a.cq == Some(CqPlace::Gpu) && !a.owner {
        return Err(
            "--cq gpu needs --owner: a shared pair's CQ is the module's mirror, written by its relay"
                .into(),
        );
    }
    let cmd_bytes = a.cmd_blocks as u64 * lba_size as u64;
    if a.api == Api::Group && cmd_bytes > MAX_CMD_BYTES {
        return Err(format!(
            "--cmd-blocks {} x {lba_size}-byte LBAs = {cmd_bytes} bytes per command; the group API's \
             kernels build PRP1/PRP2 only, so at most {MAX_CMD_BYTES} bytes ({} blocks); --api thread \
             goes up to MDTS through PRP lists",
            a.cmd_blocks,
            MAX_CMD_BYTES / lba_size as u64
        ));
    }
    if a.cmd_blocks > 65536 {
        return Err(format!(
            "--cmd-blocks {}: one NVMe command moves at most 65536 blocks",
            a.cmd_blocks
        ));
    }
    if a.api == Api::Thread {
        if a.kernel == Kernel::Sweep {
            return Err(
                "--api thread runs --kernel write or read-verify (pthread_io.hip); sweep is a group-API kernel"
                    .into(),
            );
        }
        let lanes = a.qd.min(64);
        if a.cmds % lanes != 0 {
            return Err(format!(
                "--api thread: --cmds {} is not a multiple of the {lanes} threads per workgroup \
                 (min(--qd, 64)); each thread runs --cmds / {lanes} commands",
                a.cmds
            ));
        }
        if cmd_bytes > THREAD_MAX_CMD_BYTES {
            return Err(format!(
                "--api thread: {cmd_bytes} bytes per command; gpu-run gives each command slot one \
                 PRP-list page, so at most {THREAD_MAX_CMD_BYTES} bytes ({} blocks)",
                THREAD_MAX_CMD_BYTES / lba_size as u64
            ));
        }
    }
    if let Some(m) = mdts {
        if cmd_bytes > m as u64 {
            return Err(format!(
                "{cmd_bytes} bytes per command exceeds the controller's MDTS of {m} bytes"
            ));
        }
    }
    let blocks = a.qpairs as u64 * a.cmds as u64 * a.cmd_blocks as u64;
    if a.start_block
        .checked_add(blocks)
        .is_none_or(|end| end > capacity)
    {
        return Err(format!(
            "LBAs {}..{} do not fit the namespace ({capacity} blocks)",
            a.start_block,
            a.start_block.saturating_add(blocks),
        ));
    }
    let bytes = blocks * lba_size as u64;
    if bytes > gpunvme::sys::GPUNVME_MAX_MAP_BYTES as u64 {
        return Err(format!(
            "{bytes} bytes of VRAM for the run; the module imports at most {} per dma-buf: fewer --qpairs, --cmds or --cmd-blocks",
            gpunvme::sys::GPUNVME_MAX_MAP_BYTES
        ));
    }
    Ok(bytes)
}

/// This process's mapping of one imported region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RegionMap {
    pub(crate) cpu: *mut u8,
    pub(crate) len: usize,
    /// MMIO (a raw pair's doorbell page), not memory.
    pub(crate) mmio: bool,
}

/// One queue pair as the GPU sees it.
pub(crate) struct GpuQueue<'g> {
    // Field order is drop order: the GPU's mappings go before the pair,
    // the pair (destroyed, then its CQ's dma-buf mapping released) before
    // the CQ's dma-buf and GPU memory.
    pub(crate) imports: Vec<Imported<'g>>,
    pub(crate) reports: Vec<ImportReport>,
    /// Beside `imports`: the CPU mapping each was made from.
    pub(crate) regions: Vec<RegionMap>,
    pub(crate) qp: QueuePair,
    /// The CQ as the GPU addresses it.
    pub(crate) cq: u64,
    /// A shared pair's PRP pool as the GPU addresses it, if imported.
    pub(crate) pool: Option<u64>,
    /// Held only to go after the pair.
    #[allow(dead_code)]
    pub(crate) cq_vram: Option<(OwnedFd, DeviceMemory<'g>)>,
}

/// A pair whose memory the GPU could not map, handed back with the reports.
type ImportFailure = Box<(QueuePair, Vec<ImportReport>, String)>;

/// A raw pair whose CQ is in GPU memory: zeroed VRAM, exported as a
/// dma-buf and mapped by the module for the controller.
fn pair_with_cq_in_vram<'g>(
    gpu: &'g Gpu,
    ctrl: &Arc<gpunvme::Controller>,
    depth: u32,
) -> Result<(QueuePair, (OwnedFd, DeviceMemory<'g>)), Box<dyn std::error::Error>> {
    use std::os::fd::AsFd;
    let bytes = (depth as usize * 16).next_multiple_of(4096);
    let mem = gpu.alloc_payload(bytes)?;
    // SAFETY: `mem` is `bytes` of device memory just allocated; nothing
    // else uses it yet.
    unsafe { gpu.copy_to_device(mem.ptr(), &vec![0u8; bytes])? };
    let fd = gpu
        .export_dmabuf(&mem)
        .map_err(|e| format!("gpu-run: exporting VRAM for a CQ: {e}"))?;
    let map = DmabufMapping::new(ctrl, fd.as_fd(), bytes)?;
    let qp = QueuePair::create_raw_cq_in(ctrl, depth, map)?;
    Ok((qp, (fd, mem)))
}

/// Where one pair's PRP lists go, as `PQueue` names them.
#[derive(Debug, Clone, Copy, Default)]
struct PrpLists {
    va: u64,
    dma: u64,
    page_dma: u64,
    stride: u32,
}

/// A raw pair's PRP lists: VRAM (uncached on AMD, as payload) the GPU
/// writes and the controller reads, mapped for the controller, and the
/// DMA address of each of its 4 KiB pages where the GPU reads them.
struct VramPool<'g> {
    // Drop order: the controller's mapping before the dma-buf and VRAM.
    map: DmabufMapping,
    #[allow(dead_code)]
    fd: OwnedFd,
    mem: DeviceMemory<'g>,
    pages: gpunvme_gpu::HostMapped<'g>,
}

impl<'g> VramPool<'g> {
    fn new(
        gpu: &'g Gpu,
        ctrl: &Arc<gpunvme::Controller>,
        depth: u32,
        entries: u64,
    ) -> Result<VramPool<'g>, Box<dyn std::error::Error>> {
        use std::os::fd::AsFd;
        let slot = (entries * 8).next_power_of_two().max(8);
        let mem = gpu.alloc_payload((depth as u64 * slot) as usize)?;
        let fd = gpu
            .export_dmabuf(&mem)
            .map_err(|e| format!("gpu-run: exporting VRAM for PRP lists: {e}"))?;
        let map = DmabufMapping::new(ctrl, fd.as_fd(), mem.len())?;
        let pages = gpu.alloc_host_mapped(map.dma_addrs().len() * 8)?;
        for (i, d) in map.dma_addrs().iter().enumerate() {
            // SAFETY: inside `pages`; no kernel runs yet.
            unsafe { pages.at::<u64>(i * 8).write(*d) };
        }
        Ok(VramPool {
            map,
            fd,
            mem,
            pages,
        })
    }

    fn lists(&self, depth: u32) -> PrpLists {
        PrpLists {
            va: self.mem.ptr(),
            dma: 0,
            page_dma: self.pages.dev(),
            stride: pq_prp_stride(self.map.dma_addrs().len() as u64 * 4096, depth),
        }
    }
}

/// Imports a pair's doorbell page, SQ, CQ (unless it is in VRAM already)
/// and, with `with_pool` on a shared pair, its PRP pool into the GPU.
pub(crate) fn import_pair<'g>(
    gpu: &'g Gpu,
    qp: QueuePair,
    cq_vram: Option<(OwnedFd, DeviceMemory<'g>)>,
    with_pool: bool,
) -> Result<GpuQueue<'g>, ImportFailure> {
    let mem = qp.memory();
    let raw = qp.mode() == Mode::Raw;
    let parts = [
        (
            ExportKind::Doorbell,
            if raw {
                "doorbell page"
            } else {
                "doorbell cells"
            },
            mem.doorbell_page,
            4096,
            raw, // BAR0 MMIO only on a raw pair
        ),
        (
            ExportKind::Sq,
            if raw { "SQ" } else { "shadow SQ" },
            mem.sq,
            mem.sq_len,
            false,
        ),
        (
            ExportKind::Cq,
            if raw { "CQ" } else { "CQ mirror" },
            mem.cq,
            mem.cq_len,
            false,
        ),
    ];
    let mut imports = Vec::new();
    let mut reports = Vec::new();
    let mut regions = Vec::new();
    // A CQ in VRAM is already the GPU's.
    let mut parts: Vec<_> = parts
        .into_iter()
        .filter(|p| p.0 != ExportKind::Cq || cq_vram.is_none())
        .collect();
    let pool_wanted = with_pool && !raw && !mem.prp_pool.is_null();
    if pool_wanted {
        parts.push((
            ExportKind::PrpPool,
            "PRP pool",
            mem.prp_pool,
            mem.prp_pool_len,
            false,
        ));
    }
    let cq_at = if cq_vram.is_none() { Some(2) } else { None };
    for (kind, name, cpu, len, mmio) in parts {
        let what = format!("q{} {} ({})", qp.qid(), name, qp.mode());
        let fd = match qp.export(kind) {
            Ok(fd) => Some(fd),
            Err(e) => {
                reports.push(ImportReport {
                    what: what.clone(),
                    attempts: vec![gpunvme_gpu::import::RouteAttempt {
                        route: "GPUNVME_IOC_EXPORT",
                        ok: false,
                        detail: e.to_string(),
                        mem_type: None,
                    }],
                });
                None
            }
        };
        use std::os::fd::AsFd;
        let region = Region {
            what: &what,
            dmabuf: fd.as_ref().map(|f| f.as_fd()),
            cpu: Some(cpu),
            len,
            mmio,
        };
        // SAFETY: `cpu` is this pair's mapping of its queue memory (len
        // bytes), alive as long as `qp`; the import goes into the same
        // GpuQueue, which drops it before the pair. Rust code never
        // references that memory (the pair reaches it through raw
        // pointers, and gpu-run does not drive the pair from the CPU).
        let (imp, rep) = unsafe { gpu.import(&region) };
        reports.push(rep);
        match imp {
            Some(i) => {
                imports.push(i);
                regions.push(RegionMap { cpu, len, mmio });
            }
            None => {
                drop(imports);
                return Err(Box::new((
                    qp,
                    reports,
                    format!("the GPU could not map {what}"),
                )));
            }
        }
    }
    let cq = match (&cq_vram, cq_at) {
        (Some((_, m)), _) => m.ptr(),
        (None, Some(i)) => imports[i].device_ptr,
        (None, None) => unreachable!("a CQ not in VRAM is imported"),
    };
    let pool = pool_wanted.then(|| imports.last().expect("the pool was imported").device_ptr);
    Ok(GpuQueue {
        imports,
        reports,
        regions,
        qp,
        cq,
        pool,
        cq_vram,
    })
}

pub fn gpu_run(sysfs: &gpunvme::sysfs::Sysfs, a: &GpuRunArgs) -> Res {
    // Before anything loads HIP.
    // SAFETY: the CLI has started no thread yet (main parsed the arguments
    // and called this), so nothing reads the environment meanwhile.
    let fg = unsafe { fine_grain::prepare() };
    if let fine_grain::Decision::Conflict { .. } = fg {
        return Err(format!("gpu-run: {}", fg.describe()).into());
    }
    let ctrl = Arc::new(crate::blockio::open_io(sysfs, &a.device, &a.passthrough)?);
    let info = ctrl.info()?;
    let nsid = a.nsid.or(info.node_nsid).unwrap_or(1);
    let ns = info
        .namespaces
        .iter()
        .find(|n| n.nsid == nsid)
        .copied()
        .ok_or_else(|| format!("gpu-run: namespace {nsid} is not active on {}", info.bdf))?;
    let mode = if a.owner { Mode::Raw } else { Mode::Shared };
    if let Some(only) = info.node_nsid.filter(|&n| n != nsid) {
        return Err(format!(
            "gpu-run: {} is limited to namespace {only}",
            ctrl.path().display()
        )
        .into());
    }
    let bytes = plan(
        a,
        ns.lba_size,
        ns.capacity_lbas,
        info.max_transfer_for(mode),
    )
    .map_err(|e| format!("gpu-run: {e}"))?;
    if a.qd.saturating_add(1) > info.max_queue_entries {
        return Err(format!(
            "gpu-run: --qd {} needs {} queue entries; the controller has {}",
            a.qd,
            a.qd.saturating_add(1),
            info.max_queue_entries
        )
        .into());
    }

    // Before anything else uses the controller: the claim fails once this
    // (or another) file has queue pairs.
    crate::blockio::mode_for(&ctrl, a.owner, "gpu-run")?;

    let gpu = Gpu::open(a.gpu).map_err(|e| format!("gpu-run: {e}"))?;
    let dev = gpu.device().clone();
    let kind = gpu.runtime().kind;
    eprintln!(
        "gpu-run: GPU {} {} {} via {} ({})",
        dev.index,
        dev.name,
        dev.arch,
        gpu.runtime().library,
        kind
    );
    eprintln!("gpu-run: {}", fg.describe());
    let (cq_place, cq_note) = resolve_cq(a.cq, a.owner, kind, &dev.arch);
    if let Some(n) = cq_note {
        eprintln!("gpu-run: {n}");
    }
    let co_name = match a.api {
        Api::Group => a.kernel.name(),
        Api::Thread => "pthread_io",
    };
    let (co_path, image) = code_object::load(&a.code_objects, kind, &dev.arch, co_name)?;
    eprintln!("gpu-run: code object {}", co_path.display());
    let module = gpu.load_module(&image)?;
    let hz = gpu.tick_hz()?;

    // Data buffer in VRAM, imported by the module for the controller's DMA;
    // uncached on AMD (the payload contract of kernels/include/gpunvme/fence.h).
    // Through passthrough: host memory the back end registered, mapped into
    // the GPU (io_uring cannot take a dma-buf of GPU memory: the message
    // says what is missing).
    let payload = if ctrl.passthrough().is_some() {
        if let Err(why) = gpunvme::passthrough::dmabuf_support() {
            eprintln!("gpu-run: payload in host memory: {why}");
        }
        let buf = DmaBuffer::with_len(&ctrl, bytes as usize)?;
        let what = "payload (host memory registered with the passthrough back end)";
        let region = Region {
            what,
            dmabuf: None,
            cpu: Some(buf.as_slice().as_ptr().cast_mut()),
            len: buf.len(),
            mmio: false,
        };
        // SAFETY: `region` is the buffer's mapping, alive as long as
        // `buf`, which the Payload drops after the import; no Rust
        // reference to its bytes is used while the kernel runs (the
        // Payload sits in the launch).
        let (imp, rep) = unsafe { gpu.import(&region) };
        let import = imp.ok_or_else(|| {
            format!(
                "gpu-run: the GPU could not map the {what}:\n{}",
                rep.describe()
            )
        })?;
        eprintln!(
            "gpu-run: payload memory: host, {}",
            rep.route().unwrap_or("?")
        );
        Payload::Host { import, buf }
    } else {
        let vram = gpu.alloc_payload(bytes as usize)?;
        eprintln!("gpu-run: payload memory {:?}", gpu.payload_memory());
        let dmabuf = gpu
            .export_dmabuf(&vram)
            .map_err(|e| format!("gpu-run: exporting VRAM for the controller: {e}"))?;
        let vmap = {
            use std::os::fd::AsFd;
            DmabufMapping::new(&ctrl, dmabuf.as_fd(), vram.len())?
        };
        Payload::Vram {
            vmap,
            _dmabuf: dmabuf,
            vram,
        }
    };
    let payload_memory = payload.memory(&gpu);
    // The group API's kernels build PRPs from one base address; the
    // per-thread API's from the DMA address of each 4 KiB page, which the
    // GPU reads from `pages`.
    let buf_dma = match a.api {
        Api::Group => gpunvme::contiguous_base(payload.dma_addrs()).ok_or(
            "gpu-run: the data buffer is not contiguous in the controller's address space (no IOMMU?); \
             the group API's example kernels build PRPs from one base address (--api thread does not)",
        )?,
        Api::Thread => 0,
    };
    let npages = match a.api {
        Api::Group => 0,
        Api::Thread => payload.dma_addrs().len(),
    };
    let pages = gpu.alloc_host_mapped(npages.max(1) * 8)?;
    for (i, d) in payload.dma_addrs().iter().take(npages).enumerate() {
        // SAFETY: inside `pages`; no kernel runs yet.
        unsafe { pages.at::<u64>(i * 8).write(*d) };
    }

    let depth = a.qd + 1;
    let lanes = a.qd.min(64);
    let (desc_bytes, nres) = match a.api {
        Api::Group => (size_of::<QPair>(), a.qpairs as usize),
        Api::Thread => (size_of::<PQueue>(), 1), // one result for all threads
    };
    let qps = gpu.alloc_host_mapped(a.qpairs as usize * desc_bytes)?;
    let args_mem = gpu.alloc_host_mapped(size_of::<IoArgs>().max(size_of::<PtArgs>()))?;
    let res = gpu.alloc_host_mapped(nres * size_of::<IoResult>())?;
    let stop = gpu.alloc_host_mapped(4096)?;

    if cq_place == CqPlace::Gpu {
        eprintln!(
            "gpu-run: CQs in GPU memory: written by the controller peer to peer, polled locally"
        );
    }
    let mut queues: Vec<GpuQueue<'_>> = Vec::new();
    let mut all_reports: Vec<ImportReport> = Vec::new();
    for _ in 0..a.qpairs {
        let (qp, cq_vram) = match cq_place {
            CqPlace::Gpu => {
                let (qp, v) = pair_with_cq_in_vram(&gpu, &ctrl, depth)?;
                (qp, Some(v))
            }
            CqPlace::Host => (QueuePair::create_with(&ctrl, depth, mode)?, None),
        };
        let gq = match import_pair(&gpu, qp, cq_vram, a.api == Api::Thread) {
            Ok(g) => g,
            Err(failure) => {
                let (_, reports, why) = *failure;
                for r in all_reports.iter().chain(&reports) {
                    eprintln!("{}", r.describe());
                }
                let hint = if a.owner {
                    " (a raw pair's doorbell page is BAR0 MMIO, which this GPU could not map; \
                     without --owner the pairs are shared and their doorbell cells are memory)"
                } else {
                    ""
                };
                return Err(format!("gpu-run: {why}{hint}").into());
            }
        };
        all_reports.extend(gq.reports.iter().cloned());
        queues.push(gq);
    }
    // The per-thread API's PRP lists: a shared pair's pool (the module's,
    // imported above); for a raw pair, VRAM of its own the controller
    // reads the lists from, when a command may need one.
    let cmd_bytes = (a.cmd_blocks as u64) * ns.lba_size as u64;
    let mut pools: Vec<Option<PrpLists>> = Vec::new();
    let mut vram_pools: Vec<VramPool<'_>> = Vec::new();
    if a.api == Api::Thread {
        for gq in &queues {
            let m = gq.qp.memory();
            let lists = match gq.pool {
                Some(va) => Some(PrpLists {
                    va,
                    dma: m.prp_dma,
                    page_dma: 0,
                    stride: pq_prp_stride(m.prp_pool_len as u64, depth),
                }),
                None if max_list_entries(cmd_bytes) > 1 => {
                    let p = VramPool::new(&gpu, &ctrl, depth, max_list_entries(cmd_bytes))?;
                    let l = p.lists(depth);
                    vram_pools.push(p);
                    Some(l)
                }
                None => None,
            };
            if let Some(l) = &lists {
                if max_list_entries(cmd_bytes) * 8 > l.stride as u64 {
                    return Err(format!(
                        "gpu-run: q{}'s PRP pool holds {} list entries per command; {cmd_bytes} \
                         bytes per command may need {}",
                        gq.qp.qid(),
                        l.stride / 8,
                        max_list_entries(cmd_bytes)
                    )
                    .into());
                }
            }
            pools.push(lists);
        }
    }

    // Before anything drives a queue: the GPU and the CPU must see each
    // other's stores in every region the GPU imported, and in the
    // host-mapped memory (stop flag, descriptors, results).
    let self_test = if a.skip_self_test {
        eprintln!("gpu-run: {}", crate::self_test::SKIPPED);
        None
    } else {
        let mut cells = crate::self_test::queue_cells(&queues);
        cells.push(crate::self_test::host_cell(
            &gpu,
            &stop,
            "host-mapped memory (stop flag, descriptors, results)",
        ));
        // SAFETY: the cells are in `queues` and `stop`, kept until the
        // self-test returned, and leaked below if its kernel may still run.
        let st = unsafe { crate::self_test::run(&gpu, &a.code_objects, cells) }
            .map_err(|e| format!("gpu-run: {e} (--skip-self-test launches without it)"))?;
        for c in &st.cells {
            eprintln!("gpu-run: self-test {}", c.line());
        }
        if st.kernel_still_running {
            // It may still write the cells: nothing of them is freed.
            std::mem::forget(queues);
            std::mem::forget(stop);
            return Err(format!("gpu-run: {}", st.refusal().unwrap_or_default()).into());
        }
        if let Some(why) = st.refusal() {
            if a.out.json() {
                // The report still says which region failed, and how.
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "gpu": dev, "ok": false, "refused": why,
                        "self_test": crate::self_test::json(Some(&st), false),
                        "imports": all_reports,
                    }))?
                );
            }
            return Err(format!("gpu-run: {why}").into());
        }
        Some(st)
    };

    // The per-thread API's shared state of each pair (tickets, ring lock,
    // CQ view, command slots), in VRAM: only the GPU touches it.
    let mut states: Vec<DeviceMemory<'_>> = Vec::new();
    for (q, gq) in queues.iter().enumerate() {
        let m = gq.qp.memory();
        let (db, sq, cq) = (gq.imports[0].device_ptr, gq.imports[1].device_ptr, gq.cq);
        let (sq_db, cq_db) = (db + m.sq_db_offset as u64, db + m.cq_db_offset as u64);
        let timeout_ticks = hz.saturating_mul(a.timeout_ms) / 1000;
        match a.api {
            // SAFETY: qps holds `queues` QPairs; nothing reads them yet.
            Api::Group => unsafe {
                qps.at::<QPair>(q * size_of::<QPair>()).write(QPair {
                    sq,
                    cq,
                    sq_db,
                    cq_db,
                    stop: stop.dev(),
                    timeout_ticks,
                    tick_hz: hz,
                    depth,
                    phase: 1,
                    ..Default::default()
                })
            },
            Api::Thread => {
                let mut st = gpu.alloc(pq_bytes(depth) as usize)?;
                st.write_at(0, &pq_shared_init(depth))?;
                let lists = pools[q].unwrap_or_default();
                let mut p = PQueue {
                    sq,
                    cq,
                    sq_db,
                    cq_db,
                    stop: stop.dev(),
                    prp_va: lists.va,
                    prp_page_dma: lists.page_dma,
                    prp_dma: lists.dma,
                    timeout_ticks,
                    tick_hz: hz,
                    depth,
                    // 0: no pool (every command fits PRP1 + PRP2).
                    prp_stride: lists.stride,
                    max_transfer: info.max_transfer_for(mode).unwrap_or(0),
                    ..Default::default()
                };
                p.attach(st.ptr());
                // SAFETY: qps holds `queues` PQueues; nothing reads them yet.
                unsafe { qps.at::<PQueue>(q * size_of::<PQueue>()).write(p) };
                states.push(st);
            }
        }
    }
    let lba_shift = ns.lba_size.trailing_zeros();
    match a.api {
        // SAFETY: args_mem holds one IoArgs.
        Api::Group => unsafe {
            args_mem.at::<IoArgs>(0).write(IoArgs {
                slba: a.start_block,
                buf_dma,
                buf: payload.gpu_ptr(),
                seed: a.pattern,
                nsid,
                lba_shift,
                blocks_per_cmd: a.cmd_blocks,
                cmds_per_queue: a.cmds,
                page_size: info.page_size,
                rounds: a.rounds,
            })
        },
        // SAFETY: args_mem holds one PtArgs.
        Api::Thread => unsafe {
            args_mem.at::<PtArgs>(0).write(PtArgs {
                page_dma: pages.dev(),
                buf: payload.gpu_ptr(),
                npages: npages as u64,
                slba: a.start_block,
                seed: a.pattern,
                nsid,
                lba_shift,
                bytes_per_cmd: a.cmd_blocks << lba_shift,
                cmds_per_thread: a.cmds / lanes,
                npairs: a.qpairs,
                opc: if a.kernel == Kernel::Write {
                    NVME_OPC_WRITE
                } else {
                    NVME_OPC_READ
                },
                by_unit: 0,
                pad: 0,
            })
        },
    }

    let entry = code_object::entry_point(co_name).expect("known kernel");
    let cfg = LaunchConfig {
        grid: a.qpairs,
        block: lanes,
        args: &[qps.dev(), args_mem.dev(), res.dev()],
        stop_flag: Some(stop.at::<u32>(0)),
    };
    let t0 = Instant::now();
    // The launch owns everything the kernel (and, through its commands,
    // the controller) can reach; tuple order is teardown order: the GPU's
    // mappings and the queue pairs (the controller stops), a raw pair's
    // PRP lists, the payload (the module's VRAM mapping, the dma-buf, VRAM;
    // or the GPU's mapping of host memory, then that memory), then the
    // host memory.
    let keep = (
        queues, states, vram_pools, payload, qps, args_mem, res, stop, pages,
    );
    // SAFETY: the arguments are the example kernels' (qpairs or pqueues,
    // io_args or pt_args, results), all in host memory of `keep`, and so
    // is everything they lead to: the imported doorbell/SQ/CQ/PRP pool of
    // the pairs in `keep.0`, the per-thread API's shared state in `keep.1`,
    // a raw pair's PRP lists in `keep.2`, the stop flag in `keep.7`, the
    // page list in `keep.8`, the data buffer (by GPU address and, for the
    // controller, by the DMA addresses of its mapping, both in `keep.3`).
    // Rust touches none of it while the kernel runs (results are read
    // after `finish`). The example kernels' waits end on the stop flag.
    let mut launch = unsafe { gpu.launch(&module, entry, cfg, keep)? };
    let batches = a.cmds.div_ceil(lanes) as u64
        * if a.kernel == Kernel::Sweep {
            a.rounds as u64
        } else {
            1
        };
    let deadline =
        Duration::from_millis(a.timeout_ms.min(2000) * (batches + 2) * 2) + Duration::from_secs(5);
    // Wait in slices: a progress bar on a terminal, and Ctrl-C raises the
    // stop flag. Whatever happens, the launch is only finished (or, if the
    // kernel may still run, dropped: it waits again, then leaks what the
    // kernel can reach) here, never skipped: a second Ctrl-C changes
    // nothing.
    let mut bar = Progress::new(
        format!("gpu-run {}", a.kernel.name()),
        deadline.as_secs(),
        Unit::Seconds,
    );
    let mut stop_raised: Option<(Instant, &str)> = None;
    let mut fault = None;
    loop {
        match launch.is_done() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                fault.get_or_insert(e.to_string());
            }
        }
        let now = Instant::now();
        if stop_raised.is_none() {
            let why = if interrupted() {
                Some("Ctrl-C")
            } else if fault.is_some() {
                Some("the stream reported an error")
            } else if now - t0 > deadline {
                Some("the deadline passed")
            } else {
                None
            };
            if let Some(why) = why {
                launch.stop();
                bar.finish();
                eprintln!("gpu-run: {why}: stop flag raised, waiting up to 5 s for the kernel");
                stop_raised = Some((now, why));
            }
        } else if let Some((at, why)) = stop_raised {
            if now - at > Duration::from_secs(5) {
                bar.finish();
                // Dropping the launch waits once more, then leaks everything
                // the kernel can reach rather than free it.
                return Err(format!(
                    "gpu-run: {why}{}, and the kernel still runs even after the stop flag: the GPU may need a reset",
                    fault.map(|f| format!(" ({f})")).unwrap_or_default()
                )
                .into());
            }
        }
        bar.set((now - t0).as_secs());
        std::thread::sleep(Duration::from_micros(200));
    }
    bar.finish();
    let stuck = stop_raised.is_some();
    let by_user = stop_raised.is_some_and(|(_, why)| why == "Ctrl-C");
    let wall = t0.elapsed();
    let (queues, states, vram_pools, payload, qps, args_mem, res, stop, pages) = launch
        .finish()
        .map_err(|_| "gpu-run: the kernel finished, but its stream says otherwise")?;
    let results: Vec<IoResult> = (0..nres)
        // SAFETY: the kernel finished; res holds `nres` IoResults.
        .map(|q| unsafe {
            res.at::<IoResult>(q * size_of::<IoResult>())
                .read_volatile()
        })
        .collect();
    // Per pair: each imported region's route and the GPU memory type it
    // was mapped with (uncached on RDNA2/3: mem_type.rs). The line starts
    // "qN <mode>:" (tests/hardware/validate.sh reads the mode there).
    let routes: Vec<String> = queues
        .iter()
        .map(|g| {
            format!(
                "q{} {}: {}",
                g.qp.qid(),
                g.qp.mode(),
                g.reports
                    .iter()
                    .filter_map(|r| {
                        let m = r.mem_type().map(|m| m.to_string());
                        r.route().map(|rt| {
                            format!("{rt} [memory type {}]", m.as_deref().unwrap_or("unknown"))
                        })
                    })
                    .collect::<Vec<_>>()
                    .join(" / ")
            )
        })
        .collect();

    // Teardown: GPU mappings, then queue pairs (the controller stops), then
    // the payload (its mapping for the controller, then the memory).
    drop(queues);
    drop(states);
    drop(vram_pools);
    drop(payload);
    drop((qps, args_mem, res, stop, pages));

    // Sweep: each round is one batch of min(lanes, cmds) reads; the
    // per-thread API: one result for every pair's commands.
    let expect = match a.api {
        Api::Thread => a.qpairs.saturating_mul(a.cmds),
        Api::Group if a.kernel == Kernel::Sweep => a.rounds.saturating_mul(lanes.min(a.cmds)),
        Api::Group => a.cmds,
    };
    let mut failed = stuck;
    let mut mismatches = 0u64;
    for r in &results {
        failed |= r.status != 0 || r.completed != expect;
        mismatches += r.mismatches as u64;
    }
    if a.out.json() {
        let per: Vec<_> = results
            .iter()
            .enumerate()
            .map(|(q, r)| {
                json!({"queue": if a.api == Api::Thread { json!("all") } else { json!(q) }, "status": r.status, "status_name": status_name(r.status), "completed": r.completed,
                       "mismatches": r.mismatches, "us_total": r.ticks_total as f64 * 1e6 / hz as f64,
                       "us_max_round": r.ticks_max_round as f64 * 1e6 / hz as f64})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "gpu": dev, "kernel": a.kernel.name(), "code_object": co_path, "queues": per,
                "api": match a.api { Api::Group => "group", Api::Thread => "thread" },
                "routes": routes, "imports": all_reports, "wall_ms": wall.as_secs_f64() * 1e3, "stopped": stuck,
                "ok": !failed && mismatches == 0, "mismatches": mismatches, "pattern": a.pattern,
                "cq": match cq_place { CqPlace::Host => "host", CqPlace::Gpu => "gpu" },
                "payload_memory": payload_memory,
                "self_test": crate::self_test::json(self_test.as_ref(), a.skip_self_test),
            }))?
        );
    } else {
        for r in &routes {
            println!("route {r}");
        }
        for (q, r) in results.iter().enumerate() {
            let who = match a.api {
                Api::Group => format!("queue {q}"),
                Api::Thread => format!("all {} queues (per-thread API)", a.qpairs),
            };
            // pthread_io.hip keeps no timing (its threads run apart).
            let per_cmd = match a.api {
                Api::Group => format!(
                    ", {:.1} us/command",
                    r.ticks_total as f64 * 1e6 / hz as f64 / r.completed.max(1) as f64
                ),
                Api::Thread => String::new(),
            };
            println!(
                "{who}: {} completed, {} mismatches, status {} ({}){per_cmd}",
                r.completed,
                r.mismatches,
                r.status,
                status_name(r.status),
            );
        }
        println!(
            "{} in {:.1} ms{}",
            a.kernel.name(),
            wall.as_secs_f64() * 1e3,
            if stuck { " (stopped by the host)" } else { "" }
        );
    }
    if by_user {
        return Err(Interrupted(
            "gpu-run: the kernel was stopped and everything torn down in order".into(),
        )
        .into());
    }
    if failed {
        return Err("gpu-run: the kernel reported errors (see above)".into());
    }
    if mismatches != 0 {
        return Err(DataMismatch(format!(
            "gpu-run: {mismatches} 64-bit word(s) differ from pattern {}",
            a.pattern
        ))
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct P {
        #[command(flatten)]
        a: GpuRunArgs,
    }

    fn args(extra: &[&str]) -> GpuRunArgs {
        let mut v = vec!["x", "0000:01:00.0", "--kernel", "write"];
        v.extend_from_slice(extra);
        P::parse_from(v).a
    }

    #[test]
    fn plan_checks_everything_before_the_gpu_is_touched() {
        assert_eq!(
            plan(&args(&[]), 512, 1 << 20, Some(1 << 20)),
            Ok(64 * 8 * 512)
        );
        let e = plan(&args(&["--cmd-blocks", "4"]), 4096, 1 << 20, None).unwrap_err();
        assert!(
            e.contains("PRP1/PRP2 only") && e.contains("2 blocks"),
            "{e}"
        );
        let e = plan(&args(&["--cmd-blocks", "8"]), 512, 1 << 20, Some(2048)).unwrap_err();
        assert!(e.contains("MDTS"), "{e}");
        let e = plan(&args(&["--relay-inline"]), 512, 1 << 20, None).unwrap_err();
        assert!(e.contains("no thread of this process would wait"), "{e}");
        let e = plan(&args(&["--cq", "gpu"]), 512, 1 << 20, None).unwrap_err();
        assert!(e.contains("needs --owner"), "{e}");
        assert!(plan(&args(&["--cq", "gpu", "--owner"]), 512, 1 << 20, None).is_ok());
        let e = plan(&args(&["--qpairs", "4", "-s", "1000"]), 512, 2000, None).unwrap_err();
        assert!(e.contains("do not fit"), "{e}");
        assert!(plan(&args(&["--qd", "0"]), 512, 1 << 20, None).is_err());
        assert!(plan(&args(&["--cmds", "0"]), 512, 1 << 40, None).is_err());
        let e = plan(
            &args(&["--qpairs", "64", "--cmds", "1024", "--cmd-blocks", "2"]),
            4096,
            1 << 40,
            None,
        )
        .unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }

    #[test]
    fn plan_checks_the_per_thread_api() {
        let thread = |extra: &[&str]| {
            let mut v = vec!["--api", "thread"];
            v.extend_from_slice(extra);
            args(&v)
        };
        // Defaults: 64 commands over 32 threads, 8 x 512 = 4096 bytes each.
        assert_eq!(plan(&thread(&[]), 512, 1 << 20, None), Ok(64 * 8 * 512));
        let mut sweep = thread(&[]);
        sweep.kernel = Kernel::Sweep;
        let e = plan(&sweep, 512, 1 << 20, None).unwrap_err();
        assert!(e.contains("group-API kernel"), "{e}");
        let e = plan(&thread(&["--cmds", "48"]), 512, 1 << 20, None).unwrap_err();
        assert!(e.contains("not a multiple of the 32 threads"), "{e}");
        // --qd 100: 64 threads per workgroup.
        assert!(plan(
            &thread(&["--qd", "100", "--cmds", "128"]),
            512,
            1 << 20,
            None
        )
        .is_ok());
        // PRP lists: 6 KiB at offsets inside a page, 128 KiB, up to MDTS.
        assert!(plan(&thread(&["--cmd-blocks", "12"]), 512, 1 << 20, None).is_ok());
        assert!(plan(&thread(&["--cmd-blocks", "3"]), 512, 1 << 20, None).is_ok());
        assert!(plan(
            &thread(&["--cmd-blocks", "32"]),
            4096,
            1 << 30,
            Some(128 << 10)
        )
        .is_ok());
        let e = plan(
            &thread(&["--cmd-blocks", "64"]),
            4096,
            1 << 30,
            Some(128 << 10),
        )
        .unwrap_err();
        assert!(e.contains("MDTS of 131072"), "{e}");
        // One list page per command slot: 2 MiB at most, whatever MDTS says.
        let e = plan(
            &thread(&["--cmd-blocks", "513", "--cmds", "32"]),
            4096,
            1 << 30,
            None,
        )
        .unwrap_err();
        assert!(e.contains("one PRP-list page"), "{e}");
        // The group API builds no lists: 8 KiB.
        let e = plan(&args(&["--cmd-blocks", "32"]), 4096, 1 << 30, None).unwrap_err();
        assert!(e.contains("--api thread goes up to MDTS"), "{e}");
        let e = plan(&thread(&["--cmd-blocks", "65537"]), 512, 1 << 40, None).unwrap_err();
        assert!(e.contains("65536 blocks"), "{e}");
    }

    #[test]
    fn list_entries_cover_a_command_at_any_offset() {
        // pqueue.h prp_list_entries(off, len), at its worst over offsets.
        let entries = |off: u64, len: u64| {
            let first = 4096 - (off & 4095);
            if len <= first {
                0
            } else {
                (len - first).div_ceil(4096)
            }
        };
        for len in [512u64, 4096, 6144, 8192, 12288, 128 << 10, 2 << 20] {
            let worst = (0..4096).step_by(4).map(|o| entries(o, len)).max().unwrap();
            assert!(worst <= max_list_entries(len), "{len}: {worst}");
        }
    }

    #[test]
    fn owner_on_rdna_puts_the_cq_in_gpu_memory_or_warns() {
        use gpunvme_gpu::RuntimeKind::{Cuda, Hip};
        let (c, n) = resolve_cq(None, true, Hip, "gfx1101");
        assert_eq!(c, CqPlace::Gpu);
        let n = n.unwrap();
        assert!(
            n.contains("found stale on RDNA") && !n.contains("  "),
            "{n}"
        );
        let (c, n) = resolve_cq(Some(CqPlace::Host), true, Hip, "gfx1030");
        assert_eq!(c, CqPlace::Host);
        let n = n.unwrap();
        assert!(
            n.starts_with("warning: --owner --cq host on gfx1030") && !n.contains("  "),
            "{n}"
        );
        // Shared pairs (the relay's mirror), CDNA and NVIDIA: host, silently.
        for (owner, kind, arch) in [
            (false, Hip, "gfx1101"),
            (true, Hip, "gfx942"),
            (true, Cuda, "sm_90"),
        ] {
            assert_eq!(resolve_cq(None, owner, kind, arch), (CqPlace::Host, None));
        }
        assert_eq!(
            resolve_cq(Some(CqPlace::Gpu), true, Hip, "gfx1101"),
            (CqPlace::Gpu, None)
        );
    }
}
