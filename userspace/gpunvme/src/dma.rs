//! Host memory the controller can DMA to and from (`GPUNVME_IOC_MAP_HOST`).
//!
//! # Ownership and the EBUSY rule
//!
//! The module refuses `GPUNVME_IOC_UNMAP` with `EBUSY` while the file still
//! has queue pairs, since a queued command may still DMA into the buffer.
//! A [`DmaBuffer`] therefore may be dropped in any order relative to the
//! [`crate::QueuePair`]s of the same [`Controller`]:
//!
//! - dropped after every queue pair is gone: UNMAP, then munmap, at once;
//! - dropped while a queue pair lives: the UNMAP gets EBUSY, and the buffer
//!   (handle and memory) is parked in the controller; the drop of the last
//!   queue pair UNMAPs and munmaps it (and closing the file releases it
//!   anyway). [`Controller::deferred_unmaps`] counts the parked ones.
//!
//! The memory is never unmapped from this process while the kernel may
//! still DMA into it, so no stale DMA can reach memory reused by Rust.
//! Declaring buffers before queue pairs (so they drop after) avoids the
//! parking altogether.

use gpunvme_sys as sys;

use crate::command::{prp_list_pages, prp_plan, Prp};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::map::Mapping;

/// Bytes per DMA page (the controller memory page size gpunvme uses).
pub const PAGE_SIZE: usize = 4096;

/// Page-aligned anonymous memory mapped for the controller's DMA.
#[derive(Debug)]
pub struct DmaBuffer<'c> {
    ctrl: &'c Controller,
    map: Option<Mapping>,
    handle: u32,
    dma: Vec<u64>,
}

/// Issues `GPUNVME_IOC_UNMAP` for `handle`.
pub(crate) fn unmap_handle(ctrl: &Controller, handle: u32) -> Result<()> {
    let mut u = sys::gpunvme_unmap {
        size: std::mem::size_of::<sys::gpunvme_unmap>() as u32,
        version: sys::GPUNVME_UAPI_VERSION,
        handle,
        ..Default::default()
    };
    // SAFETY: GPUNVME_IOC_UNMAP takes a struct gpunvme_unmap; `u` is one.
    unsafe {
        ctrl.ioctl(
            "GPUNVME_IOC_UNMAP",
            sys::GPUNVME_IOC_UNMAP,
            &mut u as *mut _ as *mut _,
        )?
    };
    Ok(())
}

