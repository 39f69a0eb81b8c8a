// SPDX-License-Identifier: GPL-2.0-only

//! One open file: the ioctls that create and destroy its queue pairs and
//! host-buffer mappings, mmap, and teardown at close. The memory itself is
//! held in the shared DMA registry (see `dma/registry.rs`), named by this
//! file's id.
//!
//! Lock order: admin, then dma. Neither is held across a user copy, and
//! dma is the only lock mmap takes (under the mmap lock).
//!
//! The ioctls are grouped by what they manage, one file each (`file/`):
//! `info_ioctl` (GET_INFO), `owner_ioctl` (CLAIM_OWNER), `qpair_ioctls`
//! (CREATE_QPAIR, DESTROY_QPAIR), `map_ioctls` (MAP_HOST, UNMAP),
//! `dmabuf_ioctls` (EXPORT, MAP_DMABUF) and `mmap` (mmap, faults). This
//! file is the open file itself: its state, open, `poll()` and close.

use core::ffi::c_void;
use kernel::{
    bindings,
    fs::File,
    prelude::*,
    sync::{atomic::Atomic, poll::PollTable, Arc},
};

use crate::controller::shared::Shared;
use crate::dma::buffers::Buffers;
use crate::dma::registry::{FileId, Opener, Quarantined, QueueState};
use crate::shim;

pub(crate) struct OpenState {
    pub(crate) shared: Arc<Shared>,
    file: *mut bindings::file,
    id: FileId,
    /// Who opened it (debugfs `relay_cpu_per_file` names it).
    opener: Opener,
    /// The controller's epoch at open: once it moves on (the controller
    /// failed or went away), every call fails and every mapping faults.
    epoch: u64,
    /// The namespace a namespace node's file is limited to; 0 for the
    /// controller node.
    node_nsid: u32,
    /// The pages this file mapped: all its shared-mode commands may name.
    buffers: Arc<Buffers>,
    next_handle: Atomic<u32>,
}

// SAFETY: `file` is only handed back to the shared list (never dereferenced
// here); everything else is `Send + Sync`.
unsafe impl Send for OpenState {}
// SAFETY: see above.
unsafe impl Sync for OpenState {}

/// Read an ioctl argument and check its header; log and EINVAL on a bad one.
macro_rules! read_arg {
    ($self:ident, $ty:ty, $arg:expr, $name:literal) => {{
        let (mut reader, writer) = kernel::uaccess::UserSlice::new(
            kernel::uaccess::UserPtr::from_addr($arg),
            size_of::<$ty>(),
        )
        .reader_writer();
        let req: $ty = reader.read()?;
        if let Err(e) =
            crate::uapi::check_header(req.size, req.version, size_of::<$ty>(), &req.reserved)
        {
            dev_warn!($self.shared.dev, "{}: bad argument: {:?}\n", $name, e);
            return Err(EINVAL);
        }
        (req, writer)
    }};
}

mod dmabuf_ioctls;
mod info_ioctl;
mod map_ioctls;
mod mmap;
mod owner_ioctl;
mod qpair_ioctls;

impl OpenState {
    pub(crate) fn new(shared: Arc<Shared>, file: &File, node_nsid: u32) -> Result<KBox<Self>> {
        let epoch = shared.open_epoch()?;
        let buffers = Arc::pin_init(Buffers::new(), GFP_KERNEL)?;
        let raw = shim::file_ptr(file);
        let id = shared.register_file(raw)?;
        let sh = shared.clone();
        KBox::new(
            Self {
                shared,
                file: raw,
                id,
                opener: Opener::current(),
                epoch,
                node_nsid,
                buffers,
                next_handle: Atomic::new(1),
            },
            GFP_KERNEL,
        )
        .map_err(|e| {
            sh.unregister_file(raw);
            e.into()
        })
    }

    /// Ok while the controller serves this file: ENODEV once it is gone
    /// (unbound, removed, shut down, suspended), EIO once it failed (fatal
    /// status, PCI error), even after it was re-initialised for new files.
    pub(crate) fn alive(&self) -> Result {
        self.shared.check(self.epoch)
    }

    /// For `poll()`: has this file been cut off?
    pub(crate) fn cut_off(&self) -> bool {
        self.alive().is_err()
    }
}

/// `poll()` on an open file: true (the shim answers EPOLLERR | EPOLLHUP)
/// once the file is cut off (the controller failed, went away or was
/// unbound); the waiter is woken when that happens.
#[no_mangle]
extern "C" fn gpunvme_file_poll(
    state: *mut c_void,
    file: *mut bindings::file,
    table: *mut bindings::poll_table,
) -> bool {
    // SAFETY: `state` is the file's private data (a `KBox<OpenState>` made
    // at open, freed at release, which cannot run during a poll).
    let me = unsafe { &*state.cast_const().cast::<OpenState>() };
    // SAFETY: `file` is the file being polled, valid for the call.
    let file = unsafe { File::from_raw_file(file) };
    // SAFETY: the poll table is valid (or null) for the call.
    let table = unsafe { PollTable::from_raw(table) };
    table.register_wait(file, &me.shared.poll_cv);
    me.cut_off()
}

/// Close: delete this file's queues on the controller (SQ before CQ), then
/// free their memory and unpin its buffers. If a delete fails, now or at an
/// earlier DESTROY_QPAIR, all of the file's memory is kept until the
/// controller is disabled (re-initialised once idle, or unbound).
impl Drop for OpenState {
    fn drop(&mut self) {
        let sh = &self.shared;
        let _busy = sh.busy();
        // Once the controller is gone, unbind frees what this file had.
        let take = |sh: &Shared| {
            let mut dma = sh.dma.lock();
            if sh.unbound() {
                return Ok((KVec::new(), KVec::new()));
            }
            dma.take_file(self.id)
        };
        let taken = take(sh);
        let Ok((queues, maps)) = taken else {
            dev_err!(
                sh.dev,
                "out of memory at close: this file's queues stay until unbind\n"
            );
            sh.unregister_file(self.file);
            return;
        };
        let mut stuck = false;
        for e in queues {
            // Peers and the relay let go before the queues are deleted and
            // their qid can be handed out again.
            let live = e.state == QueueState::Live;
            let (q, held, outstanding) = e.let_go();
            if live {
                stuck |= self.retire(q, held, outstanding).is_err();
            } else if held.still() {
                // Retired: the controller confirmed the delete.
                sh.lend(q, held);
            }
        }
        // What `retire` kept as retired (no mapping is left: the file is
        // being released) goes now, or waits for its importers.
        if let Ok((retired, _)) = take(sh) {
            for e in retired {
                let (q, held, _) = e.let_go();
                if held.still() {
                    sh.lend(q, held);
                }
            }
        }
        // A queue ID the file still holds names a queue whose delete the
        // controller never confirmed, now or at an earlier DESTROY_QPAIR
        // that timed out: its commands may still run, into any of the
        // file's buffers. They are kept until the controller is disabled.
        stuck |= sh.qids_held(self.id) != 0;
        for m in maps {
            if stuck {
                sh.quarantine(Quarantined::Buffer(m.map));
            }
        }
        sh.orphan_qids(self.id);
        sh.release_owner(self.id);
        sh.unregister_file(self.file);
        sh.free_unreached();
        sh.recover_if_idle();
        if sh.owner_left() {
            dev_warn!(
                sh.dev,
                "its owner left while an importer holds one of its exports: no file is admitted (EBUSY) until that importer lets go and the controller is reset\n"
            );
        }
    }
}
