//! `gpunvme bench`: 4 KiB random reads, QD 1/8/32 x 1/4 queue pairs, on a
//! gpunvme controller (queue pairs polled from this process) and/or on a
//! kernel nvme block device with O_DIRECT: io_uring (raw syscalls, one
//! ring of QD reads per "queue pair" thread, completions by interrupt),
//! or with --pread (or when io_uring is unavailable) synchronous pread
//! from QD x queue-pairs threads. The gpunvme matrix runs on shared queue
//! pairs (shadow SQ and doorbells, mirrored CQ: a module thread per pair
//! checks each command and relays it). With --owner it is measured again
//! on raw queue pairs (the file claims owner mode: the real queues and
//! doorbells, nothing checked) and the two are compared.

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use gpunvme::{Controller, DmaBuffer, Mode, Prp, QueuePair, Sqe};
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;

use crate::blockio::Target;
use crate::uring::Uring;
use crate::Res;

const BS: usize = 4096;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub target: Target,
    /// Also (or, without BDF/--dev/--node, only) measure this kernel nvme block
    /// device, e.g. /dev/nvme0n1: O_DIRECT io_uring, one ring of QD reads
    /// per queue-pair thread.
    #[arg(long, value_name = "DEV")]
    pub block_device: Option<PathBuf>,
    /// On the block device use synchronous O_DIRECT pread from QD x
    /// queue-pairs threads instead of io_uring.
    #[arg(long)]
    pub pread: bool,
    /// Also measure the gpunvme matrix on raw queue pairs in owner mode
    /// (claims the controller: needs CAP_SYS_RAWIO, no lockdown, a
    /// translating IOMMU) and print/write shared/raw ratios: what the
    /// module's checking relay costs.
    #[arg(long)]
    pub owner: bool,
    /// Namespace ID on the gpunvme controller.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// Read randomly within the first MiB of the namespace/device (default:
    /// all of it, at most 1024).
    #[arg(long, value_name = "MIB")]
    pub range_mib: Option<u64>,
    /// Queue depths per queue pair (per thread group on the block device).
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 8, 32])]
    pub qd: Vec<u32>,
    /// Queue pair counts.
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 4])]
    pub qpairs: Vec<u32>,
    /// Length of each measurement in milliseconds.
    #[arg(
        long,
        default_value_t = 1000,
        value_name = "MS",
        conflicts_with = "ops"
    )]
    pub duration_ms: u64,
    /// Fixed number of reads per measurement instead of a duration.
    #[arg(long)]
    pub ops: Option<u64>,
    /// Random seed of the LBA sequence.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results (every run, and ratios when there is something to
    /// compare) as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize)]
struct Cell {
    qpairs: u32,
    qd: u32,
    ops: u64,
    seconds: f64,
    iops: f64,
    mib_per_s: f64,
    lat_us_p50: f64,
    lat_us_p99: f64,
    lat_us_mean: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<String>,
}

#[derive(Debug, Serialize)]
struct Run {
    target: &'static str,
    device: String,
    method: String,
    range_bytes: u64,
    results: Vec<Cell>,
}

#[derive(Clone, Copy)]
struct Stop {
    deadline: Option<Instant>,
    ops: Option<u64>,
}

