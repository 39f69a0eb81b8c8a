// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.Namespace`: transfers between one namespace and buffers, by
//! block (`read`/`write`) or by byte (`pread`/`pwrite`), synchronous
//! (the GIL released while the device works) or asynchronous (a
//! `concurrent.futures.Future`).

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use pyo3::prelude::*;

use crate::device::DevShared;
use crate::errors::{fail, FResult, Fail, Kind};
use crate::host_buffer::HostBuffer;
use crate::lane::Lanes;
use crate::plan::{self, Dir, Limits, Plan};
use crate::target::{arg_len, classify, Arg, Target};
use crate::worker::{self, Workers};

/// What a namespace's Python object, its worker threads and its queued
/// jobs share.
pub(crate) struct NsShared {
    dev: Arc<DevShared>,
    lanes: Lanes,
    /// Left alone in a forked child (see Drop).
    workers: ManuallyDrop<Workers>,
    closed: AtomicBool,
}

impl Drop for NsShared {
    fn drop(&mut self) {
        if self.dev.ctrl.is_usable_here() {
            // SAFETY: dropped once, here; never used after.
            unsafe { ManuallyDrop::drop(&mut self.workers) };
        }
        // In a forked child the worker threads do not exist and the
        // channel's internal locks may have been held at the fork: leak.
        // The lanes' queue pairs and buffers leak by the library's rule.
    }
}

impl NsShared {
    /// Refuses new work, joins the workers (without the GIL) and destroys
    /// the queue pairs. Idempotent.
    pub(crate) fn close(&self, py: Python<'_>) {
        if self.closed.swap(true, Ordering::AcqRel) || !self.dev.ctrl.is_usable_here() {
            return;
        }
        let threads = self.workers.close();
        py.detach(|| {
            let me = std::thread::current().id();
            // (A future's done-callback runs on a worker: never join that one.)
            for t in threads.into_iter().filter(|t| t.thread().id() != me) {
                let _ = t.join();
            }
            self.lanes.close();
        });
    }

    pub(crate) fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    pub(crate) fn workers(&self) -> &Workers {
        &self.workers
    }

    /// False in a child of fork().
    pub(crate) fn is_usable_here(&self) -> bool {
        self.dev.ctrl.is_usable_here()
    }

    pub(crate) fn check(&self) -> FResult<()> {
        self.lanes.check_process()?;
        if self.closed.load(Ordering::Acquire) {
            return Err(fail(Kind::Closed, "the namespace was closed"));
        }
        Ok(())
    }
}

/// How a call names the blocks.
#[derive(Clone, Copy)]
pub(crate) enum Range {
    Blocks {
        lba: u64,
        count: Option<u64>,
    },
    Bytes {
        file_offset: u64,
        size: Option<usize>,
    },
}

/// The plan of a transfer of `arg` on namespace `ns`.
pub(crate) fn plan_for(
    arg: &Arg<'_>,
    ns: gpunvme::Namespace,
    dir: Dir,
    range: Range,
    buf_offset: usize,
) -> FResult<Plan> {
    let lim = Limits {
        lba_size: ns.lba_size,
        capacity: ns.capacity_lbas,
        nsid: ns.nsid,
        buf_len: arg_len(arg)?,
        // Host memory is copied (any offset); the rest is DMA'd directly.
        dma: !matches!(arg, Arg::Host(_)),
        unchecked: false,
    };
    match range {
        Range::Blocks { lba, count } => plan::by_blocks(dir, lim, lba, count, buf_offset),
        Range::Bytes { file_offset, size } => {
            plan::by_bytes(dir, lim, file_offset, size, buf_offset)
        }
    }
}

/// A transfer's checks without a device (`_native._check_plan`, for the
/// host tests): the plan for `buf` on a namespace of `lba_size`-byte
/// blocks and `capacity` blocks: (lba, count, buf_offset, bytes).
#[pyfunction]
#[pyo3(signature = (buf, *, lba_size, capacity, read = true, lba = None, count = None, file_offset = None, size = None, buf_offset = 0))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _check_plan(
    buf: &Bound<'_, PyAny>,
    lba_size: u32,
    capacity: u64,
    read: bool,
    lba: Option<u64>,
    count: Option<u64>,
    file_offset: Option<u64>,
    size: Option<usize>,
    buf_offset: usize,
) -> PyResult<(u64, u64, usize, usize)> {
    let dir = if read { Dir::Read } else { Dir::Write };
    let arg = classify(buf, read)?;
    let range = match file_offset {
        Some(file_offset) => Range::Bytes { file_offset, size },
        None => Range::Blocks {
            lba: lba.unwrap_or(0),
            count,
        },
    };
    let ns = gpunvme::Namespace {
        nsid: 1,
        lba_size,
        capacity_lbas: capacity,
    };
    let p = plan_for(&arg, ns, dir, range, buf_offset)?;
    Ok((p.lba, p.count, p.buf_offset, p.bytes))
}

