// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The LBA window a passthrough back end serves, and the exclusive claim
//! that keeps the kernel's own users out of it.
//!
//! A window is a partition (`--partition /dev/nvme0n1p3`: start and size
//! from sysfs), explicit bounds, or the whole namespace. What it covers
//! is claimed the way `gpunvme bind` claims a controller's disks: opened
//! `O_EXCL`, which the kernel refuses while a file system is mounted from
//! it (under any name, in any mount namespace), it is swap, a dm/md device
//! holds it or a process opened it exclusively; the refusal names the
//! user. The claim is held as long as the back end lives, so nothing can
//! mount it meanwhile. For explicit bounds the claim is every partition
//! the bounds overlap, or the whole disk when they overlap none of them
//! (or it has none): a window can never reach into a mounted partition.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::check::Window;
use super::namespace::{parse_name, KernelNamespace};
use crate::error::{Error, Result};
use crate::sysfs::{Claim, Sysfs};

/// Which blocks of the namespace to serve.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WindowSpec {
    /// The whole namespace (its block device claimed whole).
    #[default]
    Whole,
    /// A partition of the namespace, e.g. `/dev/nvme0n1p3`.
    Partition(PathBuf),
    /// `count` logical blocks from LBA `start`.
    Lbas {
        /// First LBA.
        start: u64,
        /// Number of blocks.
        count: u64,
    },
}

impl WindowSpec {
    /// Parses `START:COUNT` or `START+COUNT` (logical blocks).
    pub fn parse_lbas(s: &str) -> std::result::Result<Self, String> {
        let (a, b) = s
            .split_once(':')
            .or_else(|| s.split_once('+'))
            .ok_or_else(|| {
                format!("`{s}`: expected START:COUNT in logical blocks, e.g. 2048:65536")
            })?;
        let num = |x: &str| {
            x.trim()
                .parse::<u64>()
                .map_err(|_| format!("`{x}` in `{s}` is not a number of blocks"))
        };
        let (start, count) = (num(a)?, num(b)?);
        if count == 0 {
            return Err(format!("`{s}`: a window of 0 blocks"));
        }
        Ok(WindowSpec::Lbas { start, count })
    }
}

/// A resolved window and what holds it.
#[derive(Debug, Serialize)]
pub struct Resolved {
    /// The blocks served.
    #[serde(skip)]
    pub window: Window,
    /// First LBA of the namespace served.
    pub start_lba: u64,
    /// Blocks served.
    pub lbas: u64,
    /// `nvme0n1p3`, `nvme0n1 LBAs 2048..10240`, `nvme0n1`.
    pub describe: String,
    /// The block devices held `O_EXCL`.
    pub claimed: Vec<String>,
    /// The namespace's block device (`nvme0n1`).
    pub disk: String,
    /// The partition that is the window, if it is one (`nvme0n1p3`).
    pub partition: Option<String>,
    /// Held for its drop: the exclusive opens end with it.
    #[serde(skip)]
    _claim: Claim,
}

fn partition_window(ns: &KernelNamespace, name: &str) -> Result<Window> {
    let p = ns
        .partitions
        .iter()
        .find(|p| p.name == name)
        .ok_or_else(|| {
            Error::NotFound(format!(
                "{name} is not a partition of {} (its partitions: {})",
                ns.disk,
                if ns.partitions.is_empty() {
                    "none".to_string()
                } else {
                    ns.partitions
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                }
            ))
        })?;
    if p.start_lba == u64::MAX {
        return Err(Error::Invalid(format!(
            "{name} does not start and end on {}-byte block boundaries",
            ns.lba_size
        )));
    }
    if p.lbas == 0 || p.start_lba + p.lbas > ns.capacity_lbas {
        return Err(Error::Invalid(format!(
            "{name}: blocks {}..{} are not inside {} ({} blocks)",
            p.start_lba,
            p.start_lba + p.lbas,
            ns.disk,
            ns.capacity_lbas
        )));
    }
    Ok(Window {
        start: p.start_lba,
        blocks: p.lbas,
    })
}

/// Resolves `spec` (and a partition the device path itself named) on `ns`
/// and claims it.
pub fn resolve(
    sysfs: &Sysfs,
    ns: &KernelNamespace,
    device: &Path,
    spec: &WindowSpec,
) -> Result<Resolved> {
    let named = parse_name(device).and_then(|n| n.partition);
    let spec = match (named, spec) {
        (Some(p), WindowSpec::Whole) => WindowSpec::Partition(PathBuf::from(p)),
        (Some(p), other) => {
            return Err(Error::Invalid(format!(
                "{} is the partition {p} already; give the namespace ({} or {}) with {other:?}",
                device.display(),
                ns.ng.display(),
                ns.disk
            )))
        }
        (None, s) => s.clone(),
    };
    let what = format!("the passthrough window on {}", ns.disk);
    let (window, describe, names) = match &spec {
        WindowSpec::Whole => (
            Window {
                start: 0,
                blocks: ns.capacity_lbas,
            },
            ns.disk.clone(),
            vec![ns.disk.clone()],
        ),
        WindowSpec::Partition(p) => {
            let name = match parse_name(p) {
                Some(super::namespace::Named {
                    disk,
                    partition: Some(part),
                }) if disk == ns.disk => part,
                _ => {
                    return Err(Error::Invalid(format!(
                        "--partition {}: not a partition of {} (e.g. /dev/{}p1)",
                        p.display(),
                        ns.disk,
                        ns.disk
                    )))
                }
            };
            (partition_window(ns, &name)?, name.clone(), vec![name])
        }
        WindowSpec::Lbas { start, count } => {
            let end = start.checked_add(*count).filter(|&e| e <= ns.capacity_lbas);
            let Some(end) = end else {
                return Err(Error::Invalid(format!(
                    "LBAs {start}+{count} are not inside {} ({} blocks)",
                    ns.disk, ns.capacity_lbas
                )));
            };
            let overlapped: Vec<String> = ns
                .partitions
                .iter()
                .filter(|p| {
                    p.start_lba == u64::MAX || (p.start_lba < end && *start < p.start_lba + p.lbas)
                })
                .map(|p| p.name.clone())
                .collect();
            let names = if overlapped.is_empty() {
                vec![ns.disk.clone()]
            } else {
                overlapped
            };
            (
                Window {
                    start: *start,
                    blocks: *count,
                },
                format!("{} LBAs {start}..{end}", ns.disk),
                names,
            )
        }
    };
    let claim = sysfs.claim_block_devices(&names, &what)?;
    let partition = match &spec {
        WindowSpec::Partition(_) => Some(describe.clone()),
        _ => None,
    };
    Ok(Resolved {
        disk: ns.disk.clone(),
        partition,
        window,
        start_lba: window.start,
        lbas: window.blocks,
        describe,
        claimed: names,
        _claim: claim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_bounds_parse() {
        assert_eq!(
            WindowSpec::parse_lbas("2048:65536"),
            Ok(WindowSpec::Lbas {
                start: 2048,
                count: 65536
            })
        );
        assert_eq!(
            WindowSpec::parse_lbas("0+8"),
            Ok(WindowSpec::Lbas { start: 0, count: 8 })
        );
        assert!(WindowSpec::parse_lbas("8").is_err());
        assert!(WindowSpec::parse_lbas("8:0")
            .unwrap_err()
            .contains("0 blocks"));
        assert!(WindowSpec::parse_lbas("x:1").is_err());
    }
}
