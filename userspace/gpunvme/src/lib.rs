//! Safe userspace API for the gpunvme kernel module.
//!
//! - [`Controller`]: an open `/dev/gpunvme<N>` node and its ioctls;
//! - [`Info`], [`Cap`], [`Version`]: decoded controller identity;
//! - [`QueuePair`]: an I/O SQ/CQ pair mapped into this process (submit,
//!   doorbells, phase-tag polling with deadlines);
//! - [`DmaBuffer`]: host memory mapped for the controller's DMA;
//! - [`DmabufMapping`]: GPU memory (a dma-buf) mapped for the controller's
//!   DMA; [`QueuePair::export`] goes the other way;
//! - [`command`]: SQE builders (read, write, flush, write zeroes), CQE
//!   decoding and PRP construction; [`Status`]: NVMe completion status;
//! - [`Io`]: LBA-range reads/writes of a namespace, split at MDTS;
//! - [`pattern`]: deterministic per-LBA data for integrity checks;
//! - [`sysfs`]: finding NVMe controllers and moving them between the kernel
//!   `nvme` driver and `gpunvme` (driver_override, never class matching).
//!
//! The ABI comes from `uapi/gpunvme.h` through [`gpunvme_sys`].
//!
//! Lifetimes: queue pairs and buffers borrow their [`Controller`]. Drop
//! queue pairs before the buffers they DMA into where possible; see
//! [`DmaBuffer`] for what happens otherwise (it is handled).

pub mod command;
mod controller;
mod dma;
mod dmabuf;
mod error;
mod io;
mod map;
pub mod pattern;
mod qpair;
mod regs;
mod status;
pub mod sysfs;

pub use command::{Cqe, Prp, Sqe};
pub use controller::{node_path, Controller, Info, Namespace, DEV_DIR};
pub use dma::{DmaBuffer, PAGE_SIZE};
pub use dmabuf::{contiguous_base, DmabufMapping};
pub use error::{Error, Result};
pub use gpunvme_sys as sys;
pub use io::{Io, RangeCheck, NO_MDTS_CAP};
pub use qpair::{Completion, ExportKind, Mode, QueueMemory, QueuePair, DEFAULT_TIMEOUT};
pub use regs::{Cap, Version};
pub use status::Status;
