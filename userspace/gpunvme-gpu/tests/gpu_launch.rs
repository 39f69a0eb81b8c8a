// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The runtime glue on a real GPU: VRAM allocation and dma-buf export,
//! code-object load and launch of the example kernels, deadlines and the
//! stop flag. Needs a GPU, so the tests are `#[ignore]`d; run them on a GPU
//! machine with `--include-ignored` (tests/gpu-box.sh stages and runs them;
//! results from the H200 are in tests/results/) after `make kernels`, with
//! GPUNVME_KERNELS_BUILD pointing at
//! kernels/build if the source tree is elsewhere.
//!
//! There is no NVMe drive the GPU can reach on that machine, so the rings
//! live in host memory mapped for the GPU and a host thread answers them:
//! it watches each SQ doorbell cell, executes READ/WRITE/FLUSH against a RAM
//! disk by copying to/from the GPU buffer at the PRP addresses (device
//! addresses here), and posts spec-format CQEs, phase tag last. It is a
//! test fixture for the GPU side, not a controller model; the real
//! controller is exercised in the VM suite.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpunvme_gpu::kernel_abi::{
    pattern, pq_bytes, pq_shared_init, IoArgs, IoResult, PQueue, PtArgs, QPair, NVME_OPC_READ,
    NVME_OPC_WRITE,
};
use gpunvme_gpu::{code_object, Gpu, HostMapped, LaunchConfig, RuntimeKind};

const DEPTH: u32 = 8;
const LBA: usize = 512;
const QUEUES: u32 = 2;
const CMDS: u32 = 24; // three wraps of a depth-8 ring per queue
const BLOCKS: u32 = 8; // 4 KiB per command
const LANES: u32 = 32;
const SEED: u64 = 0x5eed_0001;
const RING_BYTES: usize = 3 * 4096; // SQ page, CQ page, doorbell/stop page

fn build_dir() -> PathBuf {
    std::env::var_os("GPUNVME_KERNELS_BUILD")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../kernels/build"))
}

fn rd32(p: *const u8, off: usize) -> u32 {
    // SAFETY: callers pass offsets inside live host-mapped memory.
    unsafe { std::ptr::read_volatile(p.add(off).cast::<u32>()) }
}

fn wr32(p: *mut u8, off: usize, v: u32) {
    // SAFETY: as rd32.
    unsafe { std::ptr::write_volatile(p.add(off).cast::<u32>(), v) }
}

/// The host side of the rings.
struct Fixture {
    disk: Mutex<Vec<u8>>,
    run: AtomicBool,
    respond: AtomicBool,
    /// Bumped whenever the rings are reset to slot 0, phase 1.
    generation: AtomicU32,
}

impl Fixture {
    fn serve(&self, gpu: &Gpu, rings: &[usize]) {
        let mut head = vec![0u32; rings.len()];
        let mut tail = vec![0u32; rings.len()];
        let mut phase = vec![1u32; rings.len()];
        let mut generation = self.generation.load(Ordering::Acquire);
        while self.run.load(Ordering::Acquire) {
            let g = self.generation.load(Ordering::Acquire);
            if g != generation {
                generation = g;
                head.iter_mut().for_each(|h| *h = 0);
                tail.iter_mut().for_each(|t| *t = 0);
                phase.iter_mut().for_each(|p| *p = 1);
            }
            if !self.respond.load(Ordering::Acquire) {
                std::thread::yield_now();
                continue;
            }
            for (q, &base) in rings.iter().enumerate() {
                let base = base as *mut u8;
                let db = rd32(base, 8192);
                std::sync::atomic::fence(Ordering::Acquire);
                while head[q] != db % DEPTH {
                    let e = head[q] as usize * 64;
                    let dw0 = rd32(base, e);
                    let (op, cid) = (dw0 & 0xff, dw0 >> 16);
                    let prp1 = rd32(base, e + 24) as u64 | (rd32(base, e + 28) as u64) << 32;
                    let prp2 = rd32(base, e + 32) as u64 | (rd32(base, e + 36) as u64) << 32;
                    let slba = rd32(base, e + 40) as u64 | (rd32(base, e + 44) as u64) << 32;
                    let bytes = ((rd32(base, e + 48) & 0xffff) as usize + 1) * LBA;
                    let status = match op {
                        0x00 => 0,
                        0x01 | 0x02 => self.transfer(gpu, op == 0x01, slba, bytes, prp1, prp2),
                        _ => 0x01,
                    };
                    head[q] = (head[q] + 1) % DEPTH;
                    let c = 4096 + tail[q] as usize * 16;
                    wr32(base, c + 8, head[q] | ((q as u32 + 1) << 16));
                    std::sync::atomic::fence(Ordering::Release);
                    wr32(base, c + 12, cid | phase[q] << 16 | status << 17);
                    tail[q] += 1;
                    if tail[q] == DEPTH {
                        tail[q] = 0;
                        phase[q] ^= 1;
                    }
                }
            }
        }
    }

