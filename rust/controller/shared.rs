// SPDX-License-Identifier: GPL-2.0-only

//! State shared by the binding and every open file of one controller.
//!
//! All memory the controller may DMA into (admin queue, I/O queues, pinned
//! host buffers) is owned here, not by files, so that unbind can free it
//! right after disabling the controller: nothing the device could still
//! DMA into is ever freed, and nothing outlives the binding.

use kernel::{
    bindings,
    device::{Bound, Device},
    dma::Coherent,
    io::poll::read_poll_timeout,
    io::Io,
    new_mutex, new_poll_condvar,
    pci::DevresBar,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Full, Relaxed, Release},
        poll::PollCondVar,
        Arc, Mutex,
    },
    time::Delta,
};

use crate::controller::admin::AdminQueue;
use crate::controller::geometry::Geometry;
use crate::controller::regs::{self, Cap, CC, CSTS};
use crate::controller::{Bar0, BAR0_MIN};
use crate::dma::registry::{DmaRegistry, FileId, Held, Mapped, Quarantined};
use crate::queues::qpair::QPair;
use crate::shim;
use crate::uapi;
use crate::uapi::quota;

mod ns_change;

/// I/O queue IDs the module hands out (bounded by the controller's grant).
const MAX_QUEUES: usize = 64;

/// A queue ID whose file closed without the queue being deleted: it may
/// still exist on the controller, so the ID is not handed out again until
/// the controller is re-initialised.
const ORPHAN: FileId = FileId::MAX;

/// `Tenancy::owner` once the owner's file is released: raw access ended,
/// but what the owner (or GPU code it gave its raw queues to) may have set
/// on the controller through the admin queue (queues, a Host Memory
/// Buffer, a format) is still there. No file is admitted until the
/// controller is reset and identified again (`recover_if_idle`).
const OWNER_LEFT: FileId = FileId::MAX - 1;

/// `Shared::state`: the controller serves files.
const UP: u32 = 0;
/// It failed or is suspended: every file of the old epoch is cut off, and
/// new files are refused until it is re-initialised.
const DOWN: u32 = 1;
/// Unbound: nothing works any more.
const GONE: u32 = 2;

/// Why the controller stops serving its files (see `Shared::fail`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Failure {
    /// CSTS.CFS: controller fatal status. Disabled, then re-initialised.
    Fatal,
    /// CSTS reads all-ones: surprise removal (or a dead link). No MMIO is
    /// expected to work; what the controller could reach stays kept.
    Removed,
    /// AER reported an error on the link or the device.
    PciError,
    /// System sleep: orderly shutdown, re-initialised on resume.
    Suspend,
    /// Reboot or kexec: orderly shutdown (CC.SHN), bus mastering off.
    Shutdown,
    /// The driver is being unbound: orderly shutdown, then everything goes.
    Unbind,
}

impl Failure {
    /// What the calls of a file cut off by this failure return.
    fn errno(self) -> Error {
        match self {
            Failure::Fatal | Failure::PciError => EIO,
            _ => ENODEV,
        }
    }

    fn orderly(self) -> bool {
        matches!(self, Failure::Suspend | Failure::Shutdown | Failure::Unbind)
    }

    fn what(self) -> &'static str {
        match self {
            Failure::Fatal => "controller fatal status (CSTS.CFS)",
            Failure::Removed => {
                "controller not responding (CSTS reads all-ones: surprise removal?)"
            }
            Failure::PciError => "PCI error reported (AER)",
            Failure::Suspend => "system suspend",
            Failure::Shutdown => "system shutdown",
            Failure::Unbind => "unbind",
        }
    }
}

/// `Shared::fake_csts` values (debugfs `fake_csts`: off, cfs, ones).
pub(crate) const FAKE_CFS: u32 = 1;
pub(crate) const FAKE_ONES: u32 = 2;

/// Deadline of a normal shutdown (CC.SHN until CSTS.SHST says complete),
/// the nvme driver's default.
const SHUTDOWN_TIMEOUT: Delta = Delta::from_secs(5);

