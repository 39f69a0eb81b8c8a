// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! [`run`] against a fake runtime whose "kernel" is a thread playing the
//! GPU half of the protocol over host memory, with or without a broken
//! mapping: what the launcher makes of each verdict (the verdicts
//! themselves are tested by kernels/tests/host_selftest_test.cpp against
//! the real GPU half).

use super::*;
use crate::gpu::{Backend, CopyError};
use crate::import::{Region as ImportRegion, Route, Undo};
use crate::probe::{CqPlacement, DoorbellMode, GpuDevice, RuntimeInfo, RuntimeKind};
use std::ffi::c_void;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// What the fake GPU's mapping of the cells does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mapping {
    /// The GPU and the CPU see one memory.
    Coherent,
    /// The GPU's stores never reach the memory (a write-back cache).
    GpuStoresLost,
    /// The GPU keeps reading what word 1 held at first (a stale line).
    CpuStoresUnseen,
    /// The kernel never ends, stop flag or not.
    Hangs,
}

struct Fake {
    mapping: Mapping,
    done: Arc<AtomicBool>,
}

fn atomic(p: u64) -> &'static AtomicU32 {
    // SAFETY: the tests' cells and blocks are leaked host memory, u32 aligned.
    unsafe { &*(p as *const AtomicU32) }
}

/// The GPU half of selftest.h, as this test double plays it.
fn gpu_half(r: Region, mapping: Mapping, wait: Duration, stop: u64) -> GpuResult {
    let (w0, w1) = (atomic(r.cell), atomic(r.cell + 4));
    let store = |v| {
        if mapping != Mapping::GpuStoresLost {
            w0.store(v, Ordering::SeqCst)
        }
    };
    let load = || {
        if mapping == Mapping::CpuStoresUnseen {
            r.orig1
        } else {
            w1.load(Ordering::SeqCst)
        }
    };
    let wait_for = |want: u32, seen: &mut u32| {
        let t = Instant::now();
        loop {
            *seen = load();
            if *seen == want {
                return 0;
            }
            if stop != 0 && atomic(stop).load(Ordering::SeqCst) != 0 {
                return -125;
            }
            if t.elapsed() >= wait {
                return -110;
            }
            std::thread::yield_now();
        }
    };
    let (mut seen, mut waits) = (0, 0);
    let t0 = Instant::now();
    store(r.mark);
    let mut rc = wait_for(r.reply, &mut seen);
    let rtt = t0.elapsed().as_nanos() as u64;
    if rc == 0 {
        waits = 1;
        store(r.ack);
        rc = wait_for(r.orig1, &mut seen);
    }
    if rc == 0 {
        waits = 2;
        store(r.orig0);
    } else {
        store(r.nack);
    }
    GpuResult {
        status: rc,
        waits,
        seen,
        done: 1,
        rtt_ticks: rtt,
    }
}

