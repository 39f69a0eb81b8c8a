// SPDX-License-Identifier: GPL-2.0

//! State shared by the binding and every open file of one controller.
//!
//! Memory the controller may DMA into lives in a file's state or, when its
//! fate is unknown (a delete command failed), in `quarantine` here. Either
//! way it is freed only after the controller stopped using it: deleted, or
//! disabled at unbind (which runs before the last `Arc<Shared>` can drop).

use kernel::{
    bindings,
    device::{Bound, Device},
    io::Io,
    new_mutex,
    pci::DevresBar,
    prelude::*,
    sync::{
        aref::ARef,
        atomic::{Acquire, Atomic, Release},
        Arc, Mutex,
    },
};

use crate::admin::AdminQueue;
use crate::controller::BAR0_MIN;
use crate::qpair::QPair;
use crate::regs::Cap;
use crate::shim::{self, HostMap};
use crate::uapi;

/// An open file of the device node, kept so its mappings can be zapped.
pub(crate) struct FilePtr(pub(crate) *mut bindings::file);
// SAFETY: a `struct file` pointer may be used from any thread; it is only
// dereferenced (by the shim) while the file is open, which the list's lock
// guarantees (removed at release).
unsafe impl Send for FilePtr {}

/// Memory whose DMA state is unknown: kept until the controller is disabled.
pub(crate) enum Quarantined {
    Queue(#[allow(dead_code)] QPair),
    Buffer(#[allow(dead_code)] HostMap),
}

#[pin_data]
pub(crate) struct Shared {
    /// The PCI device, for log lines; the reference stays valid after unbind.
    pub(crate) dev: ARef<Device>,
    /// Identity read at probe; `size`/`version` are filled per call.
    pub(crate) info: uapi::Info,
    pub(crate) cap: Cap,
    /// BAR0, revoked by the driver core at unbind.
    pub(crate) bar: DevresBar<BAR0_MIN>,
    #[pin]
    admin: Mutex<AdminQueue>,
    /// I/O queue IDs in use: bit n is qid n + 1.
    #[pin]
    qids: Mutex<u64>,
    #[pin]
    files: Mutex<KVec<FilePtr>>,
    #[pin]
    quarantine: Mutex<KVec<Quarantined>>,
    /// Set at unbind: from then on the controller is gone for every file.
    gone: Atomic<bool>,
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
                admin <- new_mutex!(admin),
                qids <- new_mutex!(0),
                files <- new_mutex!(KVec::new()),
                quarantine <- new_mutex!(KVec::new()),
                gone: Atomic::new(false),
            }),
            GFP_KERNEL,
        )
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
        let mut admin = self.admin.lock();
        self.alive()?;
        // SAFETY: unbind sets `gone`, then takes this lock, and only then
        // lets the device become unbound. We hold the lock and saw `gone`
        // clear, so the device stays bound for the whole of `f`.
        let dev = unsafe { self.dev.as_bound() };
        let ring = |offset: usize, value: u32| -> Result {
            let bar = self.bar.try_access().ok_or(ENODEV)?;
            bar.try_write32(value, offset)
        };
        f(dev, &mut admin, &ring)
    }

    pub(crate) fn claim_qid(&self) -> Result<u16> {
        let mut used = self.qids.lock();
        let limit = self.info.io_queues.min(64);
        let free = (!*used).trailing_zeros();
        if free >= limit {
            dev_warn!(self.dev, "CREATE_QPAIR: all {} I/O queue pairs are in use\n", limit);
            return Err(ENOSPC);
        }
        *used |= 1 << free;
        Ok(free as u16 + 1)
    }

    pub(crate) fn release_qid(&self, qid: u16) {
        *self.qids.lock() &= !(1u64 << (qid - 1));
    }

    pub(crate) fn quarantine(&self, what: Quarantined) {
        dev_warn!(self.dev, "keeping memory the controller may still use until it is disabled\n");
        let mut list = self.quarantine.lock();
        if list.reserve(1, GFP_KERNEL).is_err() {
            // Out of memory even for the list entry: leaking is the only safe choice.
            dev_err!(self.dev, "leaking DMA memory: no room to keep it\n");
            core::mem::forget(what);
            return;
        }
        if let Err(e) = list.push_within_capacity(what) {
            core::mem::forget(e);
        }
    }

    pub(crate) fn register_file(&self, file: *mut bindings::file) -> Result {
        self.files.lock().push(FilePtr(file), GFP_KERNEL)?;
        Ok(())
    }

    pub(crate) fn unregister_file(&self, file: *mut bindings::file) {
        self.files.lock().retain(|f| f.0 != file);
    }

    /// Unbind, step 1: fail every new call and remove every user mapping
    /// (doorbells and queues), so no process rings a doorbell any more.
    pub(crate) fn revoke(&self) {
        self.gone.store(true, Release);
        for f in self.files.lock().iter() {
            shim::zap_file(f.0);
        }
    }

    /// Unbind, step 2: wait out an admin command in flight, then `f`
    /// (which stops the controller) with the admin queue held.
    pub(crate) fn quiesce(&self, f: impl FnOnce()) {
        let _admin = self.admin.lock();
        f();
    }
}
