// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme read | write | verify | pattern`: LBA ranges through a queue
//! pair of this process, with deterministic per-LBA patterns.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use gpunvme::{command::opcode, pattern, Controller, DmaBuffer, Info, Io, Mode, RangeCheck};

/// `--owner`: claims owner mode on `ctrl` (saying so on stderr) and picks
/// raw queue pairs; otherwise shared ones.
pub fn mode_for(ctrl: &Controller, owner: bool, who: &str) -> Result<Mode, gpunvme::Error> {
    if !owner {
        return Ok(Mode::Shared);
    }
    if ctrl.passthrough().is_some() {
        return Err(gpunvme::Error::Refused(format!(
            "{who}: --owner needs a controller bound to the gpunvme module; {} is served through \
             io_uring passthrough, whose every command the relay checks (there are no raw queues)",
            ctrl.path().display()
        )));
    }
    let iommu = ctrl.claim_owner()?;
    eprintln!(
        "{who}: owner of {} (raw queue pairs; IOMMU {iommu})",
        ctrl.path().display()
    );
    Ok(Mode::Raw)
}

use crate::gpu_mem::GpuMemory;
use crate::habits::{
    human_bytes, interrupted, parse_device, DataMismatch, Device, Interrupted, Output, Progress,
    Unit,
};
use crate::passthrough_args::{self, PassthroughArgs};
use crate::Res;

/// A block range of a namespace and how to move it.
#[derive(Args, Debug, Clone)]
pub struct Range {
    /// The controller: a PCI address (0000:01:00.0 or 01:00.0),
    /// /dev/gpunvmeN, gpunvmeN, or a namespace node /dev/gpunvmeNnM
    /// (shared mode, that namespace only); or a namespace the kernel
    /// drives, /dev/ngXnY, /dev/nvmeXnY or a partition /dev/nvmeXnYpZ,
    /// through io_uring passthrough (no module needed).
    #[arg(value_name = "DEVICE", value_parser = parse_device)]
    pub device: Device,
    /// Namespace ID (default: the node's namespace, else 1).
    #[arg(short = 'n', long = "namespace-id", value_name = "NSID")]
    pub nsid: Option<u32>,
    /// First logical block (the SLBA).
    #[arg(short = 's', long = "start-block", value_name = "LBA")]
    pub start_block: u64,
    /// Number of logical blocks, 1-based (8 is eight blocks; nvme-cli's
    /// --block-count is 0-based).
    #[arg(short = 'c', long = "block-count", value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub block_count: u64,
    /// Commands in flight on the queue pair used (it has QD + 1 entries).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..))]
    pub qd: u32,
    /// Skip the client-side check against the namespace capacity, so the
    /// controller's own status (e.g. LBA Out of Range) is what you get.
    #[arg(long)]
    pub no_range_check: bool,
    /// Largest command in blocks (default: the controller's MDTS), e.g. 1
    /// to push many commands through a small queue.
    #[arg(long, value_name = "N")]
    pub max_cmd_blocks: Option<u32>,
    /// Deadline of each command in milliseconds.
    #[arg(long, default_value_t = 5000, value_name = "MS")]
    pub timeout_ms: u64,
    /// Claim owner mode for this process's file and use a raw queue pair
    /// (the real SQ, CQ and doorbells; nothing checked). Needs
    /// CAP_SYS_RAWIO, no kernel lockdown, a translating IOMMU, and no
    /// other file using the controller. Default: a shared queue pair,
    /// whose every command the module checks before relaying it.
    #[arg(long)]
    pub owner: bool,
    /// Move the data through GPU memory, registered with the controller
    /// (a dma-buf import, once): the SSD reads into it or writes from it,
    /// and the CPU copies between it and the host. SOURCE: a GPU index
    /// (0, 1, ...: VRAM, HIP or CUDA), `udmabuf` (memfd pages standing in
    /// for VRAM, as the VM tests have no GPU) or `edu` (that udmabuf read
    /// back through the edu stand-in's DMA engine, tests/standin: slow,
    /// keep it to a few hundred KiB). Not on a kernel namespace: io_uring
    /// passthrough moves host memory only (the refusal says why).
    #[arg(long, value_name = "SOURCE", value_parser = crate::gpu_mem::parse_gpu_source)]
    pub gpu: Option<crate::gpu_mem::GpuSource>,
    #[command(flatten)]
    pub passthrough: PassthroughArgs,
}

