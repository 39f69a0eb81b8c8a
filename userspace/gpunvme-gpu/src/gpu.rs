// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! One opened GPU, behind the runtime it was found with (HIP or CUDA).

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::driver::Driver;
use crate::error::{GpuError, Result};
use crate::import::{try_routes, ImportReport, Imported, Region, Route, Undo};
use crate::probe::{probe_with, GpuDevice, RuntimeInfo, RuntimeKind, DEFAULT_LIBRARIES};
use crate::runtime::Runtime;

/// What a runtime backend does. Handles are the runtime's opaque pointers.
pub(crate) trait Backend: Send + Sync {
    /// Wall-clock ticks per second of the device's fixed-rate counter.
    fn tick_hz(&self) -> Result<u64>;
    fn alloc_device(&self, bytes: usize) -> Result<u64>;
    /// Uncached device memory, freed by `free_device`.
    fn alloc_device_uncached(&self, bytes: usize) -> Result<u64> {
        let _ = bytes;
        Err(GpuError(
            "this runtime has no uncached device memory".into(),
        ))
    }
    fn free_device(&self, ptr: u64);
    /// A dma-buf of `bytes` at `ptr` (from alloc_device).
    fn export_dmabuf(&self, ptr: u64, bytes: usize) -> Result<OwnedFd>;
    /// Zeroed host memory mapped for the GPU: (CPU pointer, GPU address).
    fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)>;
    fn free_host_mapped(&self, cpu: *mut u8);
    /// Copies `src` to device address `dst`. After an error that may still
    /// run, the copy engine may go on reading `src` (never writing it).
    fn copy_to_device(&self, dst: u64, src: &[u8]) -> std::result::Result<(), CopyError>;
    /// Copies `len` device bytes at `src` to host memory at `dst`.
    ///
    /// # Safety
    ///
    /// `dst .. dst + len` is host memory that no Rust reference covers and
    /// that stays allocated until this returns `Ok`; after an `Err` with
    /// `may_still_run` the copy engine may still write it, so it must stay
    /// allocated and unread for good.
    unsafe fn copy_from_device(
        &self,
        dst: *mut u8,
        len: usize,
        src: u64,
    ) -> std::result::Result<(), CopyError>;
    fn load_module(&self, image: &[u8]) -> Result<usize>;
    fn unload_module(&self, module: usize);
    fn function(&self, module: usize, name: &str) -> Result<usize>;
    /// Launches on a new non-blocking stream; returns the stream.
    fn launch(
        &self,
        func: usize,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<usize>;
    /// Ok(true) when everything on the stream finished.
    fn stream_done(&self, stream: usize) -> Result<bool>;
    fn destroy_stream(&self, stream: usize);
    /// The import routes for `region`, in the order to try them.
    fn import_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>>;
    fn release_import(&self, undo: Undo);
}

/// A copy that failed; `may_still_run` when it was queued and not seen
/// done (its deadline passed, or its stream failed), so the copy engine may
/// still read its source and write its destination.
#[derive(Debug)]
pub(crate) struct CopyError {
    pub(crate) error: GpuError,
    pub(crate) may_still_run: bool,
}

/// Polls `done` until it is true, failing once `deadline` has passed;
/// sleeps `pause` between polls, or spins when `None`.
pub(crate) fn poll_until(
    what: &str,
    deadline: Duration,
    pause: Option<Duration>,
    mut done: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let t0 = Instant::now();
    while !done()? {
        if t0.elapsed() > deadline {
            return Err(GpuError(format!("{what} still running after {deadline:?}")));
        }
        match pause {
            Some(p) => std::thread::sleep(p),
            None => std::hint::spin_loop(),
        }
    }
    Ok(())
}

/// How long dropping an unfinished [`Launch`] waits for the kernel after
/// raising its stop flag, before it gives up and leaks what the kernel uses.
pub const DROP_DEADLINE: Duration = Duration::from_secs(10);

/// A GPU opened for use: allocation, export, import, launch.
///
/// If a kernel may still be running when the `Gpu` is dropped (its
/// [`Launch`] was dropped before the kernel finished, or was leaked with
/// [`std::mem::forget`]), the runtime is never unloaded (dropping the
/// `Gpu` leaves it loaded), so the kernel's context, code and memory stay.
pub struct Gpu {
    backend: ManuallyDrop<Box<dyn Backend>>,
    device: GpuDevice,
    runtime: RuntimeInfo,
    /// Work that may still run on this runtime: kernels launched and not
    /// yet seen finished (counted at launch, uncounted only when
    /// [`Launch::finish`] or the launch's drop sees the kernel done; a
    /// launch leaked with `mem::forget` (safe) or one whose kernel would
    /// not stop stays counted), and copies that failed while they may
    /// still run. The runtime is never unloaded under any of it.
    live: AtomicUsize,
    /// [`DROP_DEADLINE`] (shorter in the unit tests).
    drop_deadline: Duration,
    /// The bounce buffers of device-to-host copies that failed while they
    /// may still run: the copy engine may still write them, so they are
    /// never freed (leaked when the `Gpu` goes). Each such copy also stays
    /// counted in `live`, so the runtime is not unloaded under it.
    quarantine: Mutex<Vec<Vec<u8>>>,
}

impl Drop for Gpu {
    fn drop(&mut self) {
        if *self.live.get_mut() == 0 {
            // SAFETY: dropped once, here; every kernel launched on this Gpu
            // was seen finished (a Launch dropped unfinished or forgotten
            // is still counted in `live`), so none runs on this runtime.
            unsafe { ManuallyDrop::drop(&mut self.backend) };
        }
        // Copies that may still run write these: never freed.
        let q = std::mem::take(self.quarantine.get_mut().unwrap_or_else(|p| p.into_inner()));
        std::mem::forget(q);
    }
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("device", &self.device)
            .field("runtime", &self.runtime)
            .finish()
    }
}

impl Gpu {
    /// Opens GPU `index` of the first runtime in [`DEFAULT_LIBRARIES`] that
    /// finds one.
    pub fn open(index: u32) -> Result<Gpu> {
        Self::open_with(DEFAULT_LIBRARIES, index)
    }

