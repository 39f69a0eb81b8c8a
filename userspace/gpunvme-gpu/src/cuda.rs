//! The CUDA driver API backend (`libcuda.so.1`): NVIDIA GPUs, the
//! HIP-on-CUDA case.

use std::ffi::{c_int, c_uint, c_void, CString};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use crate::error::{GpuError, Result};
use crate::gpu::Backend;
use crate::import::{Region, Route, Undo};
use crate::runtime::Runtime;

type CUresult = c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> CUresult;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> CUresult;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
type CuPrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult;
type CuPrimaryCtxRelease = unsafe extern "C" fn(c_int) -> CUresult;
type CuCtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CuMemAlloc = unsafe extern "C" fn(*mut u64, usize) -> CUresult;
type CuMemFree = unsafe extern "C" fn(u64) -> CUresult;
type CuMemGetHandleForAddressRange =
    unsafe extern "C" fn(*mut c_void, u64, usize, c_int, u64) -> CUresult;
type CuMemHostAlloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> CUresult;
type CuMemFreeHost = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CuMemHostGetDevicePointer = unsafe extern "C" fn(*mut u64, *mut c_void, c_uint) -> CUresult;
type CuMemcpyHtoDAsync = unsafe extern "C" fn(u64, *const c_void, usize, *mut c_void) -> CUresult;
type CuMemcpyDtoHAsync = unsafe extern "C" fn(*mut c_void, u64, usize, *mut c_void) -> CUresult;
type CuModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> CUresult;
type CuModuleUnload = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CuModuleGetFunction =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const std::ffi::c_char) -> CUresult;
type CuStreamCreate = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> CUresult;
type CuStreamQuery = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CuStreamDestroy = unsafe extern "C" fn(*mut c_void) -> CUresult;
#[allow(clippy::type_complexity)]
type CuLaunchKernel = unsafe extern "C" fn(
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
) -> CUresult;
type CuImportExternalMemory = unsafe extern "C" fn(*mut *mut c_void, *const ExtMemHandleDesc) -> CUresult;
type CuExternalMemoryGetMappedBuffer =
    unsafe extern "C" fn(*mut u64, *mut c_void, *const ExtMemBufferDesc) -> CUresult;
type CuDestroyExternalMemory = unsafe extern "C" fn(*mut c_void) -> CUresult;
type CuMemHostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> CUresult;
type CuMemHostUnregister = unsafe extern "C" fn(*mut c_void) -> CUresult;

const CUDA_ERROR_NOT_READY: CUresult = 600;
/// Longest a copy may take before it counts as failed.
const COPY_DEADLINE: Duration = Duration::from_secs(10);
const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;
const CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;
const CU_MEMHOSTREGISTER_IOMEMORY: c_uint = 4;
const CU_STREAM_NON_BLOCKING: c_uint = 1;
const CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD: c_int = 1;

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

impl ExtMemHandleDesc {
    /// An opaque-fd import of `size` bytes; `fd` is handed to the runtime.
    pub(crate) fn opaque_fd(fd: c_int, size: u64) -> Self {
        ExtMemHandleDesc {
            ty: CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD,
            pad: 0,
            handle: [fd as u32 as u64, 0],
            size,
            flags: 0,
            reserved: [0; 16],
        }
    }
}

/// Duplicates `fd` (a runtime that imports an fd takes ownership of it).
pub(crate) fn dup_fd(fd: c_int) -> std::result::Result<c_int, String> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor the caller keeps open.
    let d = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if d < 0 {
        Err(format!("dup: {}", std::io::Error::last_os_error()))
    } else {
        Ok(d)
    }
}

pub(crate) struct Cuda {
    rt: Runtime,
    dev: c_int,
    ctx: usize,
    /// The stream copies run on: non-blocking, so a copy never waits for
    /// a running kernel (the legacy default stream would).
    copy_stream: Mutex<usize>,
}

// SAFETY: the CUDA driver API is thread-safe; every call makes the
// primary context current on the calling thread first.
unsafe impl Send for Cuda {}
// SAFETY: as above.
unsafe impl Sync for Cuda {}

macro_rules! sym {
    ($self:expr, $ty:ty, $name:literal) => {
        {
            #[allow(unused_unsafe)]
            // SAFETY: $ty is the signature of $name in cuda.h.
            let s = unsafe { $self.rt.sym::<$ty>($name) };
            s
        }
        .ok_or_else(|| GpuError(format!("this CUDA driver has no {}", $name)))?
    };
}