impl Range {
    /// The namespace: -n, else the one the node is limited to, else 1.
    pub fn nsid(&self, info: &Info) -> u32 {
        self.nsid.or(info.node_nsid).unwrap_or(1)
    }
}

/// Bytes moved per batch of commands (a multiple of every LBA size).
const CHUNK_BYTES: usize = 4 << 20;

/// Opens `d` for I/O: a gpunvme node (see [`open`]), or a kernel
/// namespace through the passthrough back end with `pt`'s window.
pub fn open_io(
    sysfs: &gpunvme::sysfs::Sysfs,
    d: &Device,
    pt: &PassthroughArgs,
) -> Result<Controller, Box<dyn std::error::Error>> {
    let opts = pt.options(sysfs, d)?;
    match d {
        Device::Namespace(p) => {
            let c = Controller::open_passthrough(p, &opts)?;
            if let Some(l) = passthrough_args::describe_line(&c) {
                eprintln!("gpunvme: {l}");
            }
            Ok(c)
        }
        other => open(sysfs, other),
    }
}

/// Opens the gpunvme node of `d`: a node by path, or the node of the
/// controller at a PCI address (which must be bound to gpunvme).
pub fn open(
    sysfs: &gpunvme::sysfs::Sysfs,
    d: &Device,
) -> Result<Controller, Box<dyn std::error::Error>> {
    match d {
        Device::Namespace(p) => Err(format!(
            "{} is a namespace the kernel drives: read, write, verify, bench and gpu-run use it \
             through io_uring passthrough; `gpunvme list` shows what it can do",
            p.display()
        )
        .into()),
        Device::Node(p) => Ok(Controller::open(p)?),
        Device::KernelNvme(n) => Err(format!(
            "/dev/{n} is a kernel nvme controller, not gpunvme's: `gpunvme bind /dev/{n}` first"
        )
        .into()),
        Device::Bdf(bdf) => {
            let c = sysfs.controller(bdf)?;
            if c.driver.as_deref() != Some(gpunvme::sysfs::GPUNVME_DRIVER) {
                return Err(format!(
                    "{} is bound to {}, not gpunvme (run `gpunvme bind {}` first)",
                    c.bdf,
                    c.driver.as_deref().unwrap_or("no driver"),
                    c.bdf
                )
                .into());
            }
            let node = c.node.ok_or_else(|| {
                format!(
                    "{} is bound to gpunvme but no /dev/gpunvme* node matches it",
                    c.bdf
                )
            })?;
            Ok(Controller::open(node)?)
        }
    }
}

/// Where a session's data sits between the controller and the host.
enum Memory {
    /// A host DMA buffer: `None` only while a transfer has it, or after
    /// one timed out (the poisoned queue pair keeps it; the session ends).
    Host(Option<DmaBuffer>),
    /// GPU memory, and the host copy of what the last transfer moved.
    /// `lost`: a transfer timed out, so the memory may still be written:
    /// no more copies out of (or into) it.
    Gpu {
        mem: GpuMemory,
        staging: Vec<u8>,
        lost: bool,
    },
}

struct Session {
    io: Io,
    mem: Memory,
    buf_len: usize,
    lba_size: usize,
    check: RangeCheck,
}

const KEPT: &str = "the data buffer was kept by a timed-out queue pair";

