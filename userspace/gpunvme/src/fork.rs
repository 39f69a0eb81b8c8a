// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which process a controller belongs to, so that a forked child never
//! touches its parent's queues.
//!
//! `fork()` (Python's `os.fork`, PyTorch's DataLoader workers) copies the
//! open file and every [`crate::Controller`], [`crate::QueuePair`] and
//! [`crate::DmaBuffer`] value into the child, but not the queue mappings
//! (the module maps them `VM_DONTCOPY`): in the child a queue pair's
//! pointers name unmapped memory, and its ioctls would act on the
//! **parent's** open file (a child's drop would destroy the parent's
//! pairs and unmap its buffers). So each controller records the process
//! that opened it; in any other process every operation fails with
//! [`crate::Error::Forked`] and every drop leaks instead of issuing an
//! ioctl or unmapping anything, as CUDA does after a fork.
//!
//! The check is two loads on the fast path: a fork counter that a
//! `pthread_atfork` child handler bumps (so `QueuePair::push` and `reap`
//! make no system call), and, where an ioctl is about to be issued anyway,
//! `getpid()` as well (a child made by a raw `clone` that skips the
//! handlers is caught there).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

/// Forks this process has gone through, as seen from inside it: each child
/// starts with its parent's count plus one.
static FORKS: AtomicU64 = AtomicU64::new(0);
static HANDLER: Once = Once::new();

extern "C" fn in_child() {
    // Async-signal-safe: one atomic add, no allocation or lock.
    FORKS.fetch_add(1, Ordering::Relaxed);
}

fn pid() -> u32 {
    // SAFETY: getpid has no preconditions and cannot fail.
    unsafe { libc::getpid() as u32 }
}

/// The process a controller was opened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner {
    forks: u64,
    pid: u32,
}

impl Owner {
    /// The calling process.
    pub(crate) fn here() -> Self {
        HANDLER.call_once(|| {
            // SAFETY: registers a handler that only bumps an atomic; it
            // stays valid for the life of the process (a static fn).
            // If registration fails, `pid` still catches a child.
            unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        });
        Owner {
            forks: FORKS.load(Ordering::Relaxed),
            pid: pid(),
        }
    }

    /// The process id it was opened in.
    pub(crate) fn pid(self) -> u32 {
        self.pid
    }

    /// Cheap: whether no fork happened in this process's line since the
    /// open (no system call).
    pub(crate) fn unforked(self) -> bool {
        FORKS.load(Ordering::Relaxed) == self.forks
    }

    /// Whether this is the process that opened it (the fork counter and
    /// `getpid()`).
    pub(crate) fn is_current(self) -> bool {
        self.unforked() && pid() == self.pid
    }

    /// The calling process's id (for the error).
    pub(crate) fn current_pid() -> u32 {
        pid()
    }
}

#[cfg(test)]
mod tests {
    use crate::io::tests::{io, LBA};
    use crate::model::Model;
    use crate::{pattern, DmaBuffer, Error, Mode};

    /// Runs `child` in a forked child; its exit status: 0 when it returned
    /// true, 1 when false, 2 when it panicked.
    fn in_child(child: impl FnOnce() -> bool) -> i32 {
        // SAFETY: the child runs only `child`, which takes no lock another
        // thread could hold (the objects are this test's), then _exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(child)) {
                Ok(true) => 0,
                Ok(false) => 1,
                Err(_) => 2,
            };
            // SAFETY: leaves the child at once (no unwinding into the
            // test harness's copy, no atexit work of the parent's).
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "child died: status {status:#x}");
        libc::WEXITSTATUS(status)
    }

    /// To the real stderr: the harness's capture of `eprintln!` stays in
    /// the child's memory.
    fn say(msg: String) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "child: {msg}");
    }

    fn is_forked(e: &Error, parent: u32) -> bool {
        matches!(e, Error::Forked { opened_by, now, .. }
            if *opened_by == parent && *now == std::process::id())
    }

    /// In the child every call fails with a clear `Error::Forked` before
    /// it touches the queues (the old code pushed into the parent's SQ,
    /// which is not mapped in a child of the real module), and dropping
    /// the pair, the buffers and the controller there issues no ioctl
    /// (the old code's DESTROY_QPAIR and UNMAP would tear down the
    /// parent's pair on its file); the parent goes on.
    #[test]
    fn a_forked_child_neither_uses_nor_tears_down_the_parents_queues() {
        let (ctrl, model, mut io) = io(4, Mode::Shared, 64 << 10);
        let parent = std::process::id();
        let mut buf = DmaBuffer::new(&ctrl, 1).unwrap();
        pattern::fill(3, 0, LBA, buf.as_mut_slice());
        let buf = io.write(0, 8, buf, 0).unwrap();
        let spare = DmaBuffer::new(&ctrl, 1).unwrap();
        let before = model.log();
        let (ctrl_ref, io_ref, model_ref, buf_ref) = (&ctrl, &mut io, &model, &buf);

        let code = in_child(move || {
            let mut ok = !ctrl_ref.is_usable_here() && ctrl_ref.opened_by() == parent;
            let mut expect = |what: &str, e: &Error| {
                let msg = e.to_string();
                if !is_forked(e, parent) || !msg.contains("open the device again") {
                    say(format!("{what}: {e:?} ({msg}), not Error::Forked"));
                    ok = false;
                }
            };
            expect("info", &ctrl_ref.info().unwrap_err());
            let e = io_ref.read(0, 8, spare, 0).unwrap_err();
            expect("read", &e.error);
            let spare = e.buffer.expect("refused before any command: handed back");
            expect("flush", &io_ref.flush().unwrap_err());
            expect("new buffer", &DmaBuffer::new(ctrl_ref, 1).unwrap_err());
            // The child owns its copies of these values: drop them all
            // (the controller last), as a worker that exits cleanly would.
            // SAFETY: in this child the originals are never used or
            // dropped again (it _exits), so each value is dropped once.
            let (io, ctrl, model): (
                crate::Io,
                std::sync::Arc<crate::Controller>,
                std::sync::Arc<Model>,
            ) = unsafe {
                (
                    std::ptr::read(io_ref),
                    std::ptr::read(ctrl_ref),
                    std::ptr::read(model_ref),
                )
            };
            drop((io, spare));
            // SAFETY: as above, for the parent's `buf`.
            drop(unsafe { std::ptr::read(buf_ref) });
            drop(ctrl);
            if model.log() != before {
                say(format!("its drops reached the module: {:?}", model.log()));
                ok = false;
            }
            ok
        });
        assert_eq!(code, 0, "the child used or tore down the parent's queues");

        // The parent's pair and buffer are intact.
        assert!(ctrl.is_usable_here());
        let buf = io.read(0, 8, buf, 0).unwrap();
        assert_eq!(pattern::first_mismatch(3, 0, LBA, buf.as_slice()), None);
    }
}