    /// Opens GPU `index` of the first of `libraries` that finds one. The
    /// error lists every library tried and why it did not do.
    pub fn open_with(libraries: &[&str], index: u32) -> Result<Gpu> {
        let report = probe_with(libraries);
        let Some(runtime) = report
            .runtime
            .clone()
            .filter(|_| !report.devices.is_empty())
        else {
            let tried: Vec<String> = report
                .attempts
                .iter()
                .map(|a| format!("{}: {}", a.library, a.outcome))
                .collect();
            return Err(GpuError(format!(
                "no GPU: {} [{}]",
                report.reason,
                tried.join("; ")
            )));
        };
        let device = report
            .devices
            .iter()
            .find(|d| d.index == index)
            .cloned()
            .ok_or_else(|| {
                GpuError(format!(
                    "GPU {index} does not exist: the {} runtime sees {} GPU(s)",
                    runtime.kind,
                    report.devices.len()
                ))
            })?;
        let rt = Runtime::load(&runtime.library, runtime.kind).map_err(GpuError)?;
        let backend: Box<dyn Backend> = match runtime.kind {
            RuntimeKind::Cuda => Box::new(Driver::new(crate::cuda::Cuda::open(rt, index)?)?),
            RuntimeKind::Hip => Box::new(Driver::new(crate::hip::Hip::open(rt, index, &device)?)?),
        };
        Ok(Gpu {
            backend: ManuallyDrop::new(backend),
            device,
            runtime,
            live: AtomicUsize::new(0),
            drop_deadline: DROP_DEADLINE,
            quarantine: Mutex::new(Vec::new()),
        })
    }

    /// A `Gpu` over a test backend (the fakes of this crate's unit tests).
    #[cfg(test)]
    pub(crate) fn with_backend(
        backend: Box<dyn Backend>,
        device: GpuDevice,
        runtime: RuntimeInfo,
        drop_deadline: Duration,
    ) -> Gpu {
        Gpu {
            backend: ManuallyDrop::new(backend),
            device,
            runtime,
            live: AtomicUsize::new(0),
            drop_deadline,
            quarantine: Mutex::new(Vec::new()),
        }
    }

    /// The device.
    pub fn device(&self) -> &GpuDevice {
        &self.device
    }

    /// The runtime it was opened with.
    pub fn runtime(&self) -> &RuntimeInfo {
        &self.runtime
    }

    /// Wall-clock ticks per second (for `qpair.tick_hz`).
    pub fn tick_hz(&self) -> Result<u64> {
        self.backend.tick_hz()
    }

