// SPDX-License-Identifier: GPL-2.0-only

//! What is kept and when it may be freed. Memory the controller may still
//! reach (a queue whose delete was not confirmed, a file's buffers while
//! such a queue exists) is quarantined until the controller is disabled;
//! a deleted queue an importer still holds is lent until it lets go, then
//! freed by `free_unreached` (the watch asks every tick). Queue IDs
//! orphaned at close stay taken (tenancy.rs) until the same disable.
//! Every call that takes memory out of the registry to free it holds a
//! [`Busy`], so unbind waits for it and nothing is freed after unbind.

use kernel::{
    prelude::*,
    sync::atomic::{Acquire, Full, Relaxed},
};

use super::Shared;
use crate::dma::registry::{DmaRegistry, Held, Quarantined};
use crate::queues::qpair::QPair;

/// A pair `fail` let go of, into `kept`: held by an importer, or only kept.
pub(super) fn keep_let_go(kept: &mut DmaRegistry, (q, held): (QPair, Held)) {
    if held.is_clean() {
        kept.quarantine(Quarantined::Queue(q));
    } else {
        kept.quarantine(Quarantined::Exported(q, held));
    }
}

impl Shared {
    /// Mark a call that will take DMA memory out of `dma` and free or
    /// retire it. Take it before the `dma` lock, and under that lock take
    /// nothing once the controller is unbound: unbind sets GONE under the
    /// lock and then waits for every `Busy`, so either it waits for this
    /// call or this call sees GONE (and unbind frees that memory itself).
    pub(crate) fn busy(&self) -> Busy<'_> {
        self.busy.fetch_add(1, Full);
        Busy(self)
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
    pub(super) fn free_let_go(&self) {
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

    /// The controller is disabled (a restart): free what was kept for its
    /// sake, and hand out again the queue IDs that might still have existed
    /// on it.
    pub(super) fn free_after_disable(&self) {
        let freed = self.dma.lock().release_after_disable();
        drop(freed);
        self.forget_orphans();
    }

    /// Unbind: calls that took memory out of `dma` before GONE was set
    /// free or retire it while the device is still bound (they fail fast
    /// now; their admin commands and export revokes have deadlines). After
    /// 60 s their memory is freed when they finish, after the unbind (the
    /// DMA API debug code then reports it).
    pub(super) fn wait_for_busy(&self) {
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
