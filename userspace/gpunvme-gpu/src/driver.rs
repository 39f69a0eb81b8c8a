// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The part of the GPU runtimes that HIP's runtime API and CUDA's driver
//! API share: the same calls with the same shapes (HIP mirrors CUDA), under
//! different names and flag values. One backend ([`Driver`]) implements
//! [`Backend`] over a table of those calls, resolved once when the GPU is
//! opened; a [`Vendor`] (`cuda.rs`, `hip.rs`) adds what really differs:
//! how a device is made current, the wall-clock rate, the dma-buf export,
//! and HIP's extra import routes (HSA, libdrm).

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{GpuError, Result};
use crate::gpu::{poll_until, Backend, CopyError};
use crate::import::{Region, Route, Undo};
use crate::runtime::Runtime;

type Status = c_int;
// Device pointers are u64 here: CUdeviceptr is, and HIP's void* has the
// same size and calling convention.
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> Status;
type Free = unsafe extern "C" fn(u64) -> Status;
type HostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> Status;
type HostGetDevicePointer = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> Status;
type HostFree = unsafe extern "C" fn(*mut c_void) -> Status;
type HtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> Status;
type DtoHAsync = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> Status;
type ModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> Status;
type ModuleUnload = unsafe extern "C" fn(*mut c_void) -> Status;
type ModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> Status;
#[allow(clippy::type_complexity)]
type LaunchKernel = unsafe extern "C" fn(
    *mut c_void,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    c_uint,
    *mut c_void,
    *mut *mut c_void,
    *mut *mut c_void,
) -> Status;
type StreamCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> Status;
type StreamOp = unsafe extern "C" fn(*mut c_void) -> Status;
type ImportExternal = unsafe extern "C" fn(*mut *mut c_void, *const ExtMemHandleDesc) -> Status;
type MappedBuffer = unsafe extern "C" fn(*mut u64, *mut c_void, *const ExtMemBufferDesc) -> Status;
type HostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> Status;
type HostUnregister = unsafe extern "C" fn(*mut c_void) -> Status;
type HandleForRange = unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> Status;

/// Longest a copy may take before it counts as failed.
const COPY_DEADLINE: Duration = Duration::from_secs(10);
/// `CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD` / `hipExternalMemoryHandleTypeOpaqueFd`.
const EXTERNAL_MEMORY_OPAQUE_FD: c_int = 1;
/// `CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD` / `hipMemRangeHandleTypeDmaBufFd`.
const RANGE_HANDLE_DMA_BUF_FD: c_int = 1;

/// One runtime's names and flag values for the shared calls.
pub(crate) struct Dialect {
    pub alloc: &'static str,
    pub free: &'static str,
    pub host_alloc: &'static str,
    pub host_get_device_pointer: &'static str,
    pub host_free: &'static str,
    pub htod_async: &'static str,
    pub dtoh_async: &'static str,
    pub module_load_data: &'static str,
    pub module_unload: &'static str,
    pub module_get_function: &'static str,
    pub launch_kernel: &'static str,
    pub stream_create: &'static str,
    pub stream_query: &'static str,
    pub stream_destroy: &'static str,
    pub import_external: &'static str,
    pub mapped_buffer: &'static str,
    pub destroy_external: &'static str,
    pub host_register: &'static str,
    pub host_unregister: &'static str,
    pub handle_for_range: &'static str,
    /// Route names of host registration, for memory and for MMIO.
    pub host_register_route: &'static str,
    pub host_register_io_route: &'static str,
    /// Added to an external-memory import failure: why it may fail here.
    pub import_hint: &'static str,
    /// Host memory mapped for the GPU (and, for HIP, fine-grained).
    pub host_alloc_flags: c_uint,
    pub host_register_mapped: c_uint,
    pub host_register_io: c_uint,
    pub stream_non_blocking: c_uint,
    /// "Not ready" from a stream query.
    pub not_ready: Status,
    /// "this CUDA driver" / "this HIP runtime", for missing symbols.
    pub who: &'static str,
}