/// A pair `fail` let go of, into `kept`: held by an importer, or only kept.
fn keep_let_go(kept: &mut DmaRegistry, (q, held): (QPair, Held)) {
    if held.is_clean() {
        kept.quarantine(Quarantined::Queue(q));
    } else {
        kept.quarantine(Quarantined::Exported(q, held));
    }
}

/// Queue ID holders and the owner; file IDs start at 1, 0 is "nobody".
pub(crate) struct Tenancy {
    qids: [FileId; MAX_QUEUES],
    owner: FileId,
}

impl Default for Tenancy {
    fn default() -> Self {
        Self {
            qids: [0; MAX_QUEUES],
            owner: 0,
        }
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
    pub(crate) fake_csts: crate::controller::debugfs::FakeCsts,
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
                fake_csts: crate::controller::debugfs::FakeCsts::new(),
            }),
            GFP_KERNEL,
        )
    }

    /// Mark a call that will take DMA memory out of `dma` and free or
    /// retire it. Take it before the `dma` lock, and under that lock take
    /// nothing once the controller is unbound: unbind sets GONE under the
    /// lock and then waits for every `Busy`, so either it waits for this
    /// call or this call sees GONE (and unbind frees that memory itself).
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Full);
        Busy(self)
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

    /// A free I/O queue ID for `file`; EBUSY while another file owns the
    /// controller (owner and shared tenants never coexist).
    pub(crate) fn claim_qid(&self, file: FileId) -> Result<u16> {
        let mut t = self.tenancy.lock();
        self.admits(&t, file, "CREATE_QPAIR")?;
        if t.owner != file {
            let held = t.qids.iter().filter(|&&f| f == file).count();
            quota::check(&self.dev, "CREATE_QPAIR", quota::Kind::Qpairs, held)?;
        }
        let limit = (self.info.io_queues as usize).min(MAX_QUEUES);
        let Some(free) = t.qids[..limit].iter().position(|&f| f == 0) else {
            dev_warn!(
                self.dev,
                "CREATE_QPAIR: all {} I/O queue pairs are in use\n",
                limit
            );
            return Err(ENOSPC);
        };
        t.qids[free] = file;
        Ok(free as u16 + 1)
    }

    /// EBUSY, with a log line naming `what`, unless `file` may use the
    /// controller: nobody else owns it, and it is not waiting for the
    /// reset that follows an owner.
    fn admits(&self, t: &Tenancy, file: FileId, what: &str) -> Result {
        if t.owner == OWNER_LEFT {
            dev_warn!(
                self.dev,
                "{}: the controller is reset after its owner left before any file is admitted, and that reset has not run yet (an importer still holds one of the owner's exports, or it failed: see the log)\n",
                what
            );
            return Err(EBUSY);
        }
        if t.owner != 0 && t.owner != file {
            dev_warn!(
                self.dev,
                "{}: another file owns the controller (raw access)\n",
                what
            );
            return Err(EBUSY);
        }
        Ok(())
    }

    /// EBUSY (and a log line naming `what`) while another file owns the
    /// controller or it waits for its reset after an owner.
    pub(crate) fn not_owned_by_another(&self, file: FileId, what: &str) -> Result {
        self.admits(&self.tenancy.lock(), file, what)
    }

    /// `file` gives back `qid` (if it still holds it: a failure may have
    /// handed every ID back meanwhile).
    pub(crate) fn release_qid(&self, qid: u16, file: FileId) {
        let mut t = self.tenancy.lock();
        let slot = &mut t.qids[usize::from(qid) - 1];
        if *slot == file {
            *slot = 0;
        }
    }

    /// Make `file` the owner: EALREADY if it is, EBUSY if another file is or
    /// holds a queue ID.
    pub(crate) fn claim_owner(&self, file: FileId) -> Result {
        let mut t = self.tenancy.lock();
        if t.owner == file {
            return Err(EALREADY);
        }
        self.admits(&t, file, "CLAIM_OWNER")?;
        if let Some(q) = t
            .qids
            .iter()
            .position(|&f| f != 0 && f != file && f != ORPHAN)
        {
            dev_warn!(
                self.dev,
                "CLAIM_OWNER: another file has queue pair {} (owner and shared files never mix)\n",
                q + 1
            );
            return Err(EBUSY);
        }
        t.owner = file;
        Ok(())
    }

    /// Queue IDs `file` holds: its live pairs, pairs being created or
    /// destroyed, and pairs whose delete the controller did not confirm.
    /// While it holds one, the controller may run commands of its queues.
    pub(crate) fn qids_held(&self, file: FileId) -> usize {
        self.tenancy
            .lock()
            .qids
            .iter()
            .filter(|&&f| f == file)
            .count()
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

    /// The owner's file is released: no file is admitted until the
    /// controller is reset (`recover_if_idle`, which the caller runs next).
    pub(crate) fn release_owner(&self, file: FileId) {
        let mut t = self.tenancy.lock();
        if t.owner == file {
            t.owner = OWNER_LEFT;
        }
    }

    /// Still waiting for the reset after an owner (after `recover_if_idle`).
    pub(crate) fn owner_left(&self) -> bool {
        self.tenancy.lock().owner == OWNER_LEFT
    }

    /// Say that deleted queue `qid` is kept for an importer.
    pub(crate) fn kept_for_importer(&self, qid: u16) {
        dev_info!(
            self.dev,
            "qid {}: deleted, but an importer still holds an export of its memory: kept until it lets go\n",
            qid
        );
    }

    /// Keep deleted queue `q`, whose file is closing, while an importer
    /// holds an export of it; `free_unreached` frees it once none does.
    /// (`retire` said so when it was deleted.)
    pub(crate) fn lend(&self, q: QPair, held: Held) {
        self.dma.lock().quarantine(Quarantined::Lent(q, held));
    }

    /// Free the deleted queues that no mapping and no importer reaches
    /// any more. Called at every file's create, destroy, unmap and close,
    /// when a mapping goes, and by the watch every tick while an importer
    /// holds on (`free_let_go`): what an importer let go of is freed within
    /// a tick, with no call of any file, so the module's references on the
    /// dma-bufs never keep it loaded by themselves.
    pub(crate) fn free_unreached(&self) {
        // Some callers (create, the last munmap) hold no `Busy`: unbind must
        // wait for this free, or this must see unbind and leave it alone.
        let _busy = self.busy();
        let (retired, lent, unexported) = {
            let mut dma = self.dma.lock();
            if self.unbound() {
                return;
            }
            dma.take_unreached()
        };
        for qid in &unexported {
            dev_info!(
                self.dev,
                "qid {}: its importers let go of its memory; kept until the controller is disabled, as it may still use it\n",
                qid
            );
        }
        let delay = self.free_delay_ms.load(Relaxed);
        if delay != 0 && !(retired.is_empty() && lent.is_empty()) {
            // Test knob: hold this free between the registry and the free.
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(delay.into()));
        }
        let freed = |qid: u16, held: &Held| {
            if !held.is_clean() {
                dev_info!(
                    self.dev,
                    "qid {}: its importers let go of the deleted queue's memory: freed\n",
                    qid
                );
            }
        };
        for e in &retired {
            freed(e.q.qid, &e.held);
        }
        for w in &lent {
            if let Quarantined::Lent(q, h) = w {
                freed(q.qid, h);
            }
        }
        drop((retired, lent));
    }

    /// An importer that did not let go at a revoke may let go at any
    /// moment, with no call of this module to notice: the watch asks here
    /// every tick while one holds on.
    fn free_let_go(&self) {
        if self.dma.lock().waits_for_importers() {
            self.free_unreached();
        }
    }

    pub(crate) fn quarantine(&self, what: Quarantined) {
        dev_warn!(
            self.dev,
            "keeping memory the controller may still use until it is disabled\n"
        );
        self.dma.lock().quarantine(what);
    }

    /// When the admin queue lost a completion (its state on the controller
    /// is unknown) or an owner left, and no file holds a queue or
    /// ownership, disable the controller, free what was kept for it, bring
    /// it up again with a fresh admin queue and identify it again: the next
    /// file gets a controller in a known state. After an owner, only once
    /// no importer holds one of its exports (a doorbell page still mapped
    /// by a peer could ring the next tenant's queues); the watch asks
    /// again every tick meanwhile.
    pub(crate) fn recover_if_idle(&self) {
        let mut guard = self.admin.lock();
        if self.state.load(Acquire) != UP {
            return;
        }
        let Some(admin) = Option::as_mut(&mut *guard) else {
            return;
        };
        let owner_left = {
            let t = self.tenancy.lock();
            if (t.owner != 0 && t.owner != OWNER_LEFT)
                || t.qids.iter().any(|&f| f != 0 && f != ORPHAN)
            {
                return;
            }
            t.owner == OWNER_LEFT
        };
        if !admin.unsure() && !owner_left {
            return;
        }
        if owner_left && self.dma.lock().held_by_importer() {
            return;
        }
        // SAFETY: as in `with_admin`: unbind sets GONE, then takes the
        // admin lock before the device can become unbound; we hold the lock
        // and saw the state UP.
        let dev = unsafe { self.dev.as_bound() };
        // Not `try_access`: that holds an RCU read lock, and disabling and
        // enabling sleep.
        let Ok(bar) = self.bar.access(dev) else {
            return;
        };
        if owner_left {
            dev_info!(
                self.dev,
                "its owner left: resetting the controller before any file is admitted\n"
            );
        } else {
            dev_warn!(self.dev, "admin queue lost a completion and no queue is in use: re-initialising the controller\n");
        }
        if self.restart(dev, bar, admin).is_ok() {
            if owner_left {
                self.tenancy.lock().owner = 0;
            }
        } else {
            // Not serving files any more: cut off the open ones (they hold
            // no queue) and tell their pollers.
            self.set_down(Failure::Fatal);
            self.poll_cv.notify_all();
        }
    }

    /// Disable the controller, free what was kept for its sake, forget
    /// queue IDs that might still have existed on it, enable it again
    /// with a fresh admin queue and identify it again (a smaller transfer
    /// limit or fewer queues keep it unusable until rebind; namespaces are
    /// taken as they are now). Called with the admin lock held. No user
    /// mapping reaches what is freed: a quarantined queue whose delete
    /// failed keeps its queue ID on its open file (which blocks a restart
    /// while the controller serves files) until the file is released, and
    /// a file is released only once its mappings are gone; after a failure
    /// every file's mappings were zapped and fault with SIGBUS.
    fn restart(&self, dev: &Device<Bound>, bar: &Bar0<'_>, admin: &mut AdminQueue) -> Result {
        if crate::controller::disable(&self.dev, bar, self.cap, &self.fake_csts).is_err() {
            dev_err!(
                self.dev,
                "controller did not stop; it stays unusable until rebind\n"
            );
            return Err(EIO);
        }
        let freed = self.dma.lock().release_after_disable();
        drop(freed);
        for f in self
            .tenancy
            .lock()
            .qids
            .iter_mut()
            .filter(|f| **f == ORPHAN)
        {
            *f = 0;
        }
        admin.reset()?;
        let up = crate::controller::enable(&self.dev, bar, self.cap, admin)
            .and_then(|()| self.identify_again(dev, bar, admin));
        match up {
            Ok(()) => dev_info!(self.dev, "controller re-initialised\n"),
            Err(e) => dev_err!(
                self.dev,
                "re-initialising the controller failed ({:?}); it stays unusable until rebind\n",
                e
            ),
        }
        up
    }

    /// After an enable: the transfer limit and the I/O queues granted are
    /// at least those of bind (pairs were sized by them), and each
    /// namespace's size and format are taken as they are now.
    fn identify_again(
        &self,
        dev: &Device<Bound>,
        bar: &Bar0<'_>,
        admin: &mut AdminQueue,
    ) -> Result {
        let buf: Coherent<[u8]> =
            Coherent::zeroed_slice(dev, crate::controller::identify::IDENTIFY_LEN, GFP_KERNEL)?;
        let ring = |offset: usize, value: u32| bar.try_write32(value, offset);
        let mut now = uapi::Info::default();
        let res = crate::controller::identify(dev, admin, self.cap, &ring, &buf, &mut now);
        if res.is_err() {
            // A command that got no completion may still write `buf`: it
            // goes only once the controller is stopped.
            if crate::controller::disable(&self.dev, bar, self.cap, &self.fake_csts).is_err() {
                core::mem::forget(buf);
            }
            return res;
        }
        if let Some(why) = crate::controller::identify::shrank_since_bind(&self.info, &now) {
            dev_err!(
                self.dev,
                "identified again, the controller is not what it was at bind ({}): it stays unusable until rebind\n",
                why
            );
            return Err(EIO);
        }
        self.apply_identified(&now);
        Ok(())
    }

    /// Stop serving the files of the current epoch (their calls fail with
    /// `why`'s errno) and, unless unbinding, refuse new ones until
    /// `reinit`. Returns whether the controller was serving files.
    fn set_down(&self, why: Failure) -> bool {
        // Under the lock mmap faults take: a fault either saw its epoch
        // served and inserted its page before this (the caller's zap
        // removes it), or sees it cut off and inserts nothing.
        let _dma = self.dma.lock();
        let was = self.state.load(Relaxed);
        if was == UP {
            self.fail_errno.store(why.errno().to_errno(), Relaxed);
            self.epoch.fetch_add(1, Release);
        }
        if why == Failure::Unbind {
            self.state.store(GONE, Release);
        } else if was == UP {
            self.state.store(DOWN, Release);
        }
        was == UP
    }

    /// The one path for a controller that fails or goes away: every open
    /// file is cut off (its calls fail: EIO for a fatal status or a PCI
    /// error, ENODEV otherwise; `poll()` reports EPOLLERR | EPOLLHUP), its
    /// user mappings are zapped, exports revoked, relays stopped. Then the
    /// controller is stopped as `why` allows: an orderly shutdown (delete
    /// the I/O queues, CC.SHN, disable) for unbind, shutdown and suspend;
    /// a disable for a fatal status or a PCI error; nothing for all-ones
    /// (no MMIO works). Memory is freed only once the controller is known
    /// stopped; otherwise bus mastering is cleared and it stays kept until
    /// unbind. `reinit` brings the controller back for new files.
    pub(crate) fn fail(&self, why: Failure) {
        let first = self.set_down(why);
        if first && why.orderly() && why != Failure::Unbind {
            dev_info!(self.dev, "{}: cutting off every open file\n", why.what());
        } else if first && !why.orderly() {
            dev_err!(self.dev, "{}: cutting off every open file\n", why.what());
        }
        for f in self.files.lock().iter() {
            shim::zap_file(f.0);
        }
        // Woken after the zap: a file that poll() reports cut off has no
        // page of the module mapped any more.
        self.poll_cv.notify_all();
        if why == Failure::Unbind {
            self.wait_for_busy();
        }
        // Taking the lock waits out an admin command in flight (bounded);
        // afterwards none starts for a file that was cut off.
        let mut guard = self.admin.lock();
        if why != Failure::Unbind && self.state.load(Acquire) == GONE {
            return;
        }
        // SAFETY: either this is unbind itself, which runs with the device
        // bound, or the state was not GONE under the admin lock, which
        // unbind takes after setting GONE and before the device can become
        // unbound.
        let dev = unsafe { self.dev.as_bound() };
        // Relays first: afterwards no kernel thread reaches any queue.
        let all = core::mem::take(&mut *self.dma.lock());
        // The mapping counts go too: every file's mappings were zapped above
        // and fault with SIGBUS.
        let DmaRegistry {
            mut queues,
            maps,
            quarantine,
            mapped: _,
        } = all;
        // What the relays left in flight; without room to list it, it stays
        // counted (the file is cut off; a revoke then waits for it in vain).
        let mut outstanding = KVec::new();
        let _ = outstanding.reserve(queues.len(), GFP_KERNEL);
        for e in queues.iter_mut() {
            if let Some(o) = e.stop_relay() {
                let _ = outstanding.push_within_capacity(o);
            }
        }
        // The live queues, to delete in an orderly shutdown; without room
        // to list them they are only kept, not deleted.
        let mut live: KVec<&QPair> = KVec::new();
        if live.reserve(queues.len(), GFP_KERNEL).is_ok() {
            for e in queues.iter() {
                if e.state == crate::dma::registry::QueueState::Live {
                    let _ = live.push_within_capacity(&e.q);
                }
            }
        }
        let stopped = match self.bar.access(dev) {
            Ok(bar) => self.stop(bar, Option::as_mut(&mut *guard), why, &live),
            Err(_) => false,
        };
        drop(live);
        if stopped {
            // Nothing runs on a disabled controller: the commands the relays
            // accepted will never name a page, so the revokes below (of this
            // module's own imports, among others) need not wait for them.
            for o in outstanding {
                o.release();
            }
            if let Some(admin) = Option::as_mut(&mut *guard) {
                // Disabled: the admin queue is empty on the controller too.
                // (Its slots are all in range: this cannot fail.)
                let _ = admin.reset();
            }
        } else {
            drop(outstanding);
            dev_err!(self.dev, "controller not known to be stopped: bus mastering off, its memory kept until unbind\n");
            if let Ok(pdev) = <&kernel::pci::Device<Bound>>::try_from(dev) {
                shim::clear_bus_master(pdev);
            }
        }
        // Known stopped, or unbinding (when all memory goes anyway): an
        // import mapping kept after its revoke (commands that might still
        // name it) can go, so its exporter (this module's own, often) may
        // free that memory. Not merely after clearing bus mastering: a
        // controller reading all-ones may be alive behind a dead link, and
        // its queue memory is kept until unbind for the same reason.
        if stopped || why == Failure::Unbind {
            for m in &maps {
                if let Mapped::DmaBuf(import) = &m.map {
                    import.release_kept();
                }
            }
        }
        // The revokes wait for importers without the admin lock. (Unbind
        // keeps it: nothing may use the admin queue, which goes below.)
        let unbinding = if why == Failure::Unbind {
            Some(guard)
        } else {
            // The old files hold no queue ID or ownership any more.
            *self.tenancy.lock() = Tenancy::default();
            drop(guard);
            None
        };
        // Every export's revoke starts, then all are waited for together:
        // one deadline (5 s) in all, not one per export.
        let mut going = KVec::new();
        let together = going.reserve(queues.len(), GFP_KERNEL).is_ok();
        let mut kept = DmaRegistry::default();
        let deadline = crate::shim::RevokeDeadline::from_now();
        for e in queues {
            let g = e.start_revoke();
            // Never dropped unfinished: that would free memory an importer
            // may still map. Without room to wait later, waited for now.
            let g = if together {
                going.push_within_capacity(g).err().map(|e| e.0)
            } else {
                Some(g)
            };
            if let Some(g) = g {
                keep_let_go(&mut kept, g.finish(deadline));
            }
        }
        for g in going {
            keep_let_go(&mut kept, g.finish(deadline));
        }
        if let Some(mut guard) = unbinding {
            // The device is about to be unbound: it no longer masters the
            // bus (stopped, or bus mastering cleared). Free everything but
            // what an importer holds (leaked).
            *guard = None;
            drop(guard);
            let mut all = DmaRegistry {
                queues: KVec::new(),
                maps,
                quarantine,
                mapped: KVec::new(),
            };
            let mut late = core::mem::take(&mut *self.dma.lock());
            let leaked = all.clear() + kept.clear() + late.clear();
            if leaked != 0 {
                dev_warn!(
                    self.dev,
                    "unbind: {} queue pair(s) an importer still holds are leaked, never freed; the dma-bufs go when it lets go\n",
                    leaked
                );
            }
            return;
        }
        // Keep everything in the quarantine: freed by the next disable (the
        // re-initialisation) or at unbind, exports held by an importer never.
        let mut dma = self.dma.lock();
        for k in kept.quarantine.drain_all() {
            dma.quarantine(k);
        }
        for m in maps {
            dma.quarantine(Quarantined::Buffer(m.map));
        }
        for k in quarantine {
            dma.quarantine(k);
        }
    }

    /// Stop the controller for `why` (admin lock held); true once it is
    /// known to do no more DMA.
    fn stop(
        &self,
        bar: &Bar0<'_>,
        admin: Option<&mut AdminQueue>,
        why: Failure,
        live: &[&QPair],
    ) -> bool {
        if why == Failure::Removed {
            return false;
        }
        let csts = self.csts(bar);
        let healthy = csts.into_raw() != u32::MAX && !csts.cfs();
        if why.orderly() && healthy {
            self.orderly_shutdown(bar, admin, live);
        }
        crate::controller::disable(&self.dev, bar, self.cap, &self.fake_csts).is_ok()
    }

    /// Delete the I/O queues (SQ before CQ) while the admin queue answers,
    /// then a normal shutdown: CC.SHN = 01b, wait for CSTS.SHST = 10b.
    fn orderly_shutdown(&self, bar: &Bar0<'_>, admin: Option<&mut AdminQueue>, live: &[&QPair]) {
        if let Some(admin) = admin.filter(|a| !a.unsure()) {
            let ring = |offset: usize, value: u32| bar.try_write32(value, offset);
            'queues: for q in live {
                for cmd in q.delete_cmds() {
                    if admin.submit(&self.dev, self.cap, cmd, &ring).is_err() {
                        dev_warn!(
                            self.dev,
                            "deleting queue {} failed: shutting down without it\n",
                            q.qid
                        );
                        break 'queues;
                    }
                }
            }
        }
        if let Ok(cc) = self.cc(bar).try_with_shn(regs::SHN_NORMAL) {
            bar.write_reg(cc);
        }
        let start = kernel::time::Instant::<kernel::time::Monotonic>::now();
        let done = read_poll_timeout(
            || Ok(self.csts(bar)),
            |s: &CSTS| s.into_raw() == u32::MAX || s.shst().get() == regs::SHST_COMPLETE,
            Delta::from_millis(1),
            SHUTDOWN_TIMEOUT,
        );
        match done {
            Ok(s) if s.into_raw() != u32::MAX => dev_info!(
                self.dev,
                "normal shutdown complete (CSTS.SHST) in {} ms\n",
                start.elapsed().as_millis()
            ),
            _ => dev_warn!(
                self.dev,
                "normal shutdown did not complete within {} ms; disabling\n",
                SHUTDOWN_TIMEOUT.as_millis()
            ),
        }
    }

    /// Bring a failed (or suspended) controller back for new files:
    /// disable, free what was kept, enable with a fresh admin queue. Files
    /// cut off by the failure stay cut off.
    pub(crate) fn reinit(&self) -> Result {
        let mut guard = self.admin.lock();
        match self.state.load(Acquire) {
            UP => return Ok(()),
            GONE => return Err(ENODEV),
            _ => {}
        }
        let admin = Option::as_mut(&mut *guard).ok_or(ENODEV)?;
        // SAFETY: as in `with_admin`: the state is not GONE under the lock.
        let dev = unsafe { self.dev.as_bound() };
        let bar = self.bar.access(dev)?;
        self.restart(dev, bar, admin)?;
        let _dma = self.dma.lock();
        self.state.store(UP, Release);
        Ok(())
    }

    /// The watch, every tick: a fatal status fails the controller and
    /// re-initialises it; all-ones is taken as a surprise removal; what
    /// importers let go of is freed. False once unbound (the watch stops).
    pub(crate) fn watch(&self) -> bool {
        match self.state.load(Acquire) {
            GONE => return false,
            UP => {}
            _ => {
                self.free_let_go();
                return true;
            }
        }
        let csts = match self.bar.try_access() {
            Some(bar) => self.csts(&bar),
            None => return false,
        };
        if csts.into_raw() == u32::MAX {
            self.fail(Failure::Removed);
        } else if csts.cfs() {
            self.fail(Failure::Fatal);
            let _ = self.reinit();
        }
        self.free_let_go();
        self.watch_events();
        if self.owner_left() {
            // Its exports' importers may have let go this tick.
            self.recover_if_idle();
        }
        true
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

impl Shared {
    /// Unbind: calls that took memory out of `dma` before GONE was set
    /// free or retire it while the device is still bound (they fail fast
    /// now; their admin commands and export revokes have deadlines). After
    /// 60 s their memory is freed when they finish, after the unbind (the
    /// DMA API debug code then reports it).
    fn wait_for_busy(&self) {
        let mut waited = 0;
        while self.busy.load(Acquire) != 0 {
            if waited == 60_000 {
                dev_err!(
                    self.dev,
                    "unbind: a close or destroy still runs after 60 s; not waiting for it\n"
                );
                break;
            }
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(1));
            waited += 1;
        }
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
