// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A GPU runtime library opened with dlopen: symbol lookup, error names,
//! version and device discovery for HIP (`libamdhip64`) and the CUDA driver
//! API (`libcuda`).

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use libloading::{Library, Symbol};

use crate::error::GpuError;
use crate::probe::{classify, GpuDevice, RuntimeKind};

/// A loaded runtime library. Symbols are looked up per call and only used
/// while `lib` is alive.
pub(crate) struct Runtime {
    lib: Library,
    kind: RuntimeKind,
}

type HipGetDeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipGetDeviceProperties = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
/// `hipDeviceGetPCIBusId` and `cuDeviceGetPCIBusId` alike.
type GetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipRuntimeGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipGetErrorName = unsafe extern "C" fn(c_int) -> *const c_char;

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// Big enough for every `hipDeviceProp_t` layout so far (R0000: ~800
/// bytes, R0600: ~1.5 KiB).
const HIP_PROPS_BYTES: usize = 16 * 1024;

pub(crate) fn cstr_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A discovered device: its PCI address asked of `bus_id` (for runtime
/// handle `dev`) when the runtime has that call, and its doorbell mode.
fn gpu_device(
    kind: RuntimeKind,
    index: c_int,
    name: &[c_char],
    arch: String,
    bus_id: Option<&GetPciBusId>,
    dev: c_int,
    peer_mmio_register: bool,
) -> GpuDevice {
    let pci_bus_id = bus_id.and_then(|f| {
        let mut b = [0 as c_char; 64];
        // SAFETY: the runtime writes at most b.len() bytes into our buffer.
        (unsafe { f(b.as_mut_ptr(), b.len() as c_int, dev) } == 0)
            .then(|| cstr_buf(&b).to_lowercase())
    });
    let (doorbell, reason) = classify(kind, &arch, peer_mmio_register);
    let (cq, cq_reason) = crate::probe::recommend_cq(kind, &arch, doorbell);
    let queue_memory = crate::mem_type::describe_policy(kind, &arch);
    GpuDevice {
        index: index as u32,
        name: cstr_buf(name),
        arch,
        pci_bus_id,
        doorbell,
        reason,
        cq,
        cq_reason,
        queue_memory,
    }
}

/// Finds the `gcnArchName` string (e.g. `gfx90a:sramecc+:xnack-`) in a
/// `hipDeviceProp_t` without depending on its layout, which changed
/// between ROCm releases: the first NUL-terminated string starting with
/// `gfx` after the 256-byte `name`. Returns the bare architecture.
pub fn find_gcn_arch(props: &[u8]) -> Option<String> {
    let start = 256.min(props.len());
    let hay = &props[start..];
    let mut i = 0;
    while i + 3 <= hay.len() {
        if &hay[i..i + 3] == b"gfx" && (i == 0 || hay[i - 1] == 0) {
            let end = hay[i..].iter().position(|&b| b == 0).map(|p| i + p)?;
            let s = std::str::from_utf8(&hay[i..end]).ok()?;
            let arch = s.split(':').next()?;
            if arch.len() > 3 && arch[3..].bytes().all(|b| b.is_ascii_alphanumeric()) {
                return Some(arch.to_string());
            }
        }
        i += 1;
    }
    None
}

impl Runtime {
    pub(crate) fn load(name: &str, kind: RuntimeKind) -> Result<Self, String> {
        // SAFETY: loading a shared library runs its initializers; the GPU
        // runtimes' initializers are designed to run in arbitrary processes.
        let lib = unsafe { Library::new(name) }.map_err(|e| format!("dlopen failed: {e}"))?;
        let rt = Runtime { lib, kind };
        let needed: &[&str] = match kind {
            RuntimeKind::Hip => &["hipGetDeviceCount", "hipDeviceGetName"],
            RuntimeKind::Cuda => &[
                "cuInit",
                "cuDeviceGetCount",
                "cuDeviceGet",
                "cuDeviceGetName",
                "cuDeviceGetAttribute",
            ],
        };
        for s in needed {
            if !rt.has(s) {
                return Err(format!("loaded, but it has no `{s}`: not a {kind} runtime"));
            }
        }
        Ok(rt)
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        // SAFETY: only the symbol's presence is checked; the pointer is not used.
        unsafe { self.lib.get::<*const c_void>(name.as_bytes()) }.is_ok()
    }

    /// # Safety
    /// `T` must be the symbol's real C signature.
    pub(crate) unsafe fn sym<T>(&self, name: &str) -> Option<Symbol<'_, T>> {
        // SAFETY: forwarded to the caller.
        unsafe { self.lib.get::<T>(name.as_bytes()) }.ok()
    }

    pub(crate) fn err_name(&self, code: c_int) -> String {
        // SAFETY: signatures as in hip_runtime_api.h / cuda.h; the returned
        // strings are static in the runtime.
        unsafe {
            match self.kind {
                RuntimeKind::Hip => {
                    if let Some(f) = self.sym::<HipGetErrorName>("hipGetErrorName") {
                        let p = f(code);
                        if !p.is_null() {
                            return format!("{} ({code})", CStr::from_ptr(p).to_string_lossy());
                        }
                    }
                }
                RuntimeKind::Cuda => {
                    if let Some(f) = self.sym::<CuGetErrorName>("cuGetErrorName") {
                        let mut p: *const c_char = std::ptr::null();
                        if f(code, &mut p) == 0 && !p.is_null() {
                            return format!("{} ({code})", CStr::from_ptr(p).to_string_lossy());
                        }
                    }
                }
            }
        }
        format!("error {code}")
    }

    pub(crate) fn check(&self, what: &str, code: c_int) -> Result<(), GpuError> {
        if code == 0 {
            Ok(())
        } else {
            Err(GpuError(format!("{what} failed: {}", self.err_name(code))))
        }
    }

    pub(crate) fn version(&self) -> Option<i32> {
        let mut v: c_int = 0;
        // SAFETY: both take an int* out-parameter, valid for the call.
        let code = unsafe {
            match self.kind {
                RuntimeKind::Hip => {
                    self.sym::<HipRuntimeGetVersion>("hipRuntimeGetVersion")?(&mut v)
                }
                RuntimeKind::Cuda => self.sym::<CuDriverGetVersion>("cuDriverGetVersion")?(&mut v),
            }
        };
        (code == 0).then_some(v)
    }

    pub(crate) fn devices(&self) -> Result<Vec<GpuDevice>, String> {
        match self.kind {
            RuntimeKind::Hip => self.hip_devices(),
            RuntimeKind::Cuda => self.cuda_devices(),
        }
    }

    fn hip_devices(&self) -> Result<Vec<GpuDevice>, String> {
        // SAFETY: every call below uses the signature from
        // hip_runtime_api.h with out-buffers owned here and sized as passed.
        unsafe {
            let count_fn = self
                .sym::<HipGetDeviceCount>("hipGetDeviceCount")
                .ok_or("no hipGetDeviceCount")?;
            let mut n: c_int = 0;
            self.check("hipGetDeviceCount", count_fn(&mut n))?;
            let name_fn = self
                .sym::<HipDeviceGetName>("hipDeviceGetName")
                .ok_or("no hipDeviceGetName")?;
            let props_fn = self
                .sym::<HipGetDeviceProperties>("hipGetDevicePropertiesR0600")
                .or_else(|| self.sym::<HipGetDeviceProperties>("hipGetDeviceProperties"));
            let bus_fn = self.sym::<GetPciBusId>("hipDeviceGetPCIBusId");
            let mut out = Vec::new();
            for i in 0..n.max(0) {
                let mut name = [0 as c_char; 256];
                self.check(
                    "hipDeviceGetName",
                    name_fn(name.as_mut_ptr(), name.len() as c_int, i),
                )?;
                let arch = props_fn
                    .as_ref()
                    .and_then(|f| {
                        // u64 storage: the struct holds size_t fields.
                        let mut buf = vec![0u64; HIP_PROPS_BYTES / 8];
                        if f(buf.as_mut_ptr().cast(), i) != 0 {
                            return None;
                        }
                        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
                        find_gcn_arch(&bytes)
                    })
                    .unwrap_or_else(|| "unknown".into());
                out.push(gpu_device(
                    RuntimeKind::Hip,
                    i,
                    &name,
                    arch,
                    bus_fn.as_deref(),
                    i,
                    false,
                ));
            }
            Ok(out)
        }
    }

    fn cuda_devices(&self) -> Result<Vec<GpuDevice>, String> {
        // SAFETY: signatures from cuda.h; out-parameters are owned here.
        unsafe {
            let init = self.sym::<CuInit>("cuInit").ok_or("no cuInit")?;
            self.check("cuInit", init(0))?;
            let count_fn = self
                .sym::<CuDeviceGetCount>("cuDeviceGetCount")
                .ok_or("no cuDeviceGetCount")?;
            let get = self
                .sym::<CuDeviceGet>("cuDeviceGet")
                .ok_or("no cuDeviceGet")?;
            let name_fn = self
                .sym::<CuDeviceGetName>("cuDeviceGetName")
                .ok_or("no cuDeviceGetName")?;
            let attr = self
                .sym::<CuDeviceGetAttribute>("cuDeviceGetAttribute")
                .ok_or("no cuDeviceGetAttribute")?;
            let bus_fn = self.sym::<GetPciBusId>("cuDeviceGetPCIBusId");
            let iomem = self.has("cuMemHostRegister_v2");
            let mut n: c_int = 0;
            self.check("cuDeviceGetCount", count_fn(&mut n))?;
            let mut out = Vec::new();
            for i in 0..n.max(0) {
                let mut dev: c_int = 0;
                self.check("cuDeviceGet", get(&mut dev, i))?;
                let mut name = [0 as c_char; 256];
                self.check(
                    "cuDeviceGetName",
                    name_fn(name.as_mut_ptr(), name.len() as c_int, dev),
                )?;
                let (mut major, mut minor) = (0, 0);
                self.check(
                    "cuDeviceGetAttribute",
                    attr(
                        &mut major,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        dev,
                    ),
                )?;
                self.check(
                    "cuDeviceGetAttribute",
                    attr(
                        &mut minor,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                        dev,
                    ),
                )?;
                let arch = format!("sm_{major}{minor}");
                out.push(gpu_device(
                    RuntimeKind::Cuda,
                    i,
                    &name,
                    arch,
                    bus_fn.as_deref(),
                    dev,
                    iomem,
                ));
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_gcn_arch_name_anywhere_after_name() {
        let mut props = vec![0u8; 2048];
        props[..10].copy_from_slice(b"gfx-ignore");
        let s = b"gfx90a:sramecc+:xnack-\0";
        props[1000..1000 + s.len()].copy_from_slice(s);
        assert_eq!(find_gcn_arch(&props).as_deref(), Some("gfx90a"));

        let mut props = vec![0u8; 1024];
        props[600..608].copy_from_slice(b"gfx1100\0");
        assert_eq!(find_gcn_arch(&props).as_deref(), Some("gfx1100"));

        // "gfx" in the middle of another string is not a match.
        let mut props = vec![0u8; 1024];
        props[300..310].copy_from_slice(b"xxgfx1100\0");
        assert_eq!(find_gcn_arch(&props), None);
    }
}
