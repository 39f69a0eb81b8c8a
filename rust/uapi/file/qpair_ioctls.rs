// SPDX-License-Identifier: GPL-2.0-only

//! CREATE_QPAIR and DESTROY_QPAIR: a file's queue pairs on the controller,
//! shared (relayed and validated) or raw (owner mode), and their deletion,
//! which close runs too (`retire`).

use kernel::prelude::*;

use super::OpenState;
use crate::bridge::validate::{self, Limits, Ns};
use crate::bridge::{Bridge, Outstanding, PairMemory};
use crate::dma::registry::{Held, Quarantined, QueueEntry, QueueState};
use crate::queues::command;
use crate::queues::qpair::{self, MapKind, QPair};
use crate::shim;
use crate::uapi;

/// A command that failed with a status did nothing; one that timed out (or
/// never got an answer) may still happen, so its memory must be kept.
fn definitely_failed(e: Error) -> bool {
    e == EIO
}

impl OpenState {
    /// The namespaces this file's shared pairs may address.
    fn limits(&self) -> Result<Limits> {
        let info = &self.shared.info;
        let mut ns = KVec::new();
        for (index, n) in info.ns[..info.num_namespaces as usize].iter().enumerate() {
            if self.node_nsid == 0 || n.nsid == self.node_nsid {
                ns.push(
                    Ns {
                        nsid: n.nsid,
                        index,
                    },
                    GFP_KERNEL,
                )?;
            }
        }
        Ok(Limits {
            ns,
            geometry: self.shared.geometry.clone(),
            max_transfer: validate::shared_max_transfer(info.mdts_bytes).into(),
        })
    }

    /// CREATE_QPAIR's argument: its depth and flags, and owner mode for a
    /// raw pair. Whether it is raw, and whether its CQ is in a mapping.
    fn check_create(&self, req: &uapi::QpairCreate) -> Result<(bool, bool)> {
        let sh = &self.shared;
        let max = sh.info.max_queue_entries;
        if req.depth < uapi::MIN_QUEUE_DEPTH || req.depth > max {
            dev_warn!(
                sh.dev,
                "CREATE_QPAIR: depth {} outside {}..={}\n",
                req.depth,
                uapi::MIN_QUEUE_DEPTH,
                max
            );
            return Err(EINVAL);
        }
        if req.flags & uapi::QPAIR_V1_BRIDGED != 0 {
            dev_warn!(sh.dev, "CREATE_QPAIR: the bridged flag of UAPI 1 is gone; shared pairs (flags 0) relay and validate\n");
            return Err(EINVAL);
        }
        if req.flags & !(uapi::QPAIR_RAW | uapi::QPAIR_CQ_IN_MAP) != 0
            || req.pad0 != 0
            || req.pad1 != 0
            || req.pad2 != 0
        {
            dev_warn!(sh.dev, "CREATE_QPAIR: unknown flags {:#x}\n", req.flags);
            return Err(EINVAL);
        }
        let raw = req.flags & uapi::QPAIR_RAW != 0;
        let cq_in_map = req.flags & uapi::QPAIR_CQ_IN_MAP != 0;
        if cq_in_map && !raw {
            dev_warn!(sh.dev, "CREATE_QPAIR: GPUNVME_QPAIR_CQ_IN_MAP needs a raw pair (a shared pair's CQ is the module's mirror)\n");
            return Err(EINVAL);
        }
        if !cq_in_map && req.cq_handle != 0 {
            dev_warn!(
                sh.dev,
                "CREATE_QPAIR: cq_handle {} without GPUNVME_QPAIR_CQ_IN_MAP\n",
                req.cq_handle
            );
            return Err(EINVAL);
        }
        if raw && sh.owner() != self.id {
            dev_warn!(
                sh.dev,
                "CREATE_QPAIR: a raw pair needs owner mode (GPUNVME_IOC_CLAIM_OWNER first)\n"
            );
            return Err(EPERM);
        }
        Ok((raw, cq_in_map))
    }

