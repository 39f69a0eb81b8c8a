// SPDX-License-Identifier: GPL-2.0-only

//! Every piece of memory the controller may DMA into, in one place.
//!
//! Files only hold names for it (queue IDs, buffer handles). The registry
//! lives in the shared state, so unbind can free all of it once the
//! controller is disabled: nothing the device can DMA into outlives the
//! binding, and nothing is freed while the device may still use it.

use kernel::{prelude::*, sync::Arc};

use crate::bridge::{Bridge, Outstanding, RelayTotals};
use crate::queues::qpair::QPair;
use crate::shim::{Export, HeldExport, HostMap, Import, RevokeDeadline, Revoking};

/// Memory outside the module that the controller was given access to.
pub(crate) enum Mapped {
    Host(#[allow(dead_code)] HostMap),
    DmaBuf(#[allow(dead_code)] Import),
}

/// Which open file a piece of memory belongs to.
pub(crate) type FileId = u64;

/// The task that opened a file, as debugfs shows it so an admin can find
/// the process: its thread group and thread IDs (in the initial PID
/// namespace) and its name then.
#[derive(Clone, Copy)]
pub(crate) struct Opener {
    pub(crate) tgid: i32,
    pub(crate) pid: i32,
    pub(crate) comm: [u8; 16],
}

impl Opener {
    /// The current task (the one opening the file).
    pub(crate) fn current() -> Self {
        let (tgid, pid, comm) = crate::shim::current_task();
        Self { tgid, pid, comm }
    }
}

/// A file's place in debugfs `relay_cpu_per_file`, made by its first
/// shared pair and dropped at its close (or with the registry, when the
/// controller stops serving its files).
pub(crate) struct FileRelay {
    pub(crate) file: FileId,
    pub(crate) opener: Opener,
    /// What its pairs taken off the relay pool cost (each adds its own
    /// when it stops, whether the registry still lists it or not).
    pub(crate) totals: Arc<RelayTotals>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueState {
    /// Created on the controller.
    Live,
    /// Deleted on the controller; kept while a mapping of the file or an
    /// importer of an export may still reach it.
    Retired,
}

/// Torn down by [`QueueEntry::let_go`]: the exports are revoked and the
/// pair taken off the relay pool before the memory goes (fields also drop
/// in that order).
pub(crate) struct QueueEntry {
    pub(crate) file: FileId,
    pub(crate) state: QueueState,
    pub(crate) exports: KVec<Export>,
    /// Retired pairs: the exports whose importers did not let go.
    pub(crate) held: Held,
    /// Held only to be dropped (stopped) at the right moment.
    #[allow(dead_code)]
    pub(crate) bridge: Option<Bridge>,
    pub(crate) q: QPair,
}

impl QueueEntry {
    /// Revoke the exports and take the pair off the relay: afterwards
    /// neither a peer nor a kernel thread reaches its memory, unless an
    /// importer held on (`Held` not clean): then the memory must be kept
    /// while it holds. The relay's commands still in flight come back too:
    /// release them once the controller confirms the deletion.
    pub(crate) fn let_go(mut self) -> (QPair, Held, Option<Outstanding>) {
        let outstanding = self.stop_relay();
        let (q, held) = self.start_revoke().finish(RevokeDeadline::from_now());
        (q, held, outstanding)
    }

    /// Take the pair off the relay pool (once); what it left in flight.
    pub(crate) fn stop_relay(&mut self) -> Option<Outstanding> {
        self.bridge.take().and_then(Bridge::stop)
    }

    /// Tell every importer of the pair's exports to unmap (the relay must
    /// be stopped); `LettingGo::finish` waits for them, so the exports of
    /// many pairs can be revoked together, with one deadline.
    pub(crate) fn start_revoke(self) -> LettingGo {
        let QueueEntry {
            exports,
            bridge,
            q,
            held,
            ..
        } = self;
        // A bridge still here would reach the memory after the revoke.
        drop(bridge);
        let mut revoking = KVec::new();
        let mut held = held;
        let room = revoking.reserve(exports.len(), GFP_KERNEL).is_ok();
        for x in exports {
            if room {
                // Capacity was reserved above; were it not, the revoke is
                // waited for now, never dropped unfinished.
                if let Err(r) = revoking.push_within_capacity(x.revoke_start()) {
                    if let Err(h) = r.0.finish(RevokeDeadline::from_now()) {
                        held.add(h);
                    }
                }
            } else if let Err(h) = x.revoke() {
                // No room to wait later: revoked and waited for now.
                held.add(h);
            }
        }
        LettingGo { q, held, revoking }
    }
}

/// A pair off the relay whose exports' revokes started.
pub(crate) struct LettingGo {
    q: QPair,
    held: Held,
    revoking: KVec<Revoking>,
}

impl LettingGo {
    /// Wait (until `deadline`) for the importers; the pair and which of its
    /// exports are still held.
    pub(crate) fn finish(self, deadline: RevokeDeadline) -> (QPair, Held) {
        let LettingGo {
            q,
            mut held,
            revoking,
        } = self;
        for r in revoking {
            if let Err(h) = r.finish(deadline) {
                held.add(h);
            }
        }
        (q, held)
    }
}

/// The exports of one queue pair whose importers did not let go when they
/// were revoked.
#[derive(Default)]
pub(crate) struct Held {
    exports: KVec<HeldExport>,
    /// One could not be recorded (out of memory): held for good.
    lost: bool,
}

impl Held {
    fn add(&mut self, h: HeldExport) {
        // Out of memory: `h` (the module's reference) is dropped, and the
        // memory is held for good, as nothing can ask again.
        if self.exports.push(h, GFP_KERNEL).is_err() {
            self.lost = true;
        }
    }

    /// Every importer let go at the revoke.
    pub(crate) fn is_clean(&self) -> bool {
        self.exports.is_empty() && !self.lost
    }

    /// Does an importer still map (or fence) the memory?
    pub(crate) fn still(&self) -> bool {
        self.lost || self.exports.iter().any(HeldExport::held)
    }
}

pub(crate) struct MapEntry {
    pub(crate) file: FileId,
    pub(crate) handle: u32,
    pub(crate) map: Mapped,
}

/// Memory whose DMA state is unknown.
pub(crate) enum Quarantined {
    /// The controller may still use it (a delete failed or timed out):
    /// freed once the controller is disabled.
    Queue(#[allow(dead_code)] QPair),
    Buffer(#[allow(dead_code)] Mapped),
    /// An importer did not let go of an export of it: freed once the
    /// controller is stopped and no importer holds it any more (`Lent`
    /// after the disable while one still does; leaked if one still does at
    /// unbind). Once the importers let go, the module's
    /// references on the exports go at once (`take_unreached`), so they
    /// never keep the module loaded by themselves; the memory stays until
    /// the controller is stopped.
    Exported(QPair, Held),
    /// The controller confirmed the queue's deletion, but an importer did
    /// not let go of an export of it: freed as soon as no importer holds
    /// it (`take_unreached`), like `Exported` at a disable or unbind.
    Lent(QPair, Held),
}

impl Quarantined {
    /// The queue pair an importer holds (`Exported`, `Lent`).
    fn held(&self) -> Option<(&QPair, &Held)> {
        match self {
            Self::Exported(q, h) | Self::Lent(q, h) => Some((q, h)),
            _ => None,
        }
    }
}

#[derive(Default)]
pub(crate) struct DmaRegistry {
    pub(crate) queues: KVec<QueueEntry>,
    pub(crate) maps: KVec<MapEntry>,
    pub(crate) quarantine: KVec<Quarantined>,
    /// How many mmaps reach each queue pair, by `QPair::gen` (a VMA split
    /// or forked counts as its one mmap): a retired pair is freed once no
    /// mapping and no importer reaches it.
    pub(crate) mapped: KVec<(u64, u32)>,
    /// The open files that made a shared pair, in that order: what their
    /// relays cost (debugfs `relay_cpu_per_file`).
    pub(crate) files: KVec<FileRelay>,
}

impl DmaRegistry {
    pub(crate) fn live_queue(&self, file: FileId, qid: u16) -> Option<&QPair> {
        self.queues
            .iter()
            .find(|e| e.file == file && e.state == QueueState::Live && e.q.qid == qid)
            .map(|e| &e.q)
    }

    pub(crate) fn live_entry_mut(&mut self, file: FileId, qid: u16) -> Option<&mut QueueEntry> {
        self.queues
            .iter_mut()
            .find(|e| e.file == file && e.state == QueueState::Live && e.q.qid == qid)
    }

    /// Remove and return the live queue `qid` of `file`.
    pub(crate) fn take_live(&mut self, file: FileId, qid: u16) -> Option<QueueEntry> {
        let i = self
            .queues
            .iter()
            .position(|e| e.file == file && e.state == QueueState::Live && e.q.qid == qid)?;
        self.queues.remove(i).ok()
    }

    /// Remove and return every entry of `file`. On allocation failure
    /// nothing moves (the entries stay until unbind frees them).
    pub(crate) fn take_file(&mut self, file: FileId) -> Result<(KVec<QueueEntry>, KVec<MapEntry>)> {
        let mut queues = room_for(&self.queues, |e| e.file == file)?;
        let mut maps = room_for(&self.maps, |e| e.file == file)?;
        move_where(&mut self.queues, &mut queues, |e| e.file == file);
        move_where(&mut self.maps, &mut maps, |e| e.file == file);
        self.files.retain(|f| f.file != file);
        Ok((queues, maps))
    }

    /// Does a mapping of a file reach queue pair `gen`?
    pub(crate) fn is_mapped(&self, gen: u64) -> bool {
        self.mapped.iter().any(|m| m.0 == gen)
    }

    /// Room to record one more mmap (so recording it cannot fail).
    pub(crate) fn reserve_mapping(&mut self) -> Result {
        Ok(self.mapped.reserve(1, GFP_KERNEL)?)
    }

    /// An mmap of queue pair `gen` was set up (after `reserve_mapping`).
    pub(crate) fn map_opened(&mut self, gen: u64) {
        if let Some(m) = self.mapped.iter_mut().find(|m| m.0 == gen) {
            m.1 += 1;
        } else {
            let _ = self.mapped.push_within_capacity((gen, 1));
        }
    }

    /// The last VMA of an mmap of queue pair `gen` went.
    pub(crate) fn map_closed(&mut self, gen: u64) {
        if let Some(i) = self.mapped.iter().position(|m| m.0 == gen) {
            self.mapped[i].1 -= 1;
            if self.mapped[i].1 == 0 {
                let _ = self.mapped.remove(i);
            }
        }
    }

    /// What it holds, by kind (debugfs `kept`).
    pub(crate) fn describe(&self, f: &mut kernel::fmt::Formatter<'_>) -> kernel::fmt::Result {
        let live = self
            .queues
            .iter()
            .filter(|e| e.state == QueueState::Live)
            .count();
        let mut kinds = [0usize; 4];
        for w in self.quarantine.iter() {
            kinds[match w {
                Quarantined::Queue(_) => 0,
                Quarantined::Buffer(_) => 1,
                Quarantined::Exported(..) => 2,
                Quarantined::Lent(..) => 3,
            }] += 1;
        }
        writeln!(
            f,
            "queues live {} retired {}; buffers {}; quarantine: queues {} buffers {} exported {} lent {}; waits for importers: {}",
            live,
            self.queues.len() - live,
            self.maps.len(),
            kinds[0],
            kinds[1],
            kinds[2],
            kinds[3],
            if self.waits_for_importers() { "yes" } else { "no" }
        )
    }

    /// The running total of `file`'s relays, for a new shared pair of it
    /// to add into when it stops; the file's record is made with its first
    /// (`opener`: who opened it).
    pub(crate) fn relay_totals(
        &mut self,
        file: FileId,
        opener: Opener,
    ) -> Result<Arc<RelayTotals>> {
        if let Some(f) = self.files.iter().find(|f| f.file == file) {
            return Ok(f.totals.clone());
        }
        let totals = RelayTotals::new()?;
        self.files.push(
            FileRelay {
                file,
                opener,
                totals: totals.clone(),
            },
            GFP_KERNEL,
        )?;
        Ok(totals)
    }

    /// Relay CPU time per open file that made a shared pair, a line each
    /// (debugfs `relay_cpu_per_file`): which tenant keeps the relay threads
    /// busy. Its live pairs' counters and the running total of those it
    /// destroyed. A pair being destroyed is missing from its line from the
    /// moment it leaves the registry until its relay stops (microseconds).
    pub(crate) fn relay_cpu_per_file(
        &self,
        f: &mut kernel::fmt::Formatter<'_>,
    ) -> kernel::fmt::Result {
        for r in self.files.iter() {
            let (retired, mut cost) = r.totals.get();
            let mut live = 0u32;
            for b in self
                .queues
                .iter()
                .filter(|e| e.file == r.file)
                .filter_map(|e| e.bridge.as_ref())
            {
                live += 1;
                cost.add(b.cost());
            }
            let o = &r.opener;
            write!(
                f,
                "file {} tgid {} pid {} pairs {} destroyed {} relay_ns {} accepted {} rejected {} ns_per_command {} comm ",
                r.file,
                o.tgid,
                o.pid,
                live,
                retired,
                cost.relay_ns,
                cost.accepted,
                cost.rejected,
                cost.ns_per_command()
            )?;
            // The name up to its NUL, unprintable bytes as '?'.
            for &c in o.comm.iter().take_while(|&&c| c != 0) {
                let c = if (0x20..0x7f).contains(&c) { c } else { b'?' };
                write!(f, "{}", c as char)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }

    /// Does anything wait for an importer to let go of an export (whose
    /// memory, or at least the module's reference on the export, can go
    /// once it does)? The watch then asks every tick.
    pub(crate) fn waits_for_importers(&self) -> bool {
        self.queues.iter().any(|e| !e.held.is_clean())
            || self
                .quarantine
                .iter()
                .any(|w| w.held().is_some_and(|(_, h)| !h.is_clean()))
    }

    /// Does an importer still map (or fence) an export of a queue pair?
    pub(crate) fn held_by_importer(&self) -> bool {
        self.queues.iter().any(|e| e.held.still())
            || self
                .quarantine
                .iter()
                .any(|w| w.held().is_some_and(|(_, h)| h.still()))
    }

    /// Take out what nothing reaches any more: retired pairs no mapping
    /// and no importer reaches, and deleted pairs whose importers all let
    /// go (`Lent`). For the caller to drop outside the registry's lock; on
    /// allocation failure they stay for the next call. Kept pairs the
    /// controller may still use (`Exported`) whose importers let go stay,
    /// but lose their exports here: the qids of those are returned.
    #[must_use]
    pub(crate) fn take_unreached(&mut self) -> (KVec<QueueEntry>, KVec<Quarantined>, KVec<u16>) {
        let mapped = &self.mapped;
        let unreached = |e: &QueueEntry| {
            e.state == QueueState::Retired
                && !e.held.still()
                && !mapped.iter().any(|m| m.0 == e.q.gen)
        };
        // A lent pair has no user mapping (lent at its file's release, or
        // kept through a disable, which needs every file's mappings zapped
        // or its file released); checked all the same, as for retired.
        let lent = |w: &Quarantined| match w {
            Quarantined::Lent(q, h) => !h.still() && !mapped.iter().any(|m| m.0 == q.gen),
            _ => false,
        };
        let (Ok(mut retired), Ok(mut let_go)) = (
            room_for(&self.queues, unreached),
            room_for(&self.quarantine, lent),
        ) else {
            return (KVec::new(), KVec::new(), KVec::new());
        };
        move_where(&mut self.queues, &mut retired, unreached);
        move_where(&mut self.quarantine, &mut let_go, lent);
        let mut unexported = KVec::new();
        for w in self.quarantine.iter_mut() {
            if let Quarantined::Exported(q, h) = w {
                if !h.is_clean() && !h.still() {
                    // The module's references on the dma-bufs: putting them
                    // here, under the lock, is fine (the last put of a
                    // dma-buf's file defers its release, as every fput does).
                    drop(core::mem::take(h));
                    let _ = unexported.push(q.qid, GFP_KERNEL);
                }
            }
        }
        (retired, let_go, unexported)
    }

    /// Free everything: only once the controller can no longer DMA.
    /// What an importer still maps is leaked, never freed; the module's
    /// references on its exports still go, so once that importer lets go
    /// the dma-bufs are released and nothing keeps the module loaded.
    /// Returns how many queue pairs were leaked.
    #[must_use]
    pub(crate) fn clear(&mut self) -> usize {
        // Mappings first (imports included, kept after a revoke or not) and
        // the rest of the quarantine but exports: exports they held are let
        // go before anyone asks whether they still are.
        self.maps.clear();
        self.files.clear();
        self.quarantine.retain(|w| w.held().is_some());
        let mut leaked = 0;
        for e in self.queues.drain_all() {
            let (q, held, _) = e.let_go();
            if held.still() {
                core::mem::forget(q);
                leaked += 1;
            }
        }
        for what in self.quarantine.drain_all() {
            match what {
                Quarantined::Exported(q, h) | Quarantined::Lent(q, h) if h.still() => {
                    core::mem::forget(q);
                    drop(h);
                    leaked += 1;
                }
                other => drop(other),
            }
        }
        leaked
    }

    /// The controller was disabled (and will be re-enabled): what was kept
    /// because it might still use it can go; what an importer holds stays.
    /// Returns what may now be freed, for the caller to drop outside the
    /// registry's lock.
    #[must_use]
    pub(crate) fn release_after_disable(&mut self) -> KVec<Quarantined> {
        let mut kept = KVec::new();
        let mut freed = KVec::new();
        for what in self.quarantine.drain_all() {
            if what.held().is_some_and(|(_, h)| h.still()) {
                // The controller forgot its queues at the disable: only the
                // importer reaches it now, and it goes once that lets go.
                let what = match what {
                    Quarantined::Exported(q, h) => Quarantined::Lent(q, h),
                    other => other,
                };
                // Kept while held: if there is no room to list it, leaked.
                if kept.reserve(1, GFP_KERNEL).is_err() {
                    core::mem::forget(what);
                } else if let Err(e) = kept.push_within_capacity(what) {
                    core::mem::forget(e);
                }
            } else if let Err(e) = freed.push(what, GFP_KERNEL) {
                // No room to hand it out: dropping it here, under the lock,
                // is still correct (the controller is disabled), only not
                // lock-friendly; it is out of memory anyway.
                let _ = e;
            }
        }
        self.quarantine = kept;
        freed
    }

    /// Keep `what` until the controller is disabled. Leaks it if even the
    /// list entry can't be allocated: freeing it could corrupt memory.
    pub(crate) fn quarantine(&mut self, what: Quarantined) {
        if self.quarantine.reserve(1, GFP_KERNEL).is_err() {
            core::mem::forget(what);
            return;
        }
        if let Err(e) = self.quarantine.push_within_capacity(what) {
            core::mem::forget(e);
        }
    }
}

/// A list with room for the entries of `v` that match `pred`.
fn room_for<T>(v: &KVec<T>, pred: impl Fn(&T) -> bool) -> Result<KVec<T>> {
    Ok(KVec::with_capacity(
        v.iter().filter(|e| pred(e)).count(),
        GFP_KERNEL,
    )?)
}

/// Move the entries of `v` that match `pred` into `out`, which has room
/// for them (`room_for`).
fn move_where<T>(v: &mut KVec<T>, out: &mut KVec<T>, pred: impl Fn(&T) -> bool) {
    let mut i = 0;
    while i < v.len() {
        if !pred(&v[i]) {
            i += 1;
        } else if let Ok(e) = v.remove(i) {
            // Room was made: this cannot fail.
            let _ = out.push_within_capacity(e);
        }
    }
}
