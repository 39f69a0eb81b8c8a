//! `gpunvme gpu-run`: the whole path on real hardware. A GPU kernel from
//! kernels/examples drives queue pairs of a controller bound to gpunvme,
//! and the controller DMAs straight to and from VRAM.
//!
//! Steps, each failing with its own message: HSA_FORCE_FINE_GRAIN_PCIE
//! (before HIP loads), claim owner mode (--owner only), open the GPU, load
//! the code object for its architecture, allocate VRAM and export it as a
//! dma-buf for GPUNVME_IOC_MAP_DMABUF, create queue pairs and import their
//! doorbell page, SQ and CQ into the GPU (every route tried and reported),
//! launch one workgroup per queue pair, wait with a deadline (the stop
//! flag ends a stuck kernel), report, tear down in the order that never
//! frees memory the controller or GPU can still reach.
//!
//! Queue pairs are shared by default: their doorbell page, SQ and CQ are
//! shadows in memory (the module checks each command and relays it), so
//! any GPU that can map host memory can drive them, and the data buffer
//! is VRAM this same file mapped, as the checks demand. With --owner they
//! are raw: the GPU rings the controller's BAR0 doorbell page itself,
//! which needs a GPU that can map peer MMIO (`gpunvme probe`: direct).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use gpunvme::{DmabufMapping, ExportKind, Mode, QueuePair};
use gpunvme_gpu::import::{ImportReport, Imported, Region};
use gpunvme_gpu::kernel_abi::{status_name, IoArgs, IoResult, QPair};
use gpunvme_gpu::{code_object, fine_grain, Gpu, LaunchConfig};
use serde_json::json;

use crate::blockio::Target;
use crate::Res;

/// Which example kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kernel {
    /// Fill VRAM with the pattern of --seed, write it out, flush.
    Write,
    /// Read into VRAM and check every 64-bit word against --seed's pattern.
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

#[derive(Args, Debug)]
pub struct GpuRunArgs {
    #[command(flatten)]
    pub target: Target,
    /// The example kernel to launch.
    #[arg(long, value_enum)]
    pub kernel: Kernel,
    /// Queue pairs (one GPU workgroup each).
    #[arg(long, default_value_t = 1)]
    pub queues: u32,
    /// Entries per queue; a workgroup has min(depth - 1, 64) lanes.
    #[arg(long, default_value_t = 32)]
    pub depth: u32,
    /// Commands per queue pair.
    #[arg(long, default_value_t = 64)]
    pub cmds: u32,
    /// Blocks per command (at most 8 KiB per command: the device code
    /// builds PRP1 and PRP2, no PRP lists).
    #[arg(long, default_value_t = 8)]
    pub blocks: u32,
    /// First LBA of the run.
    #[arg(long, default_value_t = 0)]
    pub slba: u64,
    /// Pattern seed (the example kernels' pattern, not `gpunvme pattern`'s).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Namespace ID.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Sweep: batches per queue pair.
    #[arg(long, default_value_t = 16)]
    pub rounds: u32,
    /// Claim owner mode and use raw queue pairs: the GPU rings the
    /// controller's doorbell itself (needs CAP_SYS_RAWIO, no lockdown, a
    /// translating IOMMU, and a GPU that can map the BAR0 doorbell page).
    /// Default: shared queue pairs, relayed and checked by the module.
    #[arg(long)]
    pub owner: bool,
    /// Where `make kernels` put the code objects.
    #[arg(long, value_name = "DIR", default_value = "kernels/build")]
    pub code_objects: PathBuf,
    /// GPU index in its runtime.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
    /// Deadline of each wait inside the kernel, in ms (capped at 2 s on
    /// the GPU, far below the ~10 s GPU watchdog).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Most bytes one command may move: PRP1 + PRP2, no lists.
const MAX_CMD_BYTES: u64 = 8192;

/// Checks the arguments against the controller before anything is set up.
pub fn plan(
    a: &GpuRunArgs,
    lba_size: u32,
    capacity: u64,
    mdts: Option<u32>,
) -> Result<u64, String> {
    if a.queues == 0 || a.cmds == 0 || a.blocks == 0 {
        return Err("--queues, --cmds and --blocks must be at least 1".into());
    }
    if a.depth < 2 {
        return Err(format!("--depth {} is below the minimum of 2", a.depth));
    }
    let cmd_bytes = a.blocks as u64 * lba_size as u64;
    if cmd_bytes > MAX_CMD_BYTES {
        return Err(format!(
            "--blocks {} x {lba_size}-byte LBAs = {cmd_bytes} bytes per command; the device code builds \
             PRP1/PRP2 only, so at most {MAX_CMD_BYTES} bytes ({} blocks)",
            a.blocks,
            MAX_CMD_BYTES / lba_size as u64
        ));
    }
    if let Some(m) = mdts {
        if cmd_bytes > m as u64 {
            return Err(format!(
                "{cmd_bytes} bytes per command exceeds the controller's MDTS of {m} bytes"
            ));
        }
    }
    let blocks = a.queues as u64 * a.cmds as u64 * a.blocks as u64;
    if a.slba.checked_add(blocks).is_none_or(|end| end > capacity) {
        return Err(format!(
            "LBAs {}..{} do not fit namespace {} ({capacity} blocks)",
            a.slba,
            a.slba.saturating_add(blocks),
            a.nsid
        ));
    }
    let bytes = blocks * lba_size as u64;
    if bytes > gpunvme::sys::GPUNVME_MAX_MAP_BYTES as u64 {
        return Err(format!(
            "{bytes} bytes of VRAM for the run; the module imports at most {} per dma-buf: fewer --queues, --cmds or --blocks",
            gpunvme::sys::GPUNVME_MAX_MAP_BYTES
        ));
    }
    Ok(bytes)
}

/// One queue pair as the GPU sees it.
struct GpuQueue<'g> {
    // Field order is drop order: the GPU's mappings go before the pair.
    imports: Vec<Imported<'g>>,
    reports: Vec<ImportReport>,
    qp: QueuePair,
}

