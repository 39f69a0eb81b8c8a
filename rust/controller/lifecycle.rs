// SPDX-License-Identifier: GPL-2.0-only

//! The controller's life between probe and remove: PCI shutdown (reboot,
//! kexec), AER error recovery, system sleep, the watch (CSTS, and memory
//! importers let go of), and `poll()` on open files (its callback,
//! `gpunvme_file_poll`, is with the open file in `rust/uapi/file.rs`, so
//! that the controller's code never names a file's state: `uapi` uses
//! `controller`, not the other way). The C side
//! (`rust/controller/lifecycle.c`) only forwards the kernel's callbacks
//! here; every decision is `Shared::fail` and `Shared::reinit`.

use core::ffi::c_void;
use kernel::{
    device::Device,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
};

use crate::controller::shared::{failure::Failure, Shared};

/// How often the watch reads CSTS (and looks for exports let go of).
const WATCH_PERIOD_MS: u32 = 100;

extern "C" {
    fn gpunvme_shim_hooks_add(dev: *mut c_void, ctx: *mut c_void) -> i32;
    fn gpunvme_shim_hooks_del(dev: *mut c_void) -> *mut c_void;
    fn gpunvme_shim_watch_start(ctx: *mut c_void, period_ms: u32) -> *mut c_void;
    fn gpunvme_shim_watch_stop(watch: *mut c_void);
}

/// The PCI callbacks and the CSTS watch of one bound controller; each
/// holds a reference on the shared state until stopped.
pub(crate) struct Hooks {
    dev: *mut c_void,
    /// The watch, null once stopped.
    watch: Atomic<*mut c_void>,
    /// The reference the watch uses (released once it is stopped).
    watch_ctx: *const Shared,
    hooked: Atomic<bool>,
}

// SAFETY: the pointers are a bound device (for the shim's list, compared
// only), a C work item and an `Arc` reference, usable from any thread.
unsafe impl Send for Hooks {}
// SAFETY: `stop` is idempotent through the atomics.
unsafe impl Sync for Hooks {}

impl Hooks {
    pub(crate) fn new(dev: &Device, shared: &Arc<Shared>) -> Result<Self> {
        let raw = crate::shim::raw(dev);
        let ctx = Arc::into_raw(shared.clone());
        // SAFETY: `dev` is the PCI device being probed (its driver is set);
        // `ctx` is an `Arc` reference released by `stop` after the shim
        // forgot it.
        let ret = unsafe { gpunvme_shim_hooks_add(raw, ctx.cast_mut().cast()) };
        if ret < 0 {
            // SAFETY: the shim did not keep it: the reference is ours again.
            drop(unsafe { Arc::from_raw(ctx) });
            return Err(Error::from_errno(ret));
        }
        let wctx = Arc::into_raw(shared.clone());
        // SAFETY: `wctx` stays valid until the watch is stopped.
        let watch = unsafe { gpunvme_shim_watch_start(wctx.cast_mut().cast(), WATCH_PERIOD_MS) };
        let this = Self {
            dev: raw,
            watch: Atomic::new(watch),
            watch_ctx: wctx,
            hooked: Atomic::new(true),
        };
        if watch.is_null() {
            drop(this);
            return Err(ENOMEM);
        }
        Ok(this)
    }

    /// Stop the watch and forget the PCI callbacks; once this returns
    /// neither runs. Idempotent.
    pub(crate) fn stop(&self) {
        let w = self.watch.xchg(core::ptr::null_mut(), Relaxed);
        if !w.is_null() {
            // SAFETY: `w` came from gpunvme_shim_watch_start and is stopped
            // once (swapped out above).
            unsafe { gpunvme_shim_watch_stop(w) };
        }
        if self.hooked.xchg(false, Relaxed) {
            // SAFETY: `dev` is the device these hooks were added for.
            let ctx = unsafe { gpunvme_shim_hooks_del(self.dev) };
            if !ctx.is_null() {
                // SAFETY: the reference given to the shim in `new`, which
                // forgot it (and no callback runs: they are serialised with
                // unbind by the device lock).
                drop(unsafe { Arc::from_raw(ctx.cast_const().cast::<Shared>()) });
            }
        }
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        self.stop();
        // SAFETY: the watch is stopped: its reference is ours again.
        drop(unsafe { Arc::from_raw(self.watch_ctx) });
    }
}

/// Events of `rust/controller/lifecycle.c`, by the names debugfs
/// `pci_event` takes.
pub(crate) const EVENT_NAMES: [(&CStr, u32); 8] = [
    (c"shutdown", EV_SHUTDOWN),
    (c"error_normal", EV_ERROR_NORMAL),
    (c"error_frozen", EV_ERROR_FROZEN),
    (c"error_gone", EV_ERROR_GONE),
    (c"slot_reset", EV_SLOT_RESET),
    (c"resume", EV_RESUME),
    (c"suspend", EV_SUSPEND),
    (c"pm_resume", EV_PM_RESUME),
];
const EV_SHUTDOWN: u32 = 1;
const EV_ERROR_NORMAL: u32 = 2;
const EV_ERROR_FROZEN: u32 = 3;
const EV_ERROR_GONE: u32 = 4;
const EV_SLOT_RESET: u32 = 5;
const EV_RESUME: u32 = 6;
const EV_SUSPEND: u32 = 7;
const EV_PM_RESUME: u32 = 8;

/// A PCI callback for the controller `ctx`; 0 or a negative errno.
#[no_mangle]
extern "C" fn gpunvme_pci_event(ctx: *mut c_void, event: u32) -> i32 {
    // SAFETY: `ctx` is the `Arc<Shared>` reference the shim holds while the
    // driver is bound; callbacks run under the device lock, as unbind does.
    let sh = unsafe { &*ctx.cast_const().cast::<Shared>() };
    let res = match event {
        EV_SHUTDOWN => {
            sh.fail(Failure::Shutdown);
            Ok(())
        }
        EV_ERROR_NORMAL | EV_ERROR_FROZEN => {
            sh.fail(Failure::PciError);
            Ok(())
        }
        EV_ERROR_GONE => {
            sh.fail(Failure::Removed);
            Ok(())
        }
        EV_SLOT_RESET | EV_PM_RESUME => sh.reinit(),
        EV_RESUME => {
            dev_info!(sh.dev, "PCI error recovery done; new files may open\n");
            Ok(())
        }
        EV_SUSPEND => {
            sh.fail(Failure::Suspend);
            Ok(())
        }
        _ => Err(EINVAL),
    };
    match res {
        Ok(()) => 0,
        Err(e) => e.to_errno(),
    }
}

/// One tick of the watch (`Shared::watch`); false stops it.
#[no_mangle]
extern "C" fn gpunvme_watch_tick(ctx: *mut c_void) -> bool {
    // SAFETY: `ctx` is the `Arc<Shared>` reference `Hooks` holds until the
    // watch is stopped, which waits for a tick that runs.
    let sh = unsafe { &*ctx.cast_const().cast::<Shared>() };
    sh.watch()
}
