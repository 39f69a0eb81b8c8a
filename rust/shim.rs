// SPDX-License-Identifier: GPL-2.0-only

//! Safe wrappers over `rust/shim.c`.
//!
//! What stays in C, and why (the 7.3 crate, checked against its source):
//! - VMA operations (`.fault`, `.open`, `.close`): the crate has
//!   `VmaNew::vm_insert_page` at mmap time only, no `vm_operations_struct`;
//!   pages must be inserted at fault time, under the module's lock, so an
//!   unbind's zap cannot miss them, and a mapping's last close must free a
//!   destroyed pair (`rust/shim.c`).
//! - Pinning user pages and DMA-mapping them (`MAP_HOST`): no
//!   `pin_user_pages`, and `scatterlist::SGTable` is built only from page
//!   owners of its own (`rust/shim.c`).
//! - dma-buf export and import: no dma-buf API (`rust/dma/*.c`).
//! - The relay thread: no kthread API (`rust/bridge/bridge_thread.c`).
//! - PCI error handlers and PM callbacks: `pci::Driver` has no
//!   `err_handler` or PM ops (`rust/controller/lifecycle.c`). The CSTS
//!   watch's delayed work sits beside them in C although 7.3 has
//!   `workqueue::DelayedWork`: moving it is still to do.
//! - Bus mastering off, the IOMMU domain type, lockdown and taint.
//!
//! Everything else (registers, the admin queue, debugfs, locking, the
//! registry of what the controller may reach) is Rust.

use core::ffi::c_void;
use core::ptr::NonNull;
use kernel::{bindings, device::Device, fs::File, mm::virt::VmaNew, pci, prelude::*, sync::Arc};

use crate::dma::buffers::{Buffers, Pending, REVOKE_WAIT_MS};

// `struct device`, `struct file` and `struct vm_area_struct` are passed as
// void pointers: the shim's prototypes are in rust/shim.h.
extern "C" {
    fn gpunvme_shim_clear_master(dev: *mut c_void);
    fn gpunvme_shim_mmap_setup(
        vma: *mut c_void,
        state: *mut c_void,
        gen: u64,
        kind: u32,
        mmio: bool,
    ) -> i32;
    fn gpunvme_shim_insert_coherent(
        vma: *mut c_void,
        addr: usize,
        cpu: *mut c_void,
        off: usize,
    ) -> u32;
    fn gpunvme_shim_insert_bar(
        vma: *mut c_void,
        addr: usize,
        dev: *mut c_void,
        bar_offset: usize,
    ) -> u32;
    static gpunvme_vm_fault_sigbus: u32;
    fn gpunvme_shim_zap_file(file: *mut c_void);
    fn gpunvme_shim_current_task(tgid: *mut i32, pid: *mut i32, comm: *mut u8);
    fn gpunvme_shim_pin_user(uaddr: u64, len: u64, err: *mut i32) -> *mut c_void;
    fn gpunvme_shim_map_pinned(map: *mut c_void, dev: *mut c_void, dma_addrs: *mut u64) -> i32;
    fn gpunvme_shim_unmap_user(map: *mut c_void);
}

/// The C `struct device` behind a `Device` (its `as_raw` is crate-private).
pub(crate) fn raw<Ctx: kernel::device::DeviceContext>(dev: &Device<Ctx>) -> *mut c_void {
    core::ptr::from_ref(dev).cast_mut().cast()
}

fn to_result(ret: i32) -> Result {
    if ret < 0 {
        Err(Error::from_errno(ret))
    } else {
        Ok(())
    }
}

/// Stop a PCI device from mastering the bus: the last resort when it cannot
/// be disabled and memory it might DMA into is about to outlive the binding.
pub(crate) fn clear_bus_master(pdev: &pci::Device<kernel::device::Bound>) {
    let dev: &Device<kernel::device::Bound> = pdev.as_ref();
    // SAFETY: `Device` is `repr(transparent)` over `struct device`, and this
    // one is embedded in a bound `struct pci_dev`, as to_pci_dev() expects.
    unsafe { gpunvme_shim_clear_master(raw(dev)) };
}

