// SPDX-License-Identifier: GPL-2.0-only

//! State shared by the binding and every open file of one controller.
//!
//! All memory the controller may DMA into (admin queue, I/O queues, pinned
//! host buffers) is owned here, not by files, so that unbind can free it
//! right after disabling the controller: nothing the device could still
//! DMA into is ever freed, and nothing outlives the binding.
//!
//! Each rule about it lives in a child module named after it; they build
//! on this file (the state, the epoch, the admin queue's lock) and on each
//! other in one direction only:
//! - `tenancy`: who may hold what (queue IDs, the owner, `OWNER_LEFT`);
//! - `quarantine`: what is kept and when it may be freed (uses `tenancy`
//!   to hand orphaned queue IDs back after a disable);
//! - `failure`: cutting every file off and stopping the controller (uses
//!   `tenancy` and `quarantine`);
//! - `restart`: re-initialising it (uses all three);
//! - `ns_change`: namespace changes while files are served.

use kernel::{
    bindings,
    device::{Bound, Device},
    io::Io,
    new_mutex, new_poll_condvar,
    pci::DevresBar,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Relaxed},
        poll::PollCondVar,
        Arc, Mutex,
    },
};

use crate::bridge::RelayHost;
use crate::controller::admin::AdminQueue;
use crate::controller::geometry::Geometry;
use crate::controller::regs::{Cap, CC, CSTS};
use crate::controller::{Bar0, FakeCsts, BAR0_MIN, FAKE_CFS, FAKE_ONES};
use crate::dma::registry::{DmaRegistry, FileId};
use crate::uapi;

pub(crate) mod failure;
mod ns_change;
mod quarantine;
mod restart;
mod tenancy;

use tenancy::Tenancy;

/// `Shared::state`: the controller serves files.
const UP: u32 = 0;
/// It failed or is suspended: every file of the old epoch is cut off, and
/// new files are refused until it is re-initialised.
const DOWN: u32 = 1;
/// Unbound: nothing works any more.
const GONE: u32 = 2;

/// An open file of the device node, kept so its mappings can be zapped.
struct FilePtr(*mut bindings::file);
// SAFETY: a `struct file` pointer may be used from any thread; it is only
// dereferenced (by the shim) while the file is open, which the list's lock
// guarantees (removed at release).
unsafe impl Send for FilePtr {}

#[pin_data(PinnedDrop)]
pub(crate) struct Shared {
    /// The PCI device, for log lines; the reference stays valid after unbind.
    pub(crate) dev: ARef<Device>,
    /// Identity read at probe; `size`/`version` are filled per call. Its
    /// namespaces' sizes and formats are those of bind: what they are now
    /// is in `geometry`.
    pub(crate) info: uapi::Info,
    /// Each namespace's size and format now (the validator's view).
    pub(crate) geometry: Arc<Geometry>,
    pub(crate) cap: Cap,
    /// BAR0, revoked by the driver core at unbind.
    pub(crate) bar: DevresBar<BAR0_MIN>,
    /// BAR0's length: a queue whose doorbells lie beyond it is refused.
    pub(crate) bar_len: usize,
    /// `None` once unbind has disabled the controller and freed the queue.
    #[pin]
    admin: Mutex<Option<AdminQueue>>,
    #[pin]
    pub(crate) dma: Mutex<DmaRegistry>,
    /// Who holds which I/O queue ID, and the owner, under one lock so a
    /// claim and a queue creation can never both succeed.
    #[pin]
    tenancy: Mutex<Tenancy>,
    #[pin]
    files: Mutex<KVec<FilePtr>>,
    next_file: Atomic<u64>,
    /// UP, DOWN or GONE; changed under the `dma` lock (mmap faults check
    /// it there) together with `epoch`.
    state: Atomic<u32>,
    /// Bumped each time the controller stops serving its files: a file
    /// belongs to the epoch it was opened in, and is cut off (its calls
    /// fail, its mappings fault) once the epoch has moved on.
    epoch: Atomic<u64>,
    /// The errno of the last failure (what cut-off files' calls return).
    fail_errno: Atomic<i32>,
    /// Woken when the controller stops serving files: `poll()` waits here.
    #[pin]
    pub(crate) poll_cv: PollCondVar,
    /// Calls (close, DESTROY_QPAIR, UNMAP, a failed hand-out) that took DMA
    /// memory out of `dma` to free or retire it: unbind waits for them, so
    /// nothing is freed after the device is unbound (see [`Busy`]).
    busy: Atomic<u32>,
    /// Test knob (debugfs `gpunvme-<bdf>/mmap_delay_ms`): mmap sleeps this
    /// long after its checks, so a test can unbind in that window.
    pub(crate) mmap_delay_ms: Atomic<u32>,
    /// Test knob (debugfs `gpunvme-<bdf>/free_delay_ms`): a free of deleted
    /// queues that no mapping or importer reaches sleeps this long after
    /// taking them from the registry, holding its `Busy`, so a test can
    /// unbind in that window.
    pub(crate) free_delay_ms: Atomic<u32>,
    /// Fault injection (debugfs `gpunvme-<bdf>/drop_admin_doorbells`): the
    /// next N admin SQ doorbell writes are not made, so those commands get
    /// no completion, as on a hung controller.
    pub(crate) drop_admin_doorbells: Atomic<u32>,
    /// Fault injection (debugfs `gpunvme-<bdf>/fake_csts`): CSTS reads
    /// with CFS set (`FAKE_CFS`, until the controller is disabled, as a
    /// reset clears a real CFS), or every register read all-ones
    /// (`FAKE_ONES`, as after a surprise removal, until unbind).
    pub(crate) fake_csts: FakeCsts,
    /// Test knob (debugfs `gpunvme-<bdf>/relay_hold_qid`): the relay of
    /// shared pair `qid` leaves its real CQ alone, so the commands it
    /// accepted stay in flight as far as the module can tell.
    pub(crate) relay_hold_qid: Atomic<u32>,
}

