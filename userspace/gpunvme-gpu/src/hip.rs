// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! AMD GPUs through HIP (`libamdhip64`), with the HSA runtime and libdrm
//! for the import routes HIP itself lacks. Written against
//! hip_runtime_api.h, hsa_ext_amd.h and amdgpu.h; it has not run on AMD
//! hardware here (no AMD GPU on the project's machines): every call's
//! failure is reported, never assumed away.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use libloading::{Library, Symbol};

use crate::driver::{Api, Dialect, Vendor};
use crate::error::{GpuError, Result};
use crate::import::{Region, Route, Undo};
use crate::probe::GpuDevice;
use crate::runtime::Runtime;

type HipError = c_int;
type HipInit = unsafe extern "C" fn(c_uint) -> HipError;
type HipSetDevice = unsafe extern "C" fn(c_int) -> HipError;
type HipDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> HipError;
type HipExtMallocWithFlags = unsafe extern "C" fn(*mut u64, usize, c_uint) -> HipError;
/// hipDeviceMallocUncached (hip_runtime_api.h).
const HIP_DEVICE_MALLOC_UNCACHED: c_uint = 0x3;

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
type HsaExportDmabuf =
    unsafe extern "C" fn(*const c_void, usize, *mut c_int, *mut u64) -> HsaStatus;

type DrmInit = unsafe extern "C" fn(c_int, *mut u32, *mut u32, *mut *mut c_void) -> c_int;
type DrmDeinit = unsafe extern "C" fn(*mut c_void) -> c_int;
type DrmGetFd = unsafe extern "C" fn(*mut c_void) -> c_int;
type DrmBoImport = unsafe extern "C" fn(*mut c_void, c_int, u32, *mut DrmImportResult) -> c_int;
type DrmBoVaOpRaw =
    unsafe extern "C" fn(*mut c_void, *mut c_void, u64, u64, u64, u64, u32) -> c_int;
type DrmBoFree = unsafe extern "C" fn(*mut c_void) -> c_int;

#[repr(C)]
struct DrmImportResult {
    bo: *mut c_void,
    alloc_size: u64,
}

const HIP_DEVICE_ATTRIBUTE_WALL_CLOCK_RATE: c_int = 10017; // kHz
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

pub(crate) static HIP: Dialect = Dialect {
    alloc: "hipMalloc",
    free: "hipFree",
    host_alloc: "hipHostMalloc",
    host_get_device_pointer: "hipHostGetDevicePointer",
    host_free: "hipHostFree",
    htod_async: "hipMemcpyHtoDAsync",
    dtoh_async: "hipMemcpyDtoHAsync",
    module_load_data: "hipModuleLoadData",
    module_unload: "hipModuleUnload",
    module_get_function: "hipModuleGetFunction",
    launch_kernel: "hipModuleLaunchKernel",
    stream_create: "hipStreamCreateWithFlags",
    stream_query: "hipStreamQuery",
    stream_destroy: "hipStreamDestroy",
    import_external: "hipImportExternalMemory",
    mapped_buffer: "hipExternalMemoryGetMappedBuffer",
    destroy_external: "hipDestroyExternalMemory",
    host_register: "hipHostRegister",
    host_unregister: "hipHostUnregister",
    handle_for_range: "hipMemGetHandleForAddressRange",
    host_register_route: "hipHostRegister",
    host_register_io_route: "hipHostRegister(IoMemory)",
    import_hint: " (KFD's GET_DMABUF_INFO accepts only amdgpu's own dma-bufs)",
    // hipHostMallocMapped | hipHostMallocCoherent: fine-grained, so the GPU
    // sees CPU writes while a kernel runs.
    host_alloc_flags: 0x2 | 0x4000_0000,
    host_register_mapped: 0x2, // hipHostRegisterMapped
    host_register_io: 0x4,     // hipHostRegisterIoMemory
    stream_non_blocking: 1,    // hipStreamNonBlocking
    not_ready: 600,            // hipErrorNotReady
    who: "this HIP runtime",
};

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
    let (d, f) = (
        u32::from_str_radix(d, 16).ok()?,
        u32::from_str_radix(f, 16).ok()?,
    );
    Some(bus << 8 | d << 3 | f)
}

