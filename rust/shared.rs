// SPDX-License-Identifier: GPL-2.0

//! State shared by the binding and every open file of one controller.
//!
//! All memory the controller may DMA into (admin queue, I/O queues, pinned
//! host buffers) is owned here, not by files, so that unbind can free it
//! right after disabling the controller: nothing the device could still
//! DMA into is ever freed, and nothing outlives the binding.

use kernel::{
    bindings,
    device::{Bound, Device},
    io::Io,
    new_mutex,
    pci::DevresBar,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        Arc, Mutex,
    },
};

use crate::admin::AdminQueue;
use crate::controller::BAR0_MIN;
use crate::dma_registry::{DmaRegistry, FileId, Quarantined};
use crate::regs::Cap;
use crate::shim;
use crate::uapi;

/// I/O queue IDs the module hands out (bounded by the controller's grant).
const MAX_QUEUES: usize = 64;

/// A queue ID whose file closed without the queue being deleted: it may
/// still exist on the controller, so the ID is not handed out again until
/// the controller is re-initialised.
const ORPHAN: FileId = FileId::MAX;

/// Queue ID holders and the owner; file IDs start at 1, 0 is "nobody".
pub(crate) struct Tenancy {
    qids: [FileId; MAX_QUEUES],
    owner: FileId,
}

impl Default for Tenancy {
    fn default() -> Self {
        Self { qids: [0; MAX_QUEUES], owner: 0 }
    }
}

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
    /// Identity read at probe; `size`/`version` are filled per call.
    pub(crate) info: uapi::Info,
    pub(crate) cap: Cap,
    /// BAR0, revoked by the driver core at unbind.
    pub(crate) bar: DevresBar<BAR0_MIN>,
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
    /// Set at unbind, under the `dma` lock (mmap faults check it there):
    /// from then on the controller is gone for every file.
    gone: Atomic<bool>,
    /// Calls (close, DESTROY_QPAIR, UNMAP, a failed hand-out) that took DMA
    /// memory out of `dma` to free or retire it: unbind waits for them, so
    /// nothing is freed after the device is unbound (see [`Busy`]).
    busy: Atomic<u32>,
    /// Test knob (debugfs `gpunvme-<bdf>/mmap_delay_ms`): mmap sleeps this
    /// long after its checks, so a test can unbind in that window.
    pub(crate) mmap_delay_ms: Atomic<u32>,
    /// Fault injection (debugfs `gpunvme-<bdf>/drop_admin_doorbells`): the
    /// next N admin SQ doorbell writes are not made, so those commands get
    /// no completion, as on a hung controller.
    pub(crate) drop_admin_doorbells: Atomic<u32>,
}