impl Cuda {
    pub(crate) fn open(rt: Runtime, index: u32) -> Result<Self> {
        let mut me = Cuda {
            rt,
            dev: 0,
            ctx: 0,
            copy_stream: Mutex::new(0),
        };
        let init = sym!(me, CuInit, "cuInit");
        // SAFETY: plain calls with out-parameters owned here.
        unsafe {
            me.rt.check("cuInit", init(0))?;
            let get = sym!(me, CuDeviceGet, "cuDeviceGet");
            let mut dev = 0;
            me.rt.check("cuDeviceGet", get(&mut dev, index as c_int))?;
            me.dev = dev;
            let retain = sym!(me, CuPrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
            let mut ctx = std::ptr::null_mut();
            me.rt.check("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
            me.ctx = ctx as usize;
        }
        me.bind()?;
        Ok(me)
    }

    fn bind(&self) -> Result<()> {
        let set = sym!(self, CuCtxSetCurrent, "cuCtxSetCurrent");
        // SAFETY: the context was retained in open and lives until drop.
        self.rt
            .check("cuCtxSetCurrent", unsafe { set(self.ctx as *mut c_void) })
    }

    /// The copy stream, created on first use (`slot` is its locked cell).
    fn copy_stream_locked(&self, slot: &mut usize) -> Result<usize> {
        if *slot == 0 {
            let create = sym!(self, CuStreamCreate, "cuStreamCreate");
            let mut s = std::ptr::null_mut();
            // SAFETY: out-parameter owned here.
            self.rt
                .check("cuStreamCreate", unsafe { create(&mut s, CU_STREAM_NON_BLOCKING) })?;
            *slot = s as usize;
        }
        Ok(*slot)
    }

    /// Waits (bounded) until the copy stream is idle: a copy from pageable
    /// memory may return before its DMA reached the device.
    fn finish_copy(&self, what: &str, stream: usize) -> Result<()> {
        crate::gpu::poll_until(what, COPY_DEADLINE, None, || self.stream_done(stream))
    }

    fn attr(&self, attr: c_int) -> Result<c_int> {
        let f = sym!(self, CuDeviceGetAttribute, "cuDeviceGetAttribute");
        let mut v = 0;
        // SAFETY: out-parameter owned here.
        self.rt
            .check("cuDeviceGetAttribute", unsafe { f(&mut v, attr, self.dev) })?;
        Ok(v)
    }

    fn route_external<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let fd = region.dmabuf?;
        let len = region.len;
        Some((
            "cuImportExternalMemory",
            Box::new(move || {
                use std::os::fd::AsRawFd;
                let e = |r: GpuError| r.0;
                self.bind().map_err(e)?;
                let import = sym_str(self, "cuImportExternalMemory")?;
                let map = sym_str(self, "cuExternalMemoryGetMappedBuffer")?;
                let destroy = sym_str(self, "cuDestroyExternalMemory")?;
                // SAFETY: signatures from cuda.h; desc structs laid out as
                // there (asserted); the dup'd fd goes to the driver on success.
                unsafe {
                    let import: libloading::Symbol<CuImportExternalMemory> = import;
                    let map: libloading::Symbol<CuExternalMemoryGetMappedBuffer> = map;
                    let destroy: libloading::Symbol<CuDestroyExternalMemory> = destroy;
                    let dfd = dup_fd(fd.as_raw_fd())?;
                    let desc = ExtMemHandleDesc::opaque_fd(dfd, len as u64);
                    let mut ext = std::ptr::null_mut();
                    let r = import(&mut ext, &desc);
                    if r != 0 {
                        libc::close(dfd);
                        return Err(format!("cuImportExternalMemory(OPAQUE_FD) failed: {}", self.rt.err_name(r)));
                    }
                    let bdesc = ExtMemBufferDesc {
                        offset: 0,
                        size: len as u64,
                        flags: 0,
                        reserved: [0; 16],
                    };
                    let mut ptr = 0u64;
                    let r = map(&mut ptr, ext, &bdesc);
                    if r != 0 {
                        destroy(ext);
                        return Err(format!("cuExternalMemoryGetMappedBuffer failed: {}", self.rt.err_name(r)));
                    }
                    Ok((ptr, Undo::External { ext: ext as usize, ptr }))
                }
            }),
        ))
    }

    fn route_host_register<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let cpu = region.cpu?;
        let (len, mmio) = (region.len, region.mmio);
        Some((
            if mmio {
                "cuMemHostRegister(IOMEMORY)"
            } else {
                "cuMemHostRegister"
            },
            Box::new(move || {
                self.bind().map_err(|e| e.0)?;
                let reg: libloading::Symbol<CuMemHostRegister> = sym_str(self, "cuMemHostRegister_v2")?;
                let get: libloading::Symbol<CuMemHostGetDevicePointer> =
                    sym_str(self, "cuMemHostGetDevicePointer_v2")?;
                let unreg: libloading::Symbol<CuMemHostUnregister> = sym_str(self, "cuMemHostUnregister")?;
                let flags = CU_MEMHOSTREGISTER_DEVICEMAP | if mmio { CU_MEMHOSTREGISTER_IOMEMORY } else { 0 };
                // SAFETY: `cpu` is this process's live mapping of `len`
                // bytes (the module's mmap), kept until the import is undone.
                unsafe {
                    let r = reg(cpu.cast(), len, flags);
                    if r != 0 {
                        return Err(format!("cuMemHostRegister failed: {}", self.rt.err_name(r)));
                    }
                    let mut d = 0u64;
                    let r = get(&mut d, cpu.cast(), 0);
                    if r != 0 {
                        unreg(cpu.cast());
                        return Err(format!("cuMemHostGetDevicePointer failed: {}", self.rt.err_name(r)));
                    }
                    Ok((d, Undo::HostRegister { cpu: cpu as usize }))
                }
            }),
        ))
    }
}