/// One namespace of a device, with queue pairs of its own.
///
/// Made by ``Device.namespace()``. Buffers: anything with the buffer
/// protocol (bytearray, memoryview, NumPy arrays; copied through a bounce
/// buffer, so any offset works), :class:`HostBuffer` and
/// :class:`RegisteredBuffer` (zero copy; offsets must be multiples of 4),
/// and GPU arrays (DLPack or ``__cuda_array_interface__``, registered on
/// first use where the build can). Block ranges are checked against the
/// namespace, byte ranges must be whole blocks. Transfers return the
/// number of bytes moved; the ``*_async`` forms return an
/// :class:`AsyncFuture` (a ``concurrent.futures.Future``) of it. GPU
/// memory is not ordered with CUDA streams: synchronize before a write
/// from it and after nothing else (a read is complete when it returns).
#[pyclass(module = "gpunvme", frozen)]
pub(crate) struct Namespace {
    sh: Arc<NsShared>,
}

impl Namespace {
    pub(crate) fn new(dev: Arc<DevShared>, lanes: Lanes) -> FResult<Self> {
        let threads = lanes.cfg.lanes;
        Ok(Namespace {
            sh: Arc::new(NsShared {
                dev,
                lanes,
                workers: ManuallyDrop::new(Workers::new(threads)?),
                closed: AtomicBool::new(false),
            }),
        })
    }

    pub(crate) fn weak(&self) -> Weak<NsShared> {
        Arc::downgrade(&self.sh)
    }

    /// Checks the call and resolves its buffer into a plan and a target
    /// (taking a HostBuffer's memory, or a registration).
    fn prepare(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        dir: Dir,
        range: Range,
        buf_offset: usize,
    ) -> PyResult<(Plan, Target)> {
        self.sh.check()?;
        let cfg = &self.sh.lanes.cfg;
        let arg = classify(buf, dir == Dir::Read)?;
        let plan = plan_for(&arg, cfg.ns, dir, range, buf_offset)?;
        let same_file = |c: &Arc<gpunvme::Controller>| -> FResult<()> {
            if Arc::ptr_eq(c, &cfg.ctrl) {
                Ok(())
            } else {
                Err(fail(
                    Kind::Invalid,
                    "the buffer belongs to another open Device: its DMA addresses mean nothing here",
                ))
            }
        };
        let target = match arg {
            Arg::Host(h) => Target::Host(h),
            Arg::Pinned(hb) => {
                same_file(hb.get().controller())?;
                Target::Pinned(HostBuffer::lend(&hb)?)
            }
            Arg::Registered(rb) => {
                let map = rb.get().mapping()?;
                same_file(map.controller())?;
                Target::Dmabuf(map, 0)
            }
            Arg::Gpu(a) => {
                let (rb, off) = self.sh.dev.registry.lookup_or_register(py, &cfg.ctrl, &a)?;
                Target::Dmabuf(rb.get().mapping()?, off)
            }
        };
        Ok((plan, target))
    }

    fn run_sync(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        dir: Dir,
        range: Range,
        buf_offset: usize,
    ) -> PyResult<usize> {
        let (plan, target) = self.prepare(py, buf, dir, range, buf_offset)?;
        self.run_plan(py, plan, target)
    }

    fn run_plan(&self, py: Python<'_>, plan: Plan, mut target: Target) -> PyResult<usize> {
        let sh = &self.sh;
        let r = py.detach(|| {
            sh.lanes
                .with_lane(|cfg, lane| lane.run(cfg, &plan, &mut target))
        });
        // The buffer is released (and a HostBuffer's memory given back)
        // with the GIL held, before the caller sees the result.
        drop(target);
        r.map(|()| plan.bytes).map_err(|f| f.into_py(py))
    }

