// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme._native`: the Python package's extension module (the public
//! API is re-exported by `python/gpunvme/__init__.py`; types in
//! `_native.pyi`). Built by maturin: `make python`.
//!
//! - [`device`]: `open()`, `Device`; [`namespace`]: `Namespace` and its
//!   transfers; [`lane`]: the queue pairs behind them; [`worker`]: async.
//! - Buffers: [`target`] (what an argument is), [`host_mem`] (buffer
//!   protocol), [`dlpack`], [`cai`], [`layout`], [`host_buffer`] (zero-copy
//!   host memory), [`registered`] and [`dmabuf_io`] (dma-bufs), [`gpu`]
//!   (GPU arrays).
//! - [`errors`]: exceptions with the NVMe status ([`status`]).

use pyo3::prelude::*;

mod array;
mod cai;
mod device;
mod dlpack;
mod dmabuf_io;
mod errors;
mod gpu;
mod host_buffer;
mod host_mem;
mod info;
mod lane;
mod layout;
mod namespace;
mod plan;
mod registered;
mod status;
mod target;
mod worker;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(device::open, m)?)?;
    m.add_function(wrap_pyfunction!(target::inspect_buffer, m)?)?;
    m.add_function(wrap_pyfunction!(errors::_sample_errors, m)?)?;
    m.add_function(wrap_pyfunction!(namespace::_check_plan, m)?)?;
    m.add_class::<device::Device>()?;
    m.add_class::<namespace::Namespace>()?;
    m.add_class::<host_buffer::HostBuffer>()?;
    m.add_class::<registered::RegisteredBuffer>()?;
    m.add_class::<info::Info>()?;
    m.add_class::<info::NamespaceInfo>()?;
    m.add_class::<status::NvmeStatus>()?;
    m.add_class::<target::BufferInfo>()?;
    m.add("GPU_EXPORT", gpu::exporter().is_some())?;
    Ok(())
}
