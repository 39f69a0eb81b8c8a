// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Which kernel NVMe namespace a path names, and what sysfs says about it.
//!
//! Accepted: the namespace's generic character device (`/dev/ng0n1`, what
//! io_uring passthrough opens), its block device (`/dev/nvme0n1`) or a
//! partition of it (`/dev/nvme0n1p3`), with or without `/dev/`. The two
//! devices of one namespace share their numbers: `nvme<A>n<B>` and
//! `ng<A>n<B>`, with or without native multipath (the head's numbers then
//! are the subsystem's). Multipath path devices (`nvme0c1n1`) are hidden
//! and not accepted: the head is what the kernel lets one open, and it
//! picks a live path for every command.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::sysfs::Sysfs;

/// A kernel NVMe namespace, as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelNamespace {
    /// The block device, e.g. `nvme0n1`.
    pub disk: String,
    /// The generic character device passthrough opens, e.g. `/dev/ng0n1`.
    pub ng: PathBuf,
    /// Namespace ID.
    pub nsid: u32,
    /// Bytes per logical block.
    pub lba_size: u32,
    /// Size in logical blocks.
    pub capacity_lbas: u64,
    /// The largest transfer the kernel passes through for it, bytes
    /// (`queue/max_hw_sectors_kb`, and no more 4 KiB pages than
    /// `queue/max_segments`: a passthrough request is never split); 0 if
    /// unknown.
    pub max_hw_bytes: u64,
    /// Whether every path to it has poll queues (`queue/io_poll`), so
    /// io_uring may poll its completions (IORING_SETUP_IOPOLL); else why not.
    pub poll: std::result::Result<(), String>,
    /// The controllers it is reached through (`nvme0`; several with
    /// multipath).
    pub controllers: Vec<KernelController>,
    /// Its partitions, lowest first.
    pub partitions: Vec<Partition>,
}

/// A kernel NVMe controller (`/sys/class/nvme/nvme<N>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelController {
    /// `nvme0`.
    pub name: String,
    /// `pcie`, `tcp`, `rdma`, `loop`, `fc`.
    pub transport: String,
    /// The PCI address, or the fabrics address (`traddr=...,trsvcid=...`).
    pub address: String,
    /// `live`, `connecting`, `resetting`, ...
    pub state: String,
    /// Identify Controller MN, SN and FR.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Firmware revision.
    pub firmware: String,
    /// The NVM subsystem's NQN.
    pub subsysnqn: String,
}

/// A partition of a namespace, in logical blocks of the namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Partition {
    /// `nvme0n1p3`.
    pub name: String,
    /// Its number (3).
    pub number: u32,
    /// First logical block.
    pub start_lba: u64,
    /// Logical blocks.
    pub lbas: u64,
}

/// What a path named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    /// The namespace's block device name (`nvme0n1`).
    pub disk: String,
    /// A partition of it, when the path was one (`nvme0n1p3`).
    pub partition: Option<String>,
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// `nvme<A>n<B>` with `A`, `B` digits.
fn is_disk_name(s: &str) -> bool {
    s.strip_prefix("nvme")
        .and_then(|r| r.split_once('n'))
        .is_some_and(|(a, b)| digits(a) && digits(b))
}

/// Parses a device path or name: `/dev/ng0n1`, `ng0n1`, `/dev/nvme0n1`,
/// `/dev/nvme0n1p3`. `None` for anything else (a gpunvme node, a PCI
/// address, a multipath path device).
pub fn parse_name(path: &Path) -> Option<Named> {
    let s = path.to_str()?;
    let name = s.strip_prefix("/dev/").unwrap_or(s);
    if name.contains('/') {
        return None;
    }
    if let Some(rest) = name.strip_prefix("ng") {
        let (a, b) = rest.split_once('n')?;
        return (digits(a) && digits(b)).then(|| Named {
            disk: format!("nvme{a}n{b}"),
            partition: None,
        });
    }
    if is_disk_name(name) {
        return Some(Named {
            disk: name.to_string(),
            partition: None,
        });
    }
    let (disk, part) = name.rsplit_once('p')?;
    (is_disk_name(disk) && digits(part)).then(|| Named {
        disk: disk.to_string(),
        partition: Some(name.to_string()),
    })
}

