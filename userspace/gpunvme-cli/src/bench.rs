// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme bench`: 4 KiB random reads, QD 1/8/32 x 1/4 queue pairs, on a
//! gpunvme controller (queue pairs polled from this process) and/or on a
//! kernel nvme block device with O_DIRECT io_uring, one ring of QD reads per
//! "queue pair" thread, measured twice: with interrupt completions, and
//! polled (IORING_SETUP_IOPOLL on the driver's poll queues: nvme.ko's
//! `poll_queues`), which is what gpunvme does and so the fair baseline.
//! With --pread (or when io_uring is unavailable) synchronous pread from
//! QD x queue-pairs threads instead. The gpunvme matrix runs on shared
//! queue pairs (shadow SQ and doorbells, mirrored CQ: a module thread per
//! pair checks each command and relays it). With --owner it is measured
//! again on raw queue pairs (the file claims owner mode: the real queues
//! and doorbells, nothing checked) and the two are compared. Latencies go
//! into HDR histograms (1 ns to 60 s, 3 significant digits).

use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use gpunvme::{Controller, DmaBuffer, Mode, Prp, QueuePair, Sqe};
use hdrhistogram::Histogram;
use io_uring::{opcode, types, IoUring};
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;

use crate::habits::{
    human_count, human_us, interrupted, parse_count, parse_device, parse_size, Device, Interrupted,
    Output, Progress, Unit,
};
use crate::passthrough_args::PassthroughArgs;
use crate::Res;