    /// Allocates `bytes` of device memory (VRAM), rounded up to 64 KiB so
    /// that it can be exported whole.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceMemory<'_>> {
        let len = bytes.max(1).div_ceil(64 << 10) * (64 << 10);
        let ptr = self.backend.alloc_device(len)?;
        Ok(DeviceMemory {
            gpu: self,
            ptr,
            len,
        })
    }

    /// How [`alloc_payload`](Self::alloc_payload) allocates on this GPU.
    pub fn payload_memory(&self) -> PayloadMemory {
        payload_memory(self.runtime.kind, &self.device.arch)
    }

    /// Allocates `bytes` of device memory for payload the SSD reads or
    /// writes while a kernel runs (the payload contract of
    /// `kernels/include/gpunvme/fence.h`): uncached VRAM on every AMD GPU
    /// (`hipExtMallocWithFlags(hipDeviceMallocUncached)`), plain device
    /// memory on NVIDIA (see [`payload_memory`] for why). Rounded up to
    /// 64 KiB like [`alloc`](Self::alloc), and exportable the same way.
    pub fn alloc_payload(&self, bytes: usize) -> Result<DeviceMemory<'_>> {
        let len = bytes.max(1).div_ceil(64 << 10) * (64 << 10);
        let ptr = match self.payload_memory() {
            PayloadMemory::Uncached => self.backend.alloc_device_uncached(len)?,
            PayloadMemory::Device => self.backend.alloc_device(len)?,
        };
        Ok(DeviceMemory {
            gpu: self,
            ptr,
            len,
        })
    }

    /// Exports device memory as a dma-buf, for `GPUNVME_IOC_MAP_DMABUF`.
    pub fn export_dmabuf(&self, mem: &DeviceMemory<'_>) -> Result<OwnedFd> {
        self.backend.export_dmabuf(mem.ptr, mem.len)
    }

    /// Zeroed host memory the GPU can read and write.
    pub fn alloc_host_mapped(&self, bytes: usize) -> Result<HostMapped<'_>> {
        let len = bytes.max(1).div_ceil(4096) * 4096;
        let (cpu, dev) = self.backend.alloc_host_mapped(len)?;
        // SAFETY: the runtime returned `len` bytes at `cpu`, owned here.
        unsafe { std::ptr::write_bytes(cpu, 0, len) };
        Ok(HostMapped {
            gpu: self,
            cpu,
            dev,
            len,
        })
    }

    /// Copies host bytes to a device address; returns once they are in
    /// device memory. Copies run on a stream of their own that never waits
    /// for a running kernel, and each has a 10 s deadline. For memory of
    /// [`alloc`](Self::alloc), [`DeviceMemory::write_at`] is the safe way.
    ///
    /// A copy that times out may still run (nothing stops a queued copy):
    /// it may go on reading `src` after the error, and on writing `dst`
    /// (so the device memory's contents are unknown then); it keeps the
    /// runtime loaded, as a running kernel does.
    ///
    /// # Safety
    ///
    /// `dst .. dst + src.len()` names memory of this GPU's address space
    /// that the caller may overwrite: not memory that a Rust reference
    /// covers meanwhile (the CPU side of [`HostMapped`] memory, or a host
    /// range an [`import`](Self::import) registered, is the same memory).
    pub unsafe fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.backend
            .copy_to_device(dst, src)
            .map_err(|e| self.copy_failed(e))
    }

    /// Copies device bytes to the host (as [`copy_to_device`](Self::copy_to_device)),
    /// through a bounce buffer of the `Gpu`'s: the device writes only that,
    /// and `dst` is written by the CPU once the copy is done. A copy that
    /// times out (or whose stream fails) may still write its bounce buffer
    /// after the error returns: that buffer is then quarantined (kept by
    /// this `Gpu`, never freed or read, leaked when it goes), while `dst`,
    /// which the caller may read or free as soon as this returns, is never
    /// in the device's reach.
    pub fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        // Zeroed by calloc's fresh pages: no touch before the device's.
        let mut bounce = vec![0u8; dst.len()];
        // SAFETY: `bounce` is this function's: no reference to it while the
        // copy runs, and after an error that may still run it is moved into
        // the quarantine, where nothing frees or reads it.
        let r = unsafe {
            self.backend
                .copy_from_device(bounce.as_mut_ptr(), bounce.len(), src)
        };
        match r {
            Ok(()) => {
                dst.copy_from_slice(&bounce);
                Ok(())
            }
            Err(e) => {
                if e.may_still_run {
                    self.quarantine
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(bounce);
                }
                Err(self.copy_failed(e))
            }
        }
    }

    /// A copy that may still run keeps the runtime loaded (as a kernel).
    fn copy_failed(&self, e: CopyError) -> GpuError {
        if e.may_still_run {
            self.live.fetch_add(1, Ordering::AcqRel);
        }
        e.error
    }

    /// Bounce buffers of failed device-to-host copies kept because the
    /// copy may still write them (see [`copy_from_device`](Self::copy_from_device)),
    /// and their bytes.
    pub fn quarantined_copies(&self) -> (usize, usize) {
        let q = self.quarantine.lock().unwrap_or_else(|p| p.into_inner());
        (q.len(), q.iter().map(Vec::len).sum())
    }

    /// Loads a code object (AMD ELF, or NUL-terminated PTX for CUDA).
    pub fn load_module(&self, image: &[u8]) -> Result<Module<'_>> {
        let handle = self.backend.load_module(image)?;
        Ok(Module {
            loaded: Arc::new(Loaded { gpu: self, handle }),
        })
    }

    /// Launches `name` from `module` on its own stream, as `cfg` says, and
    /// returns the running kernel, which owns `keep`: the memory the kernel
    /// uses (its buffers, queue pairs, mappings), handed back by
    /// [`Launch::finish`] once the kernel has finished. Dropping the
    /// [`Launch`] earlier raises the stop flag and waits (up to
    /// [`DROP_DEADLINE`]); if the kernel still runs, `keep`, the stream and
    /// the module are leaked, never freed.
    ///
    /// # Safety
    ///
    /// The kernel reads and writes whatever its arguments point to, as raw
    /// device addresses. The caller guarantees that:
    ///
    /// - `cfg.args` match the kernel's parameters (each passed as 8 bytes),
    ///   and every address the kernel reaches through them names memory
    ///   that stays allocated and mapped while it may run: memory owned by
    ///   `keep`, or memory that outlives the `Gpu`;
    /// - `keep` **owns** that memory and does not borrow it (no `&` or
    ///   `&mut` to a buffer, vector or mapping inside `K`): a `Launch` can
    ///   be leaked with the safe [`std::mem::forget`], which ends every
    ///   borrow in `keep` while the kernel runs on, so a borrowed buffer
    ///   could then be read, written or freed by Rust under the kernel
    ///   (the runtime itself stays loaded: a forgotten launch is still
    ///   counted as running);
    /// - the DMA the kernel's *commands* cause is covered too: a kernel
    ///   given a queue pair of a `gpunvme::Controller`
    ///   (one open file) can aim the SSD at every buffer that file mapped
    ///   (the module checks PRPs against the file's mappings, not against
    ///   the kernel's arguments). So every `DmaBuffer` and `DmabufMapping`
    ///   of a controller whose pairs are in `keep` is in `keep` too, or is
    ///   not reached from Rust (no `as_slice`, no drop) while the kernel
    ///   runs. Simplest: give GPU-driven pairs a `Controller` of their own
    ///   (its own `Controller::open`), holding only the buffers the kernel
    ///   uses, so the module's per-file check confines the SSD to them;
    /// - no Rust reference covers memory the kernel writes (or memory it
    ///   reads that Rust writes) while it may run: such memory is reached
    ///   from Rust only through raw pointers, with volatile or atomic
    ///   accesses;
    /// - `cfg.stop_flag`, if set, points to a `u32` in memory owned by
    ///   `keep` (host memory the kernel polls, e.g. [`HostMapped`]), and the
    ///   kernel ends soon after it reads a non-zero value there.
    pub unsafe fn launch<'g, K>(
        &'g self,
        module: &Module<'g>,
        name: &str,
        cfg: LaunchConfig<'_>,
        keep: K,
    ) -> Result<Launch<'g, K>> {
        let func = self.backend.function(module.loaded.handle, name)?;
        let mut values: Vec<u64> = cfg.args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        let stream = self
            .backend
            .launch(func, cfg.grid, cfg.block, &mut params)?;
        // Counted before the Launch exists: forgetting it keeps the count.
        self.live.fetch_add(1, Ordering::AcqRel);
        Ok(Launch {
            gpu: self,
            stream,
            name: name.to_string(),
            module: Some(module.loaded.clone()),
            stop: cfg.stop_flag.and_then(NonNull::new),
            keep: Some(keep),
            finished: false,
        })
    }

    /// Maps `region` into the GPU's address space, trying every route.
    /// Returns the mapping (if a route worked) and the report of every
    /// attempt.
    ///
    /// # Safety
    ///
    /// `region.cpu`, if set, points to `region.len` bytes mapped in this
    /// process that stay mapped while the returned [`Imported`] lives
    /// (drop it first). A kernel given the import's address may read and
    /// write them, so the [`launch`](Self::launch) contract covers them:
    /// no Rust reference to them while a kernel may run.
    pub unsafe fn import(&self, region: &Region<'_>) -> (Option<Imported<'_>>, ImportReport) {
        let (kind, arch) = (self.runtime.kind, self.device.arch.as_str());
        // Routes that cannot set the memory type this GPU needs are
        // refused (mem_type.rs), never tried.
        let routes =
            crate::mem_type::gate(kind, arch, region.what, self.backend.import_routes(region));
        let (got, mut attempts) = try_routes(routes);
        for a in attempts.iter_mut().filter(|a| a.ok) {
            a.mem_type = Some(crate::mem_type::of_route(kind, arch, a.route, region.mmio));
        }
        let report = ImportReport {
            what: region.what.to_string(),
            attempts,
        };
        let imported = got.map(|(device_ptr, undo, route)| Imported {
            gpu: self,
            device_ptr,
            route,
            undo: Some(undo),
        });
        (imported, report)
    }

    pub(crate) fn release_import(&self, undo: Undo) {
        self.backend.release_import(undo)
    }
}

