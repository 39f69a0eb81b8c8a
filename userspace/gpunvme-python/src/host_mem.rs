// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Host memory of a Python object: a buffer-protocol export (bytearray,
//! memoryview, NumPy arrays, mmap, array.array ...) or a CPU DLPack
//! tensor (a PyTorch CPU tensor), held for as long as a transfer needs it.
//!
//! The device never writes this memory: transfers go through a bounce
//! buffer of the library's ([`gpunvme::DmaBuffer`]) and are copied here
//! by the CPU (see `lane.rs`). So a timed-out transfer cannot leave DMA
//! running into memory Python may free.

use std::ffi::c_int;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::array::ArrayMem;
use crate::errors::{fail, Kind};

/// What keeps the memory alive.
enum Keep {
    /// A buffer-protocol export; released (with the GIL) on drop.
    View(Box<ffi::Py_buffer>),
    /// An object (a DLPack capsule) whose life is the memory's.
    Object(#[allow(dead_code)] Py<PyAny>),
}

/// A dense run of host memory of a Python object.
pub(crate) struct HostMem {
    ptr: *mut u8,
    len: usize,
    writable: bool,
    /// "buffer" or "dlpack".
    protocol: &'static str,
    /// "cpu", or DLPack's pinned-host kinds.
    device: &'static str,
    keep: Keep,
}

// SAFETY: the memory is kept alive by `keep` (an export or the owning
// object) until drop, wherever the value is; it is only reached through
// raw-pointer copies (no Rust references), and the export is released
// with the GIL held (Drop attaches).
unsafe impl Send for HostMem {}
// SAFETY: `&HostMem` only reads the pointer and length and copies through
// raw pointers (see `copy_in`/`copy_out`).
unsafe impl Sync for HostMem {}

impl std::fmt::Debug for HostMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HostMem({:p}, {} bytes, {})",
            self.ptr, self.len, self.protocol
        )
    }
}

impl Drop for HostMem {
    fn drop(&mut self) {
        if let Keep::View(view) = &mut self.keep {
            // SAFETY: the view was filled by a successful
            // PyObject_GetBuffer and is released once, with the GIL.
            Python::attach(|_| unsafe { ffi::PyBuffer_Release(&mut **view) });
        }
    }
}

impl HostMem {
    /// The object's buffer (C-contiguous; writable if `write_into`, for a
    /// read from the device). `None` if it has no buffer protocol.
    pub(crate) fn from_buffer(
        obj: &Bound<'_, PyAny>,
        write_into: bool,
    ) -> PyResult<Option<HostMem>> {
        let py = obj.py();
        // SAFETY: obj is a live object; the check only reads its type.
        if unsafe { ffi::PyObject_CheckBuffer(obj.as_ptr()) } == 0 {
            return Ok(None);
        }
        let mut flags: c_int = ffi::PyBUF_C_CONTIGUOUS;
        if write_into {
            flags |= ffi::PyBUF_WRITABLE;
        }
        let mut view = Box::new(ffi::Py_buffer::new());
        // SAFETY: a live object and a zeroed view to fill.
        if unsafe { ffi::PyObject_GetBuffer(obj.as_ptr(), &mut *view, flags) } != 0 {
            let why = PyErr::fetch(py);
            if write_into {
                // Read-only? Ask again without WRITABLE to tell.
                let mut ro = ffi::Py_buffer::new();
                // SAFETY: as above.
                if unsafe {
                    ffi::PyObject_GetBuffer(obj.as_ptr(), &mut ro, ffi::PyBUF_C_CONTIGUOUS)
                } == 0
                {
                    // SAFETY: filled by the successful call just made.
                    unsafe { ffi::PyBuffer_Release(&mut ro) };
                    return Err(fail(
                        Kind::ReadOnly,
                        format!(
                            "a read needs a writable buffer, and this {} is read-only ({}); \
                             pass a bytearray, a writable NumPy array or a gpunvme.HostBuffer",
                            type_name(obj),
                            why.value(py)
                        ),
                    )
                    .into_py(py));
                }
                let _ = PyErr::take(py);
            }
            return Err(fail(
                Kind::Unsupported,
                format!(
                    "the {}'s buffer cannot be used: {} (transfers need one C-contiguous run of bytes)",
                    type_name(obj),
                    why.value(py)
                ),
            )
            .into_py(py));
        }
        let len = usize::try_from(view.len).unwrap_or(0);
        Ok(Some(HostMem {
            ptr: view.buf.cast(),
            len,
            writable: view.readonly == 0,
            protocol: "buffer",
            device: "cpu",
            keep: Keep::View(view),
        }))
    }

    /// Host memory described by DLPack (a CPU or pinned-host tensor).
    pub(crate) fn from_array(a: ArrayMem) -> HostMem {
        debug_assert!(a.kind.is_host());
        HostMem {
            ptr: a.ptr as usize as *mut u8,
            len: a.nbytes,
            writable: !a.readonly,
            protocol: a.protocol,
            device: a.kind.name(),
            keep: Keep::Object(a.keep),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn writable(&self) -> bool {
        self.writable
    }

    pub(crate) fn addr(&self) -> u64 {
        self.ptr as u64
    }

    pub(crate) fn protocol(&self) -> &'static str {
        self.protocol
    }

    pub(crate) fn device(&self) -> &'static str {
        self.device
    }

    /// Copies `src` to byte `off` of the memory.
    ///
    /// Panics if it does not fit (callers check the plan first).
    pub(crate) fn copy_in(&self, off: usize, src: &[u8]) {
        assert!(self.writable, "copy into read-only memory");
        assert!(off.checked_add(src.len()).is_some_and(|e| e <= self.len));
        // SAFETY: the range lies inside the live export (checked), which
        // is writable; `src` is Rust memory, not the export, so they do
        // not overlap. Python code may touch the same bytes from another
        // thread meanwhile (the GIL is released): that is the program's
        // race, as for readinto(); no Rust reference to them exists.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.add(off), src.len()) };
    }

    /// Copies `dst.len()` bytes from byte `off` of the memory.
    ///
    /// Panics if it does not fit.
    pub(crate) fn copy_out(&self, off: usize, dst: &mut [u8]) {
        assert!(off.checked_add(dst.len()).is_some_and(|e| e <= self.len));
        // SAFETY: as for copy_in, reading.
        unsafe { ptr::copy_nonoverlapping(self.ptr.add(off), dst.as_mut_ptr(), dst.len()) };
    }
}

/// The Python type name of `obj`, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "object".into(), |n| n.to_string())
}
