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
    let iommu = ctrl.claim_owner()?;
    eprintln!(
        "{who}: owner of {} (raw queue pairs; IOMMU {iommu})",
        ctrl.path().display()
    );
    Ok(Mode::Raw)
}

use crate::Res;

/// Which controller: a BDF bound to gpunvme, /dev/gpunvme<N>, or a node
/// by path.
#[derive(Args, Debug, Clone)]
pub struct Target {
    /// PCI address of a controller bound to gpunvme, e.g. 0000:01:00.0.
    pub bdf: Option<String>,
    /// Use /dev/gpunvme<N> (default: 0 when no BDF is given).
    #[arg(long, value_name = "N", conflicts_with = "bdf")]
    pub dev: Option<u32>,
    /// Use this device node, e.g. /dev/gpunvme0n1 (a namespace node:
    /// shared mode, that namespace only).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["bdf", "dev"])]
    pub node: Option<PathBuf>,
}

/// An LBA range of a namespace and how to move it.
#[derive(Args, Debug, Clone)]
pub struct Range {
    #[command(flatten)]
    pub target: Target,
    /// Namespace ID.
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long)]
    pub lba: u64,
    /// Number of logical blocks.
    #[arg(long, default_value_t = 1)]
    pub count: u64,
    /// Queue depth of the queue pair used (commands in flight: depth - 1).
    #[arg(long, default_value_t = 32)]
    pub depth: u32,
    /// Skip the client-side check against the namespace capacity, so the
    /// controller's own status (e.g. LBA Out of Range) is what you get.
    #[arg(long)]
    pub no_range_check: bool,
    /// Largest command in blocks (default: the controller's MDTS), e.g. 1
    /// to push many commands through a small queue.
    #[arg(long, value_name = "BLOCKS")]
    pub max_blocks: Option<u32>,
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
}

/// Bytes moved per batch of commands (a multiple of every LBA size).
const CHUNK_BYTES: usize = 4 << 20;

pub fn open(
    sysfs: &gpunvme::sysfs::Sysfs,
    t: &Target,
) -> Result<Controller, Box<dyn std::error::Error>> {
    if let Some(p) = &t.node {
        return Ok(Controller::open(p)?);
    }
    Ok(match &t.bdf {
        Some(bdf) => {
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
            Controller::open(node)?
        }
        None => Controller::open_index(t.dev.unwrap_or(0))?,
    })
}

struct Session {
    io: Io,
    /// The data buffer: `None` only while a transfer has it, or after one
    /// timed out (the poisoned queue pair keeps it; the session ends).
    buf: Option<DmaBuffer>,
    lba_size: usize,
    check: RangeCheck,
}

impl Session {
    /// Moves `n` blocks at `lba` through the buffer's first bytes; the
    /// buffer comes back unless the controller may still use it.
    fn transfer(&mut self, op: u8, lba: u64, n: u64) -> Res {
        let buf = self
            .buf
            .take()
            .ok_or("the data buffer was kept by a timed-out queue pair")?;
        match self.io.transfer(op, lba, n, buf, 0, self.check) {
            Ok(b) => {
                self.buf = Some(b);
                Ok(())
            }
            Err(e) => {
                self.buf = e.buffer;
                Err(e.error.into())
            }
        }
    }

    fn buf(&self) -> &DmaBuffer {
        self.buf
            .as_ref()
            .expect("the buffer is back between transfers")
    }

