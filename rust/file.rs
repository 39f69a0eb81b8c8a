// SPDX-License-Identifier: GPL-2.0

//! One open file: the ioctls that create and destroy its queue pairs and
//! host-buffer mappings, mmap, and teardown at close. The memory itself is
//! held in the shared DMA registry (see `dma_registry.rs`), named by this
//! file's id.
//!
//! Lock order: admin, then dma. Neither is held across a user copy, and
//! dma is the only lock mmap takes (under the mmap lock).

use kernel::{
    bindings,
    fs::File,
    mm::virt::VmaNew,
    prelude::*,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    uaccess::{UserPtr, UserSlice},
};

use crate::bridge::Bridge;
use crate::command;
use crate::dma_registry::{FileId, MapEntry, Mapped, QueueEntry, QueueState, Quarantined};
use crate::qpair::{self, MapKind, QPair};
use crate::shared::Shared;
use crate::shim::{self, Export, HostMap, Import};
use crate::uapi::{self, check_header};

pub(crate) struct OpenState {
    pub(crate) shared: Arc<Shared>,
    file: *mut bindings::file,
    id: FileId,
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
        let (mut reader, writer) = UserSlice::new(UserPtr::from_addr($arg), size_of::<$ty>()).reader_writer();
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
    pub(crate) fn new(shared: Arc<Shared>, file: &File) -> Result<KBox<Self>> {
        let raw = shim::file_ptr(file);
        let id = shared.register_file(raw)?;
        let sh = shared.clone();
        KBox::new(Self { shared, file: raw, id, next_handle: Atomic::new(1) }, GFP_KERNEL).map_err(|e| {
            sh.unregister_file(raw);
            e.into()
        })
    }

    pub(crate) fn get_info(&self, arg: usize) -> Result<isize> {
        let (req, mut writer) = read_arg!(self, uapi::Info, arg, "GET_INFO");
        self.shared.alive()?;
        let mut out = self.shared.info;
        out.size = req.size;
        out.version = req.version;
        writer.write(&out)?;
        Ok(0)
    }

    pub(crate) fn create_qpair(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::QpairCreate, arg, "CREATE_QPAIR");
        let sh = &self.shared;
        let max = sh.info.max_queue_entries;
        if req.depth < uapi::MIN_QUEUE_DEPTH || req.depth > max {
            dev_warn!(sh.dev, "CREATE_QPAIR: depth {} outside {}..={}\n", req.depth, uapi::MIN_QUEUE_DEPTH, max);
            return Err(EINVAL);
        }
        if req.flags & !uapi::QPAIR_BRIDGED != 0 || req.pad0 != 0 || req.pad1 != 0 {
            dev_warn!(sh.dev, "CREATE_QPAIR: unknown flags {:#x}\n", req.flags);
            return Err(EINVAL);
        }
        sh.alive()?;
        let qid = sh.claim_qid()?;
        let bridged = req.flags & uapi::QPAIR_BRIDGED != 0;
        let Some((_, mut sq_db, mut cq_db)) = qpair::doorbell_page(sh.cap, qid) else {
            sh.release_qid(qid);
            dev_warn!(sh.dev, "CREATE_QPAIR: doorbell stride {} puts qid {} on two pages\n", sh.cap.doorbell_stride(), qid);
            return Err(EOPNOTSUPP);
        };

