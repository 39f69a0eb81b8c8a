// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Failures, and the Python exceptions they become (`gpunvme/_errors.py`
//! defines the classes: Python lets one class derive from `OSError` or
//! `TimeoutError` and from `GpunvmeError` at once).
//!
//! Work done without the GIL returns a [`Fail`]; it becomes a `PyErr` once
//! the GIL is held again ([`Fail::into_py`]).

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

use crate::status::NvmeStatus;

/// A failure of this package's own checks: which exception class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Invalid,
    Alignment,
    OutOfRange,
    ReadOnly,
    Unsupported,
    BufferBusy,
    Closed,
    GpuUnavailable,
    Timeout,
    NotFound,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Invalid => "InvalidArgumentError",
            Kind::Alignment => "AlignmentError",
            Kind::OutOfRange => "OutOfRangeError",
            Kind::ReadOnly => "ReadOnlyBufferError",
            Kind::Unsupported => "UnsupportedBufferError",
            Kind::BufferBusy => "BufferBusyError",
            Kind::Closed => "ClosedError",
            Kind::GpuUnavailable => "GpuUnavailableError",
            Kind::Timeout => "DeviceTimeoutError",
            Kind::NotFound => "NotFoundError",
        }
    }
}

/// Why an operation failed: the library's error, or one of ours.
#[derive(Debug)]
pub(crate) enum Fail {
    Lib(gpunvme::Error),
    Own(Kind, String),
}

pub(crate) type FResult<T> = Result<T, Fail>;

impl From<gpunvme::Error> for Fail {
    fn from(e: gpunvme::Error) -> Self {
        Fail::Lib(e)
    }
}

impl From<gpunvme::TransferError> for Fail {
    fn from(e: gpunvme::TransferError) -> Self {
        Fail::Lib(e.error)
    }
}

/// A failure of our own checks.
pub(crate) fn fail(kind: Kind, msg: impl Into<String>) -> Fail {
    Fail::Own(kind, msg.into())
}

impl Fail {
    pub(crate) fn into_py(self, py: Python<'_>) -> PyErr {
        match self {
            Fail::Own(kind, msg) => new_error(py, kind.class_name(), msg, &[]),
            Fail::Lib(e) => lib_error(py, e),
        }
    }
}

impl From<Fail> for PyErr {
    fn from(f: Fail) -> PyErr {
        Python::attach(|py| f.into_py(py))
    }
}

/// `gpunvme._errors`, imported once.
fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    static MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();
    MODULE
        .get_or_try_init(py, || {
            PyModule::import(py, "gpunvme._errors").map(|m| m.unbind())
        })
        .map(|m| m.bind(py))
}

/// A detail attribute of an exception.
pub(crate) type Detail<'py> = (&'static str, Bound<'py, PyAny>);

/// An instance of `gpunvme._errors.<class>(msg, **details)` as a PyErr.
pub(crate) fn new_error(py: Python<'_>, class: &str, msg: String, details: &[Detail<'_>]) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let cls = errors_module(py)?.getattr(class)?;
        let kw = PyDict::new(py);
        for (k, v) in details {
            kw.set_item(*k, v)?;
        }
        Ok(PyErr::from_value(cls.call((msg.clone(),), Some(&kw))?))
    };
    // If the classes cannot be had (a broken install), still say what failed.
    build().unwrap_or_else(|e| {
        pyo3::exceptions::PyRuntimeError::new_err(format!(
            "{msg} (and gpunvme._errors.{class} is unavailable: {e})"
        ))
    })
}

