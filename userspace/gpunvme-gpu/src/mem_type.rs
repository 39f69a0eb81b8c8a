// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which GPU memory type each imported queue region is mapped with, and
//! which import routes may be used for it.
//!
//! RDNA2/3 (gfx10, gfx11) map a foreign dma-buf imported with the default
//! memory type NC: cached in GL2, which these families can neither write
//! back nor invalidate from a kernel (their system-scope release is only
//! waits, their acquire drops GL0/GL1 only). An SQE can then stay in GL2
//! while the relay or the controller reads the previous lap from memory,
//! and a CQE the relay mirrored can hide behind a stale GL2 line until the
//! wait times out (review s3, 2.4). So on those families every queue
//! region (SQ, doorbell cells or page, CQ or CQ mirror, PRP pool) is
//! mapped uncached (`AMDGPU_VM_MTYPE_UC`), and only the libdrm route
//! (`amdgpu_bo_import` + a GPU VA map) can say so: every other route
//! (`hipImportExternalMemory`, `hsa_amd_interop_map_buffer`,
//! `hipHostRegister`) leaves the choice to the runtime and is refused
//! there, with an error naming the region and the alternative. gfx12
//! (scope:SCOPE_SYS cache control) and CDNA (buffer_wbl2 / buffer_inv)
//! tolerate NC by construction; MMIO is mapped uncached everywhere.

use serde::Serialize;

use crate::import::Route;
use crate::probe::RuntimeKind;

/// The one route that sets the memory type (hip.rs).
pub const LIBDRM_ROUTE: &str = "amdgpu_bo_import + GPU VA map (libdrm)";

/// How a region is mapped into the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum MemType {
    /// `AMDGPU_VM_MTYPE_UC`: every access goes to memory.
    Uncached,
    /// The kernel driver's default for the buffer object (NC for a
    /// foreign dma-buf on gfx10/11; what NVIDIA and CDNA are fine with).
    Default,
    /// Whatever the runtime chose: the route cannot set it.
    RuntimeChosen,
}

impl std::fmt::Display for MemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MemType::Uncached => "uncached (AMDGPU_VM_MTYPE_UC)",
            MemType::Default => "the driver's default",
            MemType::RuntimeChosen => "the runtime's choice (not settable on this route)",
        })
    }
}

/// gfx10/gfx11 targets, exact or generic (gfx1030, gfx1101,
/// gfx10-3-generic, gfx11-generic), whose queue memory must be uncached.
pub fn needs_uncached(kind: RuntimeKind, arch: &str) -> bool {
    kind == RuntimeKind::Hip && (arch.starts_with("gfx10") || arch.starts_with("gfx11"))
}

/// The memory type the libdrm route maps a region with.
pub fn libdrm_mem_type(kind: RuntimeKind, arch: &str, mmio: bool) -> MemType {
    if mmio || needs_uncached(kind, arch) {
        MemType::Uncached
    } else {
        MemType::Default
    }
}

/// The memory type a successful `route` mapped a region with.
pub fn of_route(kind: RuntimeKind, arch: &str, route: &str, mmio: bool) -> MemType {
    if route == LIBDRM_ROUTE {
        libdrm_mem_type(kind, arch, mmio)
    } else {
        MemType::RuntimeChosen
    }
}

/// Why `route` may not map region `what` on this GPU, if it may not.
pub fn refusal(kind: RuntimeKind, arch: &str, what: &str, route: &str) -> Option<String> {
    if route == LIBDRM_ROUTE || !needs_uncached(kind, arch) {
        return None;
    }
    Some(format!(
        "refused for {what}: {route} cannot set the GPU memory type, and on {arch} (RDNA2/3) every \
         queue region must be mapped uncached (AMDGPU_VM_MTYPE_UC) or SQEs and CQEs can stay behind \
         GL2; only the libdrm route ({LIBDRM_ROUTE}) sets it: make libdrm_amdgpu.so.1 and this GPU's \
         render node (/dev/dri/renderD*) available to this process"
    ))
}

/// `routes` with every one that may not map region `what` on this GPU
/// replaced by an attempt that fails with the refusal (so the report
/// still lists it, and says why it was not tried).
pub(crate) fn gate<'a>(
    kind: RuntimeKind,
    arch: &str,
    what: &str,
    routes: Vec<Route<'a>>,
) -> Vec<Route<'a>> {
    routes
        .into_iter()
        .map(|(name, attempt)| match refusal(kind, arch, what, name) {
            Some(why) => {
                drop(attempt);
                let r: Route<'a> = (name, Box::new(move || Err(why)));
                r
            }
            None => (name, attempt),
        })
        .collect()
}