impl Shared {
    pub(crate) fn new(
        dev: ARef<Device>,
        info: uapi::Info,
        cap: Cap,
        bar: DevresBar<BAR0_MIN>,
        admin: AdminQueue,
    ) -> Result<Arc<Self>> {
        Arc::pin_init(
            try_pin_init!(Self {
                dev,
                info,
                cap,
                bar,
                admin <- new_mutex!(Some(admin)),
                dma <- new_mutex!(DmaRegistry::default()),
                tenancy <- new_mutex!(Tenancy::default()),
                files <- new_mutex!(KVec::new()),
                next_file: Atomic::new(1),
                gone: Atomic::new(false),
                busy: Atomic::new(0),
                mmap_delay_ms: Atomic::new(0),
                drop_admin_doorbells: Atomic::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Mark a call that will take DMA memory out of `dma` and free or
    /// retire it. Take it before the `dma` lock, and under that lock take
    /// nothing once the controller is gone: unbind sets `gone` under the
    /// lock and then waits for every `Busy`, so either it waits for this
    /// call or this call sees `gone` (and unbind frees that memory itself).
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Full);
        Busy(self)
    }

    pub(crate) fn alive(&self) -> Result {
        if self.gone.load(Acquire) {
            return Err(ENODEV);
        }
        Ok(())
    }

    /// Run `f` with the admin queue and the device known to be bound.
    /// `ring(offset, value)` writes a BAR0 doorbell.
    pub(crate) fn with_admin<R>(
        &self,
        f: impl FnOnce(&Device<Bound>, &mut AdminQueue, &dyn Fn(usize, u32) -> Result) -> Result<R>,
    ) -> Result<R> {
        let mut guard = self.admin.lock();
        self.alive()?;
        let admin = Option::as_mut(&mut *guard).ok_or(ENODEV)?;
        // SAFETY: unbind sets `gone`, then takes this lock, and only then
        // lets the device become unbound. We hold the lock and saw `gone`
        // clear, so the device stays bound for the whole of `f`.
        let dev = unsafe { self.dev.as_bound() };
        let ring = |offset: usize, value: u32| -> Result {
            if offset == self.cap.sq_doorbell(0) && self.drop_admin_doorbell() {
                return Ok(());
            }
            let bar = self.bar.try_access().ok_or(ENODEV)?;
            bar.try_write32(value, offset)
        };
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

    /// A free I/O queue ID for `file`; EBUSY while another file owns the
    /// controller (owner and shared tenants never coexist).
    pub(crate) fn claim_qid(&self, file: FileId) -> Result<u16> {
        let mut t = self.tenancy.lock();
        if t.owner != 0 && t.owner != file {
            dev_warn!(self.dev, "CREATE_QPAIR: another file owns the controller (raw access)\n");
            return Err(EBUSY);
        }
        let limit = (self.info.io_queues as usize).min(MAX_QUEUES);
        let Some(free) = t.qids[..limit].iter().position(|&f| f == 0) else {
            dev_warn!(self.dev, "CREATE_QPAIR: all {} I/O queue pairs are in use\n", limit);
            return Err(ENOSPC);
        };
        t.qids[free] = file;
        Ok(free as u16 + 1)
    }

    pub(crate) fn release_qid(&self, qid: u16) {
        self.tenancy.lock().qids[usize::from(qid) - 1] = 0;
    }

    /// Make `file` the owner: EALREADY if it is, EBUSY if another file is or
    /// holds a queue ID.
    pub(crate) fn claim_owner(&self, file: FileId) -> Result {
        let mut t = self.tenancy.lock();
        if t.owner == file {
            return Err(EALREADY);
        }
        if t.owner != 0 {
            dev_warn!(self.dev, "CLAIM_OWNER: another file owns the controller\n");
            return Err(EBUSY);
        }
        if let Some(q) = t.qids.iter().position(|&f| f != 0 && f != file && f != ORPHAN) {
            dev_warn!(self.dev, "CLAIM_OWNER: another file has queue pair {} (owner and shared files never mix)\n", q + 1);
            return Err(EBUSY);
        }
        t.owner = file;
        Ok(())
    }

    /// `file` closed: the queue IDs it still holds (queues whose delete
    /// failed) belong to nobody now, but stay taken.
    pub(crate) fn orphan_qids(&self, file: FileId) {
        for f in self.tenancy.lock().qids.iter_mut().filter(|f| **f == file) {
            *f = ORPHAN;
        }
    }

    pub(crate) fn owner(&self) -> FileId {
        self.tenancy.lock().owner
    }

    pub(crate) fn release_owner(&self, file: FileId) {
        let mut t = self.tenancy.lock();
        if t.owner == file {
            t.owner = 0;
        }
    }

    pub(crate) fn quarantine(&self, what: Quarantined) {
        dev_warn!(self.dev, "keeping memory the controller may still use until it is disabled\n");
        self.dma.lock().quarantine(what);
    }

    /// When the admin queue lost a completion (its state on the controller
    /// is unknown) and no file holds a queue or ownership, disable the
    /// controller, free what was kept for it, and bring it up again with a
    /// fresh admin queue: the next file gets a controller in a known state.
    pub(crate) fn recover_if_idle(&self) {
        let mut guard = self.admin.lock();
        if self.alive().is_err() {
            return;
        }
        let Some(admin) = Option::as_mut(&mut *guard) else { return };
        if !admin.unsure() {
            return;
        }
        {
            let t = self.tenancy.lock();
            if t.owner != 0 || t.qids.iter().any(|&f| f != 0 && f != ORPHAN) {
                return;
            }
        }
        // SAFETY: as in `with_admin`: unbind sets `gone`, then takes the
        // admin lock before the device can become unbound; we hold the lock
        // and saw `gone` clear.
        let dev = unsafe { self.dev.as_bound() };
        // Not `try_access`: that holds an RCU read lock, and disabling and
        // enabling sleep.
        let Ok(bar) = self.bar.access(dev) else { return };
        dev_warn!(self.dev, "admin queue lost a completion and no queue is in use: re-initialising the controller\n");
        if crate::controller::disable(&self.dev, bar, self.cap).is_err() {
            dev_err!(self.dev, "controller did not stop; it stays unusable until rebind\n");
            return;
        }
        // Disabled: nothing kept for the controller's sake is reachable now,
        // and no queue exists on it any more. No user mapping reaches a
        // quarantined queue either: one whose delete failed keeps its queue
        // ID on its open file (which blocks this) until the file is
        // released, and a file is released only once its mappings are gone.
        let freed = self.dma.lock().release_after_disable();
        drop(freed);
        for f in self.tenancy.lock().qids.iter_mut().filter(|f| **f == ORPHAN) {
            *f = 0;
        }
        admin.reset();
        let ring = |offset: usize, value: u32| bar.try_write32(value, offset);
        let up = crate::controller::enable(&self.dev, bar, self.cap, admin).and_then(|()| {
            let cqe = admin.submit(&self.dev, self.cap, crate::command::set_num_queues(self.info.io_queues as u16), &ring)?;
            if crate::command::granted_queues(cqe.result) < self.info.io_queues {
                dev_err!(self.dev, "fewer I/O queues granted after re-initialising\n");
                return Err(EIO);
            }
            Ok(())
        });
        match up {
            Ok(()) => dev_info!(self.dev, "controller re-initialised\n"),
            Err(e) => dev_err!(self.dev, "re-initialising the controller failed ({:?}); it stays unusable until rebind\n", e),
        }
    }

    /// A new open file: its id, and its mappings registered for zapping.
    pub(crate) fn register_file(&self, file: *mut bindings::file) -> Result<FileId> {
        self.files.lock().push(FilePtr(file), GFP_KERNEL)?;
        Ok(self.next_file.fetch_add(1, Relaxed))
    }

    pub(crate) fn unregister_file(&self, file: *mut bindings::file) {
        self.files.lock().retain(|f| f.0 != file);
    }

    /// Unbind: fail every new call, remove every user mapping (no process
    /// rings a doorbell or touches queue memory any more), wait out an
    /// admin command in flight, stop the controller with `stop`, then free
    /// all DMA memory while the device is still bound.
    pub(crate) fn shut_down(&self, stop: impl FnOnce()) {
        // Under the lock mmap faults take: a fault either saw the controller
        // alive and inserted its page before this (the zap below removes
        // it), or sees it gone and inserts nothing.
        {
            let _dma = self.dma.lock();
            self.gone.store(true, Release);
        }
        for f in self.files.lock().iter() {
            shim::zap_file(f.0);
        }
        // Calls that took memory out before `gone` was set free or retire
        // it while the device is still bound (they fail fast now). Their
        // admin commands and export revokes have deadlines; after 60 s
        // their memory is freed when they finish, after the unbind (the
        // DMA API debug code then reports it).
        let mut waited = 0;
        while self.busy.load(Acquire) != 0 {
            if waited == 60_000 {
                dev_err!(self.dev, "unbind: a close or destroy still runs after 60 s; not waiting for it\n");
                break;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
            waited += 1;
        }
        let mut admin = self.admin.lock();
        stop();
        *admin = None;
        // Freed outside the lock: releasing pinned pages gives back their
        // RLIMIT_MEMLOCK charge under the owner's mmap lock, and a fault
        // holds that lock while it takes this one.
        let mut all = core::mem::take(&mut *self.dma.lock());
        all.clear();
    }
}

/// See [`Shared::busy`].
pub(crate) struct Busy<'a>(&'a Shared);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Full);
    }
}

#[pinned_drop]
impl PinnedDrop for Shared {
    fn drop(self: Pin<&mut Self>) {
        // Unbind takes the admin queue after disabling the controller; it is
        // still here only when probe failed after enabling it (the device
        // node could not be made). Stop the controller before the queue's
        // memory goes, or keep the memory if it will not stop.
        let Some(admin) = self.admin.lock().take() else { return };
        // SAFETY: unbind takes the admin queue, so it is still here only
        // while probe runs, with the device bound.
        let dev = unsafe { self.dev.as_bound() };
        // `access`, not `try_access`: disabling sleeps.
        let stopped = self.bar.access(dev).is_ok_and(|bar| crate::controller::disable(&self.dev, bar, self.cap).is_ok());
        if !stopped {
            dev_err!(self.dev, "controller did not stop after a failed probe: keeping its admin queue\n");
            core::mem::forget(admin);
        }
    }
}