/// Which memory [`Gpu::alloc_payload`] takes for payload the SSD touches
/// while a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadMemory {
    /// `cuMemAlloc`: NVIDIA, where a peer's writes into VRAM go through
    /// L2, and the kernel's payload_acquire() drops stale L1 lines.
    Device,
    /// `hipExtMallocWithFlags(hipDeviceMallocUncached)`: every AMD GPU.
    /// RDNA (gfx10, 11, 12): a system-scope release there is only waits
    /// and an acquire never invalidates GL2, so coarse-grained VRAM could
    /// serve stale lines or keep dirty ones. CDNA (gfx90a, gfx942): a
    /// system-scope acquire (buffer_invl2 / buffer_inv sc1) drops only
    /// the L2 lines of *non-local* memory; a line of coarse-grained local
    /// VRAM is dropped when another agent's write is a coherent request,
    /// which a PCIe peer's is only if the platform configures it so
    /// (LLVM's AMDGPU memory model, GFX90A/GFX942): nothing here has shown
    /// it on hardware, so it is uncached there too until a hardware test
    /// does (review s3, 2.3).
    Uncached,
}

/// The payload memory a GPU needs (the payload contract of
/// `kernels/include/gpunvme/fence.h`).
pub fn payload_memory(kind: RuntimeKind, _arch: &str) -> PayloadMemory {
    match kind {
        RuntimeKind::Hip => PayloadMemory::Uncached,
        RuntimeKind::Cuda => PayloadMemory::Device,
    }
}

/// Device memory; freed on drop. Whoever imported its dma-buf keeps its
/// own reference, so drop this after `GPUNVME_IOC_UNMAP` where possible.
#[derive(Debug)]
pub struct DeviceMemory<'g> {
    gpu: &'g Gpu,
    ptr: u64,
    len: usize,
}

impl DeviceMemory<'_> {
    /// GPU virtual address.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    /// Copies `src` to byte `offset` of this memory (see
    /// [`Gpu::copy_to_device`]); fails if it does not fit.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.check(offset, src.len())?;
        // SAFETY: inside this allocation (checked), which is device memory
        // no Rust reference covers; `&mut self` orders it after earlier
        // uses of this value.
        unsafe { self.gpu.copy_to_device(self.ptr + offset as u64, src) }
    }

    /// Copies bytes at `offset` of this memory into `dst`; fails if they do
    /// not fit. The device never writes `dst` itself: see
    /// [`Gpu::copy_from_device`] (a timed-out copy leaves its bounce
    /// buffer quarantined, not `dst`, in the device's reach).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.check(offset, dst.len())?;
        self.gpu.copy_from_device(dst, self.ptr + offset as u64)
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(GpuError(format!(
                "{len} bytes at offset {offset} do not fit {} bytes of device memory",
                self.len
            )));
        }
        Ok(())
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for DeviceMemory<'_> {
    fn drop(&mut self) {
        self.gpu.backend.free_device(self.ptr);
    }
}

/// Host memory mapped for the GPU; freed on drop. It hands out raw
/// pointers only (the GPU may write it at any time), hence `Send` and
/// `Sync`.
#[derive(Debug)]
pub struct HostMapped<'g> {
    gpu: &'g Gpu,
    cpu: *mut u8,
    dev: u64,
    len: usize,
}

// SAFETY: plain memory owned by this value; the runtime's free is
// thread-safe.
unsafe impl Send for HostMapped<'_> {}
// SAFETY: shared access is through raw pointers whose users synchronize
// (volatile/atomic accesses, as with the GPU).
unsafe impl Sync for HostMapped<'_> {}

impl HostMapped<'_> {
    /// CPU pointer.
    pub fn cpu(&self) -> *mut u8 {
        self.cpu
    }

    /// GPU address of the same memory.
    pub fn dev(&self) -> u64 {
        self.dev
    }

    /// Bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never empty.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Pointer to a `T` at byte `offset`, checked to fit and be aligned;
    /// panics otherwise (an offset near `usize::MAX` included: the end is
    /// computed with `checked_add`, so it cannot wrap past the check).
    pub fn at<T>(&self, offset: usize) -> *mut T {
        assert!(
            offset
                .checked_add(std::mem::size_of::<T>())
                .is_some_and(|end| end <= self.len)
                && offset % std::mem::align_of::<T>() == 0,
            "offset {offset} does not hold a {}",
            std::any::type_name::<T>()
        );
        // SAFETY: in bounds, checked above.
        unsafe { self.cpu.add(offset).cast() }
    }
}

impl Drop for HostMapped<'_> {
    fn drop(&mut self) {
        self.gpu.backend.free_host_mapped(self.cpu);
    }
}

/// A loaded code object; unloaded when it and every [`Launch`] of it are
/// gone (never, if a launch leaked a kernel that was still running).
#[derive(Debug)]
pub struct Module<'g> {
    loaded: Arc<Loaded<'g>>,
}

#[derive(Debug)]
struct Loaded<'g> {
    gpu: &'g Gpu,
    handle: usize,
}

impl Drop for Loaded<'_> {
    fn drop(&mut self) {
        self.gpu.backend.unload_module(self.handle);
    }
}