    /// The doorbells of `qid`, just claimed: both on one page inside BAR0,
    /// else `qid` is given back.
    fn doorbells(&self, qid: u16) -> Result<(u32, u32)> {
        let sh = &self.shared;
        let Some((page, sq_db, cq_db)) = qpair::doorbell_page(sh.cap, qid) else {
            sh.release_qid(qid, self.id);
            dev_warn!(
                sh.dev,
                "CREATE_QPAIR: doorbell stride {} puts qid {} on two pages\n",
                sh.cap.doorbell_stride(),
                qid
            );
            return Err(EOPNOTSUPP);
        };
        if page + crate::controller::regs::PAGE_SIZE > sh.bar_len {
            // The relay could not ring them, nor the owner map them.
            sh.release_qid(qid, self.id);
            dev_warn!(
                sh.dev,
                "CREATE_QPAIR: doorbell stride {} puts qid {}'s doorbells at {:#x}, beyond BAR0 ({:#x} bytes)\n",
                sh.cap.doorbell_stride(),
                qid,
                page,
                sh.bar_len
            );
            return Err(EOPNOTSUPP);
        }
        Ok((sq_db, cq_db))
    }

    pub(crate) fn create_qpair(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::QpairCreate, arg, "CREATE_QPAIR");
        let sh = &self.shared;
        let (raw, cq_in_map) = self.check_create(&req)?;
        let limits = if raw { None } else { Some(self.limits()?) };
        self.alive()?;
        if !raw {
            sh.refresh_namespaces(self.epoch, self.node_nsid)?;
        }
        sh.free_unreached();
        sh.recover_if_idle();
        let qid = sh.claim_qid(self.id)?;
        let (mut sq_db, mut cq_db) = self.doorbells(qid)?;