/// The shared calls, resolved. The pointers stay valid while the
/// [`Runtime`] they came from is loaded: its [`Vendor`] owns it, and the
/// vendor lives in the same [`Driver`] as this table.
pub(crate) struct Api {
    d: &'static Dialect,
    alloc: Alloc,
    free: Free,
    host_alloc: HostAlloc,
    host_get_device_pointer: HostGetDevicePointer,
    host_free: HostFree,
    htod_async: HtoDAsync,
    dtoh_async: DtoHAsync,
    module_load_data: ModuleLoadData,
    module_unload: ModuleUnload,
    module_get_function: ModuleGetFunction,
    launch_kernel: LaunchKernel,
    stream_create: StreamCreate,
    stream_query: StreamOp,
    stream_destroy: StreamOp,
    import_external: Option<(ImportExternal, MappedBuffer, StreamOp)>,
    host_register: Option<(HostRegister, HostUnregister)>,
    handle_for_range: Option<HandleForRange>,
}

impl Api {
    pub(crate) fn resolve(rt: &Runtime, d: &'static Dialect) -> Result<Api> {
        fn req<T: Copy>(rt: &Runtime, d: &Dialect, name: &str) -> Result<T> {
            // SAFETY: each T below is the symbol's C signature (cuda.h,
            // hip_runtime_api.h); the pointer is used only while rt lives.
            unsafe { rt.sym::<T>(name) }
                .map(|s| *s)
                .ok_or_else(|| GpuError(format!("{} has no {name}", d.who)))
        }
        fn opt<T: Copy>(rt: &Runtime, name: &str) -> Option<T> {
            // SAFETY: as in req.
            unsafe { rt.sym::<T>(name) }.map(|s| *s)
        }
        Ok(Api {
            d,
            alloc: req(rt, d, d.alloc)?,
            free: req(rt, d, d.free)?,
            host_alloc: req(rt, d, d.host_alloc)?,
            host_get_device_pointer: req(rt, d, d.host_get_device_pointer)?,
            host_free: req(rt, d, d.host_free)?,
            htod_async: req(rt, d, d.htod_async)?,
            dtoh_async: req(rt, d, d.dtoh_async)?,
            module_load_data: req(rt, d, d.module_load_data)?,
            module_unload: req(rt, d, d.module_unload)?,
            module_get_function: req(rt, d, d.module_get_function)?,
            launch_kernel: req(rt, d, d.launch_kernel)?,
            stream_create: req(rt, d, d.stream_create)?,
            stream_query: req(rt, d, d.stream_query)?,
            stream_destroy: req(rt, d, d.stream_destroy)?,
            import_external: opt(rt, d.import_external)
                .zip(opt(rt, d.mapped_buffer))
                .zip(opt(rt, d.destroy_external))
                .map(|((a, b), c)| (a, b, c)),
            host_register: opt(rt, d.host_register).zip(opt(rt, d.host_unregister)),
            handle_for_range: opt(rt, d.handle_for_range),
        })
    }

    /// VRAM as a dma-buf through the runtime's own call; None if it has none.
    pub(crate) fn export_range(
        &self,
        rt: &Runtime,
        ptr: u64,
        bytes: usize,
    ) -> Option<Result<OwnedFd>> {
        let f = self.handle_for_range?;
        let mut fd: c_int = -1;
        // SAFETY: the handle out-parameter is an int for DMA_BUF_FD.
        let r = unsafe {
            f(
                (&mut fd as *mut c_int).cast(),
                ptr,
                bytes,
                RANGE_HANDLE_DMA_BUF_FD,
                0,
            )
        };
        Some(
            rt.check(&format!("{}(DMA_BUF_FD)", self.d.handle_for_range), r)
                // SAFETY: a new descriptor owned by nobody else.
                .map(|()| unsafe { OwnedFd::from_raw_fd(fd) }),
        )
    }
}

/// `CUDA_EXTERNAL_MEMORY_HANDLE_DESC` (and HIP's identical
/// `hipExternalMemoryHandleDesc`): type, a 16-byte handle union whose
/// first 4 bytes are the fd, size, flags, 16 reserved words.
#[repr(C)]
pub(crate) struct ExtMemHandleDesc {
    pub ty: c_int,
    pub pad: c_int,
    /// The union; an fd is its first 4 bytes (little-endian low half).
    pub handle: [u64; 2],
    pub size: u64,
    pub flags: c_uint,
    pub reserved: [c_uint; 16],
}

/// `CUDA_EXTERNAL_MEMORY_BUFFER_DESC` / `hipExternalMemoryBufferDesc`.
#[repr(C)]
pub(crate) struct ExtMemBufferDesc {
    pub offset: u64,
    pub size: u64,
    pub flags: c_uint,
    pub reserved: [c_uint; 16],
}

