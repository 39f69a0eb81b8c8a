// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme bench`: fio's workload knobs (`--rw`, `--rwmixread`, `--bs`,
//! `--runtime`, `--ramp-time`, `--cpus-allowed`, `--iodepth`/`--qd`,
//! `--numjobs`/`--qpairs`) over a matrix of queue depths x queue pairs, on
//! a gpunvme controller (queue pairs polled from this process, one worker
//! thread per pair) and/or on a kernel nvme block device with O_DIRECT
//! io_uring, one ring per worker, measured with interrupt completions and
//! polled (IORING_SETUP_IOPOLL on the driver's poll queues: nvme.ko's
//! `poll_queues`), which is what gpunvme does and so the fair baseline;
//! with --pread, synchronous pread/pwrite threads instead. The gpunvme
//! matrix runs on shared queue pairs; with --owner again on raw ones, and
//! the two are compared. With --gpu the library's CPU-initiated transfers
//! ([`gpunvme::Transfers`]) are measured into GPU memory and into host
//! memory, the same I/O, and compared in GB/s. With a namespace the kernel
//! drives as DEVICE the same matrix runs on the passthrough back end and,
//! in the same run, on the kernel's own O_DIRECT io_uring on the same
//! blocks (and, with --fio, on fio's io_uring_cmd engine: [`fio_run`]).
//!
//! Latencies (submission to completion) go into HDR histograms (1 ns to
//! 60 s, 3 significant digits) per direction; every cell reports min, mean,
//! stddev, fio's percentiles (1 .. 99.99) and json+ bins, and the workers'
//! CPU time. `-o json` prints the bench's own document with fio's
//! `jobs[]` (one job per cell, fio's field names: see [`fio_json`]) in it.

mod fio_json;
mod fio_run;
mod gpunvme_run;
mod kernel;
mod stats;
mod transfers_run;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::json;