impl Stop {
    fn done(&self, n: u64) -> bool {
        self.ops.is_some_and(|o| n >= o) || self.deadline.is_some_and(|d| Instant::now() >= d)
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn cell(qpairs: u32, qd: u32, mut lat_ns: Vec<u64>, secs: f64) -> Cell {
    lat_ns.sort_unstable();
    let ops = lat_ns.len() as u64;
    let mean = if ops == 0 {
        0.0
    } else {
        lat_ns.iter().sum::<u64>() as f64 / ops as f64 / 1000.0
    };
    Cell {
        qpairs,
        qd,
        ops,
        seconds: secs,
        iops: ops as f64 / secs.max(1e-9),
        mib_per_s: ops as f64 * BS as f64 / secs.max(1e-9) / (1 << 20) as f64,
        lat_us_p50: percentile(&lat_ns, 0.50),
        lat_us_p99: percentile(&lat_ns, 0.99),
        lat_us_mean: mean,
        skipped: None,
    }
}

fn skipped(qpairs: u32, qd: u32, why: String) -> Cell {
    let mut c = cell(qpairs, qd, Vec::new(), 0.0);
    c.iops = 0.0;
    c.skipped = Some(why);
    c
}

/// One queue pair's worker: keeps `qd` reads in flight over random 4 KiB
/// blocks until `stop`; returns per-read latencies in ns.
#[allow(clippy::too_many_arguments)]
fn gpunvme_worker(
    ctrl: &Arc<Controller>,
    nsid: u32,
    lba_size: u64,
    blocks4k: u64,
    qd: u32,
    stop: Stop,
    seed: u64,
    mode: Mode,
) -> gpunvme::Result<Vec<u64>> {
    let buf = DmaBuffer::new(ctrl, qd as usize)?;
    let mut qp = QueuePair::create_with(ctrl, qd + 1, mode)?;
    // One 4 KiB page per slot. The pair keeps the buffer from now on, and
    // releases it only once it is destroyed: nothing else can reach it.
    let pages = buf.dma_addrs().to_vec();
    qp.keep_until_destroyed(buf);
    let per = (BS as u64 / lba_size).max(1) as u32;
    let mut rng = Rng(seed | 1);
    let mut slot_of: BTreeMap<u16, (usize, Instant)> = BTreeMap::new();
    let mut lat = Vec::with_capacity(1 << 16);
    let mut issued = 0u64;
    let mk = |slot: usize, rng: &mut Rng| {
        let lba = (rng.next() % blocks4k) * BS as u64 / lba_size;
        Sqe::read(
            nsid,
            lba,
            per,
            Prp {
                prp1: pages[slot],
                prp2: 0,
            },
        )
    };
    for slot in 0..qd as usize {
        if stop.done(issued) {
            break;
        }
        // SAFETY: a read of one 4 KiB page (BS) of the buffer the pair
        // keeps until it is destroyed (above); no Rust code reaches it.
        let cid = unsafe { qp.push(mk(slot, &mut rng))? };
        slot_of.insert(cid, (slot, Instant::now()));
        issued += 1;
    }
    qp.ring();
    while qp.outstanding() > 0 {
        let c = qp.wait_any()?;
        let now = Instant::now();
        let (slot, t0) = slot_of.remove(&c.cid).expect("known cid");
        lat.push((now - t0).as_nanos() as u64);
        if !stop.done(issued) {
            // SAFETY: as for the push above; the slot's read completed.
            let cid = unsafe { qp.submit(mk(slot, &mut rng))? };
            slot_of.insert(cid, (slot, Instant::now()));
            issued += 1;
        }
    }
    drop(qp);
    Ok(lat)
}

/// Each worker's own LBA sequence: distinct per thread, fixed by --seed.
fn worker_seed(a: &BenchArgs, i: u64) -> u64 {
    a.seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i + 1)
}

/// One cell of the matrix: `workers` threads run `work(i)` at once; their
/// latencies merged into the cell, or the first worker's error.
fn run_cell<E: Send>(
    qpairs: u32,
    qd: u32,
    workers: usize,
    work: impl Fn(usize) -> Result<Vec<u64>, E> + Sync,
) -> Result<Cell, E> {
    let t = Instant::now();
    let lats: Vec<Result<Vec<u64>, E>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..workers)
            .map(|i| {
                let work = &work;
                s.spawn(move || work(i))
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bench worker panicked"))
            .collect()
    });
    let secs = t.elapsed().as_secs_f64();
    let mut all = Vec::new();
    for l in lats {
        all.extend(l?);
    }
    Ok(cell(qpairs, qd, all, secs))
}

fn stop_for(a: &BenchArgs, qpairs: u32) -> Stop {
    Stop {
        deadline: a
            .ops
            .is_none()
            .then(|| Instant::now() + Duration::from_millis(a.duration_ms)),
        ops: a.ops.map(|o| o.div_ceil(qpairs as u64)),
    }
}

fn range_bytes(a: &BenchArgs, capacity: u64) -> u64 {
    let want = a.range_mib.map_or(1024 << 20, |m| m << 20);
    want.min(capacity) / BS as u64 * BS as u64
}

const TARGET_SHARED: &str = "gpunvme";
const TARGET_RAW: &str = "gpunvme-raw";
const TARGET_KERNEL: &str = "kernel";

