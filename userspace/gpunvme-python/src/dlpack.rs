// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! DLPack in: where an object's memory is (`__dlpack__` capsules, the
//! legacy `dltensor` and the versioned `dltensor_versioned` of DLPack 1.x).
//!
//! The capsule is not consumed (not renamed `used_dltensor`): kept alive
//! for the transfer, it keeps the producer's memory alive, and when it is
//! dropped the producer's capsule destructor calls the deleter, as the
//! DLPack Python specification has it for a capsule nobody consumed.

use std::ffi::{c_char, c_void, CStr};

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::array::{ArrayMem, DeviceKind};
use crate::errors::{fail, Kind};
use crate::layout::dense_bytes;

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *const i64,
    strides: *const i64,
    byte_offset: u64,
}

type Deleter = Option<unsafe extern "C" fn(*mut c_void)>;

/// `DLManagedTensor` (the `dltensor` capsule).
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Deleter,
}

#[repr(C)]
struct DlPackVersion {
    major: u32,
    minor: u32,
}

/// `DLManagedTensorVersioned` (the `dltensor_versioned` capsule).
#[repr(C)]
struct DlManagedTensorVersioned {
    version: DlPackVersion,
    manager_ctx: *mut c_void,
    deleter: Deleter,
    flags: u64,
    dl_tensor: DlTensor,
}

const FLAG_READ_ONLY: u64 = 1 << 0;
const LEGACY: &CStr = c"dltensor";
const VERSIONED: &CStr = c"dltensor_versioned";
/// The newest DLPack this reader knows (the layout is the same for all 1.x).
const MAX_VERSION: (u32, u32) = (1, 1);
/// Dimensions beyond this are refused as a corrupt tensor.
const MAX_NDIM: i32 = 64;

/// What DLPack's `device_type` means for a transfer.
fn device_kind(device_type: i32) -> Option<DeviceKind> {
    Some(match device_type {
        1 => DeviceKind::Cpu,
        3 => DeviceKind::CudaHost,
        11 => DeviceKind::RocmHost,
        2 => DeviceKind::Cuda,
        10 => DeviceKind::Rocm,
        13 => DeviceKind::CudaManaged,
        _ => return None,
    })
}

/// Calls `obj.__dlpack__()`, asking for a versioned capsule where the
/// producer can make one (producers older than DLPack 1.0 take no
/// `max_version` and raise TypeError).
fn capsule<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let kw = PyDict::new(py);
    kw.set_item("max_version", MAX_VERSION)?;
    match obj.call_method("__dlpack__", (), Some(&kw)) {
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__"),
        r => r,
    }
}

/// The memory of an object that speaks DLPack.
pub(crate) fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<ArrayMem> {
    let cap = capsule(obj)?;
    read_capsule(&cap).map_err(|f| f.into_py(obj.py()))
}

