//! The HIP backend (`libamdhip64`), with the HSA runtime and libdrm for the
//! import routes HIP itself lacks. Written against hip_runtime_api.h,
//! hsa_ext_amd.h and amdgpu.h; it has not run on AMD hardware here (no AMD
//! GPU on the project's machines): every call's failure is reported, never
//! assumed away.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use libloading::{Library, Symbol};

use crate::cuda::{dup_fd, ExtMemBufferDesc, ExtMemHandleDesc};
use crate::error::{GpuError, Result};
use crate::gpu::Backend;
use crate::import::{Region, Route, Undo};
use crate::probe::GpuDevice;
use crate::runtime::Runtime;

type HipError = c_int;
type HipInit = unsafe extern "C" fn(c_uint) -> HipError;
type HipSetDevice = unsafe extern "C" fn(c_int) -> HipError;
type HipDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> HipError;
type HipMalloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> HipError;
type HipFree = unsafe extern "C" fn(*mut c_void) -> HipError;
type HipMemGetHandleForAddressRange =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, u64) -> HipError;
type HipHostMalloc = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> HipError;
type HipHostFree = unsafe extern "C" fn(*mut c_void) -> HipError;
type HipHostGetDevicePointer = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint) -> HipError;
type HipMemcpyHtoDAsync = unsafe extern "C" fn(*mut c_void, *const c_void, usize, *mut c_void) -> HipError;
type HipMemcpyDtoHAsync = unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void) -> HipError;
type HipModuleLoadData = unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> HipError;
type HipModuleUnload = unsafe extern "C" fn(*mut c_void) -> HipError;
type HipModuleGetFunction = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const c_char) -> HipError;
type HipStreamCreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> HipError;
type HipStreamQuery = unsafe extern "C" fn(*mut c_void) -> HipError;
type HipStreamDestroy = unsafe extern "C" fn(*mut c_void) -> HipError;
#[allow(clippy::type_complexity)]
type HipModuleLaunchKernel = unsafe extern "C" fn(
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
) -> HipError;
type HipImportExternalMemory = unsafe extern "C" fn(*mut *mut c_void, *const ExtMemHandleDesc) -> HipError;
type HipExternalMemoryGetMappedBuffer =
    unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const ExtMemBufferDesc) -> HipError;
type HipDestroyExternalMemory = unsafe extern "C" fn(*mut c_void) -> HipError;
type HipHostRegister = unsafe extern "C" fn(*mut c_void, usize, c_uint) -> HipError;
type HipHostUnregister = unsafe extern "C" fn(*mut c_void) -> HipError;

type HsaStatus = c_int;
type HsaAgent = u64;
type HsaInit = unsafe extern "C" fn() -> HsaStatus;
type HsaShutDown = unsafe extern "C" fn() -> HsaStatus;
type HsaAgentCallback = unsafe extern "C" fn(HsaAgent, *mut c_void) -> HsaStatus;
type HsaIterateAgents = unsafe extern "C" fn(HsaAgentCallback, *mut c_void) -> HsaStatus;
type HsaAgentGetInfo = unsafe extern "C" fn(HsaAgent, c_int, *mut c_void) -> HsaStatus;
type HsaStatusString = unsafe extern "C" fn(HsaStatus, *mut *const c_char) -> HsaStatus;
#[allow(clippy::type_complexity)]
type HsaInteropMapBuffer = unsafe extern "C" fn(
    u32,
    *mut HsaAgent,
    c_int,
    u32,
    *mut usize,
    *mut *mut c_void,
    *mut usize,
    *mut *const c_void,
) -> HsaStatus;
type HsaInteropUnmapBuffer = unsafe extern "C" fn(*mut c_void) -> HsaStatus;
type HsaExportDmabuf = unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> HsaStatus;

type DrmInit = unsafe extern "C" fn(c_int, *mut u32, *mut u32, *mut *mut c_void) -> c_int;
type DrmDeinit = unsafe extern "C" fn(*mut c_void) -> c_int;
type DrmGetFd = unsafe extern "C" fn(*mut c_void) -> c_int;
type DrmBoImport = unsafe extern "C" fn(*mut c_void, c_int, u32, *mut DrmImportResult) -> c_int;
type DrmBoVaOpRaw = unsafe extern "C" fn(*mut c_void, *mut c_void, u64, u64, u64, u64, u32) -> c_int;
type DrmBoFree = unsafe extern "C" fn(*mut c_void) -> c_int;