/// Make `vma` a fault-populated mapping of object `gen`/`kind` of the
/// open file `state` (`mmio`: an uncached BAR page). No page is inserted
/// here: `gpunvme_mmap_fault` does that, under the module's lock.
pub(crate) fn mmap_setup(
    vma: &VmaNew,
    state: *const c_void,
    gen: u64,
    kind: u32,
    mmio: bool,
) -> Result {
    // SAFETY: `vma` is a VMA being set up under the mmap lock; `state` is
    // the file's private data, which outlives every VMA of the file (a VMA
    // holds a reference on the file).
    to_result(unsafe {
        gpunvme_shim_mmap_setup(vma.as_ptr().cast(), state.cast_mut(), gen, kind, mmio)
    })
}

/// Insert the page at `off` of coherent memory `cpu` into `vma` at `addr`.
///
/// # Safety
///
/// `vma` is the faulting VMA (mmap lock held by the fault path), and
/// `cpu + off` is inside a live coherent allocation that stays allocated
/// until every mapping of it is zapped.
pub(crate) unsafe fn insert_coherent(
    vma: *mut c_void,
    addr: usize,
    cpu: *mut u8,
    off: usize,
) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { gpunvme_shim_insert_coherent(vma, addr, cpu.cast(), off) }
}

/// Insert the BAR0 page at `bar_offset` into `vma` at `addr`.
///
/// # Safety
///
/// `vma` is the faulting VMA and `dev` the bound PCI device, which stays
/// bound until every mapping is zapped.
pub(crate) unsafe fn insert_bar(
    vma: *mut c_void,
    addr: usize,
    dev: &Device,
    bar_offset: usize,
) -> u32 {
    // SAFETY: the caller's contract; the shim checks the BAR's bounds.
    unsafe { gpunvme_shim_insert_bar(vma, addr, raw(dev), bar_offset) }
}

/// The fault answer for an access that must not map anything.
pub(crate) fn fault_sigbus() -> u32 {
    // SAFETY: a constant the C object defines.
    unsafe { gpunvme_vm_fault_sigbus }
}

/// Remove every user mapping made through `file`.
pub(crate) fn zap_file(file: *mut bindings::file) {
    // SAFETY: callers pass a file that is open (registered at open, removed
    // at release under the same lock).
    unsafe { gpunvme_shim_zap_file(file.cast()) }
}

/// The current task's thread group ID, thread ID (initial PID namespace)
/// and name (NUL-padded).
pub(crate) fn current_task() -> (i32, i32, [u8; 16]) {
    let (mut tgid, mut pid, mut comm) = (0i32, 0i32, [0u8; 16]);
    // SAFETY: the three pointers are to locals of the right sizes (the
    // shim writes 16 bytes of name, TASK_COMM_LEN, checked at build time).
    unsafe { gpunvme_shim_current_task(&mut tgid, &mut pid, comm.as_mut_ptr()) };
    (tgid, pid, comm)
}

/// The raw `struct file` of `file`, to be zapped later.
pub(crate) fn file_ptr(file: &File) -> *mut bindings::file {
    file.as_ptr()
}

/// User pages pinned (charged to the owner's RLIMIT_MEMLOCK), then mapped
/// for the device's DMA; unmapped, unpinned and uncharged on drop.
pub(crate) struct HostMap(NonNull<c_void>);

// SAFETY: the mapping is plain kernel memory owned by this value; it can be
// released from any thread.
unsafe impl Send for HostMap {}
// SAFETY: no `&self` method touches the mapping.
unsafe impl Sync for HostMap {}

impl HostMap {
    /// Pin `[uaddr, uaddr + len)` of the current process (page-aligned,
    /// checked by the caller). Takes no lock of this module, so a range
    /// whose faults wait (userfaultfd) holds up only its caller.
    pub(crate) fn pin(uaddr: u64, len: u64) -> Result<Self> {
        let mut err = 0i32;
        // SAFETY: pinning user memory of the current task is what the shim does.
        let p = unsafe { gpunvme_shim_pin_user(uaddr, len, &mut err) };
        NonNull::new(p)
            .map(Self)
            .ok_or_else(|| Error::from_errno(err))
    }