    /// WRITE copies GPU -> disk, READ disk -> GPU; PRP1 to its page end,
    /// the rest at PRP2 (two pages at most: the kernels build no lists).
    fn transfer(
        &self,
        gpu: &Gpu,
        write: bool,
        slba: u64,
        bytes: usize,
        prp1: u64,
        prp2: u64,
    ) -> u32 {
        let first = (4096 - (prp1 % 4096) as usize).min(bytes);
        if bytes - first > 4096 {
            return 0x02; // Invalid Field: would need a PRP list
        }
        let off = slba as usize * LBA;
        let mut disk = self.disk.lock().unwrap();
        if off + bytes > disk.len() {
            return 0x80; // LBA out of range
        }
        let chunks = [(prp1, 0, first), (prp2, first, bytes - first)];
        for (addr, at, len) in chunks {
            if len == 0 {
                continue;
            }
            let span = &mut disk[off + at..off + at + len];
            let r = if write {
                gpu.copy_from_device(span, addr)
            } else {
                // SAFETY: a PRP of the kernel's command: an address in
                // the VRAM buffer, which no Rust reference covers.
                unsafe { gpu.copy_to_device(addr, span) }
            };
            if r.is_err() {
                return 0x04; // Data Transfer Error
            }
        }
        0
    }
}

struct Run<'g> {
    gpu: &'g Gpu,
    rings: Vec<HostMapped<'g>>,
    qps: HostMapped<'g>,
    args: HostMapped<'g>,
    res: HostMapped<'g>,
}