#[repr(C)]
struct DrmImportResult {
    bo: *mut c_void,
    alloc_size: u64,
}

const HIP_ERROR_NOT_READY: HipError = 600;
/// Longest a copy may take before it counts as failed.
const COPY_DEADLINE: Duration = Duration::from_secs(10);
const HIP_DEVICE_ATTRIBUTE_WALL_CLOCK_RATE: c_int = 10017; // kHz
const HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD: c_int = 1;
const HIP_HOST_MALLOC_MAPPED: c_uint = 0x2;
const HIP_HOST_MALLOC_COHERENT: c_uint = 0x4000_0000;
const HIP_HOST_REGISTER_MAPPED: c_uint = 0x2;
const HIP_HOST_REGISTER_IO_MEMORY: c_uint = 0x4;
const HIP_STREAM_NON_BLOCKING: c_uint = 1;
const HSA_AGENT_INFO_DEVICE: c_int = 17;
const HSA_DEVICE_TYPE_GPU: u32 = 1;
const HSA_AMD_AGENT_INFO_BDFID: c_int = 0xA006;
const AMDGPU_BO_HANDLE_TYPE_DMA_BUF_FD: c_int = 2;
const AMDGPU_VA_OP_MAP: u32 = 1;
const AMDGPU_VA_OP_UNMAP: u32 = 2;
const AMDGPU_VM_PAGE_READABLE: u64 = 1 << 1;
const AMDGPU_VM_PAGE_WRITEABLE: u64 = 1 << 2;
const AMDGPU_VM_MTYPE_UC: u64 = 4 << 5;

const HSA_LIBRARIES: &[&str] = &["libhsa-runtime64.so.1", "libhsa-runtime64.so"];
const DRM_LIBRARIES: &[&str] = &["libdrm_amdgpu.so.1", "libdrm_amdgpu.so"];

fn open_first(names: &[&str]) -> std::result::Result<Library, String> {
    let mut errs = Vec::new();
    for n in names {
        // SAFETY: system GPU runtime libraries, whose initializers run in
        // any process (HIP has already loaded them).
        match unsafe { Library::new(n) } {
            Ok(l) => return Ok(l),
            Err(e) => errs.push(format!("{n}: {e}")),
        }
    }
    Err(errs.join("; "))
}

/// PCI bus/device/function of "dddd:bb:dd.f" as HSA's BDFID.
pub(crate) fn bdfid(bus_id: &str) -> Option<u32> {
    let mut it = bus_id.rsplitn(3, ':');
    let df = it.next()?;
    let bus = u32::from_str_radix(it.next()?, 16).ok()?;
    let (d, f) = df.split_once('.')?;
    let (d, f) = (u32::from_str_radix(d, 16).ok()?, u32::from_str_radix(f, 16).ok()?);
    Some(bus << 8 | d << 3 | f)
}

pub(crate) struct Hip {
    rt: Runtime,
    dev: c_int,
    bus_id: Option<String>,
    hsa: Option<Library>,
    /// Non-blocking stream for copies, so they never wait for a kernel.
    copy_stream: Mutex<usize>,
}

// SAFETY: the HIP runtime is thread-safe; every call selects the device on
// the calling thread first.
unsafe impl Send for Hip {}
// SAFETY: as above.
unsafe impl Sync for Hip {}

macro_rules! sym {
    ($self:expr, $ty:ty, $name:literal) => {
        {
            #[allow(unused_unsafe)]
            // SAFETY: $ty is the signature of $name in hip_runtime_api.h.
            let s = unsafe { $self.rt.sym::<$ty>($name) };
            s
        }
        .ok_or_else(|| GpuError(format!("this HIP runtime has no {}", $name)))?
    };
}

fn hsa_sym<'l, T>(lib: &'l Library, name: &str) -> std::result::Result<Symbol<'l, T>, String> {
    // SAFETY: callers name T with the symbol's hsa.h / hsa_ext_amd.h signature.
    unsafe { lib.get::<T>(name.as_bytes()) }.map_err(|_| format!("the HSA runtime has no {name}"))
}

