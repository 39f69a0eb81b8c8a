// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Importing the module's dma-bufs (doorbell page, SQ, CQ) into a GPU's
//! address space.
//!
//! No single route works on every stack (see DESIGN.md and the field
//! report): KFD's `GET_DMABUF_INFO` rejects foreign dma-bufs, so
//! `hipImportExternalMemory` may refuse what libdrm's `amdgpu_bo_import`
//! accepts; CUDA imports only its own handles but can map a peer's MMIO
//! through `cuMemHostRegister(IOMEMORY)`. So [`crate::Gpu::import`] tries
//! every route of its runtime in order, stops at the first that works, and
//! reports each attempt: which worked, and the runtime's error for the
//! others.
//!
//! Routes, in order:
//! - HIP: `hipImportExternalMemory` (+ `hipExternalMemoryGetMappedBuffer`),
//!   HSA `hsa_amd_interop_map_buffer`, libdrm `amdgpu_bo_import` + a GPU VA
//!   map in the runtime's own GPU VM, `hipHostRegister` of this process's
//!   mmap of the region (MMIO with `hipHostRegisterIoMemory`).
//! - CUDA: `cuImportExternalMemory`, `cuMemHostRegister` of the mmap
//!   (MMIO with `CU_MEMHOSTREGISTER_IOMEMORY`).
//!
//! On RDNA2/3 (gfx10, gfx11) only the libdrm route may map a region: it
//! maps every queue region uncached (`AMDGPU_VM_MTYPE_UC`), and the other
//! routes, which cannot choose the memory type, are refused there with an
//! error naming the region and the alternative ([`crate::mem_type`]). The
//! memory type each region got is in its report ([`ImportReport::mem_type`]).

use std::os::fd::BorrowedFd;

use serde::Serialize;

use crate::gpu::Gpu;
use crate::mem_type::MemType;

/// Something to import: a dma-buf, this process's mapping of the same
/// memory, or both (routes use what they need).
#[derive(Debug, Clone, Copy)]
pub struct Region<'a> {
    /// What it is, for reports ("q1 doorbell page").
    pub what: &'a str,
    /// The dma-buf from `GPUNVME_IOC_EXPORT`.
    pub dmabuf: Option<BorrowedFd<'a>>,
    /// This process's mmap of the same memory (from the module's mmap).
    pub cpu: Option<*mut u8>,
    /// Bytes.
    pub len: usize,
    /// MMIO (the doorbell page of a raw pair) rather than memory.
    pub mmio: bool,
}

/// One route tried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RouteAttempt {
    /// The route, e.g. `hipImportExternalMemory`.
    pub route: &'static str,
    /// Whether it gave a GPU address.
    pub ok: bool,
    /// The address, or the runtime's error.
    pub detail: String,
    /// The memory type the region was mapped with (a successful attempt
    /// through [`crate::Gpu::import`]; see [`crate::mem_type`]).
    pub mem_type: Option<MemType>,
}

/// Every route tried for one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImportReport {
    /// The region.
    pub what: String,
    /// In order; the last one is the one that worked, if any did.
    pub attempts: Vec<RouteAttempt>,
}

impl ImportReport {
    /// The route that worked.
    pub fn route(&self) -> Option<&'static str> {
        self.attempts.iter().find(|a| a.ok).map(|a| a.route)
    }

    /// The memory type the region was mapped with, if it was.
    pub fn mem_type(&self) -> Option<MemType> {
        self.attempts.iter().find(|a| a.ok).and_then(|a| a.mem_type)
    }

    /// One line per attempt.
    pub fn describe(&self) -> String {
        let mut s = format!("{}:", self.what);
        for a in &self.attempts {
            s += &format!(
                "\n  {} {}: {}",
                if a.ok { "ok    " } else { "failed" },
                a.route,
                a.detail
            );
            if let Some(m) = a.mem_type {
                s += &format!(", memory type {m}");
            }
        }
        if self.attempts.is_empty() {
            s += "\n  no route applies (no dma-buf and no CPU mapping given)";
        }
        s
    }
}

