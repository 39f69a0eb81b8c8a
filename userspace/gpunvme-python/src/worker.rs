// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Asynchronous transfers: `*_async` calls return a
//! `concurrent.futures.Future` (so `result(timeout)`, `wait`,
//! `as_completed` and `asyncio.wrap_future` work) and run on worker
//! threads, one per lane, started on first use. A worker holds the GIL
//! only to start a job (`set_running_or_notify_cancel`) and to finish it;
//! the transfer itself runs without it.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::{fail, FResult, Fail, Kind};

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

/// A new `concurrent.futures.Future`.
pub(crate) fn new_future(py: Python<'_>) -> PyResult<Py<PyAny>> {
    static FUTURE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cls = FUTURE.get_or_try_init(py, || -> PyResult<_> {
        Ok(py.import("concurrent.futures")?.getattr("Future")?.unbind())
    })?;
    Ok(cls.bind(py).call0()?.unbind())
}

/// Marks `fut` running; false if it was cancelled meanwhile.
pub(crate) fn start(fut: &Py<PyAny>) -> bool {
    Python::attach(|py| {
        fut.bind(py)
            .call_method0("set_running_or_notify_cancel")
            .and_then(|r| r.extract::<bool>())
            .unwrap_or(false)
    })
}

/// Completes `fut` with `result` (its value, or the exception), then drops
/// `keep` (the buffers the job held) with the GIL held.
pub(crate) fn finish<K>(fut: Py<PyAny>, result: Result<usize, Fail>, keep: K) {
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
