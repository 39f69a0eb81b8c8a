// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! GPU memory registered once for CPU-initiated transfers (what
//! `cuFileBufRegister` does for cuFile): the dma-buf is imported with
//! `GPUNVME_IOC_MAP_DMABUF` when it is registered, and every later transfer
//! ([`crate::Io::read_gpu`], [`crate::Transfers`]) reuses that import.
//!
//! # Why a borrowed handle is enough
//!
//! No Rust reference into the memory comes from a [`GpuBuffer`]: the
//! memory is the exporter's (VRAM, or a udmabuf's pages), reached by the
//! GPU or by code that mapped it itself (which needed `unsafe` for that,
//! and must not read what a transfer is still writing). So transfers
//! borrow the handle instead of taking it by value as they take a
//! [`crate::DmaBuffer`]. What must hold is that the memory outlives every
//! command that names it:
//!
//! - the module keeps its own reference to the dma-buf until UNMAP, and
//!   refuses UNMAP while the file has queue pairs (the handle is then
//!   parked, see [`crate::DmaBuffer`]'s EBUSY rule);
//! - a transfer whose wait timed out hands a clone of the handle to the
//!   poisoned queue pair, which drops it only once the pair is destroyed
//!   (and never, if the destroy fails). The `owner` given to
//!   [`GpuBuffer::register_owned`] (the allocation behind the dma-buf)
//!   goes with it, so a timeout never leaves DMA running into memory that
//!   this process freed.

use std::any::Any;
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

use gpunvme_sys as sys;

use crate::controller::Controller;
use crate::dmabuf::DmabufMapping;
use crate::error::{Error, Result};

/// A dma-buf (GPU memory) registered for transfers on one open file
/// ([`Controller`]). Cloning is cheap (an `Arc`); the import is released
/// when the last clone goes (UNMAP, deferred while the file has queue
/// pairs), then the owner, if any, is dropped.
///
/// `Send` and `Sync`: it gives no access to the memory, only DMA addresses.
///
/// ```no_run
/// use std::sync::Arc;
/// use gpunvme::{Controller, GpuBuffer, Io};
///
/// # fn export_vram() -> std::os::fd::OwnedFd { unimplemented!() }
/// fn main() -> gpunvme::Result<()> {
///     let ctrl = Arc::new(Controller::open_index(0)?);
///     let info = ctrl.info()?;
///     let vram = export_vram(); // e.g. gpunvme_gpu::Gpu::export_dmabuf
///     let buf = GpuBuffer::register(&ctrl, &vram)?;
///     let mut io = Io::new(&ctrl, &info, 1, 32)?;
///     io.read_gpu(0, 256, &buf, 0)?; // 256 blocks from LBA 0 into VRAM
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct GpuBuffer {
    inner: Arc<Registered>,
}

struct Registered {
    // Field order is drop order: the import is released (or parked) before
    // the exporter's allocation goes.
    mapping: DmabufMapping,
    owner: Option<Box<dyn Any + Send + Sync>>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        // A forked child: the import is the parent's (the mapping leaks
        // itself there), and so is what the owner stands for.
        if !self.mapping.controller().is_usable_here() {
            std::mem::forget(self.owner.take());
        }
    }
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuBuffer")
            .field("handle", &self.inner.mapping.handle())
            .field("len", &self.inner.mapping.len())
            .field("owned", &self.inner.owner.is_some())
            .finish()
    }
}