impl Hip {
    pub(crate) fn open(rt: Runtime, index: u32, device: &GpuDevice) -> Result<Self> {
        let me = Hip {
            rt,
            dev: index as c_int,
            bus_id: device.pci_bus_id.clone(),
            hsa: open_first(HSA_LIBRARIES).ok(),
            copy_stream: Mutex::new(0),
        };
        let init = sym!(me, HipInit, "hipInit");
        // SAFETY: plain call.
        me.rt.check("hipInit", unsafe { init(0) })?;
        me.bind()?;
        Ok(me)
    }

    fn bind(&self) -> Result<()> {
        let f = sym!(self, HipSetDevice, "hipSetDevice");
        // SAFETY: plain call with a device index that exists (probed).
        self.rt.check("hipSetDevice", unsafe { f(self.dev) })
    }

    fn copy_stream_locked(&self, slot: &mut usize) -> Result<usize> {
        if *slot == 0 {
            let create = sym!(self, HipStreamCreateWithFlags, "hipStreamCreateWithFlags");
            let mut s = std::ptr::null_mut();
            // SAFETY: out-parameter owned here.
            self.rt.check("hipStreamCreateWithFlags", unsafe {
                create(&mut s, HIP_STREAM_NON_BLOCKING)
            })?;
            *slot = s as usize;
        }
        Ok(*slot)
    }

    /// Waits (bounded) until the copy stream is idle.
    fn finish_copy(&self, what: &str, stream: usize) -> Result<()> {
        crate::gpu::poll_until(what, COPY_DEADLINE, None, || self.stream_done(stream))
    }

    fn hsa_err(&self, lib: &Library, st: HsaStatus) -> String {
        if let Ok(f) = hsa_sym::<HsaStatusString>(lib, "hsa_status_string") {
            let mut p: *const c_char = std::ptr::null();
            // SAFETY: the string is static in the runtime.
            if unsafe { f(st, &mut p) } == 0 && !p.is_null() {
                return unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
            }
        }
        format!("HSA status 0x{st:x}")
    }

    /// The HSA GPU agents: the one at our PCI address if HSA reports
    /// addresses, else all of them.
    fn hsa_agents(&self, lib: &Library) -> std::result::Result<Vec<HsaAgent>, String> {
        let iterate: Symbol<HsaIterateAgents> = hsa_sym(lib, "hsa_iterate_agents")?;
        let info: Symbol<HsaAgentGetInfo> = hsa_sym(lib, "hsa_agent_get_info")?;
        unsafe extern "C" fn collect(agent: HsaAgent, data: *mut c_void) -> HsaStatus {
            // SAFETY: data is the Vec passed below, alive for the iteration.
            unsafe { (*(data as *mut Vec<HsaAgent>)).push(agent) };
            0
        }
        let mut all: Vec<HsaAgent> = Vec::new();
        // SAFETY: callback and data as hsa_iterate_agents expects.
        let st = unsafe { iterate(collect, (&mut all as *mut Vec<HsaAgent>).cast()) };
        if st != 0 {
            return Err(format!("hsa_iterate_agents failed: {}", self.hsa_err(lib, st)));
        }
        let mut gpus = Vec::new();
        let mut mine = Vec::new();
        let want = self.bus_id.as_deref().and_then(bdfid);
        for a in all {
            let mut ty: u32 = 0;
            // SAFETY: HSA_AGENT_INFO_DEVICE writes a u32 enum.
            if unsafe { info(a, HSA_AGENT_INFO_DEVICE, (&mut ty as *mut u32).cast()) } != 0
                || ty != HSA_DEVICE_TYPE_GPU
            {
                continue;
            }
            gpus.push(a);
            let mut b: u32 = u32::MAX;
            // SAFETY: HSA_AMD_AGENT_INFO_BDFID writes a u32.
            if unsafe { info(a, HSA_AMD_AGENT_INFO_BDFID, (&mut b as *mut u32).cast()) } == 0
                && Some(b) == want
            {
                mine.push(a);
            }
        }
        match (mine.is_empty(), gpus.is_empty()) {
            (false, _) => Ok(mine),
            (true, false) => Ok(gpus),
            (true, true) => Err("HSA lists no GPU agent".into()),
        }
    }