// The C layouts: fd inside the union at 8, size at 24, 104 bytes in all.
const _: () = {
    assert!(std::mem::offset_of!(ExtMemHandleDesc, size) == 24);
    assert!(std::mem::size_of::<ExtMemHandleDesc>() == 104);
    assert!(std::mem::size_of::<ExtMemBufferDesc>() == 88);
};

/// Duplicates `fd` (a runtime that imports an fd takes ownership of it).
fn dup_fd(fd: c_int) -> std::result::Result<c_int, String> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller keeps open.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        Err(format!("dup: {}", std::io::Error::last_os_error()))
    } else {
        Ok(d)
    }
}

/// What differs between the runtimes.
pub(crate) trait Vendor: Send + Sync {
    const DIALECT: &'static Dialect;
    fn rt(&self) -> &Runtime;
    /// Makes this GPU current on the calling thread.
    fn bind(&self) -> Result<()>;
    fn tick_hz(&self) -> Result<u64>;
    fn export_dmabuf(&self, api: &Api, ptr: u64, bytes: usize) -> Result<OwnedFd>;
    /// Uncached device memory (freed like `alloc`'s), where the runtime
    /// has such an allocation.
    fn alloc_uncached(&self, bytes: usize) -> Result<u64>;
    /// Routes tried between the external-memory import and host registration.
    fn extra_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>>;
    /// Undoes what an extra route did.
    fn release_extra(&self, undo: Undo);
}

/// A GPU behind HIP or CUDA.
pub(crate) struct Driver<V: Vendor> {
    api: Api,
    /// The stream copies run on: non-blocking, so a copy never waits for a
    /// running kernel (the legacy default stream would). Created on first use.
    copy_stream: Mutex<usize>,
    v: V,
}

// SAFETY: both runtimes are thread-safe; every call makes the device
// current on the calling thread first (Vendor::bind). The table holds
// plain function pointers.
unsafe impl<V: Vendor> Send for Driver<V> {}
// SAFETY: as above.
unsafe impl<V: Vendor> Sync for Driver<V> {}

impl<V: Vendor> Driver<V> {
    pub(crate) fn new(v: V) -> Result<Self> {
        let api = Api::resolve(v.rt(), V::DIALECT)?;
        Ok(Driver {
            api,
            copy_stream: Mutex::new(0),
            v,
        })
    }

    fn check(&self, what: &str, r: Status) -> Result<()> {
        self.v.rt().check(what, r)
    }

    fn new_stream(&self) -> Result<usize> {
        let mut s = std::ptr::null_mut();
        // SAFETY: out-parameter owned here.
        let r = unsafe { (self.api.stream_create)(&mut s, V::DIALECT.stream_non_blocking) };
        self.check(V::DIALECT.stream_create, r)?;
        Ok(s as usize)
    }

    /// Runs `op` on the copy stream and waits (bounded) until the copy is
    /// done: a copy from pageable memory may return before its DMA landed.
    /// A copy that was queued but not seen done (the deadline passed, or
    /// the stream failed) may still run: the error says so, and the copy
    /// stream is abandoned (never destroyed or reused: later copies get a
    /// new one instead of queueing behind it).
    fn copy(
        &self,
        what: &str,
        name: &str,
        op: impl FnOnce(*mut c_void) -> Status,
    ) -> std::result::Result<(), CopyError> {
        let not_queued = |error| CopyError {
            error,
            may_still_run: false,
        };
        self.v.bind().map_err(not_queued)?;
        let mut slot = self.copy_stream.lock().unwrap_or_else(|p| p.into_inner());
        if *slot == 0 {
            *slot = self.new_stream().map_err(not_queued)?;
        }
        let s = *slot;
        self.check(name, op(s as *mut c_void)).map_err(not_queued)?;
        poll_until(what, COPY_DEADLINE, None, || self.stream_done(s)).map_err(|error| {
            *slot = 0;
            CopyError {
                error,
                may_still_run: true,
            }
        })
    }

