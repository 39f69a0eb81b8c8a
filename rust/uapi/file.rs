// SPDX-License-Identifier: GPL-2.0-only

//! One open file: the ioctls that create and destroy its queue pairs and
//! host-buffer mappings, mmap, and teardown at close. The memory itself is
//! held in the shared DMA registry (see `dma/registry.rs`), named by this
//! file's id.
//!
//! Lock order: admin, then dma. Neither is held across a user copy, and
//! dma is the only lock mmap takes (under the mmap lock).

use kernel::{
    bindings,
    dma::Coherent,
    fs::File,
    mm::virt::VmaNew,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    uaccess::{UserPtr, UserSlice},
};

use crate::bridge::validate::{self, Limits, Ns};
use crate::bridge::{Bridge, Outstanding, PairMemory};
use crate::controller::shared::Shared;
use crate::dma::buffers::Buffers;
use crate::dma::registry::{FileId, Held, MapEntry, Mapped, Quarantined, QueueEntry, QueueState};
use crate::queues::command;
use crate::queues::qpair::{self, MapKind, QPair};
use crate::shim::{self, Export, HostMap, Import};
use crate::uapi::{self, check_header};
use crate::uapi::{owner, quota};

pub(crate) struct OpenState {
    pub(crate) shared: Arc<Shared>,
    file: *mut bindings::file,
    id: FileId,
    /// The controller's epoch at open: once it moves on (the controller
    /// failed or went away), every call fails and every mapping faults.
    epoch: u64,
    /// The namespace a namespace node's file is limited to; 0 for the
    /// controller node.
    node_nsid: u32,
    /// The pages this file mapped: all its shared-mode commands may name.
    buffers: Arc<Buffers>,
    next_handle: Atomic<u32>,
}

// SAFETY: `file` is only handed back to the shared list (never dereferenced
// here); everything else is `Send + Sync`.
unsafe impl Send for OpenState {}
// SAFETY: see above.
unsafe impl Sync for OpenState {}

/// Read an ioctl argument and check its header; log and EINVAL on a bad one.
macro_rules! read_arg {
    ($self:ident, $ty:ty, $arg:expr, $name:literal) => {{
        let (mut reader, writer) =
            UserSlice::new(UserPtr::from_addr($arg), size_of::<$ty>()).reader_writer();
        let req: $ty = reader.read()?;
        if let Err(e) = check_header(req.size, req.version, size_of::<$ty>(), &req.reserved) {
            dev_warn!($self.shared.dev, "{}: bad argument: {:?}\n", $name, e);
            return Err(EINVAL);
        }
        (req, writer)
    }};
}

/// A command that failed with a status did nothing; one that timed out (or
/// never got an answer) may still happen, so its memory must be kept.
fn definitely_failed(e: Error) -> bool {
    e == EIO
}

impl OpenState {
    pub(crate) fn new(shared: Arc<Shared>, file: &File, node_nsid: u32) -> Result<KBox<Self>> {
        let epoch = shared.open_epoch()?;
        let buffers = Arc::pin_init(Buffers::new(), GFP_KERNEL)?;
        let raw = shim::file_ptr(file);
        let id = shared.register_file(raw)?;
        let sh = shared.clone();
        KBox::new(
            Self {
                shared,
                file: raw,
                id,
                epoch,
                node_nsid,
                buffers,
                next_handle: Atomic::new(1),
            },
            GFP_KERNEL,
        )
        .map_err(|e| {
            sh.unregister_file(raw);
            e.into()
        })
    }

    /// Ok while the controller serves this file: ENODEV once it is gone
    /// (unbound, removed, shut down, suspended), EIO once it failed (fatal
    /// status, PCI error), even after it was re-initialised for new files.
    pub(crate) fn alive(&self) -> Result {
        self.shared.check(self.epoch)
    }

    /// For `poll()`: has this file been cut off?
    pub(crate) fn cut_off(&self) -> bool {
        self.alive().is_err()
    }