use crate::gpu_mem::{parse_gpu_source, GpuSource};
use crate::habits::{
    human_count, human_us, interrupted, parse_count, parse_device, parse_size, Device, Interrupted,
    Output,
};
use crate::passthrough_args::PassthroughArgs;
use crate::Res;
use stats::{Cpu, Measured};
pub use workload::Rw;
use workload::{parse_cpu_list, parse_duration};

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// The gpunvme controller: a PCI address (0000:01:00.0 or 01:00.0),
    /// /dev/gpunvmeN or gpunvmeN; or a namespace the kernel drives
    /// (/dev/ngXnY, /dev/nvmeXnY, a partition) through the passthrough back
    /// end, measured in the same run beside the kernel's own O_DIRECT
    /// io_uring on the same blocks (its block device, unless
    /// --block-device names another). Without DEVICE (and without --owner)
    /// only --block-device is measured.
    #[arg(value_name = "DEVICE", value_parser = parse_device)]
    pub device: Option<Device>,
    /// Also (or, without DEVICE, only) measure this kernel nvme block
    /// device, e.g. /dev/nvme0n1: O_DIRECT io_uring, one ring of QD I/Os
    /// per queue-pair thread, in each --kernel-mode. Write workloads open
    /// it O_EXCL, which the kernel refuses while it is mounted.
    #[arg(long, value_name = "DEV")]
    pub block_device: Option<PathBuf>,
    /// With a kernel namespace as DEVICE, also run fio (fio's own
    /// io_uring_cmd engine, NVMe passthrough on the same /dev/ngXnY and
    /// blocks, with the same --rw, --bs, --runtime, --ramp-time and
    /// --cpus-allowed, polled like --kernel-mode poll when the namespace
    /// has poll queues) as a baseline nobody here wrote. FIO is the fio
    /// binary to run (default: fio on PATH).
    #[arg(long, value_name = "FIO", num_args = 0..=1, default_missing_value = "fio")]
    pub fio: Option<PathBuf>,
    #[command(flatten)]
    pub passthrough: PassthroughArgs,
    /// How the kernel side completes: irq (interrupts), poll
    /// (IORING_SETUP_IOPOLL; needs nvme.ko loaded with poll_queues=N, else
    /// its cells are skipped with the reason). Ratios are published against
    /// poll, which busy-polls as gpunvme does. A list: irq,poll or irq poll.
    #[arg(long, value_enum, value_delimiter = ',', num_args = 1.., default_values_t = [KernelMode::Irq, KernelMode::Poll])]
    pub kernel_mode: Vec<KernelMode>,
    /// On the block device use synchronous O_DIRECT pread/pwrite from QD x
    /// queue-pairs threads instead of io_uring.
    #[arg(long)]
    pub pread: bool,
    /// Also measure the gpunvme matrix on raw queue pairs in owner mode
    /// (claims the controller: needs CAP_SYS_RAWIO, no lockdown, a
    /// translating IOMMU) and print shared/raw ratios: what the module's
    /// checking relay costs. A gpunvme controller only.
    #[arg(long)]
    pub owner: bool,
    /// Measure the library's CPU-initiated transfers (gpunvme::Transfers)
    /// into GPU memory from SOURCE (a GPU index, udmabuf or edu; see
    /// `gpunvme read --help`) and, the same I/O, into host memory, and
    /// print GB/s GPU/host (instead of the plain gpunvme matrix). A
    /// gpunvme controller only: io_uring passthrough moves host memory.
    #[arg(long, value_name = "SOURCE", value_parser = parse_gpu_source)]
    pub gpu: Option<GpuSource>,
    /// Namespace ID on the gpunvme controller (default: the node's
    /// namespace, else 1).
    #[arg(short = 'n', long = "namespace-id", value_name = "NSID")]
    pub nsid: Option<u32>,
    /// I/O pattern, as fio's --rw: randread, randwrite, read, write
    /// (sequential), randrw (random, --rwmixread percent reads). Writes
    /// destroy the data in --range.
    #[arg(long, value_enum, default_value_t = Rw::Randread)]
    pub rw: Rw,
    /// Percent of reads in --rw randrw (fio's rwmixread).
    #[arg(long, value_name = "PCT", default_value_t = 50,
          value_parser = clap::value_parser!(u8).range(0..=100))]
    pub rwmixread: u8,
    /// Block size of each I/O (fio's bs): 512, 4k, 128k, 1M, ... A
    /// multiple of the LBA size, at most one command (MDTS).
    #[arg(long, value_name = "SIZE", default_value = "4k", value_parser = parse_size)]
    pub bs: u64,
    /// I/O within the first SIZE bytes of the namespace/device (4k, 16M,
    /// 1G, ...; default: all of it, at most 1 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub range: Option<u64>,
    /// Queue depths (I/Os in flight) per queue pair, per thread group on
    /// the block device (fio's iodepth). A list: 1,8,32 or 1 8 32.
    #[arg(long, visible_alias = "iodepth", value_name = "N", value_delimiter = ',', num_args = 1..,
          value_parser = parse_count, default_values_t = [1u32, 8, 32])]
    pub qd: Vec<u32>,
    /// Queue pair counts, one worker thread each (fio's numjobs). A list:
    /// 1,4 or 1 4.
    #[arg(long, visible_alias = "numjobs", value_name = "N", value_delimiter = ',', num_args = 1..,
          value_parser = parse_count, default_values_t = [1u32, 4])]
    pub qpairs: Vec<u32>,
    /// Length of each measurement, after the ramp (fio's runtime): 30, 30s,
    /// 500ms, 2m, 1h (a bare number is seconds). Default 1s.
    #[arg(long, value_name = "TIME", value_parser = parse_duration,
          conflicts_with_all = ["ops", "duration_ms"])]
    pub runtime: Option<Duration>,
    /// The same in milliseconds (older spelling of --runtime).
    #[arg(long, value_name = "MS", hide = true, conflicts_with = "ops")]
    pub duration_ms: Option<u64>,
    /// Fixed number of I/Os per measurement (after the ramp) instead of a
    /// runtime.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Run each cell this long before measuring (fio's ramp_time): I/O
    /// runs, nothing is recorded.
    #[arg(long, visible_alias = "ramp_time", value_name = "TIME",
          value_parser = parse_duration, default_value = "0")]
    pub ramp_time: Duration,
    /// Pin worker threads, round-robin, to these CPUs (fio's
    /// cpus_allowed, taskset's list): 0-3,6.
    // The full path keeps clap from taking `Vec` for repeated values: the
    // parser returns the whole list.
    #[arg(long, visible_alias = "cpus_allowed", value_name = "LIST", value_parser = parse_cpu_list)]
    pub cpus_allowed: Option<::std::vec::Vec<usize>>,
    /// Seed of the random offsets and the read/write mix (fio's randseed).
    #[arg(long, value_name = "SEED", default_value_t = 1)]
    pub randseed: u64,
    #[command(flatten)]
    pub out: Output,
}

