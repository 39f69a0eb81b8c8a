// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! GPU runtime glue, loaded at run time.
//!
//! HIP (`libamdhip64.so`, `.so.7`, `.so.6`, `.so.5`) or the CUDA driver API
//! (`libcuda.so.1`) is opened with `dlopen` (libloading), so this crate
//! builds and tests on machines without ROCm or CUDA; every GPU operation
//! there fails with an error that says which libraries were tried and why
//! each failed.
//!
//! - [`probe`]: which runtime and GPUs this machine has, and which doorbell
//!   mode each GPU can do: `direct` (the GPU can map the NVMe doorbell page
//!   and ring it itself: what a raw queue pair in owner mode needs),
//!   `bridge only` (shared queue pairs only: their doorbell cells, SQ and
//!   CQ mirror are memory, and the module's relay, the CPU bridge, rings
//!   the controller) or `none`. Shared pairs, the default, work with
//!   either.
//! - [`Gpu`]: one opened GPU: VRAM allocation (payload buffers through
//!   [`Gpu::alloc_payload`]: uncached on AMD, see [`PayloadMemory`]) and its export as a dma-buf
//!   (for `GPUNVME_IOC_MAP_DMABUF`), host memory mapped for the GPU, import
//!   of the module's doorbell/SQ/CQ dma-bufs into the GPU's address space
//!   ([`import`]: every route is tried in order and the report says which
//!   worked and why the others failed), code-object loading and kernel
//!   launch with a deadline.
//! - [`fine_grain`]: `HSA_FORCE_FINE_GRAIN_PCIE` for consumer RDNA, set
//!   before HIP loads.
//! - [`selftest`]: the round-trip self-test of queue memory before a
//!   launch: for every region a kernel will use, the GPU stores a value
//!   the CPU must see and the CPU one the GPU must see, through the very
//!   mappings, with deadlines (the protocol and its CPU half are the
//!   device library's `selftest.h`).
//! - [`code_object`]: which file of `make kernels` fits a GPU.
//! - [`kernel_abi`]: the argument blocks of the example kernels, pinned to
//!   the C++ layout by asserts on both sides.
//! - [`mod@array`]: a storage array for `gpunvme::array<T>` (array.h): the
//!   frames mapped into every controller, the queue pairs, the descriptor.
//!
//! Both modes need the gpunvme kernel module (it relays shared pairs and
//! creates raw ones).
//!
//! The optional `hip-sys` feature (link against ROCm at build time) is
//! declared but needs a ROCm installation; it is not built here.

#[cfg(feature = "hip-sys")]
compile_error!(
    "gpunvme-gpu: the `hip-sys` feature links against ROCm's libamdhip64 at build time and \
     needs a ROCm installation (hipcc, ROCM_PATH). It is not available on this build machine; \
     build without it: the default loads HIP or CUDA at run time with dlopen."
);

pub mod array;
pub mod code_object;
mod cuda;
mod driver;
mod error;
pub mod fine_grain;
mod gpu;
mod hip;
pub mod import;
pub mod kernel_abi;
pub mod mem_type;
mod probe;
mod runtime;
pub mod selftest;

pub use error::{GpuError, Result};
pub use gpu::{
    payload_memory, DeviceMemory, Gpu, HostMapped, Launch, LaunchConfig, Module, PayloadMemory,
    DROP_DEADLINE,
};
pub use probe::{
    classify, probe, probe_with, recommend_cq, Attempt, CqPlacement, DoorbellMode, GpuDevice,
    ProbeReport, RuntimeInfo, RuntimeKind, DEFAULT_LIBRARIES,
};
pub use runtime::find_gcn_arch;