    fn route_hip_external<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let fd = region.dmabuf?;
        let len = region.len;
        Some((
            "hipImportExternalMemory",
            Box::new(move || {
                self.bind().map_err(|e| e.0)?;
                let s = |n: &str| format!("this HIP runtime has no {n}");
                // SAFETY: signatures from hip_runtime_api.h; the desc
                // layouts equal CUDA's (asserted in cuda.rs).
                unsafe {
                    let import = self
                        .rt
                        .sym::<HipImportExternalMemory>("hipImportExternalMemory")
                        .ok_or_else(|| s("hipImportExternalMemory"))?;
                    let map = self
                        .rt
                        .sym::<HipExternalMemoryGetMappedBuffer>("hipExternalMemoryGetMappedBuffer")
                        .ok_or_else(|| s("hipExternalMemoryGetMappedBuffer"))?;
                    let destroy = self
                        .rt
                        .sym::<HipDestroyExternalMemory>("hipDestroyExternalMemory")
                        .ok_or_else(|| s("hipDestroyExternalMemory"))?;
                    let dfd = dup_fd(fd.as_raw_fd())?;
                    let desc = ExtMemHandleDesc::opaque_fd(dfd, len as u64);
                    let mut ext = std::ptr::null_mut();
                    let r = import(&mut ext, &desc);
                    if r != 0 {
                        libc::close(dfd);
                        return Err(format!(
                            "hipImportExternalMemory(OpaqueFd) failed: {} (KFD's GET_DMABUF_INFO \
                             accepts only amdgpu's own dma-bufs)",
                            self.rt.err_name(r)
                        ));
                    }
                    let b = ExtMemBufferDesc {
                        offset: 0,
                        size: len as u64,
                        flags: 0,
                        reserved: [0; 16],
                    };
                    let mut p = std::ptr::null_mut();
                    let r = map(&mut p, ext, &b);
                    if r != 0 {
                        destroy(ext);
                        return Err(format!(
                            "hipExternalMemoryGetMappedBuffer failed: {}",
                            self.rt.err_name(r)
                        ));
                    }
                    Ok((
                        p as u64,
                        Undo::External {
                            ext: ext as usize,
                            ptr: p as u64,
                        },
                    ))
                }
            }),
        ))
    }

    fn route_hsa_interop<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let fd = region.dmabuf?;
        Some((
            "hsa_amd_interop_map_buffer",
            Box::new(move || {
                let lib = self
                    .hsa
                    .as_ref()
                    .ok_or_else(|| format!("no HSA runtime ({})", HSA_LIBRARIES.join(", ")))?;
                let init: Symbol<HsaInit> = hsa_sym(lib, "hsa_init")?;
                let map: Symbol<HsaInteropMapBuffer> = hsa_sym(lib, "hsa_amd_interop_map_buffer")?;
                // SAFETY: hsa_init is reference counted (HIP holds one).
                let st = unsafe { init() };
                if st != 0 {
                    return Err(format!("hsa_init failed: {}", self.hsa_err(lib, st)));
                }
                let shut: Symbol<HsaShutDown> = hsa_sym(lib, "hsa_shut_down")?;
                let mut agents = match self.hsa_agents(lib) {
                    Ok(a) => a,
                    Err(e) => {
                        // SAFETY: balances the hsa_init above.
                        unsafe { shut() };
                        return Err(e);
                    }
                };
                let (mut size, mut md_size) = (0usize, 0usize);
                let mut ptr = std::ptr::null_mut();
                let mut md: *const c_void = std::ptr::null();
                // SAFETY: out-parameters owned here; agents valid handles.
                let st = unsafe {
                    map(
                        agents.len() as u32,
                        agents.as_mut_ptr(),
                        fd.as_raw_fd(),
                        0,
                        &mut size,
                        &mut ptr,
                        &mut md_size,
                        &mut md,
                    )
                };
                if st != 0 {
                    // SAFETY: balances the hsa_init above.
                    unsafe { shut() };
                    return Err(format!(
                        "hsa_amd_interop_map_buffer failed: {}",
                        self.hsa_err(lib, st)
                    ));
                }
                Ok((ptr as u64, Undo::HsaInterop { ptr: ptr as u64 }))
            }),
        ))
    }

    fn render_node(&self) -> std::result::Result<String, String> {
        let bus = self
            .bus_id
            .as_deref()
            .ok_or("the HIP runtime did not report the GPU's PCI address")?;
        let dir = format!("/sys/bus/pci/devices/{bus}/drm");
        let rd = std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))?;
        rd.flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.starts_with("renderD"))
            .map(|n| format!("/dev/dri/{n}"))
            .ok_or_else(|| format!("{dir} has no renderD node"))
    }

    fn route_libdrm<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let fd = region.dmabuf?;
        let (len, mmio) = (region.len as u64, region.mmio);
        Some((
            "amdgpu_bo_import + GPU VA map (libdrm)",
            Box::new(move || {
                let lib = open_first(DRM_LIBRARIES)?;
                // Keep libdrm loaded for the mapping's life: HIP already
                // holds it, so this only leaks a reference count.
                let lib: &'static Library = Box::leak(Box::new(lib));
                let init: Symbol<DrmInit> = hsa_sym(lib, "amdgpu_device_initialize")?;
                let deinit: Symbol<DrmDeinit> = hsa_sym(lib, "amdgpu_device_deinitialize")?;
                let get_fd: Symbol<DrmGetFd> = hsa_sym(lib, "amdgpu_device_get_fd")?;
                let import: Symbol<DrmBoImport> = hsa_sym(lib, "amdgpu_bo_import")?;
                let va_op: Symbol<DrmBoVaOpRaw> = hsa_sym(lib, "amdgpu_bo_va_op_raw")?;
                let free: Symbol<DrmBoFree> = hsa_sym(lib, "amdgpu_bo_free")?;
                let node = self.render_node()?;
                let cnode = CString::new(node.clone()).map_err(|e| e.to_string())?;
                // SAFETY: open(2) on a NUL-terminated path.
                let rfd = unsafe { libc::open(cnode.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
                if rfd < 0 {
                    return Err(format!("open {node}: {}", std::io::Error::last_os_error()));
                }
                // SAFETY: a descriptor we just opened, owned by `owned`.
                let owned = unsafe { OwnedFd::from_raw_fd(rfd) };
                let (mut maj, mut min) = (0u32, 0u32);
                let mut dev = std::ptr::null_mut();
                // SAFETY: out-parameters owned here.
                let r = unsafe { init(rfd, &mut maj, &mut min, &mut dev) };
                if r != 0 {
                    return Err(format!("amdgpu_device_initialize({node}) failed: {r}"));
                }
                // libdrm hands out one handle per device per process: if
                // the HIP runtime initialized it first, the handle carries
                // the runtime's fd and so the GPU VM its kernels run in. A
                // handle on our own fd is a VM no HIP kernel uses.
                // SAFETY: live device handle.
                if unsafe { get_fd(dev) } == rfd {
                    // SAFETY: balances the initialize above.
                    unsafe { deinit(dev) };
                    return Err(
                        "libdrm gave a device handle of our own: the HIP runtime's GPU VM is not \
                         reachable this way, a mapping would be invisible to HIP kernels"
                            .into(),
                    );
                }
                let mut res = DrmImportResult {
                    bo: std::ptr::null_mut(),
                    alloc_size: 0,
                };
                // SAFETY: a dma-buf fd and an out-parameter owned here.
                let r = unsafe { import(dev, AMDGPU_BO_HANDLE_TYPE_DMA_BUF_FD, fd.as_raw_fd() as u32, &mut res) };
                if r != 0 {
                    // SAFETY: balances the initialize above.
                    unsafe { deinit(dev) };
                    return Err(format!("amdgpu_bo_import(dma-buf) failed: {r}"));
                }
                // A GPU VA nobody else will use: reserve the same range of
                // the CPU address space, where KFD places its own mappings.
                // SAFETY: an anonymous PROT_NONE reservation.
                let va = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len as usize,
                        libc::PROT_NONE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                        -1,
                        0,
                    )
                };
                if va == libc::MAP_FAILED {
                    // SAFETY: undo in reverse order.
                    unsafe {
                        free(res.bo);
                        deinit(dev);
                    }
                    return Err(format!("reserving {len} bytes of VA: {}", std::io::Error::last_os_error()));
                }
                let flags = AMDGPU_VM_PAGE_READABLE
                    | AMDGPU_VM_PAGE_WRITEABLE
                    | if mmio { AMDGPU_VM_MTYPE_UC } else { 0 };
                // SAFETY: live BO and device; va is page aligned and reserved.
                let r = unsafe { va_op(dev, res.bo, 0, len, va as u64, flags, AMDGPU_VA_OP_MAP) };
                if r != 0 {
                    // SAFETY: undo in reverse order.
                    unsafe {
                        libc::munmap(va, len as usize);
                        free(res.bo);
                        deinit(dev);
                    }
                    return Err(format!("amdgpu_bo_va_op_raw(MAP at 0x{:x}) failed: {r}", va as u64));
                }
                use std::os::fd::IntoRawFd;
                Ok((
                    va as u64,
                    Undo::Drm {
                        dev: dev as usize,
                        bo: res.bo as usize,
                        va: va as u64,
                        len,
                        fd: owned.into_raw_fd(),
                    },
                ))
            }),
        ))
    }

    fn route_host_register<'a>(&'a self, region: &Region<'a>) -> Option<Route<'a>> {
        let cpu = region.cpu?;
        let (len, mmio) = (region.len, region.mmio);
        Some((
            if mmio {
                "hipHostRegister(IoMemory)"
            } else {
                "hipHostRegister"
            },
            Box::new(move || {
                self.bind().map_err(|e| e.0)?;
                let s = |n: &str| format!("this HIP runtime has no {n}");
                // SAFETY: signatures from hip_runtime_api.h; `cpu` is this
                // process's live mapping of `len` bytes.
                unsafe {
                    let reg = self.rt.sym::<HipHostRegister>("hipHostRegister").ok_or_else(|| s("hipHostRegister"))?;
                    let get = self
                        .rt
                        .sym::<HipHostGetDevicePointer>("hipHostGetDevicePointer")
                        .ok_or_else(|| s("hipHostGetDevicePointer"))?;
                    let unreg = self.rt.sym::<HipHostUnregister>("hipHostUnregister").ok_or_else(|| s("hipHostUnregister"))?;
                    let flags = HIP_HOST_REGISTER_MAPPED | if mmio { HIP_HOST_REGISTER_IO_MEMORY } else { 0 };
                    let r = reg(cpu.cast(), len, flags);
                    if r != 0 {
                        return Err(format!("hipHostRegister failed: {}", self.rt.err_name(r)));
                    }
                    let mut d = std::ptr::null_mut();
                    let r = get(&mut d, cpu.cast(), 0);
                    if r != 0 {
                        unreg(cpu.cast());
                        return Err(format!("hipHostGetDevicePointer failed: {}", self.rt.err_name(r)));
                    }
                    Ok((d as u64, Undo::HostRegister { cpu: cpu as usize }))
                }
            }),
        ))
    }
}

