//! Safe userspace API for the gpunvme kernel module.
//!
//! - [`Controller`]: an open `/dev/gpunvme<N>` node and its ioctls;
//! - [`Info`], [`Cap`], [`Version`]: decoded controller identity;
//! - [`sysfs`]: finding NVMe controllers and moving them between the kernel
//!   `nvme` driver and `gpunvme` (driver_override, never class matching).
//!
//! The ABI comes from `uapi/gpunvme.h` through [`gpunvme_sys`].

mod controller;
mod error;
mod regs;
pub mod sysfs;

pub use controller::{node_path, Controller, Info, Namespace, DEV_DIR};
pub use error::{Error, Result};
pub use gpunvme_sys as sys;
pub use regs::{Cap, Version};
