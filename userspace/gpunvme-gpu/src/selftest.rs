// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The round-trip self-test of queue memory, run before a launch.
//!
//! `isa-check` proves the fences are in the code; it cannot see a mapping.
//! A region mapped with the wrong memory type (an RDNA2/3 queue region
//! left NC: review s3, 2.4) passes every check and then loses SQEs to GL2
//! or times out on a stale CQ line. So before anything drives a queue,
//! for each region the kernel will use, a tiny kernel
//! (`kernels/examples/selftest.hip`) stores a value the CPU must see and
//! waits for one the CPU stores, through one cell of that region, through
//! the same GPU address the real kernel gets and the same CPU mapping the
//! host uses, every wait with a deadline. A memory type belongs to a
//! mapping, so a cell stands for its region.
//!
//! The protocol and the CPU's half of it are the device library's
//! (`kernels/include/gpunvme/selftest.h`, compiled by this crate's build
//! script): the checks made here are the code the host harness
//! (`kernels/tests/host_selftest_test.cpp`) runs against stale cells.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::code_object;
use crate::error::{GpuError, Result};
use crate::gpu::{Gpu, LaunchConfig, Module};
use crate::import::{ImportReport, Imported};
use crate::kernel_abi::status_name;
use crate::mem_type::MemType;

/// The self-test's code object (`make kernels`: `<target>/selftest.o`,
/// `sm_90/selftest.ptx`).
pub const KERNEL: &str = "selftest";

/// `struct gpunvme_st_region`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Region {
    cell: u64,
    mark: u32,
    reply: u32,
    ack: u32,
    nack: u32,
    orig0: u32,
    orig1: u32,
}

/// `struct gpunvme_st_result`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct GpuResult {
    status: i32,
    waits: u32,
    seen: u32,
    done: u32,
    rtt_ticks: u64,
}

/// `struct gpunvme_st_args`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Args {
    regions: u64,
    results: u64,
    stop: u64,
    timeout_ticks: u64,
    tick_hz: u64,
    nregions: u32,
    pad: u32,
}

/// `struct gpunvme_st_cpu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct CpuState {
    r: Region,
    step: u32,
    verdict: u32,
    seen: u32,
    pad: u32,
    since_ns: u64,
    first_ns: u64,
    step_ns: u64,
    rtt_ns: u64,
}

// The same numbers as the static asserts of selftest.h.
const _: () = {
    assert!(std::mem::size_of::<Region>() == 32);
    assert!(std::mem::size_of::<GpuResult>() == 24);
    assert!(std::mem::size_of::<Args>() == 48);
    assert!(std::mem::size_of::<CpuState>() == 80);
};

// selftest.h's verdicts and steps.
const RUNNING: u32 = 0;
const PASS: u32 = 1;
const GPU_TO_CPU: u32 = 2;
const GPU_TO_CPU_LATE: u32 = 3;
const CPU_TO_GPU: u32 = 4;
const FOREIGN: u32 = 5;
const GPU_ERROR: u32 = 6;
const NO_RESULT: u32 = 7;
const WAIT_MARK: u32 = 0;
const WAIT_ACK: u32 = 1;

extern "C" {
    fn gpunvme_st_prepare(r: *mut Region, cpu: *mut u32, cell_gpu: u64, seed: u32);
    fn gpunvme_st_cpu_start(s: *mut CpuState, r: *const Region, now: u64, first: u64, step: u64);
    fn gpunvme_st_cpu_step(s: *mut CpuState, cpu: *mut u32, now: u64) -> u32;
    fn gpunvme_st_judge(s: *mut CpuState, g: *const GpuResult) -> u32;
    fn gpunvme_st_restore(r: *const Region, cpu: *mut u32);
    #[cfg(test)]
    fn gpunvme_st_verdict_name(v: u32) -> *const std::ffi::c_char;
}

/// Where one region is tested: the two 32-bit words of its cell, as the
/// CPU and the GPU address them, or why it is not tested.
#[derive(Debug)]
pub struct Cell {
    what: String,
    route: String,
    mem_type: Option<MemType>,
    at: At,
}

#[derive(Debug)]
enum At {
    Mapped { cpu: NonNull<u32>, dev: u64 },
    Skipped(String),
}

