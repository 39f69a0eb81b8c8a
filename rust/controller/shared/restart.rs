// SPDX-License-Identifier: GPL-2.0-only

//! Restart: bring the controller back to a known state for new files.
//! After a failure (`reinit`, the watch after a fatal status), and once
//! idle when the admin queue lost a completion or an owner left
//! (`recover_if_idle`): disable, free what was kept (quarantine.rs), enable
//! with a fresh admin queue, identify again. Files cut off stay cut off.

use kernel::{
    device::{Bound, Device},
    dma::Coherent,
    io::Io,
    prelude::*,
    sync::atomic::{Acquire, Release},
};

use super::failure::Failure;
use super::{Shared, GONE, UP};
use crate::controller::admin::AdminQueue;
use crate::controller::Bar0;
use crate::uapi;

impl Shared {
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
        let Some(owner_left) = self.idle() else {
            return;
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
                self.owner_reset_done();
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
        self.free_after_disable();
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
}
