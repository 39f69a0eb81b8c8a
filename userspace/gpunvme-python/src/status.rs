// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.NvmeStatus`: an NVMe completion status, as `NvmeError.status`.

use pyo3::prelude::*;

/// An NVMe completion status (CQE DW3 bits 31:17).
///
/// ``sct`` (Status Code Type: 0 generic, 1 command specific, 2 media and
/// data integrity, 3 path), ``sc`` (Status Code), ``crd`` (Command Retry
/// Delay index), ``more``, ``dnr`` (Do Not Retry); ``name`` is the
/// specification's name for the common codes, or None. ``str()`` reads
/// e.g. ``LBA Out of Range (SCT 0x0, SC 0x80, DNR)``.
#[pyclass(module = "gpunvme", frozen, eq, hash, get_all)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NvmeStatus {
    sct: u8,
    sc: u8,
    crd: u8,
    more: bool,
    dnr: bool,
}

impl From<gpunvme::Status> for NvmeStatus {
    fn from(s: gpunvme::Status) -> Self {
        NvmeStatus {
            sct: s.sct,
            sc: s.sc,
            crd: s.crd,
            more: s.more,
            dnr: s.dnr,
        }
    }
}

impl NvmeStatus {
    fn lib(&self) -> gpunvme::Status {
        gpunvme::Status {
            sct: self.sct,
            sc: self.sc,
            crd: self.crd,
            more: self.more,
            dnr: self.dnr,
        }
    }
}

#[pymethods]
impl NvmeStatus {
    #[new]
    #[pyo3(signature = (sct, sc, *, crd = 0, more = false, dnr = false))]
    fn new(sct: u8, sc: u8, crd: u8, more: bool, dnr: bool) -> PyResult<Self> {
        if sct > 7 || crd > 3 {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "SCT is 3 bits and CRD 2 bits: got sct={sct}, crd={crd}"
            )));
        }
        Ok(NvmeStatus {
            sct,
            sc,
            crd,
            more,
            dnr,
        })
    }

    /// The specification's name of the status code, or None.
    #[getter]
    fn name(&self) -> Option<&'static str> {
        self.lib().name()
    }

    /// The CQE status field (DW3 bits 31:16, phase tag 0).
    #[getter]
    fn raw(&self) -> u16 {
        self.lib().to_cqe_field()
    }

    /// Decodes CQE DW3 bits 31:16 (the phase tag in bit 0 is ignored).
    #[staticmethod]
    fn from_raw(field: u16) -> Self {
        gpunvme::Status::from_cqe_field(field).into()
    }

    fn __str__(&self) -> String {
        self.lib().to_string()
    }

    /// Pickles as its raw field (which holds every bit of it).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (u16,))> {
        Ok((slf.get_type().getattr("from_raw")?, (slf.get().raw(),)))
    }

    fn __repr__(&self) -> String {
        format!(
            "NvmeStatus({:#x}, {:#04x}, crd={}, more={}, dnr={})",
            self.sct,
            self.sc,
            self.crd,
            if self.more { "True" } else { "False" },
            if self.dnr { "True" } else { "False" },
        )
    }
}