        let created = sh.with_admin(|dev, admin, ring| {
            let q = QPair::alloc(dev, qid, req.depth, bridged)?;
            let mut dma = sh.dma.lock();
            // Room first: once the queue exists on the controller its memory
            // must be recorded.
            dma.queues.reserve(1, GFP_KERNEL)?;
            let [cq_cmd, sq_cmd] = q.create_cmds();
            if let Err(e) = admin.submit(&sh.dev, sh.cap, cq_cmd, ring) {
                if !definitely_failed(e) {
                    dma.quarantine(Quarantined::Queue(q));
                }
                return Err(e);
            }
            if let Err(e) = admin.submit(&sh.dev, sh.cap, sq_cmd, ring) {
                // The CQ exists: remove it before its memory goes.
                let undone = admin.submit(&sh.dev, sh.cap, command::delete_io_cq(qid), ring).is_ok();
                if !(undone && definitely_failed(e)) {
                    dma.quarantine(Quarantined::Queue(q));
                }
                return Err(e);
            }
            let bridge = match &q.shadow {
                None => None,
                // SAFETY: the pointers are into `q`'s allocations, which the
                // registry entry below drops only after the bridge.
                Some(sh_mem) => match unsafe {
                    Bridge::start(sh, qid, q.depth, q.cq.as_ptr().cast(), sh_mem.cells.as_mut_ptr().cast(), sh_mem.cq.as_mut_ptr().cast())
                } {
                    Ok(b) => Some(b),
                    Err(e) => {
                        let deleted = q.delete_cmds().into_iter().all(|c| admin.submit(&sh.dev, sh.cap, c, ring).is_ok());
                        if !deleted {
                            dma.quarantine(Quarantined::Queue(q));
                        }
                        return Err(e);
                    }
                },
            };
            let sizes = (q.sq.size() as u64, q.visible_cq().size() as u64);
            let entry = QueueEntry { file: self.id, state: QueueState::Live, exports: KVec::new(), bridge, q };
            let _ = dma.queues.push_within_capacity(entry);
            Ok(sizes)
        });
        let (sq_size, cq_size) = created.inspect_err(|_| sh.release_qid(qid))?;
        if bridged {
            // The peer writes shadow cells in the shadow page instead.
            sq_db = crate::bridge::SHADOW_SQ_TAIL;
            cq_db = crate::bridge::SHADOW_CQ_HEAD;
        }

