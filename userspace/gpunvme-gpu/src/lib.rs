//! GPU runtime glue, loaded at run time.
//!
//! HIP (`libamdhip64.so`, `.so.7`, `.so.6`, `.so.5`) or the CUDA driver API
//! (`libcuda.so.1`) is opened with `dlopen` (libloading), so this crate
//! builds and tests on machines without ROCm or CUDA. [`probe`] says which
//! runtime was found (or, for each library tried, why not), the GPUs it
//! sees, and which doorbell mapping mode the machine can do:
//!
//! - `direct`: the GPU can map the NVMe doorbell page (peer MMIO) into its
//!   address space and ring it itself. This is what the hardware and
//!   runtime allow; it is confirmed only when the module's doorbell dma-buf
//!   is actually imported.
//! - `bridge only`: the GPU can run the queue code but cannot get a
//!   dependable direct doorbell mapping; the module's CPU bridge relays
//!   the doorbell and mirrors the completion queue.
//! - `none`: no usable GPU runtime or no GPU.
//!
//! Both GPU modes need the gpunvme kernel module (the bridge runs in it).
//!
//! The optional `hip-sys` feature (link against ROCm at build time) is
//! declared but needs a ROCm installation; it is not built here.

#[cfg(feature = "hip-sys")]
compile_error!(
    "gpunvme-gpu: the `hip-sys` feature links against ROCm's libamdhip64 at build time and \
     needs a ROCm installation (hipcc, ROCM_PATH). It is not available on this build machine; \
     build without it: the default loads HIP or CUDA at run time with dlopen."
);

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;

use libloading::{Library, Symbol};
use serde::Serialize;

/// Libraries tried by [`probe`], in order.
pub const DEFAULT_LIBRARIES: &[&str] = &[
    "libamdhip64.so",
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libcuda.so.1",
];

/// Which runtime API a library speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// AMD HIP (`libamdhip64`).
    Hip,
    /// NVIDIA CUDA driver API (`libcuda`).
    Cuda,
}

impl RuntimeKind {
    /// The kind a library name implies.
    pub fn for_library(name: &str) -> Self {
        if name.contains("cuda") {
            RuntimeKind::Cuda
        } else {
            RuntimeKind::Hip
        }
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuntimeKind::Hip => "HIP",
            RuntimeKind::Cuda => "CUDA",
        })
    }
}

/// How the GPU can reach the NVMe doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum DoorbellMode {
    /// No GPU path at all.
    #[serde(rename = "none")]
    None,
    /// Only through the module's CPU bridge.
    #[serde(rename = "bridge only")]
    BridgeOnly,
    /// The GPU maps and rings the doorbell itself.
    #[serde(rename = "direct")]
    Direct,
}

impl fmt::Display for DoorbellMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DoorbellMode::None => "none",
            DoorbellMode::BridgeOnly => "bridge only",
            DoorbellMode::Direct => "direct",
        })
    }
}

/// One library [`probe`] tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Attempt {
    /// The name passed to dlopen.
    pub library: String,
    /// Whether it loaded and answered with at least one device.
    pub ok: bool,
    /// What happened: the dlopen error, a missing symbol, a runtime error,
    /// or the number of devices found.
    pub outcome: String,
}

/// A GPU as the runtime reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    /// Runtime device index.
    pub index: u32,
    /// Marketing name.
    pub name: String,
    /// Architecture: `gfxNNNN` (HIP) or `sm_NN` (CUDA); `unknown` if the
    /// runtime did not say.
    pub arch: String,
    /// PCI address, when the runtime reports it.
    pub pci_bus_id: Option<String>,
    /// Doorbell mode this device can do.
    pub doorbell: DoorbellMode,
    /// Why.
    pub reason: String,
}