/// How to undo a successful import.
#[derive(Debug)]
pub(crate) enum Undo {
    /// hipExternalMemory / CUexternalMemory handle and the mapped pointer.
    External { ext: usize, ptr: u64 },
    /// hsa_amd_interop_map_buffer's pointer.
    HsaInterop { ptr: u64 },
    /// libdrm: buffer object, GPU VA, size, the reserved CPU range, the
    /// device handle and the render node fd we opened.
    Drm {
        dev: usize,
        bo: usize,
        va: u64,
        len: u64,
        fd: i32,
    },
    /// hipHostRegister / cuMemHostRegister of a CPU pointer.
    HostRegister { cpu: usize },
}

/// A route: its name and the attempt, giving (GPU address, undo).
pub(crate) type Route<'a> = (
    &'static str,
    Box<dyn FnOnce() -> Result<(u64, Undo), String> + 'a>,
);

/// Tries `routes` in order; stops at the first success.
pub(crate) fn try_routes(
    routes: Vec<Route<'_>>,
) -> (Option<(u64, Undo, &'static str)>, Vec<RouteAttempt>) {
    let mut attempts = Vec::new();
    for (name, attempt) in routes {
        match attempt() {
            Ok((ptr, undo)) => {
                attempts.push(RouteAttempt {
                    route: name,
                    ok: true,
                    detail: format!("GPU address 0x{ptr:x}"),
                    mem_type: None,
                });
                return (Some((ptr, undo, name)), attempts);
            }
            Err(e) => attempts.push(RouteAttempt {
                route: name,
                ok: false,
                detail: e,
                mem_type: None,
            }),
        }
    }
    (None, attempts)
}

/// A region mapped into the GPU's address space; unmapped on drop. Drop
/// it before the dma-buf's queue pair is destroyed where possible (the
/// module revokes the export then anyway).
#[derive(Debug)]
pub struct Imported<'g> {
    pub(crate) gpu: &'g Gpu,
    /// The region's address in the GPU's address space.
    pub device_ptr: u64,
    /// The route that worked.
    pub route: &'static str,
    pub(crate) undo: Option<Undo>,
}

impl Drop for Imported<'_> {
    fn drop(&mut self) {
        if let Some(u) = self.undo.take() {
            self.gpu.release_import(u);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_at_first_success_and_reports_failures() {
        let mut third_ran = false;
        let routes: Vec<Route<'_>> = vec![
            ("a", Box::new(|| Err("hipErrorInvalidValue (1)".into()))),
            (
                "b",
                Box::new(|| Ok((0x7000, Undo::HostRegister { cpu: 1 }))),
            ),
            (
                "c",
                Box::new(|| {
                    third_ran = true;
                    Err("unreachable".into())
                }),
            ),
        ];
        let (got, attempts) = try_routes(routes);
        let (ptr, _, route) = got.unwrap();
        assert_eq!((ptr, route), (0x7000, "b"));
        assert_eq!(attempts.len(), 2);
        assert!(!attempts[0].ok && attempts[0].detail.contains("InvalidValue"));
        assert!(attempts[1].ok && attempts[1].detail.contains("0x7000"));
        assert!(!third_ran);
        let r = ImportReport {
            what: "q1 doorbell page".into(),
            attempts,
        };
        assert_eq!(r.route(), Some("b"));
        assert!(r.describe().contains("failed a: hipErrorInvalidValue"));
    }

    #[test]
    fn all_failing_routes_are_all_reported() {
        let routes: Vec<Route<'_>> = vec![
            ("x", Box::new(|| Err("no".into()))),
            ("y", Box::new(|| Err("nope".into()))),
        ];
        let (got, attempts) = try_routes(routes);
        assert!(got.is_none());
        assert_eq!(attempts.len(), 2);
        assert!(attempts.iter().all(|a| !a.ok));
    }
}