pub(crate) struct Hip {
    rt: Runtime,
    dev: c_int,
    bus_id: Option<String>,
    /// The GPU's target: the libdrm route's memory type depends on it.
    arch: String,
    hsa: Option<Library>,
    set_device: HipSetDevice,
    attribute: HipDeviceGetAttribute,
}

fn hsa_sym<'l, T>(lib: &'l Library, name: &str) -> std::result::Result<Symbol<'l, T>, String> {
    // SAFETY: callers name T with the symbol's hsa.h / hsa_ext_amd.h signature.
    unsafe { lib.get::<T>(name.as_bytes()) }.map_err(|_| format!("the HSA runtime has no {name}"))
}

fn sym<T: Copy>(rt: &Runtime, name: &str) -> Result<T> {
    // SAFETY: callers name T with the symbol's hip_runtime_api.h signature;
    // the pointer is used only while `rt` (owned by Hip) is loaded.
    unsafe { rt.sym::<T>(name) }
        .map(|s| *s)
        .ok_or_else(|| GpuError(format!("this HIP runtime has no {name}")))
}

impl Hip {
    pub(crate) fn open(rt: Runtime, index: u32, device: &GpuDevice) -> Result<Self> {
        let init: HipInit = sym(&rt, "hipInit")?;
        // SAFETY: plain call.
        rt.check("hipInit", unsafe { init(0) })?;
        let me = Hip {
            set_device: sym(&rt, "hipSetDevice")?,
            attribute: sym(&rt, "hipDeviceGetAttribute")?,
            rt,
            dev: index as c_int,
            bus_id: device.pci_bus_id.clone(),
            arch: device.arch.clone(),
            hsa: open_first(HSA_LIBRARIES).ok(),
        };
        me.bind()?;
        Ok(me)
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
            return Err(format!(
                "hsa_iterate_agents failed: {}",
                self.hsa_err(lib, st)
            ));
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
        let arch = self.arch.clone();
        Some((
            crate::mem_type::LIBDRM_ROUTE,
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
                let r = unsafe {
                    import(
                        dev,
                        AMDGPU_BO_HANDLE_TYPE_DMA_BUF_FD,
                        fd.as_raw_fd() as u32,
                        &mut res,
                    )
                };
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
                    return Err(format!(
                        "reserving {len} bytes of VA: {}",
                        std::io::Error::last_os_error()
                    ));
                }
                // MMIO, and on gfx10/11 every queue region: uncached
                // (mem_type.rs); otherwise the driver's default.
                let uc =
                    crate::mem_type::libdrm_mem_type(crate::probe::RuntimeKind::Hip, &arch, mmio)
                        == crate::mem_type::MemType::Uncached;
                let flags = AMDGPU_VM_PAGE_READABLE
                    | AMDGPU_VM_PAGE_WRITEABLE
                    | if uc { AMDGPU_VM_MTYPE_UC } else { 0 };
                // SAFETY: live BO and device; va is page aligned and reserved.
                let r = unsafe { va_op(dev, res.bo, 0, len, va as u64, flags, AMDGPU_VA_OP_MAP) };
                if r != 0 {
                    // SAFETY: undo in reverse order.
                    unsafe {
                        libc::munmap(va, len as usize);
                        free(res.bo);
                        deinit(dev);
                    }
                    return Err(format!(
                        "amdgpu_bo_va_op_raw(MAP at 0x{:x}) failed: {r}",
                        va as u64
                    ));
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
}

impl Vendor for Hip {
    const DIALECT: &'static Dialect = &HIP;

    fn rt(&self) -> &Runtime {
        &self.rt
    }

    fn bind(&self) -> Result<()> {
        // SAFETY: plain call with a device index that exists (probed).
        self.rt
            .check("hipSetDevice", unsafe { (self.set_device)(self.dev) })
    }

    fn tick_hz(&self) -> Result<u64> {
        self.bind()?;
        let mut khz = 0;
        // SAFETY: out-parameter owned here.
        self.rt
            .check("hipDeviceGetAttribute(WallClockRate)", unsafe {
                (self.attribute)(&mut khz, HIP_DEVICE_ATTRIBUTE_WALL_CLOCK_RATE, self.dev)
            })?;
        if khz <= 0 {
            return Err(GpuError(format!(
                "the wall clock rate is reported as {khz} kHz"
            )));
        }
        Ok(khz as u64 * 1000)
    }

    fn alloc_uncached(&self, bytes: usize) -> Result<u64> {
        let f: HipExtMallocWithFlags = sym(&self.rt, "hipExtMallocWithFlags")?;
        let mut p = 0u64;
        // SAFETY: out-parameter owned here; freed by hipFree (free_device).
        self.rt.check(
            &format!("hipExtMallocWithFlags({bytes}, hipDeviceMallocUncached)"),
            unsafe { f(&mut p, bytes, HIP_DEVICE_MALLOC_UNCACHED) },
        )?;
        Ok(p)
    }

    fn export_dmabuf(&self, api: &Api, ptr: u64, bytes: usize) -> Result<OwnedFd> {
        // ROCm 7: hipMemGetHandleForAddressRange; before: HSA's export.
        if let Some(r) = api.export_range(&self.rt, ptr, bytes) {
            return r;
        }
        let lib = self
            .hsa
            .as_ref()
            .ok_or("no hipMemGetHandleForAddressRange and no HSA runtime to export VRAM")?;
        let f: Symbol<HsaExportDmabuf> = hsa_sym(lib, "hsa_amd_portable_export_dmabuf")?;
        let (mut fd, mut off): (c_int, u64) = (-1, 0);
        // SAFETY: hsa_ext_amd.h signature; out-parameters owned here.
        let st = unsafe { f(ptr as *const c_void, bytes, &mut fd, &mut off) };
        if st != 0 {
            return Err(GpuError(format!(
                "hsa_amd_portable_export_dmabuf failed: {}",
                self.hsa_err(lib, st)
            )));
        }
        // SAFETY: a new descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if off != 0 {
            return Err(GpuError(format!(
                "the VRAM allocation starts {off} bytes into its dma-buf; the module maps whole dma-bufs"
            )));
        }
        Ok(fd)
    }

    fn extra_routes<'a>(&'a self, region: &Region<'a>) -> Vec<Route<'a>> {
        [self.route_hsa_interop(region), self.route_libdrm(region)]
            .into_iter()
            .flatten()
            .collect()
    }

    fn release_extra(&self, undo: Undo) {
        // SAFETY: each handle came from the matching successful route and
        // is released once, in reverse order of its creation.
        unsafe {
            match undo {
                Undo::HsaInterop { ptr } => {
                    if let Some(lib) = &self.hsa {
                        if let Ok(u) =
                            hsa_sym::<HsaInteropUnmapBuffer>(lib, "hsa_amd_interop_unmap_buffer")
                        {
                            u(ptr as *mut c_void);
                        }
                        if let Ok(s) = hsa_sym::<HsaShutDown>(lib, "hsa_shut_down") {
                            s();
                        }
                    }
                }
                Undo::Drm {
                    dev,
                    bo,
                    va,
                    len,
                    fd,
                } => {
                    if let Ok(lib) = open_first(DRM_LIBRARIES) {
                        if let Ok(op) = hsa_sym::<DrmBoVaOpRaw>(&lib, "amdgpu_bo_va_op_raw") {
                            op(
                                dev as *mut c_void,
                                bo as *mut c_void,
                                0,
                                len,
                                va,
                                0,
                                AMDGPU_VA_OP_UNMAP,
                            );
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
                Undo::External { .. } | Undo::HostRegister { .. } => {}
            }
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