impl Session {
    /// Moves `n` blocks at `lba` through the buffer's first bytes; the
    /// buffer comes back unless the controller may still use it.
    fn transfer(&mut self, op: u8, lba: u64, n: u64) -> Res {
        match &mut self.mem {
            Memory::Host(slot) => {
                let buf = slot.take().ok_or(KEPT)?;
                match self.io.transfer(op, lba, n, buf, 0, self.check) {
                    Ok(b) => {
                        *slot = Some(b);
                        Ok(())
                    }
                    Err(e) => {
                        *slot = e.buffer;
                        Err(e.error.into())
                    }
                }
            }
            Memory::Gpu { mem, lost, .. } => {
                if *lost {
                    return Err(KEPT.into());
                }
                self.io
                    .transfer_gpu(op, lba, n, mem.buffer(), 0, self.check)
                    .map_err(|e| {
                        // A timeout: the pair keeps the registration.
                        *lost = self.io.qpair().is_poisoned();
                        e.into()
                    })
            }
        }
    }

    /// The first `len` bytes the last read brought in.
    fn data(&mut self, len: usize) -> Result<&[u8], Box<dyn std::error::Error>> {
        match &mut self.mem {
            Memory::Host(b) => Ok(&b.as_ref().ok_or(KEPT)?.as_slice()[..len]),
            Memory::Gpu { mem, staging, lost } => {
                if *lost {
                    return Err(KEPT.into());
                }
                // SAFETY: no transfer runs (each completed before
                // `transfer` returned) and none timed out (`lost`).
                unsafe { mem.copy_out(0, &mut staging[..len])? };
                Ok(&staging[..len])
            }
        }
    }

    /// Lets `f` write the first `len` bytes the next write sends.
    fn fill(&mut self, len: usize, f: impl FnOnce(&mut [u8])) -> Res {
        match &mut self.mem {
            Memory::Host(b) => {
                f(&mut b.as_mut().ok_or(KEPT)?.as_mut_slice()[..len]);
                Ok(())
            }
            Memory::Gpu { mem, staging, lost } => {
                if *lost {
                    return Err(KEPT.into());
                }
                f(&mut staging[..len]);
                // SAFETY: as in `data`.
                unsafe { mem.copy_in(0, &staging[..len])? };
                Ok(())
            }
        }
    }

    /// What the data goes through, for the summary.
    fn memory(&self) -> Option<&str> {
        match &self.mem {
            Memory::Host(_) => None,
            Memory::Gpu { mem, .. } => Some(mem.describe()),
        }
    }
}

fn session(
    ctrl: &Arc<Controller>,
    info: &Info,
    r: &Range,
) -> Result<Session, Box<dyn std::error::Error>> {
    // Session's field order drops the Io (its queue pair) before the data
    // buffer: no deferred UNMAP.
    let mode = mode_for(ctrl, r.owner, "gpunvme")?;
    if r.gpu.is_some() && ctrl.passthrough().is_some() {
        // Before any GPU memory is allocated: the registration would fail.
        gpunvme::passthrough::dmabuf_support()
            .map_err(|why| gpunvme::Error::Refused(format!("--gpu: {why}")))?;
    }
    let mut io = Io::new_with(ctrl, info, r.nsid(info), r.qd.saturating_add(1), mode)?;
    io.set_timeout(std::time::Duration::from_millis(r.timeout_ms));
    if let Some(b) = r.max_cmd_blocks {
        io.limit_transfer_blocks(b);
    }
    let lba_size = io.namespace().lba_size as usize;
    let chunk = CHUNK_BYTES.max(lba_size);
    let want = (r.block_count as usize).saturating_mul(lba_size).min(chunk);
    let (mem, buf_len) = match &r.gpu {
        None => {
            let b = DmaBuffer::with_len(ctrl, want)?;
            let len = b.len();
            (Memory::Host(Some(b)), len)
        }
        Some(src) => {
            let mem = GpuMemory::new(ctrl, src, want)?;
            (
                Memory::Gpu {
                    mem,
                    staging: vec![0; want],
                    lost: false,
                },
                want,
            )
        }
    };
    Ok(Session {
        io,
        mem,
        buf_len,
        lba_size,
        check: if r.no_range_check {
            RangeCheck::Unchecked
        } else {
            RangeCheck::Checked
        },
    })
}