    pub(crate) fn get_info(&self, arg: usize) -> Result<isize> {
        let (req, mut writer) = read_arg!(self, uapi::Info, arg, "GET_INFO");
        let sh = &self.shared;
        self.alive()?;
        let mut out = sh.info;
        sh.geometry.report(&mut out);
        out.size = req.size;
        out.version = req.version;
        out.iommu_mode = shim::iommu_mode(&sh.dev);
        let owner = sh.owner();
        if owner == 0 || owner == self.id {
            out.modes |= uapi::MODE_SHARED;
            if owner::may_own(
                &sh.dev,
                self.node_nsid,
                crate::allow_unsafe_no_iommu(),
                false,
            )
            .is_ok()
            {
                out.modes |= uapi::MODE_OWNER;
            }
        }
        out.shared_max_transfer = validate::shared_max_transfer(sh.info.mdts_bytes);
        out.node_nsid = self.node_nsid;
        if owner != self.id {
            out.quota_qpairs = quota::Kind::Qpairs.limit();
            out.quota_maps = quota::Kind::Maps.limit();
        }
        writer.write(&out)?;
        Ok(0)
    }

    pub(crate) fn claim_owner(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::Owner, arg, "CLAIM_OWNER");
        let sh = &self.shared;
        if req.flags != 0 {
            dev_warn!(sh.dev, "CLAIM_OWNER: unknown flags {:#x}\n", req.flags);
            return Err(EINVAL);
        }
        self.alive()?;
        owner::may_own(
            &sh.dev,
            self.node_nsid,
            crate::allow_unsafe_no_iommu(),
            true,
        )?;
        // Under the admin lock, as every MAP_* is: an owner's raw SQEs could
        // name any buffer mapped for the device, so no other file may have one.
        sh.with_admin(self.epoch, |_, _, _| {
            if sh.dma.lock().maps.iter().any(|m| m.file != self.id) {
                dev_warn!(
                    sh.dev,
                    "CLAIM_OWNER: another file has buffers mapped for the controller\n"
                );
                return Err(EBUSY);
            }
            sh.claim_owner(self.id)
        })?;
        req.iommu_mode = shim::iommu_mode(&sh.dev);
        dev_info!(
            sh.dev,
            "a file now owns the controller (raw access; IOMMU {})\n",
            owner::iommu_name(req.iommu_mode)
        );
        writer.write(&req)?;
        Ok(0)
    }

    /// EBUSY (and a log line) while another file owns the controller, or
    /// it waits for its reset after an owner.
    fn not_owned_by_another(&self, what: &str) -> Result {
        self.shared.not_owned_by_another(self.id, what)
    }

    /// EDQUOT unless this file (an owner is exempt) may map one more
    /// buffer. Called under the admin lock, which every MAP_* holds until
    /// its mapping is recorded, so two maps cannot both pass the last slot.
    fn maps_within_quota(&self, call: &str) -> Result {
        let sh = &self.shared;
        if sh.owner() == self.id {
            return Ok(());
        }
        let held = sh
            .dma
            .lock()
            .maps
            .iter()
            .filter(|m| m.file == self.id)
            .count();
        quota::check(&sh.dev, call, quota::Kind::Maps, held)
    }

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

    pub(crate) fn create_qpair(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::QpairCreate, arg, "CREATE_QPAIR");
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
        let limits = if raw { None } else { Some(self.limits()?) };
        self.alive()?;
        if !raw {
            sh.refresh_namespaces(self.epoch, self.node_nsid)?;
        }
        sh.free_unreached();
        sh.recover_if_idle();
        let qid = sh.claim_qid(self.id)?;
        let Some((page, mut sq_db, mut cq_db)) = qpair::doorbell_page(sh.cap, qid) else {
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
                    let mem = PairMemory {
                        real_sq: q.sq.as_mut_ptr().cast(),
                        real_cq: q.cq.as_ptr().cast(),
                        cells: s.cells.as_mut_ptr().cast(),
                        shadow_sq: s.sq.as_ptr().cast(),
                        shadow_cq: s.cq.as_mut_ptr().cast(),
                        pool: s.pool.as_ptr().cast(),
                        pool_dma: s.pool.dma_address(),
                        pool_bytes: s.pool.size(),
                        lists: s.lists.as_mut_ptr().cast(),
                        lists_dma: s.lists.dma_address(),
                        list_entries: s.list_entries,
                    };
                    // SAFETY: `mem` points into `q`'s allocations, which the
                    // registry entry below drops only after the bridge.
                    match unsafe {
                        Bridge::start(sh, qid, q.depth, mem, self.buffers.clone(), limits)
                    } {
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
            let sizes = (q.visible_sq().size() as u64, q.visible_cq().size() as u64);
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
    fn retire(&self, q: QPair, held: Held, outstanding: Option<Outstanding>) -> Result {
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

    pub(crate) fn export(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::Export, arg, "EXPORT");
        let sh = &self.shared;
        // The cast is a no-op here, not with every bindgen (Debian's kernel).
        #[allow(clippy::unnecessary_cast)]
        let allowed = (bindings::O_CLOEXEC | bindings::O_RDWR) as u32;
        if req.flags & !allowed != 0 || req.pad0 != 0 {
            dev_warn!(
                sh.dev,
                "EXPORT: flags {:#x}: only O_CLOEXEC and O_RDWR are allowed\n",
                req.flags
            );
            return Err(EINVAL);
        }
        if !matches!(
            req.kind,
            uapi::EXPORT_DOORBELL | uapi::EXPORT_SQ | uapi::EXPORT_CQ | uapi::EXPORT_PRP_POOL
        ) {
            dev_warn!(sh.dev, "EXPORT: unknown kind {}\n", req.kind);
            return Err(EINVAL);
        }
        // The device must stay bound while the export is made: hold the admin lock.
        let (length, fd) = sh.with_admin(self.epoch, |_, _, _| {
            let mut dma = sh.dma.lock();
            let Some(e) = dma.live_entry_mut(self.id, req.qid) else {
                dev_warn!(
                    sh.dev,
                    "EXPORT: qid {} is not a live queue pair of this file\n",
                    req.qid
                );
                return Err(ENOENT);
            };
            if sh.owner() != self.id {
                quota::check(&sh.dev, "EXPORT", quota::Kind::Exports, e.exports.len())?;
            }
            e.exports.reserve(1, GFP_KERNEL)?;
            // Queue memory: a coherent allocation of the pair.
            let memory = |c: &Coherent<[u8]>| -> Result<(Export, i32, u64)> {
                let (x, fd) = Export::memory(
                    &sh.dev,
                    c.as_mut_ptr().cast(),
                    c.dma_address(),
                    c.size(),
                    req.flags,
                )?;
                Ok((x, fd, c.size() as u64))
            };
            let (export, fd, length) = match req.kind {
                uapi::EXPORT_DOORBELL => match &e.q.shadow {
                    // Shared: the shadow cells are ordinary memory.
                    Some(s) => memory(&s.cells)?,
                    None => {
                        let (page, _, _) = qpair::doorbell_page(sh.cap, req.qid).ok_or(EINVAL)?;
                        let (x, fd) = Export::mmio(&sh.dev, page as u64, 4096, req.flags)?;
                        (x, fd, 4096)
                    }
                },
                uapi::EXPORT_SQ => memory(e.q.visible_sq())?,
                uapi::EXPORT_PRP_POOL => {
                    let Some(s) = &e.q.shadow else {
                        dev_warn!(
                            sh.dev,
                            "EXPORT: qid {} is a raw pair: it has no PRP pool\n",
                            req.qid
                        );
                        return Err(EINVAL);
                    };
                    memory(&s.pool)?
                }
                uapi::EXPORT_CQ if e.q.cq_in_map.is_some() => {
                    dev_warn!(
                        sh.dev,
                        "EXPORT: the CQ of qid {} is in a mapping of this file: export that memory itself\n",
                        req.qid
                    );
                    return Err(EINVAL);
                }
                uapi::EXPORT_CQ => memory(e.q.visible_cq())?,
                k => {
                    dev_warn!(sh.dev, "EXPORT: unknown kind {}\n", k);
                    return Err(EINVAL);
                }
            };
            let _ = e.exports.push_within_capacity(export);
            Ok((length, fd))
        })?;
        req.fd = fd;
        req.length = length;
        // The fd is already installed; if the copy fails the caller can't
        // learn it, but it is revoked with the queue pair all the same.
        writer.write(&req)?;
        Ok(0)
    }

    pub(crate) fn map_host(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::MapHost, arg, "MAP_HOST");
        let sh = &self.shared;
        if req.addr % 4096 != 0
            || req.len % 4096 != 0
            || req.len == 0
            || req.len > uapi::MAX_MAP_BYTES
            || req.pad0 != 0
        {
            dev_warn!(
                sh.dev,
                "MAP_HOST: addr {:#x} len {:#x}: need 4 KiB alignment and 0 < len <= {:#x}\n",
                req.addr,
                req.len,
                uapi::MAX_MAP_BYTES
            );
            return Err(EINVAL);
        }
        let npages = (req.len / 4096) as usize;
        let mut addrs = KVVec::from_elem(0u64, npages, GFP_KERNEL)?;
        let handle = self.next_handle.fetch_add(1, Relaxed);
        // Pinning may wait on the process's own page faults (userfaultfd):
        // no lock is held meanwhile, only the mapping needs the device.
        let mut map = HostMap::pin(req.addr, req.len).inspect_err(|e| {
            dev_warn!(
                sh.dev,
                "MAP_HOST: pinning {:#x}+{:#x} failed: {:?}\n",
                req.addr,
                req.len,
                e
            )
        })?;
        sh.with_admin(self.epoch, |dev, _, _| {
            self.not_owned_by_another("MAP_HOST")?;
            self.maps_within_quota("MAP_HOST")?;
            map.map(dev, &mut addrs)?;
            sh.dma.lock().maps.push(
                MapEntry {
                    file: self.id,
                    handle,
                    map: Mapped::Host(map),
                },
                GFP_KERNEL,
            )?;
            self.buffers
                .add(handle, &addrs)
                .inspect_err(|_| drop(self.drop_map(handle)))
        })
        .inspect_err(|e| {
            dev_warn!(
                sh.dev,
                "MAP_HOST: {:#x}+{:#x} failed: {:?}\n",
                req.addr,
                req.len,
                e
            )
        })?;
        self.hand_out(handle, req.dma_addrs, &addrs, || {
            req.handle = handle;
            writer.write(&req)
        })
    }

    pub(crate) fn map_dmabuf(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::MapDmabuf, arg, "MAP_DMABUF");
        let sh = &self.shared;
        let max = uapi::MAX_MAP_BYTES / 4096;
        if req.max_pages == 0 || req.max_pages > max {
            dev_warn!(
                sh.dev,
                "MAP_DMABUF: max_pages {} outside 1..={}\n",
                req.max_pages,
                max
            );
            return Err(EINVAL);
        }
        let mut addrs = KVVec::from_elem(0u64, req.max_pages as usize, GFP_KERNEL)?;
        let handle = self.next_handle.fetch_add(1, Relaxed);
        let len = sh.with_admin(self.epoch, |_, _, _| {
            self.not_owned_by_another("MAP_DMABUF")?;
            self.maps_within_quota("MAP_DMABUF")?;
            let (import, len) = Import::new(&sh.dev, req.fd, &mut addrs, &self.buffers, handle)?;
            // A revoke that came before the pages are added removes nothing
            // (and may have unmapped them): checked under the lock it takes.
            self.buffers
                .add_unless_revoked(handle, &addrs[..(len / 4096) as usize], || {
                    import.revoked()
                })
                .inspect_err(|e| {
                    if *e == ENODEV {
                        dev_warn!(
                            sh.dev,
                            "MAP_DMABUF: the exporter revoked the buffer while it was being imported\n"
                        );
                    }
                })?;
            sh.dma
                .lock()
                .maps
                .push(
                    MapEntry {
                        file: self.id,
                        handle,
                        map: Mapped::DmaBuf(import),
                    },
                    GFP_KERNEL,
                )
                .inspect_err(|_| self.buffers.remove(handle))?;
            Ok(len)
        })?;
        self.hand_out(
            handle,
            req.dma_addrs,
            &addrs[..(len / 4096) as usize],
            || {
                req.handle = handle;
                req.len = len;
                writer.write(&req)
            },
        )
    }

    /// Copy a new mapping's page addresses to the user array at `dst`, then
    /// the reply; on a bad pointer the mapping is undone.
    fn hand_out(
        &self,
        handle: u32,
        dst: u64,
        addrs: &[u64],
        reply: impl FnOnce() -> Result,
    ) -> Result<isize> {
        let copied = (|| -> Result {
            let mut out =
                UserSlice::new(UserPtr::from_addr(dst as usize), addrs.len() * 8).writer();
            for a in addrs {
                out.write(a)?;
            }
            reply()
        })();
        if let Err(e) = copied {
            let _busy = self.shared.busy();
            if !self.shared.unbound() {
                drop(self.drop_map(handle));
            }
            return Err(e);
        }
        Ok(0)
    }

    /// Undo a mapping the file never got: the returned memory is for the
    /// caller to free outside the lock. Its pages were in `buffers`, so, as
    /// UNMAP refuses for the same reason, while this file has pairs a
    /// command may already name them: then the mapping stays the file's
    /// (out of `buffers`: no new command the relay checks may name it, nor
    /// may a new raw pair put its CQ there; a raw pair's own SQEs are not
    /// checked, and may reach it as they may reach any of the file's
    /// memory), freed with its others at close once the pairs are deleted,
    /// and `None` is returned. (Not kept until the
    /// controller is disabled: an import would keep its exporter's buffer,
    /// and this module when it is its own export, pinned until unbind.)
    fn drop_map(&self, handle: u32) -> Option<Mapped> {
        self.buffers.remove(handle);
        let mut dma = self.shared.dma.lock();
        if self.shared.qids_held(self.id) != 0 {
            return None;
        }
        let i = dma
            .maps
            .iter()
            .position(|m| m.file == self.id && m.handle == handle)?;
        Some(dma.maps.remove(i).ok()?.map)
    }

    pub(crate) fn unmap(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::Unmap, arg, "UNMAP");
        let sh = &self.shared;
        let _busy = sh.busy();
        let map = {
            let mut dma = sh.dma.lock();
            // After unbind every mapping is gone (unbind freed it).
            let i = if !sh.unbound() {
                dma.maps
                    .iter()
                    .position(|m| m.file == self.id && m.handle == req.handle)
            } else {
                None
            };
            let Some(i) = i else {
                dev_warn!(
                    sh.dev,
                    "UNMAP: no mapping with handle {} on this file\n",
                    req.handle
                );
                return Err(ENOENT);
            };
            // Not only live pairs: one being destroyed, or whose delete the
            // controller never confirmed, may still run commands naming it.
            let held = sh.qids_held(self.id);
            if held != 0 {
                dev_warn!(sh.dev, "UNMAP: {} queue pair(s) of this file may still DMA into it (live, or deleted without the controller's confirmation); destroy them first or close the file\n", held);
                return Err(EBUSY);
            }
            self.buffers.remove(req.handle);
            dma.maps.remove(i).map_err(|_| EINVAL)?.map
        };
        drop(map);
        // It may have been an import of a deleted queue's export.
        sh.free_unreached();
        Ok(0)
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        let sh = &self.shared;
        // SAFETY: `vma` is a valid VMA being set up; reading a field is fine.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff } as u64;
        let len = vma.end() - vma.start();
        // As above: bindgen may type VM_SHARED differently.
        #[allow(clippy::unnecessary_cast)]
        let shared_vma = vma.flags() & bindings::VM_SHARED as usize != 0;
        if !shared_vma {
            dev_warn!(sh.dev, "mmap: must be MAP_SHARED\n");
            return Err(EINVAL);
        }
        let Some((kind, qid)) = qpair::decode_pgoff(pgoff) else {
            dev_warn!(sh.dev, "mmap: offset {:#x} names nothing\n", pgoff * 4096);
            return Err(EINVAL);
        };
        self.alive()?;
        let dma = sh.dma.lock();
        let Some(q) = dma.live_queue(self.id, qid) else {
            dev_warn!(
                sh.dev,
                "mmap: qid {} is not a live queue pair of this file\n",
                qid
            );
            return Err(EINVAL);
        };
        let (want, what) = match (kind, &q.shadow) {
            (MapKind::Sq, _) => (q.visible_sq().size(), "SQ"),
            (MapKind::Cq, _) if q.cq_in_map.is_some() => {
                dev_warn!(
                    sh.dev,
                    "mmap: the CQ of qid {} is in a mapping of this file, not the module's\n",
                    qid
                );
                return Err(EINVAL);
            }
            (MapKind::Cq, _) => (q.visible_cq().size(), "CQ"),
            (MapKind::Doorbell, _) => (4096, "doorbell page"),
            (MapKind::PrpPool, Some(s)) => (s.pool.size(), "PRP pool"),
            (MapKind::PrpPool, None) => {
                dev_warn!(
                    sh.dev,
                    "mmap: qid {} is a raw pair: it has no PRP pool\n",
                    qid
                );
                return Err(EINVAL);
            }
        };
        if len != want {
            dev_warn!(
                sh.dev,
                "mmap: {} of qid {} is {} bytes, not {}\n",
                what,
                qid,
                want,
                len
            );
            return Err(EINVAL);
        }
        let (gen, mmio) = (q.gen, kind == MapKind::Doorbell && q.shadow.is_none());
        drop(dma);
        let delay = sh.mmap_delay_ms.load(Relaxed);
        if delay != 0 {
            // Test knob: hold this mmap after its checks (see `Shared`).
            kernel::time::delay::fsleep(kernel::time::Delta::from_millis(delay.into()));
        }
        // Counted before the VMA can fault, so a destroy keeps the pair
        // (a pair destroyed meanwhile is freed; its faults are SIGBUS).
        let mut dma = sh.dma.lock();
        dma.reserve_mapping()?;
        shim::mmap_setup(
            vma,
            core::ptr::from_ref(self).cast(),
            gen,
            kind as u32,
            mmio,
        )?;
        dma.map_opened(gen);
        Ok(())
    }

    /// The last VMA of an mmap of queue pair `gen` went: a retired pair
    /// nothing else reaches is freed.
    fn mapping_closed(&self, gen: u64) {
        self.shared.dma.lock().map_closed(gen);
        self.shared.free_unreached();
    }

    /// A fault on a mapping of this file: insert page `index` of object
    /// `gen`/`kind`, or refuse (SIGBUS) once the controller is gone or the
    /// object is. Under the `dma` lock, where unbind marks the controller
    /// gone, so nothing is inserted after unbind's zap.
    fn fault(
        &self,
        gen: u64,
        kind: u32,
        index: u64,
        vma: *mut core::ffi::c_void,
        addr: usize,
    ) -> u32 {
        let sh = &self.shared;
        let dma = sh.dma.lock();
        if self.alive().is_err() {
            return shim::fault_sigbus();
        }
        // Live or retired (a destroyed pair stays while it is mapped).
        let Some(q) = dma
            .queues
            .iter()
            .find(|e| e.file == self.id && e.q.gen == gen)
            .map(|e| &e.q)
        else {
            return shim::fault_sigbus();
        };
        let mem = match kind {
            k if k == MapKind::Sq as u32 => Some(q.visible_sq()),
            k if k == MapKind::Cq as u32 && q.cq_in_map.is_none() => Some(q.visible_cq()),
            k if k == MapKind::PrpPool as u32 => q.shadow.as_ref().map(|s| &s.pool),
            k if k == MapKind::Doorbell as u32 => match &q.shadow {
                Some(s) => Some(&s.cells),
                None => {
                    if index != 0 {
                        return shim::fault_sigbus();
                    }
                    let Some((page, _, _)) = qpair::doorbell_page(sh.cap, q.qid) else {
                        return shim::fault_sigbus();
                    };
                    // SAFETY: `vma` is faulting; the device is bound (not
                    // gone, under the lock unbind takes first), and unbind
                    // zaps this mapping before the BAR is released.
                    return unsafe { shim::insert_bar(vma, addr, &sh.dev, page) };
                }
            },
            _ => None,
        };
        let Some(mem) = mem else {
            return shim::fault_sigbus();
        };
        let off = index as usize * crate::controller::regs::PAGE_SIZE;
        if off >= mem.size() {
            return shim::fault_sigbus();
        }
        // SAFETY: `vma` is faulting; `off` is inside `mem`, which is freed
        // only once no mmap of it is left (counted under this lock from
        // mmap to its last VMA's close, see `mapping_closed`), or after a
        // failure or unbind, after the zap that follows marking the
        // controller gone under this lock.
        unsafe { shim::insert_coherent(vma, addr, mem.as_mut_ptr().cast(), off) }
    }
}