/// Completion mode of the kernel-side io_uring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum KernelMode {
    /// Interrupt completions (a plain ring, io_uring_enter waits).
    Irq,
    /// Polled completions (IORING_SETUP_IOPOLL, the driver's poll queues).
    Poll,
}

/// One cell of a matrix: the flat numbers of every direction together
/// (the table's, and the bench JSON's since before fio's jobs), the
/// measurement behind them for fio's `jobs[]`.
#[derive(Clone, Serialize)]
struct Cell {
    qpairs: u32,
    qd: u32,
    ops: u64,
    seconds: f64,
    iops: f64,
    read_iops: f64,
    write_iops: f64,
    mib_per_s: f64,
    gb_per_s: f64,
    lat_us_min: f64,
    lat_us_mean: f64,
    lat_us_stddev: f64,
    lat_us_p50: f64,
    lat_us_p99: f64,
    lat_us_p999: f64,
    lat_us_p9999: f64,
    lat_us_max: f64,
    usr_cpu: f64,
    sys_cpu: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
    #[serde(skip)]
    measured: Option<Measured>,
}

#[derive(Serialize)]
struct Run {
    target: &'static str,
    device: String,
    method: String,
    range_bytes: u64,
    results: Vec<Cell>,
}

/// When a worker records and stops: I/O submitted before `start` is the
/// ramp (run, not recorded); after it, until the deadline or `ops`
/// recorded I/Os, or Ctrl-C (what is in flight is still reaped).
#[derive(Clone, Copy)]
struct Stop {
    start: Instant,
    deadline: Option<Instant>,
    ops: Option<u64>,
}

impl Stop {
    fn done(&self, measured: u64) -> bool {
        self.ops.is_some_and(|o| measured >= o)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || interrupted()
    }

    fn measuring(&self, t: Instant) -> bool {
        t >= self.start
    }
}

/// A worker's CPU time from the start of measurement to its end.
struct CpuClock {
    from: Option<Cpu>,
}

impl CpuClock {
    fn new() -> Self {
        CpuClock { from: None }
    }
    /// Call as I/O goes on: takes the snapshot once measuring begins.
    fn tick(&mut self, stop: &Stop, now: Instant) {
        if self.from.is_none() && stop.measuring(now) {
            self.from = Some(Cpu::thread_now());
        }
    }
    fn used(&self) -> Cpu {
        self.from
            .map(|f| Cpu::thread_now().since(f))
            .unwrap_or_default()
    }
}

/// The workload of one cell, as each worker needs it.
#[derive(Clone, Copy)]
struct Plan {
    rw: Rw,
    rwmixread: u8,
    bs: u64,
    range: u64,
    qd: u32,
    workers: u32,
    stop: Stop,
    randseed: u64,
}

impl Plan {
    /// Worker `i`'s I/O sequence (distinct per worker, fixed by --randseed).
    fn ops(&self, i: u64) -> workload::OpGen {
        let seed = self
            .randseed
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(i + 1);
        workload::OpGen::new(
            self.rw,
            self.rwmixread,
            self.bs,
            self.range,
            seed,
            i,
            self.workers as u64,
        )
    }
}

fn cell(qpairs: u32, qd: u32, m: Measured, runtime: Duration) -> Cell {
    let secs = runtime.as_secs_f64().max(1e-9);
    let all = m.all();
    let s = all.summary();
    let us = |ns: u64| ns as f64 / 1000.0;
    let (usr, sys) = m.cpu.percent(runtime);
    Cell {
        qpairs,
        qd,
        ops: s.n,
        seconds: runtime.as_secs_f64(),
        iops: s.n as f64 / secs,
        read_iops: m.read.ios() as f64 / secs,
        write_iops: m.write.ios() as f64 / secs,
        mib_per_s: all.bytes as f64 / secs / (1 << 20) as f64,
        gb_per_s: all.bytes as f64 / secs / 1e9,
        lat_us_min: us(s.min),
        lat_us_mean: s.mean / 1000.0,
        lat_us_stddev: s.stddev / 1000.0,
        lat_us_p50: us(s.at(50.0)),
        lat_us_p99: us(s.at(99.0)),
        lat_us_p999: us(s.at(99.9)),
        lat_us_p9999: us(s.at(99.99)),
        lat_us_max: us(s.max),
        usr_cpu: usr,
        sys_cpu: sys,
        skipped: None,
        measured: Some(m),
    }
}