/// The loaded runtime.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuntimeInfo {
    /// Which API.
    pub kind: RuntimeKind,
    /// The library that was loaded.
    pub library: String,
    /// The runtime's or driver's version number, if it reports one.
    pub version: Option<i32>,
}

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProbeReport {
    /// The runtime in use, if any loaded.
    pub runtime: Option<RuntimeInfo>,
    /// Every library tried, in order, and what happened.
    pub attempts: Vec<Attempt>,
    /// GPUs found by the runtime.
    pub devices: Vec<GpuDevice>,
    /// The best doorbell mode any device can do.
    pub doorbell: DoorbellMode,
    /// Why that mode.
    pub reason: String,
}

/// Doorbell mode of one device, from what the runtime tells about it.
/// `peer_mmio_register` is whether the CUDA driver exports
/// `cuMemHostRegister_v2` (mapping peer I/O memory with
/// `CU_MEMHOSTREGISTER_IOMEMORY`); it is ignored for HIP.
pub fn classify(kind: RuntimeKind, arch: &str, peer_mmio_register: bool) -> (DoorbellMode, String) {
    match kind {
        RuntimeKind::Hip => {
            let Some(num) = arch.strip_prefix("gfx") else {
                return (
                    DoorbellMode::BridgeOnly,
                    format!("unknown AMD architecture `{arch}`: direct doorbell mapping unverified, the CPU bridge relays the doorbell"),
                );
            };
            let cdna = matches!(num, "906" | "908" | "90a" | "940" | "941" | "942" | "950")
                || num.starts_with("94")
                || num.starts_with("95");
            if cdna {
                (
                    DoorbellMode::Direct,
                    format!(
                        "{arch} is a data-center (Instinct) GPU: amdgpu imports the doorbell dma-buf as a \
                         peer-to-peer BO; confirmed when the module's dma-buf import succeeds"
                    ),
                )
            } else if num.starts_with("10") || num.starts_with("11") || num.starts_with("12") {
                (
                    DoorbellMode::BridgeOnly,
                    format!(
                        "{arch} is consumer RDNA: KFD rejects foreign dma-bufs (GET_DMABUF_INFO) and P2P doorbell \
                         writes are not dependable on these stacks; the CPU bridge relays the doorbell"
                    ),
                )
            } else {
                (
                    DoorbellMode::BridgeOnly,
                    format!("{arch}: no known peer-to-peer doorbell path; the CPU bridge relays the doorbell"),
                )
            }
        }
        RuntimeKind::Cuda => {
            let sm = arch.strip_prefix("sm_").and_then(|s| s.parse::<u32>().ok());
            match sm {
                Some(v) if v >= 60 && peer_mmio_register => (
                    DoorbellMode::Direct,
                    format!(
                        "{arch}: the CUDA driver can map the doorbell page as peer I/O memory \
                         (cuMemHostRegister with CU_MEMHOSTREGISTER_IOMEMORY); confirmed at queue creation"
                    ),
                ),
                Some(v) if v >= 60 => (
                    DoorbellMode::BridgeOnly,
                    format!("{arch}: this CUDA driver lacks cuMemHostRegister_v2; the CPU bridge relays the doorbell"),
                ),
                _ => (
                    DoorbellMode::BridgeOnly,
                    format!("{arch}: below sm_60, no peer-to-peer MMIO mapping; the CPU bridge relays the doorbell"),
                ),
            }
        }
    }
}

/// Probes the default libraries ([`DEFAULT_LIBRARIES`]).
pub fn probe() -> ProbeReport {
    probe_with(DEFAULT_LIBRARIES)
}