impl<'c> DmaBuffer<'c> {
    /// Maps `pages` zeroed 4 KiB pages for DMA (at most
    /// `GPUNVME_MAX_MAP_BYTES` in all).
    pub fn new(ctrl: &'c Controller, pages: usize) -> Result<Self> {
        let len = pages
            .checked_mul(PAGE_SIZE)
            .filter(|&l| l > 0 && l as u64 <= sys::GPUNVME_MAX_MAP_BYTES as u64)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "a DMA buffer is 1 to {} pages, not {pages}",
                    sys::GPUNVME_MAX_MAP_BYTES as u64 / PAGE_SIZE as u64
                ))
            })?;
        let map = Mapping::anonymous(len).map_err(|e| {
            Error::io(
                format!("mmap {len} bytes of anonymous memory"),
                "(anonymous)",
                e,
            )
        })?;
        let mut dma = vec![0u64; pages];
        let mut m = sys::gpunvme_map_host {
            size: std::mem::size_of::<sys::gpunvme_map_host>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            addr: map.ptr() as u64,
            len: len as u64,
            dma_addrs: dma.as_mut_ptr() as u64,
            ..Default::default()
        };
        // SAFETY: GPUNVME_IOC_MAP_HOST takes a struct gpunvme_map_host
        // whose dma_addrs points to `len / 4096` u64s: `dma` has that many
        // and outlives the call; addr/len describe our live mapping.
        unsafe {
            ctrl.ioctl(
                "GPUNVME_IOC_MAP_HOST",
                sys::GPUNVME_IOC_MAP_HOST,
                &mut m as *mut _ as *mut _,
            )?
        };
        if let Some(bad) = dma.iter().find(|&&a| a % PAGE_SIZE as u64 != 0) {
            let handle = m.handle;
            let _ = unmap_handle(ctrl, handle);
            return Err(Error::Invalid(format!(
                "GPUNVME_IOC_MAP_HOST returned DMA address 0x{bad:x}, not 4 KiB aligned"
            )));
        }
        Ok(DmaBuffer {
            ctrl,
            map: Some(map),
            handle: m.handle,
            dma,
        })
    }

    /// Maps at least `bytes` (rounded up to whole pages).
    pub fn with_len(ctrl: &'c Controller, bytes: usize) -> Result<Self> {
        Self::new(ctrl, bytes.div_ceil(PAGE_SIZE).max(1))
    }

    fn map(&self) -> &Mapping {
        self.map.as_ref().expect("DmaBuffer used after drop")
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Always false: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Number of 4 KiB pages.
    pub fn pages(&self) -> usize {
        self.dma.len()
    }

    /// The handle `GPUNVME_IOC_MAP_HOST` returned.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// DMA address of every page, in order.
    pub fn dma_addrs(&self) -> &[u64] {
        &self.dma
    }

    /// DMA address of byte `offset`.
    pub fn dma_addr(&self, offset: usize) -> u64 {
        assert!(offset < self.len(), "offset {offset} past the buffer");
        self.dma[offset / PAGE_SIZE] + (offset % PAGE_SIZE) as u64
    }

    /// The memory. While a command that DMAs into the buffer is
    /// outstanding its bytes are unspecified: read after the completion.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is live for `self`'s lifetime and len bytes
        // long; anonymous memory is always initialized (zero or written).
        unsafe { std::slice::from_raw_parts(self.map().ptr(), self.len()) }
    }

    /// The memory, writable. Don't change bytes a submitted write command
    /// has not completed on.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for as_slice, and `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.map().ptr(), self.len()) }
    }

    /// PRP1/PRP2 for `len` bytes at byte `offset` (dword aligned) of this
    /// buffer. More than two pages need a PRP list: `lists` gives the
    /// buffer and first page index where the list pages
    /// ([`crate::command::prp_list_pages`] of them) are written; they must
    /// stay untouched until the command completes.
    pub fn prp(
        &self,
        offset: usize,
        len: usize,
        lists: Option<(&mut DmaBuffer<'_>, usize)>,
    ) -> Result<Prp> {
        if offset.checked_add(len).map_or(true, |end| end > self.len()) {
            return Err(Error::Invalid(format!(
                "{len} bytes at offset {offset} do not fit a {}-byte DMA buffer",
                self.len()
            )));
        }
        let first = offset / PAGE_SIZE;
        let need = prp_list_pages(offset % PAGE_SIZE, len);
        let no_lists: &[u64] = &[];
        let list_addrs = match &lists {
            None => no_lists,
            Some((b, p)) => b.dma.get(*p..*p + need).ok_or_else(|| {
                Error::Invalid(format!(
                    "PRP list needs {need} page(s) at page {p} of a {}-page buffer",
                    b.pages()
                ))
            })?,
        };
        let plan = prp_plan(&self.dma[first..], offset % PAGE_SIZE, len, list_addrs)
            .map_err(Error::Invalid)?;
        if let Some((b, p)) = lists {
            let mem = b.as_mut_slice();
            for (i, l) in plan.lists.iter().enumerate() {
                let page = &mut mem[(p + i) * PAGE_SIZE..(p + i + 1) * PAGE_SIZE];
                for (j, e) in l.iter().enumerate() {
                    page[j * 8..j * 8 + 8].copy_from_slice(&e.to_le_bytes());
                }
            }
        }
        Ok(plan.prp)
    }
}

/// UNMAPs `handle`, then drops `map` (host memory, if any); on EBUSY both
/// are parked until the last queue pair goes (the EBUSY rule above).
pub(crate) fn release(ctrl: &Controller, handle: u32, map: Option<Mapping>) {
    // Hold the lock across UNMAP so a queue pair being dropped on another
    // thread either sees this mapping parked or not at all.
    let mut st = ctrl.lifecycle();
    match unmap_handle(ctrl, handle) {
        Err(e) if e.errno() == Some(libc::EBUSY) => st.deferred.push((handle, map)),
        // Ok, or gone (ENODEV after unbind: the module released it).
        _ => drop(map),
    }
}

impl Drop for DmaBuffer<'_> {
    fn drop(&mut self) {
        if let Some(map) = self.map.take() {
            release(self.ctrl, self.handle, Some(map));
        }
    }
}
