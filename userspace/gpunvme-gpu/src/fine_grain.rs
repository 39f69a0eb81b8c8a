// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `HSA_FORCE_FINE_GRAIN_PCIE` for consumer RDNA GPUs.
//!
//! On CDNA (gfx9) host memory the GPU maps is fine-grained (coherent over
//! PCIe) by default. On consumer RDNA (gfx10, gfx11, gfx12) ROCm makes it
//! fine-grained only when `HSA_FORCE_FINE_GRAIN_PCIE=1` is in the
//! environment when the runtime initializes; without it the GPU faults on
//! (or caches) the host memory the queues live in. The runtime reads the
//! variable once, at load, so it must be decided before HIP is loaded:
//! from the KFD topology in sysfs, which needs no runtime. Setting it
//! ([`prepare`]) writes the environment, so it is `unsafe`: do it before
//! the process has threads.

use std::fs;
use std::path::{Path, PathBuf};

/// The variable ROCm reads.
pub const VAR: &str = "HSA_FORCE_FINE_GRAIN_PCIE";

/// Where KFD describes the GPUs.
pub const KFD_TOPOLOGY: &str = "/sys/class/kfd/kfd/topology/nodes";

/// What [`decide`] concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// No RDNA GPU: nothing to do (the variable is left as it is).
    NotNeeded,
    /// RDNA present and the variable already `1`.
    AlreadySet,
    /// RDNA present and the variable unset: set it to `1` now.
    Set {
        /// The RDNA targets that need it.
        targets: Vec<String>,
    },
    /// RDNA present and the variable set to something else: refuse, since
    /// the user asked for the configuration that faults.
    Conflict {
        /// The value found.
        value: String,
        /// The RDNA targets that need `1`.
        targets: Vec<String>,
    },
}

impl Decision {
    /// One line for the user.
    pub fn describe(&self) -> String {
        match self {
            Decision::NotNeeded => format!("{VAR}: not needed (no consumer RDNA GPU)"),
            Decision::AlreadySet => format!("{VAR}=1 already set"),
            Decision::Set { targets } => format!(
                "set {VAR}=1 for {} (consumer RDNA: host memory the GPU polls must be fine-grained)",
                targets.join(", ")
            ),
            Decision::Conflict { value, targets } => format!(
                "{VAR}={value} is set, but {} (consumer RDNA) needs {VAR}=1: without it the GPU \
                 faults on or caches the queue memory in host RAM. Unset it or set it to 1",
                targets.join(", ")
            ),
        }
    }
}

/// `gfx_target_version` from KFD (major * 10000 + minor * 100 + stepping)
/// as a target name: 110001 -> gfx1101, 90010 -> gfx90a, 0 -> None (CPU).
pub fn target_name(version: u32) -> Option<String> {
    if version == 0 {
        return None;
    }
    let (major, minor, step) = (version / 10000, (version / 100) % 100, version % 100);
    Some(format!("gfx{major}{minor}{step:x}"))
}

/// Consumer RDNA: gfx10xx, gfx11xx, gfx12xx.
pub fn is_rdna(target: &str) -> bool {
    let n = target.strip_prefix("gfx").unwrap_or("");
    n.len() == 4 && (n.starts_with("10") || n.starts_with("11") || n.starts_with("12"))
}

/// GPU targets KFD lists under `nodes_dir` (one `properties` file per
/// node; CPU nodes have gfx_target_version 0).
pub fn kfd_targets(nodes_dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(nodes_dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    paths
        .iter()
        .filter_map(|p| fs::read_to_string(p.join("properties")).ok())
        .filter_map(|props| {
            props.lines().find_map(|l| {
                let v = l.strip_prefix("gfx_target_version ")?;
                target_name(v.trim().parse().ok()?)
            })
        })
        .collect()
}

/// The decision for these GPU targets and the variable's current value.
pub fn decide(targets: &[String], current: Option<&str>) -> Decision {
    let rdna: Vec<String> = targets.iter().filter(|t| is_rdna(t)).cloned().collect();
    if rdna.is_empty() {
        return Decision::NotNeeded;
    }
    match current {
        None => Decision::Set { targets: rdna },
        Some("1") => Decision::AlreadySet,
        Some(v) => Decision::Conflict {
            value: v.to_string(),
            targets: rdna,
        },
    }
}

/// Decides from the live KFD topology, without changing anything.
pub fn decide_now() -> Decision {
    decide(
        &kfd_targets(Path::new(KFD_TOPOLOGY)),
        std::env::var(VAR).ok().as_deref(),
    )
}

/// [`decide_now`], and applies it: sets the variable when needed. Call it
/// before anything loads HIP. A [`Decision::Conflict`] is returned, not
/// applied: callers refuse to run.
///
/// # Safety
///
/// It writes the process environment (`setenv`), which is not thread-safe:
/// no other thread may read or write the environment meanwhile (C code
/// included: `getenv` in a library). Call it before the process starts
/// threads.
pub unsafe fn prepare() -> Decision {
    let d = decide_now();
    if let Decision::Set { .. } = d {
        std::env::set_var(VAR, "1");
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names() {
        assert_eq!(target_name(110001).as_deref(), Some("gfx1101"));
        assert_eq!(target_name(90010).as_deref(), Some("gfx90a"));
        assert_eq!(target_name(90402).as_deref(), Some("gfx942"));
        assert_eq!(target_name(100300).as_deref(), Some("gfx1030"));
        assert_eq!(target_name(120001).as_deref(), Some("gfx1201"));
        assert_eq!(target_name(0), None);
        assert!(is_rdna("gfx1101") && is_rdna("gfx1030") && is_rdna("gfx1201"));
        assert!(!is_rdna("gfx90a") && !is_rdna("gfx942") && !is_rdna("sm_90"));
    }

    #[test]
    fn decisions() {
        let cdna = vec!["gfx942".to_string()];
        let mixed = vec!["gfx942".to_string(), "gfx1101".to_string()];
        assert_eq!(decide(&cdna, None), Decision::NotNeeded);
        assert_eq!(decide(&[], Some("0")), Decision::NotNeeded);
        assert_eq!(
            decide(&mixed, None),
            Decision::Set {
                targets: vec!["gfx1101".into()]
            }
        );
        assert_eq!(decide(&mixed, Some("1")), Decision::AlreadySet);
        let c = decide(&mixed, Some("0"));
        assert!(matches!(c, Decision::Conflict { .. }));
        assert!(c.describe().contains("gfx1101") && c.describe().contains("=1"));
    }

    #[test]
    fn reads_kfd_topology() {
        let dir = std::env::temp_dir().join(format!("gpunvme-kfd-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        for (node, v) in [("0", 0u32), ("1", 110001), ("2", 90010)] {
            let d = dir.join(node);
            fs::create_dir_all(&d).unwrap();
            fs::write(
                d.join("properties"),
                format!("cpu_cores_count 0\ngfx_target_version {v}\nsimd_count 120\n"),
            )
            .unwrap();
        }
        assert_eq!(kfd_targets(&dir), vec!["gfx1101", "gfx90a"]);
        assert!(kfd_targets(&dir.join("missing")).is_empty());
        fs::remove_dir_all(&dir).unwrap();
    }
}