impl Backend for Fake {
    fn tick_hz(&self) -> crate::Result<u64> {
        Ok(1_000_000_000)
    }
    fn alloc_device(&self, _: usize) -> crate::Result<u64> {
        Err(GpuError("no VRAM in the fake".into()))
    }
    fn free_device(&self, _: u64) {}
    fn export_dmabuf(&self, _: u64, _: usize) -> crate::Result<OwnedFd> {
        Err(GpuError("no".into()))
    }
    fn alloc_host_mapped(&self, bytes: usize) -> crate::Result<(*mut u8, u64)> {
        // The fake GPU sees host memory at its CPU address; leaked (a test).
        let mem: &'static mut [u64] = Vec::leak(vec![0u64; bytes.div_ceil(8)]);
        Ok((mem.as_mut_ptr().cast(), mem.as_ptr() as u64))
    }
    fn free_host_mapped(&self, _: *mut u8) {}
    fn copy_to_device(&self, _: u64, _: &[u8]) -> std::result::Result<(), CopyError> {
        unreachable!("the self-test copies nothing")
    }
    unsafe fn copy_from_device(
        &self,
        _: *mut u8,
        _: usize,
        _: u64,
    ) -> std::result::Result<(), CopyError> {
        unreachable!("the self-test copies nothing")
    }
    fn load_module(&self, _: &[u8]) -> crate::Result<usize> {
        Ok(1)
    }
    fn unload_module(&self, _: usize) {}
    fn function(&self, _: usize, name: &str) -> crate::Result<usize> {
        assert_eq!(name, "gpunvme_selftest");
        Ok(1)
    }
    fn launch(
        &self,
        _: usize,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
    ) -> crate::Result<usize> {
        // SAFETY: the one parameter is the args block's address (8 bytes).
        let a = unsafe { (params[0] as *const u64).read() };
        // SAFETY: identity-mapped host memory holding one Args.
        let args = unsafe { (a as *const Args).read() };
        assert_eq!((grid, block), (args.nregions, 1), "one workgroup per cell");
        let (mapping, done) = (self.mapping, self.done.clone());
        std::thread::spawn(move || {
            if mapping == Mapping::Hangs {
                return; // never done
            }
            let wait = Duration::from_nanos(args.timeout_ticks);
            for k in 0..args.nregions as u64 {
                // SAFETY: identity-mapped host memory, n Regions / GpuResults.
                let r = unsafe { ((args.regions + 32 * k) as *const Region).read() };
                let g = gpu_half(r, mapping, wait, args.stop);
                // SAFETY: as above.
                unsafe { ((args.results + 24 * k) as *mut GpuResult).write_volatile(g) };
            }
            done.store(true, Ordering::SeqCst);
        });
        Ok(7)
    }
    fn stream_done(&self, _: usize) -> crate::Result<bool> {
        Ok(self.done.load(Ordering::SeqCst))
    }
    fn destroy_stream(&self, _: usize) {}
    fn import_routes<'a>(&'a self, _: &ImportRegion<'a>) -> Vec<Route<'a>> {
        Vec::new()
    }
    fn release_import(&self, _: Undo) {}
}

fn gpu(mapping: Mapping) -> Gpu {
    Gpu::with_backend(
        Box::new(Fake {
            mapping,
            done: Arc::new(AtomicBool::new(false)),
        }),
        GpuDevice {
            index: 0,
            name: "fake".into(),
            arch: "gfx1101".into(),
            pci_bus_id: None,
            doorbell: DoorbellMode::BridgeOnly,
            reason: String::new(),
            cq: CqPlacement::Mirror,
            cq_reason: String::new(),
            queue_memory: String::new(),
        },
        RuntimeInfo {
            kind: RuntimeKind::Hip,
            library: "fake".into(),
            version: None,
        },
        Duration::from_millis(50),
    )
}

const QUICK: Deadlines = Deadlines {
    gpu_wait: Duration::from_millis(30),
    first: Duration::from_millis(400),
    step: Duration::from_millis(150),
};

/// Two 4 KiB "regions" (leaked host memory) holding known words at their
/// ends, plus a skipped MMIO page.
fn cells(mem: &Mutex<Vec<&'static mut [u32]>>) -> Vec<Cell> {
    let mut v = Vec::new();
    for (i, what) in ["q1 shadow SQ (shared)", "q1 CQ mirror (shared)"]
        .iter()
        .enumerate()
    {
        let page: &'static mut [u32] = Vec::leak(vec![0u32; 1024]);
        page[1020] = 0x1111_0000 + i as u32;
        page[1021] = 0x2222_0000 + i as u32;
        let p = page.as_mut_ptr().cast::<u8>();
        // SAFETY: a leaked page that nothing else touches; the fake GPU
        // addresses it at its CPU address.
        v.push(unsafe {
            Cell::at_end(
                *what,
                crate::mem_type::LIBDRM_ROUTE,
                Some(MemType::Uncached),
                p,
                p as u64,
                4096,
            )
        });
        mem.lock().unwrap().push(page);
    }
    v.push(Cell::skipped(
        "q1 doorbell page (raw)",
        "hipHostRegister(IoMemory)",
        Some(MemType::Uncached),
        "MMIO: a store there rings the controller",
    ));
    v
}

fn run_with(mapping: Mapping) -> (SelfTest, Vec<(u32, u32)>) {
    let g = gpu(mapping);
    let m = g.load_module(b"").unwrap();
    let mem = Mutex::new(Vec::new());
    let c = cells(&mem);
    // SAFETY: the cells are leaked pages only this test uses.
    let st = unsafe { run(&g, &m, c, QUICK) }.unwrap();
    let words = mem
        .lock()
        .unwrap()
        .iter()
        .map(|p| {
            let a = atomic(&p[1020] as *const u32 as u64).load(Ordering::SeqCst);
            (
                a,
                atomic(&p[1021] as *const u32 as u64).load(Ordering::SeqCst),
            )
        })
        .collect();
    (st, words)
}