fn skipped(qpairs: u32, qd: u32, why: String) -> Cell {
    let mut c = cell(qpairs, qd, Measured::new(), Duration::ZERO);
    c.iops = 0.0;
    c.skipped = Some(why);
    c.measured = None;
    c
}

/// One cell: `workers` threads run `work(i)` at once (pinned round-robin
/// to --cpus-allowed); their measurements merged into the cell, timed from
/// the end of the ramp to the last worker's end; or the first error.
fn run_cell<E: Send + From<String>>(
    a: &BenchArgs,
    qpairs: u32,
    plan: &Plan,
    workers: usize,
    work: impl Fn(usize) -> Result<Measured, E> + Sync,
) -> Result<Cell, E> {
    let all: Vec<Result<Measured, E>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|i| {
                let work = &work;
                let cpu = a.cpus_allowed.as_ref().map(|c| c[i % c.len()]);
                s.spawn(move || {
                    if let Some(c) = cpu {
                        workload::pin_to(c).map_err(E::from)?;
                    }
                    work(i)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench worker panicked"))
            .collect()
    });
    let runtime = Instant::now().saturating_duration_since(plan.stop.start);
    let mut m = Measured::new();
    for w in all {
        m.merge(&w?);
    }
    Ok(cell(qpairs, plan.qd, m, runtime))
}

/// The cell's plan: the ramp starts now.
fn plan_for(a: &BenchArgs, range: u64, qd: u32, workers: u32) -> Plan {
    let start = Instant::now() + a.ramp_time;
    let runtime = a
        .runtime
        .or(a.duration_ms.map(Duration::from_millis))
        .unwrap_or(Duration::from_secs(1));
    Plan {
        rw: a.rw,
        rwmixread: a.rwmixread,
        bs: a.bs,
        range,
        qd,
        workers,
        stop: Stop {
            start,
            deadline: a.ops.is_none().then(|| start + runtime),
            ops: a.ops.map(|o| o.div_ceil(workers as u64)),
        },
        randseed: a.randseed,
    }
}

/// The range measured: --range (default 1 GiB) within `capacity`, whole
/// --bs blocks.
fn range_bytes(a: &BenchArgs, capacity: u64) -> u64 {
    let want = a.range.unwrap_or(1 << 30);
    want.min(capacity) / a.bs.max(1) * a.bs.max(1)
}

const TARGET_SHARED: &str = "gpunvme";
const TARGET_PT: &str = "passthrough";
const TARGET_FIO: &str = "fio-io_uring_cmd";
const TARGET_RAW: &str = "gpunvme-raw";
const TARGET_KERNEL_IRQ: &str = "kernel-irq";
const TARGET_KERNEL_POLL: &str = "kernel-poll";
const TARGET_KERNEL_PREAD: &str = "kernel-pread";
const TARGET_XFER_HOST: &str = "transfers-host";
const TARGET_XFER_GPU: &str = "transfers-gpu";

/// The namespace measured: -n, else the node's, else 1.
fn nsid(a: &BenchArgs, info: &gpunvme::Info) -> u32 {
    a.nsid.or(info.node_nsid).unwrap_or(1)
}

/// The kernel's own path to the blocks a passthrough run used: the
/// window's block device and the byte offset of the window in it, and the
/// namespace's generic device with the window's byte offset there (fio);
/// `range` is the bytes the passthrough run covered, which the baselines
/// must not go past (a write workload would reach outside the window).
struct Baseline {
    block_device: PathBuf,
    offset: u64,
    ng: PathBuf,
    ng_offset: u64,
    polled: bool,
    range: u64,
}

/// Cells of one run's matrix.
fn cells(a: &BenchArgs) -> u64 {
    (a.qd.len() * a.qpairs.len()) as u64
}

/// After Ctrl-C: the cell that was running has reaped its I/O; stop.
fn check_interrupt(done: &[Cell]) -> Result<(), Interrupted> {
    if interrupted() {
        return Err(Interrupted(format!(
            "bench stopped after {} cell(s) (every I/O in flight was reaped)",
            done.len()
        )));
    }
    Ok(())
}

fn workload_line(a: &BenchArgs) -> String {
    let mix = if a.rw == Rw::Randrw {
        format!(" ({}% reads)", a.rwmixread)
    } else {
        String::new()
    };
    format!(
        "rw={}{mix}, bs={}",
        a.rw.name(),
        crate::habits::human_bytes(a.bs)
    )
}

fn print_run(a: &BenchArgs, r: &Run) {
    println!(
        "{} {} ({}), range {}, {}",
        r.target,
        r.device,
        r.method,
        crate::habits::human_bytes(r.range_bytes),
        workload_line(a)
    );
    println!(
        "{:>7} {:>4} {:>10} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}",
        "QPAIRS", "QD", "OPS", "IOPS", "MiB/s", "GB/s", "MIN", "MEAN", "P50", "P99", "P99.9",
        "P99.99", "MAX", "USR%", "SYS%"
    );
    for c in &r.results {
        match &c.skipped {
            Some(w) => println!("{:>7} {:>4} skipped: {w}", c.qpairs, c.qd),
            None => println!(
                "{:>7} {:>4} {:>10} {:>9} {:>9.1} {:>8.3} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6.0} {:>6.0}",
                c.qpairs,
                c.qd,
                c.ops,
                human_count(c.iops),
                c.mib_per_s,
                c.gb_per_s,
                human_us(c.lat_us_min),
                human_us(c.lat_us_mean),
                human_us(c.lat_us_p50),
                human_us(c.lat_us_p99),
                human_us(c.lat_us_p999),
                human_us(c.lat_us_p9999),
                human_us(c.lat_us_max),
                c.usr_cpu,
                c.sys_cpu,
            ),
        }
    }
    if r.results.iter().any(|c| c.skipped.is_none()) {
        print_histogram(r);
    }
}

/// A coarse latency histogram of the run's busiest cell (the table has
/// the percentiles; `-o json` has every bucket).
fn print_histogram(r: &Run) {
    let Some((c, m)) = r
        .results
        .iter()
        .filter_map(|c| c.measured.as_ref().map(|m| (c, m)))
        .max_by_key(|(c, _)| c.ops)
    else {
        return;
    };
    let all = m.all();
    if all.ios() == 0 {
        return;
    }
    println!(
        "latency histogram, {} qpair(s) QD {} ({} I/Os):",
        c.qpairs,
        c.qd,
        all.ios()
    );
    // Powers of two from the minimum to the maximum.
    let (lo, hi) = (all.hist.min().max(1), all.hist.max().max(1));
    let mut b = lo.next_power_of_two() / 2;
    let mut prev = 0u64;
    while prev < hi {
        let top = (b.max(1) * 2).min(u64::MAX / 2);
        let n = all.hist.count_between(prev + 1, top);
        if n > 0 {
            let pct = 100.0 * n as f64 / all.ios() as f64;
            let bar = "#".repeat(((pct / 2.0).round() as usize).min(50));
            println!(
                "  <= {:>9} {:>6.2}% {bar}",
                human_us(top as f64 / 1000.0),
                pct
            );
        }
        prev = top;
        b = top;
    }
}

fn find<'r>(runs: &'r [Run], target: &str) -> Option<&'r Run> {
    runs.iter().find(|r| r.target == target)
}