fn gpunvme_run(
    sysfs: &gpunvme::sysfs::Sysfs,
    a: &BenchArgs,
    mode: Mode,
) -> Result<Run, Box<dyn std::error::Error>> {
    let ctrl = Arc::new(crate::blockio::open(sysfs, &a.target)?);
    let mode = crate::blockio::mode_for(&ctrl, mode == Mode::Raw, "bench")?;
    let info = ctrl.info()?;
    let ns = *info
        .namespaces
        .iter()
        .find(|n| n.nsid == a.nsid)
        .ok_or_else(|| format!("no namespace {} on {}", a.nsid, info.bdf))?;
    let lba_size = ns.lba_size as u64;
    if lba_size > BS as u64 {
        return Err(format!("LBA size {lba_size} is larger than the 4 KiB read size").into());
    }
    let range = range_bytes(a, ns.capacity_bytes());
    let blocks4k = range / BS as u64;
    if blocks4k == 0 {
        return Err("namespace smaller than 4 KiB".into());
    }
    let mut results = Vec::new();
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            if qpairs > info.io_queues {
                results.push(skipped(
                    qpairs,
                    qd,
                    format!("controller granted {} I/O queues", info.io_queues),
                ));
                continue;
            }
            if qd + 1 > info.max_queue_entries || qd == 0 {
                results.push(skipped(
                    qpairs,
                    qd,
                    format!("max queue entries {}", info.max_queue_entries),
                ));
                continue;
            }
            let stop = stop_for(a, qpairs);
            results.push(run_cell(qpairs, qd, qpairs as usize, |i| {
                let seed = worker_seed(a, i as u64);
                gpunvme_worker(&ctrl, a.nsid, lba_size, blocks4k, qd, stop, seed, mode)
            })?);
        }
    }
    let (target, method) = match mode {
        Mode::Shared => (
            TARGET_SHARED,
            "gpunvme shared queue pairs mapped into this process, polled, one thread per queue \
             pair; a module thread per pair checks each SQE of the shadow SQ, copies it into the \
             real SQ, rings the doorbell and mirrors the CQEs",
        ),
        Mode::Raw => (
            TARGET_RAW,
            "gpunvme raw queue pairs (owner mode, GPUNVME_QPAIR_RAW) mapped into this process, \
             polled, one thread per queue pair: the real SQ, CQ and doorbells",
        ),
    };
    Ok(Run {
        target,
        device: info.bdf.clone(),
        method: method.into(),
        range_bytes: range,
        results,
    })
}

/// Anonymous page-aligned buffer of `n` blocks for O_DIRECT.
struct Aligned(*mut u8, usize);
impl Aligned {
    fn new(n: usize) -> std::io::Result<Self> {
        // SAFETY: fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * BS,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Aligned(p.cast(), n))
    }
    fn block(&self, i: usize) -> *mut u8 {
        assert!(i < self.1);
        // SAFETY: inside the mapping.
        unsafe { self.0.add(i * BS) }
    }
}
impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: our mapping of n blocks.
        unsafe { libc::munmap(self.0.cast(), self.1 * BS) };
    }
}

/// One io_uring "queue pair": `qd` O_DIRECT reads in flight.
#[allow(clippy::needless_range_loop)]
fn uring_worker(
    fd: i32,
    blocks4k: u64,
    qd: u32,
    stop: Stop,
    seed: u64,
) -> Result<Vec<u64>, String> {
    let mut ring = Uring::new(qd).map_err(|e| format!("io_uring_setup({qd}): {e}"))?;
    let buf = Aligned::new(qd as usize).map_err(|e| e.to_string())?;
    let mut rng = Rng(seed | 1);
    let mut t0 = vec![Instant::now(); qd as usize];
    let mut lat = Vec::with_capacity(1 << 14);
    let (mut issued, mut outstanding) = (0u64, 0u32);
    for slot in 0..qd as usize {
        if stop.done(issued) {
            break;
        }
        let off = (rng.next() % blocks4k) * BS as u64;
        t0[slot] = Instant::now();
        ring.push_read(fd, buf.block(slot), BS as u32, off, slot as u64);
        issued += 1;
        outstanding += 1;
    }
    let mut done = Vec::with_capacity(qd as usize);
    while outstanding > 0 {
        ring.enter(1).map_err(|e| format!("io_uring_enter: {e}"))?;
        done.clear();
        ring.reap(&mut done);
        let now = Instant::now();
        for &(slot, res) in &done {
            let slot = slot as usize;
            outstanding -= 1;
            if res != BS as i32 {
                return Err(format!(
                    "io_uring read returned {res} ({})",
                    std::io::Error::from_raw_os_error(-res)
                ));
            }
            lat.push((now - t0[slot]).as_nanos() as u64);
            if !stop.done(issued) {
                let off = (rng.next() % blocks4k) * BS as u64;
                t0[slot] = Instant::now();
                ring.push_read(fd, buf.block(slot), BS as u32, off, slot as u64);
                issued += 1;
                outstanding += 1;
            }
        }
    }
    Ok(lat)
}

