// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.open()` and `gpunvme.Device`: an open gpunvme node (a
//! controller, or one namespace of it) and what is made from it:
//! namespaces with their queue pairs, DMA host buffers, registered
//! dma-bufs.

use std::os::fd::BorrowedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use gpunvme::sysfs::{normalize_bdf, Sysfs};
use gpunvme::{Controller, DmabufMapping, Mode};
use pyo3::prelude::*;

use crate::errors::{fail, FResult, Fail, Kind};
use crate::gpu::Registry;
use crate::host_buffer::HostBuffer;
use crate::info::Info;
use crate::lane::{LaneConfig, Lanes};
use crate::namespace::{Namespace, NsShared};
use crate::registered::RegisteredBuffer;
use crate::target::{classify, Arg};

/// What a device's namespaces and buffers share.
pub(crate) struct DevShared {
    pub(crate) ctrl: Arc<Controller>,
    pub(crate) mode: Mode,
    pub(crate) registry: Registry,
}

/// An open gpunvme device node: ``/dev/gpunvmeN`` (the controller) or
/// ``/dev/gpunvmeNnM`` (one namespace, shared mode).
///
/// Made by :func:`gpunvme.open`. A context manager: leaving the ``with``
/// block closes it (its namespaces too). The node is closed when the
/// device, and every namespace and buffer made from it, are gone.
///
/// In a child of ``fork()`` every call raises ForkedError: open the
/// device again there.
#[pyclass(module = "gpunvme", frozen)]
pub(crate) struct Device {
    sh: Arc<DevShared>,
    closed: AtomicBool,
    namespaces: Mutex<Vec<Weak<NsShared>>>,
}

/// Where a device argument points: a node path.
fn node_of(py: Python<'_>, device: &Bound<'_, PyAny>) -> FResult<PathBuf> {
    if let Ok(n) = device.extract::<u32>() {
        return Ok(gpunvme::node_path(n));
    }
    let path: PathBuf = device.extract().map_err(|_| {
        fail(
            Kind::Invalid,
            format!(
                "a device is an int (N of /dev/gpunvmeN), a path, gpunvmeN[nM] or a PCI address, \
                 not {}",
                crate::host_mem::type_name(device)
            ),
        )
    })?;
    let s = path.to_string_lossy().into_owned();
    if s.contains('/') {
        return Ok(path);
    }
    if gpunvme::sysfs::parse_node_name(&s).is_some() {
        return Ok(PathBuf::from(gpunvme::DEV_DIR).join(&s));
    }
    let bdf = normalize_bdf(&s).map_err(|_| {
        fail(
            Kind::Invalid,
            format!("{s:?} is not a device: expected /dev/gpunvmeN[nM], gpunvmeN[nM], N or a PCI address"),
        )
    })?;
    py.detach(|| Sysfs::new().find_node(&bdf)).ok_or_else(|| {
        fail(
            Kind::NotFound,
            format!("no gpunvme node for {bdf}: is it bound to gpunvme (gpunvme bind {bdf})?"),
        )
    })
}

/// Opens a gpunvme device.
///
/// ``device``: ``"/dev/gpunvme0"``, ``"/dev/gpunvme0n1"`` (one namespace),
/// ``"gpunvme0"``, ``0`` or a PCI address bound to gpunvme
/// (``"0000:01:00.0"``). ``owner=True`` claims owner mode (raw queue pairs,
/// nothing validated: needs CAP_SYS_RAWIO and a translating IOMMU; see the
/// trust model) instead of the default shared, validated queue pairs.
#[pyfunction]
#[pyo3(signature = (device, *, owner = false))]
pub(crate) fn open(py: Python<'_>, device: &Bound<'_, PyAny>, owner: bool) -> PyResult<Device> {
    let path = node_of(py, device).map_err(|f| f.into_py(py))?;
    let ctrl = py.detach(|| -> FResult<Controller> {
        let c = Controller::open(&path)?;
        if owner {
            c.claim_owner()?;
        }
        Ok(c)
    });
    let ctrl = ctrl.map_err(|f| f.into_py(py))?;
    Ok(Device {
        sh: Arc::new(DevShared {
            ctrl: Arc::new(ctrl),
            mode: if owner { Mode::Raw } else { Mode::Shared },
            registry: Registry::default(),
        }),
        closed: AtomicBool::new(false),
        namespaces: Mutex::new(Vec::new()),
    })
}