/// Pairs of measured (not skipped) cells of the same (qpairs, qd).
fn matched<'r>(a: &'r Run, b: &'r Run) -> impl Iterator<Item = (&'r Cell, &'r Cell)> {
    a.results
        .iter()
        .filter(|c| c.skipped.is_none())
        .filter_map(move |ca| {
            b.results
                .iter()
                .find(|cb| cb.qpairs == ca.qpairs && cb.qd == ca.qd && cb.skipped.is_none())
                .map(|cb| (ca, cb))
        })
}

fn ratio(num: f64, den: f64) -> Option<f64> {
    (den > 0.0 && num.is_finite()).then(|| num / den)
}

fn fmt_ratio(r: Option<f64>) -> String {
    r.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"))
}

/// `println!` when `$show` (the tables of -o normal).
macro_rules! outln {
    ($show:expr) => {
        if $show {
            println!()
        }
    };
    ($show:expr, $($t:tt)*) => {
        if $show {
            println!($($t)*)
        }
    };
}

/// gpunvme (shared, passthrough, or transfers into GPU memory) vs one
/// baseline run (the kernel's, or fio's): IOPS ours/theirs, p50 and p99
/// theirs/ours (above 1: gpunvme is ahead). The JSON keys keep their
/// names (`..._gpunvme_over_kernel`) whatever the baseline.
fn kernel_ratios(g: &Run, k: &Run, show: bool) -> Vec<serde_json::Value> {
    outln!(show);
    outln!(show, "{} against {} ({})", g.target, k.target, k.method);
    outln!(
        show,
        "{:>7} {:>4} {:>22} {:>22} {:>22}",
        "QPAIRS",
        "QD",
        "IOPS ours/theirs",
        "P50 theirs/ours",
        "P99 theirs/ours"
    );
    let mut out = Vec::new();
    for (cg, ck) in matched(g, k) {
        if ck.iops == 0.0 || cg.lat_us_p50 == 0.0 {
            continue;
        }
        let ri = cg.iops / ck.iops;
        let rl = ck.lat_us_p50 / cg.lat_us_p50;
        let r99 = ratio(ck.lat_us_p99, cg.lat_us_p99);
        outln!(
            show,
            "{:>7} {:>4} {:>22.2} {:>22.2} {:>22}",
            cg.qpairs,
            cg.qd,
            ri,
            rl,
            fmt_ratio(r99)
        );
        out.push(json!({
            "qpairs": cg.qpairs, "qd": cg.qd,
            "iops_gpunvme_over_kernel": ri,
            "p50_latency_kernel_over_gpunvme": rl,
            "p99_latency_kernel_over_gpunvme": r99,
        }));
    }
    out
}