#[test]
fn a_coherent_mapping_passes_and_every_cell_is_restored() {
    let (st, words) = run_with(Mapping::Coherent);
    assert!(st.passed(), "{st:?}");
    assert!(st.refusal().is_none());
    assert_eq!(
        st.cells.iter().map(|c| c.outcome).collect::<Vec<_>>(),
        [Outcome::Pass, Outcome::Pass, Outcome::Skipped]
    );
    assert!(st.cells[..2]
        .iter()
        .all(|c| c.gpu_round_trip_us.is_some() && c.cpu_round_trip_us.is_some()));
    assert!(st.cells[2].line().contains("skipped: not tested: MMIO"));
    assert_eq!(
        words,
        [(0x1111_0000, 0x2222_0000), (0x1111_0001, 0x2222_0001)]
    );
}

#[test]
fn gpu_stores_that_never_reach_memory_refuse_the_launch_naming_region_route_and_type() {
    let (st, words) = run_with(Mapping::GpuStoresLost);
    assert!(!st.passed());
    assert_eq!(st.cells[0].outcome, Outcome::GpuToCpu);
    let why = st.refusal().expect("refused");
    for part in [
        "q1 shadow SQ (shared)",
        "q1 CQ mirror (shared)",
        crate::mem_type::LIBDRM_ROUTE,
        "memory type uncached (AMDGPU_VM_MTYPE_UC)",
        "plain store and release_system()",
    ] {
        assert!(why.contains(part), "{part}: {why}");
    }
    assert!(
        !why.contains("doorbell page"),
        "a skipped region is no failure: {why}"
    );
    assert_eq!(
        words,
        [(0x1111_0000, 0x2222_0000), (0x1111_0001, 0x2222_0001)]
    );
}

#[test]
fn cpu_stores_the_gpu_never_sees_refuse_the_launch() {
    let (st, _) = run_with(Mapping::CpuStoresUnseen);
    assert!(
        st.cells[..2].iter().all(|c| c.outcome == Outcome::CpuToGpu),
        "{st:?}"
    );
    let why = st.refusal().unwrap();
    assert!(why.contains("CPU stores do not reach the GPU"), "{why}");
    assert!(why.contains("stale GPU cache line"), "{why}");
}

#[test]
fn a_kernel_that_never_ends_is_reported_so_its_memory_is_kept() {
    let t = Instant::now();
    let (st, _) = run_with(Mapping::Hangs);
    assert!(st.kernel_still_running);
    assert!(!st.passed());
    assert!(st
        .refusal()
        .unwrap()
        .contains("did not end after its stop flag"));
    // Bounded: the first deadline, then the waits for the kernel.
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
}

#[test]
fn a_misaligned_or_null_cell_is_skipped_not_tested() {
    // SAFETY: nothing is dereferenced: the cells are refused.
    let (a, b) = unsafe {
        (
            Cell::new("x", "r", None, std::ptr::null_mut(), 0x1000),
            Cell::new("y", "r", None, 0x1004 as *mut u8, 0x1004),
        )
    };
    assert!(matches!(a.at, At::Skipped(_)) && matches!(b.at, At::Skipped(_)));
    let c = Cell::skipped("z", "r", None, "why");
    let g = gpu(Mapping::Coherent);
    let m = g.load_module(b"").unwrap();
    // SAFETY: no cell is tested, so nothing is launched.
    let st = unsafe { run(&g, &m, vec![a, b, c], QUICK) }.unwrap();
    assert!(st.passed() && st.cells.iter().all(|c| c.outcome == Outcome::Skipped));
}

#[test]
fn outcome_names_are_selftest_h_verdict_names() {
    for v in [
        PASS,
        GPU_TO_CPU,
        GPU_TO_CPU_LATE,
        CPU_TO_GPU,
        FOREIGN,
        GPU_ERROR,
        NO_RESULT,
    ] {
        // SAFETY: returns a static string for every verdict.
        let name = unsafe { std::ffi::CStr::from_ptr(gpunvme_st_verdict_name(v)) };
        assert_eq!(
            serde_json::to_string(&outcome(v)).unwrap(),
            format!("\"{}\"", name.to_str().unwrap())
        );
    }
}