impl<'g> Run<'g> {
    fn new(gpu: &'g Gpu, buf: u64) -> Run<'g> {
        let rings: Vec<HostMapped> = (0..QUEUES)
            .map(|_| gpu.alloc_host_mapped(RING_BYTES).unwrap())
            .collect();
        let qps = gpu
            .alloc_host_mapped(QUEUES as usize * std::mem::size_of::<QPair>())
            .unwrap();
        let args = gpu
            .alloc_host_mapped(std::mem::size_of::<IoArgs>())
            .unwrap();
        let res = gpu
            .alloc_host_mapped(QUEUES as usize * std::mem::size_of::<IoResult>())
            .unwrap();
        let me = Run {
            gpu,
            rings,
            qps,
            args,
            res,
        };
        // SAFETY: args is sized and aligned for one IoArgs.
        unsafe {
            me.args.at::<IoArgs>(0).write(IoArgs {
                slba: 0,
                buf_dma: buf,
                buf,
                seed: SEED,
                nsid: 1,
                lba_shift: 9,
                blocks_per_cmd: BLOCKS,
                cmds_per_queue: CMDS,
                page_size: 4096,
                rounds: 1,
            })
        };
        me.reset();
        me
    }

    /// Fresh rings and results: every queue at slot 0, phase 1.
    fn reset(&self) {
        let hz = self.gpu.tick_hz().unwrap();
        for (q, r) in self.rings.iter().enumerate() {
            // SAFETY: r is RING_BYTES of host-mapped memory owned here.
            unsafe { std::ptr::write_bytes(r.cpu(), 0, RING_BYTES) };
            let d = r.dev();
            // SAFETY: qps holds QUEUES QPairs.
            unsafe {
                self.qps
                    .at::<QPair>(q * std::mem::size_of::<QPair>())
                    .write(QPair {
                        sq: d,
                        cq: d + 4096,
                        sq_db: d + 8192,
                        cq_db: d + 8192 + 64,
                        stop: d + 8192 + 128,
                        timeout_ticks: hz / 2,
                        tick_hz: hz,
                        depth: DEPTH,
                        phase: 1,
                        ..Default::default()
                    })
            };
        }
        // SAFETY: res holds QUEUES IoResults.
        unsafe { std::ptr::write_bytes(self.res.cpu(), 0, self.res.len()) };
    }

    fn clear_buffer(&self) {
        // SAFETY: args holds the IoArgs written in new().
        let a = unsafe { self.args.at::<IoArgs>(0).read() };
        let zeros = vec![0u8; (QUEUES * CMDS * BLOCKS) as usize * LBA];
        // SAFETY: a.buf is the run's VRAM buffer (device memory, no Rust
        // reference to it), and no kernel runs.
        unsafe { self.gpu.copy_to_device(a.buf, &zeros) }.unwrap();
    }

    fn set_rounds(&self, rounds: u32) {
        // SAFETY: args holds one IoArgs; no kernel runs.
        unsafe {
            let p = self.args.at::<IoArgs>(0);
            p.write(IoArgs { rounds, ..p.read() });
        }
    }

    fn result(&self, q: usize) -> IoResult {
        // SAFETY: written by the kernel, which has finished.
        unsafe {
            self.res
                .at::<IoResult>(q * std::mem::size_of::<IoResult>())
                .read_volatile()
        }
    }

    fn set_stop(&self, v: u32) {
        for r in &self.rings {
            wr32(r.cpu(), 8192 + 128, v);
        }
    }

    fn launch(&self, kernel: &str) -> gpunvme_gpu::Result<()> {
        self.launch_with(
            kernel,
            QUEUES,
            LANES,
            &[self.qps.dev(), self.args.dev(), self.res.dev()],
        )
    }

    /// Launch `kernel` (grid x block) with these arguments, which must lead
    /// only to memory of `self` or memory the caller keeps until this
    /// returns.
    fn launch_with(
        &self,
        kernel: &str,
        grid: u32,
        block: u32,
        args: &[u64],
    ) -> gpunvme_gpu::Result<()> {
        let dev = self.gpu.device();
        let kind = self.gpu.runtime().kind;
        let (path, image) = code_object::load(&build_dir(), kind, &dev.arch, kernel)?;
        eprintln!("# {kernel}: {}", path.display());
        let module = self.gpu.load_module(&image)?;
        let cfg = LaunchConfig {
            grid,
            block,
            args,
            stop_flag: None, // one per ring: set_stop raises them all
        };
        // SAFETY: the arguments and everything they lead to (rings, stop
        // flags, VRAM buffer; for launch_with also the caller's memory,
        // kept past this call) are memory of `self`, reached from Rust only
        // through raw pointers, and `self` outlives the kernel: it is
        // waited for here, and if it ignores its stop flags the process
        // aborts rather than free that memory under it.
        let mut l = unsafe {
            self.gpu
                .launch(&module, code_object::entry_point(kernel).unwrap(), cfg, ())?
        };
        let r = l.wait(Duration::from_secs(20));
        if r.is_err() {
            self.set_stop(1);
            if l.wait(Duration::from_secs(5)).is_err() {
                eprintln!("# {kernel} ignores its stop flags: aborting");
                std::process::abort();
            }
        }
        r
    }
}

/// Every word of the run's range holds the pattern, and nothing past it
/// was written.
fn assert_disk_holds_the_pattern(fx: &Fixture) {
    let disk = fx.disk.lock().unwrap().clone();
    let total = (QUEUES * CMDS * BLOCKS) as usize * LBA;
    for w in 0..total / 8 {
        let got = u64::from_le_bytes(disk[w * 8..w * 8 + 8].try_into().unwrap());
        assert_eq!(got, pattern(SEED, w as u64 * 8), "disk word {w}");
    }
    assert!(
        disk[total..].iter().all(|&b| b == 0),
        "nothing past the range"
    );
}

/// Fresh rings on both sides: the GPU's queue pairs and the fixture's.
fn fresh(run: &Run, fx: &Fixture) {
    run.reset();
    fx.generation.fetch_add(1, Ordering::AcqRel);
}

fn with_fixture<F: FnOnce(&Gpu, &Run, &Fixture)>(f: F) {
    let gpu = Gpu::open(0).expect("a GPU");
    eprintln!(
        "# {} {} ({}) via {}",
        gpu.device().name,
        gpu.device().arch,
        gpu.runtime().kind,
        gpu.runtime().library
    );
    let bytes = (QUEUES * CMDS * BLOCKS) as usize * LBA;
    let vram = gpu.alloc(bytes).unwrap();
    let run = Run::new(&gpu, vram.ptr());
    let fx = Arc::new(Fixture {
        disk: Mutex::new(vec![0u8; bytes + (1 << 20)]),
        run: AtomicBool::new(true),
        respond: AtomicBool::new(true),
        generation: AtomicU32::new(0),
    });
    let rings: Vec<usize> = run.rings.iter().map(|r| r.cpu() as usize).collect();
    // Stops the server even when an assertion panics, so the scope ends.
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(false, Ordering::Release);
        }
    }
    std::thread::scope(|s| {
        let fx2 = fx.clone();
        let g = &gpu;
        s.spawn(move || fx2.serve(g, &rings));
        let _stop = StopOnDrop(&fx.run);
        f(&gpu, &run, &fx);
    });
}

