// SPDX-License-Identifier: GPL-2.0

//! What one open file owns: its queue pairs and host-buffer mappings, the
//! ioctls that create and destroy them, mmap, and teardown at close.
//!
//! Lock order: `inner` is never held across an admin command or a user
//! copy (mmap holds the mmap lock and takes `inner`; pinning user pages
//! takes the mmap lock).

use kernel::{
    bindings,
    fs::File,
    mm::virt::VmaNew,
    new_mutex,
    prelude::*,
    sync::{Arc, Mutex},
    uaccess::{UserPtr, UserSlice},
};

use crate::qpair::{self, MapKind, QPair};
use crate::shared::{Quarantined, Shared};
use crate::shim::{self, HostMap};
use crate::uapi::{self, check_header};

struct Inner {
    /// Queue pairs created on the controller.
    live: KVec<QPair>,
    /// Destroyed on the controller, kept until close: still mapped maybe.
    retired: KVec<QPair>,
    maps: KVec<(u32, HostMap)>,
    next_handle: u32,
}

#[pin_data(PinnedDrop)]
pub(crate) struct OpenState {
    pub(crate) shared: Arc<Shared>,
    file: *mut bindings::file,
    #[pin]
    inner: Mutex<Inner>,
}

// SAFETY: `file` is only passed back to the shared list (never dereferenced
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

impl OpenState {
    pub(crate) fn new(shared: Arc<Shared>, file: &File) -> Result<Pin<KBox<Self>>> {
        let raw = shim::file_ptr(file);
        shared.register_file(raw)?;
        KBox::try_pin_init(
            try_pin_init!(Self {
                shared,
                file: raw,
                inner <- new_mutex!(Inner { live: KVec::new(), retired: KVec::new(), maps: KVec::new(), next_handle: 1 }),
            }),
            GFP_KERNEL,
        )
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
        if req.flags != 0 || req.pad0 != 0 || req.pad1 != 0 {
            dev_warn!(sh.dev, "CREATE_QPAIR: unknown flags {:#x}\n", req.flags);
            return Err(EINVAL);
        }
        sh.alive()?;
        let qid = sh.claim_qid()?;
        let Some((_, sq_db, cq_db)) = qpair::doorbell_page(sh.cap, qid) else {
            sh.release_qid(qid);
            dev_warn!(sh.dev, "CREATE_QPAIR: doorbell stride {} puts qid {} on two pages\n", sh.cap.doorbell_stride(), qid);
            return Err(EOPNOTSUPP);
        };

        let created = sh.with_admin(|dev, admin, ring| {
            let q = QPair::alloc(dev, qid, req.depth)?;
            let [cq_cmd, sq_cmd] = q.create_cmds();
            // A command that failed with a status did nothing; one that timed
            // out may still happen, so its memory must outlive the binding.
            let keep_if_unsure = |q: QPair, e: Error| {
                if e != EIO {
                    sh.quarantine(Quarantined::Queue(q));
                }
                e
            };
            if let Err(e) = admin.submit(&sh.dev, sh.cap, cq_cmd, ring) {
                return Err(keep_if_unsure(q, e));
            }
            if let Err(e) = admin.submit(&sh.dev, sh.cap, sq_cmd, ring) {
                // The CQ exists: remove it before its memory goes.
                let e = if e == EIO { EIO } else { ETIMEDOUT };
                return Err(match admin.submit(&sh.dev, sh.cap, crate::command::delete_io_cq(qid), ring) {
                    Ok(_) => keep_if_unsure(q, e),
                    Err(_) => keep_if_unsure(q, ETIMEDOUT),
                });
            }
            Ok(q)
        });
        let q = match created {
            Ok(q) => q,
            Err(e) => {
                sh.release_qid(qid);
                return Err(e);
            }
        };

        req.qid = qid;
        req.sq_offset = qpair::mmap_offset(MapKind::Sq, qid);
        req.sq_size = q.sq.size() as u64;
        req.cq_offset = qpair::mmap_offset(MapKind::Cq, qid);
        req.cq_size = q.cq.size() as u64;
        req.db_offset = qpair::mmap_offset(MapKind::Doorbell, qid);
        req.sq_db = sq_db;
        req.cq_db = cq_db;
        let depth = q.depth;
        if let Err(e) = self.inner.lock().live.push(q, GFP_KERNEL) {
            // Can't track it: take it off the controller again.
            self.delete_on_controller_by_qid(qid);
            return Err(e.into());
        }
        dev_dbg!(sh.dev, "qid {} created, depth {}\n", qid, depth);
        writer.write(&req)?;
        Ok(0)
    }

    /// Undo a creation we could not record (rare: out of memory).
    fn delete_on_controller_by_qid(&self, qid: u16) {
        let mut inner = self.inner.lock();
        if let Some(i) = inner.live.iter().position(|q| q.qid == qid) {
            if let Ok(q) = inner.live.remove(i) {
                drop(inner);
                // Best effort: on failure `retire` has already kept the memory.
                let _ = self.retire(q);
            }
        }
    }