impl Cell {
    /// The cell at `cpu` (this process's mapping) and `dev` (the GPU's
    /// address of the same memory), for region `what` mapped by `route`
    /// with `mem_type`.
    ///
    /// # Safety
    ///
    /// `cpu` and `dev` name the same 8 bytes, 8-byte aligned, of memory
    /// mapped in this process and in this GPU's address space, and stay
    /// mapped until [`run`] returns (or, if it reports the kernel still
    /// running, for good). No Rust reference covers them meanwhile, and
    /// nothing else reads or writes them while the test runs: it writes
    /// both words and restores what they held.
    pub unsafe fn new(
        what: impl Into<String>,
        route: impl Into<String>,
        mem_type: Option<MemType>,
        cpu: *mut u8,
        dev: u64,
    ) -> Cell {
        let at = match NonNull::new(cpu.cast::<u32>()) {
            Some(p) if (cpu as usize) % 8 == 0 && dev % 8 == 0 => At::Mapped { cpu: p, dev },
            _ => At::Skipped(format!(
                "no usable cell (CPU {cpu:p}, GPU {dev:#x}: null or not 8-byte aligned)"
            )),
        };
        Cell {
            what: what.into(),
            route: route.into(),
            mem_type,
            at,
        }
    }

    /// The cell in the last 16 bytes of a region of `len` bytes at `cpu`
    /// (this process) and `dev` (the GPU): past the doorbell cells of a
    /// shadow page, in the last SQ or CQ entry or PRP-list slot, none of
    /// which anyone reads before the launch.
    ///
    /// # Safety
    ///
    /// As [`Cell::new`], for the region's last 16 bytes.
    pub unsafe fn at_end(
        what: impl Into<String>,
        route: impl Into<String>,
        mem_type: Option<MemType>,
        cpu: *mut u8,
        dev: u64,
        len: usize,
    ) -> Cell {
        if len < 16 {
            return Cell::skipped(what, route, mem_type, format!("{len} bytes: too small"));
        }
        // SAFETY: inside the region (len >= 16), as the caller promises.
        unsafe {
            Cell::new(
                what,
                route,
                mem_type,
                cpu.wrapping_add(len - 16),
                dev + len as u64 - 16,
            )
        }
    }

    /// The cell of an imported region (its last 16 bytes, as
    /// [`Cell::at_end`]): `cpu` and `len` are the region the import was
    /// made from, `imported` and `report` what [`Gpu::import`] returned.
    ///
    /// # Safety
    ///
    /// As [`Cell::new`]; `cpu` is the CPU mapping of the imported region
    /// (`len` bytes), alive while `imported` is.
    pub unsafe fn of_import(
        report: &ImportReport,
        imported: &Imported<'_>,
        cpu: *mut u8,
        len: usize,
    ) -> Cell {
        // SAFETY: forwarded to the caller.
        unsafe {
            Cell::at_end(
                report.what.clone(),
                imported.route,
                report.mem_type(),
                cpu,
                imported.device_ptr,
                len,
            )
        }
    }

    /// A region that is not tested, and why (MMIO: a store there would
    /// ring the controller).
    pub fn skipped(
        what: impl Into<String>,
        route: impl Into<String>,
        mem_type: Option<MemType>,
        why: impl Into<String>,
    ) -> Cell {
        Cell {
            what: what.into(),
            route: route.into(),
            mem_type,
            at: At::Skipped(why.into()),
        }
    }
}

/// How one region's test ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Both ways seen, in time, and both words restored.
    Pass,
    /// A GPU store was not seen by the CPU before its deadline.
    GpuToCpu,
    /// GPU stores reached the CPU only after the GPU had given up waiting.
    GpuToCpuLate,
    /// The GPU did not see a CPU store before its deadline.
    CpuToGpu,
    /// The cell held a value neither side wrote.
    Foreign,
    /// The GPU's half ended otherwise (stop flag, a stuck clock).
    GpuError,
    /// The kernel did not finish, so the GPU's side is unknown.
    NoResult,
    /// Not tested ([`Cell::skipped`]).
    Skipped,
}

impl Outcome {
    /// Whether the launch may go on.
    pub fn ok(self) -> bool {
        matches!(self, Outcome::Pass | Outcome::Skipped)
    }
}

/// One region's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CellResult {
    /// The region ("q1 CQ mirror (shared)").
    pub what: String,
    /// The route its GPU address came from.
    pub route: String,
    /// The memory type of that mapping, where known.
    pub mem_type: Option<MemType>,
    /// How it ended.
    pub outcome: Outcome,
    /// What was seen, in words.
    pub detail: String,
    /// GPU store to GPU load of the CPU's answer, in microseconds (GPU clock).
    pub gpu_round_trip_us: Option<f64>,
    /// CPU store to CPU load of the GPU's answer, in microseconds.
    pub cpu_round_trip_us: Option<f64>,
}