    fn run_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        dir: Dir,
        range: Range,
        buf_offset: usize,
    ) -> PyResult<Py<PyAny>> {
        let (plan, target) = self.prepare(py, buf, dir, range, buf_offset)?;
        let job = Py::new(
            py,
            worker::AsyncJob::new(self.sh.clone(), worker::Body { plan, target }),
        )?;
        let fut = worker::new_future(py, job.clone_ref(py))?;
        self.sh
            .workers
            .submit(job, fut.clone_ref(py))
            .map_err(|f| f.into_py(py))?;
        Ok(fut)
    }
}

#[pymethods]
impl Namespace {
    /// Namespace ID.
    #[getter]
    fn nsid(&self) -> u32 {
        self.sh.lanes.cfg.ns.nsid
    }

    /// Bytes per logical block.
    #[getter]
    fn lba_size(&self) -> u32 {
        self.sh.lanes.cfg.ns.lba_size
    }

    /// Size in blocks.
    #[getter]
    fn capacity(&self) -> u64 {
        self.sh.lanes.cfg.ns.capacity_lbas
    }

    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> u64 {
        self.sh.lanes.cfg.ns.capacity_bytes()
    }

    /// Queue pairs (transfers that run at once).
    #[getter]
    fn qpairs(&self) -> usize {
        self.sh.lanes.cfg.lanes
    }

    /// Entries per queue.
    #[getter]
    fn depth(&self) -> u32 {
        self.sh.lanes.cfg.depth
    }

    /// Whether :meth:`close` (or the device's) was called.
    #[getter]
    fn closed(&self) -> bool {
        self.sh.closed.load(Ordering::Acquire)
    }