/// Probes the given libraries in order; the first that loads and reports
/// at least one GPU wins.
pub fn probe_with(libraries: &[&str]) -> ProbeReport {
    let mut attempts = Vec::new();
    let mut first_loaded: Option<RuntimeInfo> = None;
    for &lib in libraries {
        let kind = RuntimeKind::for_library(lib);
        let rt = match Runtime::load(lib, kind) {
            Ok(rt) => rt,
            Err(e) => {
                attempts.push(Attempt {
                    library: lib.into(),
                    ok: false,
                    outcome: e,
                });
                continue;
            }
        };
        let info = RuntimeInfo {
            kind,
            library: lib.into(),
            version: rt.version(),
        };
        match rt.devices() {
            Ok(devs) if !devs.is_empty() => {
                attempts.push(Attempt {
                    library: lib.into(),
                    ok: true,
                    outcome: format!("loaded; {} device(s)", devs.len()),
                });
                let best = devs.iter().max_by_key(|d| d.doorbell).unwrap();
                let (doorbell, reason) = (
                    best.doorbell,
                    format!("device {} ({}): {}", best.index, best.name, best.reason),
                );
                return ProbeReport {
                    runtime: Some(info),
                    attempts,
                    devices: devs,
                    doorbell,
                    reason,
                };
            }
            Ok(_) => attempts.push(Attempt {
                library: lib.into(),
                ok: false,
                outcome: "loaded; no devices".into(),
            }),
            Err(e) => attempts.push(Attempt {
                library: lib.into(),
                ok: false,
                outcome: format!("loaded; {e}"),
            }),
        }
        first_loaded.get_or_insert(info);
    }
    let reason = match &first_loaded {
        Some(rt) => format!(
            "the {} runtime ({}) loaded but found no GPU",
            rt.kind, rt.library
        ),
        None => {
            "no GPU runtime library could be loaded (tried: ".to_string()
                + &libraries.join(", ")
                + ")"
        }
    };
    ProbeReport {
        runtime: first_loaded,
        attempts,
        devices: Vec::new(),
        doorbell: DoorbellMode::None,
        reason,
    }
}

/// A loaded runtime library. Symbols are looked up per call and only used
/// while `lib` is alive.
struct Runtime {
    lib: Library,
    kind: RuntimeKind,
}

type HipGetDeviceCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipGetDeviceProperties = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type HipDeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type HipRuntimeGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type HipGetErrorName = unsafe extern "C" fn(c_int) -> *const c_char;

type CuInit = unsafe extern "C" fn(c_uint) -> c_int;
type CuDriverGetVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGetCount = unsafe extern "C" fn(*mut c_int) -> c_int;
type CuDeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type CuDeviceGetName = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuDeviceGetAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type CuDeviceGetPciBusId = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
type CuGetErrorName = unsafe extern "C" fn(c_int, *mut *const c_char) -> c_int;

const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;

/// Big enough for every `hipDeviceProp_t` layout so far (R0000: ~800
/// bytes, R0600: ~1.5 KiB).
const HIP_PROPS_BYTES: usize = 16 * 1024;