/// Runs `f(first_lba, blocks, session)` over the range in buffer-sized
/// chunks, with a progress bar on a terminal. Ctrl-C ends it between
/// chunks: each chunk's commands have all completed by then.
fn chunks(
    what: &str,
    s: &mut Session,
    r: &Range,
    mut f: impl FnMut(u64, u64, &mut Session) -> Res,
) -> Res {
    let per = (s.buf_len / s.lba_size) as u64;
    let mut bar = Progress::new(what, r.block_count * s.lba_size as u64, Unit::Bytes);
    let mut done = 0;
    while done < r.block_count {
        if interrupted() {
            bar.finish();
            return Err(Interrupted(format!(
                "{what} stopped after {done} of {} block(s) from LBA {} (nothing left in flight)",
                r.block_count, r.start_block
            ))
            .into());
        }
        let n = (r.block_count - done).min(per);
        f(r.start_block + done, n, s)?;
        done += n;
        bar.set(done * s.lba_size as u64);
    }
    bar.finish();
    Ok(())
}

/// The summary of a transfer: a line on stderr, or (-o json) a JSON
/// object on stdout with `extra` merged in.
fn summary(
    what: &str,
    info: &Info,
    r: &Range,
    s: &mut Session,
    t: Instant,
    out: Output,
    extra: serde_json::Value,
) -> Res {
    let lba_size = s.lba_size;
    let bytes = r.block_count * lba_size as u64;
    let (cmds, qid, depth, mode) = (
        s.io.commands(),
        s.io.qpair().qid(),
        s.io.qpair().depth(),
        s.io.qpair().mode(),
    );
    let secs = t.elapsed().as_secs_f64();
    let rate = bytes as f64 / secs.max(1e-9);
    if out.json() {
        let mut v = serde_json::json!({
            "command": what, "bdf": info.bdf, "namespace_id": r.nsid(info), "start_block": r.start_block,
            "block_count": r.block_count, "block_size": lba_size, "bytes": bytes, "commands": cmds,
            "mode": mode.to_string(), "qid": qid, "queue_entries": depth, "qd": depth - 1,
            "seconds": secs, "bytes_per_second": rate,
            "memory": s.memory().unwrap_or("host"),
        });
        if let (Some(v), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
            v.extend(e);
        }
        if let (Some(v), Some(serde_json::Value::Object(p))) = (
            v.as_object_mut(),
            passthrough_args::describe(s.io.qpair().controller()),
        ) {
            v.extend(p);
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let via = s
        .memory()
        .map(|m| format!(", through GPU memory: {m}"))
        .unwrap_or_default();
    eprintln!(
        "{what} {} block(s) of {lba_size} bytes at LBA {} of namespace {} on {} ({}, \
         {cmds} command(s) on {mode} qid {qid} of depth {depth}, {:.1} ms, {}/s{via})",
        r.block_count,
        r.start_block,
        r.nsid(info),
        info.bdf,
        human_bytes(bytes),
        secs * 1e3,
        human_bytes(rate as u64)
    );
    Ok(())
}

pub fn read(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, data: Option<PathBuf>, o: Output) -> Res {
    if o.json() && data.is_none() {
        return Err(
            "read -o json prints the summary on stdout: give the data a file with --data FILE"
                .into(),
        );
    }
    let out = data;
    let ctrl = Arc::new(open_io(sysfs, &r.device, &r.passthrough)?);
    let info = ctrl.info()?;
    let mut s = session(&ctrl, &info, r)?;
    let mut sink: Box<dyn std::io::Write> = match &out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let t = Instant::now();
    let mut pos = 0u64;
    chunks("read", &mut s, r, |lba, n, s| {
        s.transfer(opcode::READ, lba, n)?;
        let data = s.data(n as usize * s.lba_size)?;
        if out.is_some() {
            sink.write_all(data)?;
        } else {
            hexdump(&mut sink, pos, data)?;
        }
        pos += data.len() as u64;
        Ok(())
    })?;
    sink.flush()?;
    let file = out.as_ref().map(|p| p.display().to_string());
    summary(
        "read",
        &info,
        r,
        &mut s,
        t,
        o,
        serde_json::json!({ "data": file }),
    )
}

fn hexdump(w: &mut dyn std::io::Write, base: u64, data: &[u8]) -> std::io::Result<()> {
    for (i, line) in data.chunks(16).enumerate() {
        write!(w, "{:08x}:", base + (i * 16) as u64)?;
        for b in line {
            write!(w, " {b:02x}")?;
        }
        write!(w, "  ")?;
        for &b in line {
            let c = if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            };
            write!(w, "{c}")?;
        }
        writeln!(w)?;
    }
    Ok(())
}

pub fn write(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, seed: u64, o: Output) -> Res {
    let ctrl = Arc::new(open_io(sysfs, &r.device, &r.passthrough)?);
    let info = ctrl.info()?;
    let mut s = session(&ctrl, &info, r)?;
    let t = Instant::now();
    chunks("write", &mut s, r, |lba, n, s| {
        let len = n as usize * s.lba_size;
        let lba_size = s.lba_size;
        s.fill(len, |b| pattern::fill(seed, lba, lba_size, b))?;
        s.transfer(opcode::WRITE, lba, n)?;
        Ok(())
    })?;
    s.io.flush()?;
    let what = if o.json() {
        "write".to_string()
    } else {
        format!("wrote (pattern seed {seed})")
    };
    summary(
        &what,
        &info,
        r,
        &mut s,
        t,
        o,
        serde_json::json!({ "pattern": seed }),
    )
}

pub fn verify(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, seed: u64, o: Output) -> Res {
    let ctrl = Arc::new(open_io(sysfs, &r.device, &r.passthrough)?);
    let info = ctrl.info()?;
    let mut s = session(&ctrl, &info, r)?;
    let t = Instant::now();
    let mut bad = None;
    chunks("verify", &mut s, r, |lba, n, s| {
        let len = n as usize * s.lba_size;
        // Poison first so a transfer that moved nothing can't pass.
        s.fill(len, |b| b.fill(0xa5))?;
        s.transfer(opcode::READ, lba, n)?;
        let lba_size = s.lba_size;
        match pattern::first_mismatch(seed, lba, lba_size, s.data(len)?) {
            Some(m) => {
                let e = format!("verify failed (seed {seed}): first mismatch at {m}");
                bad = Some(m);
                Err(DataMismatch(e).into())
            }
            None => Ok(()),
        }
    })
    .or_else(|e| match (&bad, o.json()) {
        // -o json: the mismatch is a result, reported on stdout (exit 3).
        (Some(m), true) => {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({
                    "command": "verify", "bdf": info.bdf, "namespace_id": r.nsid(&info),
                    "start_block": r.start_block, "block_count": r.block_count, "pattern": seed,
                    "ok": false,
                    "first_mismatch": {"lba": m.lba, "offset": m.offset, "expected": m.expected,
                                       "got": m.got, "bad_bytes": m.bad_bytes,
                                       "found_offset": m.found_offset},
                }))?
            );
            Err(e)
        }
        _ => Err(e),
    })?;
    let what = if o.json() {
        "verify".to_string()
    } else {
        format!("verified (pattern seed {seed}, byte-exact)")
    };
    summary(
        &what,
        &info,
        r,
        &mut s,
        t,
        o,
        serde_json::json!({ "pattern": seed, "ok": true }),
    )?;
    if !o.json() {
        println!(
            "ok: {} block(s) at LBA {} match pattern seed {seed}",
            r.block_count, r.start_block
        );
    }
    Ok(())
}

/// `gpunvme pattern`: the expected bytes, to compare with other readers.
pub fn print_pattern(seed: u64, lba: u64, count: u64, block_size: u64) -> Res {
    if !(16..=1 << 16).contains(&block_size) || block_size % 8 != 0 {
        return Err(format!("--block-size {block_size}: expected e.g. 512 or 4k").into());
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut block = vec![0u8; block_size as usize];
    for i in 0..count {
        pattern::fill_block(seed, lba + i, &mut block);
        out.write_all(&block)?;
    }
    out.flush()?;
    Ok(())
}
