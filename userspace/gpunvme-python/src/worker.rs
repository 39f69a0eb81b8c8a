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

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;

use crate::errors::{fail, FResult, Fail, Kind};
use crate::namespace::NsShared;
use crate::plan::Plan;
use crate::target::Target;

/// How long a queued job is left to a waiter before a worker takes it: a
/// thread that calls `result()` right after the `*_async` call runs it
/// itself, and no worker wakes (the waker's timer, armed at the submit, is
/// disarmed when the waiter takes the job). A job something else waits
/// for (a done-callback, `asyncio.wrap_future`, `concurrent.futures.wait`,
/// `as_completed`: `AsyncJob::_hurry`) is taken at once, and so is one
/// queued longer than this behind others.
pub(crate) const GRACE: Duration = Duration::from_micros(250);

/// A queued job and its future.
struct Entry {
    job: Py<AsyncJob>,
    fut: Py<PyAny>,
    at: Instant,
}

/// The worker threads of one namespace.
pub(crate) struct Workers {
    threads: usize,
    queue: Arc<Queue>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

struct Queue {
    st: Mutex<QState>,
    more: Condvar,
    /// Wakes the waker thread [`GRACE`] after a job is queued while the
    /// workers sleep (arming a timer wakes nobody now).
    timer: Timer,
}

#[derive(Default)]
struct QState {
    jobs: VecDeque<Entry>,
    started: bool,
    closed: bool,
    /// Workers waiting without a deadline (only a notify wakes them).
    sleeping: usize,
    /// The timer is set.
    armed: bool,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, QState> {
        self.st.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A CLOCK_MONOTONIC timerfd: the lazy wake of the workers.
struct Timer {
    fd: OwnedFd,
}

impl Timer {
    fn new() -> std::io::Result<Self> {
        // SAFETY: no pointer arguments; a new descriptor or -1.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just made and is owned by nothing else.
        Ok(Timer {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Fires once `after` from now (at least a nanosecond); `None` disarms.
    fn set(&self, after: Option<Duration>) {
        let d = after.map_or(Duration::ZERO, |d| d.max(Duration::from_nanos(1)));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: `spec` is a valid itimerspec for the call's duration; the
        // old value is not asked for (null). It cannot fail on our own
        // timerfd with a valid value; if it did, the workers would still
        // wake at the next notify or the next submit.
        unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
    }

    /// Blocks until it fired (or a signal interrupted the read).
    fn wait(&self) {
        let mut n = 0u64;
        // SAFETY: reads at most 8 bytes into `n`, which lives across the call.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            // Never seen on a timerfd of our own; should it happen, the
            // waker polls at GRACE instead of spinning.
            std::thread::sleep(GRACE);
        }
    }
}

impl Workers {
    pub(crate) fn new(threads: usize) -> FResult<Self> {
        let timer = Timer::new().map_err(|e| {
            fail(
                Kind::Invalid,
                format!("cannot make the I/O threads' timer: {e}"),
            )
        })?;
        Ok(Workers {
            threads: threads.max(1),
            queue: Arc::new(Queue {
                st: Mutex::new(QState::default()),
                more: Condvar::new(),
                timer,
            }),
            handles: Mutex::new(Vec::new()),
        })
    }

    /// Queues `job` (the future `fut`'s), starting the threads on first use.
    pub(crate) fn submit(&self, job: Py<AsyncJob>, fut: Py<PyAny>) -> FResult<()> {
        let mut st = self.queue.lock();
        if st.closed {
            return Err(fail(Kind::Closed, "the namespace was closed"));
        }
        if !st.started {
            let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
            for i in 0..self.threads {
                let q = self.queue.clone();
                let h = std::thread::Builder::new()
                    .name(format!("gpunvme-io-{i}"))
                    .spawn(move || work(&q))
                    .map_err(|e| fail(Kind::Invalid, format!("cannot start an I/O thread: {e}")))?;
                handles.push(h);
            }
            let q = self.queue.clone();
            let h = std::thread::Builder::new()
                .name("gpunvme-io-waker".into())
                .spawn(move || waker(&q))
                .map_err(|e| fail(Kind::Invalid, format!("cannot start an I/O thread: {e}")))?;
            handles.push(h);
            st.started = true;
        }
        st.jobs.push_back(Entry {
            job,
            fut,
            at: Instant::now(),
        });
        // The lazy wake: a sleeping worker is woken by the timer, GRACE
        // from now, if no waiter took the job by then (which disarms it).
        // A worker in a timed wait looks at the queue by the front job's
        // deadline, which comes before this one's; a busy one when done.
        if st.sleeping > 0 && !st.armed {
            st.armed = true;
            self.queue.timer.set(Some(GRACE));
        }
        Ok(())
    }

    /// Takes `job` out of the queue (a waiter runs it); with the GIL held,
    /// which the references' drop needs.
    fn forget(&self, _py: Python<'_>, job: &AsyncJob) {
        let gone = {
            let mut st = self.queue.lock();
            let gone = st
                .jobs
                .iter()
                .position(|e| std::ptr::eq(e.job.get(), job))
                .and_then(|i| st.jobs.remove(i));
            if st.jobs.is_empty() && st.armed {
                // Nothing left for a worker: nobody wakes.
                st.armed = false;
                self.queue.timer.set(None);
            }
            gone
        };
        drop(gone);
    }

    /// Wakes the workers: a job wants taking now (a done-callback).
    fn hurry(&self) {
        self.queue.more.notify_all();
    }

    /// No new jobs; queued ones still run (they see the closed namespace
    /// and fail their futures). Returns the threads, to join without the
    /// GIL.
    pub(crate) fn close(&self) -> Vec<JoinHandle<()>> {
        self.queue.lock().closed = true;
        self.queue.more.notify_all();
        self.queue.timer.set(Some(Duration::ZERO)); // the waker sees it
        std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // The threads end once the queue is empty (not joined: this may be
        // one of them, dropping the last reference to the namespace).
        drop(self.close());
    }
}

/// The waker thread: when the timer fires, wakes the workers if a job
/// is still queued (nobody waited for it within [`GRACE`]); ends at close.
fn waker(q: &Queue) {
    loop {
        q.timer.wait();
        let mut st = q.lock();
        if st.closed {
            return;
        }
        st.armed = false;
        if !st.jobs.is_empty() {
            drop(st);
            q.more.notify_all();
        }
    }
}

/// A worker: takes the front job once nobody took it within [`GRACE`]
/// (at once after close or for a hurried job), runs it, repeats; ends when
/// the queue is closed and empty.
fn work(q: &Queue) {
    loop {
        let mut stale = Vec::new();
        let entry = {
            let mut st = q.lock();
            loop {
                if let Some(front) = st.jobs.front() {
                    let j = front.job.get();
                    if j.taken() {
                        stale.extend(st.jobs.pop_front());
                        continue;
                    }
                    let age = front.at.elapsed();
                    if st.closed || age >= GRACE || j.hurried.load(Ordering::Acquire) {
                        break st.jobs.pop_front();
                    }
                    st = q
                        .more
                        .wait_timeout(st, GRACE - age)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                    continue;
                }
                if st.closed {
                    break None;
                }
                st.sleeping += 1;
                st = q.more.wait(st).unwrap_or_else(|p| p.into_inner());
                st.sleeping -= 1;
            }
        };
        if !stale.is_empty() {
            Python::attach(|_| drop(stale));
        }
        match entry {
            Some(e) => run_on_worker(e.job, e.fut),
            None => return,
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
    /// A done-callback waits for it: no [`GRACE`].
    hurried: AtomicBool,
}

impl AsyncJob {
    pub(crate) fn new(sh: Arc<NsShared>, body: Body) -> Self {
        AsyncJob {
            sh,
            body: Mutex::new(Some(body)),
            hurried: AtomicBool::new(false),
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
        self.sh.workers().forget(py, self);
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

    /// Has a worker take the job without waiting for a waiter (it has a
    /// done-callback, ``asyncio.wrap_future``, ``concurrent.futures.wait``
    /// or ``as_completed`` waits for it).
    fn _hurry(&self) {
        if !self.hurried.swap(true, Ordering::AcqRel) && self.sh.is_usable_here() {
            self.sh.workers().hurry();
        }
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
