// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! What a transfer's buffer argument is, in the order tried:
//!
//! 1. a [`HostBuffer`] (zero copy) or a [`RegisteredBuffer`] (a dma-buf,
//!    zero copy);
//! 2. anything with the buffer protocol (bytearray, memoryview, NumPy,
//!    mmap): host memory, copied through a bounce buffer;
//! 3. `__cuda_array_interface__` (CuPy, Numba, PyTorch CUDA tensors):
//!    GPU memory;
//! 4. `__dlpack__` (PyTorch, JAX, CuPy, NumPy): host memory when DLPack
//!    says CPU or pinned host, GPU memory when it says CUDA or ROCm.
//!
//! The buffer protocol comes before DLPack because it is cheaper (no
//! capsule) and says whether the memory is writable.

use std::sync::Arc;

use gpunvme::DmabufMapping;
use pyo3::prelude::*;

use crate::array::ArrayMem;
use crate::errors::{fail, FResult, Kind};
use crate::host_buffer::{HostBuffer, Loan};
use crate::host_mem::{type_name, HostMem};
use crate::registered::RegisteredBuffer;
use crate::{cai, dlpack};

/// A buffer argument, resolved.
pub(crate) enum Arg<'py> {
    Host(HostMem),
    Pinned(Bound<'py, HostBuffer>),
    Registered(Bound<'py, RegisteredBuffer>),
    Gpu(ArrayMem),
}

/// Resolves `obj`; `write_into`: the transfer writes into it (a read).
pub(crate) fn classify<'py>(obj: &Bound<'py, PyAny>, write_into: bool) -> PyResult<Arg<'py>> {
    let py = obj.py();
    if let Ok(hb) = obj.cast::<HostBuffer>() {
        return Ok(Arg::Pinned(hb.clone()));
    }
    if let Ok(rb) = obj.cast::<RegisteredBuffer>() {
        return Ok(Arg::Registered(rb.clone()));
    }
    if let Some(h) = HostMem::from_buffer(obj, write_into)? {
        return Ok(Arg::Host(h));
    }
    let array = if let Some(iface) = obj.getattr_opt("__cuda_array_interface__")? {
        cai::from_interface(obj, &iface)?
    } else if obj.hasattr("__dlpack__")? {
        dlpack::from_dlpack(obj)?
    } else {
        return Err(fail(
            Kind::Unsupported,
            format!(
                "a {} is not a buffer: gpunvme takes objects with the buffer protocol \
                 (bytearray, memoryview, NumPy arrays), __cuda_array_interface__ or __dlpack__, \
                 and gpunvme.HostBuffer / RegisteredBuffer",
                type_name(obj)
            ),
        )
        .into_py(py));
    };
    if write_into && array.readonly {
        return Err(fail(
            Kind::ReadOnly,
            format!(
                "a read needs writable memory, and this {}'s {} says it is read-only",
                type_name(obj),
                array.protocol
            ),
        )
        .into_py(py));
    }
    Ok(if array.kind.is_host() {
        Arg::Host(HostMem::from_array(array))
    } else {
        Arg::Gpu(array)
    })
}

/// A resolved buffer that can cross to a worker thread.
pub(crate) enum Target {
    /// Host memory, copied through the lane's bounce buffer.
    Host(HostMem),
    /// A HostBuffer's DMA memory, lent for the transfer.
    Pinned(Loan),
    /// A dma-buf mapping and the byte offset of the caller's buffer in it.
    Dmabuf(Arc<DmabufMapping>, u64),
}

/// `gpunvme.BufferInfo`: what gpunvme sees of a buffer argument.
#[pyclass(module = "gpunvme", frozen, get_all)]
#[derive(Debug, Clone)]
pub(crate) struct BufferInfo {
    /// "host" (copied through a bounce buffer), "host_buffer" (a
    /// HostBuffer, zero copy), "dmabuf" (a RegisteredBuffer, zero copy) or
    /// "gpu" (device memory: registered on first use).
    kind: &'static str,
    /// "buffer", "dlpack", "cuda_array_interface" or "gpunvme".
    protocol: &'static str,
    /// "cpu", "cuda_host", "rocm_host", "cuda", "cuda_managed", "rocm"
    /// or "dmabuf".
    device: &'static str,
    /// The device ordinal (-1: not said).
    device_id: i32,
    /// Address of the first byte (0 for a dma-buf: not mapped here).
    address: u64,
    nbytes: u64,
    readonly: bool,
}

#[pymethods]
impl BufferInfo {
    fn __repr__(&self) -> String {
        format!(
            "BufferInfo(kind={:?}, protocol={:?}, device={:?}, device_id={}, address={:#x}, \
             nbytes={}, readonly={})",
            self.kind,
            self.protocol,
            self.device,
            self.device_id,
            self.address,
            self.nbytes,
            if self.readonly { "True" } else { "False" }
        )
    }
}

/// What a buffer argument is, without a device: how gpunvme would treat
/// ``obj`` in a transfer (``for_read``: one that writes into it).
///
/// Raises what a transfer would raise for it (UnsupportedBufferError,
/// ReadOnlyBufferError).
#[pyfunction]
#[pyo3(signature = (obj, *, for_read = false))]
pub(crate) fn inspect_buffer(obj: &Bound<'_, PyAny>, for_read: bool) -> PyResult<BufferInfo> {
    Ok(match classify(obj, for_read)? {
        Arg::Host(h) => BufferInfo {
            kind: "host",
            protocol: h.protocol(),
            device: h.device(),
            device_id: -1,
            address: h.addr(),
            nbytes: h.len() as u64,
            readonly: !h.writable(),
        },
        Arg::Pinned(hb) => BufferInfo {
            kind: "host_buffer",
            protocol: "gpunvme",
            device: "cpu",
            device_id: -1,
            address: 0,
            nbytes: hb.get().len() as u64,
            readonly: false,
        },
        Arg::Registered(rb) => BufferInfo {
            kind: "dmabuf",
            protocol: "gpunvme",
            device: "dmabuf",
            device_id: -1,
            address: 0,
            nbytes: rb.get().len(),
            readonly: false,
        },
        Arg::Gpu(a) => BufferInfo {
            kind: "gpu",
            protocol: a.protocol,
            device: a.kind.name(),
            device_id: a.device_id,
            address: a.ptr,
            nbytes: a.nbytes as u64,
            readonly: a.readonly,
        },
    })
}

/// The byte length of a resolved argument (for the plan).
pub(crate) fn arg_len(a: &Arg<'_>) -> FResult<usize> {
    Ok(match a {
        Arg::Host(h) => h.len(),
        Arg::Pinned(hb) => hb.get().len(),
        Arg::Registered(rb) => usize::try_from(rb.get().len())
            .map_err(|_| fail(Kind::Invalid, "a dma-buf larger than the address space"))?,
        Arg::Gpu(a) => a.nbytes,
    })
}