/// Called by the shim when the last VMA of an mmap of this file goes.
#[no_mangle]
extern "C" fn gpunvme_mmap_closed(state: *const core::ffi::c_void, gen: u64) {
    // SAFETY: `state` is the `OpenState` of the file the VMA mapped, set
    // at mmap; the VMA holds a reference on that file until after this.
    let me = unsafe { &*state.cast::<OpenState>() };
    me.mapping_closed(gen)
}

/// Called by the shim's fault handler.
#[no_mangle]
extern "C" fn gpunvme_mmap_fault(
    state: *const core::ffi::c_void,
    gen: u64,
    kind: u32,
    index: u64,
    vma: *mut core::ffi::c_void,
    addr: usize,
) -> u32 {
    // SAFETY: `state` is the `OpenState` of the file the VMA maps, set at
    // mmap; the VMA holds a reference on that file, so it is alive.
    let me = unsafe { &*state.cast::<OpenState>() };
    me.fault(gen, kind, index, vma, addr)
}

/// Close: delete this file's queues on the controller (SQ before CQ), then
/// free their memory and unpin its buffers. If a delete fails, now or at an
/// earlier DESTROY_QPAIR, all of the file's memory is kept until the
/// controller is disabled (re-initialised once idle, or unbound).
impl Drop for OpenState {
    fn drop(&mut self) {
        let sh = &self.shared;
        let _busy = sh.busy();
        // Once the controller is gone, unbind frees what this file had.
        let take = |sh: &Shared| {
            let mut dma = sh.dma.lock();
            if sh.unbound() {
                return Ok((KVec::new(), KVec::new()));
            }
            dma.take_file(self.id)
        };
        let taken = take(sh);
        let Ok((queues, maps)) = taken else {
            dev_err!(
                sh.dev,
                "out of memory at close: this file's queues stay until unbind\n"
            );
            sh.unregister_file(self.file);
            return;
        };
        let mut stuck = false;
        for e in queues {
            // Peers and the relay let go before the queues are deleted and
            // their qid can be handed out again.
            let live = e.state == QueueState::Live;
            let (q, held, outstanding) = e.let_go();
            if live {
                stuck |= self.retire(q, held, outstanding).is_err();
            } else if held.still() {
                // Retired: the controller confirmed the delete.
                sh.lend(q, held);
            }
        }
        // What `retire` kept as retired (no mapping is left: the file is
        // being released) goes now, or waits for its importers.
        if let Ok((retired, _)) = take(sh) {
            for e in retired {
                let (q, held, _) = e.let_go();
                if held.still() {
                    sh.lend(q, held);
                }
            }
        }
        // A queue ID the file still holds names a queue whose delete the
        // controller never confirmed, now or at an earlier DESTROY_QPAIR
        // that timed out: its commands may still run, into any of the
        // file's buffers. They are kept until the controller is disabled.
        stuck |= sh.qids_held(self.id) != 0;
        for m in maps {
            if stuck {
                sh.quarantine(Quarantined::Buffer(m.map));
            }
        }
        sh.orphan_qids(self.id);
        sh.release_owner(self.id);
        sh.unregister_file(self.file);
        sh.free_unreached();
        sh.recover_if_idle();
        if sh.owner_left() {
            dev_warn!(
                sh.dev,
                "its owner left while an importer holds one of its exports: no file is admitted (EBUSY) until that importer lets go and the controller is reset\n"
            );
        }
    }
}