pub(crate) const BS: usize = 4096;

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
    /// device, e.g. /dev/nvme0n1: O_DIRECT io_uring, one ring of QD reads
    /// per queue-pair thread, in each --kernel-mode.
    #[arg(long, value_name = "DEV")]
    pub block_device: Option<PathBuf>,
    /// With a kernel namespace as DEVICE, also run fio (fio's own
    /// io_uring_cmd engine, NVMe passthrough on the same /dev/ngXnY and
    /// blocks, polled like --kernel-mode poll when the namespace has poll
    /// queues) as a baseline nobody here wrote. FIO is the fio binary to
    /// run (default: fio on PATH).
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
    /// On the block device use synchronous O_DIRECT pread from QD x
    /// queue-pairs threads instead of io_uring.
    #[arg(long)]
    pub pread: bool,
    /// Also measure the gpunvme matrix on raw queue pairs in owner mode
    /// (claims the controller: needs CAP_SYS_RAWIO, no lockdown, a
    /// translating IOMMU) and print shared/raw ratios: what the module's
    /// checking relay costs.
    #[arg(long)]
    pub owner: bool,
    /// Namespace ID on the gpunvme controller (default: the node's
    /// namespace, else 1).
    #[arg(short = 'n', long = "namespace-id", value_name = "NSID")]
    pub nsid: Option<u32>,
    /// Read randomly within the first SIZE bytes of the namespace/device
    /// (4k, 16M, 1G, ...; default: all of it, at most 1 GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub range: Option<u64>,
    /// Queue depths (reads in flight) per queue pair, per thread group on
    /// the block device. A list: 1,8,32 or 1 8 32.
    #[arg(long, value_name = "N", value_delimiter = ',', num_args = 1.., value_parser = parse_count,
          default_values_t = [1u32, 8, 32])]
    pub qd: Vec<u32>,
    /// Queue pair counts. A list: 1,4 or 1 4.
    #[arg(long, value_name = "N", value_delimiter = ',', num_args = 1.., value_parser = parse_count,
          default_values_t = [1u32, 4])]
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
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Seed of the random LBA sequence (fio's randseed).
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

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Cell {
    pub(crate) qpairs: u32,
    pub(crate) qd: u32,
    pub(crate) ops: u64,
    pub(crate) seconds: f64,
    pub(crate) iops: f64,
    pub(crate) mib_per_s: f64,
    pub(crate) lat_us_p50: f64,
    pub(crate) lat_us_p99: f64,
    pub(crate) lat_us_p999: f64,
    pub(crate) lat_us_max: f64,
    pub(crate) lat_us_mean: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<String>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Run {
    pub(crate) target: &'static str,
    pub(crate) device: String,
    pub(crate) method: String,
    pub(crate) range_bytes: u64,
    pub(crate) results: Vec<Cell>,
}

#[derive(Clone, Copy)]
struct Stop {
    deadline: Option<Instant>,
    ops: Option<u64>,
}

impl Stop {
    /// Time to stop submitting: the count or deadline is reached, or
    /// Ctrl-C was pressed (what is in flight is still reaped).
    fn done(&self, n: u64) -> bool {
        self.ops.is_some_and(|o| n >= o)
            || self.deadline.is_some_and(|d| Instant::now() >= d)
            || interrupted()
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

/// Per-worker latencies in ns: an HDR histogram, 1 ns to 60 s at three
/// significant digits (a fixed ~200 KiB, whatever the run length).
struct Lat(Histogram<u64>);

impl Lat {
    fn new() -> Self {
        Lat(Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds"))
    }
    fn record(&mut self, d: Duration) {
        self.0.saturating_record((d.as_nanos() as u64).max(1));
    }
    fn merge(&mut self, other: &Lat) {
        self.0.add(&other.0).expect("histograms of one shape");
    }
    fn us_at(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            0.0
        } else {
            self.0.value_at_quantile(q) as f64 / 1000.0
        }
    }
}

fn cell(qpairs: u32, qd: u32, lat: &Lat, secs: f64) -> Cell {
    let ops = lat.0.len();
    let h = &lat.0;
    Cell {
        qpairs,
        qd,
        ops,
        seconds: secs,
        iops: ops as f64 / secs.max(1e-9),
        mib_per_s: ops as f64 * BS as f64 / secs.max(1e-9) / (1 << 20) as f64,
        lat_us_p50: lat.us_at(0.50),
        lat_us_p99: lat.us_at(0.99),
        lat_us_p999: lat.us_at(0.999),
        lat_us_max: if ops == 0 {
            0.0
        } else {
            h.max() as f64 / 1000.0
        },
        lat_us_mean: if ops == 0 { 0.0 } else { h.mean() / 1000.0 },
        skipped: None,
    }
}

pub(crate) fn skipped(qpairs: u32, qd: u32, why: String) -> Cell {
    let mut c = cell(qpairs, qd, &Lat::new(), 0.0);
    c.iops = 0.0;
    c.skipped = Some(why);
    c
}

/// One queue pair's worker: keeps `qd` reads in flight over random 4 KiB
/// blocks until `stop`; returns its latency histogram.
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
) -> gpunvme::Result<Lat> {
    let buf = DmaBuffer::new(ctrl, qd as usize)?;
    let mut qp = QueuePair::create_with(ctrl, qd + 1, mode)?;
    // One 4 KiB page per slot. The pair keeps the buffer from now on, and
    // releases it only once it is destroyed: nothing else can reach it.
    let pages = buf.dma_addrs().to_vec();
    qp.keep_until_destroyed(buf);
    let per = (BS as u64 / lba_size).max(1) as u32;
    let mut rng = Rng(seed | 1);
    let mut slot_of: BTreeMap<u16, (usize, Instant)> = BTreeMap::new();
    let mut lat = Lat::new();
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
        lat.record(now - t0);
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
pub(crate) fn worker_seed(a: &BenchArgs, i: u64) -> u64 {
    a.randseed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(i + 1)
}

/// One cell of the matrix: `workers` threads run `work(i)` at once; their
/// histograms merged into the cell, or the first worker's error.
fn run_cell<E: Send>(
    qpairs: u32,
    qd: u32,
    workers: usize,
    work: impl Fn(usize) -> Result<Lat, E> + Sync,
) -> Result<Cell, E> {
    let t = Instant::now();
    let lats: Vec<Result<Lat, E>> = std::thread::scope(|s| {
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
    let mut all = Lat::new();
    for l in lats {
        all.merge(&l?);
    }
    Ok(cell(qpairs, qd, &all, secs))
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
    let want = a.range.unwrap_or(1 << 30);
    want.min(capacity) / BS as u64 * BS as u64
}

const TARGET_SHARED: &str = "gpunvme";
const TARGET_PT: &str = "passthrough";
pub(crate) const TARGET_FIO: &str = "fio-io_uring_cmd";
const TARGET_RAW: &str = "gpunvme-raw";
const TARGET_KERNEL_IRQ: &str = "kernel-irq";
const TARGET_KERNEL_POLL: &str = "kernel-poll";
const TARGET_KERNEL_PREAD: &str = "kernel-pread";

/// The kernel's own path to the blocks a passthrough run read: the
/// window's block device and the byte offset of the window in it, and the
/// namespace's generic device with the window's byte offset there (fio).
struct Baseline {
    block_device: PathBuf,
    offset: u64,
    ng: PathBuf,
    ng_offset: u64,
    polled: bool,
}

fn gpunvme_run(
    sysfs: &gpunvme::sysfs::Sysfs,
    a: &BenchArgs,
    mode: Mode,
) -> Result<(Run, Option<Baseline>), Box<dyn std::error::Error>> {
    let dev = a
        .device
        .as_ref()
        .ok_or("bench --owner measures a gpunvme controller: name it (DEVICE) first")?;
    let ctrl = Arc::new(crate::blockio::open_io(sysfs, dev, &a.passthrough)?);
    let mode = crate::blockio::mode_for(&ctrl, mode == Mode::Raw, "bench")?;
    let info = ctrl.info()?;
    let nsid = a.nsid.or(info.node_nsid).unwrap_or(1);
    let ns = *info
        .namespaces
        .iter()
        .find(|n| n.nsid == nsid)
        .ok_or_else(|| format!("no namespace {nsid} on {}", info.bdf))?;
    let lba_size = ns.lba_size as u64;
    if lba_size > BS as u64 {
        return Err(format!("LBA size {lba_size} is larger than the 4 KiB read size").into());
    }
    let range = range_bytes(a, ns.capacity_bytes());
    let blocks4k = range / BS as u64;
    if blocks4k == 0 {
        return Err("namespace smaller than 4 KiB".into());
    }
    let pt = ctrl.passthrough().cloned();
    let baseline = pt.as_ref().and_then(|d| {
        let r = d.window_claim()?;
        let w = d.window();
        let (block_device, offset) = match &r.partition {
            Some(p) => (PathBuf::from("/dev").join(p), 0),
            None => (PathBuf::from("/dev").join(&r.disk), w.start * lba_size),
        };
        Some(Baseline {
            block_device,
            offset,
            ng: PathBuf::from(format!(
                "/dev/ng{}",
                r.disk.strip_prefix("nvme").unwrap_or_default()
            )),
            ng_offset: w.start * lba_size,
            polled: d.polled(),
        })
    });
    let mut results = Vec::new();
    let mut bar = Progress::new("bench", cells(a), Unit::Items);
    let name = if pt.is_some() {
        TARGET_PT
    } else {
        mode_name(mode)
    };
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&results)?;
            bar.set_what(format!("bench {name} {qpairs} qpair(s) QD {qd}"));
            bar.set(results.len() as u64);
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
                gpunvme_worker(&ctrl, nsid, lba_size, blocks4k, qd, stop, seed, mode)
            })?);
        }
    }
    check_interrupt(&results)?;
    let (target, method) = match (&pt, mode) {
        (Some(d), _) => (
            TARGET_PT,
            format!(
                "gpunvme passthrough back end on {} (no module): shadow queue pairs driven from \
                 this process, polled, one thread per queue pair; a relay thread of the library \
                 checks each SQE and submits it with io_uring NVME_URING_CMD_IO on the \
                 namespace's /dev/ngXnY ({}), mirroring the completions",
                ctrl.path().display(),
                if d.polled() {
                    "IORING_SETUP_IOPOLL on the driver's poll queues"
                } else {
                    "interrupt completions: the namespace has no poll queues"
                }
            ),
        ),
        (None, Mode::Shared) => (
            TARGET_SHARED,
            "gpunvme shared queue pairs mapped into this process, polled, one thread per queue \
             pair; a module thread per pair checks each SQE of the shadow SQ, copies it into the \
             real SQ, rings the doorbell and mirrors the CQEs"
                .to_string(),
        ),
        (None, Mode::Raw) => (
            TARGET_RAW,
            "gpunvme raw queue pairs (owner mode, GPUNVME_QPAIR_RAW) mapped into this process, \
             polled, one thread per queue pair: the real SQ, CQ and doorbells"
                .to_string(),
        ),
    };
    Ok((
        Run {
            target,
            device: if pt.is_some() {
                ctrl.path().display().to_string()
            } else {
                info.bdf.clone()
            },
            method,
            range_bytes: range,
            results,
        },
        baseline,
    ))
}