    /// Delete `q` on the controller; keep its memory until close (it may be
    /// mapped), or for the binding's lifetime when the delete failed.
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
                if let Err(e) = self.inner.lock().retired.push(q, GFP_KERNEL) {
                    // Freed now instead: the controller no longer uses it,
                    // and mappings of it are zapped first.
                    shim::zap_file(self.file);
                    return Err(e.into());
                }
                Ok(())
            }
            // Unbound: the controller was disabled, nothing DMAs any more.
            Err(e) if e == ENODEV => Err(e),
            Err(e) => {
                sh.quarantine(Quarantined::Queue(q));
                Err(e)
            }
        }
    }

    pub(crate) fn destroy_qpair(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::QpairDestroy, arg, "DESTROY_QPAIR");
        let q = {
            let mut inner = self.inner.lock();
            let Some(i) = inner.live.iter().position(|q| q.qid == req.qid) else {
                dev_warn!(self.shared.dev, "DESTROY_QPAIR: qid {} is not a live queue pair of this file\n", req.qid);
                return Err(ENOENT);
            };
            inner.live.remove(i).map_err(|_| EINVAL)?
        };
        self.retire(q)?;
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
        let map = sh.with_admin(|dev, _, _| HostMap::new(dev, req.addr, req.len, &mut addrs))
            .inspect_err(|e| dev_warn!(sh.dev, "MAP_HOST: pinning {:#x}+{:#x} failed: {:?}\n", req.addr, req.len, e))?;
        // Hand out the addresses before recording the mapping: a failed copy
        // then simply drops (unmaps) it.
        let mut out = UserSlice::new(UserPtr::from_addr(req.dma_addrs as usize), npages * 8).writer();
        for a in addrs.iter() {
            out.write(a)?;
        }
        let handle = {
            let mut inner = self.inner.lock();
            let h = inner.next_handle;
            inner.next_handle = inner.next_handle.wrapping_add(1).max(1);
            inner.maps.push((h, map), GFP_KERNEL)?;
            h
        };
        req.handle = handle;
        writer.write(&req)?;
        Ok(0)
    }

    pub(crate) fn unmap(&self, arg: usize) -> Result<isize> {
        let (req, _) = read_arg!(self, uapi::Unmap, arg, "UNMAP");
        let mut inner = self.inner.lock();
        let Some(i) = inner.maps.iter().position(|(h, _)| *h == req.handle) else {
            dev_warn!(self.shared.dev, "UNMAP: no mapping with handle {} on this file\n", req.handle);
            return Err(ENOENT);
        };
        if !inner.live.is_empty() {
            dev_warn!(self.shared.dev, "UNMAP: {} queue pair(s) of this file may still DMA into it; destroy them first\n",
                      inner.live.len());
            return Err(EBUSY);
        }
        let (_, map) = inner.maps.remove(i).map_err(|_| EINVAL)?;
        drop(inner);
        drop(map);
        Ok(0)
    }

    pub(crate) fn mmap(&self, vma: &VmaNew) -> Result {
        let sh = &self.shared;
        // SAFETY: `vma` is a valid VMA being set up; reading fields is fine.
        let (pgoff, flags) = unsafe { ((*vma.as_ptr()).vm_pgoff as u64, vma.flags()) };
        let len = vma.end() - vma.start();
        if flags & bindings::VM_SHARED as usize == 0 {
            dev_warn!(sh.dev, "mmap: must be MAP_SHARED\n");
            return Err(EINVAL);
        }
        let Some((kind, qid)) = qpair::decode_pgoff(pgoff) else {
            dev_warn!(sh.dev, "mmap: offset {:#x} names nothing\n", pgoff * 4096);
            return Err(EINVAL);
        };
        sh.alive()?;
        let inner = self.inner.lock();
        let Some(q) = inner.live.iter().find(|q| q.qid == qid) else {
            dev_warn!(sh.dev, "mmap: qid {} is not a live queue pair of this file\n", qid);
            return Err(EINVAL);
        };
        let (want, what) = match kind {
            MapKind::Sq => (q.sq.size(), "SQ"),
            MapKind::Cq => (q.cq.size(), "CQ"),
            MapKind::Doorbell => (4096, "doorbell page"),
        };
        if len != want {
            dev_warn!(sh.dev, "mmap: {} of qid {} is {} bytes, not {}\n", what, qid, want, len);
            return Err(EINVAL);
        }
        match kind {
            MapKind::Sq => shim::mmap_coherent(&sh.dev, vma, q.sq.as_mut_ptr().cast(), q.sq.dma_address(), want),
            MapKind::Cq => shim::mmap_coherent(&sh.dev, vma, q.cq.as_mut_ptr().cast(), q.cq.dma_address(), want),
            MapKind::Doorbell => {
                let (page, _, _) = qpair::doorbell_page(sh.cap, qid).ok_or(EINVAL)?;
                shim::mmap_bar_page(&sh.dev, vma, page)
            }
        }
    }

    /// Close: delete this file's queues on the controller (SQ before CQ),
    /// then free their memory and unpin its buffers. Memory whose queue
    /// could not be deleted is kept until the controller is disabled.
    fn teardown(&self) {
        let live = core::mem::take(&mut self.inner.lock().live);
        let mut stuck = false;
        for q in live {
            match self.retire(q) {
                Ok(()) => {}
                Err(e) if e == ENODEV => {}
                Err(_) => stuck = true,
            }
        }
        let mut inner = self.inner.lock();
        let maps = core::mem::take(&mut inner.maps);
        let retired = core::mem::take(&mut inner.retired);
        drop(inner);
        drop(retired);
        for (_, map) in maps {
            if stuck {
                self.shared.quarantine(Quarantined::Buffer(map));
            }
        }
        self.shared.unregister_file(self.file);
    }
}

#[pinned_drop]
impl PinnedDrop for OpenState {
    fn drop(self: Pin<&mut Self>) {
        self.teardown();
    }
}