#[test]
#[ignore = "needs a GPU"]
fn write_then_read_verify_through_the_rings() {
    with_fixture(|_gpu, run, fx| {
        run.launch("write").unwrap();
        for q in 0..QUEUES as usize {
            let r = run.result(q);
            eprintln!("# write q{q}: {r:?}");
            assert_eq!(
                (r.status, r.completed),
                (0, CMDS),
                "write, queue {q}: {r:?}"
            );
        }
        // Every byte the GPU wrote went through the rings to the disk.
        assert_disk_holds_the_pattern(fx);

        // The write kernel left the pattern in VRAM: clear it, so only
        // data the reads deliver can pass the check.
        fresh(run, fx);
        run.clear_buffer();
        run.launch("read_verify").unwrap();
        for q in 0..QUEUES as usize {
            let r = run.result(q);
            assert_eq!(
                (r.status, r.completed, r.mismatches),
                (0, CMDS, 0),
                "read, queue {q}: {r:?}"
            );
            assert!(r.ticks_total > 0);
        }

        // The sweep: rounds of one batch per queue, timed on the GPU clock.
        fresh(run, fx);
        run.set_rounds(4);
        run.launch("sweep").unwrap();
        for q in 0..QUEUES as usize {
            let r = run.result(q);
            eprintln!("# sweep q{q}: {r:?}");
            assert_eq!(
                (r.status, r.completed),
                (0, 4 * (DEPTH - 1)),
                "sweep, queue {q}: {r:?}"
            );
            assert!(r.ticks_max_round > 0 && r.ticks_max_round <= r.ticks_total);
        }

        // The check can fail: one flipped word on the disk is one mismatch.
        fx.disk.lock().unwrap()[8 * 1000] ^= 0x40;
        fresh(run, fx);
        run.clear_buffer();
        run.launch("read_verify").unwrap();
        let r: Vec<IoResult> = (0..QUEUES as usize).map(|q| run.result(q)).collect();
        eprintln!("# after one flipped word: {r:?}");
        assert!(
            r.iter().all(|r| r.status == 0 && r.completed == CMDS),
            "{r:?}"
        );
        assert_eq!(r.iter().map(|r| r.mismatches).sum::<u32>(), 1);
    });
}