fn kernel_run(a: &BenchArgs, dev: &PathBuf) -> Result<Run, Box<dyn std::error::Error>> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .map_err(|e| format!("cannot open {} with O_DIRECT: {e}", dev.display()))?;
    let fd = f.as_raw_fd();
    // SAFETY: plain lseek on our descriptor.
    let size = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    if size < BS as i64 {
        return Err(format!("{}: size {size}", dev.display()).into());
    }
    let range = range_bytes(a, size as u64);
    let blocks4k = range / BS as u64;
    let uring = if a.pread {
        Err("--pread".to_string())
    } else {
        Uring::new(1)
            .map(drop)
            .map_err(|e| format!("io_uring unavailable: {e}"))
    };
    let method = match &uring {
        Ok(()) => "kernel block device: O_DIRECT io_uring (raw syscalls), one ring of qd reads per queue-pair thread, interrupt completions".to_string(),
        Err(why) => format!("kernel block device: O_DIRECT pread, qd x qpairs synchronous threads ({why})"),
    };
    let mut results = Vec::new();
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            if uring.is_ok() {
                let stop = stop_for(a, qpairs);
                results.push(run_cell(qpairs, qd, qpairs as usize, |i| {
                    uring_worker(fd, blocks4k, qd, stop, worker_seed(a, i as u64))
                })?);
                continue;
            }
            let threads = qpairs * qd;
            let stop = Stop {
                deadline: a
                    .ops
                    .is_none()
                    .then(|| Instant::now() + Duration::from_millis(a.duration_ms)),
                ops: a.ops.map(|o| o.div_ceil(threads as u64)),
            };
            let failed = AtomicBool::new(false);
            results.push(run_cell(
                qpairs,
                qd,
                threads as usize,
                |i| -> Result<Vec<u64>, String> {
                    let buf = Aligned::new(1).map_err(|e| e.to_string())?;
                    let mut rng = Rng(worker_seed(a, i as u64) | 1);
                    let mut lat = Vec::with_capacity(1 << 14);
                    let mut n = 0u64;
                    while !stop.done(n) && !failed.load(Ordering::Relaxed) {
                        let off = (rng.next() % blocks4k) * BS as u64;
                        let t0 = Instant::now();
                        // SAFETY: buf is BS bytes, ours; fd is open.
                        let r =
                            unsafe { libc::pread(fd, buf.block(0).cast(), BS, off as libc::off_t) };
                        if r != BS as isize {
                            failed.store(true, Ordering::Relaxed);
                            return Err(format!(
                                "pread at {off}: {}",
                                std::io::Error::last_os_error()
                            ));
                        }
                        lat.push(t0.elapsed().as_nanos() as u64);
                        n += 1;
                    }
                    Ok(lat)
                },
            )?);
        }
    }
    drop(f);
    Ok(Run {
        target: TARGET_KERNEL,
        device: dev.display().to_string(),
        method,
        range_bytes: range,
        results,
    })
}