/// Cells of one run's matrix.
fn cells(a: &BenchArgs) -> u64 {
    (a.qd.len() * a.qpairs.len()) as u64
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Shared => TARGET_SHARED,
        Mode::Raw => TARGET_RAW,
    }
}

/// After Ctrl-C: the cell that was running has reaped its reads; stop.
pub(crate) fn check_interrupt(done: &[Cell]) -> Result<(), Interrupted> {
    if interrupted() {
        return Err(Interrupted(format!(
            "bench stopped after {} cell(s) (every read in flight was reaped)",
            done.len()
        )));
    }
    Ok(())
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

/// A ring of `entries` for one worker, polled (IOPOLL) or not.
fn ring(entries: u32, mode: KernelMode) -> std::io::Result<IoUring> {
    let mut b = IoUring::builder();
    if mode == KernelMode::Poll {
        b.setup_iopoll();
    }
    b.build(entries)
}

/// Queue one 4 KiB read of `buf`'s block `slot` at byte `off`, tagged `slot`.
fn push_read(
    ring: &mut IoUring,
    fd: i32,
    buf: &Aligned,
    slot: usize,
    off: u64,
) -> Result<(), String> {
    let e = opcode::Read::new(types::Fd(fd), buf.block(slot), BS as u32)
        .offset(off)
        .build()
        .user_data(slot as u64);
    // SAFETY: the read targets block `slot` of `buf`, which the worker
    // unmaps only after every read it queued has completed (on an early
    // return it leaks `buf`); each slot has at most one read in flight.
    unsafe { ring.submission().push(&e) }.map_err(|_| "io_uring submission queue full".to_string())
}

#[allow(clippy::needless_range_loop)]
/// One io_uring "queue pair": `qd` O_DIRECT reads in flight. In poll mode
/// `submit_and_wait` polls the driver's poll queue instead of sleeping.
fn uring_worker(
    fd: i32,
    base: u64,
    blocks4k: u64,
    qd: u32,
    stop: Stop,
    seed: u64,
    mode: KernelMode,
) -> Result<Lat, String> {
    // Dropped only once no read is in flight: an early return leaks it
    // rather than unmap memory the device may still write.
    let buf = std::mem::ManuallyDrop::new(Aligned::new(qd as usize).map_err(|e| e.to_string())?);
    let mut ring = ring(qd, mode).map_err(|e| format!("io_uring_setup({qd}): {e}"))?;
    let mut rng = Rng(seed | 1);
    let mut t0 = vec![Instant::now(); qd as usize];
    let mut lat = Lat::new();
    let (mut issued, mut outstanding) = (0u64, 0u32);
    let mut failure = None;
    for slot in 0..qd as usize {
        if stop.done(issued) {
            break;
        }
        let off = base + (rng.next() % blocks4k) * BS as u64;
        t0[slot] = Instant::now();
        push_read(&mut ring, fd, &buf, slot, off)?;
        issued += 1;
        outstanding += 1;
    }
    let mut done = Vec::with_capacity(qd as usize);
    while outstanding > 0 {
        if let Err(e) = ring.submit_and_wait(1) {
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(format!("io_uring_enter: {e}"));
        }
        done.clear();
        done.extend(
            ring.completion()
                .map(|c| (c.user_data() as usize, c.result())),
        );
        let now = Instant::now();
        for &(slot, res) in &done {
            outstanding -= 1;
            if res != BS as i32 {
                failure.get_or_insert_with(|| match res {
                    r if r == -libc::EOPNOTSUPP && mode == KernelMode::Poll => {
                        "polled reads refused (EOPNOTSUPP): the nvme driver has no poll queues; load it with poll_queues=N".to_string()
                    }
                    r if r < 0 => format!("io_uring read: {}", std::io::Error::from_raw_os_error(-r)),
                    r => format!("io_uring read returned {r} bytes"),
                });
                continue;
            }
            lat.record(now - t0[slot]);
            if failure.is_none() && !stop.done(issued) {
                let off = base + (rng.next() % blocks4k) * BS as u64;
                t0[slot] = Instant::now();
                push_read(&mut ring, fd, &buf, slot, off)?;
                issued += 1;
                outstanding += 1;
            }
        }
    }
    drop(ring);
    drop(std::mem::ManuallyDrop::into_inner(buf));
    failure.map_or(Ok(lat), Err)
}

/// The pread fallback: qd x qpairs synchronous threads.
fn pread_cell(
    a: &BenchArgs,
    fd: i32,
    base: u64,
    blocks4k: u64,
    qpairs: u32,
    qd: u32,
) -> Result<Cell, String> {
    let threads = qpairs * qd;
    let stop = Stop {
        deadline: a
            .ops
            .is_none()
            .then(|| Instant::now() + Duration::from_millis(a.duration_ms)),
        ops: a.ops.map(|o| o.div_ceil(threads as u64)),
    };
    let failed = AtomicBool::new(false);
    run_cell(qpairs, qd, threads as usize, |i| -> Result<Lat, String> {
        let buf = Aligned::new(1).map_err(|e| e.to_string())?;
        let mut rng = Rng(worker_seed(a, i as u64) | 1);
        let mut lat = Lat::new();
        let mut n = 0u64;
        while !stop.done(n) && !failed.load(Ordering::Relaxed) {
            let off = base + (rng.next() % blocks4k) * BS as u64;
            let t0 = Instant::now();
            // SAFETY: buf is BS bytes, ours; fd is open; pread is synchronous.
            let r = unsafe { libc::pread(fd, buf.block(0).cast(), BS, off as libc::off_t) };
            if r != BS as isize {
                failed.store(true, Ordering::Relaxed);
                return Err(format!(
                    "pread at {off}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            lat.record(t0.elapsed());
            n += 1;
        }
        Ok(lat)
    })
}

/// Why `dev` cannot do polled I/O, from its queue's `io_poll` attribute
/// (1 only when the driver has poll queues); None when it can.
fn poll_queues_missing(dev: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    use std::os::unix::fs::MetadataExt;
    let md = match std::fs::metadata(dev) {
        Ok(md) if md.file_type().is_block_device() => md,
        _ => return Some(format!("{} is not a block device", dev.display())),
    };
    let (maj, min) = (libc::major(md.rdev()), libc::minor(md.rdev()));
    // A partition's queue is its disk's: /sys/dev/block/M:m/queue or ../queue.
    let base = PathBuf::from(format!("/sys/dev/block/{maj}:{min}"));
    let attr = [base.join("queue/io_poll"), base.join("../queue/io_poll")]
        .into_iter()
        .find_map(|p| std::fs::read_to_string(p).ok());
    match attr.as_deref().map(str::trim) {
        Some("1") => None,
        Some(_) => Some(format!(
            "{} has no poll queues (queue/io_poll is 0): load nvme with poll_queues=N",
            dev.display()
        )),
        None => Some(format!("cannot read queue/io_poll for {}", dev.display())),
    }
}

/// The kernel driver's matrix in one completion mode (None: pread).
fn kernel_run(
    a: &BenchArgs,
    dev: &PathBuf,
    base: u64,
    mode: Option<KernelMode>,
) -> Result<Run, Box<dyn std::error::Error>> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .map_err(|e| format!("cannot open {} with O_DIRECT: {e}", dev.display()))?;
    let fd = f.as_raw_fd();
    // SAFETY: plain lseek on our descriptor.
    let size = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
    if size < BS as i64 || base % BS as u64 != 0 || base >= size as u64 {
        return Err(format!("{}: size {size}, window at byte {base}", dev.display()).into());
    }
    let range = range_bytes(a, size as u64 - base);
    let blocks4k = range / BS as u64;
    // Without poll queues IOPOLL reads would complete by interrupt: say so
    // and skip instead of publishing an interrupt figure as a polled one.
    let no_poll = (mode == Some(KernelMode::Poll))
        .then(|| poll_queues_missing(dev))
        .flatten();
    let (target, method) = match mode {
        Some(KernelMode::Irq) => (TARGET_KERNEL_IRQ, "kernel block device: O_DIRECT io_uring (io-uring crate), one ring of qd reads per queue-pair thread, interrupt completions"),
        Some(KernelMode::Poll) => (TARGET_KERNEL_POLL, "kernel block device: O_DIRECT io_uring with IORING_SETUP_IOPOLL (io-uring crate), one ring of qd reads per queue-pair thread, completions polled on the driver's poll queues"),
        None => (TARGET_KERNEL_PREAD, "kernel block device: O_DIRECT pread, qd x qpairs synchronous threads"),
    };
    let mut results = Vec::new();
    let mut bar = Progress::new("bench", cells(a), Unit::Items);
    for &qpairs in &a.qpairs {
        for &qd in &a.qd {
            check_interrupt(&results)?;
            bar.set_what(format!("bench {target} {qpairs} qpair(s) QD {qd}"));
            bar.set(results.len() as u64);
            if let Some(why) = &no_poll {
                results.push(skipped(qpairs, qd, why.clone()));
                continue;
            }
            let r = match mode {
                Some(m) => {
                    let stop = stop_for(a, qpairs);
                    run_cell(qpairs, qd, qpairs as usize, |i| {
                        uring_worker(fd, base, blocks4k, qd, stop, worker_seed(a, i as u64), m)
                    })
                }
                None => pread_cell(a, fd, base, blocks4k, qpairs, qd),
            };
            // A mode the driver cannot do is a skipped cell with its reason,
            // not a failed bench: the other modes still run.
            results.push(r.or_else(|why| {
                if why.contains("EOPNOTSUPP") || why.contains("io_uring_setup") {
                    Ok(skipped(qpairs, qd, why))
                } else {
                    Err(why)
                }
            })?);
        }
    }
    drop(f);
    check_interrupt(&results)?;
    Ok(Run {
        target,
        device: dev.display().to_string(),
        method: method.into(),
        range_bytes: range,
        results,
    })
}

fn print_run(r: &Run) {
    println!(
        "{} {} ({}), range {}, 4 KiB random reads",
        r.target,
        r.device,
        r.method,
        crate::habits::human_bytes(r.range_bytes)
    );
    println!(
        "{:>7} {:>4} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "QPAIRS", "QD", "OPS", "IOPS", "MiB/s", "P50", "P99", "P99.9", "MAX"
    );
    for c in &r.results {
        match &c.skipped {
            Some(w) => println!("{:>7} {:>4} skipped: {w}", c.qpairs, c.qd),
            None => println!(
                "{:>7} {:>4} {:>10} {:>9} {:>9.1} {:>9} {:>9} {:>9} {:>9}",
                c.qpairs,
                c.qd,
                c.ops,
                human_count(c.iops),
                c.mib_per_s,
                human_us(c.lat_us_p50),
                human_us(c.lat_us_p99),
                human_us(c.lat_us_p999),
                human_us(c.lat_us_max)
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

/// gpunvme (shared) vs one kernel run: IOPS gpunvme/kernel, p50 and p99
/// kernel/gpunvme (above 1: gpunvme is ahead).
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

pub fn bench(sysfs: &gpunvme::sysfs::Sysfs, a: &BenchArgs) -> Res {
    let show = !a.out.json();
    let want_gpunvme = a.device.is_some() || a.block_device.is_none() || a.owner;
    if want_gpunvme && a.device.is_none() {
        return Err("bench: name the gpunvme controller first (DEVICE), or measure a kernel device alone with --block-device".into());
    }
    // JSON order: gpunvme (shared) or passthrough, kernel modes, fio,
    // then gpunvme-raw.
    let mut runs = Vec::new();
    let mut baseline = None;
    if want_gpunvme {
        let (run, b) = gpunvme_run(sysfs, a, Mode::Shared)?;
        runs.push(run);
        baseline = b;
        if show {
            print_run(runs.last().unwrap());
        }
    }
    if a.fio.is_some() && baseline.is_none() {
        return Err(
            "bench --fio: name a kernel namespace (/dev/ngXnY, a partition) as DEVICE".into(),
        );
    }
    // A passthrough run is compared with the kernel's own path to the same
    // blocks: its window's block device, unless --block-device says.
    let kernel_dev = match (&a.block_device, &baseline) {
        (Some(d), _) => Some((d.clone(), 0)),
        (None, Some(b)) => Some((b.block_device.clone(), b.offset)),
        (None, None) => None,
    };
    if let Some((dev, base)) = &kernel_dev {
        let modes: Vec<Option<KernelMode>> = if a.pread {
            vec![None]
        } else {
            a.kernel_mode.iter().copied().map(Some).collect()
        };
        for m in modes {
            if !runs.is_empty() {
                outln!(show);
            }
            runs.push(kernel_run(a, dev, *base, m)?);
            if show {
                print_run(runs.last().unwrap());
            }
        }
    }
    if let (Some(fio), Some(b)) = (&a.fio, &baseline) {
        outln!(show);
        runs.push(crate::fio::run(
            a,
            fio,
            &b.ng,
            b.ng_offset,
            b.polled,
            runs[0].range_bytes,
        )?);
        if show {
            print_run(runs.last().unwrap());
        }
    }
    // Published ratios are against the polled kernel (both sides busy-poll);
    // the interrupt-mode ones are reported beside them.
    let ours = find(&runs, TARGET_SHARED).or_else(|| find(&runs, TARGET_PT));
    let ratio_vs = |target| match (ours, find(&runs, target)) {
        (Some(g), Some(k)) => Some(kernel_ratios(g, k, show)),
        _ => None,
    };
    let ratios = ratio_vs(TARGET_KERNEL_POLL);
    let ratios_irq = ratio_vs(TARGET_KERNEL_IRQ);
    let ratios_pread = ratio_vs(TARGET_KERNEL_PREAD);
    let ratios_fio = ratio_vs(TARGET_FIO);
    let mut owner = Vec::new();
    if a.owner {
        outln!(show);
        // A file of its own, claimed as owner once the shared run's file
        // (and its queue pairs) are gone; closed at the end of the run.
        runs.push(gpunvme_run(sysfs, a, Mode::Raw)?.0);
        if show {
            print_run(runs.last().unwrap());
        }
        if let (Some(r), Some(s)) = (find(&runs, TARGET_RAW), find(&runs, TARGET_SHARED)) {
            owner = owner_ratios(r, s, show);
        }
    }
    if !show {
        let mut v = json!({
            "block_size": BS,
            "pattern": "random reads, 4 KiB aligned, uniform over the range",
            "duration_ms": if a.ops.is_none() { Some(a.duration_ms) } else { None },
            "ops": a.ops,
            "randseed": a.randseed,
            "runs": runs,
            "ratios_against": "kernel-poll",
            "ratios": ratios.unwrap_or_default(),
        });
        if let Some(r) = ratios_irq {
            v["ratios_kernel_irq"] = json!(r);
        }
        if let Some(r) = ratios_pread {
            v["ratios_kernel_pread"] = json!(r);
        }
        if let Some(r) = ratios_fio {
            v["ratios_fio"] = json!(r);
        }
        if a.owner {
            v["owner_ratios"] = json!(owner);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}