impl CellResult {
    /// One line: region, route, memory type, outcome, detail.
    pub fn line(&self) -> String {
        let mt = self
            .mem_type
            .map_or("unknown".to_string(), |m| m.to_string());
        let word = match self.outcome {
            Outcome::Pass => "ok",
            Outcome::Skipped => "skipped",
            _ => "FAILED",
        };
        format!(
            "{} via {} [memory type {mt}]: {word}: {}",
            self.what, self.route, self.detail
        )
    }
}

/// What [`run`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SelfTest {
    /// One per cell, in the order given.
    pub cells: Vec<CellResult>,
    /// The kernel did not end even after its stop flag: the memory of
    /// every cell may still be written by it, so the caller must never
    /// unmap or free it (leak it).
    pub kernel_still_running: bool,
}

impl SelfTest {
    /// Every region passed or was skipped, and the kernel ended.
    pub fn passed(&self) -> bool {
        !self.kernel_still_running && self.cells.iter().all(|c| c.outcome.ok())
    }

    /// Why the launch must not go on: every failed region with its route
    /// and memory type; `None` if it may.
    pub fn refusal(&self) -> Option<String> {
        if self.passed() {
            return None;
        }
        let mut why: Vec<String> = self
            .cells
            .iter()
            .filter(|c| !c.outcome.ok())
            .map(CellResult::line)
            .collect();
        if self.kernel_still_running {
            why.push("the self-test kernel did not end after its stop flag".into());
        }
        Some(format!(
            "the round-trip self-test of the queue memory failed, so nothing was launched on it: {}",
            why.join("; ")
        ))
    }
}

/// The deadlines of [`run`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Each wait of the GPU (capped at 2 s on the device).
    pub gpu_wait: Duration,
    /// The CPU's wait for the GPU's first store, the launch included.
    pub first: Duration,
    /// The CPU's later waits; longer than `gpu_wait`, so the CPU sees the
    /// GPU give up rather than time out itself.
    pub step: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            gpu_wait: Duration::from_millis(500),
            first: Duration::from_secs(3),
            step: Duration::from_secs(1),
        }
    }
}

fn seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (t ^ (t >> 32)) as u32 ^ std::process::id().rotate_left(16)
}

fn hex(v: u32) -> String {
    format!("0x{v:08x}")
}

/// The words for a verdict: what each side stored and saw.
fn detail(v: u32, s: &CpuState, g: Option<&GpuResult>, d: &Deadlines) -> String {
    let r = &s.r;
    let ms = |t: Duration| t.as_millis();
    match v {
        PASS => "both ways seen, both words restored".into(),
        GPU_TO_CPU if s.step == WAIT_MARK => format!(
            "the GPU stored {} with a plain store and release_system() (how SQEs and PRP lists are \
             written) and the CPU still read {} after {} ms: GPU stores do not reach memory through \
             this mapping (held in a GPU cache?)",
            hex(r.mark),
            hex(s.seen),
            ms(d.first)
        ),
        GPU_TO_CPU if s.step == WAIT_ACK => format!(
            "the GPU saw the CPU's {} and rang {} with the doorbell store, which the CPU did not see \
             within {} ms (it read {})",
            hex(r.reply),
            hex(r.ack),
            ms(d.step),
            hex(s.seen)
        ),
        GPU_TO_CPU => format!(
            "the GPU saw the CPU's restore and stored {} (plain store, release), which the CPU did \
             not see within {} ms (it read {})",
            hex(r.orig0),
            ms(d.step),
            hex(s.seen)
        ),
        GPU_TO_CPU_LATE => format!(
            "the GPU's stores reached the CPU only after the GPU had given up waiting ({} ms): the \
             CPU read {} (its give-up), never {} (its first store): they linger on the way to memory",
            ms(d.gpu_wait),
            hex(s.seen),
            hex(r.mark)
        ),
        CPU_TO_GPU => {
            let (what, want) = if s.step == WAIT_ACK {
                ("its answer", r.reply)
            } else {
                ("its restore", r.orig1)
            };
            format!(
                "the CPU stored {what} {} and the GPU, polling the way it polls CQEs and the stop \
                 flag, still read {} after {} ms: CPU stores do not reach the GPU through this \
                 mapping (a stale GPU cache line?)",
                hex(want),
                g.map_or("(no result)".to_string(), |g| hex(g.seen)),
                ms(d.gpu_wait)
            )
        }
        FOREIGN => format!(
            "the cell held {}, which neither side stored in this run: another writer, or a stale copy",
            hex(s.seen)
        ),
        GPU_ERROR => format!(
            "the GPU's half ended with {}",
            g.map_or("no result".to_string(), |g| status_name(g.status))
        ),
        NO_RESULT => "the CPU saw every step, but the kernel did not finish: no GPU result".into(),
        other => format!("unexpected verdict {other}"),
    }
}

