// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Host memory the controller can DMA to and from (`GPUNVME_IOC_MAP_HOST`).
//!
//! # Who may touch the memory, and when
//!
//! The controller writes a [`DmaBuffer`] only through a command that names
//! its DMA addresses, and the safe API submits such commands only with the
//! buffer moved in ([`crate::Io::read`] and friends take it by value and
//! hand it back once every command on it completed). So while the
//! controller may write the memory, no Rust reference to it exists: a
//! slice taken before (and still alive) makes the move a compile error,
//! and after a timeout the buffer is not handed back at all: the poisoned
//! queue pair keeps it until it is destroyed. Code that names the
//! addresses itself ([`crate::QueuePair::push`]) is `unsafe` and promises
//! the same.
//!
//! # Unmapping: the EBUSY rule
//!
//! The module refuses `GPUNVME_IOC_UNMAP` with `EBUSY` while the file still
//! has queue pairs, since a queued command may still DMA into the buffer.
//! A [`DmaBuffer`] therefore may be dropped in any order relative to the
//! [`crate::QueuePair`]s of the same [`Controller`]:
//!
//! - dropped after every queue pair is gone: UNMAP, then munmap, at once;
//! - dropped while a queue pair lives: the UNMAP gets EBUSY, and the buffer
//!   (handle and memory) is parked in the controller; the drop of the last
//!   queue pair UNMAPs it again and munmaps it once that succeeded.
//!   [`Controller::deferred_unmaps`] counts the parked ones.
//!
//! The memory is unmapped from this process only after an UNMAP succeeded
//! (or the module answered ENOENT: an unbind already released every
//! mapping). Any other failure keeps it mapped until the file is closed
//! ([`Controller::kept_until_close`]), so no stale DMA can reach memory
//! reused by Rust. Declaring buffers before queue pairs (so they drop
//! after) avoids the parking altogether.

use std::sync::Arc;

use gpunvme_sys as sys;

use crate::command::{build_prps, Prp, PrpListMem};
use crate::controller::Controller;
use crate::error::{Error, Result};
use crate::map::Mapping;

/// Bytes per DMA page (the controller memory page size gpunvme uses).
pub const PAGE_SIZE: usize = 4096;

/// Page-aligned anonymous memory mapped for the controller's DMA.
///
/// It holds an `Arc` of its [`Controller`] (its mapping belongs to that
/// file) and is `Send` and `Sync`: the controller never writes it while a
/// reference to it can exist (see the module docs).
///
/// Reading a buffer that a read is still filling does not compile: the
/// read takes the buffer, and a live slice of it forbids the move.
///
/// ```compile_fail,E0505
/// use gpunvme::{DmaBuffer, Io};
///
/// fn racy(io: &mut Io, buf: DmaBuffer) -> gpunvme::Result<()> {
///     let view = buf.as_slice();
///     std::thread::scope(|s| {
///         // Another thread looks at the bytes ...
///         s.spawn(|| println!("{}", view[0]));
///         // ... while the controller writes them: error[E0505].
///         let _buf = io.read(0, 1, buf, 0);
///     });
///     Ok(())
/// }
/// ```
///
/// Nor does reusing a buffer whose read failed: a timed-out read keeps it
/// (the queue pair holds it until destroyed, since the controller may
/// still write it), and even an error that hands it back does so only in
/// the error value ([`crate::TransferError::buffer`]).
///
/// ```compile_fail,E0382
/// use gpunvme::{DmaBuffer, Io};
///
/// fn reuse(io: &mut Io, mut buf: DmaBuffer) {
///     if io.read(0, 8, buf, 0).is_err() {
///         // The read may still be in flight: error[E0382], use of moved value.
///         buf.as_mut_slice().fill(0);
///     }
/// }
/// ```
///
/// The way that compiles: the buffer comes back with the result.
///
/// ```no_run
/// use std::sync::Arc;
/// use gpunvme::{Controller, DmaBuffer, Io};
///
/// fn main() -> gpunvme::Result<()> {
///     let ctrl = Arc::new(Controller::open_index(0)?);
///     let info = ctrl.info()?;
///     let mut io = Io::new(&ctrl, &info, 1, 32)?;
///     let buf = DmaBuffer::new(&ctrl, 1)?;
///     let buf = match io.read(0, 8, buf, 0) {
///         Ok(buf) => buf,
///         // Completed with an error: the buffer is back, in the error.
///         Err(e) if e.buffer.is_some() => return Err(e.error),
///         // Timed out: the queue pair keeps the buffer until it is gone.
///         Err(e) => return Err(e.into()),
///     };
///     println!("first byte {:#04x}", buf.as_slice()[0]);
///     Ok(())
/// }
/// ```
#[derive(Debug)]
pub struct DmaBuffer {
    ctrl: Arc<Controller>,
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

impl DmaBuffer {
    /// Maps `pages` zeroed 4 KiB pages for DMA (at most
    /// `GPUNVME_MAX_MAP_BYTES` in all).
    pub fn new(ctrl: &Arc<Controller>, pages: usize) -> Result<Self> {
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
        let buf = DmaBuffer {
            ctrl: ctrl.clone(),
            map: Some(map),
            handle: m.handle,
            dma,
        };
        if let Some(bad) = buf.dma.iter().find(|&&a| a % PAGE_SIZE as u64 != 0) {
            // Dropping `buf` UNMAPs it (the usual rules).
            return Err(Error::Invalid(format!(
                "GPUNVME_IOC_MAP_HOST returned DMA address 0x{bad:x}, not 4 KiB aligned"
            )));
        }
        Ok(buf)
    }