    fn route_external<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let fd = region.dmabuf?;
        let len = region.len;
        let d = V::DIALECT;
        Some((
            d.import_external,
            Box::new(move || {
                self.v.bind()?;
                let (import, map, destroy) = self
                    .api
                    .import_external
                    .ok_or_else(|| format!("{} has no {}", d.who, d.import_external))?;
                let rt = self.v.rt();
                let dfd = dup_fd(fd.as_raw_fd())?;
                let desc = ExtMemHandleDesc {
                    ty: EXTERNAL_MEMORY_OPAQUE_FD,
                    pad: 0,
                    handle: [dfd as u32 as u64, 0],
                    size: len as u64,
                    flags: 0,
                    reserved: [0; 16],
                };
                let mut ext = std::ptr::null_mut();
                // SAFETY: desc laid out as the C struct (asserted); on
                // success the runtime owns the dup'd fd.
                let r = unsafe { import(&mut ext, &desc) };
                if r != 0 {
                    // SAFETY: the import failed, so the dup is still ours.
                    unsafe { libc::close(dfd) };
                    return Err(format!(
                        "{}(OPAQUE_FD) failed: {}{}",
                        d.import_external,
                        rt.err_name(r),
                        d.import_hint
                    ));
                }
                let b = ExtMemBufferDesc {
                    offset: 0,
                    size: len as u64,
                    flags: 0,
                    reserved: [0; 16],
                };
                let mut ptr = 0u64;
                // SAFETY: live external memory, out-parameter owned here.
                let r = unsafe { map(&mut ptr, ext, &b) };
                if r != 0 {
                    // SAFETY: created above, destroyed once.
                    unsafe { destroy(ext) };
                    return Err(format!("{} failed: {}", d.mapped_buffer, rt.err_name(r)));
                }
                Ok((
                    ptr,
                    Undo::External {
                        ext: ext as usize,
                        ptr,
                    },
                ))
            }),
        ))
    }

    fn route_host_register<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let cpu = region.cpu?;
        let (len, mmio) = (region.len, region.mmio);
        let d = V::DIALECT;
        Some((
            if mmio {
                d.host_register_io_route
            } else {
                d.host_register_route
            },
            Box::new(move || {
                self.v.bind()?;
                let (reg, unreg) = self
                    .api
                    .host_register
                    .ok_or_else(|| format!("{} has no {}", d.who, d.host_register))?;
                let rt = self.v.rt();
                let flags = d.host_register_mapped | if mmio { d.host_register_io } else { 0 };
                // SAFETY: `cpu` is this process's live mapping of `len`
                // bytes (the module's mmap), kept until the import is undone.
                unsafe {
                    let r = reg(cpu.cast(), len, flags);
                    if r != 0 {
                        return Err(format!("{} failed: {}", d.host_register, rt.err_name(r)));
                    }
                    let mut dev = 0u64;
                    let r = (self.api.host_get_device_pointer)(&mut dev, cpu.cast(), 0);
                    if r != 0 {
                        unreg(cpu.cast());
                        return Err(format!(
                            "{} failed: {}",
                            d.host_get_device_pointer,
                            rt.err_name(r)
                        ));
                    }
                    Ok((dev, Undo::HostRegister { cpu: cpu as usize }))
                }
            }),
        ))
    }
}

impl<V: Vendor> Backend for Driver<V> {
    fn tick_hz(&self) -> Result<u64> {
        self.v.tick_hz()
    }

    fn alloc_device(&self, bytes: usize) -> Result<u64> {
        self.v.bind()?;
        let mut p = 0u64;
        // SAFETY: out-parameter owned here.
        let r = unsafe { (self.api.alloc)(&mut p, bytes) };
        self.check(&format!("{}({bytes})", V::DIALECT.alloc), r)?;
        Ok(p)
    }

    fn alloc_device_uncached(&self, bytes: usize) -> Result<u64> {
        self.v.bind()?;
        self.v.alloc_uncached(bytes)
    }

    fn free_device(&self, ptr: u64) {
        let _ = self.v.bind();
        // SAFETY: from alloc_device, freed once.
        unsafe { (self.api.free)(ptr) };
    }

    fn export_dmabuf(&self, ptr: u64, bytes: usize) -> Result<OwnedFd> {
        self.v.bind()?;
        self.v.export_dmabuf(&self.api, ptr, bytes)
    }

    fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)> {
        self.v.bind()?;
        let d = V::DIALECT;
        let mut p = std::ptr::null_mut();
        let mut dev = 0u64;
        // SAFETY: out-parameters owned here.
        unsafe {
            self.check(
                d.host_alloc,
                (self.api.host_alloc)(&mut p, bytes, d.host_alloc_flags),
            )?;
            self.check(
                d.host_get_device_pointer,
                (self.api.host_get_device_pointer)(&mut dev, p, 0),
            )?;
        }
        Ok((p.cast(), dev))
    }

    fn free_host_mapped(&self, cpu: *mut u8) {
        let _ = self.v.bind();
        // SAFETY: from alloc_host_mapped, freed once.
        unsafe { (self.api.host_free)(cpu.cast()) };
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> std::result::Result<(), CopyError> {
        let d = V::DIALECT;
        // SAFETY: src stays borrowed until the copy finished (copy waits);
        // a copy that may still run past the error only reads it.
        self.copy("host-to-device copy", d.htod_async, |s| unsafe {
            (self.api.htod_async)(dst, src.as_ptr().cast(), src.len(), s)
        })
    }

    unsafe fn copy_from_device(
        &self,
        dst: *mut u8,
        len: usize,
        src: u64,
    ) -> std::result::Result<(), CopyError> {
        let d = V::DIALECT;
        // SAFETY: the caller keeps dst..dst+len allocated and unreferenced
        // until Ok, or for good after an error that may still run.
        self.copy("device-to-host copy", d.dtoh_async, |s| unsafe {
            (self.api.dtoh_async)(dst.cast(), src, len, s)
        })
    }

    fn load_module(&self, image: &[u8]) -> Result<usize> {
        self.v.bind()?;
        let mut m = std::ptr::null_mut();
        // SAFETY: image is a complete code object (PTX NUL-terminated).
        let r = unsafe { (self.api.module_load_data)(&mut m, image.as_ptr().cast()) };
        self.check(V::DIALECT.module_load_data, r)?;
        Ok(m as usize)
    }

    fn unload_module(&self, module: usize) {
        let _ = self.v.bind();
        // SAFETY: from load_module, unloaded once.
        unsafe { (self.api.module_unload)(module as *mut c_void) };
    }

    fn function(&self, module: usize, name: &str) -> Result<usize> {
        self.v.bind()?;
        let cname = CString::new(name).map_err(|_| GpuError("bad kernel name".into()))?;
        let mut func = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name.
        let r = unsafe {
            (self.api.module_get_function)(&mut func, module as *mut c_void, cname.as_ptr())
        };
        self.check(&format!("{}({name})", V::DIALECT.module_get_function), r)?;
        Ok(func as usize)
    }

    fn launch(
        &self,
        func: usize,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
    ) -> Result<usize> {
        self.v.bind()?;
        let s = self.new_stream()?;
        // SAFETY: params point at argument values that live across the
        // call (the runtime copies them at launch).
        let r = unsafe {
            (self.api.launch_kernel)(
                func as *mut c_void,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                s as *mut c_void,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if let Err(e) = self.check(V::DIALECT.launch_kernel, r) {
            self.destroy_stream(s);
            return Err(e);
        }
        Ok(s)
    }

    fn stream_done(&self, stream: usize) -> Result<bool> {
        self.v.bind()?;
        // SAFETY: live stream.
        match unsafe { (self.api.stream_query)(stream as *mut c_void) } {
            0 => Ok(true),
            r if r == V::DIALECT.not_ready => Ok(false),
            r => Err(GpuError(format!(
                "the kernel failed: {}",
                self.v.rt().err_name(r)
            ))),
        }
    }

    fn destroy_stream(&self, stream: usize) {
        let _ = self.v.bind();
        // SAFETY: idle stream, destroyed once.
        unsafe { (self.api.stream_destroy)(stream as *mut c_void) };
    }

    fn import_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>> {
        let mut routes: Vec<Route<'a>> = self.route_external(region).into_iter().collect();
        routes.extend(self.v.extra_routes(region));
        routes.extend(self.route_host_register(region));
        routes
    }

    fn release_import(&self, undo: Undo) {
        let _ = self.v.bind();
        match undo {
            Undo::External { ext, ptr } => {
                // SAFETY: from route_external's success, released once:
                // the mapped buffer first, then the external memory.
                unsafe {
                    (self.api.free)(ptr);
                    if let Some((_, _, destroy)) = self.api.import_external {
                        destroy(ext as *mut c_void);
                    }
                }
            }
            Undo::HostRegister { cpu } => {
                if let Some((_, unreg)) = self.api.host_register {
                    // SAFETY: registered by route_host_register, once.
                    unsafe { unreg(cpu as *mut c_void) };
                }
            }
            other => self.v.release_extra(other),
        }
    }
}

impl<V: Vendor> Drop for Driver<V> {
    fn drop(&mut self) {
        let s = *self
            .copy_stream
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        if s != 0 {
            self.destroy_stream(s);
        }
    }
}
