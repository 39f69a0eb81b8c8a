// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Is a controller's storage in use? The kernel's own answer.
//!
//! Every block device of the controller (each namespace, its partitions,
//! and recursively every device-mapper/md device holding one of them) is
//! opened with `O_EXCL`. The kernel refuses that with `EBUSY` while anything
//! else holds the device exclusively: a mounted file system (whatever name
//! the mount table shows, `/dev/root` included, in any mount namespace), an
//! active swap area, a device-mapper or md device built on it, a btrfs or
//! ZFS member, a process that opened it `O_EXCL`. Only then is the mount
//! table consulted, to *name* the user: mounts and swaps are matched by
//! device number, never by the source string, in this process's mount table
//! and in every other process's (other mount namespaces, other roots).
//! Processes that have a block device, the controller's character device
//! (`/dev/nvme0`) or a namespace's generic character device (`/dev/ng0n1`)
//! open without `O_EXCL` are found through `/proc/<pid>/fd` and refuse the
//! move too.
//!
//! The exclusive opens are kept (a [`Claim`]) until the controller has
//! left the kernel driver, so nothing can mount, swap on or claim a disk in
//! the window between the check and the unbind. A new non-exclusive
//! opener in that window cannot be prevented; it gets `ENXIO`/`EIO` once
//! the disk is gone.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::InUse;

/// A device number: (major, minor).
pub(super) type DevNo = (u32, u32);

/// One block device of a controller, as sysfs shows it.
#[derive(Debug, Clone)]
pub(super) struct BlockDev {
    /// Kernel name: `nvme0n1`, `nvme0n1p2`, `dm-0`.
    pub name: String,
    /// Its device number, from sysfs `dev`.
    pub dev: DevNo,
    /// Index (in the list) of the whole disk this is a partition of, or
    /// its own index: a busy partition explains a busy whole disk and the
    /// other way round.
    pub family: usize,
    /// What holds it directly (from `holders/`): `dm-0 (vg-data)`, `md0`.
    pub held_by: Vec<String>,
}

/// The exclusive opens of a controller's block devices. Dropping it closes
/// them (after the controller has changed driver).
#[derive(Debug, Default)]
pub struct Claim {
    files: Vec<File>,
}

impl Claim {
    /// How many block devices are held.
    pub fn held(&self) -> usize {
        self.files.len()
    }
}

/// Parses `major:minor`.
pub(super) fn parse_devno(s: &str) -> Option<DevNo> {
    let (a, b) = s.trim().split_once(':')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn devno_of(rdev: u64) -> DevNo {
    (libc::major(rdev), libc::minor(rdev))
}

/// Undoes the octal escapes of the mount table and /proc/swaps (`\040`).
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of `/proc/<pid>/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct MountEntry {
    /// Mount ID (unique in the system while mounted).
    pub id: u64,
    /// The `st_dev` of the file system: the block device for a block-device
    /// file system, whatever its source string says.
    pub dev: DevNo,
    /// Where, as the reading process sees it.
    pub mount_point: String,
    /// The source string (informational only: `/dev/root`, a label, ...).
    pub source: String,
    /// File system type.
    pub fstype: String,
}

/// Parses a mountinfo table (proc(5)): `ID PARENT MAJ:MIN ROOT MOUNTPOINT
/// OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS`.
pub(super) fn parse_mountinfo(text: &str) -> Vec<MountEntry> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 7 {
            continue;
        }
        let (Ok(id), Some(dev)) = (f[0].parse::<u64>(), parse_devno(f[2])) else {
            continue;
        };
        let sep = f.iter().skip(6).position(|x| *x == "-").map(|p| p + 6);
        let (fstype, source) = match sep {
            Some(p) => (
                f.get(p + 1).map(|s| unescape(s)).unwrap_or_default(),
                f.get(p + 2).map(|s| unescape(s)).unwrap_or_default(),
            ),
            None => (String::new(), String::new()),
        };
        out.push(MountEntry {
            id,
            dev,
            mount_point: unescape(f[4]),
            source,
            fstype,
        });
    }
    out
}

/// Where the system is read from: `/sys`, `/proc`, `/dev` (injectable so
/// the logic is tested on fake trees).
pub(super) struct Roots<'a> {
    pub sys: &'a Path,
    pub proc_: &'a Path,
    pub dev: &'a Path,
    /// Test hook: instead of opening anything, these names are busy and
    /// every other device is free.
    pub fake_busy: Option<&'a BTreeSet<String>>,
}

/// A private directory for device nodes that `/dev` lacks; removed on drop.
struct NodeDir(Option<PathBuf>);

