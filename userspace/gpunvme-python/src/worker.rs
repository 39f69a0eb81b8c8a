// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Asynchronous transfers: `*_async` calls return a
//! `gpunvme._future.AsyncFuture`, a `concurrent.futures.Future` (so
//! `result(timeout)`, `wait`, `as_completed` and `asyncio.wrap_future`
//! work), whose job ([`AsyncJob`]) runs on worker threads, one per lane,
//! started on first use, or on the thread that waits for it: a thread in
//! `result()`/`exception()` before any worker took the job runs it itself
//! on an idle lane ([`Lanes::try_hold`](crate::lane::Lanes::try_hold)), so
//! `f = ns.read_async(...); f.result()` does not wait for a worker to wake.
//! The job is taken under the GIL and its mutex, by exactly one of them.
//! Whoever runs it holds the GIL only to take and start it
//! (`set_running_or_notify_cancel`) and to finish it; the transfer itself
//! runs without it.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::{fail, FResult, Fail, Kind};
use crate::namespace::NsShared;
use crate::plan::Plan;
use crate::target::Target;

/// A job: runs on a worker thread, without the GIL.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The worker threads of one namespace.
pub(crate) struct Workers {
    threads: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    tx: Option<Sender<Job>>,
    handles: Vec<JoinHandle<()>>,
    closed: bool,
}

impl Workers {
    pub(crate) fn new(threads: usize) -> Self {
        Workers {
            threads: threads.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Queues `job`, starting the threads on first use.
    pub(crate) fn submit(&self, job: Job) -> FResult<()> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.closed {
            return Err(fail(Kind::Closed, "the namespace was closed"));
        }
        if inner.tx.is_none() {
            let (tx, rx) = channel::<Job>();
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..self.threads {
                let rx = rx.clone();
                let h = std::thread::Builder::new()
                    .name(format!("gpunvme-io-{i}"))
                    .spawn(move || work(&rx))
                    .map_err(|e| fail(Kind::Invalid, format!("cannot start an I/O thread: {e}")))?;
                inner.handles.push(h);
            }
            inner.tx = Some(tx);
        }
        inner
            .tx
            .as_ref()
            .expect("set above")
            .send(job)
            .map_err(|_| fail(Kind::Closed, "the I/O threads are gone"))
    }

    /// No new jobs; queued ones still run (they see the closed namespace
    /// and fail their futures). Returns the threads, to join without the
    /// GIL.
    pub(crate) fn close(&self) -> Vec<JoinHandle<()>> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.closed = true;
        inner.tx = None;
        std::mem::take(&mut inner.handles)
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        // Hold the receiver only while taking one job.
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        match job {
            Ok(job) => job(),
            Err(_) => return, // the namespace is gone
        }
    }
}

/// What an async transfer runs: its plan and buffer.
pub(crate) struct Body {
    pub(crate) plan: Plan,
    /// Dropped with the GIL held (it may hold Python buffers).
    pub(crate) target: Target,
}

/// `_native._AsyncJob`: the job of one `AsyncFuture`, run once by a worker
/// or by a waiter (`AsyncFuture.result()`). It does not hold its future
/// (whoever runs it is handed that), so the two make no reference cycle.
#[pyclass(module = "gpunvme._native", name = "_AsyncJob", frozen)]
pub(crate) struct AsyncJob {
    sh: Arc<NsShared>,
    /// `None` once taken. Taken with the GIL held.
    body: Mutex<Option<Body>>,
}

impl AsyncJob {
    pub(crate) fn new(sh: Arc<NsShared>, body: Body) -> Self {
        AsyncJob {
            sh,
            body: Mutex::new(Some(body)),
        }
    }