/// How to launch a kernel ([`Gpu::launch`]).
#[derive(Debug, Clone, Copy)]
pub struct LaunchConfig<'a> {
    /// Workgroups (blocks).
    pub grid: u32,
    /// Lanes (threads) per workgroup.
    pub block: u32,
    /// Pointer-sized arguments.
    pub args: &'a [u64],
    /// The `u32` the kernel polls and ends on when non-zero, in host memory
    /// the `keep` of the launch owns; raised by [`Launch::stop`] and by
    /// dropping an unfinished launch.
    pub stop_flag: Option<*mut u32>,
}

/// A running kernel, owning what it uses (`K`, handed back by
/// [`finish`](Self::finish)). It cannot go away while the kernel may run:
/// dropping it unfinished raises the stop flag and waits up to
/// [`DROP_DEADLINE`]; a kernel still running then keeps its stream, its
/// module and everything in `K` forever (leaked, never freed). Leaking the
/// `Launch` itself (`mem::forget`) leaks all of that too, and the [`Gpu`]
/// then never unloads its runtime: the kernel counts as running until a
/// `finish` or a drop has seen it done.
///
/// A launch names raw device addresses, so it is `unsafe`:
///
/// ```compile_fail,E0133
/// # use gpunvme_gpu::{Gpu, LaunchConfig, Module};
/// fn go(gpu: &Gpu, m: &Module<'_>, addr: u64) {
///     let cfg = LaunchConfig { grid: 1, block: 1, args: &[addr], stop_flag: None };
///     // error[E0133]: call to unsafe function requires an unsafe block
///     let _ = gpu.launch(m, "k", cfg, ());
/// }
/// ```
///
/// And what the kernel uses is moved into the launch: it cannot be freed
/// (or read) while the kernel runs, only after [`finish`](Self::finish).
///
/// ```compile_fail,E0382
/// # use gpunvme_gpu::{Gpu, LaunchConfig, Module};
/// fn go(gpu: &Gpu, m: &Module<'_>) -> gpunvme_gpu::Result<()> {
///     let buf = gpu.alloc(4096)?;
///     let cfg = LaunchConfig { grid: 1, block: 1, args: &[buf.ptr()], stop_flag: None };
///     // SAFETY: (the kernel writes `buf`, which the launch owns)
///     let launch = unsafe { gpu.launch(m, "k", cfg, buf)? };
///     drop(buf); // error[E0382]: use of moved value
///     Ok(())
/// }
/// ```
///
/// Writing a bare device address, or importing a raw pointer, is `unsafe`
/// too:
///
/// ```compile_fail,E0133
/// # use gpunvme_gpu::Gpu;
/// fn poke(gpu: &Gpu, addr: u64) {
///     let _ = gpu.copy_to_device(addr, &[0u8; 64]); // error[E0133]
/// }
/// ```
///
/// ```compile_fail,E0133
/// # use gpunvme_gpu::{import::Region, Gpu};
/// fn expose(gpu: &Gpu, cpu: *mut u8) {
///     let r = Region { what: "x", dmabuf: None, cpu: Some(cpu), len: 4096, mmio: false };
///     let _ = gpu.import(&r); // error[E0133]
/// }
/// ```
///
/// ```compile_fail,E0133
/// // error[E0133]: setting the environment races other threads.
/// let _ = gpunvme_gpu::fine_grain::prepare();
/// ```
///
/// The safe way to fill device memory:
///
/// ```no_run
/// # fn main() -> gpunvme_gpu::Result<()> {
/// let gpu = gpunvme_gpu::Gpu::open(0)?;
/// let mut mem = gpu.alloc(4096)?;
/// mem.write_at(0, &[0xa5; 64])?;
/// let mut back = [0u8; 64];
/// mem.read_at(0, &mut back)?;
/// assert_eq!(back, [0xa5; 64]);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Launch<'g, K = ()> {
    gpu: &'g Gpu,
    stream: usize,
    name: String,
    module: Option<Arc<Loaded<'g>>>,
    stop: Option<NonNull<u32>>,
    keep: Option<K>,
    finished: bool,
}

impl<K> Launch<'_, K> {
    /// Whether the kernel finished (an error if it faulted).
    pub fn is_done(&mut self) -> Result<bool> {
        if !self.finished && self.gpu.backend.stream_done(self.stream)? {
            self.finished = true;
        }
        Ok(self.finished)
    }

    /// Polls until the kernel finishes or `deadline` passes. The device
    /// library bounds each of its waits, so a kernel still running past a
    /// generous deadline is stuck: [`stop`](Self::stop) it and wait again.
    pub fn wait(&mut self, deadline: Duration) -> Result<()> {
        let what = format!("kernel {}", self.name);
        poll_until(&what, deadline, Some(Duration::from_micros(200)), || {
            self.is_done()
        })
    }

    /// Raises the stop flag (if the launch has one): the kernel ends its
    /// loops and returns.
    pub fn stop(&self) {
        if let Some(p) = self.stop {
            // SAFETY: Gpu::launch's caller promised a u32 the kernel polls,
            // in memory `keep` owns (alive while self is).
            unsafe { std::ptr::write_volatile(p.as_ptr(), 1) };
        }
    }

    /// The kernel was seen finished: its stream goes, and it no longer
    /// keeps the runtime loaded. Called once (by `finish`, or by the drop).
    fn retire(&mut self) {
        debug_assert!(self.finished);
        self.gpu.backend.destroy_stream(self.stream);
        self.gpu.live.fetch_sub(1, Ordering::AcqRel);
    }

    /// What the kernel used, once it has finished (its stream is destroyed
    /// then); the launch itself while it still runs.
    pub fn finish(mut self) -> std::result::Result<K, Self> {
        match self.is_done() {
            Ok(true) => {
                self.retire();
                // `keep` taken: Drop has nothing left to do.
                self.module = None;
                Ok(self.keep.take().expect("kept until finished"))
            }
            _ => Err(self),
        }
    }
}

