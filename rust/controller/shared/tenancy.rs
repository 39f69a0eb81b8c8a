// SPDX-License-Identifier: GPL-2.0-only

//! Who may hold what: which file holds each I/O queue ID, and which file
//! owns the controller, in one table under one lock (`Shared::tenancy`), so
//! a claim and a queue creation can never both succeed. Owner and shared
//! files never coexist; once an owner leaves (`OWNER_LEFT`) no file is
//! admitted until the controller is reset (`recover_if_idle`, restart.rs).
//! The queue-pair quota is checked here, with the claim of an ID.
//!
//! Only this file reads or writes the table: the failure and restart paths
//! (failure.rs, restart.rs) and what is kept for a queue whose delete was
//! never confirmed (quarantine.rs) go through the methods below.

use kernel::prelude::*;

use super::Shared;
use crate::dma::registry::FileId;
use crate::uapi::quota;

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

impl Shared {
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

    /// Cut off by a failure: the old files hold no queue ID or ownership
    /// any more.
    pub(super) fn forget_tenants(&self) {
        *self.tenancy.lock() = Tenancy::default();
    }

    /// For a restart once idle: `None` while a file holds a queue ID (an
    /// orphaned one aside) or owns the controller, else whether an owner
    /// left (and the controller waits for its reset).
    pub(super) fn idle(&self) -> Option<bool> {
        let t = self.tenancy.lock();
        if (t.owner != 0 && t.owner != OWNER_LEFT) || t.qids.iter().any(|&f| f != 0 && f != ORPHAN)
        {
            return None;
        }
        Some(t.owner == OWNER_LEFT)
    }

    /// The reset after an owner left is done: files are admitted again.
    pub(super) fn owner_reset_done(&self) {
        self.tenancy.lock().owner = 0;
    }

    /// The controller was disabled: queue IDs that might still have
    /// existed on it (orphaned at close) can be handed out again.
    pub(super) fn forget_orphans(&self) {
        for f in self
            .tenancy
            .lock()
            .qids
            .iter_mut()
            .filter(|f| **f == ORPHAN)
        {
            *f = 0;
        }
    }
}