/// Shared vs raw, every cell: IOPS, p50 and p99 latency, each shared/raw
/// (latency > 1 and IOPS < 1: the checking relay costs).
fn owner_ratios(raw: &Run, shared: &Run, show: bool) -> Vec<serde_json::Value> {
    outln!(show);
    outln!(
        show,
        "shared/raw (latency above 1 and IOPS below 1: what the module's checking relay costs)"
    );
    outln!(
        show,
        "{:>7} {:>4} {:>10} {:>10} {:>10}",
        "QPAIRS",
        "QD",
        "IOPS",
        "P50",
        "P99"
    );
    let mut out = Vec::new();
    for (cr, cs) in matched(raw, shared) {
        let ri = ratio(cs.iops, cr.iops);
        let r50 = ratio(cs.lat_us_p50, cr.lat_us_p50);
        let r99 = ratio(cs.lat_us_p99, cr.lat_us_p99);
        outln!(
            show,
            "{:>7} {:>4} {:>10} {:>10} {:>10}",
            cr.qpairs,
            cr.qd,
            fmt_ratio(ri),
            fmt_ratio(r50),
            fmt_ratio(r99)
        );
        out.push(json!({
            "qpairs": cr.qpairs, "qd": cr.qd,
            "iops_shared_over_raw": ri,
            "p50_latency_shared_over_raw": r50,
            "p99_latency_shared_over_raw": r99,
        }));
    }
    out
}

/// GPU memory vs host memory through the same transfers: GB/s GPU/host
/// (the target: at least 0.9 at 128 KiB; reported, never asserted).
fn gpu_ratios(gpu: &Run, host: &Run, show: bool) -> Vec<serde_json::Value> {
    outln!(show);
    outln!(
        show,
        "GPU memory / host memory, the same transfers ({})",
        gpu.method
    );
    outln!(
        show,
        "{:>7} {:>4} {:>12} {:>12} {:>10} {:>10}",
        "QPAIRS",
        "QD",
        "GB/s GPU",
        "GB/s host",
        "GPU/host",
        "P50 h/g"
    );
    let mut out = Vec::new();
    for (cg, ch) in matched(gpu, host) {
        let r = ratio(cg.gb_per_s, ch.gb_per_s);
        let r50 = ratio(ch.lat_us_p50, cg.lat_us_p50);
        outln!(
            show,
            "{:>7} {:>4} {:>12.3} {:>12.3} {:>10} {:>10}",
            cg.qpairs,
            cg.qd,
            cg.gb_per_s,
            ch.gb_per_s,
            fmt_ratio(r),
            fmt_ratio(r50)
        );
        out.push(json!({
            "qpairs": cg.qpairs, "qd": cg.qd,
            "gb_per_s_gpu": cg.gb_per_s, "gb_per_s_host": ch.gb_per_s,
            "gbps_gpu_over_host": r,
            "p50_latency_host_over_gpu": r50,
        }));
    }
    out
}