impl<K> Drop for Launch<'_, K> {
    fn drop(&mut self) {
        let Some(keep) = self.keep.take() else {
            return; // finished
        };
        if !self.finished {
            self.stop();
            let t0 = Instant::now();
            while !matches!(self.is_done(), Ok(true)) && t0.elapsed() < self.gpu.drop_deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if self.finished {
            self.retire();
            drop(keep);
            return;
        }
        // Still running (or faulted, so unknown): nothing it can reach is
        // freed, and it stays counted in `live`, so the runtime stays loaded.
        std::mem::forget(keep);
        std::mem::forget(self.module.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::{DoorbellMode, RuntimeKind};
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;

    #[test]
    fn payload_memory_is_uncached_on_every_amd_gpu() {
        // CDNA too: a PCIe peer's write need not drop a coarse-grained
        // local L2 line there (review s3, 2.3), and no hardware run has
        // shown that it does.
        for arch in [
            "gfx1030", "gfx1100", "gfx1101", "gfx1201", "gfx90a", "gfx942", "unknown",
        ] {
            assert_eq!(
                payload_memory(RuntimeKind::Hip, arch),
                PayloadMemory::Uncached,
                "{arch}"
            );
        }
        assert_eq!(
            payload_memory(RuntimeKind::Cuda, "sm_90"),
            PayloadMemory::Device
        );
    }

    #[test]
    fn import_on_rdna_maps_uncached_through_libdrm_and_refuses_the_rest() {
        use crate::mem_type::{MemType, LIBDRM_ROUTE};
        let (mut gpu, log) = gpu(false);
        let region = |what| Region {
            what,
            dmabuf: None,
            cpu: None,
            len: 4096,
            mmio: false,
        };
        // SAFETY: the fake maps nothing.
        let (imp, rep) = unsafe { gpu.import(&region("q1 shadow SQ (shared)")) };
        let imp = imp.expect("libdrm maps it");
        assert_eq!((imp.device_ptr, imp.route), (0x6000, LIBDRM_ROUTE));
        drop(imp);
        assert_eq!(rep.mem_type(), Some(MemType::Uncached));
        assert!(!rep.attempts[0].ok && rep.attempts[0].detail.contains("q1 shadow SQ (shared)"));
        assert!(
            rep.describe()
                .contains("memory type uncached (AMDGPU_VM_MTYPE_UC)"),
            "{}",
            rep.describe()
        );
        // No libdrm route: nothing maps it, and the report says why.
        // SAFETY: as above.
        let (imp, rep) = unsafe { gpu.import(&region("q2 CQ mirror, no libdrm")) };
        assert!(imp.is_none());
        drop(imp);
        assert!(rep.describe().contains(LIBDRM_ROUTE), "{}", rep.describe());
        assert!(!log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l == "route hipHostRegister"));
        // On CDNA the first route that works is taken, its type the runtime's.
        gpu.device.arch = "gfx942".into();
        // SAFETY: as above.
        let (imp, rep) = unsafe { gpu.import(&region("q1 SQ")) };
        assert_eq!(imp.expect("mapped").route, "hipHostRegister");
        assert_eq!(rep.mem_type(), Some(MemType::RuntimeChosen));
    }

    #[test]
    fn alloc_payload_takes_uncached_memory_on_rdna() {
        let (gpu, log) = gpu(false);
        assert_eq!(
            gpu.payload_memory(),
            PayloadMemory::Uncached,
            "fake is gfx1101"
        );
        let m = gpu.alloc_payload(1).unwrap();
        assert_eq!((m.ptr(), m.len()), (0x2000, 64 << 10));
        drop(m);
        let m = gpu.alloc(1).unwrap();
        assert_eq!(m.ptr(), 0x1000);
        drop(m);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "alloc_device_uncached 65536",
                "free_device 0x2000",
                "free_device 0x1000"
            ]
        );
    }

    #[test]
    fn without_a_runtime_open_says_what_was_tried() {
        let e = Gpu::open_with(&["libgpunvme-test-none.so", "libc.so.6"], 0).unwrap_err();
        assert!(e.0.starts_with("no GPU:"), "{e}");
        assert!(
            e.0.contains("libgpunvme-test-none.so: dlopen failed"),
            "{e}"
        );
        assert!(
            e.0.contains("libc.so.6: loaded, but it has no `hipGetDeviceCount`"),
            "{e}"
        );
    }

    #[test]
    fn host_mapped_at_hands_out_every_slot_that_fits() {
        let (gpu, _) = gpu(false);
        let hm = gpu.alloc_host_mapped(4096).unwrap();
        assert_eq!(hm.at::<u64>(0), hm.cpu().cast());
        assert_eq!(hm.at::<u64>(4088) as usize, hm.cpu() as usize + 4088);
    }

    /// S3: `offset + size_of::<T>()` near `usize::MAX` wrapped to a small
    /// end that passed the check (release builds), and `cpu.add(offset)`
    /// then went out of bounds: the check must refuse it, with its own
    /// message (not an arithmetic-overflow panic).
    #[test]
    #[should_panic(expected = "does not hold a u64")]
    fn host_mapped_at_refuses_an_offset_whose_end_wraps() {
        let (gpu, _) = gpu(false);
        let hm = gpu.alloc_host_mapped(4096).unwrap();
        let _ = hm.at::<u64>(usize::MAX - 7);
    }

    #[test]
    #[should_panic(expected = "does not hold a u64")]
    fn host_mapped_at_refuses_a_slot_past_the_end() {
        let (gpu, _) = gpu(false);
        let hm = gpu.alloc_host_mapped(4096).unwrap();
        let _ = hm.at::<u64>(4096);
    }

    /// A runtime whose one "kernel" runs until its stop flag is raised
    /// (or forever, if it ignores the flag); every call is logged.
    #[derive(Default)]
    struct Fake {
        log: Arc<Mutex<Vec<String>>>,
        stop_flag: Mutex<Option<usize>>,
        ignores_stop: bool,
        finished: AtomicBool,
        /// Device-to-host copies time out (queued, never seen done).
        stuck_copies: bool,
        /// Where the last device-to-host copy was told to write.
        copy_dst: Arc<Mutex<Option<(usize, usize)>>>,
    }

    impl Fake {
        fn note(&self, s: impl Into<String>) {
            self.log.lock().unwrap().push(s.into());
        }
    }

    impl Backend for Fake {
        fn tick_hz(&self) -> Result<u64> {
            Ok(100_000_000)
        }
        fn alloc_device(&self, _: usize) -> Result<u64> {
            Ok(0x1000)
        }
        fn alloc_device_uncached(&self, bytes: usize) -> Result<u64> {
            self.note(format!("alloc_device_uncached {bytes}"));
            Ok(0x2000)
        }
        fn free_device(&self, p: u64) {
            self.note(format!("free_device {p:#x}"));
        }
        fn export_dmabuf(&self, _: u64, _: usize) -> Result<OwnedFd> {
            Err(GpuError("no".into()))
        }
        fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)> {
            // Host memory the fake "GPU" sees at 0x9000_0000; leaked (a test).
            let mem: &'static mut [u64] = Vec::leak(vec![0u64; bytes.div_ceil(8)]);
            Ok((mem.as_mut_ptr().cast(), 0x9000_0000))
        }
        fn free_host_mapped(&self, _: *mut u8) {}
        fn copy_to_device(&self, _: u64, _: &[u8]) -> std::result::Result<(), CopyError> {
            Ok(())
        }
        unsafe fn copy_from_device(
            &self,
            dst: *mut u8,
            len: usize,
            _: u64,
        ) -> std::result::Result<(), CopyError> {
            *self.copy_dst.lock().unwrap() = Some((dst as usize, len));
            if self.stuck_copies {
                // Queued, not done: the "copy engine" writes later (the test).
                return Err(CopyError {
                    error: GpuError("device-to-host copy still running after 10s".into()),
                    may_still_run: true,
                });
            }
            // SAFETY: the caller hands over dst..dst+len for the copy.
            unsafe { std::ptr::write_bytes(dst, 0x5a, len) };
            Ok(())
        }
        fn load_module(&self, _: &[u8]) -> Result<usize> {
            Ok(7)
        }
        fn unload_module(&self, m: usize) {
            self.note(format!("unload_module {m}"));
        }
        fn function(&self, _: usize, _: &str) -> Result<usize> {
            Ok(1)
        }
        fn launch(&self, _: usize, _: u32, _: u32, p: &mut [*mut c_void]) -> Result<usize> {
            // The "kernel" polls the flag its first argument points to.
            // SAFETY: the test passes the flag's address as argument 0.
            let flag = unsafe { *(p[0] as *const u64) } as usize;
            *self.stop_flag.lock().unwrap() = Some(flag);
            self.note("launch");
            Ok(42)
        }
        fn stream_done(&self, _: usize) -> Result<bool> {
            let flag = self.stop_flag.lock().unwrap().expect("launched");
            // SAFETY: the flag lives in the launch's keep while it can run.
            let raised = unsafe { std::ptr::read_volatile(flag as *const u32) } != 0;
            Ok(self.finished.load(Ordering::Acquire) || (raised && !self.ignores_stop))
        }
        fn destroy_stream(&self, s: usize) {
            self.note(format!("destroy_stream {s}"));
        }
        fn import_routes<'a>(&'a self, r: &Region<'a>) -> Vec<Route<'a>> {
            // A route that cannot set the memory type, then (unless the
            // region's name says there is none) the libdrm route; each
            // notes in the log that it ran.
            let mut v: Vec<Route<'a>> = vec![(
                "hipHostRegister",
                Box::new(move || {
                    self.note("route hipHostRegister");
                    Ok((0x5000, Undo::HostRegister { cpu: 5 }))
                }),
            )];
            if !r.what.contains("no libdrm") {
                v.push((
                    crate::mem_type::LIBDRM_ROUTE,
                    Box::new(move || {
                        self.note("route libdrm");
                        Ok((0x6000, Undo::HostRegister { cpu: 6 }))
                    }),
                ));
            }
            v
        }
        fn release_import(&self, _: Undo) {}
    }

    impl Drop for Fake {
        fn drop(&mut self) {
            self.note("runtime unloaded");
        }
    }

    fn gpu(ignores_stop: bool) -> (Gpu, Arc<Mutex<Vec<String>>>) {
        let mut fake = Fake::default();
        fake.ignores_stop = ignores_stop;
        gpu_over(fake)
    }

    fn gpu_over(fake: Fake) -> (Gpu, Arc<Mutex<Vec<String>>>) {
        let log = fake.log.clone();
        let gpu = Gpu {
            backend: ManuallyDrop::new(Box::new(fake)),
            device: GpuDevice {
                index: 0,
                name: "fake".into(),
                arch: "gfx1101".into(),
                pci_bus_id: None,
                doorbell: DoorbellMode::None,
                reason: String::new(),
                cq: crate::probe::CqPlacement::None,
                cq_reason: String::new(),
                queue_memory: String::new(),
            },
            runtime: RuntimeInfo {
                kind: RuntimeKind::Hip,
                library: "fake".into(),
                version: None,
            },
            live: AtomicUsize::new(0),
            drop_deadline: Duration::from_millis(50),
            quarantine: Mutex::new(Vec::new()),
        };
        (gpu, log)
    }

    /// What a kernel uses: counts its drops; holds the stop flag.
    #[derive(Debug)]
    struct Buffers {
        flag: Box<u32>,
        dropped: Arc<AtomicUsize>,
    }

    impl Drop for Buffers {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn launch<'g>(gpu: &'g Gpu, m: &Module<'g>, dropped: &Arc<AtomicUsize>) -> Launch<'g, Buffers> {
        let mut keep = Buffers {
            flag: Box::new(0),
            dropped: dropped.clone(),
        };
        let flag: *mut u32 = &mut *keep.flag;
        let cfg = LaunchConfig {
            grid: 1,
            block: 1,
            args: &[flag as u64],
            stop_flag: Some(flag),
        };
        // SAFETY: the fake kernel reads only the flag, which `keep` owns.
        unsafe { gpu.launch(m, "k", cfg, keep) }.unwrap()
    }

    #[test]
    fn finish_hands_back_what_the_kernel_used_only_once_it_finished() {
        let (gpu, log) = gpu(false);
        let m = gpu.load_module(b"").unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let mut l = launch(&gpu, &m, &dropped);
        assert!(!l.is_done().unwrap());
        let Err(l) = l.finish() else {
            panic!("still running: no buffers back")
        };
        l.stop();
        let keep = l.finish().map_err(|_| ()).expect("stopped: finished");
        assert_eq!(dropped.load(Ordering::SeqCst), 0);
        assert_eq!(*keep.flag, 1, "the stop flag was raised");
        drop(keep);
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        drop(m);
        drop(gpu);
        let log = log.lock().unwrap().clone();
        assert_eq!(
            log,
            [
                "launch",
                "destroy_stream 42",
                "unload_module 7",
                "runtime unloaded"
            ]
        );
    }

    #[test]
    fn dropping_a_running_launch_stops_the_kernel_then_frees() {
        let (gpu, log) = gpu(false);
        let m = gpu.load_module(b"").unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        drop(launch(&gpu, &m, &dropped));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert_eq!(gpu.live.load(Ordering::SeqCst), 0);
        drop(m);
        drop(gpu);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "launch",
                "destroy_stream 42",
                "unload_module 7",
                "runtime unloaded"
            ]
        );
    }

    /// A kernel that ignores its stop flag keeps everything it can reach:
    /// buffers, stream, module, runtime.
    #[test]
    fn a_kernel_that_ignores_the_stop_flag_leaks_instead_of_freeing() {
        let (gpu, log) = gpu(true);
        let m = gpu.load_module(b"").unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let t = Instant::now();
        drop(launch(&gpu, &m, &dropped));
        assert!(
            t.elapsed() >= Duration::from_millis(50),
            "waited its deadline"
        );
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            0,
            "buffers leaked, not freed"
        );
        assert_eq!(gpu.live.load(Ordering::SeqCst), 1);
        drop(m);
        drop(gpu);
        assert_eq!(
            *log.lock().unwrap(),
            ["launch"],
            "no stream, module or runtime freed"
        );
    }

    /// S1: `mem::forget` of a running launch is safe and skips its drop.
    /// The runtime must stay loaded all the same (the old code counted
    /// only launches whose drop gave up, so it unloaded the runtime, its
    /// context and the code under the running kernel).
    #[test]
    fn a_forgotten_launch_keeps_the_runtime_loaded() {
        let (gpu, log) = gpu(true);
        let m = gpu.load_module(b"").unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        std::mem::forget(launch(&gpu, &m, &dropped));
        assert_eq!(gpu.live.load(Ordering::SeqCst), 1);
        drop(m);
        drop(gpu);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "what it used is leaked");
        assert_eq!(
            *log.lock().unwrap(),
            ["launch"],
            "no stream, module or runtime freed under the kernel"
        );
    }

    /// A launch seen finished stops counting, whether by `finish` or by
    /// its drop: the runtime is unloaded once the `Gpu` goes.
    #[test]
    fn finished_launches_stop_counting() {
        let (gpu, _log) = gpu(false);
        let m = gpu.load_module(b"").unwrap();
        let dropped = Arc::new(AtomicUsize::new(0));
        let a = launch(&gpu, &m, &dropped);
        assert_eq!(gpu.live.load(Ordering::SeqCst), 1);
        a.stop();
        let keep = a.finish().map_err(|_| ()).expect("stopped: finished");
        assert_eq!(gpu.live.load(Ordering::SeqCst), 0);
        let b = launch(&gpu, &m, &dropped);
        assert_eq!(gpu.live.load(Ordering::SeqCst), 1);
        drop(b);
        assert_eq!(gpu.live.load(Ordering::SeqCst), 0);
        drop(keep);
    }

    #[test]
    fn a_device_to_host_copy_lands_in_the_callers_slice() {
        let (gpu, _) = gpu(false);
        let mem = gpu.alloc(4096).unwrap();
        let mut dst = vec![0u8; 100];
        mem.read_at(0, &mut dst).unwrap();
        assert!(dst.iter().all(|&b| b == 0x5a));
        assert_eq!(gpu.quarantined_copies(), (0, 0));
        assert_eq!(gpu.live.load(Ordering::SeqCst), 0);
    }

    /// S2: a copy that times out may still be written by the copy engine
    /// after `read_at` returned, while the caller frees or reads its slice.
    /// The device must never have been given the caller's slice (the old
    /// code passed it straight to the runtime), and what it was given must
    /// stay allocated: quarantined, and the runtime kept loaded.
    #[test]
    fn a_timed_out_copy_never_leaves_the_device_writing_the_callers_slice() {
        let mut fake = Fake::default();
        fake.stuck_copies = true;
        let seen = fake.copy_dst.clone();
        let (gpu, log) = gpu_over(fake);
        let mem = gpu.alloc(4096).unwrap();
        let mut dst = vec![0u8; 256];
        let e = mem.read_at(0, &mut dst).unwrap_err();
        assert!(e.0.contains("still running"), "{e}");
        let (at, len) = seen.lock().unwrap().expect("a copy was queued");
        let caller = dst.as_ptr() as usize..dst.as_ptr() as usize + dst.len();
        assert!(
            at + len <= caller.start || at >= caller.end,
            "the device was given the caller's slice {caller:x?}"
        );
        assert_eq!(gpu.quarantined_copies(), (1, 256), "its buffer is kept");
        // The copy engine lands late, into the quarantined buffer only.
        // SAFETY: quarantined: allocated, and nothing reads it.
        unsafe { std::ptr::write_bytes(at as *mut u8, 0xee, len) };
        drop(dst); // the caller frees its slice at once: nothing reaches it
        drop(mem);
        drop(gpu);
        assert!(
            !log.lock().unwrap().iter().any(|l| l == "runtime unloaded"),
            "a copy that may still run keeps the runtime loaded"
        );
    }
}