/// What every queue region is mapped with on this GPU (for `gpunvme
/// probe`): one line.
pub fn describe_policy(kind: RuntimeKind, arch: &str) -> String {
    if needs_uncached(kind, arch) {
        format!(
            "{arch}: every queue region (SQ, doorbell cells, CQ mirror, PRP pool) mapped {} through \
             the libdrm route only; routes that cannot set the memory type are refused",
            MemType::Uncached
        )
    } else if kind == RuntimeKind::Hip {
        format!(
            "{arch}: queue memory mapped with {} (this family's release/acquire reach its caches), \
             MMIO {}",
            MemType::Default,
            MemType::Uncached
        )
    } else {
        format!("{arch}: queue memory mapped as the runtime imports it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::{try_routes, Undo};

    const RDNA23: [&str; 6] = [
        "gfx1030",
        "gfx1100",
        "gfx1101",
        "gfx1102",
        "gfx10-3-generic",
        "gfx11-generic",
    ];
    const OTHERS: [&str; 4] = ["gfx1201", "gfx12-generic", "gfx90a", "gfx942"];

    #[test]
    fn rdna2_and_3_map_every_region_uncached_through_libdrm() {
        for arch in RDNA23 {
            for mmio in [false, true] {
                assert_eq!(
                    libdrm_mem_type(RuntimeKind::Hip, arch, mmio),
                    MemType::Uncached,
                    "{arch} mmio {mmio}"
                );
                assert_eq!(
                    of_route(RuntimeKind::Hip, arch, LIBDRM_ROUTE, mmio),
                    MemType::Uncached
                );
            }
        }
    }

    #[test]
    fn other_families_keep_the_default_for_memory_and_uncached_mmio() {
        for arch in OTHERS {
            assert_eq!(
                libdrm_mem_type(RuntimeKind::Hip, arch, false),
                MemType::Default,
                "{arch}"
            );
            assert_eq!(
                libdrm_mem_type(RuntimeKind::Hip, arch, true),
                MemType::Uncached
            );
            assert!(refusal(RuntimeKind::Hip, arch, "q1 SQ", "hipHostRegister").is_none());
        }
        assert!(!needs_uncached(RuntimeKind::Cuda, "sm_90"));
        assert!(refusal(RuntimeKind::Cuda, "sm_90", "q1 SQ", "cuMemHostRegister").is_none());
    }

    #[test]
    fn a_route_that_cannot_set_the_type_is_refused_on_rdna_naming_region_and_alternative() {
        for route in [
            "hipImportExternalMemory",
            "hsa_amd_interop_map_buffer",
            "hipHostRegister",
        ] {
            let why = refusal(RuntimeKind::Hip, "gfx1101", "q3 CQ mirror (shared)", route)
                .expect("refused on gfx1101");
            assert!(why.contains("q3 CQ mirror (shared)"), "{why}");
            assert!(why.contains(route), "{why}");
            assert!(
                why.contains(LIBDRM_ROUTE) && why.contains("MTYPE_UC"),
                "{why}"
            );
            assert_eq!(
                of_route(RuntimeKind::Hip, "gfx1101", route, false),
                MemType::RuntimeChosen
            );
        }
        assert!(refusal(RuntimeKind::Hip, "gfx1101", "q3 SQ", LIBDRM_ROUTE).is_none());
    }

    #[test]
    fn gate_never_runs_a_refused_route_and_reports_it() {
        let (hip, drm) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let routes: Vec<Route<'_>> = vec![
            (
                "hipImportExternalMemory",
                Box::new(|| {
                    hip.set(hip.get() + 1);
                    Ok((0x1000, Undo::HostRegister { cpu: 1 }))
                }),
            ),
            (
                LIBDRM_ROUTE,
                Box::new(|| {
                    drm.set(drm.get() + 1);
                    Ok((0x2000, Undo::HostRegister { cpu: 2 }))
                }),
            ),
        ];
        let (got, attempts) = try_routes(gate(
            RuntimeKind::Hip,
            "gfx11-generic",
            "q1 shadow SQ",
            routes,
        ));
        let (ptr, _, route) = got.expect("libdrm maps it");
        assert_eq!((ptr, route), (0x2000, LIBDRM_ROUTE));
        assert!(!attempts[0].ok && attempts[0].detail.starts_with("refused for q1 shadow SQ"));
        assert_eq!((hip.get(), drm.get()), (0, 1));
        // Elsewhere the first route that works is taken, as before.
        let routes: Vec<Route<'_>> = vec![
            (
                "hipImportExternalMemory",
                Box::new(|| Ok((0x1000, Undo::HostRegister { cpu: 1 }))),
            ),
            (
                LIBDRM_ROUTE,
                Box::new(|| Ok((0x2000, Undo::HostRegister { cpu: 2 }))),
            ),
        ];
        let (got, _) = try_routes(gate(RuntimeKind::Hip, "gfx942", "q1 SQ", routes));
        assert_eq!(got.unwrap().0, 0x1000);
    }

    #[test]
    fn the_probe_line_says_uncached_on_rdna2_and_3_only() {
        assert!(describe_policy(RuntimeKind::Hip, "gfx1101").contains("uncached"));
        assert!(describe_policy(RuntimeKind::Hip, "gfx1101").contains("refused"));
        assert!(!describe_policy(RuntimeKind::Hip, "gfx1201").contains("refused"));
        assert!(!describe_policy(RuntimeKind::Cuda, "sm_90").contains("uncached"));
    }
}
