// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Where checked commands go: the kernel through io_uring
//! ([`super::uring`]), or a model namespace ([`super::model_ns`]) for
//! tests and the relay benchmark. One submitter per relay thread, shared
//! by the pairs it serves; a command is named by a 64-bit tag the relay
//! picks, and comes back with it.

use super::check::Checked;

/// A finished command: the tag it was pushed with, and the kernel's
/// answer in `struct io_uring_cqe` terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Done {
    pub(crate) tag: u64,
    /// The NVMe status field (15 bits: SC, SCT, CRD, More, DNR) when
    /// non-negative; a negated errno when the kernel could not run it.
    pub(crate) res: i32,
    /// Completion dword 0 (and 1).
    pub(crate) result: u64,
}

/// How a command's data went to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// No data, or one range by address.
    Plain,
    /// One range in a registered (fixed) buffer.
    Fixed,
    /// Several ranges (an iovec array).
    Vectored,
}

/// A submission path.
pub(crate) trait Submit {
    /// Commands that can be pushed before the next [`flush`](Self::flush).
    fn room(&mut self) -> usize;
    /// Queues `cmd` under `tag`. `iov` holds its ranges when its data is
    /// [`super::check::Data::Vectored`]; they stay valid (and untouched)
    /// until the command comes back.
    fn push(&mut self, tag: u64, cmd: &Checked, iov: &[libc::iovec]) -> Via;
    /// Hands what was pushed to the kernel, and in polled mode lets it
    /// poll for completions; `waiting` commands are in flight.
    fn flush(&mut self, waiting: bool) -> std::io::Result<()>;
    /// Every command that finished since the last call.
    fn reap(&mut self, out: &mut Vec<Done>);
    /// Waits at most `timeout` for a completion (commands are in flight
    /// and nothing else is to be done), when the submitter can sleep on
    /// one; a no-op otherwise.
    fn wait(&mut self, _timeout: std::time::Duration) {}
    /// io_uring fixed buffers: makes index `i` of the table region `i` of
    /// `iovecs` (an empty iovec: none). `Err` when the kernel refused, and
    /// commands then go without fixed buffers.
    fn set_buffers(&mut self, _iovecs: &[libc::iovec]) -> Result<(), String> {
        Ok(())
    }
}

/// The status field for a command the kernel failed with `-errno` (no
/// controller status): Host Aborted Command (SCT 3, SC 0x71) when it was
/// cancelled, Host Pathing Error (SCT 3, SC 0x70) otherwise (no live path,
/// a fabrics controller reconnecting, a transport error): the kernel's own
/// choices for such requests; neither sets DNR.
pub(crate) fn errno_status(errno: i32) -> u16 {
    match errno {
        libc::EINTR | libc::ECANCELED => 0x371,
        _ => 0x370,
    }
}