/// A pair whose memory the GPU could not map, handed back with the reports.
type ImportFailure = Box<(QueuePair, Vec<ImportReport>, String)>;

fn import_pair(gpu: &Gpu, qp: QueuePair) -> Result<GpuQueue<'_>, ImportFailure> {
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
            Some(i) => imports.push(i),
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
    Ok(GpuQueue {
        imports,
        reports,
        qp,
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
    let ctrl = Arc::new(crate::blockio::open(sysfs, &a.target)?);
    let info = ctrl.info()?;
    let ns = info
        .namespaces
        .iter()
        .find(|n| n.nsid == a.nsid)
        .copied()
        .ok_or_else(|| {
            format!(
                "gpu-run: namespace {} is not active on {}",
                a.nsid, info.bdf
            )
        })?;
    let mode = if a.owner { Mode::Raw } else { Mode::Shared };
    if let Some(only) = info.node_nsid.filter(|&n| n != a.nsid) {
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
    if a.depth > info.max_queue_entries {
        return Err(format!(
            "gpu-run: --depth {} exceeds the controller's {}",
            a.depth, info.max_queue_entries
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
    let (co_path, image) = code_object::load(&a.code_objects, kind, &dev.arch, a.kernel.name())?;
    eprintln!("gpu-run: code object {}", co_path.display());
    let module = gpu.load_module(&image)?;
    let hz = gpu.tick_hz()?;

    // Data buffer in VRAM, imported by the module for the controller's DMA;
    // uncached on RDNA (the payload contract of kernels/include/gpunvme/fence.h).
    let vram = gpu.alloc_payload(bytes as usize)?;
    eprintln!("gpu-run: payload memory {:?}", gpu.payload_memory());
    let dmabuf = gpu
        .export_dmabuf(&vram)
        .map_err(|e| format!("gpu-run: exporting VRAM for the controller: {e}"))?;
    let vmap = {
        use std::os::fd::AsFd;
        DmabufMapping::new(&ctrl, dmabuf.as_fd(), vram.len())?
    };
    let buf_dma = vmap.contiguous_base().ok_or(
        "gpu-run: the VRAM buffer is not contiguous in the controller's address space (no IOMMU?); \
         the example kernels build PRPs from one base address",
    )?;

    let lanes = (a.depth - 1).min(64);
    let qps = gpu.alloc_host_mapped(a.queues as usize * std::mem::size_of::<QPair>())?;
    let args_mem = gpu.alloc_host_mapped(std::mem::size_of::<IoArgs>())?;
    let res = gpu.alloc_host_mapped(a.queues as usize * std::mem::size_of::<IoResult>())?;
    let stop = gpu.alloc_host_mapped(4096)?;

    let mut queues: Vec<GpuQueue<'_>> = Vec::new();
    let mut all_reports: Vec<ImportReport> = Vec::new();
    for _ in 0..a.queues {
        let qp = QueuePair::create_with(&ctrl, a.depth, mode)?;
        let gq = match import_pair(&gpu, qp) {
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
    for (q, gq) in queues.iter().enumerate() {
        let m = gq.qp.memory();
        let (db, sq, cq) = (
            gq.imports[0].device_ptr,
            gq.imports[1].device_ptr,
            gq.imports[2].device_ptr,
        );
        // SAFETY: qps holds `queues` QPairs; nothing reads them yet.
        unsafe {
            qps.at::<QPair>(q * std::mem::size_of::<QPair>())
                .write(QPair {
                    sq,
                    cq,
                    sq_db: db + m.sq_db_offset as u64,
                    cq_db: db + m.cq_db_offset as u64,
                    stop: stop.dev(),
                    timeout_ticks: hz.saturating_mul(a.timeout_ms) / 1000,
                    tick_hz: hz,
                    depth: a.depth,
                    phase: 1,
                    ..Default::default()
                })
        };
    }
    // SAFETY: args_mem holds one IoArgs.
    unsafe {
        args_mem.at::<IoArgs>(0).write(IoArgs {
            slba: a.slba,
            buf_dma,
            buf: vram.ptr(),
            seed: a.seed,
            nsid: a.nsid,
            lba_shift: ns.lba_size.trailing_zeros(),
            blocks_per_cmd: a.blocks,
            cmds_per_queue: a.cmds,
            page_size: info.page_size,
            rounds: a.rounds,
        })
    };

    let entry = code_object::entry_point(a.kernel.name()).expect("known kernel");
    let cfg = LaunchConfig {
        grid: a.queues,
        block: lanes,
        args: &[qps.dev(), args_mem.dev(), res.dev()],
        stop_flag: Some(stop.at::<u32>(0)),
    };
    let t0 = Instant::now();
    // The launch owns everything the kernel (and, through its commands,
    // the controller) can reach; tuple order is teardown order: the GPU's
    // mappings and the queue pairs (the controller stops), the module's
    // VRAM mapping, the dma-buf, VRAM, then the host memory.
    let keep = (queues, vmap, dmabuf, vram, qps, args_mem, res, stop);
    // SAFETY: the arguments are the example kernels' (qpairs, args,
    // results), all in host memory of `keep`, and so is everything they
    // lead to: the imported doorbell/SQ/CQ of the pairs in `keep.0`, the
    // stop flag in `keep.7`, the VRAM buffer `keep.3` (by GPU address and,
    // for the controller, by the DMA address of its mapping `keep.1`).
    // Rust touches none of it while the kernel runs (results are read
    // after `finish`). The example kernels poll the stop flag.
    let mut launch = unsafe { gpu.launch(&module, entry, cfg, keep)? };
    let batches = a.cmds.div_ceil(lanes) as u64
        * if a.kernel == Kernel::Sweep {
            a.rounds as u64
        } else {
            1
        };
    let deadline =
        Duration::from_millis(a.timeout_ms.min(2000) * (batches + 2) * 2) + Duration::from_secs(5);
    let waited = launch.wait(deadline);
    let stuck = if waited.is_err() {
        launch.stop();
        // On failure the launch is dropped: it waits once more, and then
        // leaks everything the kernel can reach rather than free it.
        launch.wait(Duration::from_secs(5)).map_err(|e| {
            format!("gpu-run: {e}, even after the stop flag: the GPU may need a reset")
        })?;
        true
    } else {
        false
    };
    let wall = t0.elapsed();
    let (queues, vmap, dmabuf, vram, qps, args_mem, res, stop) = launch
        .finish()
        .map_err(|_| "gpu-run: the kernel finished, but its stream says otherwise")?;
    let results: Vec<IoResult> = (0..a.queues as usize)
        // SAFETY: the kernel finished; res holds `queues` IoResults.
        .map(|q| unsafe {
            res.at::<IoResult>(q * std::mem::size_of::<IoResult>())
                .read_volatile()
        })
        .collect();
    let routes: Vec<String> = queues
        .iter()
        .map(|g| {
            format!(
                "q{} {}: {}",
                g.qp.qid(),
                g.qp.mode(),
                g.imports
                    .iter()
                    .map(|i| i.route)
                    .collect::<Vec<_>>()
                    .join(" / ")
            )
        })
        .collect();

    // Teardown: GPU mappings, then queue pairs (the controller stops), then
    // the module's VRAM mapping, then VRAM.
    drop(queues);
    drop(vmap);
    drop(dmabuf);
    drop(vram);
    drop((qps, args_mem, res, stop));

    // Sweep: each round is one batch of min(lanes, cmds) reads.
    let expect = if a.kernel == Kernel::Sweep {
        a.rounds.saturating_mul(lanes.min(a.cmds))
    } else {
        a.cmds
    };
    let mut failed = stuck;
    for r in &results {
        failed |= r.status != 0 || r.mismatches != 0 || r.completed != expect;
    }
    if a.json {
        let per: Vec<_> = results
            .iter()
            .enumerate()
            .map(|(q, r)| {
                json!({"queue": q, "status": r.status, "status_name": status_name(r.status), "completed": r.completed,
                       "mismatches": r.mismatches, "us_total": r.ticks_total as f64 * 1e6 / hz as f64,
                       "us_max_round": r.ticks_max_round as f64 * 1e6 / hz as f64})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "gpu": dev, "kernel": a.kernel.name(), "code_object": co_path, "queues": per,
                "routes": routes, "imports": all_reports, "wall_ms": wall.as_secs_f64() * 1e3, "stopped": stuck,
                "ok": !failed,
            }))?
        );
    } else {
        for r in &routes {
            println!("route {r}");
        }
        for (q, r) in results.iter().enumerate() {
            println!(
                "queue {q}: {} completed, {} mismatches, status {} ({}), {:.1} us/command",
                r.completed,
                r.mismatches,
                r.status,
                status_name(r.status),
                r.ticks_total as f64 * 1e6 / hz as f64 / r.completed.max(1) as f64
            );
        }
        println!(
            "{} in {:.1} ms{}",
            a.kernel.name(),
            wall.as_secs_f64() * 1e3,
            if stuck { " (stopped by the host)" } else { "" }
        );
    }
    if failed {
        return Err("gpu-run: the kernel reported errors or mismatches (see above)".into());
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
        let mut v = vec!["x", "--kernel", "write"];
        v.extend_from_slice(extra);
        P::parse_from(v).a
    }

    #[test]
    fn plan_checks_everything_before_the_gpu_is_touched() {
        assert_eq!(
            plan(&args(&[]), 512, 1 << 20, Some(1 << 20)),
            Ok(64 * 8 * 512)
        );
        let e = plan(&args(&["--blocks", "4"]), 4096, 1 << 20, None).unwrap_err();
        assert!(
            e.contains("PRP1/PRP2 only") && e.contains("2 blocks"),
            "{e}"
        );
        let e = plan(&args(&["--blocks", "8"]), 512, 1 << 20, Some(2048)).unwrap_err();
        assert!(e.contains("MDTS"), "{e}");
        let e = plan(&args(&["--queues", "4", "--slba", "1000"]), 512, 2000, None).unwrap_err();
        assert!(e.contains("do not fit"), "{e}");
        assert!(plan(&args(&["--depth", "1"]), 512, 1 << 20, None).is_err());
        assert!(plan(&args(&["--cmds", "0"]), 512, 1 << 40, None).is_err());
        let e = plan(
            &args(&["--queues", "64", "--cmds", "1024", "--blocks", "2"]),
            4096,
            1 << 40,
            None,
        )
        .unwrap_err();
        assert!(e.contains("at most"), "{e}");
    }
}