    /// Map the pinned pages for `dev`; the DMA address of each 4 KiB page
    /// goes to `dma_addrs` (exactly as many entries as pages were pinned).
    pub(crate) fn map(
        &mut self,
        dev: &Device<kernel::device::Bound>,
        dma_addrs: &mut [u64],
    ) -> Result {
        // SAFETY: `self.0` came from gpunvme_shim_pin_user and is not mapped
        // yet (`map` is called once, by `map_host`); `dma_addrs` has room
        // for every pinned page (the caller sized it from the same length);
        // `dev` is bound for the duration of the call.
        to_result(unsafe {
            gpunvme_shim_map_pinned(self.0.as_ptr(), raw(dev), dma_addrs.as_mut_ptr())
        })
    }
}

impl Drop for HostMap {
    fn drop(&mut self) {
        // Unpin and unmap. The controller could still reach these pages
        // through any pair of the file whose delete is not confirmed: then
        // no mapping of the file is dropped (UNMAP refuses, `drop_map`
        // keeps it, close quarantines it until the controller is
        // disabled). A relay checks against the file's `Buffers`, which
        // lost this mapping before, and counts what it let through.
        // SAFETY: the pointer came from gpunvme_shim_pin_user and is released once.
        unsafe { gpunvme_shim_unmap_user(self.0.as_ptr()) }
    }
}

extern "C" {
    fn gpunvme_shim_export_mmio(
        dev: *mut c_void,
        bar_offset: u64,
        len: u64,
        flags: u32,
        fd: *mut i32,
        err: *mut i32,
    ) -> *mut c_void;
    fn gpunvme_shim_export_mem(
        dev: *mut c_void,
        cpu: *mut c_void,
        dma: u64,
        size: usize,
        flags: u32,
        fd: *mut i32,
        err: *mut i32,
    ) -> *mut c_void;
    fn gpunvme_shim_export_revoke(exp: *mut c_void) -> bool;
    fn gpunvme_shim_revoke_deadline() -> core::ffi::c_ulong;
    fn gpunvme_shim_export_revoke_start(exp: *mut c_void);
    fn gpunvme_shim_export_revoke_wait(exp: *mut c_void, until: core::ffi::c_ulong) -> bool;
    fn gpunvme_shim_export_held(exp: *mut c_void) -> bool;
    fn gpunvme_shim_export_put(exp: *mut c_void);
}

/// A dma-buf this module exported (see `rust/dma/dmabuf_exporter.c`).
/// [`Export::revoke`] revokes every importer's mapping and says whether
/// they all let go; dropping it unrevoked revokes too (the answer is only
/// logged). The dma-buf itself lives on until its last fd and attachment
/// are gone, answering ENODEV.
pub(crate) struct Export(NonNull<c_void>);

// SAFETY: the export object is reference-counted kernel memory; revoking
// takes the dma-buf's own lock and may run on any thread.
unsafe impl Send for Export {}
// SAFETY: no `&self` method touches it.
unsafe impl Sync for Export {}

impl Export {
    /// Export `len` bytes of BAR0 at `bar_offset` (peer-to-peer importers
    /// only); installs an fd in the calling process.
    pub(crate) fn mmio(dev: &Device, bar_offset: u64, len: u64, flags: u32) -> Result<(Self, i32)> {
        let (mut fd, mut err) = (-1i32, 0i32);
        // SAFETY: `dev` is the PCI device gpunvme is bound to (callers hold
        // the admin lock with the device bound); the shim checks the range.
        let p = unsafe {
            gpunvme_shim_export_mmio(raw(dev), bar_offset, len, flags, &mut fd, &mut err)
        };
        NonNull::new(p)
            .map(|p| (Self(p), fd))
            .ok_or_else(|| Error::from_errno(err))
    }