fn print_run(r: &Run) {
    println!(
        "{} {} ({}), range {} MiB, 4 KiB random reads",
        r.target,
        r.device,
        r.method,
        r.range_bytes >> 20
    );
    println!(
        "{:>7} {:>4} {:>10} {:>10} {:>9} {:>10} {:>10}",
        "QPAIRS", "QD", "OPS", "IOPS", "MiB/s", "P50_US", "P99_US"
    );
    for c in &r.results {
        match &c.skipped {
            Some(w) => println!("{:>7} {:>4} skipped: {w}", c.qpairs, c.qd),
            None => println!(
                "{:>7} {:>4} {:>10} {:>10.0} {:>9.1} {:>10.1} {:>10.1}",
                c.qpairs, c.qd, c.ops, c.iops, c.mib_per_s, c.lat_us_p50, c.lat_us_p99
            ),
        }
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

/// gpunvme (shared) vs kernel: IOPS gpunvme/kernel, p50 kernel/gpunvme.
fn kernel_ratios(g: &Run, k: &Run) -> Vec<serde_json::Value> {
    println!();
    println!(
        "{:>7} {:>4} {:>22} {:>22}",
        "QPAIRS", "QD", "IOPS gpunvme/kernel", "P50 kernel/gpunvme"
    );
    let mut out = Vec::new();
    for (cg, ck) in matched(g, k) {
        if ck.iops == 0.0 || cg.lat_us_p50 == 0.0 {
            continue;
        }
        let ri = cg.iops / ck.iops;
        let rl = ck.lat_us_p50 / cg.lat_us_p50;
        println!("{:>7} {:>4} {:>22.2} {:>22.2}", cg.qpairs, cg.qd, ri, rl);
        out.push(json!({
            "qpairs": cg.qpairs, "qd": cg.qd,
            "iops_gpunvme_over_kernel": ri,
            "p50_latency_kernel_over_gpunvme": rl,
        }));
    }
    out
}

/// Shared vs raw, every cell: IOPS, p50 and p99 latency, each shared/raw
/// (latency > 1 and IOPS < 1: the checking relay costs).
fn owner_ratios(raw: &Run, shared: &Run) -> Vec<serde_json::Value> {
    println!();
    println!(
        "shared/raw (latency above 1 and IOPS below 1: what the module's checking relay costs)"
    );
    println!(
        "{:>7} {:>4} {:>10} {:>10} {:>10}",
        "QPAIRS", "QD", "IOPS", "P50", "P99"
    );
    let mut out = Vec::new();
    for (cr, cs) in matched(raw, shared) {
        let ri = ratio(cs.iops, cr.iops);
        let r50 = ratio(cs.lat_us_p50, cr.lat_us_p50);
        let r99 = ratio(cs.lat_us_p99, cr.lat_us_p99);
        println!(
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

pub fn bench(sysfs: &gpunvme::sysfs::Sysfs, a: &BenchArgs) -> Res {
    if a.qd.iter().chain(&a.qpairs).any(|&v| v == 0) {
        return Err("--qd and --qpairs values must be at least 1".into());
    }
    let want_gpunvme = a.target.bdf.is_some()
        || a.target.dev.is_some()
        || a.target.node.is_some()
        || a.block_device.is_none()
        || a.owner;
    // JSON order: gpunvme (shared), kernel, then gpunvme-raw.
    let mut runs = Vec::new();
    if want_gpunvme {
        runs.push(gpunvme_run(sysfs, a, Mode::Shared)?);
        print_run(runs.last().unwrap());
    }
    if let Some(dev) = &a.block_device {
        if !runs.is_empty() {
            println!();
        }
        runs.push(kernel_run(a, dev)?);
        print_run(runs.last().unwrap());
    }
    let mut ratios = Vec::new();
    if let (Some(g), Some(k)) = (find(&runs, TARGET_SHARED), find(&runs, TARGET_KERNEL)) {
        ratios = kernel_ratios(g, k);
    }
    let mut owner = Vec::new();
    if a.owner {
        println!();
        // A file of its own, claimed as owner once the shared run's file
        // (and its queue pairs) are gone; closed at the end of the run.
        runs.push(gpunvme_run(sysfs, a, Mode::Raw)?);
        print_run(runs.last().unwrap());
        if let (Some(r), Some(s)) = (find(&runs, TARGET_RAW), find(&runs, TARGET_SHARED)) {
            owner = owner_ratios(r, s);
        }
    }
    if let Some(p) = &a.json {
        let mut v = json!({
            "block_size": BS,
            "pattern": "random reads, 4 KiB aligned, uniform over the range",
            "duration_ms": if a.ops.is_none() { Some(a.duration_ms) } else { None },
            "ops": a.ops,
            "seed": a.seed,
            "runs": runs,
            "ratios": ratios,
        });
        if a.owner {
            v["owner_ratios"] = json!(owner);
        }
        std::fs::write(p, serde_json::to_string_pretty(&v)? + "\n")
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    Ok(())
}