/// The per-thread API as `gpunvme gpu-run --api thread` sets it up from
/// Rust: `PQueue` descriptors with their shared state (`pq_shared_init`) in
/// VRAM, `PtArgs`, a list of page addresses; pthread_io.hip's threads each
/// write, then read and check, two 4 KiB commands on pair (thread mod 2),
/// 12 threads per workgroup: 24 commands and three wraps per pair.
#[test]
#[ignore = "needs a GPU"]
fn per_thread_api_write_then_read_verify_through_the_rings() {
    const THREADS: u32 = CMDS / 2;
    with_fixture(|gpu, run, fx| {
        let hz = gpu.tick_hz().unwrap();
        // SAFETY: args holds the IoArgs written in Run::new().
        let buf = unsafe { run.args.at::<IoArgs>(0).read() }.buf;
        let npages = (QUEUES * CMDS * BLOCKS) as usize * LBA / 4096;
        let pages = gpu.alloc_host_mapped(npages * 8).unwrap();
        for i in 0..npages {
            // SAFETY: inside `pages`; no kernel runs. The fixture takes a
            // PRP for a device address.
            unsafe { pages.at::<u64>(i * 8).write(buf + 4096 * i as u64) };
        }
        let pqs = gpu
            .alloc_host_mapped(QUEUES as usize * std::mem::size_of::<PQueue>())
            .unwrap();
        let pt = gpu
            .alloc_host_mapped(std::mem::size_of::<PtArgs>())
            .unwrap();
        let mut states: Vec<_> = (0..QUEUES)
            .map(|_| gpu.alloc(pq_bytes(DEPTH) as usize).unwrap())
            .collect();
        let mut run_pt = |opc: u32| {
            fresh(run, fx);
            for (q, (ring, st)) in run.rings.iter().zip(states.iter_mut()).enumerate() {
                st.write_at(0, &pq_shared_init(DEPTH)).unwrap();
                let d = ring.dev();
                let mut p = PQueue {
                    sq: d,
                    cq: d + 4096,
                    sq_db: d + 8192,
                    cq_db: d + 8192 + 64,
                    stop: d + 8192 + 128,
                    timeout_ticks: hz / 2,
                    tick_hz: hz,
                    depth: DEPTH,
                    ..Default::default()
                };
                p.attach(st.ptr());
                // SAFETY: pqs holds QUEUES PQueues; no kernel runs.
                unsafe { pqs.at::<PQueue>(q * std::mem::size_of::<PQueue>()).write(p) };
            }
            // SAFETY: pt holds one PtArgs; no kernel runs.
            unsafe {
                pt.at::<PtArgs>(0).write(PtArgs {
                    page_dma: pages.dev(),
                    buf,
                    npages: npages as u64,
                    slba: 0,
                    seed: SEED,
                    nsid: 1,
                    lba_shift: 9,
                    bytes_per_cmd: BLOCKS * LBA as u32,
                    cmds_per_thread: 2,
                    npairs: QUEUES,
                    opc,
                    by_unit: 0,
                    pad: 0,
                })
            };
            // pqs, pt, pages and the states outlive the launch (it is
            // waited for inside launch_with).
            run.launch_with(
                "pthread_io",
                QUEUES,
                THREADS,
                &[pqs.dev(), pt.dev(), run.res.dev()],
            )
            .unwrap();
            run.result(0)
        };

        let r = run_pt(NVME_OPC_WRITE);
        eprintln!("# per-thread write: {r:?}");
        assert_eq!((r.status, r.completed), (0, QUEUES * CMDS), "{r:?}");
        assert_disk_holds_the_pattern(fx);

        run.clear_buffer();
        let r = run_pt(NVME_OPC_READ);
        eprintln!("# per-thread read: {r:?}");
        assert_eq!(
            (r.status, r.completed, r.mismatches),
            (0, QUEUES * CMDS, 0),
            "{r:?}"
        );

        // The check can fail: one flipped word is one mismatch.
        fx.disk.lock().unwrap()[8 * 777] ^= 0x10;
        run.clear_buffer();
        let r = run_pt(NVME_OPC_READ);
        eprintln!("# per-thread read after one flipped word: {r:?}");
        assert_eq!(
            (r.status, r.completed, r.mismatches),
            (0, QUEUES * CMDS, 1),
            "{r:?}"
        );
    });
}

#[test]
#[ignore = "needs a GPU"]
fn stop_flag_ends_a_kernel_whose_controller_never_answers() {
    with_fixture(|_gpu, run, fx| {
        fx.respond.store(false, Ordering::Release);
        run.set_stop(1);
        let t0 = std::time::Instant::now();
        run.launch("read_verify").unwrap();
        for q in 0..QUEUES as usize {
            assert_eq!(run.result(q).status, -125, "ECANCELED, queue {q}");
        }
        eprintln!("# stopped in {:?}", t0.elapsed());

        // And without the stop flag the per-wait deadline ends it.
        fresh(run, fx);
        run.set_stop(0);
        run.launch("read_verify").unwrap();
        for q in 0..QUEUES as usize {
            assert_eq!(run.result(q).status, -110, "ETIMEDOUT, queue {q}");
        }
        assert!(t0.elapsed() < Duration::from_secs(10));
    });
}