    fn buf_mut(&mut self) -> &mut DmaBuffer {
        self.buf
            .as_mut()
            .expect("the buffer is back between transfers")
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
    let mut io = Io::new_with(ctrl, info, r.nsid, r.depth, mode)?;
    io.set_timeout(std::time::Duration::from_millis(r.timeout_ms));
    if let Some(b) = r.max_blocks {
        io.limit_transfer_blocks(b);
    }
    let lba_size = io.namespace().lba_size as usize;
    let chunk = CHUNK_BYTES.max(lba_size);
    let want = (r.count as usize).saturating_mul(lba_size).min(chunk);
    let buf = DmaBuffer::with_len(ctrl, want)?;
    Ok(Session {
        io,
        buf: Some(buf),
        lba_size,
        check: if r.no_range_check {
            RangeCheck::Unchecked
        } else {
            RangeCheck::Checked
        },
    })
}

/// Runs `f(first_lba, blocks, session)` over the range in buffer-sized chunks.
fn chunks(s: &mut Session, r: &Range, mut f: impl FnMut(u64, u64, &mut Session) -> Res) -> Res {
    let per = (s.buf().len() / s.lba_size) as u64;
    let mut done = 0;
    while done < r.count {
        let n = (r.count - done).min(per);
        f(r.lba + done, n, s)?;
        done += n;
    }
    Ok(())
}

fn summary(what: &str, info: &Info, r: &Range, s: &mut Session, t: Instant) {
    let lba_size = s.lba_size;
    let bytes = r.count * lba_size as u64;
    let (cmds, qid, depth, mode) = (
        s.io.commands(),
        s.io.qpair().qid(),
        s.io.qpair().depth(),
        s.io.qpair().mode(),
    );
    let s = t.elapsed().as_secs_f64();
    eprintln!(
        "{what} {} block(s) of {lba_size} bytes at LBA {} of namespace {} on {} ({bytes} bytes, \
         {cmds} command(s) on {mode} qid {qid} of depth {depth}, {:.1} ms, {:.1} MiB/s)",
        r.count,
        r.lba,
        r.nsid,
        info.bdf,
        s * 1e3,
        bytes as f64 / s.max(1e-9) / (1 << 20) as f64
    );
}

pub fn read(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, out: Option<PathBuf>) -> Res {
    let ctrl = Arc::new(open(sysfs, &r.target)?);
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
    chunks(&mut s, r, |lba, n, s| {
        s.transfer(opcode::READ, lba, n)?;
        let data = &s.buf().as_slice()[..n as usize * s.lba_size];
        if out.is_some() {
            sink.write_all(data)?;
        } else {
            hexdump(&mut sink, pos, data)?;
        }
        pos += data.len() as u64;
        Ok(())
    })?;
    sink.flush()?;
    summary("read", &info, r, &mut s, t);
    Ok(())
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

pub fn write(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, seed: u64) -> Res {
    let ctrl = Arc::new(open(sysfs, &r.target)?);
    let info = ctrl.info()?;
    let mut s = session(&ctrl, &info, r)?;
    let t = Instant::now();
    chunks(&mut s, r, |lba, n, s| {
        let len = n as usize * s.lba_size;
        let lba_size = s.lba_size;
        pattern::fill(seed, lba, lba_size, &mut s.buf_mut().as_mut_slice()[..len]);
        s.transfer(opcode::WRITE, lba, n)?;
        Ok(())
    })?;
    s.io.flush()?;
    summary(&format!("wrote (pattern seed {seed})"), &info, r, &mut s, t);
    Ok(())
}

pub fn verify(sysfs: &gpunvme::sysfs::Sysfs, r: &Range, seed: u64) -> Res {
    let ctrl = Arc::new(open(sysfs, &r.target)?);
    let info = ctrl.info()?;
    let mut s = session(&ctrl, &info, r)?;
    let t = Instant::now();
    chunks(&mut s, r, |lba, n, s| {
        let len = n as usize * s.lba_size;
        // Poison first so a transfer that moved nothing can't pass.
        s.buf_mut().as_mut_slice()[..len].fill(0xa5);
        s.transfer(opcode::READ, lba, n)?;
        match pattern::first_mismatch(seed, lba, s.lba_size, &s.buf().as_slice()[..len]) {
            Some(m) => Err(format!("verify failed (seed {seed}): first mismatch at {m}").into()),
            None => Ok(()),
        }
    })?;
    summary(
        &format!("verified (pattern seed {seed}, byte-exact)"),
        &info,
        r,
        &mut s,
        t,
    );
    println!(
        "ok: {} block(s) at LBA {} match pattern seed {seed}",
        r.count, r.lba
    );
    Ok(())
}

/// `gpunvme pattern`: the expected bytes, to compare with other readers.
pub fn print_pattern(seed: u64, lba: u64, count: u64, lba_size: usize) -> Res {
    if lba_size < 16 || lba_size % 4 != 0 {
        return Err(format!("--lba-size {lba_size}: expected e.g. 512 or 4096").into());
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut block = vec![0u8; lba_size];
    for i in 0..count {
        pattern::fill_block(seed, lba + i, &mut block);
        out.write_all(&block)?;
    }
    out.flush()?;
    Ok(())
}