/// The memory a DLPack capsule describes; the capsule is kept in the result.
fn read_capsule(cap: &Bound<'_, PyAny>) -> Result<ArrayMem, crate::errors::Fail> {
    let py = cap.py();
    let raw = cap.as_ptr();
    // SAFETY: PyCapsule_CheckExact only reads the type of a live object.
    if unsafe { pyo3::ffi::PyCapsule_CheckExact(raw) } == 0 {
        return Err(fail(
            Kind::Unsupported,
            format!(
                "__dlpack__() returned a {}, not a PyCapsule",
                cap.get_type()
                    .name()
                    .map_or_else(|_| "?".into(), |n| n.to_string())
            ),
        ));
    }
    // SAFETY: `raw` is a live capsule (checked above); the name it returns
    // lives as long as the capsule, which we hold.
    let name_ptr: *const c_char = unsafe { pyo3::ffi::PyCapsule_GetName(raw) };
    if name_ptr.is_null() {
        // The capsule has no name: clear the (possible) exception.
        let _ = PyErr::take(py);
        return Err(fail(Kind::Unsupported, "a DLPack capsule without a name"));
    }
    // SAFETY: non-null, NUL-terminated (a capsule name is a C string).
    let name = unsafe { CStr::from_ptr(name_ptr) };
    // SAFETY: the name matches the capsule's, so GetPointer returns its
    // pointer; the producer keeps what it points to alive while the
    // capsule is unconsumed and alive (we hold it).
    let (tensor, readonly): (&DlTensor, bool) = if name == VERSIONED {
        let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(raw, VERSIONED.as_ptr()) }
            as *const DlManagedTensorVersioned;
        if p.is_null() {
            let _ = PyErr::take(py);
            return Err(fail(
                Kind::Unsupported,
                "an empty dltensor_versioned capsule",
            ));
        }
        // SAFETY: non-null, a DLManagedTensorVersioned by the capsule's name.
        let m = unsafe { &*p };
        if m.version.major != MAX_VERSION.0 {
            return Err(fail(
                Kind::Unsupported,
                format!(
                    "DLPack {}.{} (this reader knows 1.x)",
                    m.version.major, m.version.minor
                ),
            ));
        }
        (&m.dl_tensor, m.flags & FLAG_READ_ONLY != 0)
    } else if name == LEGACY {
        let p = unsafe { pyo3::ffi::PyCapsule_GetPointer(raw, LEGACY.as_ptr()) }
            as *const DlManagedTensor;
        if p.is_null() {
            let _ = PyErr::take(py);
            return Err(fail(Kind::Unsupported, "an empty dltensor capsule"));
        }
        // SAFETY: non-null, a DLManagedTensor by the capsule's name.
        // Legacy DLPack has no read-only flag; producers refuse to export
        // read-only memory through it (NumPy raises BufferError).
        (unsafe { &(*p).dl_tensor }, false)
    } else {
        return Err(fail(
            Kind::Unsupported,
            format!(
                "a capsule named {:?}, not a DLPack tensor (an already consumed one is \
                 \"used_dltensor\": call __dlpack__ again)",
                name.to_string_lossy()
            ),
        ));
    };
    let t = tensor;
    let Some(kind) = device_kind(t.device.device_type) else {
        return Err(fail(
            Kind::Unsupported,
            format!(
                "DLPack device type {} (gpunvme takes CPU, CUDA host, ROCm host, CUDA, CUDA \
                 managed and ROCm memory)",
                t.device.device_type
            ),
        ));
    };
    if !(0..=MAX_NDIM).contains(&t.ndim) {
        return Err(fail(
            Kind::Unsupported,
            format!("a DLPack tensor of {} dimensions", t.ndim),
        ));
    }
    let ndim = t.ndim as usize;
    if ndim > 0 && t.shape.is_null() {
        return Err(fail(Kind::Unsupported, "a DLPack tensor without a shape"));
    }
    let bits = t.dtype.bits as usize * t.dtype.lanes as usize;
    if bits == 0 || bits % 8 != 0 {
        return Err(fail(
            Kind::Unsupported,
            format!(
                "DLPack dtype (code {}, {} bits, {} lanes) is not a whole number of bytes",
                t.dtype.code, t.dtype.bits, t.dtype.lanes
            ),
        ));
    }
    let itemsize = bits / 8;
    // SAFETY: shape (and strides, if not null) point to ndim int64s by
    // the DLPack contract, alive with the capsule.
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        unsafe { std::slice::from_raw_parts(t.shape, ndim) }
    };
    let strides_elems: Option<&[i64]> = (!t.strides.is_null() && ndim > 0)
        .then(|| unsafe { std::slice::from_raw_parts(t.strides, ndim) });
    // DLPack strides count elements; the layout check takes bytes.
    let strides_bytes: Option<Vec<i64>> = strides_elems.map(|s| {
        s.iter()
            .map(|&e| e.saturating_mul(itemsize as i64))
            .collect()
    });
    let nbytes = dense_bytes(shape, strides_bytes.as_deref(), itemsize)
        .map_err(|m| fail(Kind::Unsupported, m))?;
    let ptr = (t.data as u64).checked_add(t.byte_offset).ok_or_else(|| {
        fail(
            Kind::Unsupported,
            "DLPack data pointer plus byte_offset overflows",
        )
    })?;
    if nbytes > 0 && ptr == 0 {
        return Err(fail(
            Kind::Unsupported,
            "a DLPack tensor with data but a null pointer",
        ));
    }
    Ok(ArrayMem {
        ptr,
        nbytes,
        readonly,
        kind,
        device_id: t.device.device_id,
        protocol: "dlpack",
        keep: cap.clone().unbind(),
    })
}
