// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The passthrough back end: GPU queues on any NVMe namespace the kernel
//! drives (the system's SSD, an NVMe over Fabrics namespace of the
//! kernel's `nvmet` or any other target), relayed through io_uring NVMe
//! passthrough. No gpunvme module is needed.
//!
//! A GPU (or `kernels/hostrun`'s threads) drives a shadow pair laid out
//! exactly like a shared pair of the module: it writes SQEs into a shadow
//! SQ, rings doorbell cells in memory and polls a CQ mirror, with the same
//! device library calls (`kernels/include/gpunvme/queue.h`, `pqueue.h`).
//! A relay thread of this library takes each SQE, checks it (the module's
//! shared-mode rules: Read, Write, Flush, Write Zeroes; the one namespace;
//! PRP1, PRP2 and every PRP-list entry inside a registered buffer; plus an
//! LBA window), turns its PRPs into this process's addresses of the
//! registered buffers and submits it with `IORING_OP_URING_CMD` /
//! `NVME_URING_CMD_IO` on the namespace's `/dev/ngXnY`, then mirrors the
//! completion (the GPU's command ID, the shadow SQ head, the phase). A
//! refused SQE completes in the mirror with the module's status codes and
//! never reaches the kernel.
//!
//! The window is a partition (`WindowSpec::Partition`), explicit bounds or
//! the whole namespace; LBAs in commands are relative to it (LBA 0 is its
//! first block, as on a partition's block device). What it covers is
//! claimed `O_EXCL` for the back end's life, as `gpunvme bind` claims a
//! disk: a mounted or otherwise held partition is refused, naming its
//! user, and cannot be mounted meanwhile.
//!
//! Payload is host memory: a [`crate::DmaBuffer`] (or any page-aligned
//! memory, through the UAPI's MAP_HOST) that the GPU maps with its runtime
//! (`hipHostRegister`, `cuMemHostRegister`); GPU memory would need io_uring
//! to register a dma-buf, which no released kernel can ([`dmabuf_support`]).
//!
//! Use it through [`crate::Controller::open_passthrough`]: the controller
//! then answers the UAPI from this back end ([`Device`]), so queue pairs,
//! buffers and [`crate::Io`] work as on a module node.
//!
//! ```no_run
//! use std::sync::Arc;
//! use gpunvme::passthrough::{Options, WindowSpec};
//! use gpunvme::{pattern, Controller, DmaBuffer, Io};
//!
//! fn main() -> gpunvme::Result<()> {
//!     let opts = Options {
//!         window: WindowSpec::Partition("/dev/nvme0n1p3".into()),
//!         ..Options::default()
//!     };
//!     let ctrl = Arc::new(Controller::open_passthrough("/dev/ng0n1", &opts)?);
//!     let info = ctrl.info()?;
//!     let nsid = info.namespaces[0].nsid;
//!     let mut io = Io::new(&ctrl, &info, nsid, 32)?;
//!     let lba_size = info.namespaces[0].lba_size as usize;
//!     let mut buf = DmaBuffer::with_len(&ctrl, 8 * lba_size)?;
//!     pattern::fill(42, 0, lba_size, buf.as_mut_slice());
//!     let buf = io.write(0, 8, buf, 0)?; // LBA 0 of the partition
//!     let buf = io.read(0, 8, buf, 0)?;
//!     assert!(pattern::first_mismatch(42, 0, lba_size, buf.as_slice()).is_none());
//!     Ok(())
//! }
//! ```

mod addr;
pub mod capi;
mod check;
mod device;
mod list;
mod model_ns;
pub mod namespace;
mod relay;
pub mod relay_bench;
mod relay_thread;
mod shadow;
mod submit;
mod uring;
pub mod window;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::Arc;

pub use check::{Reject, Window};
pub use device::{Device, DRAIN_DEADLINE, MAX_DEPTH, MAX_PAIRS};
pub use list::{list, Candidate};
pub use model_ns::ModelDisk;
pub use namespace::{KernelController, KernelNamespace, Partition};
pub use relay::Counters;
pub use window::WindowSpec;

use crate::error::{Error, Result};
use crate::sysfs::Sysfs;

/// Whether completions are polled (`IORING_SETUP_IOPOLL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// Polled when every path to the namespace has poll queues.
    #[default]
    Auto,
    /// Polled; refused when a path has no poll queues.
    On,
    /// Interrupts.
    Off,
}

