// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Safe userspace API for the gpunvme kernel module.
//!
//! - [`Controller`]: an open `/dev/gpunvme<N>` (or namespace) node and its
//!   ioctls, owner mode included ([`Controller::claim_owner`]);
//! - [`Info`], [`Cap`], [`Version`], [`IommuMode`], [`Modes`]: decoded
//!   controller identity, IOMMU domain and the modes the caller may use;
//! - [`QueuePair`]: an I/O SQ/CQ pair mapped into this process (submit,
//!   doorbells, phase-tag polling with deadlines), shared (validated by the
//!   module, the default) or raw (owner mode): see [`Mode`]; a shared
//!   pair's [`PrpPool`] holds its PRP lists;
//! - [`DmaBuffer`]: host memory mapped for the controller's DMA;
//! - [`DmabufMapping`]: GPU memory (a dma-buf) mapped for the controller's
//!   DMA; [`QueuePair::export`] goes the other way;
//! - [`command`]: SQE builders (read, write, flush, write zeroes), CQE
//!   decoding and PRP construction ([`PrpListMem`]: where the lists go);
//!   [`Status`]: NVMe completion status;
//! - [`Io`]: LBA-range reads/writes of a namespace, split at MDTS (and at
//!   the module's shared-mode cap), PRP lists in the pair's pool or, on a
//!   raw pair, in a buffer of its own;
//! - [`GpuBuffer`]: GPU memory (a dma-buf) registered once for
//!   CPU-initiated transfers (cuFile's `cuFileBufRegister`), and
//!   [`Transfers`]: byte or block ranges between a namespace and such
//!   buffers (or host buffers), split at MDTS over several queue pairs,
//!   synchronous or asynchronous ([`Transfer`]: cuFile's and hipFile's
//!   job, from the CPU);
//! - [`pattern`]: deterministic per-LBA data for integrity checks;
//! - [`passthrough`]: the same queues on any namespace the kernel drives
//!   (the system's SSD, NVMe over Fabrics), relayed through io_uring NVMe
//!   passthrough, no module needed ([`Controller::open_passthrough`]);
//! - [`sysfs`]: finding NVMe controllers and moving them between the kernel
//!   `nvme` driver and `gpunvme` (driver_override, never class matching).
//!
//! The ABI comes from `uapi/gpunvme.h` through [`gpunvme_sys`].
//!
//! # Ownership, and what the controller may write
//!
//! Queue pairs, buffers and dma-buf mappings hold an
//! [`Arc`](std::sync::Arc) of their [`Controller`] (the open file they
//! belong to), so a controller and its queues can live in one struct.
//!
//! The safe API never lets the controller write memory Rust can read or
//! free: [`Io`] transfers take their [`DmaBuffer`] by value and give it
//! back only when every command on it completed; a wait that times out
//! poisons the [`QueuePair`], which then keeps the buffer until it is
//! destroyed (and, if the destroy fails, until the file is closed). Entry
//! points that take raw device addresses ([`QueuePair::push`],
//! [`QueuePair::submit`], [`QueuePair::execute`]) are `unsafe fn` with
//! their contract written down. Memory is unmapped from this process only
//! after the module said it no longer maps it (see [`DmaBuffer`]).
//!
//! A child of `fork()` (PyTorch's DataLoader workers) never touches its
//! parent's queues: everything fails there with [`Error::Forked`], and
//! drops leak (see [`Controller`]'s "Fork" section).
//!
//! Building a command needs no device:
//!
//! ```
//! use gpunvme::command::{opcode, prp_plan};
//! use gpunvme::Sqe;
//!
//! // 8 KiB at offset 0 of two pages: PRP1 and PRP2, no list.
//! let plan = prp_plan(&[0x10_0000, 0x20_0000], 0, 8192, &[]).unwrap();
//! let sqe = Sqe::read(1, 64, 16, plan.prp);
//! assert_eq!(sqe.opcode(), opcode::READ);
//! assert_eq!((sqe.prp().prp1, sqe.prp().prp2), (0x10_0000, 0x20_0000));
//! assert_eq!(sqe.describe(), "Read of 16 block(s) at LBA 64 (nsid 1)");
//! ```
//!
//! `examples/` has a device-free one (`prp_plan`) and one that writes and
//! verifies blocks on a controller (`write_read`).

pub mod command;
mod controller;
mod dma;
mod dmabuf;
mod error;
mod fork;
mod gpu_buffer;
mod io;
mod map;
#[cfg(test)]
mod model;
pub mod passthrough;
pub mod pattern;
mod qpair;
mod regs;
mod status;
pub mod sysfs;
mod transfers;

pub use command::{Cqe, Prp, PrpListMem, Sqe};
pub use controller::{
    namespace_node_path, node_path, Controller, Info, IommuMode, Modes, Namespace, DEV_DIR,
    SHARED_TRANSFER_CAP,
};
pub use dma::{DmaBuffer, PAGE_SIZE};
pub use dmabuf::{contiguous_base, DmabufMapping};
pub use error::{Error, Result};
pub use gpu_buffer::{GpuBuffer, GpuBufferCache};
pub use gpunvme_sys as sys;
pub use io::{Io, RangeCheck, TransferError, TransferResult, NO_MDTS_CAP};
pub use qpair::{Completion, ExportKind, Mode, PrpPool, QueueMemory, QueuePair, DEFAULT_TIMEOUT};
pub use regs::{Cap, Version};
pub use status::Status;
pub use transfers::{Buffer, Completed, Direction, Transfer, TransferOptions, Transfers};