/// Bytes of one dma-buf `lseek(SEEK_END)` reports (dma-bufs support it).
fn dmabuf_len(fd: BorrowedFd<'_>) -> Result<u64> {
    // SAFETY: lseek on a descriptor the caller keeps open; no memory.
    let end = unsafe { libc::lseek(fd.as_raw_fd(), 0, libc::SEEK_END) };
    if end < 0 {
        return Err(Error::Invalid(format!(
            "descriptor {} is not a dma-buf (lseek to its end: {})",
            fd.as_raw_fd(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(end as u64)
}

impl GpuBuffer {
    /// Largest dma-buf one registration takes (`GPUNVME_MAX_MAP_BYTES`,
    /// 64 MiB): export a larger allocation in parts, one buffer each.
    pub const MAX_BYTES: u64 = sys::GPUNVME_MAX_MAP_BYTES as u64;

    /// Imports the dma-buf `fd` for `ctrl`'s DMA. The module takes its own
    /// reference, so `fd` may be closed afterwards; the caller keeps the
    /// allocation behind it alive while the buffer lives (or hands it
    /// over with [`register_owned`](Self::register_owned)). Fails with
    /// EOPNOTSUPP when the exporter has no peer-to-peer path to the
    /// controller (GPU memory never silently becomes host memory).
    pub fn register(ctrl: &Arc<Controller>, fd: impl AsFd) -> Result<Self> {
        Self::register_inner(ctrl, fd.as_fd(), None)
    }

    /// [`register`](Self::register), keeping `owner` (what must outlive
    /// the import: the VRAM allocation, the memfd behind a udmabuf) until
    /// the import is released, and past a timed-out transfer until its
    /// queue pair is destroyed.
    pub fn register_owned<T: Send + Sync + 'static>(
        ctrl: &Arc<Controller>,
        fd: impl AsFd,
        owner: T,
    ) -> Result<Self> {
        Self::register_inner(ctrl, fd.as_fd(), Some(Box::new(owner)))
    }

    fn register_inner(
        ctrl: &Arc<Controller>,
        fd: BorrowedFd<'_>,
        owner: Option<Box<dyn Any + Send + Sync>>,
    ) -> Result<Self> {
        let len = dmabuf_len(fd)?;
        if len == 0 || len > Self::MAX_BYTES || len % crate::PAGE_SIZE as u64 != 0 {
            return Err(Error::Invalid(format!(
                "a dma-buf of {len} bytes: one registration takes a multiple of 4 KiB up to {} \
                 MiB (export a larger allocation in parts)",
                Self::MAX_BYTES >> 20
            )));
        }
        let mapping = DmabufMapping::new(ctrl, fd, len as usize)?;
        Ok(GpuBuffer {
            inner: Arc::new(Registered { mapping, owner }),
        })
    }

    /// Bytes registered (the whole dma-buf).
    pub fn len(&self) -> u64 {
        self.inner.mapping.len()
    }

    /// Always false: the module refuses empty dma-bufs.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The open file it is registered on.
    pub fn controller(&self) -> &Arc<Controller> {
        self.inner.mapping.controller()
    }

    /// The module's import (handle, DMA address of every page).
    pub fn mapping(&self) -> &DmabufMapping {
        &self.inner.mapping
    }

    /// The owner given to [`register_owned`](Self::register_owned), if it
    /// is a `T`.
    pub fn owner<T: 'static>(&self) -> Option<&T> {
        self.inner.owner.as_ref()?.downcast_ref()
    }

    /// Whether both are clones of one registration.
    pub fn same(&self, other: &GpuBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Registrations by a key of the caller's (a device pointer, an
/// allocation id), so that memory used again is imported once, as cuFile's
/// and kvikio's buffer registration caches do.
#[derive(Debug, Default)]
pub struct GpuBufferCache {
    map: Mutex<HashMap<u64, GpuBuffer>>,
}

impl GpuBufferCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The buffer registered under `key`, or a new registration of what
    /// `export` returns (a dma-buf and the owner to keep with it).
    pub fn get_or_register<T: Send + Sync + 'static>(
        &self,
        ctrl: &Arc<Controller>,
        key: u64,
        export: impl FnOnce() -> Result<(OwnedFd, T)>,
    ) -> Result<GpuBuffer> {
        let mut m = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = m.get(&key) {
            if Arc::ptr_eq(b.controller(), ctrl) {
                return Ok(b.clone());
            }
        }
        let (fd, owner) = export()?;
        let b = GpuBuffer::register_owned(ctrl, &fd, owner)?;
        m.insert(key, b.clone());
        Ok(b)
    }

    /// Forgets `key`'s registration (released once no transfer or clone
    /// holds it); returns whether there was one.
    pub fn remove(&self, key: u64) -> bool {
        self.map
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key)
            .is_some()
    }

    /// Registrations cached.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether none is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
