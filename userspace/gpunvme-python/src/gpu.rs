// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! GPU arrays (DLPack or `__cuda_array_interface__` pointers into CUDA or
//! ROCm memory): registered once per allocation, as cuFile's buffer
//! registration is, and cached by the device.
//!
//! Registering needs the GPU runtime to export the allocation that holds
//! the pointer as a dma-buf ([`GpuExporter`]): `cuMemGetAddressRange` for
//! the allocation, `cuMemGetHandleForAddressRange` for the dma-buf (HIP:
//! `hipMemGetAddressRange`, `hsa_amd_portable_export_dmabuf`), in chunks
//! of at most `GPUNVME_MAX_MAP_BYTES` for large caching-allocator
//! segments. That is `gpunvme-gpu`'s part of issue 27 item 2 and is not in
//! the library yet (its `Gpu::export_dmabuf` exports its own
//! `DeviceMemory`, not a pointer another runtime allocated, and its
//! handles borrow the `Gpu`, which a Python object cannot), so
//! [`exporter`] has none and GPU arrays raise `GpuUnavailableError`; a
//! dma-buf from anywhere else works today through
//! `Device.register_dmabuf`. With the library's `GpuBufferCache` this
//! registry becomes that cache, keyed by the allocation's base.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};

use gpunvme::{Controller, DmabufMapping};
use pyo3::prelude::*;

use crate::array::{ArrayMem, DeviceKind};
use crate::errors::{fail, FResult, Kind};
use crate::registered::RegisteredBuffer;

/// A GPU allocation exported as a dma-buf.
#[allow(dead_code)] // Built by an exporter, which issue 27 item 2 adds.
pub(crate) struct Export {
    /// The dma-buf.
    pub(crate) fd: OwnedFd,
    /// Device address of the dma-buf's first byte (the allocation's base,
    /// or a chunk's).
    pub(crate) base: u64,
    /// Its size in bytes.
    pub(crate) len: u64,
}

/// What the package needs from the GPU runtime glue (`gpunvme-gpu`).
pub(crate) trait GpuExporter: Send + Sync {
    /// The dma-buf of the allocation (or chunk of one) that holds
    /// `[ptr, ptr + len)` on the device `kind`/`device_id` (-1: the one
    /// the pointer belongs to).
    fn export(
        &self,
        kind: DeviceKind,
        device_id: i32,
        ptr: u64,
        len: u64,
    ) -> Result<Export, String>;
}

/// The exporter of this build: none until `gpunvme-gpu` has one.
pub(crate) fn exporter() -> Option<&'static dyn GpuExporter> {
    None
}

/// The registrations of one device, looked up by device address.
#[derive(Default)]
pub(crate) struct Registry {
    entries: Mutex<Vec<Py<RegisteredBuffer>>>,
}

impl Registry {
    /// The registration that holds `a`, registering its allocation first
    /// if none does; and the byte offset of `a` in it.
    pub(crate) fn lookup_or_register(
        &self,
        py: Python<'_>,
        ctrl: &Arc<Controller>,
        a: &ArrayMem,
    ) -> FResult<(Py<RegisteredBuffer>, u64)> {
        let len = a.nbytes as u64;
        {
            let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            for r in entries.iter() {
                if let Some(off) = r.get().offset_of(a.ptr, len) {
                    return Ok((r.clone_ref(py), off));
                }
            }
        }
        let reg = self.register(py, ctrl, a)?;
        let off = reg.get().offset_of(a.ptr, len).ok_or_else(|| {
            fail(
                Kind::Invalid,
                "the exported dma-buf does not hold the array",
            )
        })?;
        Ok((reg, off))
    }

    /// Exports and maps the allocation holding `a`, and caches it.
    pub(crate) fn register(
        &self,
        py: Python<'_>,
        ctrl: &Arc<Controller>,
        a: &ArrayMem,
    ) -> FResult<Py<RegisteredBuffer>> {
        let Some(ex) = exporter() else {
            return Err(fail(
                Kind::GpuUnavailable,
                format!(
                    "{} memory at {:#x} ({} bytes, from {}): this build cannot export GPU memory as \
                     a dma-buf yet (issue 27 item 2, gpunvme-gpu); export it yourself and use \
                     Device.register_dmabuf(fd)",
                    a.kind.name(),
                    a.ptr,
                    a.nbytes,
                    a.protocol
                ),
            ));
        };
        let e = py
            .detach(|| ex.export(a.kind, a.device_id, a.ptr, a.nbytes as u64))
            .map_err(|m| fail(Kind::GpuUnavailable, m))?;
        let map = py.detach(|| DmabufMapping::new(ctrl, e.fd.as_fd(), e.len as usize))?;
        let reg = Py::new(py, RegisteredBuffer::new(map, Some(e.base)))
            .map_err(|err| fail(Kind::Invalid, err.to_string()))?;
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(reg.clone_ref(py));
        Ok(reg)
    }

    /// Forgets every registration (each unmaps when no transfer holds it).
    pub(crate) fn clear(&self) {
        let old = std::mem::take(&mut *self.entries.lock().unwrap_or_else(|p| p.into_inner()));
        for r in &old {
            r.get().close();
        }
    }
}
