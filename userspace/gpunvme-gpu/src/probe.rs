// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which GPU runtime this machine has, which GPUs it sees, and which
//! doorbell mapping mode each can do (`gpunvme probe`).

use std::fmt;

use serde::Serialize;

use crate::runtime::Runtime;

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
    /// Only through the module's CPU bridge: shared queue pairs (the
    /// default; their doorbell cells are memory).
    #[serde(rename = "bridge only")]
    BridgeOnly,
    /// The GPU can map and ring the controller's doorbell itself, as raw
    /// queue pairs in owner mode need; shared pairs work too.
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
    /// Where its queue pairs' CQs should live (`gpu-run --cq`).
    pub cq: CqPlacement,
    /// Why.
    pub cq_reason: String,
    /// The GPU memory type its queue regions are mapped with, and which
    /// import routes may map them ([`crate::mem_type::describe_policy`]).
    pub queue_memory: String,
}

/// Where a queue pair's CQ lives, chosen apart from the doorbell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CqPlacement {
    /// No GPU path.
    None,
    /// The module's mirror of a shared pair (written by its relay, a CPU
    /// thread, in host memory).
    Mirror,
    /// GPU memory exported as a dma-buf, written by the controller peer to
    /// peer (an owner's raw pair, `GPUNVME_QPAIR_CQ_IN_MAP`).
    Gpu,
}

impl fmt::Display for CqPlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CqPlacement::None => "none",
            CqPlacement::Mirror => "shared pairs' mirror (host memory, written by the relay)",
            CqPlacement::Gpu => "GPU memory (--owner --cq gpu)",
        })
    }
}

/// Where the CQ should live for a device of `kind`/`arch` whose doorbell
/// mode is `doorbell` ([`classify`]).
pub fn recommend_cq(
    kind: RuntimeKind,
    arch: &str,
    doorbell: DoorbellMode,
) -> (CqPlacement, String) {
    let rdna = kind == RuntimeKind::Hip
        && ["gfx10", "gfx11", "gfx12"]
            .iter()
            .any(|p| arch.starts_with(p));
    match doorbell {
        DoorbellMode::None => (CqPlacement::None, "no GPU path".into()),
        DoorbellMode::BridgeOnly if rdna => (
            CqPlacement::Mirror,
            format!(
                "{arch}: shared pairs, whose CQ mirror the relay writes from the CPU; never a host CQ the \
                 controller writes peer to peer, which the field report found stale on RDNA. If this GPU's \
                 doorbell import does work (--owner), put the CQ in GPU memory (--cq gpu)"
            ),
        ),
        DoorbellMode::BridgeOnly => (
            CqPlacement::Mirror,
            format!("{arch}: shared pairs only, so the CQ is the module's mirror; a CQ in GPU memory needs an owner's raw pair"),
        ),
        DoorbellMode::Direct => (
            CqPlacement::Gpu,
            match kind {
                RuntimeKind::Cuda => format!(
                    "{arch}: each poll stays in device memory: 18 ns per CQE poll against 933 ns in host \
                     memory on an H200 (kernels/bench/results/h200-v4); a host CQ works too"
                ),
                RuntimeKind::Hip => format!(
                    "{arch}: each poll stays in local memory instead of crossing PCIe (measured on NVIDIA \
                     only: 18 against 933 ns per poll); a host CQ works too on this family"
                ),
            },
        ),
    }
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
                Some(v) if v >= 70 && peer_mmio_register => (
                    DoorbellMode::Direct,
                    format!(
                        "{arch}: the CUDA driver can map the doorbell page as peer I/O memory \
                         (cuMemHostRegister with CU_MEMHOSTREGISTER_IOMEMORY); confirmed at queue creation"
                    ),
                ),
                Some(v) if v >= 70 => (
                    DoorbellMode::BridgeOnly,
                    format!("{arch}: this CUDA driver lacks cuMemHostRegister_v2; the CPU bridge relays the doorbell"),
                ),
                _ => (
                    DoorbellMode::None,
                    format!(
                        "{arch}: below sm_70; the device library's system-scope fences need sm_70 or newer"
                    ),
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
        assert_eq!(
            recommend_cq(RuntimeKind::Hip, "gfx1100", DoorbellMode::BridgeOnly).0,
            CqPlacement::Mirror
        );
        assert!(
            recommend_cq(RuntimeKind::Hip, "gfx1100", DoorbellMode::BridgeOnly)
                .1
                .contains("stale")
        );
        assert_eq!(
            recommend_cq(RuntimeKind::Hip, "gfx942", DoorbellMode::Direct).0,
            CqPlacement::Gpu
        );
        assert_eq!(
            recommend_cq(RuntimeKind::Cuda, "sm_90", DoorbellMode::Direct).0,
            CqPlacement::Gpu
        );
        assert_eq!(
            recommend_cq(RuntimeKind::Cuda, "sm_60", DoorbellMode::None).0,
            CqPlacement::None
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
            classify(RuntimeKind::Cuda, "sm_60", true).0,
            DoorbellMode::None
        );
        assert_eq!(
            classify(RuntimeKind::Cuda, "sm_70", true).0,
            DoorbellMode::Direct
        );
        assert!(
            DoorbellMode::Direct > DoorbellMode::BridgeOnly
                && DoorbellMode::BridgeOnly > DoorbellMode::None
        );
        assert_eq!(DoorbellMode::BridgeOnly.to_string(), "bridge only");
    }
}