    /// Reads ``count`` blocks at ``lba`` into ``buf`` at byte
    /// ``buf_offset`` (default: as many blocks as fill the buffer);
    /// returns the bytes read.
    #[pyo3(signature = (buf, lba = 0, count = None, *, buf_offset = 0))]
    fn read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        lba: u64,
        count: Option<u64>,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.run_sync(py, buf, Dir::Read, Range::Blocks { lba, count }, buf_offset)
    }

    /// Writes ``count`` blocks at ``lba`` from ``buf`` at byte
    /// ``buf_offset`` (default: the whole buffer); returns the bytes
    /// written.
    #[pyo3(signature = (buf, lba = 0, count = None, *, buf_offset = 0))]
    fn write(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        lba: u64,
        count: Option<u64>,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.run_sync(
            py,
            buf,
            Dir::Write,
            Range::Blocks { lba, count },
            buf_offset,
        )
    }

    /// Reads ``size`` bytes (default: what fills the buffer) at byte
    /// ``file_offset`` of the namespace into ``buf`` at ``buf_offset``;
    /// both whole blocks. Returns the bytes read.
    #[pyo3(signature = (buf, size = None, file_offset = 0, *, buf_offset = 0))]
    fn pread(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.run_sync(
            py,
            buf,
            Dir::Read,
            Range::Bytes { file_offset, size },
            buf_offset,
        )
    }

    /// Writes ``size`` bytes (default: the buffer from ``buf_offset``) at
    /// byte ``file_offset``; both whole blocks. Returns the bytes written.
    #[pyo3(signature = (buf, size = None, file_offset = 0, *, buf_offset = 0))]
    fn pwrite(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<usize> {
        self.run_sync(
            py,
            buf,
            Dir::Write,
            Range::Bytes { file_offset, size },
            buf_offset,
        )
    }

    /// :meth:`read`, asynchronously: an :class:`AsyncFuture` (a
    /// ``concurrent.futures.Future``) of the bytes read, run by a worker
    /// thread or by the first thread that waits in its ``result()``.
    /// Argument errors raise here, device errors come from ``result()``.
    /// The buffer must stay untouched until it is done.
    #[pyo3(signature = (buf, lba = 0, count = None, *, buf_offset = 0))]
    fn read_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        lba: u64,
        count: Option<u64>,
        buf_offset: usize,
    ) -> PyResult<Py<PyAny>> {
        self.run_async(py, buf, Dir::Read, Range::Blocks { lba, count }, buf_offset)
    }

    /// :meth:`write`, asynchronously (see :meth:`read_async`).
    #[pyo3(signature = (buf, lba = 0, count = None, *, buf_offset = 0))]
    fn write_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        lba: u64,
        count: Option<u64>,
        buf_offset: usize,
    ) -> PyResult<Py<PyAny>> {
        self.run_async(
            py,
            buf,
            Dir::Write,
            Range::Blocks { lba, count },
            buf_offset,
        )
    }

    /// :meth:`pread`, asynchronously (see :meth:`read_async`).
    #[pyo3(signature = (buf, size = None, file_offset = 0, *, buf_offset = 0))]
    fn pread_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<Py<PyAny>> {
        self.run_async(
            py,
            buf,
            Dir::Read,
            Range::Bytes { file_offset, size },
            buf_offset,
        )
    }

    /// :meth:`pwrite`, asynchronously (see :meth:`read_async`).
    #[pyo3(signature = (buf, size = None, file_offset = 0, *, buf_offset = 0))]
    fn pwrite_async(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: u64,
        buf_offset: usize,
    ) -> PyResult<Py<PyAny>> {
        self.run_async(
            py,
            buf,
            Dir::Write,
            Range::Bytes { file_offset, size },
            buf_offset,
        )
    }

    /// Flushes the namespace (volatile write cache to media).
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        self.sh.check()?;
        py.detach(|| self.sh.lanes.with_lane(|_, lane| Ok(lane.io().flush()?)))
            .map_err(|f: Fail| f.into_py(py))
    }

    /// Write Zeroes of ``count`` blocks at ``lba``.
    fn write_zeroes(&self, py: Python<'_>, lba: u64, count: u64) -> PyResult<()> {
        self.sh.check()?;
        if count == 0 {
            return Err(
                fail(Kind::Invalid, "an empty Write Zeroes: at least one block").into_py(py),
            );
        }
        let cfg = &self.sh.lanes.cfg;
        if lba
            .checked_add(count)
            .is_none_or(|e| e > cfg.ns.capacity_lbas)
        {
            return Err(fail(
                Kind::OutOfRange,
                format!(
                    "blocks {lba}..{} are beyond namespace {} (blocks 0..{})",
                    lba.saturating_add(count),
                    cfg.ns.nsid,
                    cfg.ns.capacity_lbas
                ),
            )
            .into_py(py));
        }
        py.detach(|| {
            self.sh
                .lanes
                .with_lane(|_, lane| Ok(lane.io().write_zeroes(lba, count)?))
        })
        .map_err(|f: Fail| f.into_py(py))
    }

    /// Closes the namespace: queued async transfers fail with ClosedError,
    /// running ones finish, then its queue pairs are destroyed.
    fn close(&self, py: Python<'_>) {
        self.sh.close(py);
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
        let c = &self.sh.lanes.cfg;
        format!(
            "<gpunvme.Namespace {} of {}: {} blocks of {} bytes, {} queue pair(s) of depth {}{}>",
            c.ns.nsid,
            c.ctrl.path().display(),
            c.ns.capacity_lbas,
            c.ns.lba_size,
            c.lanes,
            c.depth,
            if self.closed() { ", closed" } else { "" }
        )
    }

    /// The qids of the idle lanes' queue pairs (``dma``: their dma-buf
    /// pairs'), for the tests' relay hold.
    #[pyo3(signature = (dma = false))]
    fn _qids(&self, dma: bool) -> Vec<u16> {
        self.sh.lanes.qids(dma)
    }

    /// A read of host memory whose range only the controller checks: its
    /// LBA Out of Range status comes back as NvmeError (for the tests).
    fn _read_unchecked(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        lba: u64,
        count: u64,
    ) -> PyResult<usize> {
        let (mut plan, target) = self.prepare(
            py,
            buf,
            Dir::Read,
            Range::Blocks {
                lba: 0,
                count: Some(count),
            },
            0,
        )?;
        if !matches!(target, Target::Host(_)) {
            return Err(fail(Kind::Invalid, "_read_unchecked takes host memory").into_py(py));
        }
        plan.lba = lba;
        plan.unchecked = true;
        self.run_plan(py, plan, target)
    }

    /// The Rust library's own latency for the overhead bench: ``iters``
    /// reads of ``count`` blocks at ``lba`` in a Rust loop on one of this
    /// namespace's queue pairs; nanoseconds of each. ``copy``: each read
    /// is also copied out of the library's DMA buffer into ordinary memory
    /// (what a read into a NumPy array does), inside its timing.
    #[pyo3(signature = (lba, count, iters, copy = false))]
    fn _rust_read_loop(
        &self,
        py: Python<'_>,
        lba: u64,
        count: u64,
        iters: usize,
        copy: bool,
    ) -> PyResult<Vec<u64>> {
        self.sh.check()?;
        py.detach(|| {
            self.sh
                .lanes
                .with_lane(|cfg, lane| lane.rust_read_loop(cfg, lba, count, iters, copy))
        })
        .map_err(|f| f.into_py(py))
    }
}