impl Shared {
    pub(crate) fn new(
        dev: ARef<Device>,
        info: uapi::Info,
        cap: Cap,
        bar: DevresBar<BAR0_MIN>,
        bar_len: usize,
        admin: AdminQueue,
    ) -> Result<Arc<Self>> {
        let geometry = Arc::new(Geometry::new(&info), GFP_KERNEL)?;
        Arc::pin_init(
            try_pin_init!(Self {
                dev,
                geometry,
                info,
                cap,
                bar,
                bar_len,
                admin <- new_mutex!(Some(admin)),
                dma <- new_mutex!(DmaRegistry::default()),
                tenancy <- new_mutex!(Tenancy::default()),
                files <- new_mutex!(KVec::new()),
                next_file: Atomic::new(1),
                state: Atomic::new(UP),
                epoch: Atomic::new(1),
                fail_errno: Atomic::new(ENODEV.to_errno()),
                poll_cv <- new_poll_condvar!("gpunvme::poll"),
                busy: Atomic::new(0),
                mmap_delay_ms: Atomic::new(0),
                free_delay_ms: Atomic::new(0),
                drop_admin_doorbells: Atomic::new(0),
                relay_hold_qid: Atomic::new(0),
                fake_csts: FakeCsts::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// Has unbind begun? (Read under the `dma` lock by the `Busy` callers.)
    pub(crate) fn unbound(&self) -> bool {
        self.state.load(Acquire) == GONE
    }

    /// The epoch a file opened now belongs to; ENODEV (or the failure's
    /// errno) while the controller does not serve files.
    pub(crate) fn open_epoch(&self) -> Result<u64> {
        let epoch = self.epoch.load(Acquire);
        match self.state.load(Acquire) {
            UP => Ok(epoch),
            GONE => Err(ENODEV),
            _ => Err(Error::from_errno(self.fail_errno.load(Relaxed))),
        }
    }

    /// Ok while a file of `epoch` is served: ENODEV once unbound, else the
    /// errno of the failure that cut it off.
    pub(crate) fn check(&self, epoch: u64) -> Result {
        if self.state.load(Acquire) == GONE {
            return Err(ENODEV);
        }
        if self.epoch.load(Acquire) != epoch {
            return Err(Error::from_errno(self.fail_errno.load(Relaxed)));
        }
        Ok(())
    }

    /// CSTS as the `fake_csts` knob makes it look (all-ones when the read
    /// fails, as a dead register reads).
    pub(crate) fn csts(&self, bar: &Bar0<'_>) -> CSTS {
        let v = bar.try_read(CSTS).unwrap_or(CSTS::from_raw(u32::MAX));
        match self.fake_csts.load(Relaxed) {
            FAKE_ONES => CSTS::from_raw(u32::MAX),
            FAKE_CFS => v.with_cfs(true),
            _ => v,
        }
    }

    /// CC, with the same knob (all-ones after a faked removal).
    fn cc(&self, bar: &Bar0<'_>) -> CC {
        match self.fake_csts.load(Relaxed) {
            FAKE_ONES => CC::from_raw(u32::MAX),
            _ => bar.try_read(CC).unwrap_or(CC::from_raw(u32::MAX)),
        }
    }

    /// Run `f` for a file of `epoch`, with the admin queue and the device
    /// known to be bound. `ring(offset, value)` writes a BAR0 doorbell.
    pub(crate) fn with_admin<R>(
        &self,
        epoch: u64,
        f: impl FnOnce(&Device<Bound>, &mut AdminQueue, &dyn Fn(usize, u32) -> Result) -> Result<R>,
    ) -> Result<R> {
        let mut guard = self.admin.lock();
        self.check(epoch)?;
        let admin = Option::as_mut(&mut *guard).ok_or(ENODEV)?;
        // SAFETY: unbind sets GONE, then takes this lock, and only then
        // lets the device become unbound. We hold the lock and saw the
        // state not GONE, so the device stays bound for the whole of `f`.
        let dev = unsafe { self.dev.as_bound() };
        let ring = |offset: usize, value: u32| self.ring_admin(offset, value);
        f(dev, admin, &ring)
    }

    /// Fault injection: consume one of the admin doorbell writes to drop.
    fn drop_admin_doorbell(&self) -> bool {
        let mut n = self.drop_admin_doorbells.load(Relaxed);
        while n != 0 {
            match self.drop_admin_doorbells.cmpxchg(n, n - 1, Relaxed) {
                Ok(_) => {
                    dev_warn!(self.dev, "fault injection: admin doorbell write dropped\n");
                    return true;
                }
                Err(now) => n = now,
            }
        }
        false
    }

    /// A new open file: its id, and its mappings registered for zapping.
    pub(crate) fn register_file(&self, file: *mut bindings::file) -> Result<FileId> {
        self.files.lock().push(FilePtr(file), GFP_KERNEL)?;
        Ok(self.next_file.fetch_add(1, Relaxed))
    }

    pub(crate) fn unregister_file(&self, file: *mut bindings::file) {
        self.files.lock().retain(|f| f.0 != file);
    }
}

#[pinned_drop]
impl PinnedDrop for Shared {
    fn drop(self: Pin<&mut Self>) {
        // Unbind takes the admin queue after disabling the controller; it is
        // still here only when probe failed after enabling it (the device
        // node could not be made). Stop the controller before the queue's
        // memory goes, or keep the memory if it will not stop.
        let Some(admin) = self.admin.lock().take() else {
            return;
        };
        // SAFETY: unbind takes the admin queue, so it is still here only
        // while probe runs, with the device bound.
        let dev = unsafe { self.dev.as_bound() };
        // `access`, not `try_access`: disabling sleeps.
        let stopped = self.bar.access(dev).is_ok_and(|bar| {
            crate::controller::disable(&self.dev, bar, self.cap, &self.fake_csts).is_ok()
        });
        if !stopped {
            dev_err!(
                self.dev,
                "controller did not stop after a failed probe: keeping its admin queue\n"
            );
            core::mem::forget(admin);
        }
    }
}

/// What the relays of the controller's shared pairs reach of it.
impl RelayHost for Shared {
    fn dev(&self) -> &Device {
        &self.dev
    }

    fn cap(&self) -> Cap {
        self.cap
    }

    fn ring(&self, offset: usize, value: u32) {
        if let Some(bar) = self.bar.try_access() {
            let _ = bar.try_write32(value, offset);
        }
    }

    fn holds_completions(&self, qid: u16) -> bool {
        self.relay_hold_qid.load(Relaxed) == u32::from(qid)
    }
}