/// How to open a passthrough back end.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which blocks to serve (a partition the device path names is used
    /// when this is [`WindowSpec::Whole`]).
    pub window: WindowSpec,
    /// Polled or interrupt completions.
    pub poll: PollMode,
    /// Register payload buffers as io_uring fixed buffers.
    pub fixed_buffers: bool,
    /// `timeout_ms` of each command (0: the kernel's, `nvme_core.io_timeout`).
    /// A timeout aborts the command and may reset the controller.
    pub command_timeout_ms: u32,
    /// Relay threads at most (0: one per CPU this process may run on).
    pub relay_threads: usize,
    /// No relay threads: the threads of this process that wait on a pair
    /// ([`crate::QueuePair`]'s waits and reaps, so [`crate::Io`] too) run
    /// the relay themselves, one pass over every pair per poll, as
    /// io_uring without SQPOLL: one CPU for a CPU client instead of two.
    /// Only for CPU clients: nothing relays the commands of a GPU kernel
    /// (or anything else that polls the CQ mirror itself), which then
    /// waits until its deadline.
    pub relay_inline: bool,
    /// How long a relay thread keeps polling after its last progress
    /// before it backs off to sleeps of up to 1 ms (a GPU cannot wake it).
    /// Shorter saves CPU when idle; a spin shorter than a command's round
    /// trip adds up to a sleep to every QD1 command.
    pub relay_spin: std::time::Duration,
    /// Where sysfs, `/proc` and `/dev` are.
    pub sysfs: Sysfs,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            window: WindowSpec::Whole,
            poll: PollMode::Auto,
            fixed_buffers: true,
            command_timeout_ms: 0,
            relay_threads: 0,
            relay_inline: false,
            relay_spin: relay_thread::DEFAULT_SPIN,
            sysfs: Sysfs::new(),
        }
    }
}

/// CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Whether this kernel can do io_uring NVMe passthrough: a ring with
/// 128-byte SQEs and 32-byte CQEs that knows `IORING_OP_URING_CMD`.
pub fn uring_support() -> std::result::Result<(), String> {
    let ring =
        io_uring::IoUring::<io_uring::squeue::Entry128, io_uring::cqueue::Entry32>::builder()
            .build(2)
            .map_err(|e| {
                format!(
                "io_uring with 128-byte SQEs and 32-byte CQEs: {e} (needs Linux 5.19 or later with \
                 CONFIG_IO_URING, and io_uring not disabled by the kernel.io_uring_disabled sysctl)"
            )
            })?;
    let mut probe = io_uring::Probe::new();
    if ring.submitter().register_probe(&mut probe).is_ok()
        && !probe.is_supported(io_uring::opcode::UringCmd80::CODE)
    {
        return Err(
            "this kernel's io_uring has no IORING_OP_URING_CMD (Linux 5.19 or later)".into(),
        );
    }
    Ok(())
}

/// Why GPU memory cannot be the payload of passthrough commands here.
/// io_uring would have to register a dma-buf (the GPU's memory) as a fixed
/// buffer for the NVMe driver to map it; that is Pavel Begunkov's "dmabuf
/// read/write via io_uring" series, which no released kernel carries and
/// whose uAPI this library therefore cannot use. Payloads are host memory
/// the GPU maps (pinned), and the GPU kernels are the same.
pub fn dmabuf_support() -> std::result::Result<(), String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    Err(format!(
        "GPU memory as the payload of io_uring NVMe passthrough needs io_uring to register a \
         dma-buf as a fixed buffer (the \"dmabuf read/write via io_uring\" patch series), which \
         this kernel ({release}) does not have; use host memory the GPU maps (the default), or a \
         controller bound to the gpunvme module for GPU memory"
    ))
}

