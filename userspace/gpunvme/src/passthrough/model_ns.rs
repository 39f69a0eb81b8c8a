// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A model namespace: a submitter that stands in for the kernel, for the
//! unit tests (a RAM disk: reads and writes really move the bytes between
//! the disk and the registered buffers the checked command names) and for
//! the relay benchmark (no data: every command completes at once, so what
//! is timed is the relay's checking, translation and submission alone).
//!
//! It sees exactly what io_uring would: absolute LBAs, this process's
//! addresses, the data length; a log of every command that reached it lets
//! tests show what was refused never did.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::check::{opcode, Checked, Data};
use super::submit::{Done, Submit, Via};

/// The disk and what reached it; shared by every relay thread of a back
/// end (and the test that looks at it).
#[derive(Debug)]
pub struct ModelDisk {
    /// The blocks (empty: a namespace without data, for the benchmark).
    pub(crate) data: Mutex<Vec<u8>>,
    pub(crate) lba_size: usize,
    /// Blocks of the namespace (whatever `data` holds).
    pub(crate) blocks: u64,
    /// Commands that reached it.
    pub(crate) commands: AtomicU64,
    /// Every command that reached it, when logging.
    pub(crate) log: Mutex<Vec<Checked>>,
    logging: bool,
    /// Complete nothing while set (a namespace that stopped answering).
    pub(crate) stall: AtomicBool,
    /// Fail every command with this negated errno while non-zero (a
    /// fabrics target that went away).
    pub(crate) fail_errno: AtomicU64,
}

impl ModelDisk {
    /// A namespace of `blocks` blocks of `lba_size` bytes holding data
    /// (zeroed), with a log of commands.
    pub fn with_data(blocks: u64, lba_size: usize) -> Arc<Self> {
        Arc::new(ModelDisk {
            data: Mutex::new(vec![0; blocks as usize * lba_size]),
            lba_size,
            blocks,
            commands: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            logging: true,
            stall: AtomicBool::new(false),
            fail_errno: AtomicU64::new(0),
        })
    }

    /// A namespace of `blocks` blocks without data or log: every command
    /// completes successfully at once (the relay benchmark's).
    pub fn without_data(blocks: u64, lba_size: usize) -> Arc<Self> {
        Arc::new(ModelDisk {
            data: Mutex::new(Vec::new()),
            lba_size,
            blocks,
            commands: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            logging: false,
            stall: AtomicBool::new(false),
            fail_errno: AtomicU64::new(0),
        })
    }

    /// Commands that reached the namespace.
    pub fn commands(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }

    /// Stops completing commands (`true`) or resumes (`false`).
    pub fn set_stall(&self, on: bool) {
        self.stall.store(on, Ordering::Release);
    }

    /// Fails every command with `-errno` (0: succeed again).
    pub fn set_fail_errno(&self, errno: i32) {
        self.fail_errno.store(errno as u64, Ordering::Release);
    }

    /// `len` bytes at byte `off` of the disk.
    pub fn read_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        self.data.lock().unwrap()[off..off + len].to_vec()
    }

    /// The commands that reached it so far, as (opcode, absolute SLBA,
    /// blocks).
    pub fn log(&self) -> Vec<(u8, u64, u32)> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.opcode, c.slba, (c.cdw12 & 0xffff) + 1))
            .collect()
    }

    /// Runs one command; the status field (15 bits).
    fn execute(&self, c: &Checked, iov: &[libc::iovec]) -> u16 {
        if c.opcode == opcode::FLUSH {
            return 0;
        }
        let nlb = u64::from(c.cdw12 & 0xffff) + 1;
        if c.slba.checked_add(nlb).is_none_or(|e| e > self.blocks) {
            return 0x80; // what a controller would say; the relay never lets it get here
        }
        let mut disk = self.data.lock().unwrap();
        if disk.is_empty() {
            return 0;
        }
        let start = c.slba as usize * self.lba_size;
        let len = nlb as usize * self.lba_size;
        if c.opcode == opcode::WRITE_ZEROES {
            disk[start..start + len].fill(0);
            return 0;
        }
        let ranges: Vec<(u64, usize)> = match c.data {
            Data::None => return 0,
            Data::Contig { addr, .. } => vec![(addr, c.data_len as usize)],
            Data::Vectored { n } => iov[..n]
                .iter()
                .map(|v| (v.iov_base as u64, v.iov_len))
                .collect(),
        };
        let mut pos = start;
        for (addr, n) in ranges {
            let n = n.min(start + len - pos);
            // SAFETY: `addr` is this process's address of `n` bytes of a
            // registered payload buffer (the relay translated and checked
            // it), kept mapped and out of reach of Rust references while
            // the command is in flight: what the library promises the
            // kernel, and the property these tests exercise.
            unsafe {
                if c.opcode == opcode::READ {
                    std::ptr::copy_nonoverlapping(disk.as_ptr().add(pos), addr as *mut u8, n);
                } else {
                    std::ptr::copy_nonoverlapping(addr as *const u8, disk.as_mut_ptr().add(pos), n);
                }
            }
            pos += n;
        }
        0
    }
}

/// One relay thread's submitter onto a [`ModelDisk`].
pub(crate) struct ModelSubmit {
    disk: Arc<ModelDisk>,
    /// Pushed, not yet flushed; flushed, not yet reaped.
    queued: Vec<Done>,
    done: Vec<Done>,
    held: Vec<Done>,
    entries: usize,
}

impl ModelSubmit {
    pub(crate) fn new(disk: Arc<ModelDisk>, entries: usize) -> Self {
        ModelSubmit {
            disk,
            queued: Vec::with_capacity(entries),
            done: Vec::with_capacity(entries),
            held: Vec::new(),
            entries,
        }
    }
}

impl Submit for ModelSubmit {
    fn room(&mut self) -> usize {
        self.entries - self.queued.len()
    }

    fn push(&mut self, tag: u64, c: &Checked, iov: &[libc::iovec]) -> Via {
        self.disk.commands.fetch_add(1, Ordering::Relaxed);
        if self.disk.logging {
            self.disk.log.lock().unwrap().push(*c);
        }
        let errno = self.disk.fail_errno.load(Ordering::Acquire) as i32;
        let res = if errno != 0 {
            -errno
        } else {
            i32::from(self.disk.execute(c, iov))
        };
        self.queued.push(Done {
            tag,
            res,
            result: 0,
        });
        match c.data {
            Data::Vectored { .. } => Via::Vectored,
            _ => Via::Plain,
        }
    }

    fn flush(&mut self, _waiting: bool) -> std::io::Result<()> {
        self.done.append(&mut self.queued);
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Done>) {
        if self.disk.stall.load(Ordering::Acquire) {
            self.held.append(&mut self.done);
            return;
        }
        out.append(&mut self.held);
        out.append(&mut self.done);
    }
}
