// SPDX-License-Identifier: GPL-2.0-only

//! Failure: the one path (`Shared::fail`) for a controller that fails, is
//! suspended or shut down, or goes away. Every file of the epoch is cut off,
//! its mappings zapped, exports revoked and relays stopped; the controller
//! is stopped as the cause allows, and its memory freed only once it is
//! known stopped (else kept until unbind). Bringing it back is restart.rs.

use kernel::{
    device::Bound,
    io::poll::read_poll_timeout,
    io::Io,
    prelude::*,
    sync::atomic::{Acquire, Relaxed, Release},
    time::Delta,
};

use super::quarantine::keep_let_go;
use super::{Shared, DOWN, GONE, UP};
use crate::controller::admin::AdminQueue;
use crate::controller::regs::{self, CSTS};
use crate::controller::Bar0;
use crate::dma::registry::{DmaRegistry, Mapped, Quarantined};
use crate::queues::qpair::QPair;
use crate::shim;

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

/// Deadline of a normal shutdown (CC.SHN until CSTS.SHST says complete),
/// the nvme driver's default.
const SHUTDOWN_TIMEOUT: Delta = Delta::from_secs(5);

impl Shared {
    /// Stop serving the files of the current epoch (their calls fail with
    /// `why`'s errno) and, unless unbinding, refuse new ones until
    /// `reinit`. Returns whether the controller was serving files.
    pub(super) fn set_down(&self, why: Failure) -> bool {
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
            files: _,
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
            self.forget_tenants();
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
                files: KVec::new(),
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
}