/// Opens the namespace `device` (`/dev/ngXnY`, `/dev/nvmeXnY` or a
/// partition) as a passthrough back end: resolves and claims the window,
/// opens the generic character device, checks io_uring.
pub fn open(device: &Path, opts: &Options) -> Result<Device> {
    let named = namespace::parse_name(device).ok_or_else(|| {
        Error::Invalid(format!(
            "{} is not a kernel NVMe namespace: expected /dev/ngXnY, /dev/nvmeXnY or a partition \
             /dev/nvmeXnYpZ",
            device.display()
        ))
    })?;
    let ns = namespace::describe(&opts.sysfs, &named.disk)?;
    uring_support().map_err(Error::Refused)?;
    let iopoll = match (opts.poll, &ns.poll) {
        (PollMode::Off, _) => false,
        (PollMode::Auto, p) => p.is_ok(),
        (PollMode::On, Ok(())) => true,
        (PollMode::On, Err(why)) => return Err(Error::Refused(format!("--poll on: {why}"))),
    };
    let resolved = window::resolve(&opts.sysfs, &ns, device, &opts.window)?;
    let ng = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&ns.ng)
        .map_err(|e| {
            let hint = match e.raw_os_error() {
                Some(libc::ENOENT) => {
                    " (no generic character device: a kernel with NVMe passthrough, Linux 5.19 or later, creates /dev/ngXnY)"
                }
                Some(libc::EACCES | libc::EPERM) => {
                    " (passthrough is gated by this node's file mode: run as root, or have a udev rule give your group read and write access)"
                }
                _ => "",
            };
            Error::Io {
                what: format!("open the namespace's generic character device{hint}"),
                path: ns.ng.clone(),
                source: e,
            }
        })?;
    let lim = check::Limits {
        nsid: ns.nsid,
        lba_shift: ns.lba_size.trailing_zeros(),
        window: resolved.window,
        max_transfer: check::max_transfer(ns.max_hw_bytes),
        qid: 0,
    };
    let ctrl = ns.controllers.first();
    let identity = device::Identity {
        name: ns
            .ng
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("ng")
            .to_string(),
        serial: ctrl.map(|c| c.serial.clone()).unwrap_or_default(),
        model: ctrl.map(|c| c.model.clone()).unwrap_or_default(),
        firmware: ctrl.map(|c| c.firmware.clone()).unwrap_or_default(),
    };
    let drivers = match (opts.relay_inline, opts.relay_threads) {
        (true, _) => relay_thread::Drivers::Inline,
        (false, 0) => relay_thread::Drivers::Threads(cpus()),
        (false, n) => relay_thread::Drivers::Threads(n),
    };
    Device::new(
        device.to_path_buf(),
        identity,
        lim,
        device::Target::Kernel {
            ng,
            iopoll,
            timeout_ms: opts.command_timeout_ms,
            fixed_buffers: opts.fixed_buffers,
        },
        drivers,
        opts.relay_spin,
        Some(resolved),
    )
    .map_err(|e| {
        Error::io(
            "create the passthrough back end's memory (memfd)",
            device,
            e,
        )
    })
}

/// A back end on a model namespace ([`ModelDisk`]): the whole relay (shadow
/// pairs, checks, translation, relay threads) with the model in place of
/// the kernel. `window` is in blocks of the disk; commands have at most
/// `max_transfer` bytes. For tests and benchmarks without a device.
pub fn open_model(
    disk: Arc<ModelDisk>,
    nsid: u32,
    window: Window,
    max_transfer: u64,
    relay_threads: usize,
) -> Result<Device> {
    open_model_with(
        disk,
        nsid,
        window,
        max_transfer,
        relay_thread::Drivers::Threads(relay_threads.max(1)),
    )
}

/// [`open_model`] with the relay inline (`Options::relay_inline`).
pub fn open_model_inline(
    disk: Arc<ModelDisk>,
    nsid: u32,
    window: Window,
    max_transfer: u64,
) -> Result<Device> {
    open_model_with(
        disk,
        nsid,
        window,
        max_transfer,
        relay_thread::Drivers::Inline,
    )
}

fn open_model_with(
    disk: Arc<ModelDisk>,
    nsid: u32,
    window: Window,
    max_transfer: u64,
    drivers: relay_thread::Drivers,
) -> Result<Device> {
    if window
        .start
        .checked_add(window.blocks)
        .is_none_or(|e| e > disk.blocks)
    {
        return Err(Error::Invalid(format!(
            "window {window:?} is not inside the model's {} blocks",
            disk.blocks
        )));
    }
    let lim = check::Limits {
        nsid,
        lba_shift: (disk.lba_size as u32).trailing_zeros(),
        window,
        max_transfer: check::max_transfer(max_transfer),
        qid: 0,
    };
    let identity = device::Identity {
        name: "model".into(),
        model: "gpunvme model namespace".into(),
        ..Default::default()
    };
    Device::new(
        "(model namespace)".into(),
        identity,
        lim,
        device::Target::Model(disk),
        drivers,
        relay_thread::DEFAULT_SPIN,
        None,
    )
    .map_err(|e| Error::io("create the model back end's memory (memfd)", "(memfd)", e))
}