    /// Export coherent memory (`cpu`, `dma`, `size`) of `dev`.
    /// The caller revokes (drops) the export before freeing that memory.
    pub(crate) fn memory(
        dev: &Device,
        cpu: *mut u8,
        dma: u64,
        size: usize,
        flags: u32,
    ) -> Result<(Self, i32)> {
        let (mut fd, mut err) = (-1i32, 0i32);
        // SAFETY: `cpu`/`dma`/`size` describe a live coherent allocation of
        // `dev`, which outlives this export's unrevoked life (caller contract).
        let p = unsafe {
            gpunvme_shim_export_mem(raw(dev), cpu.cast(), dma, size, flags, &mut fd, &mut err)
        };
        NonNull::new(p)
            .map(|p| (Self(p), fd))
            .ok_or_else(|| Error::from_errno(err))
    }
}

/// When the revokes started together wait until: 5 s from now, for all of
/// them (jiffies).
#[derive(Clone, Copy)]
pub(crate) struct RevokeDeadline(core::ffi::c_ulong);

impl RevokeDeadline {
    pub(crate) fn from_now() -> Self {
        // SAFETY: reads jiffies.
        Self(unsafe { gpunvme_shim_revoke_deadline() })
    }
}

impl Export {
    /// Revoke: invalidate every importer's mapping, then wait (5 s at most)
    /// for them to unmap and for their fences. `Err` when one held on: the
    /// exported memory must then be kept as long as `HeldExport::held`.
    pub(crate) fn revoke(self) -> core::result::Result<(), HeldExport> {
        self.revoke_start().finish(RevokeDeadline::from_now())
    }

    /// The first half of `revoke`: importers are told to unmap, and no new
    /// mapping is made; `Revoking::finish` waits for them.
    pub(crate) fn revoke_start(self) -> Revoking {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: the pointer came from an export call; `ManuallyDrop`
        // keeps `drop` from revoking it a second time.
        unsafe { gpunvme_shim_export_revoke_start(this.0.as_ptr()) };
        Revoking(HeldExport(this.0))
    }
}

/// An export whose revoke started: its importers were told to unmap.
/// `finish` it before the exported memory may go: dropped unfinished, only
/// the module's reference goes, and whether an importer still maps the
/// memory is not known.
pub(crate) struct Revoking(HeldExport);

impl Revoking {
    /// Wait until `deadline` for the importers to unmap and for their
    /// fences; `Err` when one held on (as `Export::revoke`).
    pub(crate) fn finish(self, deadline: RevokeDeadline) -> core::result::Result<(), HeldExport> {
        // SAFETY: the module's reference (in `HeldExport`) keeps the export
        // alive; its revoke was started once.
        let clean = unsafe { gpunvme_shim_export_revoke_wait((self.0).0.as_ptr(), deadline.0) };
        if clean {
            Ok(()) // dropping `self` drops the module's reference
        } else {
            Err(self.0)
        }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // The exported memory itself is not freed here: an importer that
        // does not let go in time leaves a HeldExport, and what it maps
        // is kept while `held` says so.
        // SAFETY: the pointer came from an export call and is revoked once
        // (`revoke` does not get here), then the module's reference goes.
        unsafe {
            gpunvme_shim_export_revoke(self.0.as_ptr());
            gpunvme_shim_export_put(self.0.as_ptr());
        }
    }
}

/// A revoked export an importer did not let go of in time, with the
/// module's reference on it (dropped on drop): `held` says whether the
/// importer still maps or fences it, so the memory can be freed once not.
pub(crate) struct HeldExport(NonNull<c_void>);

// SAFETY: as for `Export`: a reference-counted kernel object.
unsafe impl Send for HeldExport {}
// SAFETY: `held` only reads an atomic and the reservation's fences.
unsafe impl Sync for HeldExport {}

impl HeldExport {
    pub(crate) fn held(&self) -> bool {
        // SAFETY: the module's reference keeps the export alive.
        unsafe { gpunvme_shim_export_held(self.0.as_ptr()) }
    }
}

impl Drop for HeldExport {
    fn drop(&mut self) {
        // SAFETY: the module's reference, dropped once.
        unsafe { gpunvme_shim_export_put(self.0.as_ptr()) }
    }
}