/// fio's `jobs[]`: one job per measured cell of every run.
fn fio_jobs(a: &BenchArgs, runs: &[Run]) -> Vec<serde_json::Value> {
    let mut jobs = Vec::new();
    for r in runs {
        for c in &r.results {
            let Some(m) = &c.measured else { continue };
            let mut options = BTreeMap::new();
            for (k, v) in [
                ("rw", a.rw.name().to_string()),
                ("bs", a.bs.to_string()),
                ("iodepth", c.qd.to_string()),
                ("numjobs", c.qpairs.to_string()),
                ("size", r.range_bytes.to_string()),
                ("filename", r.device.clone()),
            ] {
                options.insert(k.to_string(), v);
            }
            if a.rw == Rw::Randrw {
                options.insert("rwmixread".into(), a.rwmixread.to_string());
            }
            if let Some(t) = a.runtime.or(a.duration_ms.map(Duration::from_millis)) {
                options.insert("runtime".into(), format!("{}ms", t.as_millis()));
            }
            if !a.ramp_time.is_zero() {
                options.insert("ramp_time".into(), format!("{}ms", a.ramp_time.as_millis()));
            }
            let info = fio_json::JobInfo {
                name: format!("{} qpairs={} qd={}", r.target, c.qpairs, c.qd),
                options,
                qd: c.qd,
                runtime: Duration::from_secs_f64(c.seconds),
                gpunvme: json!({
                    "target": r.target, "device": r.device, "method": r.method,
                    "qpairs": c.qpairs, "qd": c.qd,
                }),
            };
            jobs.push(fio_json::job(&info, m));
        }
    }
    jobs
}