        // Set when the queue may exist on the controller after all (a
        // Create or Delete that got no answer): its qid stays held, so the
        // file's buffers stay mapped (UNMAP, close) until it is confirmed
        // gone or the controller is disabled.
        let mut maybe_created = false;
        let created = sh.with_admin(self.epoch, |dev, admin, ring| {
            let max_transfer = limits.as_ref().map(|l| l.max_transfer);
            let mut dma = sh.dma.lock();
            // Room first: once the queue exists on the controller its memory
            // must be recorded.
            dma.queues.reserve(1, GFP_KERNEL)?;
            if raw {
                // Counted before the CQ's mapping is looked up: an exporter's
                // revoke after the lookup then keeps that mapping (its
                // commands are unseen). Uncounted only when the controller
                // surely has no such queue.
                self.buffers.raw_pair_created();
            }
            let not_created = |e: Error| {
                if raw {
                    self.buffers.raw_pair_deleted();
                }
                e
            };
            // Under the `dma` lock, which UNMAP takes to remove a mapping.
            let cq_at = match cq_in_map {
                true => Some(
                    self.cq_mapping(req.cq_handle, req.depth)
                        .map_err(not_created)?,
                ),
                false => None,
            };
            let q = QPair::alloc(dev, qid, req.depth, max_transfer, cq_at).map_err(not_created)?;
            let [cq_cmd, sq_cmd] = q.create_cmds();
            if let Err(e) = admin.submit(&sh.dev, sh.cap, cq_cmd, ring) {
                if definitely_failed(e) {
                    return Err(not_created(e));
                }
                maybe_created = true;
                dma.quarantine(Quarantined::Queue(q));
                return Err(e);
            }
            if let Err(e) = admin.submit(&sh.dev, sh.cap, sq_cmd, ring) {
                // The CQ exists: remove it before its memory goes.
                let undone = admin
                    .submit(&sh.dev, sh.cap, command::delete_io_cq(qid), ring)
                    .is_ok();
                if undone && definitely_failed(e) {
                    return Err(not_created(e));
                }
                maybe_created = true;
                dma.quarantine(Quarantined::Queue(q));
                return Err(e);
            }
            let bridge = match (&q.shadow, limits) {
                (Some(s), Some(limits)) => {
                    // The relay's own clones of the pair's memory; the
                    // bridge is stopped before `q` is dropped, quarantined
                    // or lent (`QueueEntry::let_go`, and below).
                    let mem = PairMemory {
                        real_sq: q.sq.clone(),
                        real_cq: q.cq.clone(),
                        shadow: s.clone(),
                    };
                    // The file's running total of relay cost; without room
                    // for it the pair is not made.
                    let started = dma.relay_totals(self.id, self.opener).and_then(|totals| {
                        // SAFETY: `sh`, the controller's shared state, holds
                        // the registry whose entry below owns the bridge, so
                        // it outlives the bridge.
                        unsafe {
                            Bridge::start(
                                &**sh,
                                qid,
                                q.depth,
                                mem,
                                self.buffers.clone(),
                                limits,
                                totals,
                            )
                        }
                    });
                    match started {
                        Ok(b) => Some(b),
                        Err(e) => {
                            let deleted = q
                                .delete_cmds()
                                .into_iter()
                                .all(|c| admin.submit(&sh.dev, sh.cap, c, ring).is_ok());
                            if !deleted {
                                maybe_created = true;
                                dma.quarantine(Quarantined::Queue(q));
                            }
                            return Err(e);
                        }
                    }
                }
                _ => None,
            };
            let sizes = (q.visible_sq().size as u64, q.visible_cq().size as u64);
            let pool = q
                .shadow
                .as_ref()
                .map_or((0, 0), |s| (s.pool.size() as u64, s.pool.dma_address()));
            let entry = QueueEntry {
                file: self.id,
                state: QueueState::Live,
                exports: KVec::new(),
                held: Held::default(),
                bridge,
                q,
            };
            let _ = dma.queues.push_within_capacity(entry);
            Ok((sizes, pool))
        });
        let ((sq_size, cq_size), (prp_size, prp_dma)) = created.inspect_err(|_| {
            if !maybe_created {
                sh.release_qid(qid, self.id);
            }
        })?;
        if !raw {
            // The file rings shadow cells in the shadow page instead.
            sq_db = crate::bridge::SHADOW_SQ_TAIL;
            cq_db = crate::bridge::SHADOW_CQ_HEAD;
            req.prp_offset = qpair::mmap_offset(MapKind::PrpPool, qid);
            req.prp_size = prp_size;
            req.prp_dma = prp_dma;
        }