fn outcome(v: u32) -> Outcome {
    match v {
        PASS => Outcome::Pass,
        GPU_TO_CPU => Outcome::GpuToCpu,
        GPU_TO_CPU_LATE => Outcome::GpuToCpuLate,
        CPU_TO_GPU => Outcome::CpuToGpu,
        FOREIGN => Outcome::Foreign,
        GPU_ERROR => Outcome::GpuError,
        _ => Outcome::NoResult,
    }
}

/// Runs the self-test on `cells` with the self-test kernel of `module`
/// (load [`KERNEL`] with [`code_object::load`]): one workgroup per tested
/// cell, the CPU's half polling every cell here. Returns once every cell
/// has its verdict and the kernel has ended (or would not: see
/// [`SelfTest::kernel_still_running`]); an error only if it could not run
/// at all (allocation, launch).
///
/// # Safety
///
/// Every cell's contract ([`Cell::new`]) holds until this returns, and for
/// good if the report says the kernel is still running.
pub unsafe fn run(
    gpu: &Gpu,
    module: &Module<'_>,
    cells: Vec<Cell>,
    d: Deadlines,
) -> Result<SelfTest> {
    let tested: Vec<(usize, NonNull<u32>, u64)> = cells
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.at {
            At::Mapped { cpu, dev } => Some((i, cpu, dev)),
            At::Skipped(_) => None,
        })
        .collect();
    let mut out: Vec<CellResult> = cells
        .iter()
        .map(|c| CellResult {
            what: c.what.clone(),
            route: c.route.clone(),
            mem_type: c.mem_type,
            outcome: Outcome::Skipped,
            detail: match &c.at {
                At::Skipped(why) => format!("not tested: {why}"),
                At::Mapped { .. } => String::new(),
            },
            gpu_round_trip_us: None,
            cpu_round_trip_us: None,
        })
        .collect();
    let n = tested.len();
    if n == 0 {
        return Ok(SelfTest {
            cells: out,
            kernel_still_running: false,
        });
    }
    let hz = gpu.tick_hz()?;
    let regions = gpu.alloc_host_mapped(n * std::mem::size_of::<Region>())?;
    let results = gpu.alloc_host_mapped(n * std::mem::size_of::<GpuResult>())?;
    let args = gpu.alloc_host_mapped(std::mem::size_of::<Args>())?;
    let stop = gpu.alloc_host_mapped(4096)?;
    let seed0 = seed();
    let mut regs = Vec::with_capacity(n);
    for (k, &(_, cpu, dev)) in tested.iter().enumerate() {
        let mut r = Region::default();
        // SAFETY: `cpu` is the cell's 8 bytes (Cell::new's contract).
        unsafe {
            gpunvme_st_prepare(
                &mut r,
                cpu.as_ptr(),
                dev,
                seed0.wrapping_add((k as u32).wrapping_mul(0x9e37_79b9)),
            )
        };
        // SAFETY: `regions` holds n Regions; no kernel runs yet.
        unsafe {
            regions
                .at::<Region>(k * std::mem::size_of::<Region>())
                .write(r)
        };
        regs.push(r);
    }
    let gpu_wait_ticks = (hz as u128 * d.gpu_wait.as_nanos() / 1_000_000_000) as u64;
    // SAFETY: `args` holds one Args; no kernel runs yet.
    unsafe {
        args.at::<Args>(0).write(Args {
            regions: regions.dev(),
            results: results.dev(),
            stop: stop.dev(),
            timeout_ticks: gpu_wait_ticks,
            tick_hz: hz,
            nregions: n as u32,
            pad: 0,
        })
    };
    let cfg = LaunchConfig {
        grid: n as u32,
        block: 1,
        args: &[args.dev()],
        stop_flag: Some(stop.at::<u32>(0)),
    };
    let entry = code_object::entry_point(KERNEL).expect("the self-test is a known kernel");
    let keep = (regions, results, args, stop);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    // SAFETY: the kernel's one argument is `args`, which leads to
    // `regions`, `results` and the stop flag (all in `keep`) and to the
    // cells, which the caller keeps mapped (this function's contract); Rust
    // reads `results` only after the kernel finished, and the cells only
    // through raw pointers (the C half's atomics).
    let mut launch = unsafe { gpu.launch(module, entry, cfg, keep)? };
    let mut states = vec![CpuState::default(); n];
    for (s, r) in states.iter_mut().zip(&regs) {
        // SAFETY: plain structs owned here.
        unsafe {
            gpunvme_st_cpu_start(
                s,
                r,
                now(),
                d.first.as_nanos() as u64,
                d.step.as_nanos() as u64,
            )
        };
    }
    // Every step of every cell ends by its own deadline; this one only
    // bounds the loop should the clock misbehave.
    let overall = d.first + 3 * d.step;
    let mut polls = 0u64;
    loop {
        let mut running = false;
        for (s, &(_, cpu, _)) in states.iter_mut().zip(&tested) {
            // SAFETY: the cell's 8 bytes (Cell::new's contract).
            running |= unsafe { gpunvme_st_cpu_step(s, cpu.as_ptr(), now()) } == RUNNING;
        }
        if !running || t0.elapsed() > overall {
            break;
        }
        polls += 1;
        if polls % 4096 == 0 && launch.is_done().is_err() {
            break; // the kernel faulted: judged below, without its results
        }
        std::hint::spin_loop();
    }
    // The kernel's waits each end by gpu_wait (two in a row at most).
    let mut ended = launch.wait(2 * d.gpu_wait + d.step).is_ok();
    if !ended {
        launch.stop();
        ended = launch.wait(d.step).is_ok();
    }
    let keep = if ended { launch.finish().ok() } else { None };
    // Not seen finished: dropping it (had `finish` not taken it) waits
    // again and then leaks what it owns rather than free it.
    let gpu_results: Vec<Option<GpuResult>> = match &keep {
        Some((_, res, _, _)) => (0..n)
            // SAFETY: the kernel finished; `res` holds n GpuResults.
            .map(|k| Some(unsafe { res.at::<GpuResult>(k * 24).read_volatile() }))
            .collect(),
        None => vec![None; n],
    };
    for (k, &(i, cpu, _)) in tested.iter().enumerate() {
        let g = gpu_results[k];
        let gp = g
            .as_ref()
            .map_or(std::ptr::null(), |g| g as *const GpuResult);
        // SAFETY: a state of ours and a result read above (or null).
        let v = unsafe { gpunvme_st_judge(&mut states[k], gp) };
        if keep.is_some() {
            // SAFETY: the cell's 8 bytes, and the kernel has finished.
            unsafe { gpunvme_st_restore(&regs[k], cpu.as_ptr()) };
        }
        let s = &states[k];
        let o = &mut out[i];
        o.outcome = outcome(v);
        o.detail = detail(v, s, g.as_ref(), &d);
        if v == PASS {
            o.gpu_round_trip_us = g.map(|g| g.rtt_ticks as f64 * 1e6 / hz as f64);
            o.cpu_round_trip_us = Some(s.rtt_ns as f64 / 1e3);
            o.detail = format!(
                "{} (GPU to CPU to GPU {:.1} us, CPU to GPU to CPU {:.1} us)",
                o.detail,
                o.gpu_round_trip_us.unwrap_or(0.0),
                s.rtt_ns as f64 / 1e3
            );
        }
    }
    Ok(SelfTest {
        cells: out,
        kernel_still_running: keep.is_none(),
    })
}

/// Loads the self-test's code object for `gpu` from `dir` (`make
/// kernels`'s build directory) and runs it ([`run`]).
///
/// # Safety
///
/// As [`run`].
pub unsafe fn load_and_run(
    gpu: &Gpu,
    dir: &std::path::Path,
    cells: Vec<Cell>,
    d: Deadlines,
) -> Result<SelfTest> {
    let (path, image) = code_object::load(dir, gpu.runtime().kind, &gpu.device().arch, KERNEL)
        .map_err(|e| GpuError(format!("the self-test kernel: {e}")))?;
    let module = gpu
        .load_module(&image)
        .map_err(|e| GpuError(format!("loading {}: {e}", path.display())))?;
    // SAFETY: forwarded to the caller.
    unsafe { run(gpu, &module, cells, d) }
}

#[cfg(test)]
mod tests;