impl Backend for Hip {
    fn tick_hz(&self) -> Result<u64> {
        self.bind()?;
        let f = sym!(self, HipDeviceGetAttribute, "hipDeviceGetAttribute");
        let mut khz = 0;
        // SAFETY: out-parameter owned here.
        self.rt.check("hipDeviceGetAttribute(WallClockRate)", unsafe {
            f(&mut khz, HIP_DEVICE_ATTRIBUTE_WALL_CLOCK_RATE, self.dev)
        })?;
        if khz <= 0 {
            return Err(GpuError(format!("the wall clock rate is reported as {khz} kHz")));
        }
        Ok(khz as u64 * 1000)
    }

    fn alloc_device(&self, bytes: usize) -> Result<u64> {
        self.bind()?;
        let f = sym!(self, HipMalloc, "hipMalloc");
        let mut p = std::ptr::null_mut();
        // SAFETY: out-parameter owned here.
        self.rt.check(&format!("hipMalloc({bytes})"), unsafe { f(&mut p, bytes) })?;
        Ok(p as u64)
    }

    fn free_device(&self, ptr: u64) {
        // SAFETY: hipFree's signature; ptr from hipMalloc, freed once.
        if let Some(f) = unsafe { self.rt.sym::<HipFree>("hipFree") } {
            let _ = self.bind();
            unsafe { f(ptr as *mut c_void) };
        }
    }