        req.qid = qid;
        req.sq_offset = qpair::mmap_offset(MapKind::Sq, qid);
        req.sq_size = sq_size;
        if cq_in_map {
            // Not the module's memory: no offset; the bytes of the mapping
            // the controller writes.
            req.cq_offset = 0;
            req.cq_size = qpair::cq_bytes(req.depth) as u64;
        } else {
            req.cq_offset = qpair::mmap_offset(MapKind::Cq, qid);
            req.cq_size = cq_size;
        }
        req.db_offset = qpair::mmap_offset(MapKind::Doorbell, qid);
        req.sq_db = sq_db;
        req.cq_db = cq_db;
        writer.write(&req)?;
        Ok(0)
    }

    /// Where the controller may write a CQ of `depth` entries in mapping
    /// `handle` of this file (`GPUNVME_QPAIR_CQ_IN_MAP`): its handle and
    /// first DMA address. Call under the `dma` lock.
    fn cq_mapping(&self, handle: u32, depth: u32) -> Result<(u32, u64)> {
        let need = qpair::cq_bytes(depth) as u64;
        match self.buffers.single_run(handle) {
            Some((dma, len)) if len >= need => Ok((handle, dma)),
            Some((_, len)) => {
                dev_warn!(
                    self.shared.dev,
                    "CREATE_QPAIR: mapping {} is {} bytes; a CQ of depth {} needs {}\n",
                    handle,
                    len,
                    depth,
                    need
                );
                Err(EINVAL)
            }
            None => {
                match self.buffers.runs(handle) {
                    0 => dev_warn!(
                        self.shared.dev,
                        "CREATE_QPAIR: cq_handle {}: no such mapping on this file\n",
                        handle
                    ),
                    n => dev_warn!(self.shared.dev, "CREATE_QPAIR: mapping {} is {} runs of DMA addresses, not one: the controller needs the CQ contiguous\n", handle, n),
                }
                Err(EINVAL)
            }
        }
    }

    /// Delete `q` on the controller, SQ before CQ. Its memory is freed at
    /// once when nothing reaches it, else goes back to the registry as
    /// retired (while a mapping of this file or an importer that did not
    /// let go, `held`, reaches it), or to the quarantine when the
    /// controller did not confirm the delete. Only a confirmed delete ends
    /// the count of the commands in flight on it (`outstanding`, or the
    /// raw pair itself) in the file's buffers.
    pub(super) fn retire(&self, q: QPair, held: Held, outstanding: Option<Outstanding>) -> Result {
        let sh = &self.shared;
        let exported = !held.is_clean();
        let res = sh.with_admin(self.epoch, |_, admin, ring| {
            for cmd in q.delete_cmds() {
                admin.submit(&sh.dev, sh.cap, cmd, ring)?;
            }
            Ok(())
        });
        if res.is_ok() {
            match outstanding {
                Some(o) => o.release(),
                None if q.shadow.is_none() => self.buffers.raw_pair_deleted(),
                None => {}
            }
        }
        match res {
            Ok(()) => {
                sh.release_qid(q.qid, self.id);
                let mut dma = sh.dma.lock();
                if !dma.is_mapped(q.gen) && !held.still() {
                    // Nothing reaches it any more: freed now.
                    drop(dma);
                    drop((q, held));
                    return Ok(());
                }
                if exported {
                    sh.kept_for_importer(q.qid);
                }
                let entry = QueueEntry {
                    file: self.id,
                    state: QueueState::Retired,
                    exports: KVec::new(),
                    held,
                    bridge: None,
                    q,
                };
                let kept = match dma.queues.reserve(1, GFP_KERNEL) {
                    Ok(()) => dma.queues.push_within_capacity(entry).map_err(|e| e.0),
                    Err(_) => Err(entry),
                };
                if let Err(entry) = kept {
                    // No room to keep it: this file's mappings go (the
                    // controller no longer uses it), and it is freed
                    // unless an importer still holds it.
                    drop(dma);
                    shim::zap_file(self.file);
                    let (q, held, _) = entry.let_go();
                    if held.still() {
                        sh.lend(q, held);
                    }
                }
                Ok(())
            }
            // Unbound meanwhile: the controller may not be disabled yet, so
            // `q` goes to the quarantine, freed after the disable (or with
            // the shared state, which outlives the binding).
            Err(e) => {
                sh.quarantine(if exported {
                    Quarantined::Exported(q, held)
                } else {
                    Quarantined::Queue(q)
                });
                Err(e)
            }
        }
    }

    pub(crate) fn destroy_qpair(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::QpairDestroy, arg, "DESTROY_QPAIR");
        let _busy = self.shared.busy();
        let taken = {
            let mut dma = self.shared.dma.lock();
            self.alive()?;
            dma.take_live(self.id, req.qid)
        };
        let Some(entry) = taken else {
            dev_warn!(
                self.shared.dev,
                "DESTROY_QPAIR: qid {} is not a live queue pair of this file\n",
                req.qid
            );
            return Err(ENOENT);
        };
        // Peers and the relay let go before the controller forgets the queue.
        let (q, held, outstanding) = entry.let_go();
        self.retire(q, held, outstanding)?;
        self.shared.free_unreached();
        Ok(0)
    }
}
