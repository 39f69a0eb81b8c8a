// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which kernel NVMe namespaces the passthrough back end can serve, and
//! why not where it cannot (`gpunvme list`).

use serde::Serialize;

use super::namespace::{self, KernelNamespace};
use crate::sysfs::Sysfs;

/// One namespace and what the back end could do with it.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    /// What sysfs says about it.
    pub namespace: KernelNamespace,
    /// Whether a window on the whole namespace could be opened now.
    pub whole: Result<(), String>,
    /// Per partition: `Ok` if it could be the window now, else why not
    /// (mounted on /, swap, held by dm-0, ...).
    pub partitions: Vec<(String, Result<(), String>)>,
    /// Whether completions would be polled, else why not.
    pub poll: Result<(), String>,
}

/// Why the back end cannot open `ng` at all (no node, no access, no
/// io_uring passthrough), or `Ok`.
fn reachable(ns: &KernelNamespace, uring: &Result<(), String>) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let md = std::fs::metadata(&ns.ng).map_err(|e| {
        format!(
            "{}: {e} (no generic character device: NVMe passthrough needs Linux 5.19 or later)",
            ns.ng.display()
        )
    })?;
    if !md.file_type().is_char_device() {
        return Err(format!("{} is not a character device", ns.ng.display()));
    }
    let c =
        std::ffi::CString::new(ns.ng.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        return Err(format!(
            "no read and write access to {} (root, or a udev rule for your group)",
            ns.ng.display()
        ));
    }
    if let Some(c) = ns
        .controllers
        .iter()
        .find(|c| c.state != "live" && !c.state.is_empty())
    {
        return Err(format!("controller {} is {}, not live", c.name, c.state));
    }
    uring.clone()
}

/// Every kernel NVMe namespace, and whether (and how) the passthrough back
/// end could use it. Partitions and whole disks are tried with an
/// exclusive open that is let go at once, the check `bind` makes.
pub fn list(sysfs: &Sysfs) -> Vec<Candidate> {
    let uring = super::uring_support();
    let mut out = Vec::new();
    for disk in namespace::all(sysfs) {
        let Ok(ns) = namespace::describe(sysfs, &disk) else {
            continue;
        };
        let base = reachable(&ns, &uring);
        let free = |names: Vec<String>| -> Result<(), String> {
            base.clone()?;
            sysfs
                .claim_block_devices(&names, "a passthrough window")
                .map(drop)
                .map_err(|e| e.to_string())
        };
        let whole = free(vec![ns.disk.clone()]);
        let partitions = ns
            .partitions
            .iter()
            .map(|p| {
                let r = if p.start_lba == u64::MAX {
                    Err(format!("not on {}-byte block boundaries", ns.lba_size))
                } else {
                    free(vec![p.name.clone()])
                };
                (p.name.clone(), r)
            })
            .collect();
        out.push(Candidate {
            poll: ns.poll.clone(),
            namespace: ns,
            whole,
            partitions,
        });
    }
    out
}
