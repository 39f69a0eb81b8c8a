// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The round-trip self-test (`gpunvme_gpu::selftest`) as `gpu-run` and
//! `probe` run it: which cells stand for which regions, the flag that
//! skips it (and says so), and the report.

use std::path::Path;

use gpunvme_gpu::selftest::{self, Cell, Deadlines, SelfTest};
use gpunvme_gpu::{Gpu, HostMapped, RuntimeKind};
use serde_json::json;

use crate::gpu_run::GpuQueue;

/// What `--skip-self-test` prints (stderr), so a run without it is never
/// mistaken for a checked one.
pub const SKIPPED: &str = "self-test SKIPPED (--skip-self-test): nothing checked that the GPU and \
     the CPU see each other's stores in the queue memory; a wrong mapping shows up later as lost \
     commands or timeouts";

/// The route host-mapped memory comes from.
fn host_route(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Hip => "hipHostMalloc(Mapped|Coherent)",
        RuntimeKind::Cuda => "cuMemHostAlloc(DEVICEMAP)",
    }
}

/// The cell for host-mapped memory the kernels poll and the host reads
/// (stop flag, descriptors, results): the middle of `page`, a page the
/// launch owns and nothing reads before it.
pub fn host_cell(gpu: &Gpu, page: &HostMapped<'_>, what: &str) -> Cell {
    assert!(page.len() >= 4096);
    // SAFETY: bytes 2048..2056 of `page` (which the caller keeps until the
    // self-test returned, and leaks if its kernel may still run); nothing
    // else reads them before the launch, and only through raw pointers.
    unsafe {
        Cell::new(
            what,
            host_route(gpu.runtime().kind),
            Some(gpunvme_gpu::mem_type::MemType::RuntimeChosen),
            page.cpu().add(2048),
            page.dev() + 2048,
        )
    }
}

/// The cells of every region of `queues` the GPU imported (a raw pair's
/// doorbell page is MMIO: not tested, a store there rings the controller).
pub fn queue_cells(queues: &[GpuQueue<'_>]) -> Vec<Cell> {
    let mut cells = Vec::new();
    for q in queues {
        for ((imported, report), region) in q.imports.iter().zip(&q.reports).zip(&q.regions) {
            if region.mmio {
                cells.push(Cell::skipped(
                    report.what.clone(),
                    imported.route,
                    report.mem_type(),
                    "MMIO (the controller's doorbells): a store there rings the controller; \
                     the first command's completion tests it",
                ));
            } else {
                // SAFETY: `region` is the CPU mapping the import was made
                // from, owned by the pair in the same GpuQueue, which the
                // caller keeps until the self-test returned (and leaks if
                // its kernel may still run); nothing reads it before the
                // launch (the relay reads a shadow SQ and the PRP pool
                // only up to the doorbell, the last 16 bytes of a shadow
                // page are no cell of it, the controller writes a CQ only
                // for commands).
                cells.push(unsafe { Cell::of_import(report, imported, region.cpu, region.len) });
            }
        }
    }
    cells
}

/// Runs the self-test, loading its code object from `code_objects`.
///
/// # Safety
///
/// Every cell's contract ([`Cell::new`]) holds until this returns, and for
/// good if the report says its kernel is still running.
pub unsafe fn run(
    gpu: &Gpu,
    code_objects: &Path,
    cells: Vec<Cell>,
) -> gpunvme_gpu::Result<SelfTest> {
    // SAFETY: forwarded to the caller.
    unsafe { selftest::load_and_run(gpu, code_objects, cells, Deadlines::default()) }
}

/// The report's JSON, or that it was skipped.
pub fn json(st: Option<&SelfTest>, skipped: bool) -> serde_json::Value {
    match st {
        Some(st) => json!({"skipped": false, "passed": st.passed(), "cells": st.cells,
                           "kernel_still_running": st.kernel_still_running}),
        None if skipped => json!({"skipped": true, "why": SKIPPED}),
        None => json!({"skipped": false, "passed": null, "cells": []}),
    }
}
