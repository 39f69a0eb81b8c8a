// SPDX-License-Identifier: GPL-2.0-only

//! MAP_HOST and UNMAP: a file's host buffers mapped for the controller, the
//! per-file map quota, and the hand-out of a new mapping's addresses (which
//! MAP_DMABUF shares).

use kernel::{
    prelude::*,
    sync::atomic::Relaxed,
    uaccess::{UserPtr, UserSlice},
};

use super::OpenState;
use crate::dma::registry::{MapEntry, Mapped};
use crate::shim::HostMap;
use crate::uapi::{self, quota};

impl OpenState {
    /// EDQUOT unless this file (an owner is exempt) may map one more
    /// buffer. Called under the admin lock, which every MAP_* holds until
    /// its mapping is recorded, so two maps cannot both pass the last slot.
    pub(super) fn maps_within_quota(&self, call: &str) -> Result {
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

    /// Copy a new mapping's page addresses to the user array at `dst`, then
    /// the reply; on a bad pointer the mapping is undone.
    pub(super) fn hand_out(
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
}