/// A symbol by name, as a route's error string when missing.
fn sym_str<'a, T>(c: &'a Cuda, name: &str) -> std::result::Result<libloading::Symbol<'a, T>, String> {
    // SAFETY: callers name T with the symbol's cuda.h signature.
    unsafe { c.rt.sym::<T>(name) }.ok_or_else(|| format!("this CUDA driver has no {name}"))
}

impl Backend for Cuda {
    fn tick_hz(&self) -> Result<u64> {
        // %globaltimer counts nanoseconds.
        Ok(1_000_000_000)
    }

    fn alloc_device(&self, bytes: usize) -> Result<u64> {
        self.bind()?;
        let f = sym!(self, CuMemAlloc, "cuMemAlloc_v2");
        let mut p = 0u64;
        // SAFETY: out-parameter owned here.
        self.rt
            .check(&format!("cuMemAlloc({bytes})"), unsafe { f(&mut p, bytes) })?;
        Ok(p)
    }

    fn free_device(&self, ptr: u64) {
        if self.bind().is_ok() {
            if let Ok(f) = sym_str::<CuMemFree>(self, "cuMemFree_v2") {
                // SAFETY: ptr came from cuMemAlloc and is freed once.
                unsafe { f(ptr) };
            }
        }
    }

    fn export_dmabuf(&self, ptr: u64, bytes: usize) -> Result<OwnedFd> {
        self.bind()?;
        if self.attr(CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED)? == 0 {
            return Err(GpuError(
                "this NVIDIA driver cannot export GPU memory as a dma-buf \
                 (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: it needs the open kernel modules)"
                    .into(),
            ));
        }
        let f = sym!(self, CuMemGetHandleForAddressRange, "cuMemGetHandleForAddressRange");
        let mut fd: c_int = -1;
        // SAFETY: the handle out-parameter is an int for DMA_BUF_FD.
        self.rt.check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
            f(
                (&mut fd as *mut c_int).cast(),
                ptr,
                bytes,
                CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        // SAFETY: a new descriptor owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)> {
        self.bind()?;
        let alloc = sym!(self, CuMemHostAlloc, "cuMemHostAlloc");
        let get = sym!(self, CuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
        let mut p = std::ptr::null_mut();
        let mut d = 0u64;
        // SAFETY: out-parameters owned here.
        unsafe {
            self.rt.check(
                "cuMemHostAlloc",
                alloc(&mut p, bytes, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP),
            )?;
            self.rt
                .check("cuMemHostGetDevicePointer", get(&mut d, p, 0))?;
        }
        Ok((p.cast(), d))
    }

    fn free_host_mapped(&self, cpu: *mut u8) {
        if let Ok(f) = sym_str::<CuMemFreeHost>(self, "cuMemFreeHost") {
            let _ = self.bind();
            // SAFETY: from cuMemHostAlloc, freed once.
            unsafe { f(cpu.cast()) };
        }
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.bind()?;
        let f = sym!(self, CuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
        let mut stream = self.copy_stream.lock().unwrap_or_else(|p| p.into_inner());
        let s = self.copy_stream_locked(&mut stream)?;
        // SAFETY: src is valid for its length and stays borrowed until the
        // copy finished (waited for below); dst is the caller's device range.
        self.rt.check("cuMemcpyHtoDAsync", unsafe {
            f(dst, src.as_ptr().cast(), src.len(), s as *mut c_void)
        })?;
        self.finish_copy("host-to-device copy", s)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.bind()?;
        let f = sym!(self, CuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
        let mut stream = self.copy_stream.lock().unwrap_or_else(|p| p.into_inner());
        let s = self.copy_stream_locked(&mut stream)?;
        // SAFETY: dst is valid for its length and stays borrowed until the
        // copy finished (waited for below).
        self.rt.check("cuMemcpyDtoHAsync", unsafe {
            f(dst.as_mut_ptr().cast(), src, dst.len(), s as *mut c_void)
        })?;
        self.finish_copy("device-to-host copy", s)
    }

    fn load_module(&self, image: &[u8]) -> Result<usize> {
        self.bind()?;
        let f = sym!(self, CuModuleLoadData, "cuModuleLoadData");
        let mut m = std::ptr::null_mut();
        // SAFETY: image is a complete code object (PTX NUL-terminated).
        self.rt
            .check("cuModuleLoadData", unsafe { f(&mut m, image.as_ptr().cast()) })?;
        Ok(m as usize)
    }

    fn unload_module(&self, module: usize) {
        if let Ok(f) = sym_str::<CuModuleUnload>(self, "cuModuleUnload") {
            let _ = self.bind();
            // SAFETY: from cuModuleLoadData, unloaded once.
            unsafe { f(module as *mut c_void) };
        }
    }

    fn function(&self, module: usize, name: &str) -> Result<usize> {
        self.bind()?;
        let f = sym!(self, CuModuleGetFunction, "cuModuleGetFunction");
        let cname = CString::new(name).map_err(|_| GpuError("bad kernel name".into()))?;
        let mut func = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name.
        self.rt.check(&format!("cuModuleGetFunction({name})"), unsafe {
            f(&mut func, module as *mut c_void, cname.as_ptr())
        })?;
        Ok(func as usize)
    }

    fn launch(&self, func: usize, grid: u32, block: u32, params: &mut [*mut c_void]) -> Result<usize> {
        self.bind()?;
        let create = sym!(self, CuStreamCreate, "cuStreamCreate");
        let launch = sym!(self, CuLaunchKernel, "cuLaunchKernel");
        let mut s = std::ptr::null_mut();
        // SAFETY: params point at argument values that live across the
        // call (the driver copies them at launch).
        unsafe {
            self.rt
                .check("cuStreamCreate", create(&mut s, CU_STREAM_NON_BLOCKING))?;
            self.rt.check(
                "cuLaunchKernel",
                launch(
                    func as *mut c_void,
                    grid,
                    1,
                    1,
                    block,
                    1,
                    1,
                    0,
                    s,
                    params.as_mut_ptr(),
                    std::ptr::null_mut(),
                ),
            )?;
        }
        Ok(s as usize)
    }

    fn stream_done(&self, stream: usize) -> Result<bool> {
        self.bind()?;
        let f = sym!(self, CuStreamQuery, "cuStreamQuery");
        // SAFETY: live stream.
        match unsafe { f(stream as *mut c_void) } {
            0 => Ok(true),
            CUDA_ERROR_NOT_READY => Ok(false),
            r => Err(GpuError(format!(
                "the kernel failed: {}",
                self.rt.err_name(r)
            ))),
        }
    }

    fn destroy_stream(&self, stream: usize) {
        if let Ok(f) = sym_str::<CuStreamDestroy>(self, "cuStreamDestroy_v2") {
            let _ = self.bind();
            // SAFETY: idle stream, destroyed once.
            unsafe { f(stream as *mut c_void) };
        }
    }

    fn import_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>> {
        [self.route_external(region), self.route_host_register(region)]
            .into_iter()
            .flatten()
            .collect()
    }

    fn release_import(&self, undo: Undo) {
        let _ = self.bind();
        // SAFETY: each handle came from the matching successful route and
        // is released once.
        unsafe {
            match undo {
                Undo::External { ext, ptr } => {
                    if let Ok(free) = sym_str::<CuMemFree>(self, "cuMemFree_v2") {
                        free(ptr);
                    }
                    if let Ok(d) = sym_str::<CuDestroyExternalMemory>(self, "cuDestroyExternalMemory") {
                        d(ext as *mut c_void);
                    }
                }
                Undo::HostRegister { cpu } => {
                    if let Ok(u) = sym_str::<CuMemHostUnregister>(self, "cuMemHostUnregister") {
                        u(cpu as *mut c_void);
                    }
                }
                Undo::HsaInterop { .. } | Undo::Drm { .. } => {}
            }
        }
    }
}

impl Drop for Cuda {
    fn drop(&mut self) {
        let s = *self.copy_stream.get_mut().unwrap_or_else(|p| p.into_inner());
        if s != 0 {
            self.destroy_stream(s);
        }
        if let Ok(f) = sym_str::<CuPrimaryCtxRelease>(self, "cuDevicePrimaryCtxRelease_v2") {
            // SAFETY: retained once in open.
            unsafe { f(self.dev) };
        }
    }
}
