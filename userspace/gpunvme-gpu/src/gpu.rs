//! One opened GPU, behind the runtime it was found with (HIP or CUDA).

use std::ffi::c_void;
use std::os::fd::OwnedFd;
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
    fn free_device(&self, ptr: u64);
    /// A dma-buf of `bytes` at `ptr` (from alloc_device).
    fn export_dmabuf(&self, ptr: u64, bytes: usize) -> Result<OwnedFd>;
    /// Zeroed host memory mapped for the GPU: (CPU pointer, GPU address).
    fn alloc_host_mapped(&self, bytes: usize) -> Result<(*mut u8, u64)>;
    fn free_host_mapped(&self, cpu: *mut u8);
    fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()>;
    fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()>;
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

/// A GPU opened for use: allocation, export, import, launch.
pub struct Gpu {
    backend: Box<dyn Backend>,
    device: GpuDevice,
    runtime: RuntimeInfo,
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
            backend,
            device,
            runtime,
        })
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
    /// for a running kernel, and each has a 10 s deadline.
    pub fn copy_to_device(&self, dst: u64, src: &[u8]) -> Result<()> {
        self.backend.copy_to_device(dst, src)
    }

    /// Copies device bytes to the host (as [`copy_to_device`](Self::copy_to_device)).
    pub fn copy_from_device(&self, dst: &mut [u8], src: u64) -> Result<()> {
        self.backend.copy_from_device(dst, src)
    }

    /// Loads a code object (AMD ELF, or NUL-terminated PTX for CUDA).
    pub fn load_module(&self, image: &[u8]) -> Result<Module<'_>> {
        let handle = self.backend.load_module(image)?;
        Ok(Module { gpu: self, handle })
    }

    /// Launches `name` from `module` on `grid` workgroups of `block` lanes,
    /// with pointer-sized arguments `args`, on its own stream.
    pub fn launch(
        &self,
        module: &Module<'_>,
        name: &str,
        grid: u32,
        block: u32,
        args: &[u64],
    ) -> Result<Launch<'_>> {
        let func = self.backend.function(module.handle, name)?;
        let mut values: Vec<u64> = args.to_vec();
        let mut params: Vec<*mut c_void> = values
            .iter_mut()
            .map(|v| v as *mut u64 as *mut c_void)
            .collect();
        let stream = self.backend.launch(func, grid, block, &mut params)?;
        Ok(Launch {
            gpu: self,
            stream,
            name: name.to_string(),
        })
    }

    /// Maps `region` into the GPU's address space, trying every route.
    /// Returns the mapping (if a route worked) and the report of every
    /// attempt.
    pub fn import(&self, region: &Region<'_>) -> (Option<Imported<'_>>, ImportReport) {
        let (got, attempts) = try_routes(self.backend.import_routes(region));
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

/// Host memory mapped for the GPU; freed on drop.
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

    /// Pointer to a `T` at byte `offset`, checked to fit and be aligned.
    pub fn at<T>(&self, offset: usize) -> *mut T {
        assert!(
            offset + std::mem::size_of::<T>() <= self.len
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

/// A loaded code object; unloaded on drop.
#[derive(Debug)]
pub struct Module<'g> {
    gpu: &'g Gpu,
    handle: usize,
}

impl Drop for Module<'_> {
    fn drop(&mut self) {
        self.gpu.backend.unload_module(self.handle);
    }
}

/// A running kernel. Dropping it before it finished leaks its stream
/// rather than block: wait for it first.
#[derive(Debug)]
pub struct Launch<'g> {
    gpu: &'g Gpu,
    stream: usize,
    name: String,
}

impl Launch<'_> {
    /// Whether the kernel finished (an error if it faulted).
    pub fn is_done(&self) -> Result<bool> {
        self.gpu.backend.stream_done(self.stream)
    }

    /// Polls until the kernel finishes or `deadline` passes. The device
    /// library bounds each of its waits, so a kernel still running past a
    /// generous deadline is stuck: raise its stop flag and wait again.
    pub fn wait(&self, deadline: Duration) -> Result<()> {
        poll_until(
            &format!("kernel {}", self.name),
            deadline,
            Some(Duration::from_micros(200)),
            || self.is_done(),
        )
    }
}

impl Drop for Launch<'_> {
    fn drop(&mut self) {
        if matches!(self.is_done(), Ok(true)) {
            self.gpu.backend.destroy_stream(self.stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