#[test]
#[ignore = "needs a GPU"]
fn vram_exports_as_a_dmabuf() {
    let gpu = Gpu::open(0).expect("a GPU");
    let mem = gpu.alloc(3 << 20).unwrap();
    match gpu.export_dmabuf(&mem) {
        Ok(fd) => {
            use std::os::fd::AsRawFd;
            let info =
                std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).unwrap();
            eprintln!("# dma-buf fdinfo:\n{info}");
            assert!(info.contains("exp_name:"), "not a dma-buf: {info}");
            let size: usize = info
                .lines()
                .find_map(|l| l.strip_prefix("size:"))
                .map(|v| v.trim().parse().unwrap())
                .unwrap();
            assert_eq!(size, mem.len());
        }
        // Proprietary kernel modules cannot export: the error must say so.
        Err(e) => {
            eprintln!("# export failed: {e}");
            assert!(e.0.contains("dma-buf") || e.0.contains("DMA_BUF"), "{e}");
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn import_reports_every_route() {
    let gpu = Gpu::open(0).expect("a GPU");
    // A memfd page stands in for the module's SQ mapping (ordinary memory).
    // SAFETY: plain syscalls on our own descriptor and mapping.
    let (fd, cpu) = unsafe {
        let fd = libc::memfd_create(c"gpunvme-test".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 4096), 0);
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        (fd, p as *mut u8)
    };
    let vram = gpu.alloc(64 << 10).unwrap();
    let exported = gpu.export_dmabuf(&vram).ok();
    use std::os::fd::AsFd;
    let region = gpunvme_gpu::import::Region {
        what: "test page",
        dmabuf: exported.as_ref().map(|f| f.as_fd()),
        cpu: Some(cpu),
        len: 4096,
        mmio: false,
    };
    // SAFETY: `cpu` is our mapping of 4096 bytes, unmapped only after the
    // import is dropped; no kernel runs, and Rust reads it only after the
    // copy below returned.
    let (imported, report) = unsafe { gpu.import(&region) };
    eprintln!("# {}", report.describe());
    let routes = match gpu.runtime().kind {
        RuntimeKind::Cuda => 1 + exported.is_some() as usize,
        RuntimeKind::Hip => 1 + 3 * exported.is_some() as usize,
    };
    let i = imported.expect("registering ordinary host memory works");
    // Tried in order up to the first that worked; each failure says why.
    let (last, before) = report.attempts.split_last().unwrap();
    assert!(last.ok && last.route == i.route, "{report:?}");
    assert!(
        before.iter().all(|a| !a.ok && !a.detail.is_empty()),
        "{report:?}"
    );
    assert!(report.attempts.len() <= routes);
    // The GPU address reaches the same page: write through it, read on the CPU.
    let mut want = [0u8; 256];
    for (k, b) in want.iter_mut().enumerate() {
        *b = (k as u8).wrapping_mul(7).wrapping_add(3);
    }
    if i.route.contains("HostRegister") {
        // SAFETY: the import of our page: no Rust reference to it now.
        unsafe { gpu.copy_to_device(i.device_ptr, &want) }.unwrap();
        // SAFETY: our live mapping.
        let got = unsafe { std::slice::from_raw_parts(cpu, 256) };
        assert_eq!(got, &want[..]);
    }
    drop(i);
    // SAFETY: our mapping and descriptor, released once.
    unsafe {
        libc::munmap(cpu.cast(), 4096);
        libc::close(fd);
    }
}

/// A memfd page of this process (ordinary shared memory, as the module's
/// queue mappings are), zero-filled; never unmapped (a test).
fn memfd_page() -> *mut u8 {
    // SAFETY: plain syscalls on our own descriptor and mapping.
    unsafe {
        let fd = libc::memfd_create(c"gpunvme-selftest".as_ptr(), libc::MFD_CLOEXEC);
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, 4096), 0);
        let p = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        assert_ne!(p, libc::MAP_FAILED);
        libc::close(fd);
        p as *mut u8
    }
}

