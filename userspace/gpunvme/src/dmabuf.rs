// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! GPU memory (a dma-buf) mapped for the controller's DMA
//! (`GPUNVME_IOC_MAP_DMABUF`), and the reverse: queue memory exported as
//! dma-bufs for a GPU to import (`GPUNVME_IOC_EXPORT`, see
//! [`crate::QueuePair::export`]).
//!
//! Unmapping follows the same EBUSY rule as [`crate::DmaBuffer`]: while the
//! file still has queue pairs the module refuses UNMAP, so the handle is
//! parked and unmapped when the last queue pair goes. The exporter's memory
//! stays alive meanwhile because the module holds its own reference to the
//! dma-buf until UNMAP (or close).

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use gpunvme_sys as sys;

use crate::command::{build_prps, Prp, PrpListMem};
use crate::controller::Controller;
use crate::dma::{release, PAGE_SIZE};
use crate::error::{Error, Result};

/// A dma-buf imported by the module; the controller may DMA to
/// [`dma_addrs`](Self::dma_addrs). No Rust reference to the memory comes
/// from it (the exporter owns that memory; the module holds a reference to
/// the dma-buf until UNMAP), so it is `Send` and `Sync`.
#[derive(Debug)]
pub struct DmabufMapping {
    ctrl: Arc<Controller>,
    handle: u32,
    len: u64,
    dma: Vec<u64>,
    /// Left to the module's close: the controller may still write it.
    kept: bool,
}

impl DmabufMapping {
    /// Imports the dma-buf `fd` (the module takes its own reference; `fd`
    /// may be closed afterwards). `max_bytes` bounds the address table: the
    /// call fails with EINVAL if the dma-buf is larger.
    pub fn new(ctrl: &Arc<Controller>, fd: BorrowedFd<'_>, max_bytes: usize) -> Result<Self> {
        if ctrl.passthrough().is_some() {
            if let Err(why) = crate::passthrough::dmabuf_support() {
                return Err(Error::Refused(why));
            }
        }
        let max_pages = max_bytes.div_ceil(PAGE_SIZE).max(1);
        let mut dma = vec![0u64; max_pages];
        let mut m = sys::gpunvme_map_dmabuf {
            size: std::mem::size_of::<sys::gpunvme_map_dmabuf>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            fd: fd.as_raw_fd(),
            max_pages: max_pages as u64,
            dma_addrs: dma.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: GPUNVME_IOC_MAP_DMABUF takes a struct gpunvme_map_dmabuf
        // whose dma_addrs points to max_pages u64s: `dma` has that many and
        // outlives the call.
        unsafe {
            ctrl.ioctl(
                "GPUNVME_IOC_MAP_DMABUF",
                sys::GPUNVME_IOC_MAP_DMABUF,
                &mut m as *mut _ as *mut _,
            )?
        };
        let mut me = DmabufMapping {
            ctrl: ctrl.clone(),
            handle: m.handle,
            len: m.len,
            dma,
            kept: false,
        };
        let pages = (m.len as usize).div_ceil(PAGE_SIZE);
        if m.len == 0 || m.len % PAGE_SIZE as u64 != 0 || pages > max_pages {
            return Err(Error::Invalid(format!(
                "GPUNVME_IOC_MAP_DMABUF mapped {} bytes, expected a non-zero multiple of 4 KiB up to {} pages",
                m.len, max_pages
            )));
        }
        me.dma.truncate(pages);
        if let Some(bad) = me.dma.iter().find(|&&a| a % PAGE_SIZE as u64 != 0) {
            return Err(Error::Invalid(format!(
                "GPUNVME_IOC_MAP_DMABUF returned DMA address 0x{bad:x}, not 4 KiB aligned"
            )));
        }
        Ok(me)
    }

    /// Bytes mapped (the whole dma-buf).
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always false: the module refuses empty dma-bufs.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The open file (controller) it is mapped on.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.ctrl
    }

    /// The handle for `GPUNVME_IOC_UNMAP`.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// DMA address of each 4 KiB page.
    pub fn dma_addrs(&self) -> &[u64] {
        &self.dma
    }

    /// PRP1/PRP2 for `len` bytes at byte `offset` (dword aligned) of the
    /// dma-buf, as [`crate::DmaBuffer::prp`] does for host memory; `lists`
    /// is where a PRP list goes when more than two pages are named.
    pub fn prp(&self, offset: u64, len: usize, lists: Option<PrpListMem<'_>>) -> Result<Prp> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(Error::Invalid(format!(
                "{len} bytes at offset {offset} do not fit a {}-byte dma-buf mapping",
                self.len
            )));
        }
        let first = (offset / PAGE_SIZE as u64) as usize;
        build_prps(
            &self.dma[first..],
            (offset % PAGE_SIZE as u64) as usize,
            len,
            lists,
        )
        .map_err(Error::Invalid)
    }

    /// The base address when the pages are consecutive in the controller's
    /// address space (what an IOMMU gives a scatter-gather import), so one
    /// base plus an offset makes every PRP entry; `None` otherwise.
    pub fn contiguous_base(&self) -> Option<u64> {
        contiguous_base(&self.dma)
    }
}

/// See [`DmabufMapping::contiguous_base`].
pub fn contiguous_base(pages: &[u64]) -> Option<u64> {
    let base = *pages.first()?;
    pages
        .iter()
        .enumerate()
        .all(|(i, &a)| a == base + (i * PAGE_SIZE) as u64)
        .then_some(base)
}

impl DmabufMapping {
    /// No UNMAP: the module releases the mapping when the file is closed
    /// (a queue pair whose CQ it holds could not be destroyed).
    pub(crate) fn keep_until_close(mut self) {
        self.kept = true;
    }
}

impl Drop for DmabufMapping {
    fn drop(&mut self) {
        // In a forked child, UNMAP would unmap the parent's handle: leak.
        if !self.kept && self.ctrl.is_usable_here() {
            release(&self.ctrl, self.handle, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity() {
        assert_eq!(contiguous_base(&[]), None);
        assert_eq!(contiguous_base(&[0x10000]), Some(0x10000));
        assert_eq!(contiguous_base(&[0x10000, 0x11000, 0x12000]), Some(0x10000));
        assert_eq!(contiguous_base(&[0x10000, 0x12000]), None);
        assert_eq!(contiguous_base(&[0x11000, 0x10000]), None);
    }
}