        req.qid = qid;
        req.sq_offset = qpair::mmap_offset(MapKind::Sq, qid);
        req.sq_size = sq_size;
        req.cq_offset = qpair::mmap_offset(MapKind::Cq, qid);
        req.cq_size = cq_size;
        req.db_offset = qpair::mmap_offset(MapKind::Doorbell, qid);
        req.sq_db = sq_db;
        req.cq_db = cq_db;
        writer.write(&req)?;
        Ok(0)
    }

    /// Delete `q` on the controller, SQ before CQ. Its memory goes back to
    /// the registry as retired (it may still be mapped until close), or to
    /// the quarantine when the controller did not confirm the delete.
    fn retire(&self, q: QPair) -> Result {
        let sh = &self.shared;
        let res = sh.with_admin(|_, admin, ring| {
            for cmd in q.delete_cmds() {
                admin.submit(&sh.dev, sh.cap, cmd, ring)?;
            }
            Ok(())
        });
        match res {
            Ok(()) => {
                sh.release_qid(q.qid);
                let mut dma = sh.dma.lock();
                let entry = QueueEntry { file: self.id, state: QueueState::Retired, exports: KVec::new(), bridge: None, q };
                if dma.queues.push(entry, GFP_KERNEL).is_err() {
                    // Dropped (freed) instead; the controller no longer uses
                    // it, and this file's mappings go first.
                    shim::zap_file(self.file);
                }
                Ok(())
            }
            // Unbound meanwhile: the controller is disabled, `q` may go.
            Err(e) if e == ENODEV => Err(e),
            Err(e) => {
                sh.quarantine(Quarantined::Queue(q));
                Err(e)
            }
        }
    }

    pub(crate) fn destroy_qpair(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::QpairDestroy, arg, "DESTROY_QPAIR");
        self.shared.alive()?;
        let Some(q) = self.shared.dma.lock().take_live(self.id, req.qid) else {
            dev_warn!(self.shared.dev, "DESTROY_QPAIR: qid {} is not a live queue pair of this file\n", req.qid);
            return Err(ENOENT);
        };
        self.retire(q)?;
        Ok(0)
    }

    pub(crate) fn export(&self, arg: usize) -> Result<isize> {
        let (mut req, mut writer) = read_arg!(self, uapi::Export, arg, "EXPORT");
        let sh = &self.shared;
        let allowed = (bindings::O_CLOEXEC | bindings::O_RDWR) as u32;
        if req.flags & !allowed != 0 || req.pad0 != 0 {
            dev_warn!(sh.dev, "EXPORT: flags {:#x}: only O_CLOEXEC and O_RDWR are allowed\n", req.flags);
            return Err(EINVAL);
        }
        // The device must stay bound while the export is made: hold the admin lock.
        let (length, fd) = sh.with_admin(|_, _, _| {
            let mut dma = sh.dma.lock();
            let Some(e) = dma.live_entry_mut(self.id, req.qid) else {
                dev_warn!(sh.dev, "EXPORT: qid {} is not a live queue pair of this file\n", req.qid);
                return Err(ENOENT);
            };
            e.exports.reserve(1, GFP_KERNEL)?;
            let (export, fd, length) = match req.kind {
                uapi::EXPORT_DOORBELL => match &e.q.shadow {
                    // Bridged: the shadow cells are ordinary memory.
                    Some(s) => {
                        let (x, fd) = Export::memory(&sh.dev, s.cells.as_mut_ptr().cast(), s.cells.dma_address(), s.cells.size(), req.flags)?;
                        (x, fd, s.cells.size() as u64)
                    }
                    None => {
                        let (page, _, _) = qpair::doorbell_page(sh.cap, req.qid).ok_or(EINVAL)?;
                        let (x, fd) = Export::mmio(&sh.dev, page as u64, 4096, req.flags)?;
                        (x, fd, 4096)
                    }
                },
                uapi::EXPORT_SQ => {
                    let (x, fd) = Export::memory(&sh.dev, e.q.sq.as_mut_ptr().cast(), e.q.sq.dma_address(), e.q.sq.size(), req.flags)?;
                    (x, fd, e.q.sq.size() as u64)
                }
                uapi::EXPORT_CQ => {
                    let cq = e.q.visible_cq();
                    let (x, fd) = Export::memory(&sh.dev, cq.as_mut_ptr().cast(), cq.dma_address(), cq.size(), req.flags)?;
                    (x, fd, cq.size() as u64)
                }
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
        if req.addr % 4096 != 0 || req.len % 4096 != 0 || req.len == 0 || req.len > uapi::MAX_MAP_BYTES || req.pad0 != 0 {
            dev_warn!(sh.dev, "MAP_HOST: addr {:#x} len {:#x}: need 4 KiB alignment and 0 < len <= {:#x}\n",
                      req.addr, req.len, uapi::MAX_MAP_BYTES);
            return Err(EINVAL);
        }
        let npages = (req.len / 4096) as usize;
        let mut addrs = KVVec::from_elem(0u64, npages, GFP_KERNEL)?;
        let handle = self.next_handle.fetch_add(1, Relaxed);
        sh.with_admin(|dev, _, _| {
            let map = HostMap::new(dev, req.addr, req.len, &mut addrs)?;
            sh.dma.lock().maps.push(MapEntry { file: self.id, handle, map: Mapped::Host(map) }, GFP_KERNEL)?;
            Ok(())
        })
        .inspect_err(|e| dev_warn!(sh.dev, "MAP_HOST: {:#x}+{:#x} failed: {:?}\n", req.addr, req.len, e))?;
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
            dev_warn!(sh.dev, "MAP_DMABUF: max_pages {} outside 1..={}\n", req.max_pages, max);
            return Err(EINVAL);
        }
        let mut addrs = KVVec::from_elem(0u64, req.max_pages as usize, GFP_KERNEL)?;
        let handle = self.next_handle.fetch_add(1, Relaxed);
        let len = sh.with_admin(|_, _, _| {
            let (import, len) = Import::new(&sh.dev, req.fd, &mut addrs)?;
            sh.dma.lock().maps.push(MapEntry { file: self.id, handle, map: Mapped::DmaBuf(import) }, GFP_KERNEL)?;
            Ok(len)
        })?;
        self.hand_out(handle, req.dma_addrs, &addrs[..(len / 4096) as usize], || {
            req.handle = handle;
            req.len = len;
            writer.write(&req)
        })
    }

    /// Copy a new mapping's page addresses to the user array at `dst`, then
    /// the reply; on a bad pointer the mapping is undone.
    fn hand_out(&self, handle: u32, dst: u64, addrs: &[u64], reply: impl FnOnce() -> Result) -> Result<isize> {
        let copied = (|| -> Result {
            let mut out = UserSlice::new(UserPtr::from_addr(dst as usize), addrs.len() * 8).writer();
            for a in addrs {
                out.write(a)?;
            }
            reply()
        })();
        if let Err(e) = copied {
            self.drop_map(handle);
            return Err(e);
        }
        Ok(0)
    }

    fn drop_map(&self, handle: u32) -> Option<Mapped> {
        let mut dma = self.shared.dma.lock();
        let i = dma.maps.iter().position(|m| m.file == self.id && m.handle == handle)?;
        dma.maps.remove(i).ok().map(|m| m.map)
    }

    pub(crate) fn unmap(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::Unmap, arg, "UNMAP");
        let sh = &self.shared;
        let map = {
            let mut dma = sh.dma.lock();
            let Some(i) = dma.maps.iter().position(|m| m.file == self.id && m.handle == req.handle) else {
                dev_warn!(sh.dev, "UNMAP: no mapping with handle {} on this file\n", req.handle);
                return Err(ENOENT);
            };
            let live = dma.live_count(self.id);
            if live != 0 {
                dev_warn!(sh.dev, "UNMAP: {} queue pair(s) of this file may still DMA into it; destroy them first\n", live);
                return Err(EBUSY);
            }
            dma.maps.remove(i).map_err(|_| EINVAL)?.map
        };
        drop(map);
        Ok(0)
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        let sh = &self.shared;
        // SAFETY: `vma` is a valid VMA being set up; reading a field is fine.
        let pgoff = unsafe { (*vma.as_ptr()).vm_pgoff } as u64;
        let len = vma.end() - vma.start();
        if vma.flags() & bindings::VM_SHARED as usize == 0 {
            dev_warn!(sh.dev, "mmap: must be MAP_SHARED\n");
            return Err(EINVAL);
        }
        let Some((kind, qid)) = qpair::decode_pgoff(pgoff) else {
            dev_warn!(sh.dev, "mmap: offset {:#x} names nothing\n", pgoff * 4096);
            return Err(EINVAL);
        };
        sh.alive()?;
        let dma = sh.dma.lock();
        let Some(q) = dma.live_queue(self.id, qid) else {
            dev_warn!(sh.dev, "mmap: qid {} is not a live queue pair of this file\n", qid);
            return Err(EINVAL);
        };
        let (want, what) = match kind {
            MapKind::Sq => (q.sq.size(), "SQ"),
            MapKind::Cq => (q.visible_cq().size(), "CQ"),
            MapKind::Doorbell => (4096, "doorbell page"),
        };
        if len != want {
            dev_warn!(sh.dev, "mmap: {} of qid {} is {} bytes, not {}\n", what, qid, want, len);
            return Err(EINVAL);
        }
        match kind {
            MapKind::Sq => shim::mmap_coherent(&sh.dev, vma, q.sq.as_mut_ptr().cast(), q.sq.dma_address(), want),
            MapKind::Cq => {
                let cq = q.visible_cq();
                shim::mmap_coherent(&sh.dev, vma, cq.as_mut_ptr().cast(), cq.dma_address(), want)
            }
            MapKind::Doorbell => match &q.shadow {
                Some(s) => shim::mmap_coherent(&sh.dev, vma, s.cells.as_mut_ptr().cast(), s.cells.dma_address(), want),
                None => {
                    let (page, _, _) = qpair::doorbell_page(sh.cap, qid).ok_or(EINVAL)?;
                    shim::mmap_bar_page(&sh.dev, vma, page)
                }
            },
        }
    }
}

/// Close: delete this file's queues on the controller (SQ before CQ), then
/// free their memory and unpin its buffers. If a delete fails, all of the
/// file's memory is kept until the controller is disabled at unbind.
impl Drop for OpenState {
    fn drop(&mut self) {
        let sh = &self.shared;
        let taken = sh.dma.lock().take_file(self.id);
        let Ok((queues, maps)) = taken else {
            dev_err!(sh.dev, "out of memory at close: this file's queues stay until unbind\n");
            sh.unregister_file(self.file);
            return;
        };
        let mut stuck = false;
        for e in queues {
            if e.state == QueueState::Live {
                match self.retire(e.q) {
                    Ok(()) => {}
                    Err(err) if err == ENODEV => {}
                    Err(_) => stuck = true,
                }
            }
        }
        // `retire` put the deleted queues back as retired: free them now.
        if let Ok((retired, _)) = sh.dma.lock().take_file(self.id) {
            drop(retired);
        }
        for m in maps {
            if stuck {
                sh.quarantine(Quarantined::Buffer(m.map));
            }
        }
        sh.unregister_file(self.file);
    }
}
