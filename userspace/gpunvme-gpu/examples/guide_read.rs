// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The programming guide's launcher (kernels/README.md shows this file
//! verbatim): runs kernels/examples/guide_read.hip on GPU 0 against a
//! controller bound to gpunvme, through shared queue pairs, and reports
//! what the kernel found. The blocks must hold the example pattern first:
//!
//! ```text
//! gpunvme gpu-run /dev/gpunvme0 --kernel write -p 1   # LBAs 0..512, 8 per command
//! cargo run --release --example guide_read -- /dev/gpunvme0 kernels/build
//! ```

use std::error::Error;
use std::mem::size_of;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use gpunvme::{Controller, DmabufMapping, ExportKind, Mode, QueuePair};
use gpunvme_gpu::import::Region;
use gpunvme_gpu::kernel_abi::{
    pq_bytes, pq_prp_stride, pq_shared_init, status_name, GuideArgs, IoResult, PQueue,
};
use gpunvme_gpu::selftest::{self, Cell, Deadlines};
use gpunvme_gpu::{code_object, fine_grain, Gpu, LaunchConfig};

const THREADS: u32 = 64; // one workgroup; thread t reads LBAs 8t..8t+8
const BLOCKS: u32 = 8; // LBAs per thread: one command each
const PAIRS: u32 = 2; // thread t uses pair t % PAIRS
const DEPTH: u32 = 64; // 63 command slots: more than the 32 threads per pair
const SEED: u64 = 1; // the pattern's seed, as written