fn read(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

fn read_u64(path: &Path, what: &str) -> Result<u64> {
    let s = fs::read_to_string(path).map_err(|e| Error::io(format!("read {what}"), path, e))?;
    s.trim().parse().map_err(|_| {
        Error::Invalid(format!(
            "{} holds `{}`, not a number",
            path.display(),
            s.trim()
        ))
    })
}

fn dir_names(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn controller(sys: &Path, name: &str) -> KernelController {
    let d = sys.join("class/nvme").join(name);
    let r = |a: &str| read(&d.join(a)).unwrap_or_default();
    KernelController {
        name: name.to_string(),
        transport: r("transport"),
        address: r("address"),
        state: r("state"),
        model: r("model"),
        serial: r("serial"),
        firmware: r("firmware_rev"),
        subsysnqn: r("subsysnqn"),
    }
}

/// The controller a (path) block device belongs to: its `device` link
/// (`../../nvme0`), or the controller directory that lists it.
fn controller_of(sys: &Path, disk: &str) -> Option<String> {
    let linked = fs::read_link(sys.join("class/block").join(disk).join("device"))
        .ok()
        .and_then(|l| l.file_name()?.to_str().map(str::to_string))
        .filter(|n| n.strip_prefix("nvme").is_some_and(digits));
    linked.or_else(|| {
        dir_names(&sys.join("class/nvme"))
            .into_iter()
            .find(|c| sys.join("class/nvme").join(c).join(disk).exists())
    })
}

/// Describes the namespace whose block device is `disk` (`nvme0n1`).
pub fn describe(sysfs: &Sysfs, disk: &str) -> Result<KernelNamespace> {
    let sys = sysfs.root();
    let dir = sys.join("class/block").join(disk);
    if !dir.exists() {
        return Err(Error::NotFound(format!(
            "no kernel NVMe namespace {disk} ({} is missing; is nvme.ko loaded and the controller bound to it?)",
            dir.display()
        )));
    }
    let nsid = read_u64(&dir.join("nsid"), "the namespace ID")? as u32;
    let lba_size = read_u64(
        &dir.join("queue/logical_block_size"),
        "the logical block size",
    )?;
    if !(512..=65536).contains(&lba_size) || !lba_size.is_power_of_two() {
        return Err(Error::Invalid(format!(
            "{disk}: logical block size {lba_size} is not a power of two from 512 to 64 KiB"
        )));
    }
    let sectors = read_u64(&dir.join("size"), "the namespace size")?;
    let capacity_lbas = sectors * 512 / lba_size;
    let max_hw_bytes = read(&dir.join("queue/max_hw_sectors_kb"))
        .and_then(|s| s.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024);
    let max_hw_bytes =
        match read(&dir.join("queue/max_segments")).and_then(|s| s.parse::<u64>().ok()) {
            Some(segs) if segs > 0 && max_hw_bytes > 0 => max_hw_bytes.min(segs * 4096),
            _ => max_hw_bytes,
        };
    // With native multipath the head's paths are under multipath/; each
    // has its own queue (the one a command really goes through).
    let paths: Vec<String> = dir_names(&dir.join("multipath"));
    let (queues, ctrl_names): (Vec<String>, Vec<String>) = if paths.is_empty() {
        (
            vec![disk.to_string()],
            controller_of(sys, disk).into_iter().collect(),
        )
    } else {
        let ctrls = paths.iter().filter_map(|p| controller_of(sys, p)).collect();
        (paths.clone(), ctrls)
    };
    let poll = queues
        .iter()
        .map(|q| {
            let attr = sys.join("class/block").join(q).join("queue/io_poll");
            match read(&attr).as_deref() {
                Some("1") => Ok(()),
                Some(_) => Err(format!(
                    "{q} has no poll queues (queue/io_poll is 0): nvme.ko's poll_queues=N"
                )),
                None => Err(format!("cannot read {}", attr.display())),
            }
        })
        .find(|r| r.is_err())
        .unwrap_or(Ok(()));
    let mut partitions = Vec::new();
    for p in dir_names(&dir) {
        let pd = dir.join(&p);
        let (Some(num), Some(start), Some(size)) = (
            read(&pd.join("partition")).and_then(|s| s.parse::<u32>().ok()),
            read(&pd.join("start")).and_then(|s| s.parse::<u64>().ok()),
            read(&pd.join("size")).and_then(|s| s.parse::<u64>().ok()),
        ) else {
            continue;
        };
        let spb = lba_size / 512;
        if start % spb != 0 || size % spb != 0 {
            // Not on block boundaries: no window can be made of it (listed
            // by `resolve` as the reason when asked for).
            partitions.push(Partition {
                name: p,
                number: num,
                start_lba: u64::MAX,
                lbas: 0,
            });
            continue;
        }
        partitions.push(Partition {
            name: p,
            number: num,
            start_lba: start / spb,
            lbas: size / spb,
        });
    }
    partitions.sort_by_key(|p| p.number);
    let controllers: Vec<KernelController> =
        ctrl_names.iter().map(|c| controller(sys, c)).collect();
    let poll = poll.and_then(|()| polling_transports(&controllers));
    let num = disk.strip_prefix("nvme").unwrap_or_default();
    Ok(KernelNamespace {
        disk: disk.to_string(),
        ng: sysfs.dev_root().join(format!("ng{num}")),
        nsid,
        lba_size: lba_size as u32,
        capacity_lbas,
        max_hw_bytes,
        poll,
        controllers,
        partitions,
    })
}

/// Whether completions for `dev` (a namespace's `/dev/nvmeXnY`, its
/// `/dev/ngXnY`, a partition, or a link to one of them) are polled, by the
/// rule the back end itself uses: poll queues on every path, and every
/// path PCIe. `Err` says why not. The CLI's kernel-poll baseline asks this
/// too, so that both follow one rule.
pub fn polling(sysfs: &Sysfs, dev: &Path) -> std::result::Result<(), String> {
    let real = fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf());
    let named = parse_name(&real).ok_or_else(|| {
        format!(
            "{} is not a kernel NVMe namespace or partition: polled I/O is used only there",
            dev.display()
        )
    })?;
    describe(sysfs, &named.disk)
        .map_err(|e| e.to_string())?
        .poll
}

/// Polled completions only through PCIe controllers. nvme-tcp completes
/// its poll queues' requests from its receive work as well, so io_uring's
/// passthrough poll can reach a request that has already completed: on
/// 7.3 that is a NULL dereference in nvme_tcp_poll (seen in this project's
/// VM test). The other fabrics are not tested polled, so not used polled.
fn polling_transports(controllers: &[KernelController]) -> std::result::Result<(), String> {
    match controllers.iter().find(|c| c.transport != "pcie") {
        None => Ok(()),
        Some(c) => Err(format!(
            "{} is reached over {}: only PCIe controllers are polled (the kernel's nvme-tcp can \
             complete a polled passthrough command under io_uring's poll, which then dereferences \
             a freed request); completions come by interrupt",
            c.name, c.transport
        )),
    }
}

/// Every kernel NVMe namespace sysfs shows (their block devices,
/// multipath heads rather than their hidden paths), sorted.
pub fn all(sysfs: &Sysfs) -> Vec<String> {
    dir_names(&sysfs.root().join("class/block"))
        .into_iter()
        .filter(|n| is_disk_name(n))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_one_namespace_map_onto_each_other() {
        let n = |s: &str| parse_name(Path::new(s));
        let disk = |d: &str, p: Option<&str>| {
            Some(Named {
                disk: d.into(),
                partition: p.map(str::to_string),
            })
        };
        assert_eq!(n("/dev/ng0n1"), disk("nvme0n1", None));
        assert_eq!(n("ng12n3"), disk("nvme12n3", None));
        assert_eq!(n("/dev/nvme0n1"), disk("nvme0n1", None));
        assert_eq!(n("/dev/nvme0n1p3"), disk("nvme0n1", Some("nvme0n1p3")));
        assert_eq!(n("nvme10n2p12"), disk("nvme10n2", Some("nvme10n2p12")));
        for bad in [
            "/dev/nvme0",
            "/dev/nvme0c1n1",
            "/dev/gpunvme0n1",
            "/dev/sda1",
            "/dev/ng0",
            "/dev/nvme0n1p",
            "0000:01:00.0",
            "/tmp/ng0n1/x",
        ] {
            assert_eq!(n(bad), None, "{bad}");
        }
    }

    fn write(root: &Path, rel: &str, v: &str) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, v).unwrap();
    }

    /// A fake sysfs: nvme0n1 (4 KiB blocks, 1 GiB, two partitions, one of
    /// them not on a 4 KiB boundary) on a PCIe controller without poll
    /// queues.
    fn tree(root: &Path) {
        let b = "class/block/nvme0n1";
        write(root, &format!("{b}/nsid"), "1\n");
        write(root, &format!("{b}/queue/logical_block_size"), "4096\n");
        write(root, &format!("{b}/size"), "2097152\n");
        write(root, &format!("{b}/queue/max_hw_sectors_kb"), "1024\n");
        write(root, &format!("{b}/queue/max_segments"), "128\n");
        write(root, &format!("{b}/queue/io_poll"), "0\n");
        write(root, &format!("{b}/nvme0n1p1/partition"), "1\n");
        write(root, &format!("{b}/nvme0n1p1/start"), "2048\n");
        write(root, &format!("{b}/nvme0n1p1/size"), "65536\n");
        write(root, &format!("{b}/nvme0n1p2/partition"), "2\n");
        write(root, &format!("{b}/nvme0n1p2/start"), "67585\n");
        write(root, &format!("{b}/nvme0n1p2/size"), "8\n");
        write(root, "class/nvme/nvme0/transport", "pcie\n");
        write(root, "class/nvme/nvme0/address", "0000:00:05.0\n");
        write(root, "class/nvme/nvme0/model", "QEMU NVMe Ctrl\n");
        fs::create_dir_all(root.join("class/nvme/nvme0/nvme0n1")).unwrap();
    }

    #[test]
    fn sysfs_gives_size_blocks_partitions_and_poll() {
        let root = std::env::temp_dir().join(format!("gpunvme-ns-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        tree(&root);
        let s = Sysfs::with_root(&root);
        let ns = describe(&s, "nvme0n1").unwrap();
        assert_eq!((ns.nsid, ns.lba_size, ns.capacity_lbas), (1, 4096, 262144));
        assert_eq!(ns.max_hw_bytes, 512 * 1024, "128 segments of 4 KiB");
        assert_eq!(ns.ng, PathBuf::from("/dev/ng0n1"));
        assert!(ns.poll.as_ref().unwrap_err().contains("poll_queues"));
        assert_eq!(ns.controllers.len(), 1);
        assert_eq!(
            (
                ns.controllers[0].transport.as_str(),
                ns.controllers[0].address.as_str()
            ),
            ("pcie", "0000:00:05.0")
        );
        assert_eq!(ns.partitions.len(), 2);
        // Poll queues over TCP: still not polled, and said why.
        write(&root, "class/block/nvme0n1/queue/io_poll", "1\n");
        assert_eq!(describe(&s, "nvme0n1").unwrap().poll, Ok(()));
        write(&root, "class/nvme/nvme0/transport", "tcp\n");
        let why = describe(&s, "nvme0n1").unwrap().poll.unwrap_err();
        assert!(
            why.contains("nvme0 is reached over tcp") && why.contains("interrupt"),
            "{why}"
        );
        // The bench's kernel-poll baseline asks the same rule by path:
        // a partition, the generic node, and something else.
        assert!(polling(&s, Path::new("/dev/nvme0n1p1"))
            .unwrap_err()
            .contains("reached over tcp"));
        write(&root, "class/nvme/nvme0/transport", "pcie\n");
        assert_eq!(polling(&s, Path::new("/dev/nvme0n1p1")), Ok(()));
        assert_eq!(polling(&s, Path::new("ng0n1")), Ok(()));
        assert!(polling(&s, Path::new("/dev/sda"))
            .unwrap_err()
            .contains("not a kernel NVMe namespace"));
        assert_eq!(
            (ns.partitions[0].start_lba, ns.partitions[0].lbas),
            (256, 8192),
            "512-byte sectors in 4 KiB blocks"
        );
        assert_eq!(
            ns.partitions[1].start_lba,
            u64::MAX,
            "not on a block boundary"
        );
        assert_eq!(all(&s), vec!["nvme0n1".to_string()]);
        assert!(describe(&s, "nvme9n9")
            .unwrap_err()
            .to_string()
            .contains("nvme.ko"));
        let _ = fs::remove_dir_all(&root);
    }
}