/// The exception for an error of the gpunvme library.
pub(crate) fn lib_error(py: Python<'_>, e: gpunvme::Error) -> PyErr {
    use gpunvme::Error as E;
    let msg = e.to_string();
    let errno = e.errno();
    let int = |v: i64| v.into_pyobject(py).expect("int").into_any();
    let text = |s: &str| s.into_pyobject(py).expect("str").into_any();
    let none = || py.None().into_bound(py);
    let mut details: Vec<Detail<'_>> = Vec::new();
    if let Some(n) = errno {
        details.push(("errno", int(n as i64)));
    }
    let class = match &e {
        E::Io { path, .. } => {
            details.push(("path", text(&path.display().to_string())));
            details.push(("ioctl", none()));
            "DeviceError"
        }
        E::Ioctl { name, path, .. } => {
            details.push(("path", text(&path.display().to_string())));
            details.push(("ioctl", text(name)));
            "DeviceError"
        }
        E::Refused(_) => "RefusedError",
        E::NotFound(_) => "NotFoundError",
        E::Invalid(_) => "InvalidArgumentError",
        E::Nvme {
            qid,
            cid,
            command,
            status,
        } => {
            match Bound::new(py, NvmeStatus::from(*status)) {
                Ok(s) => details.push(("status", s.into_any())),
                Err(err) => return err,
            }
            details.push(("qid", int(*qid as i64)));
            details.push(("cid", int(*cid as i64)));
            details.push(("command", text(command)));
            "NvmeError"
        }
        E::Timeout {
            qid, cid, command, ..
        } => {
            details.push(("qid", int(*qid as i64)));
            details.push(("cid", cid.map_or_else(none, |c| int(c as i64))));
            details.push(("command", text(command)));
            "DeviceTimeoutError"
        }
        E::Poisoned { qid, .. } => {
            details.push(("qid", int(*qid as i64)));
            "PoisonedError"
        }
        E::QueueFull { qid, .. } => {
            details.push(("qid", int(*qid as i64)));
            "GpunvmeError"
        }
        E::Forked { opened_by, now, .. } => {
            details.push(("opened_by", int(*opened_by as i64)));
            details.push(("pid", int(*now as i64)));
            "ForkedError"
        }
    };
    new_error(py, class, msg, &details)
}

/// Every library error variant with sample fields, converted: the host
/// tests check the classes and attributes (`_native._sample_errors`).
#[pyfunction]
pub(crate) fn _sample_errors(py: Python<'_>) -> PyResult<Vec<(String, Py<PyAny>)>> {
    use gpunvme::Error as E;
    use std::time::Duration;
    let samples = vec![
        (
            "io",
            E::Io {
                what: "open the gpunvme device node".into(),
                path: "/dev/gpunvme9".into(),
                source: std::io::Error::from_raw_os_error(libc::ENOENT),
            },
        ),
        (
            "ioctl",
            E::Ioctl {
                name: "GPUNVME_IOC_CREATE_QPAIR",
                request: 0,
                path: "/dev/gpunvme0".into(),
                errno: libc::ENOSPC,
            },
        ),
        ("refused", E::Refused("a namespace is mounted".into())),
        ("not_found", E::NotFound("namespace 3".into())),
        (
            "invalid",
            E::Invalid("offset 3 is not dword aligned".into()),
        ),
        (
            "nvme",
            E::Nvme {
                qid: 2,
                cid: 7,
                command: "Read of 8 block(s) at LBA 9 (nsid 1)".into(),
                status: gpunvme::Status {
                    sct: 0,
                    sc: 0x80,
                    crd: 0,
                    more: false,
                    dnr: true,
                },
            },
        ),
        (
            "timeout",
            E::Timeout {
                qid: 3,
                cid: Some(5),
                waited: Duration::from_secs(5),
                command: "Write of 1 block(s) at LBA 0 (nsid 1)".into(),
            },
        ),
        (
            "poisoned",
            E::Poisoned {
                qid: 4,
                why: "timeout".into(),
            },
        ),
        (
            "forked",
            E::Forked {
                path: "/dev/gpunvme0".into(),
                opened_by: 100,
                now: 101,
            },
        ),
    ];
    Ok(samples
        .into_iter()
        .map(|(name, e)| (name.to_string(), lib_error(py, e).into_value(py).into_any()))
        .collect())
}