extern "C" {
    fn gpunvme_shim_import(
        dev: *mut c_void,
        fd: i32,
        dma_addrs: *mut u64,
        max_pages: u64,
        len: *mut u64,
        buffers: *mut c_void,
        handle: u32,
        err: *mut i32,
    ) -> *mut c_void;
    fn gpunvme_shim_unimport(imp: *mut c_void);
    fn gpunvme_shim_import_revoked(imp: *mut c_void) -> bool;
    fn gpunvme_shim_import_release_kept(imp: *mut c_void);
}

/// A dma-buf imported for the controller's DMA (see `rust/dma/dmabuf_importer.c`):
/// attached peer-to-peer, pinned and mapped; detached on drop. When the
/// exporter revokes it, its pages leave the importing file's `Buffers`
/// first (`gpunvme_buffers_revoke`), so no new command can name them, and
/// it is unmapped only once the commands that might still name them are
/// done (`gpunvme_buffers_drain`); otherwise it stays mapped until drop.
pub(crate) struct Import {
    imp: NonNull<c_void>,
    /// The reference on the file's pages that the revoke callback uses,
    /// released after the attachment is gone.
    buffers: *const Buffers,
}

// SAFETY: the import is owned kernel memory; teardown takes the dma-buf's
// own lock and may run on any thread; `Buffers` is `Sync`.
unsafe impl Send for Import {}
// SAFETY: `&self` methods only read the revoked flag (READ_ONCE in C).
unsafe impl Sync for Import {}

impl Import {
    /// Import dma-buf `fd` for `dev` as mapping `handle` of the file whose
    /// pages are `buffers`; the DMA address of each 4 KiB page goes to
    /// `dma_addrs` (at most its length). Returns the byte length.
    pub(crate) fn new(
        dev: &Device,
        fd: i32,
        dma_addrs: &mut [u64],
        buffers: &Arc<Buffers>,
        handle: u32,
    ) -> Result<(Self, u64)> {
        let (mut len, mut err) = (0u64, 0i32);
        let b = Arc::into_raw(buffers.clone());
        // SAFETY: `dma_addrs` has room for the `max_pages` passed; the shim
        // takes its own reference on the dma-buf behind `fd`; `b` stays
        // valid until the attachment is gone (dropped after unimport).
        let p = unsafe {
            gpunvme_shim_import(
                raw(dev),
                fd,
                dma_addrs.as_mut_ptr(),
                dma_addrs.len() as u64,
                &mut len,
                b.cast_mut().cast(),
                handle,
                &mut err,
            )
        };
        match NonNull::new(p) {
            Some(imp) => Ok((Self { imp, buffers: b }, len)),
            None => {
                // SAFETY: the import failed and no callback can run: the
                // reference from `into_raw` above is ours again.
                drop(unsafe { Arc::from_raw(b) });
                Err(Error::from_errno(err))
            }
        }
    }

    /// The controller is stopped: unmap a mapping kept after a revoke.
    pub(crate) fn release_kept(&self) {
        // SAFETY: `imp` is live until drop; the call takes the dma-buf's
        // lock, as the revoke callback does.
        unsafe { gpunvme_shim_import_release_kept(self.imp.as_ptr()) }
    }

    /// Has the exporter revoked the mapping since it was made?
    pub(crate) fn revoked(&self) -> bool {
        // SAFETY: `imp` is live until drop.
        unsafe { gpunvme_shim_import_revoked(self.imp.as_ptr()) }
    }
}

impl Drop for Import {
    fn drop(&mut self) {
        // Detach and unmap a peer's pages: kept, like a host mapping, while
        // a pair of the file may still DMA into them (see HostMap's drop);
        // after its exporter's revoke, its pages stay mapped until the
        // commands the relay let through have completed, or the controller
        // is known stopped (`release_kept`).
        // SAFETY: the pointer came from gpunvme_shim_import; released once.
        // After it returns the attachment is detached, so the revoke
        // callback cannot run and the `Buffers` reference can go.
        unsafe {
            gpunvme_shim_unimport(self.imp.as_ptr());
            drop(Arc::from_raw(self.buffers));
        }
    }
}

