// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme.HostBuffer`: host memory mapped for the controller's DMA (a
//! [`DmaBuffer`]), which transfers use directly, without a copy.
//!
//! It exports its bytes through the buffer protocol (`memoryview(buf)`,
//! `numpy.frombuffer(buf, ...)`), and the library's rule carries over: the
//! controller never writes memory Python can reach. A transfer is refused
//! while views are alive (`BufferBusyError`, as a bytearray refuses to
//! resize while exported), and a view is refused while a transfer holds
//! the buffer. After a timeout the memory stays with the poisoned queue
//! pair, and the buffer refuses everything from then on.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use gpunvme::{Controller, DmaBuffer};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::{fail, FResult, Fail, Kind};

/// Host memory the controller transfers to and from directly.
///
/// Made by ``Device.alloc(nbytes)``; zero-filled. ``len(buf)`` is its size
/// in bytes. ``memoryview(buf)`` and ``numpy.frombuffer(buf, dtype)`` see
/// its bytes; a transfer raises BufferBusyError while any such view is
/// alive (release it first: ``del``, ``memoryview.release()`` or a
/// ``with memoryview(buf) as m:`` block). It belongs to the Device that
/// made it: namespaces of that Device only.
#[pyclass(module = "gpunvme", frozen)]
pub(crate) struct HostBuffer {
    ctrl: Arc<Controller>,
    len: usize,
    state: Mutex<State>,
}

struct State {
    /// `None` while a transfer holds it (or after it was lost).
    buf: Option<DmaBuffer>,
    /// Buffer-protocol views alive.
    views: usize,
    /// A transfer on it timed out: the memory stays with the queue pair.
    lost: bool,
}

impl HostBuffer {
    pub(crate) fn new(ctrl: &Arc<Controller>, nbytes: usize) -> FResult<Self> {
        if nbytes == 0 {
            return Err(fail(Kind::Invalid, "a HostBuffer of 0 bytes"));
        }
        Ok(HostBuffer {
            ctrl: ctrl.clone(),
            len: nbytes,
            state: Mutex::new(State {
                buf: Some(DmaBuffer::with_len(ctrl, nbytes)?),
                views: 0,
                lost: false,
            }),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn controller(&self) -> &Arc<Controller> {
        &self.ctrl
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Takes the memory for a transfer; it comes back when the loan drops.
    /// The caller checked on entry, in this thread, that this is the
    /// process that opened the buffer's controller (`Shared::check` and
    /// the same-file check): the fork counter alone is checked again.
    pub(crate) fn lend(me: &Bound<'_, HostBuffer>) -> FResult<Loan> {
        let hb = me.get();
        hb.ctrl.check_unforked()?;
        let mut st = hb.state();
        if st.lost {
            return Err(fail(Kind::BufferBusy, LOST));
        }
        if st.views > 0 {
            return Err(fail(
                Kind::BufferBusy,
                format!(
                    "{} view(s) of this HostBuffer are alive (memoryview, NumPy array): release \
                     them (del, .release(), or a with-block) before a transfer",
                    st.views
                ),
            ));
        }
        let buf = st.buf.take().ok_or_else(|| {
            fail(
                Kind::BufferBusy,
                "another transfer is using this HostBuffer",
            )
        })?;
        Ok(Loan {
            owner: me.clone().unbind(),
            buf: Some(buf),
        })
    }
}

const LOST: &str = "a transfer on this HostBuffer timed out: its memory stays with the \
                    poisoned queue pair until the pair is gone, and the buffer cannot be used again";

/// A HostBuffer's memory, lent to one transfer.
pub(crate) struct Loan {
    owner: Py<HostBuffer>,
    /// `None` after a timeout (the queue pair kept it).
    buf: Option<DmaBuffer>,
}

impl Loan {
    /// The buffer, for a transfer that hands it back with [`Loan::back`]
    /// (or never, after a timeout).
    pub(crate) fn take(&mut self) -> DmaBuffer {
        self.buf
            .take()
            .expect("a loan holds its buffer until taken")
    }

    pub(crate) fn back(&mut self, buf: Option<DmaBuffer>) {
        self.buf = buf;
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        // frozen + Sync: reachable without the GIL.
        let hb = self.owner.get();
        let mut st = hb.state();
        match self.buf.take() {
            Some(b) => st.buf = Some(b),
            None => st.lost = true,
        }
    }
}

#[pymethods]
impl HostBuffer {
    /// Size in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        let st = self.state();
        let what = if st.lost {
            "lost to a timed-out transfer".to_string()
        } else if st.buf.is_none() {
            "in a transfer".to_string()
        } else {
            format!("{} view(s)", st.views)
        };
        format!(
            "<gpunvme.HostBuffer of {} bytes on {}: {what}>",
            self.len,
            self.ctrl.path().display()
        )
    }

    /// # Safety
    ///
    /// Called by Python with a view to fill.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let py = slf.py();
        let hb = slf.get();
        hb.ctrl
            .check_process()
            .map_err(|e| Fail::from(e).into_py(py))?;
        let mut st = hb.state();
        if st.lost {
            return Err(fail(Kind::BufferBusy, LOST).into_py(py));
        }
        let Some(buf) = st.buf.as_mut() else {
            return Err(fail(
                Kind::BufferBusy,
                "a transfer is using this HostBuffer: wait for it before taking a view",
            )
            .into_py(py));
        };
        let ptr = buf.as_mut_slice().as_mut_ptr();
        // SAFETY: `view` is the caller's to fill; the memory is live while
        // the HostBuffer is (FillInfo takes a reference to it) and no
        // transfer can take it while `views` > 0 (see `lend`).
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                ptr.cast(),
                hb.len as ffi::Py_ssize_t,
                0,
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(py));
        }
        st.views += 1;
        Ok(())
    }

    /// # Safety
    ///
    /// Called by Python for a view `__getbuffer__` filled.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        let mut st = self.state();
        st.views = st.views.saturating_sub(1);
    }
}