impl Device {
    fn usable(&self) -> FResult<()> {
        self.sh.ctrl.check_process()?;
        if self.closed.load(Ordering::Acquire) {
            return Err(fail(Kind::Closed, "the device was closed"));
        }
        Ok(())
    }
}

#[pymethods]
impl Device {
    /// The device node's path.
    #[getter]
    fn path(&self) -> String {
        self.sh.ctrl.path().display().to_string()
    }

    /// Whether this file owns the controller (opened with ``owner=True``).
    #[getter]
    fn owner(&self) -> bool {
        self.sh.mode == Mode::Raw
    }

    /// Whether :meth:`close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The controller's identity, limits and namespaces (GET_INFO).
    fn info(&self, py: Python<'_>) -> PyResult<Info> {
        self.usable()?;
        let i = py
            .detach(|| self.sh.ctrl.info())
            .map_err(|e| Fail::Lib(e).into_py(py))?;
        Ok(Info::from(&i))
    }

    /// A namespace to transfer with, on ``qpairs`` queue pairs of its own.
    ///
    /// ``nsid``: default the node's namespace (a namespace node), or the
    /// only one. ``depth``: entries per queue (commands in flight per pair
    /// is depth - 1). ``qpairs``: transfers that run at once (threads,
    /// async). ``timeout``: seconds each wait on the device may take before
    /// the pair is poisoned (and replaced). ``bounce_bytes``: the per-pair
    /// buffer host memory is copied through.
    #[pyo3(signature = (nsid = None, *, depth = 32, qpairs = 1, timeout = 5.0, bounce_bytes = 1048576))]
    fn namespace(
        &self,
        py: Python<'_>,
        nsid: Option<u32>,
        depth: u32,
        qpairs: usize,
        timeout: f64,
        bounce_bytes: usize,
    ) -> PyResult<Namespace> {
        self.usable()?;
        let r = (|| -> FResult<Namespace> {
            if !(1..=64).contains(&qpairs) {
                return Err(fail(Kind::Invalid, format!("qpairs={qpairs}: 1 to 64")));
            }
            if !(timeout.is_finite() && timeout > 0.0 && timeout <= 3600.0) {
                return Err(fail(
                    Kind::Invalid,
                    format!("timeout={timeout}: 0 to 3600 seconds"),
                ));
            }
            if bounce_bytes == 0 || bounce_bytes as u64 > gpunvme::sys::GPUNVME_MAX_MAP_BYTES as u64
            {
                return Err(fail(
                    Kind::Invalid,
                    format!(
                        "bounce_bytes={bounce_bytes}: 1 to {} (GPUNVME_MAX_MAP_BYTES)",
                        gpunvme::sys::GPUNVME_MAX_MAP_BYTES
                    ),
                ));
            }
            let info = py.detach(|| self.sh.ctrl.info())?;
            let nsid = match nsid.or(info.node_nsid) {
                Some(n) => n,
                None if info.namespaces.len() == 1 => info.namespaces[0].nsid,
                None => {
                    return Err(fail(
                        Kind::Invalid,
                        format!(
                            "name the namespace: {} has {:?}",
                            info.bdf,
                            info.namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>()
                        ),
                    ))
                }
            };
            let ns = *info
                .namespaces
                .iter()
                .find(|n| n.nsid == nsid)
                .ok_or_else(|| {
                    fail(
                        Kind::NotFound,
                        format!(
                            "namespace {nsid} on {} (active: {:?})",
                            info.bdf,
                            info.namespaces.iter().map(|n| n.nsid).collect::<Vec<_>>()
                        ),
                    )
                })?;
            let cfg = LaneConfig {
                ctrl: self.sh.ctrl.clone(),
                info,
                ns,
                depth,
                mode: self.sh.mode,
                timeout: Duration::from_secs_f64(timeout),
                bounce_bytes,
                lanes: qpairs,
            };
            let lanes = py.detach(|| Lanes::new(cfg))?;
            let ns = Namespace::new(self.sh.clone(), lanes)?;
            let mut list = self.namespaces.lock().unwrap_or_else(|p| p.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.push(ns.weak());
            Ok(ns)
        })();
        r.map_err(|f| f.into_py(py))
    }

    /// Host memory of ``nbytes`` (zero-filled) that transfers use without a
    /// copy; see :class:`HostBuffer`.
    fn alloc(&self, py: Python<'_>, nbytes: usize) -> PyResult<HostBuffer> {
        self.usable()?;
        py.detach(|| HostBuffer::new(&self.sh.ctrl, nbytes))
            .map_err(|f| f.into_py(py))
    }

    /// Registers the dma-buf ``fd`` (GPU memory a runtime exported, a
    /// udmabuf): transfers then DMA into and out of it directly. ``size``
    /// bounds it (default: the dma-buf's own size, from lseek).
    #[pyo3(signature = (fd, size = None))]
    fn register_dmabuf(
        &self,
        py: Python<'_>,
        fd: i32,
        size: Option<u64>,
    ) -> PyResult<RegisteredBuffer> {
        self.usable()?;
        let r = py.detach(|| -> FResult<RegisteredBuffer> {
            if fd < 0 {
                return Err(fail(Kind::Invalid, format!("fd {fd} is not a descriptor")));
            }
            // SAFETY: lseek on a caller's descriptor; a bad one gives EBADF.
            // (dma-bufs report their size this way; the offset is put back.)
            let end = unsafe { libc::lseek(fd, 0, libc::SEEK_END) };
            if end > 0 {
                // SAFETY: as above.
                unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
            }
            let len = match size {
                Some(s) => s,
                None if end > 0 => end as u64,
                None => {
                    return Err(fail(
                        Kind::Invalid,
                        format!(
                            "fd {fd}: its size cannot be told ({}); pass size",
                            std::io::Error::last_os_error()
                        ),
                    ))
                }
            };
            // SAFETY: the descriptor is the caller's and stays open for the
            // call (the module takes its own reference to the dma-buf).
            let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
            let map = DmabufMapping::new(&self.sh.ctrl, bfd, len as usize)?;
            Ok(RegisteredBuffer::new(map, None))
        });
        r.map_err(|f| f.into_py(py))
    }

    /// Registers a GPU array's allocation (DLPack or
    /// ``__cuda_array_interface__``) once; transfers into that array, or
    /// any other in the same allocation, then use it. Raises
    /// GpuUnavailableError in a build without a GPU exporter.
    fn register(&self, py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<Py<RegisteredBuffer>> {
        self.usable()?;
        match classify(array, false)? {
            Arg::Gpu(a) => self
                .sh
                .registry
                .lookup_or_register(py, &self.sh.ctrl, &a)
                .map(|(r, _)| r)
                .map_err(|f| f.into_py(py)),
            Arg::Registered(r) => Ok(r.unbind()),
            _ => Err(fail(
                Kind::Invalid,
                "host memory needs no registration: pass it to a transfer (or use Device.alloc)",
            )
            .into_py(py)),
        }
    }

    /// Closes the device's namespaces (their queue pairs) and forgets its
    /// GPU registrations. Idempotent.
    fn close(&self, py: Python<'_>) {
        if !self.sh.ctrl.is_usable_here() {
            self.closed.store(true, Ordering::Release);
            return;
        }
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let list = std::mem::take(&mut *self.namespaces.lock().unwrap_or_else(|p| p.into_inner()));
        for ns in list.iter().filter_map(Weak::upgrade) {
            ns.close(py);
        }
        self.sh.registry.clear();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close(py);
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<gpunvme.Device {} ({}{})>",
            self.sh.ctrl.path().display(),
            if self.sh.mode == Mode::Raw {
                "owner"
            } else {
                "shared"
            },
            if self.closed.load(Ordering::Acquire) {
                ", closed"
            } else {
                ""
            }
        )
    }
}
