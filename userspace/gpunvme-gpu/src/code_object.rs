// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which file of `make kernels` runs on a given GPU.
//!
//! `make kernels` writes `<dir>/<target>/<kernel>.o` (AMD code objects, one
//! per target, including the family-generic ones) and
//! `<dir>/sm_90/<kernel>.ptx` (NVIDIA; the driver JIT-compiles PTX for
//! newer GPUs). A GPU takes its exact target first, then its family's
//! generic target.

use std::path::{Path, PathBuf};

use crate::error::{GpuError, Result};
use crate::probe::RuntimeKind;

/// The example kernels, the self-test, and their entry points.
pub const KERNELS: &[(&str, &str)] = &[
    ("write", "gpunvme_write"),
    ("read_verify", "gpunvme_read_verify"),
    ("sweep", "gpunvme_sweep"),
    ("pthread_io", "gpunvme_pthread_io"),
    ("guide_read", "gpunvme_guide_read"),
    // Also gpunvme_array_fill and gpunvme_array_flush.
    ("guide_array", "gpunvme_array_check"),
    ("selftest", "gpunvme_selftest"),
];

/// The entry point of an example kernel (`write`, `read_verify`, `sweep`,
/// `pthread_io`, `guide_read`, `guide_array`: its check kernel) or of the
/// self-test (`selftest`).
pub fn entry_point(kernel: &str) -> Option<&'static str> {
    KERNELS.iter().find(|(k, _)| *k == kernel).map(|(_, e)| *e)
}

/// The generic target covering an AMD target, if `make kernels` builds one.
pub fn generic_target(arch: &str) -> Option<&'static str> {
    let n = arch.strip_prefix("gfx")?;
    if n.len() != 4 {
        return None;
    }
    if n.starts_with("103") {
        Some("gfx10-3-generic")
    } else if n.starts_with("11") {
        Some("gfx11-generic")
    } else if n.starts_with("12") {
        Some("gfx12-generic")
    } else {
        None
    }
}

/// Candidate files, best first, relative to the build directory.
pub fn candidates(kind: RuntimeKind, arch: &str, kernel: &str) -> Vec<PathBuf> {
    match kind {
        RuntimeKind::Hip => {
            let mut v = vec![Path::new(arch).join(format!("{kernel}.o"))];
            if let Some(g) = generic_target(arch) {
                v.push(Path::new(g).join(format!("{kernel}.o")));
            }
            v
        }
        RuntimeKind::Cuda => {
            let sm = arch
                .strip_prefix("sm_")
                .and_then(|s| s.parse::<u32>().ok())
                .unwrap_or(0);
            if sm >= 90 {
                vec![Path::new("sm_90").join(format!("{kernel}.ptx"))]
            } else {
                Vec::new()
            }
        }
    }
}

/// Reads the code object for `kernel` on `arch` from `dir`. PTX gets the
/// NUL the driver's loader expects.
pub fn load(dir: &Path, kind: RuntimeKind, arch: &str, kernel: &str) -> Result<(PathBuf, Vec<u8>)> {
    if entry_point(kernel).is_none() {
        return Err(GpuError(format!(
            "unknown kernel `{kernel}`: the kernels are {}",
            KERNELS
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let cands = candidates(kind, arch, kernel);
    if cands.is_empty() {
        return Err(GpuError(format!(
            "no code object can run on {arch}: `make kernels` builds sm_90 PTX (sm_90 and newer) \
             and gfx1030, gfx1100, gfx1101, gfx1201, gfx90a, gfx942 and the gfx10.3/11/12 generic targets"
        )));
    }
    let mut tried = Vec::new();
    for c in &cands {
        let p = dir.join(c);
        match std::fs::read(&p) {
            Ok(mut bytes) => {
                if kind == RuntimeKind::Cuda {
                    bytes.push(0);
                }
                return Ok((p, bytes));
            }
            Err(e) => tried.push(format!("{}: {e}", p.display())),
        }
    }
    Err(GpuError(format!(
        "no code object for {kernel} on {arch} (run `make kernels`; tried {})",
        tried.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_per_family() {
        assert_eq!(
            candidates(RuntimeKind::Hip, "gfx1101", "write"),
            vec![
                PathBuf::from("gfx1101/write.o"),
                PathBuf::from("gfx11-generic/write.o")
            ]
        );
        assert_eq!(
            candidates(RuntimeKind::Hip, "gfx1036", "sweep")[1],
            PathBuf::from("gfx10-3-generic/sweep.o")
        );
        assert_eq!(candidates(RuntimeKind::Hip, "gfx942", "write").len(), 1);
        assert_eq!(
            candidates(RuntimeKind::Cuda, "sm_100", "read_verify"),
            vec![PathBuf::from("sm_90/read_verify.ptx")]
        );
        assert!(candidates(RuntimeKind::Cuda, "sm_80", "write").is_empty());
        assert_eq!(entry_point("read_verify"), Some("gpunvme_read_verify"));
        assert_eq!(entry_point("nope"), None);
    }

    #[test]
    fn load_reports_every_path_tried() {
        let dir = std::env::temp_dir().join(format!("gpunvme-co-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let e = load(&dir, RuntimeKind::Hip, "gfx1101", "write").unwrap_err();
        assert!(
            e.0.contains("gfx1101/write.o") && e.0.contains("gfx11-generic/write.o"),
            "{e}"
        );
        assert!(load(&dir, RuntimeKind::Cuda, "sm_70", "write")
            .unwrap_err()
            .0
            .contains("sm_70"));
        std::fs::create_dir_all(dir.join("gfx11-generic")).unwrap();
        std::fs::write(dir.join("gfx11-generic/write.o"), b"\x7fELF").unwrap();
        let (p, b) = load(&dir, RuntimeKind::Hip, "gfx1101", "write").unwrap();
        assert!(p.ends_with("gfx11-generic/write.o"));
        assert_eq!(b, b"\x7fELF");
        std::fs::create_dir_all(dir.join("sm_90")).unwrap();
        std::fs::write(dir.join("sm_90/write.ptx"), b".version 8.0").unwrap();
        let (_, b) = load(&dir, RuntimeKind::Cuda, "sm_90", "write").unwrap();
        assert_eq!(b.last(), Some(&0), "PTX is NUL-terminated for the loader");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