    fn export_dmabuf(&self, ptr: u64, bytes: usize) -> Result<OwnedFd> {
        self.bind()?;
        let mut fd: c_int = -1;
        // ROCm 7: hipMemGetHandleForAddressRange; before: HSA's export.
        // SAFETY: signatures from hip_runtime_api.h / hsa_ext_amd.h; the
        // out-parameters are owned here.
        unsafe {
            if let Some(f) = self
                .rt
                .sym::<HipMemGetHandleForAddressRange>("hipMemGetHandleForAddressRange")
            {
                self.rt.check(
                    "hipMemGetHandleForAddressRange(DmaBufFd)",
                    f((&mut fd as *mut c_int).cast(), ptr as *mut c_void, bytes, HIP_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0),
                )?;
            } else {
                let lib = self
                    .hsa
                    .as_ref()
                    .ok_or("no hipMemGetHandleForAddressRange and no HSA runtime to export VRAM")?;
                let f: Symbol<HsaExportDmabuf> = hsa_sym(lib, "hsa_amd_portable_export_dmabuf")?;
                let mut off = 0u64;
                let st = f(ptr as *const c_void, bytes, &mut fd, &mut off);
                if st != 0 {
                    return Err(GpuError(format!(
                        "hsa_amd_portable_export_dmabuf failed: {}",
                        self.hsa_err(lib, st)
                    )));
                }
                if off != 0 {
                    libc::close(fd);
                    return Err(GpuError(format!(
                        "the VRAM allocation starts {off} bytes into its dma-buf; the module maps whole dma-bufs"
                    )));
                }
            }
            Ok(OwnedFd::from_raw_fd(fd))
        }
    }

    fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)> {
        self.bind()?;
        let alloc = sym!(self, HipHostMalloc, "hipHostMalloc");
        let get = sym!(self, HipHostGetDevicePointer, "hipHostGetDevicePointer");
        let mut p = std::ptr::null_mut();
        let mut d = std::ptr::null_mut();
        // SAFETY: out-parameters owned here. Coherent: fine-grained, so the
        // GPU sees CPU writes while a kernel runs.
        unsafe {
            self.rt.check(
                "hipHostMalloc(Mapped|Coherent)",
                alloc(&mut p, bytes, HIP_HOST_MALLOC_MAPPED | HIP_HOST_MALLOC_COHERENT),
            )?;
            self.rt.check("hipHostGetDevicePointer", get(&mut d, p, 0))?;
        }
        Ok((p.cast(), d as u64))
    }

    fn free_host_mapped(&self, cpu: *mut u8) {
        // SAFETY: hipHostFree's signature; from hipHostMalloc, freed once.
        if let Some(f) = unsafe { self.rt.sym::<HipHostFree>("hipHostFree") } {
            unsafe { f(cpu.cast()) };
        }
    }

    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.bind()?;
        let f = sym!(self, HipMemcpyHtoDAsync, "hipMemcpyHtoDAsync");
        let mut slot = self.copy_stream.lock().unwrap_or_else(|p| p.into_inner());
        let s = self.copy_stream_locked(&mut slot)?;
        // SAFETY: src stays borrowed until the copy finished (below).
        self.rt.check("hipMemcpyHtoDAsync", unsafe {
            f(dst as *mut c_void, src.as_ptr().cast(), src.len(), s as *mut c_void)
        })?;
        self.finish_copy("host-to-device copy", s)
    }

    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.bind()?;
        let f = sym!(self, HipMemcpyDtoHAsync, "hipMemcpyDtoHAsync");
        let mut slot = self.copy_stream.lock().unwrap_or_else(|p| p.into_inner());
        let s = self.copy_stream_locked(&mut slot)?;
        // SAFETY: dst stays borrowed until the copy finished (below).
        self.rt.check("hipMemcpyDtoHAsync", unsafe {
            f(dst.as_mut_ptr().cast(), src as *mut c_void, dst.len(), s as *mut c_void)
        })?;
        self.finish_copy("device-to-host copy", s)
    }

    fn load_module(&self, image: &[u8]) -> Result<usize> {
        self.bind()?;
        let f = sym!(self, HipModuleLoadData, "hipModuleLoadData");
        let mut m = std::ptr::null_mut();
        // SAFETY: image is a complete code object.
        self.rt.check("hipModuleLoadData", unsafe { f(&mut m, image.as_ptr().cast()) })?;
        Ok(m as usize)
    }

    fn unload_module(&self, module: usize) {
        // SAFETY: hipModuleUnload's signature; loaded once, unloaded once.
        if let Some(f) = unsafe { self.rt.sym::<HipModuleUnload>("hipModuleUnload") } {
            unsafe { f(module as *mut c_void) };
        }
    }

    fn function(&self, module: usize, name: &str) -> Result<usize> {
        let f = sym!(self, HipModuleGetFunction, "hipModuleGetFunction");
        let cname = CString::new(name).map_err(|_| GpuError("bad kernel name".into()))?;
        let mut func = std::ptr::null_mut();
        // SAFETY: live module, NUL-terminated name.
        self.rt.check(&format!("hipModuleGetFunction({name})"), unsafe {
            f(&mut func, module as *mut c_void, cname.as_ptr())
        })?;
        Ok(func as usize)
    }

    fn launch(&self, func: usize, grid: u32, block: u32, params: &mut [*mut c_void]) -> Result<usize> {
        self.bind()?;
        let create = sym!(self, HipStreamCreateWithFlags, "hipStreamCreateWithFlags");
        let launch = sym!(self, HipModuleLaunchKernel, "hipModuleLaunchKernel");
        let mut s = std::ptr::null_mut();
        // SAFETY: params point at values alive across the call.
        unsafe {
            self.rt
                .check("hipStreamCreateWithFlags", create(&mut s, HIP_STREAM_NON_BLOCKING))?;
            self.rt.check(
                "hipModuleLaunchKernel",
                launch(func as *mut c_void, grid, 1, 1, block, 1, 1, 0, s, params.as_mut_ptr(), std::ptr::null_mut()),
            )?;
        }
        Ok(s as usize)
    }

    fn stream_done(&self, stream: usize) -> Result<bool> {
        let f = sym!(self, HipStreamQuery, "hipStreamQuery");
        // SAFETY: live stream.
        match unsafe { f(stream as *mut c_void) } {
            0 => Ok(true),
            HIP_ERROR_NOT_READY => Ok(false),
            r => Err(GpuError(format!("the kernel failed: {}", self.rt.err_name(r)))),
        }
    }

    fn destroy_stream(&self, stream: usize) {
        // SAFETY: hipStreamDestroy's signature; idle stream, destroyed once.
        if let Some(f) = unsafe { self.rt.sym::<HipStreamDestroy>("hipStreamDestroy") } {
            unsafe { f(stream as *mut c_void) };
        }
    }

    fn import_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>> {
        [
            self.route_hip_external(region),
            self.route_hsa_interop(region),
            self.route_libdrm(region),
            self.route_host_register(region),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    fn release_import(&self, undo: Undo) {
        let _ = self.bind();
        // SAFETY: each handle came from the matching successful route and
        // is released once, in reverse order of its creation.
        unsafe {
            match undo {
                Undo::External { ext, ptr } => {
                    if let Some(f) = self.rt.sym::<HipFree>("hipFree") {
                        f(ptr as *mut c_void);
                    }
                    if let Some(d) = self.rt.sym::<HipDestroyExternalMemory>("hipDestroyExternalMemory") {
                        d(ext as *mut c_void);
                    }
                }
                Undo::HsaInterop { ptr } => {
                    if let Some(lib) = &self.hsa {
                        if let Ok(u) = hsa_sym::<HsaInteropUnmapBuffer>(lib, "hsa_amd_interop_unmap_buffer") {
                            u(ptr as *mut c_void);
                        }
                        if let Ok(s) = hsa_sym::<HsaShutDown>(lib, "hsa_shut_down") {
                            s();
                        }
                    }
                }
                Undo::Drm { dev, bo, va, len, fd } => {
                    if let Ok(lib) = open_first(DRM_LIBRARIES) {
                        if let Ok(op) = hsa_sym::<DrmBoVaOpRaw>(&lib, "amdgpu_bo_va_op_raw") {
                            op(dev as *mut c_void, bo as *mut c_void, 0, len, va, 0, AMDGPU_VA_OP_UNMAP);
                        }
                        if let Ok(free) = hsa_sym::<DrmBoFree>(&lib, "amdgpu_bo_free") {
                            free(bo as *mut c_void);
                        }
                        if let Ok(d) = hsa_sym::<DrmDeinit>(&lib, "amdgpu_device_deinitialize") {
                            d(dev as *mut c_void);
                        }
                    }
                    libc::munmap(va as *mut c_void, len as usize);
                    libc::close(fd);
                }
                Undo::HostRegister { cpu } => {
                    if let Some(u) = self.rt.sym::<HipHostUnregister>("hipHostUnregister") {
                        u(cpu as *mut c_void);
                    }
                }
            }
        }
    }
}

impl Drop for Hip {
    fn drop(&mut self) {
        let s = *self.copy_stream.get_mut().unwrap_or_else(|p| p.into_inner());
        if s != 0 {
            self.destroy_stream(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdfid_encoding() {
        assert_eq!(bdfid("0000:03:00.0"), Some(0x300));
        assert_eq!(bdfid("0000:c1:00.1"), Some(0xc101));
        assert_eq!(bdfid("0000:00:1f.3"), Some(0xfb));
        assert_eq!(bdfid("garbage"), None);
    }
}