/// The round-trip self-test (selftest.hip, the CPU half from selftest.h)
/// through this runtime's own routes: a page imported the way gpu-run
/// imports queue memory without a dma-buf (cuMemHostRegister /
/// hipHostRegister) and host-mapped memory pass; a cell whose GPU address
/// is another page than the one the CPU reads (a mapping that does not
/// reach the memory the CPU sees) is refused, naming region, route and
/// memory type; every cell holds its old words again afterwards.
#[test]
#[ignore = "needs a GPU"]
fn self_test_passes_real_mappings_and_refuses_one_that_misses_the_cpus_memory() {
    use gpunvme_gpu::selftest::{self, Cell, Deadlines, Outcome};
    let gpu = Gpu::open(0).expect("a GPU");
    let (a, b) = (memfd_page(), memfd_page());
    let import = |cpu: *mut u8, what: &'static str| {
        let region = gpunvme_gpu::import::Region {
            what,
            dmabuf: None,
            cpu: Some(cpu),
            len: 4096,
            mmio: false,
        };
        // SAFETY: our page, never unmapped; no kernel runs yet.
        let (i, r) = unsafe { gpu.import(&region) };
        eprintln!("# {}", r.describe());
        (i.expect("host registration of ordinary memory works"), r)
    };
    let (ia, ra) = import(a, "page A (queue memory stand-in)");
    let (ib, rb) = import(b, "page B");
    // Old contents the test must put back: the last 16 bytes of A, and
    // A's words at 1024 (the misdirected cell's CPU side).
    for (off, v) in [
        (4080usize, 0x0a0b_0c0du32),
        (4084, 0x1122_3344),
        (1024, 77),
        (1028, 78),
    ] {
        // SAFETY: inside page A; nothing else uses it now.
        unsafe { a.add(off).cast::<u32>().write_volatile(v) };
    }
    let host = gpu.alloc_host_mapped(4096).unwrap();
    // SAFETY: every cell is in page A, page B or `host`, which outlive the
    // test (the pages are never unmapped; `host` is leaked below if the
    // kernel may still run); nothing else touches them meanwhile.
    let cells = unsafe {
        vec![
            Cell::of_import(&ra, &ia, a, 4096),
            Cell::new(
                "host-mapped memory",
                "alloc_host_mapped",
                None,
                host.cpu().add(2048),
                host.dev() + 2048,
            ),
            Cell::new(
                "a mapping of page B read as page A",
                ib.route,
                rb.mem_type(),
                a.add(1024),
                ib.device_ptr + 1024,
            ),
        ]
    };
    let t = std::time::Instant::now();
    // SAFETY: as above.
    let st = unsafe { selftest::load_and_run(&gpu, &build_dir(), cells, Deadlines::default()) }
        .expect("the self-test runs");
    eprintln!("# self-test in {:?}:", t.elapsed());
    for c in &st.cells {
        eprintln!("#   {}", c.line());
    }
    if st.kernel_still_running {
        std::mem::forget(host);
        panic!("the self-test kernel did not end");
    }
    let outcomes: Vec<Outcome> = st.cells.iter().map(|c| c.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Pass, Outcome::Pass, Outcome::GpuToCpu],
        "{st:#?}"
    );
    assert!(st.cells[..2]
        .iter()
        .all(|c| c.gpu_round_trip_us.is_some_and(|us| us > 0.0)));
    let why = st
        .refusal()
        .expect("the misdirected cell refuses the launch");
    assert!(why.contains("a mapping of page B read as page A"), "{why}");
    assert!(why.contains(ib.route), "{why}");
    assert!(why.contains("memory type"), "{why}");
    // SAFETY: page A, the kernel has finished.
    let word = |off: usize| unsafe { a.add(off).cast::<u32>().read_volatile() };
    assert_eq!(
        [word(4080), word(4084), word(1024), word(1028)],
        [0x0a0b_0c0d, 0x1122_3344, 77, 78],
        "the cells hold their old words again"
    );
    drop((ia, ib));
}
