// SPDX-License-Identifier: GPL-2.0-only

//! EXPORT and MAP_DMABUF: dma-bufs out of a queue pair's memory for peers
//! (revoked with the pair), and a peer's dma-buf imported as a mapping.

use kernel::{bindings, prelude::*, sync::atomic::Relaxed};

use super::OpenState;
use crate::dma::registry::{MapEntry, Mapped};
use crate::queues::qpair;
use crate::shim::{Export, Import};
use crate::uapi::{self, quota};

impl OpenState {
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
            // Queue memory: a coherent allocation of the pair, as bytes.
            let memory = |c: qpair::Bytes| -> Result<(Export, i32, u64)> {
                let (x, fd) = Export::memory(&sh.dev, c.cpu, c.dma, c.size, req.flags)?;
                Ok((x, fd, c.size as u64))
            };
            let (export, fd, length) = match req.kind {
                uapi::EXPORT_DOORBELL => match &e.q.shadow {
                    // Shared: the shadow cells are ordinary memory.
                    Some(s) => memory(qpair::bytes(&s.cells))?,
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
                    memory(qpair::bytes(&s.pool))?
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
}