impl NodeDir {
    fn path(&mut self, dev_dir: &Path) -> io::Result<PathBuf> {
        if let Some(p) = &self.0 {
            return Ok(p.clone());
        }
        // /dev first: it is devtmpfs, never mounted nodev; /tmp may be.
        let mut last = None;
        for base in [dev_dir.to_path_buf(), std::env::temp_dir()] {
            let p = base.join(format!(".gpunvme-bind-{}", std::process::id()));
            let _ = fs::remove_dir_all(&p);
            match fs::DirBuilder::new().mode(0o700).create(&p) {
                Ok(()) => {
                    self.0 = Some(p.clone());
                    return Ok(p);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
    }
}

impl Drop for NodeDir {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = fs::remove_dir_all(p);
        }
    }
}

fn is_blockdev(path: &Path, dev: DevNo) -> bool {
    fs::metadata(path).is_ok_and(|m| m.file_type().is_block_device() && devno_of(m.rdev()) == dev)
}

/// A node for block device `b`: `/dev/<name>` or `/dev/block/M:m` when it
/// is that device, else a fresh one made with mknod in a private directory.
fn node_for(b: &BlockDev, dev_dir: &Path, tmp: &mut NodeDir) -> io::Result<PathBuf> {
    for p in [
        dev_dir.join(&b.name),
        dev_dir
            .join("block")
            .join(format!("{}:{}", b.dev.0, b.dev.1)),
    ] {
        if is_blockdev(&p, b.dev) {
            return Ok(p);
        }
    }
    let p = tmp.path(dev_dir)?.join(&b.name);
    let c = CString::new(p.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call;
    // mknod reads it and touches no memory of ours.
    let rc = unsafe {
        libc::mknod(
            c.as_ptr(),
            libc::S_IFBLK | 0o600,
            libc::makedev(b.dev.0, b.dev.1),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(p)
}

/// Opens `b` with `O_EXCL`: `Ok(Some(file))` held, `Ok(None)` busy (EBUSY).
fn open_excl(b: &BlockDev, roots: &Roots, tmp: &mut NodeDir) -> Result<Option<File>, String> {
    if let Some(busy) = roots.fake_busy {
        return Ok((!busy.contains(&b.name))
            .then(|| File::open("/dev/null").ok())
            .flatten());
    }
    let path = node_for(b, roots.dev, tmp).map_err(|e| {
        format!(
            "could not be checked: no device node for {}:{} ({e})",
            b.dev.0, b.dev.1
        )
    })?;
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Ok(None),
        Err(e) => Err(format!(
            "could not be checked: open {} with O_EXCL: {e}",
            path.display()
        )),
    }
}

fn comm(proc_: &Path, pid: &str) -> String {
    fs::read_to_string(proc_.join(pid).join("comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn pids(proc_: &Path) -> Vec<String> {
    let me = std::process::id().to_string();
    let mut v: Vec<(u64, String)> = fs::read_dir(proc_)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| *n != me)
                .filter_map(|n| n.parse::<u64>().ok().map(|k| (k, n)))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

/// A mount that uses one of our devices: where, and who sees it there when
/// this process does not.
struct SeenMount {
    entry: MountEntry,
    seen_by: Option<(String, String)>,
}

/// Every mount of the system that is on one of `devs`, found by device
/// number in this process's mount table and then every other process's:
/// one per mount namespace, and each process whose root differs from ours
/// (the kernel shows a process only the mounts under its root).
fn mounts_on(proc_: &Path, devs: &BTreeSet<DevNo>) -> Vec<SeenMount> {
    let mut by_id: BTreeMap<u64, SeenMount> = BTreeMap::new();
    let mut add = |text: &str, seen_by: Option<(String, String)>| {
        for e in parse_mountinfo(text) {
            if devs.contains(&e.dev) && !by_id.contains_key(&e.id) {
                by_id.insert(
                    e.id,
                    SeenMount {
                        entry: e,
                        seen_by: seen_by.clone(),
                    },
                );
            }
        }
    };
    if let Ok(t) = fs::read_to_string(proc_.join("self/mountinfo")) {
        add(&t, None);
    }
    let ns = |p: &str| fs::read_link(proc_.join(p).join("ns/mnt")).ok();
    let mut seen_ns: BTreeSet<PathBuf> = ns("self").into_iter().collect();
    // A root is compared by what it is (device, inode), not by its name:
    // readlink shows an unreachable root (a chrooted reader looking at pid
    // 1) as "/" too.
    let root_of = |p: &str| {
        fs::metadata(proc_.join(p).join("root"))
            .ok()
            .map(|m| (m.dev(), m.ino()))
    };
    let my_root = root_of("self");
    for pid in pids(proc_) {
        if let Some(n) = ns(&pid) {
            // Same namespace and same root: the same view as ours.
            let same_root = root_of(&pid) == my_root;
            if seen_ns.contains(&n) && same_root {
                continue;
            }
            seen_ns.insert(n);
        }
        if let Ok(t) = fs::read_to_string(proc_.join(&pid).join("mountinfo")) {
            add(&t, Some((pid.clone(), comm(proc_, &pid))));
        }
    }
    by_id.into_values().collect()
}

/// The device numbers of active swap areas (`/proc/swaps`), by stat of each
/// path; a path that cannot be stat'ed (deleted node, another namespace)
/// matches a device of that base name under /dev.
fn swaps_on(proc_: &Path, devs: &[BlockDev]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(text) = fs::read_to_string(proc_.join("swaps")) else {
        return out;
    };
    for line in text.lines().skip(1) {
        let Some(raw) = line.split_whitespace().next() else {
            continue;
        };
        let path = unescape(raw);
        let dev = fs::metadata(&path)
            .ok()
            .filter(|m| m.file_type().is_block_device())
            .map(|m| devno_of(m.rdev()));
        let hit = match dev {
            Some(d) => devs.iter().find(|b| b.dev == d),
            None => {
                let base = path.strip_prefix("/dev/").unwrap_or("");
                devs.iter().find(|b| b.name == base)
            }
        };
        if let Some(b) = hit {
            out.insert(b.name.clone(), path);
        }
    }
    out
}

/// Processes (other than this one) with an open file on one of the given
/// devices: (is_block, devno) → [(pid, comm)].
fn openers(
    proc_: &Path,
    wanted: &BTreeSet<(bool, DevNo)>,
) -> BTreeMap<(bool, DevNo), Vec<(String, String)>> {
    let mut out: BTreeMap<(bool, DevNo), Vec<(String, String)>> = BTreeMap::new();
    if wanted.is_empty() {
        return out;
    }
    for pid in pids(proc_) {
        let fd_dir = proc_.join(&pid).join("fd");
        let Ok(rd) = fs::read_dir(&fd_dir) else {
            continue;
        };
        let mut hit = BTreeSet::new();
        for e in rd.filter_map(|e| e.ok()) {
            let Ok(target) = fs::read_link(e.path()) else {
                continue;
            };
            // Sockets, pipes and anonymous inodes are never devices; only
            // stat what has a path.
            if !target.as_os_str().as_bytes().starts_with(b"/") {
                continue;
            }
            let Ok(m) = fs::metadata(e.path()) else {
                continue;
            };
            let ft = m.file_type();
            let key = if ft.is_block_device() {
                (true, devno_of(m.rdev()))
            } else if ft.is_char_device() {
                (false, devno_of(m.rdev()))
            } else {
                continue;
            };
            if wanted.contains(&key) {
                hit.insert(key);
            }
        }
        for k in hit {
            out.entry(k)
                .or_default()
                .push((pid.clone(), comm(proc_, &pid)));
        }
    }
    out
}

/// Btrfs file systems that `name` is a member of (`/sys/fs/btrfs/<fsid>/
/// devices/<name>`).
fn btrfs_of(sys: &Path, name: &str) -> Vec<String> {
    let base = sys.join("fs/btrfs");
    let mut v: Vec<String> = fs::read_dir(&base)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|fsid| base.join(fsid).join("devices").join(name).exists())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn pid_list(v: &[(String, String)]) -> String {
    v.iter()
        .map(|(p, c)| format!("pid {p} ({c})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Opens every device in `devs` with `O_EXCL` and says what uses any of
/// them. `chars` are the controller's character devices (`nvme0`,
/// `ng0n1`), checked for openers only. The claim holds every device that
/// could be opened; callers must not go on when the list is not empty.
pub(super) fn check(
    devs: &[BlockDev],
    chars: &[(String, DevNo)],
    roots: &Roots,
) -> (Claim, Vec<InUse>) {
    let mut tmp = NodeDir(None);
    let mut claim = Claim::default();
    let mut busy = BTreeSet::new();
    let mut uses: Vec<InUse> = Vec::new();
    let mut held = BTreeSet::new();
    for (i, b) in devs.iter().enumerate() {
        // Holding a whole disk exclusively covers its partitions: the
        // kernel refused it if any partition was claimed, and refuses any
        // partition claim while it is held (so they cannot be opened O_EXCL
        // by us either: each open is a holder of its own). Partitions are
        // opened one by one only when their disk is busy, to tell which.
        if b.family != i && held.contains(&b.family) {
            continue;
        }
        match open_excl(b, roots, &mut tmp) {
            Ok(Some(f)) => {
                claim.files.push(f);
                held.insert(i);
            }
            Ok(None) => {
                busy.insert(i);
            }
            Err(msg) => uses.push(InUse {
                device: b.name.clone(),
                by: msg,
            }),
        }
    }
    // The nodes made for the opens are no longer needed.
    drop(tmp);

    let devnos: BTreeSet<DevNo> = devs.iter().map(|b| b.dev).collect();
    // Who holds what, by device number.
    if !busy.is_empty() {
        for m in mounts_on(roots.proc_, &devnos) {
            let Some(b) = devs.iter().find(|b| b.dev == m.entry.dev) else {
                continue;
            };
            let mut by = format!("mounted on {}", m.entry.mount_point);
            if !m.entry.source.is_empty() && m.entry.source != format!("/dev/{}", b.name) {
                by += &format!(" (as {}", m.entry.source);
                if !m.entry.fstype.is_empty() {
                    by += &format!(", {}", m.entry.fstype);
                }
                by += ")";
            }
            if let Some((pid, comm)) = &m.seen_by {
                by += &format!(" as seen by pid {pid} ({comm}) in another mount namespace or root");
            }
            uses.push(InUse {
                device: b.name.clone(),
                by,
            });
        }
        for (name, path) in swaps_on(roots.proc_, devs) {
            let by = if path == format!("/dev/{name}") {
                "active swap".to_string()
            } else {
                format!("active swap (as {path})")
            };
            uses.push(InUse { device: name, by });
        }
        for b in devs {
            for fsid in btrfs_of(roots.sys, &b.name) {
                uses.push(InUse {
                    device: b.name.clone(),
                    by: format!("member of btrfs file system {fsid}"),
                });
            }
        }
    }
    for b in devs {
        for h in &b.held_by {
            uses.push(InUse {
                device: b.name.clone(),
                by: format!("held by {h}"),
            });
        }
    }
    let mut wanted: BTreeSet<(bool, DevNo)> = devnos.iter().map(|d| (true, *d)).collect();
    wanted.extend(chars.iter().map(|(_, d)| (false, *d)));
    let open = openers(roots.proc_, &wanted);
    for (i, b) in devs.iter().enumerate() {
        if let Some(v) = open.get(&(true, b.dev)) {
            let by = if busy.contains(&i) {
                format!("held open exclusively by {}", pid_list(v))
            } else {
                format!("open by {}", pid_list(v))
            };
            uses.push(InUse {
                device: b.name.clone(),
                by,
            });
        }
    }
    for (name, d) in chars {
        if let Some(v) = open.get(&(false, *d)) {
            uses.push(InUse {
                device: name.clone(),
                by: format!("open by {}", pid_list(v)),
            });
        }
    }
    // A busy device whose family (disk and partitions) has no other
    // explanation: the kernel says it is held, we cannot see by whom.
    for &i in &busy {
        let fam = devs[i].family;
        let explained = uses
            .iter()
            .any(|u| devs.iter().any(|b| b.family == fam && b.name == u.device));
        if !explained {
            uses.push(InUse {
                device: devs[i].name.clone(),
                by: "held open exclusively by something not visible here (a process \
                     in another PID namespace, or a kernel user such as a ZFS pool or bcache)"
                    .into(),
            });
        }
    }
    let mut seen = BTreeSet::new();
    uses.retain(|u| seen.insert((u.device.clone(), u.by.clone())));
    (claim, uses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_parsing() {
        let t = "22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw\n\
                 31 22 259:1 / /mnt/my\\040data rw,relatime - ext4 /dev/root rw\n\
                 32 22 259:2 /sub /x rw master:1 shared:2 - xfs /dev/disk/by-label/x rw\n\
                 garbage\n";
        let v = parse_mountinfo(t);
        assert_eq!(v.len(), 3);
        assert_eq!(
            v[1],
            MountEntry {
                id: 31,
                dev: (259, 1),
                mount_point: "/mnt/my data".into(),
                source: "/dev/root".into(),
                fstype: "ext4".into(),
            }
        );
        assert_eq!(v[2].fstype, "xfs");
        assert_eq!(v[2].source, "/dev/disk/by-label/x");
    }

    #[test]
    fn devno_parsing() {
        assert_eq!(parse_devno("259:12\n"), Some((259, 12)));
        assert_eq!(parse_devno("259"), None);
        assert_eq!(parse_devno("a:1"), None);
    }

    #[test]
    fn unescaping() {
        assert_eq!(unescape("/mnt/a\\040b"), "/mnt/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("end\\04"), "end\\04");
    }
}