/// The importer's revoke callback, first half: forget mapping `handle` in
/// `buffers`; `*pending` gets what must drain before its pages may be
/// unmapped (`PENDING_*`), the return value how many commands that is now.
#[no_mangle]
extern "C" fn gpunvme_buffers_revoke(buffers: *mut c_void, handle: u32, pending: *mut u32) -> u32 {
    // SAFETY: `buffers` is the `Arc<Buffers>` reference an `Import` holds
    // until its attachment is gone, and the exporter calls this only while
    // attached.
    let b = unsafe { &*buffers.cast_const().cast::<Buffers>() };
    let (p, n) = b.revoke(handle);
    // SAFETY: `pending` points at the caller's u32.
    unsafe { *pending = pending_to_c(p) };
    n
}

/// Second half: wait (up to `REVOKE_WAIT_MS`) for what the first half
/// returned; true when the pages may be unmapped.
#[no_mangle]
extern "C" fn gpunvme_buffers_drain(buffers: *mut c_void, pending: u32) -> bool {
    // SAFETY: as for `gpunvme_buffers_revoke`.
    let b = unsafe { &*buffers.cast_const().cast::<Buffers>() };
    let p = match pending {
        0 | 1 => Pending::Epoch(pending as u8),
        2 => Pending::All,
        _ => Pending::Unknown,
    };
    b.drain(p, REVOKE_WAIT_MS)
}

/// `Pending` as `rust/dma/dmabuf_importer.c` sees it: 0 and 1 are epochs, 2
/// every counted command, 3 unknown (raw pairs).
fn pending_to_c(p: Pending) -> u32 {
    match p {
        Pending::Epoch(e) => u32::from(e & 1),
        Pending::All => 2,
        Pending::Unknown => 3,
    }
}

extern "C" {
    fn gpunvme_shim_iommu_mode(dev: *mut c_void) -> u32;
    fn gpunvme_shim_pci_locked_down() -> i32;
    fn gpunvme_shim_taint_no_iommu();
}

/// The device's IOMMU domain as `GPUNVME_IOMMU_*`.
pub(crate) fn iommu_mode(dev: &Device) -> u32 {
    // SAFETY: `dev` is a live device; the call only reads its domain.
    unsafe { gpunvme_shim_iommu_mode(raw(dev)) }
}

/// Is the kernel locked down against raw PCI access?
pub(crate) fn pci_locked_down() -> bool {
    // SAFETY: no arguments; asks the LSMs.
    unsafe { gpunvme_shim_pci_locked_down() != 0 }
}

/// Taint the kernel: owner mode without a translating IOMMU.
pub(crate) fn taint_no_iommu() {
    // SAFETY: no arguments; sets a taint flag.
    unsafe { gpunvme_shim_taint_no_iommu() }
}

extern "C" {
    fn gpunvme_shim_pci_event(dev: *mut c_void, ev: u32, name: *const kernel::ffi::c_char) -> i32;
    fn gpunvme_shim_add_poll(misc: *mut c_void) -> i32;
}

/// Give the device node `misc` (just registered) a `poll` file operation,
/// answered by `lifecycle::gpunvme_file_poll`.
pub(crate) fn add_poll(misc: *mut bindings::miscdevice) -> Result {
    // SAFETY: `misc` is a registered miscdevice whose file operations are
    // the Rust crate's for `OpenFile` or `NsFile`, whose open puts a
    // `KBox<OpenState>` in the file's private data.
    to_result(unsafe { gpunvme_shim_add_poll(misc.cast()) })
}

/// Run PCI callback `ev` (named `name`, for the log) of the bound device
/// `dev` as the PCI core would, under its device lock (debugfs
/// `pci_event`).
pub(crate) fn pci_event(dev: &Device, ev: u32, name: &CStr) -> Result {
    // SAFETY: `dev` is alive (referenced); the shim takes its lock and
    // runs the callback only while a driver is bound; `name` is a C string.
    to_result(unsafe { gpunvme_shim_pci_event(raw(dev), ev, name.as_char_ptr()) })
}