    /// Maps at least `bytes` (rounded up to whole pages).
    pub fn with_len(ctrl: &Arc<Controller>, bytes: usize) -> Result<Self> {
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

    /// The controller this buffer is mapped for.
    pub fn controller(&self) -> &Arc<Controller> {
        &self.ctrl
    }

    /// The memory. The controller does not write it while this borrow
    /// lives (the safe API takes the buffer by value for reads).
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is live for `self`'s lifetime and len bytes
        // long; anonymous memory is always initialized (zero or written).
        unsafe { std::slice::from_raw_parts(self.map().ptr(), self.len()) }
    }

    /// The memory, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as for as_slice, and `&mut self` makes it exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.map().ptr(), self.len()) }
    }

    /// Pages `first..first + n` of this buffer as room for PRP list pages
    /// (for a raw pair's commands: a shared pair's lists must be in its
    /// [`crate::PrpPool`], the module rejects a PRP2 anywhere else).
    pub fn list_pages(&mut self, first: usize, n: usize) -> Result<PrpListMem<'_>> {
        if first.checked_add(n).is_none_or(|end| end > self.pages()) {
            return Err(Error::Invalid(format!(
                "PRP list pages {first}..{} of a {}-page buffer",
                first.saturating_add(n),
                self.pages()
            )));
        }
        let ptr = self.map().ptr();
        // SAFETY: pages first..first+n lie inside the live mapping (checked)
        // and `&mut self` keeps every other Rust access out while the view
        // lives; page-aligned.
        Ok(unsafe {
            PrpListMem::from_raw(
                ptr.add(first * PAGE_SIZE),
                &self.dma[first..first + n],
                crate::command::PRP_ENTRIES_PER_PAGE,
            )
        })
    }

    /// PRP1/PRP2 for `len` bytes at byte `offset` (dword aligned) of this
    /// buffer. More than two pages need a PRP list: `lists` is where it is
    /// written, a slot of the queue pair's pool
    /// ([`crate::PrpPool::list_slot`], shared pairs) or
    /// [`crate::command::prp_list_pages`] pages of a buffer
    /// ([`DmaBuffer::list_pages`], raw pairs); it must stay untouched
    /// until the command completes.
    pub fn prp(&self, offset: usize, len: usize, lists: Option<PrpListMem<'_>>) -> Result<Prp> {
        if offset.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(Error::Invalid(format!(
                "{len} bytes at offset {offset} do not fit a {}-byte DMA buffer",
                self.len()
            )));
        }
        let first = offset / PAGE_SIZE;
        build_prps(&self.dma[first..], offset % PAGE_SIZE, len, lists).map_err(Error::Invalid)
    }
}

/// UNMAPs `handle`, then drops `map` (host memory, if any); on EBUSY both
/// are parked until the last queue pair goes, on any other failure the
/// memory stays mapped until the file is closed (the rules above).
pub(crate) fn release(ctrl: &Controller, handle: u32, map: Option<Mapping>) {
    // Hold the lock across UNMAP so a queue pair being dropped on another
    // thread either sees this mapping parked or not at all.
    let mut st = ctrl.lifecycle();
    match unmap_outcome(unmap_handle(ctrl, handle)) {
        Unmapped::Gone => drop(map),
        Unmapped::Busy => st.deferred.push((handle, map)),
        Unmapped::Unknown => st.until_close.extend(map),
    }
}

/// What an UNMAP's answer means for the memory behind the handle.
pub(crate) enum Unmapped {
    /// The module no longer maps it (UNMAP succeeded, or ENOENT: an
    /// unbind already released every mapping): free to unmap here.
    Gone,
    /// EBUSY: the file still has queue pairs; try again when they are gone.
    Busy,
    /// Anything else: the module may still use it.
    Unknown,
}

pub(crate) fn unmap_outcome(r: Result<()>) -> Unmapped {
    match r {
        Ok(()) => Unmapped::Gone,
        Err(e) if e.errno() == Some(libc::ENOENT) => Unmapped::Gone,
        Err(e) if e.errno() == Some(libc::EBUSY) => Unmapped::Busy,
        Err(_) => Unmapped::Unknown,
    }
}

impl DmaBuffer {
    /// Keeps the memory mapped until the file is closed, without UNMAP: for
    /// a buffer a queue pair that could not be destroyed may still DMA into.
    pub(crate) fn keep_until_close(mut self) {
        if let Some(map) = self.map.take() {
            self.ctrl.lifecycle().until_close.push(map);
        }
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        if !self.ctrl.is_usable_here() {
            // A forked child: UNMAP would unmap the parent's handle. Its
            // copy of the memory is leaked (never touched by the device).
            std::mem::forget(self.map.take());
            return;
        }
        if let Some(map) = self.map.take() {
            release(&self.ctrl, self.handle, Some(map));
        }
    }
}
