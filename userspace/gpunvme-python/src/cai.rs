// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The CUDA array interface in (`__cuda_array_interface__`, versions 0 to
//! 3: CuPy, Numba, PyTorch's CUDA tensors, JAX): a dict with `shape`,
//! `typestr`, `data` = (pointer, read-only), `strides` (bytes, or None),
//! `version`, and optionally `mask` and `stream`.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::array::{ArrayMem, DeviceKind};
use crate::errors::{fail, Kind};
use crate::layout::dense_bytes;

fn unsupported(py: Python<'_>, msg: String) -> PyErr {
    fail(
        Kind::Unsupported,
        format!("__cuda_array_interface__: {msg}"),
    )
    .into_py(py)
}

/// Bytes per element of a typestr such as `<f4`, `|u1` or `<c16`.
fn itemsize(typestr: &str) -> Option<usize> {
    let mut c = typestr.chars();
    let order = c.next()?;
    let _kind = c.next()?;
    if !matches!(order, '<' | '>' | '|' | '=') {
        return None;
    }
    c.as_str().parse().ok().filter(|&n: &usize| n > 0)
}

/// The memory `obj.__cuda_array_interface__` describes (`iface`).
pub(crate) fn from_interface(
    obj: &Bound<'_, PyAny>,
    iface: &Bound<'_, PyAny>,
) -> PyResult<ArrayMem> {
    let py = obj.py();
    let d = iface
        .cast::<PyDict>()
        .map_err(|_| unsupported(py, "not a dict".into()))?;
    let item = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| unsupported(py, format!("no {k:?}")))
    };
    let version: i64 = item("version")?
        .extract()
        .map_err(|_| unsupported(py, "version is not an int".into()))?;
    if !(0..=3).contains(&version) {
        return Err(unsupported(
            py,
            format!("version {version} (this reader knows 0 to 3)"),
        ));
    }
    if let Some(m) = d.get_item("mask")? {
        if !m.is_none() {
            return Err(unsupported(py, "a masked array".into()));
        }
    }
    let shape: Vec<i64> = item("shape")?
        .extract()
        .map_err(|_| unsupported(py, "shape is not a tuple of ints".into()))?;
    let typestr: String = item("typestr")?
        .extract()
        .map_err(|_| unsupported(py, "typestr is not a str".into()))?;
    let isz = itemsize(&typestr).ok_or_else(|| unsupported(py, format!("typestr {typestr:?}")))?;
    let data = item("data")?;
    let data = data
        .cast::<PyTuple>()
        .ok()
        .filter(|t| t.len() == 2)
        .ok_or_else(|| unsupported(py, "data is not a (pointer, read_only) tuple".into()))?;
    let ptr: u64 = data
        .get_item(0)?
        .extract()
        .map_err(|_| unsupported(py, "the data pointer is not an int".into()))?;
    let readonly: bool = data
        .get_item(1)?
        .extract()
        .map_err(|_| unsupported(py, "the read-only flag is not a bool".into()))?;
    let strides: Option<Vec<i64>> = match d.get_item("strides")? {
        None => None,
        Some(s) if s.is_none() => None,
        Some(s) => Some(
            s.extract()
                .map_err(|_| unsupported(py, "strides is not None or a tuple of ints".into()))?,
        ),
    };
    let nbytes = dense_bytes(&shape, strides.as_deref(), isz).map_err(|m| unsupported(py, m))?;
    if nbytes > 0 && ptr == 0 {
        return Err(unsupported(py, "data but a null pointer".into()));
    }
    Ok(ArrayMem {
        ptr,
        nbytes,
        readonly,
        kind: DeviceKind::Cuda,
        device_id: -1,
        protocol: "cuda_array_interface",
        keep: obj.clone().unbind(),
    })
}