    fn take(&self, _py: Python<'_>) -> Option<Body> {
        self.body.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn taken(&self) -> bool {
        self.body
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }

    /// Takes and starts the job for a worker; `None` if a waiter took it
    /// or the future was cancelled.
    fn take_started(&self, py: Python<'_>, fut: &Py<PyAny>) -> Option<Body> {
        let body = self.take(py)?;
        if start(py, fut) {
            Some(body)
        } else {
            drop(body); // cancelled: the buffer goes, with the GIL
            None
        }
    }
}

/// The transfer of `body`, on `lane` when given (a waiter's), else on a
/// lane [`Lanes::with_lane`](crate::lane::Lanes::with_lane) waits for.
/// Without the GIL; a panic completes the future with an error.
fn transfer(
    sh: &NsShared,
    held: Option<crate::lane::Held<'_>>,
    body: &mut Body,
) -> Result<usize, Fail> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sh.check()?;
        let Body { plan, target } = body;
        match held {
            Some(mut h) => h.with(|cfg, lane| lane.run(cfg, plan, target))?,
            None => sh
                .lanes()
                .with_lane(|cfg, lane| lane.run(cfg, plan, target))?,
        }
        Ok(plan.bytes)
    }))
    .unwrap_or_else(|_| Err(fail(Kind::Invalid, "internal error: the transfer panicked")))
}

/// What a worker does with a job: take it under the GIL (unless a waiter
/// did), run it without, finish the future.
pub(crate) fn run_on_worker(job: Py<AsyncJob>, fut: Py<PyAny>) {
    if job.get().taken() {
        // A waiter ran it: nothing to do, and no need for the GIL but to
        // drop the references.
        Python::attach(|_| drop((job, fut)));
        return;
    }
    // The references go with the GIL held, in the same attach, when there
    // is nothing to run.
    let mut refs = Some((job, fut));
    let body = Python::attach(|py| {
        let (job, fut) = refs.as_ref().expect("set");
        let b = job.get().take_started(py, fut);
        if b.is_none() {
            drop(refs.take());
        }
        b
    });
    let (Some(mut body), Some((job, fut))) = (body, refs) else {
        return;
    };
    let r = transfer(&job.get().sh, None, &mut body);
    finish(fut, r, (body, job));
}

#[pymethods]
impl AsyncJob {
    /// Runs the job on this thread if nobody took it yet and a lane is
    /// idle (then completes ``fut``); True if it ran it (or found ``fut``
    /// cancelled), False if a worker has it or must (no idle lane, a
    /// forked child, a closed namespace).
    fn _run_here(&self, py: Python<'_>, fut: Py<PyAny>) -> bool {
        if self.taken() {
            return false;
        }
        let Some(held) = self.sh.lanes().try_hold() else {
            return false;
        };
        // The GIL is held from here to the start: the worker's take, also
        // under it, sees the job gone.
        let Some(mut body) = self.take(py) else {
            return false;
        };
        if !start(py, &fut) {
            drop(held);
            drop(body);
            return true;
        }
        let sh = &self.sh;
        let r = py.detach(|| transfer(sh, Some(held), &mut body));
        finish(fut, r, body);
        true
    }
}

/// A new `gpunvme._future.AsyncFuture` of `job`.
pub(crate) fn new_future(py: Python<'_>, job: Py<AsyncJob>) -> PyResult<Py<PyAny>> {
    static FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cls = FUTURE.get_or_try_init(py, || -> PyResult<_> {
        Ok(py
            .import("gpunvme._future")?
            .getattr("AsyncFuture")?
            .unbind())
    })?;
    Ok(cls.bind(py).call1((job,))?.unbind())
}

/// Marks `fut` running; false if it was cancelled meanwhile.
fn start(py: Python<'_>, fut: &Py<PyAny>) -> bool {
    fut.bind(py)
        .call_method0("set_running_or_notify_cancel")
        .and_then(|r| r.extract::<bool>())
        .unwrap_or(false)
}

/// Completes `fut` with `result` (its value, or the exception), then drops
/// `keep` (the buffers the job held) with the GIL held.
fn finish<K>(fut: Py<PyAny>, result: Result<usize, Fail>, keep: K) {
    Python::attach(|py| {
        drop(keep);
        let f = fut.bind(py);
        let r = match result {
            Ok(v) => f.call_method1("set_result", (v,)),
            Err(e) => f.call_method1("set_exception", (e.into_py(py).into_value(py),)),
        };
        if let Err(e) = r {
            // Only a misuse of the future (set twice) gets here.
            e.write_unraisable(py, Some(f));
        }
    });
}
