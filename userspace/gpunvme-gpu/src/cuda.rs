// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! NVIDIA through the CUDA driver API (`libcuda.so.1`), the HIP-on-CUDA
//! case: the primary context made current per call, `%globaltimer` in
//! nanoseconds, and dma-buf export only where the driver supports it.

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::OwnedFd;

use crate::driver::{Api, Dialect, Vendor};
use crate::error::{GpuError, Result};
use crate::import::{Region, Route, Undo};
use crate::runtime::Runtime;

type CUresult = c_int;
type CuInit = unsafe extern "C" fn(c_uint) -> CUresult;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> CUresult;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> CUresult;
type CuPrimaryCtxRetain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> CUresult;
type CuPrimaryCtxRelease = unsafe extern "C" fn(c_int) -> CUresult;
type CuCtxSetCurrent = unsafe extern "C" fn(*mut c_void) -> CUresult;

const CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED: c_int = 124;

pub(crate) static CUDA: Dialect = Dialect {
    alloc: "cuMemAlloc_v2",
    free: "cuMemFree_v2",
    host_alloc: "cuMemHostAlloc",
    host_get_device_pointer: "cuMemHostGetDevicePointer_v2",
    host_free: "cuMemFreeHost",
    htod_async: "cuMemcpyHtoDAsync_v2",
    dtoh_async: "cuMemcpyDtoHAsync_v2",
    module_load_data: "cuModuleLoadData",
    module_unload: "cuModuleUnload",
    module_get_function: "cuModuleGetFunction",
    launch_kernel: "cuLaunchKernel",
    stream_create: "cuStreamCreate",
    stream_query: "cuStreamQuery",
    stream_destroy: "cuStreamDestroy_v2",
    import_external: "cuImportExternalMemory",
    mapped_buffer: "cuExternalMemoryGetMappedBuffer",
    destroy_external: "cuDestroyExternalMemory",
    host_register: "cuMemHostRegister_v2",
    host_unregister: "cuMemHostUnregister",
    handle_for_range: "cuMemGetHandleForAddressRange",
    host_register_route: "cuMemHostRegister",
    host_register_io_route: "cuMemHostRegister(IOMEMORY)",
    import_hint: "",
    host_alloc_flags: 1 | 2, // CU_MEMHOSTALLOC_PORTABLE | DEVICEMAP
    host_register_mapped: 2, // CU_MEMHOSTREGISTER_DEVICEMAP
    host_register_io: 4,     // CU_MEMHOSTREGISTER_IOMEMORY
    stream_non_blocking: 1,  // CU_STREAM_NON_BLOCKING
    not_ready: 600,          // CUDA_ERROR_NOT_READY
    who: "this CUDA driver",
};

pub(crate) struct Cuda {
    rt: Runtime,
    dev: c_int,
    ctx: usize,
    set_current: CuCtxSetCurrent,
    attribute: CuDeviceGetAttribute,
}

fn sym<T: Copy>(rt: &Runtime, name: &str) -> Result<T> {
    // SAFETY: callers name T with the symbol's cuda.h signature; the
    // pointer is used only while `rt` (owned by Cuda) is loaded.
    unsafe { rt.sym::<T>(name) }
        .map(|s| *s)
        .ok_or_else(|| GpuError(format!("this CUDA driver has no {name}")))
}

impl Cuda {
    pub(crate) fn open(rt: Runtime, index: u32) -> Result<Self> {
        let init: CuInit = sym(&rt, "cuInit")?;
        let get: CuDeviceGet = sym(&rt, "cuDeviceGet")?;
        let retain: CuPrimaryCtxRetain = sym(&rt, "cuDevicePrimaryCtxRetain")?;
        let (mut dev, mut ctx) = (0, std::ptr::null_mut());
        // SAFETY: plain calls with out-parameters owned here.
        unsafe {
            rt.check("cuInit", init(0))?;
            rt.check("cuDeviceGet", get(&mut dev, index as c_int))?;
            rt.check("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
        }
        let me = Cuda {
            set_current: sym(&rt, "cuCtxSetCurrent")?,
            attribute: sym(&rt, "cuDeviceGetAttribute")?,
            rt,
            dev,
            ctx: ctx as usize,
        };
        me.bind()?;
        Ok(me)
    }
}

impl Vendor for Cuda {
    const DIALECT: &'static Dialect = &CUDA;

    fn rt(&self) -> &Runtime {
        &self.rt
    }

    fn bind(&self) -> Result<()> {
        // SAFETY: the context was retained in open and lives until drop.
        self.rt.check("cuCtxSetCurrent", unsafe {
            (self.set_current)(self.ctx as *mut c_void)
        })
    }

    fn tick_hz(&self) -> Result<u64> {
        // %globaltimer counts nanoseconds.
        Ok(1_000_000_000)
    }

    fn alloc_uncached(&self, _bytes: usize) -> Result<u64> {
        Err(GpuError(
            "CUDA has no uncached device allocation (payload_memory never asks it for one)".into(),
        ))
    }

    fn export_dmabuf(&self, api: &Api, ptr: u64, bytes: usize) -> Result<OwnedFd> {
        let mut supported = 0;
        // SAFETY: out-parameter owned here.
        self.rt.check("cuDeviceGetAttribute", unsafe {
            (self.attribute)(
                &mut supported,
                CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                self.dev,
            )
        })?;
        if supported == 0 {
            return Err(GpuError(
                "this NVIDIA driver cannot export GPU memory as a dma-buf \
                 (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED is 0: it needs the open kernel modules)"
                    .into(),
            ));
        }
        api.export_range(&self.rt, ptr, bytes).unwrap_or_else(|| {
            Err(GpuError(
                "this CUDA driver has no cuMemGetHandleForAddressRange".into(),
            ))
        })
    }

    fn extra_routes<'a>(&'a self, _region: &Region<'a>) -> Vec<Route<'a>> {
        Vec::new()
    }

    fn release_extra(&self, _undo: Undo) {}
}

impl Drop for Cuda {
    fn drop(&mut self) {
        if let Ok(f) = sym::<CuPrimaryCtxRelease>(&self.rt, "cuDevicePrimaryCtxRelease_v2") {
            // SAFETY: retained once in open.
            unsafe { f(self.dev) };
        }
    }
}