pub fn bench(sysfs: &gpunvme::sysfs::Sysfs, a: &BenchArgs) -> Res {
    let show = !a.out.json();
    if a.bs == 0 || a.bs > 64 << 20 {
        return Err(format!("--bs {}: expected 512 .. 64M", a.bs).into());
    }
    let want_gpunvme = a.device.is_some() || a.block_device.is_none() || a.owner || a.gpu.is_some();
    if want_gpunvme && a.device.is_none() {
        return Err("bench: name the gpunvme controller first (DEVICE), or measure a kernel device alone with --block-device".into());
    }
    let kernel_namespace = matches!(a.device, Some(Device::Namespace(_)));
    if kernel_namespace {
        // Refused before anything opens, rather than after the first run.
        if a.owner {
            return Err(
                "bench --owner: raw queue pairs need a controller bound to the gpunvme \
                 module; a kernel namespace is served through io_uring passthrough, whose \
                 every command the relay checks"
                    .into(),
            );
        }
        if a.gpu.is_some() {
            let why = gpunvme::passthrough::dmabuf_support()
                .err()
                .unwrap_or_default();
            return Err(format!("bench --gpu: {why}").into());
        }
    } else if a.fio.is_some() {
        return Err(
            "bench --fio: name a kernel namespace (/dev/ngXnY, a partition) as DEVICE".into(),
        );
    }
    // JSON order: gpunvme (shared, or passthrough; or with --gpu transfers
    // into host, then GPU memory), kernel modes, fio, then gpunvme-raw.
    let mut runs = Vec::new();
    let mut baseline = None;
    if want_gpunvme {
        match &a.gpu {
            None => {
                let (run, b) = gpunvme_run::run(sysfs, a, gpunvme::Mode::Shared)?;
                runs.push(run);
                baseline = b;
            }
            Some(src) => {
                let (host, gpu) = transfers_run::runs(sysfs, a, src)?;
                runs.push(host);
                runs.push(gpu);
            }
        }
        if show {
            for (i, r) in runs.iter().enumerate() {
                outln!(show && i > 0);
                print_run(a, r);
            }
        }
    }
    // A passthrough run is compared with the kernel's own path to the same
    // blocks: its window's block device (no further than the window), unless
    // --block-device says.
    let kernel_dev = match (&a.block_device, &baseline) {
        (Some(d), _) => Some((d.clone(), 0, None)),
        (None, Some(b)) => Some((b.block_device.clone(), b.offset, Some(b.range))),
        (None, None) => None,
    };
    if let Some((dev, base, cap)) = &kernel_dev {
        let modes: Vec<Option<KernelMode>> = if a.pread {
            vec![None]
        } else {
            a.kernel_mode.iter().copied().map(Some).collect()
        };
        for m in modes {
            if !runs.is_empty() {
                outln!(show);
            }
            runs.push(kernel::run(sysfs, a, dev, *base, *cap, m)?);
            if show {
                print_run(a, runs.last().unwrap());
            }
        }
    }
    if let (Some(fio), Some(b)) = (&a.fio, &baseline) {
        outln!(show);
        runs.push(fio_run::run(a, fio, &b.ng, b.ng_offset, b.polled, b.range)?);
        if show {
            print_run(a, runs.last().unwrap());
        }
    }
    // Published ratios are against the polled kernel (both sides busy-poll);
    // the interrupt-mode ones are reported beside them.
    let base = find(&runs, TARGET_SHARED)
        .or(find(&runs, TARGET_PT))
        .or(find(&runs, TARGET_XFER_GPU));
    let ratio_vs = |target| match (base, find(&runs, target)) {
        (Some(g), Some(k)) => Some(kernel_ratios(g, k, show)),
        _ => None,
    };
    let ratios = ratio_vs(TARGET_KERNEL_POLL);
    let ratios_irq = ratio_vs(TARGET_KERNEL_IRQ);
    let ratios_pread = ratio_vs(TARGET_KERNEL_PREAD);
    let ratios_fio = ratio_vs(TARGET_FIO);
    let gpu = match (find(&runs, TARGET_XFER_GPU), find(&runs, TARGET_XFER_HOST)) {
        (Some(g), Some(h)) => Some(gpu_ratios(g, h, show)),
        _ => None,
    };
    let mut owner = Vec::new();
    if a.owner {
        outln!(show);
        // A file of its own, claimed as owner once the shared run's file
        // (and its queue pairs) are gone; closed at the end of the run.
        runs.push(gpunvme_run::run(sysfs, a, gpunvme::Mode::Raw)?.0);
        if show {
            print_run(a, runs.last().unwrap());
        }
        if let (Some(r), Some(s)) = (find(&runs, TARGET_RAW), find(&runs, TARGET_SHARED)) {
            owner = owner_ratios(r, s, show);
        }
    }
    if !show {
        let runtime = a.runtime.or(a.duration_ms.map(Duration::from_millis));
        let mut global = BTreeMap::new();
        global.insert("rw".to_string(), a.rw.name().to_string());
        global.insert("bs".to_string(), a.bs.to_string());
        global.insert("randseed".to_string(), a.randseed.to_string());
        let mut v = fio_json::header(&global);
        v.insert("jobs".into(), json!(fio_jobs(a, &runs)));
        let ours = json!({
            "block_size": a.bs,
            "rw": a.rw.name(),
            "rwmixread": (a.rw == Rw::Randrw).then_some(a.rwmixread),
            "pattern": match a.rw {
                Rw::Randread | Rw::Randwrite | Rw::Randrw => "random, bs aligned, uniform over the range",
                Rw::Read | Rw::Write => "sequential, each worker its own slice of the range",
            },
            "runtime_ms": if a.ops.is_none() { Some(runtime.unwrap_or(Duration::from_secs(1)).as_millis() as u64) } else { None },
            "duration_ms": if a.ops.is_none() { Some(runtime.unwrap_or(Duration::from_secs(1)).as_millis() as u64) } else { None },
            "ramp_time_ms": a.ramp_time.as_millis() as u64,
            "cpus_allowed": a.cpus_allowed,
            "ops": a.ops,
            "randseed": a.randseed,
            "runs": runs,
            "ratios_against": "kernel-poll",
            "ratios": ratios.unwrap_or_default(),
        });
        if let serde_json::Value::Object(o) = ours {
            v.extend(o);
        }
        if let Some(r) = ratios_irq {
            v.insert("ratios_kernel_irq".into(), json!(r));
        }
        if let Some(r) = ratios_pread {
            v.insert("ratios_kernel_pread".into(), json!(r));
        }
        if let Some(r) = ratios_fio {
            v.insert("ratios_fio".into(), json!(r));
        }
        if let Some(r) = gpu {
            v.insert("gpu_ratios".into(), json!(r));
        }
        if a.owner {
            v.insert("owner_ratios".into(), json!(owner));
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::Value::Object(v))?
        );
    }
    Ok(())
}
