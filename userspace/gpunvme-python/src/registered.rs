// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.RegisteredBuffer`: a dma-buf imported once by the module
//! (`GPUNVME_IOC_MAP_DMABUF`), the target of zero-copy transfers: GPU
//! memory exported as a dma-buf, or a udmabuf standing in for it.

use std::sync::{Arc, Mutex};

use gpunvme::DmabufMapping;
use pyo3::prelude::*;

use crate::errors::{fail, FResult, Kind};

/// A dma-buf registered with the device: transfers DMA into and out of it
/// directly.
///
/// Made by ``Device.register_dmabuf(fd)`` (any dma-buf: GPU memory a
/// runtime exported, a udmabuf) or ``Device.register(array)`` (GPU arrays,
/// where this build has a GPU runtime). Pass it as the buffer of a
/// transfer, with ``buf_offset`` for a place inside it. The module holds
/// its own reference to the dma-buf, so the descriptor may be closed.
/// ``close()`` unregisters it; the mapping goes once no transfer uses it
/// (and, while queue pairs of the device live, the module keeps it until
/// they are gone, since a command could still name it).
#[pyclass(module = "gpunvme", frozen)]
pub(crate) struct RegisteredBuffer {
    map: Mutex<Option<Arc<DmabufMapping>>>,
    len: u64,
    handle: u32,
    contiguous: bool,
    /// For a GPU array: the device address of the dma-buf's first byte.
    gpu_base: Option<u64>,
}

impl RegisteredBuffer {
    pub(crate) fn new(map: DmabufMapping, gpu_base: Option<u64>) -> Self {
        RegisteredBuffer {
            len: map.len(),
            handle: map.handle(),
            contiguous: map.contiguous_base().is_some(),
            map: Mutex::new(Some(Arc::new(map))),
            gpu_base,
        }
    }

    /// The mapping, for one transfer.
    pub(crate) fn mapping(&self) -> FResult<Arc<DmabufMapping>> {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| fail(Kind::Closed, "the RegisteredBuffer was closed"))
    }

    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Whether [ptr, ptr + len) of GPU memory lies inside this
    /// registration; its byte offset there.
    pub(crate) fn offset_of(&self, ptr: u64, len: u64) -> Option<u64> {
        let base = self.gpu_base?;
        let off = ptr.checked_sub(base)?;
        (off.checked_add(len)? <= self.len).then_some(off)
    }
}

#[pymethods]
impl RegisteredBuffer {
    /// Size of the dma-buf in bytes.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len as usize
    }

    /// The module's handle of the mapping.
    #[getter]
    fn handle(&self) -> u32 {
        self.handle
    }

    /// Whether the controller sees it as one run of addresses (an IOMMU
    /// gives that; PRP lists are needed either way).
    #[getter]
    fn contiguous(&self) -> bool {
        self.contiguous
    }

    /// The device address it starts at, for a registered GPU array; None
    /// for a dma-buf registered by descriptor.
    #[getter]
    fn gpu_address(&self) -> Option<u64> {
        self.gpu_base
    }

    /// Unregisters it (idempotent); transfers that hold it finish first.
    pub(crate) fn close(&self) {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn __repr__(&self) -> String {
        let open = self.map.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        format!(
            "<gpunvme.RegisteredBuffer handle {} of {} bytes{}>",
            self.handle,
            self.len,
            if open { "" } else { ", closed" }
        )
    }
}