fn cstr_buf(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
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
    fn load(name: &str, kind: RuntimeKind) -> Result<Self, String> {
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

    fn has(&self, name: &str) -> bool {
        // SAFETY: only the symbol's presence is checked; the pointer is not used.
        unsafe { self.lib.get::<*const c_void>(name.as_bytes()) }.is_ok()
    }

    /// # Safety
    /// `T` must be the symbol's real C signature.
    unsafe fn sym<T>(&self, name: &str) -> Option<Symbol<'_, T>> {
        // SAFETY: forwarded to the caller.
        unsafe { self.lib.get::<T>(name.as_bytes()) }.ok()
    }

    fn err_name(&self, code: c_int) -> String {
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

    fn check(&self, what: &str, code: c_int) -> Result<(), String> {
        if code == 0 {
            Ok(())
        } else {
            Err(format!("{what} failed: {}", self.err_name(code)))
        }
    }

    fn version(&self) -> Option<i32> {
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

    fn devices(&self) -> Result<Vec<GpuDevice>, String> {
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
            let bus_fn = self.sym::<HipDeviceGetPciBusId>("hipDeviceGetPCIBusId");
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
                let pci_bus_id = bus_fn.as_ref().and_then(|f| {
                    let mut b = [0 as c_char; 64];
                    (f(b.as_mut_ptr(), b.len() as c_int, i) == 0)
                        .then(|| cstr_buf(&b).to_lowercase())
                });
                let (doorbell, reason) = classify(RuntimeKind::Hip, &arch, false);
                out.push(GpuDevice {
                    index: i as u32,
                    name: cstr_buf(&name),
                    arch,
                    pci_bus_id,
                    doorbell,
                    reason,
                });
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
            let bus_fn = self.sym::<CuDeviceGetPciBusId>("cuDeviceGetPCIBusId");
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
                let pci_bus_id = bus_fn.as_ref().and_then(|f| {
                    let mut b = [0 as c_char; 64];
                    (f(b.as_mut_ptr(), b.len() as c_int, dev) == 0)
                        .then(|| cstr_buf(&b).to_lowercase())
                });
                let (doorbell, reason) = classify(RuntimeKind::Cuda, &arch, iomem);
                out.push(GpuDevice {
                    index: i as u32,
                    name: cstr_buf(&name),
                    arch,
                    pci_bus_id,
                    doorbell,
                    reason,
                });
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_libraries_are_each_reported() {
        let r = probe_with(&[
            "libgpunvme-test-nonexistent-a.so",
            "libgpunvme-test-nonexistent-b.so.1",
        ]);
        assert_eq!(r.doorbell, DoorbellMode::None);
        assert!(r.runtime.is_none());
        assert!(r.devices.is_empty());
        assert_eq!(r.attempts.len(), 2);
        for a in &r.attempts {
            assert!(!a.ok);
            assert!(a.outcome.starts_with("dlopen failed:"), "{}", a.outcome);
            assert!(a.outcome.contains(&a.library), "{}", a.outcome);
        }
        assert!(r.reason.contains("no GPU runtime library"), "{}", r.reason);
    }

    #[test]
    fn a_library_that_is_not_a_runtime_is_rejected() {
        // libc loads everywhere but exports neither HIP nor CUDA.
        let r = probe_with(&["libc.so.6"]);
        assert_eq!(r.doorbell, DoorbellMode::None);
        assert!(
            r.attempts[0].outcome.contains("has no `hipGetDeviceCount`"),
            "{:?}",
            r.attempts
        );
    }

    #[test]
    fn default_list_is_hip_first_then_cuda() {
        assert_eq!(DEFAULT_LIBRARIES.first(), Some(&"libamdhip64.so"));
        assert_eq!(DEFAULT_LIBRARIES.last(), Some(&"libcuda.so.1"));
        assert_eq!(RuntimeKind::for_library("libcuda.so.1"), RuntimeKind::Cuda);
        assert_eq!(
            RuntimeKind::for_library("libamdhip64.so.6"),
            RuntimeKind::Hip
        );
    }

    #[test]
    fn classification() {
        assert_eq!(
            classify(RuntimeKind::Hip, "gfx942", false).0,
            DoorbellMode::Direct
        );
        assert_eq!(
            classify(RuntimeKind::Hip, "gfx90a", false).0,
            DoorbellMode::Direct
        );
        let (m, why) = classify(RuntimeKind::Hip, "gfx1100", false);
        assert_eq!(m, DoorbellMode::BridgeOnly);
        assert!(why.contains("RDNA"), "{why}");
        assert_eq!(
            classify(RuntimeKind::Hip, "gfx1201", false).0,
            DoorbellMode::BridgeOnly
        );
        assert_eq!(
            classify(RuntimeKind::Hip, "unknown", false).0,
            DoorbellMode::BridgeOnly
        );
        assert_eq!(
            classify(RuntimeKind::Cuda, "sm_90", true).0,
            DoorbellMode::Direct
        );
        assert_eq!(
            classify(RuntimeKind::Cuda, "sm_90", false).0,
            DoorbellMode::BridgeOnly
        );
        assert_eq!(
            classify(RuntimeKind::Cuda, "sm_52", true).0,
            DoorbellMode::BridgeOnly
        );
        assert!(
            DoorbellMode::Direct > DoorbellMode::BridgeOnly
                && DoorbellMode::BridgeOnly > DoorbellMode::None
        );
        assert_eq!(DoorbellMode::BridgeOnly.to_string(), "bridge only");
    }

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