fn main() -> Result<(), Box<dyn Error>> {
    let mut argv = std::env::args().skip(1);
    let node = argv.next().unwrap_or_else(|| "/dev/gpunvme0".into());
    let build = argv.next().unwrap_or_else(|| "kernels/build".into());

    // Before HIP loads (consumer RDNA maps host memory fine-grained).
    // SAFETY: no other thread runs yet.
    let fg = unsafe { fine_grain::prepare() };
    let ctrl = Arc::new(Controller::open(&node)?);
    let info = ctrl.info()?;
    let ns = *info.namespaces.first().ok_or("no active namespace")?;
    let gpu = Gpu::open(0)?;
    let (kind, arch) = (gpu.runtime().kind, gpu.device().arch.clone());
    let (path, image) = code_object::load(Path::new(&build), kind, &arch, "guide_read")?;
    let module = gpu.load_module(&image)?;
    let hz = gpu.tick_hz()?;

    // The payload: VRAM (uncached on AMD) the controller DMAs into.
    let bytes = (THREADS * BLOCKS) as usize * ns.lba_size as usize;
    let buf = gpu.alloc_payload(bytes)?;
    let dmabuf = gpu.export_dmabuf(&buf)?;
    let map = DmabufMapping::new(&ctrl, dmabuf.as_fd(), buf.len())?;
    let pages = gpu.alloc_host_mapped(map.dma_addrs().len() * 8)?;
    for (i, a) in map.dma_addrs().iter().enumerate() {
        // SAFETY: inside `pages`; no kernel runs yet.
        unsafe { pages.at::<u64>(i * 8).write(*a) };
    }

    // Shared queue pairs: SQ, CQ, doorbell cells and PRP pool mapped into
    // the GPU, and the per-thread API's shared state in VRAM.
    let stop = gpu.alloc_host_mapped(4)?;
    let pqs = gpu.alloc_host_mapped(PAIRS as usize * size_of::<PQueue>())?;
    let mut pairs = Vec::new();
    let mut cells = Vec::new();
    for i in 0..PAIRS as usize {
        let qp = QueuePair::create_with(&ctrl, DEPTH, Mode::Shared)?;
        let m = qp.memory();
        let mut dev = Vec::new();
        for (part, cpu, len) in [
            (ExportKind::Doorbell, m.doorbell_page, 4096),
            (ExportKind::Sq, m.sq, m.sq_len),
            (ExportKind::Cq, m.cq, m.cq_len),
            (ExportKind::PrpPool, m.prp_pool, m.prp_pool_len),
        ] {
            let fd = qp.export(part)?;
            let what = format!("pair {i} {part:?}");
            let region = Region {
                what: &what,
                dmabuf: Some(fd.as_fd()),
                cpu: Some(cpu),
                len,
                mmio: false,
            };
            // SAFETY: `cpu` is qp's mapping of `len` bytes; the import is
            // kept beside qp and dropped before it (see `keep`).
            let (imported, report) = unsafe { gpu.import(&region) };
            let imported = imported.ok_or_else(|| report.describe())?;
            // SAFETY: the same mapping; the self-test below uses its last
            // 16 bytes, which nothing reads before the launch.
            cells.push(unsafe { Cell::of_import(&report, &imported, cpu, len) });
            dev.push(imported);
        }
        let mut st = gpu.alloc(pq_bytes(DEPTH) as usize)?;
        st.write_at(0, &pq_shared_init(DEPTH))?;
        let mut q = PQueue {
            sq: dev[1].device_ptr,
            cq: dev[2].device_ptr,
            sq_db: dev[0].device_ptr + m.sq_db_offset as u64,
            cq_db: dev[0].device_ptr + m.cq_db_offset as u64,
            stop: stop.dev(),
            prp_va: dev[3].device_ptr,
            prp_dma: m.prp_dma,
            timeout_ticks: hz, // each wait: 1 s
            tick_hz: hz,
            depth: DEPTH,
            prp_stride: pq_prp_stride(m.prp_pool_len as u64, DEPTH),
            max_transfer: info.shared_max_transfer_bytes.unwrap_or(0),
            backoff: 1,
            ..Default::default()
        };
        q.attach(st.ptr());
        // SAFETY: inside `pqs`; no kernel runs yet.
        unsafe { pqs.at::<PQueue>(i * size_of::<PQueue>()).write(q) };
        pairs.push((dev, st, qp)); // drop order: GPU mappings, state, pair
    }
    // The round-trip self-test: the GPU and the CPU must see each other's
    // stores in every region, through these very mappings, or nothing runs.
    // SAFETY: the cells are in `pairs`, kept past the test (leaked if its
    // kernel would not end).
    let st =
        unsafe { selftest::load_and_run(&gpu, Path::new(&build), cells, Deadlines::default())? };
    if let Some(why) = st.refusal() {
        if st.kernel_still_running {
            std::mem::forget(pairs);
        }
        return Err(why.into());
    }
    let args = gpu.alloc_host_mapped(size_of::<GuideArgs>())?;
    let res = gpu.alloc_host_mapped(size_of::<IoResult>())?;
    let a = GuideArgs {
        page_dma: pages.dev(),
        buf: buf.ptr(),
        npages: map.dma_addrs().len() as u64,
        slba: 0,
        seed: SEED,
        nsid: ns.nsid,
        lba_shift: ns.lba_size.trailing_zeros(),
        blocks: BLOCKS,
        npairs: PAIRS,
    };
    // SAFETY: inside `args`; no kernel runs yet.
    unsafe { args.at::<GuideArgs>(0).write(a) };

    let cfg = LaunchConfig {
        grid: 1,
        block: THREADS,
        args: &[pqs.dev(), args.dev(), res.dev()],
        stop_flag: Some(stop.at::<u32>(0)),
    };
    // Everything the kernel (and through it the controller) can reach,
    // owned by the launch until it has finished; tuple order is teardown
    // order: pairs, the module's VRAM mapping, dma-buf, VRAM, host memory.
    let keep = (pairs, map, dmabuf, buf, pages, pqs, args, res, stop);
    // SAFETY: the arguments are guide_read's (pqueue[PAIRS], guide_args,
    // io_result), in host-mapped memory `keep` owns, as is all they lead
    // to; Rust touches none of it until `finish`; the kernel's waits end
    // on the stop flag.
    let mut launch = unsafe { gpu.launch(&module, "gpunvme_guide_read", cfg, keep)? };
    if launch.wait(Duration::from_secs(10)).is_err() {
        launch.stop();
        launch.wait(Duration::from_secs(5))?;
    }
    let keep = launch
        .finish()
        .map_err(|_| "the kernel finished, but its stream says otherwise")?;
    // SAFETY: the kernel has finished.
    let r = unsafe { keep.7.at::<IoResult>(0).read_volatile() };
    drop(keep);
    println!(
        "{}: {} of {THREADS} reads, {} words wrong, {} ({}; payload {:?})",
        path.display(),
        r.completed,
        r.mismatches,
        status_name(r.status),
        fg.describe(),
        gpu.payload_memory()
    );
    if r.status != 0 || r.mismatches != 0 || r.completed != THREADS {
        return Err("guide_read: the kernel found errors".into());
    }
    Ok(())
}
