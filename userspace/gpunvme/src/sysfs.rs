// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Finding NVMe controllers and moving them between the kernel `nvme`
//! driver and `gpunvme`, through sysfs.
//!
//! gpunvme never binds by class match (it would steal the boot disk): a
//! controller is handed to it explicitly with `driver_override`. Before a
//! controller is taken from `nvme`, every block device of its namespaces
//! (partitions and device-mapper/md holders included) is opened with
//! `O_EXCL`: the move is refused if the kernel says any is busy (mounted in
//! any namespace, swap, held, opened exclusively) or a process has one
//! open, and the exclusive opens are held until the unbind is done (see
//! [`Claim`] for the details).
//!
//! Every path is relative to an injectable root (`/sys`, `/proc`, `/dev`
//! by default) so the logic is tested on fake trees.

mod claim;

use claim::BlockDev;
pub use claim::Claim;

#[cfg(test)]
use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};

/// PCI class code of an NVMe controller (mass storage, NVM, NVMe I/O).
pub const NVME_CLASS: u32 = 0x010802;
/// Name of the gpunvme PCI driver.
pub const GPUNVME_DRIVER: &str = "gpunvme";
/// Name of the kernel's NVMe PCI driver.
pub const NVME_DRIVER: &str = "nvme";

/// An NVMe controller as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NvmeController {
    /// PCI address, `dddd:bb:dd.f`.
    pub bdf: String,
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// The driver bound now, if any.
    pub driver: Option<String>,
    /// The driver_override setting, if set.
    pub driver_override: Option<String>,
    /// The kernel nvme controller name (`nvme0`) when bound to `nvme`.
    pub nvme_name: Option<String>,
    /// Block devices of its namespaces (`nvme0n1`), when bound to `nvme`.
    pub namespaces: Vec<String>,
    /// The gpunvme device node, when bound to gpunvme and found.
    pub node: Option<PathBuf>,
    /// Its namespace nodes (`/dev/gpunvme<N>n<NSID>`: shared mode, one
    /// namespace each), when bound to gpunvme.
    pub namespace_nodes: Vec<PathBuf>,
}

/// One reason a controller's storage is in use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InUse {
    /// The block device (`nvme0n1p2`, `dm-0`).
    pub device: String,
    /// What uses it: `mounted on /boot`, `active swap`,
    /// `held by dm-0 (device-mapper vg-data)`, `open by pid 42 (dd)`.
    pub by: String,
}

/// Access to sysfs (and /proc, /dev) under configurable roots.
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
    proc_: PathBuf,
    dev: PathBuf,
    settle: Duration,
    /// Test hook (fake trees have no device nodes): block devices whose
    /// exclusive open is "busy"; when set, nothing is opened.
    #[cfg(test)]
    fake_busy: Option<BTreeSet<String>>,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs {
            root: PathBuf::from("/sys"),
            proc_: PathBuf::from("/proc"),
            dev: PathBuf::from("/dev"),
            settle: Duration::from_secs(2),
            #[cfg(test)]
            fake_busy: None,
        }
    }
}

/// Test-only knob (off unless set): with `GPUNVME_TEST_BIND_PAUSE=PATH`,
/// `bind` holds its claim on the block devices, creates `PATH.held`, and
/// waits (at most 60 s) for `PATH` to exist before it unbinds, so a test
/// can show that nothing takes the disk in that window. On timeout the
/// bind is abandoned, nothing unbound.
const TEST_BIND_PAUSE: &str = "GPUNVME_TEST_BIND_PAUSE";

fn test_pause_holding(claim: &Claim) -> Result<()> {
    let Some(go) = std::env::var_os(TEST_BIND_PAUSE).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    let go = PathBuf::from(go);
    let mut held = go.clone().into_os_string();
    held.push(".held");
    fs::write(&held, format!("{}\n", claim.held()))
        .map_err(|e| Error::io("signal the test pause", &held, e))?;
    let start = Instant::now();
    while !go.exists() {
        if start.elapsed() >= Duration::from_secs(60) {
            return Err(Error::Invalid(format!(
                "{TEST_BIND_PAUSE}: {} did not appear within 60 s; nothing was unbound",
                go.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Normalizes a PCI address: `bb:dd.f` gets domain `0000`, hex is
/// lower-cased; anything else is rejected.
pub fn normalize_bdf(s: &str) -> Result<String> {
    let s = s.trim().to_ascii_lowercase();
    let full = if s.matches(':').count() == 1 {
        format!("0000:{s}")
    } else {
        s
    };
    let bad = || {
        Error::Invalid(format!(
            "`{full}` is not a PCI address (expected dddd:bb:dd.f, e.g. 0000:01:00.0)"
        ))
    };
    let (dom, rest) = full.split_once(':').ok_or_else(bad)?;
    let (bus, rest) = rest.split_once(':').ok_or_else(bad)?;
    let (dev, func) = rest.split_once('.').ok_or_else(bad)?;
    let hex = |p: &str, n: usize| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(dom, 4)
        && hex(bus, 2)
        && hex(dev, 2)
        && func.len() == 1
        && (b'0'..=b'7').contains(&func.as_bytes()[0]))
    {
        return Err(bad());
    }
    if u8::from_str_radix(dev, 16).map_or(true, |d| d > 0x1f) {
        return Err(bad());
    }
    Ok(full)
}

fn read_trim(path: &Path, what: &str) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::io(format!("read {what}"), path, e))
}

fn parse_hex(s: &str, path: &Path) -> Result<u32> {
    let t = s.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    u32::from_str_radix(t, 16)
        .map_err(|_| Error::Invalid(format!("{} holds `{s}`, not a hex number", path.display())))
}

fn link_name(path: &Path) -> Option<String> {
    fs::read_link(path)
        .ok()?
        .file_name()?
        .to_str()
        .map(str::to_string)
}

fn sorted_dir_names(path: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(path)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `nvme<d>n<d>` (a namespace block device) or `nvme<d>c<d>n<d>` (one path
/// of a multipath namespace); for the latter also returns the name of the
/// multipath head block device, `nvme<subsys>n<ns>`.
fn namespace_names(name: &str) -> Option<(String, Option<String>)> {
    let rest = name.strip_prefix("nvme")?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (a, ns) = rest.split_once('n')?;
    if !digits(ns) {
        return None;
    }
    if digits(a) {
        return Some((name.to_string(), None));
    }
    let (subsys, ctrl) = a.split_once('c')?;
    if digits(subsys) && digits(ctrl) {
        return Some((name.to_string(), Some(format!("nvme{subsys}n{ns}"))));
    }
    None
}

/// `gpunvme<N>` (a controller node: `(N, None)`) or `gpunvme<N>n<NSID>`
/// (a namespace node: `(N, Some(NSID))`).
pub fn parse_node_name(name: &str) -> Option<(u32, Option<u32>)> {
    let rest = name.strip_prefix("gpunvme")?;
    let num = |s: &str| {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<u32>().ok())
            .flatten()
    };
    match rest.split_once('n') {
        None => Some((num(rest)?, None)),
        Some((n, ns)) => Some((num(n)?, Some(num(ns)?))),
    }
}

impl Sysfs {
    /// The real system: `/sys`, `/proc`, `/dev`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Uses `root` in place of `/sys`.
    pub fn with_root(root: impl Into<PathBuf>) -> Self {
        Sysfs {
            root: root.into(),
            ..Self::default()
        }
    }

    /// Uses `path` in place of `/proc` (mount tables, `swaps`, open
    /// files of processes).
    pub fn proc_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.proc_ = path.into();
        self
    }

    /// Uses `path` in place of `/dev` when looking for device nodes (a
    /// block device without a node there gets a temporary one).
    pub fn dev_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.dev = path.into();
        self
    }

    /// How long to wait for a driver to appear after `drivers_probe`
    /// (probing may be asynchronous). Default 2 s.
    pub fn settle_time(mut self, d: Duration) -> Self {
        self.settle = d;
        self
    }

    /// The sysfs root in use.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn pci(&self) -> PathBuf {
        self.root.join("bus/pci")
    }

    fn dev_path(&self, bdf: &str) -> PathBuf {
        self.pci().join("devices").join(bdf)
    }

    /// Whether a PCI driver named `name` is registered (its module loaded).
    pub fn driver_loaded(&self, name: &str) -> bool {
        self.pci().join("drivers").join(name).is_dir()
    }

    /// Every NVMe controller (PCI class 0x010802), sorted by address.
    pub fn list(&self) -> Result<Vec<NvmeController>> {
        let devices = self.pci().join("devices");
        let rd = fs::read_dir(&devices).map_err(|e| Error::io("list PCI devices", &devices, e))?;
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        let mut out = Vec::new();
        for bdf in names {
            let class_path = devices.join(&bdf).join("class");
            let Ok(class) = fs::read_to_string(&class_path) else {
                continue;
            };
            if parse_hex(&class, &class_path)? == NVME_CLASS {
                out.push(self.controller(&bdf)?);
            }
        }
        Ok(out)
    }

    /// The NVMe controller at `bdf`; an error if there is none or the
    /// device there is not an NVMe controller.
    pub fn controller(&self, bdf: &str) -> Result<NvmeController> {
        let bdf = normalize_bdf(bdf)?;
        let dir = self.dev_path(&bdf);
        if !dir.exists() {
            return Err(Error::NotFound(format!(
                "no PCI device {bdf} ({})",
                dir.display()
            )));
        }
        let class_path = dir.join("class");
        let class = parse_hex(&read_trim(&class_path, "the PCI class")?, &class_path)?;
        if class != NVME_CLASS {
            return Err(Error::Invalid(format!(
                "{bdf} is not an NVMe controller (PCI class 0x{class:06x}, NVMe is 0x{NVME_CLASS:06x})"
            )));
        }
        let vendor_path = dir.join("vendor");
        let device_path = dir.join("device");
        let vendor =
            parse_hex(&read_trim(&vendor_path, "the PCI vendor ID")?, &vendor_path)? as u16;
        let device =
            parse_hex(&read_trim(&device_path, "the PCI device ID")?, &device_path)? as u16;
        let driver = link_name(&dir.join("driver"));
        let driver_override = fs::read_to_string(dir.join("driver_override"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty() && s != "(null)");
        let (nvme_name, namespaces) = if driver.as_deref() == Some(NVME_DRIVER) {
            let nvme_dir = dir.join("nvme");
            let name = sorted_dir_names(&nvme_dir).into_iter().find(|n| {
                n.strip_prefix("nvme")
                    .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            });
            let ns = match &name {
                Some(n) => self
                    .namespace_disks(&nvme_dir.join(n))
                    .into_iter()
                    .map(|(d, _)| d)
                    .collect(),
                None => Vec::new(),
            };
            (name, ns)
        } else {
            (None, Vec::new())
        };
        let (node, namespace_nodes) = if driver.as_deref() == Some(GPUNVME_DRIVER) {
            (self.find_node(&bdf), self.find_namespace_nodes(&bdf))
        } else {
            (None, Vec::new())
        };
        Ok(NvmeController {
            bdf,
            vendor,
            device,
            driver,
            driver_override,
            nvme_name,
            namespaces,
            node,
            namespace_nodes,
        })
    }

    /// The gpunvme device node of the controller at `bdf`: through the
    /// misc device's `device` link or the PCI device's `misc/` directory,
    /// else by asking each `/dev/gpunvme<N>` node for its address.
    /// Namespace nodes (`gpunvme<N>n<NSID>`) are never it.
    pub fn find_node(&self, bdf: &str) -> Option<PathBuf> {
        let is_ctrl = |n: &String| matches!(parse_node_name(n), Some((_, None)));
        if let Some(name) = self.misc_names(bdf).into_iter().find(is_ctrl) {
            return Some(self.dev.join(name));
        }
        for name in sorted_dir_names(&self.dev).into_iter().filter(is_ctrl) {
            let path = self.dev.join(&name);
            if let Ok(info) = crate::Controller::open(&path).and_then(|c| c.info()) {
                if info.bdf == bdf {
                    return Some(path);
                }
            }
        }
        None
    }

    /// The namespace nodes (`/dev/gpunvme<N>n<NSID>`) of the controller at
    /// `bdf`, as sysfs links them to it, lowest NSID first.
    pub fn find_namespace_nodes(&self, bdf: &str) -> Vec<PathBuf> {
        let mut v: Vec<(u32, String)> = self
            .misc_names(bdf)
            .into_iter()
            .filter_map(|n| match parse_node_name(&n) {
                Some((_, Some(nsid))) => Some((nsid, n)),
                _ => None,
            })
            .collect();
        v.sort();
        v.into_iter().map(|(_, n)| self.dev.join(n)).collect()
    }

    /// Names of the gpunvme misc devices of `bdf`: those under
    /// `class/misc` whose `device` link names it, else the PCI device's
    /// `misc/` directory; sorted.
    fn misc_names(&self, bdf: &str) -> Vec<String> {
        let misc = self.root.join("class/misc");
        let linked: Vec<String> = sorted_dir_names(&misc)
            .into_iter()
            .filter(|n| parse_node_name(n).is_some())
            .filter(|n| link_name(&misc.join(n).join("device")).as_deref() == Some(bdf))
            .collect();
        if !linked.is_empty() {
            return linked;
        }
        sorted_dir_names(&self.dev_path(bdf).join("misc"))
            .into_iter()
            .filter(|n| parse_node_name(n).is_some())
            .collect()
    }

    /// Block devices of the namespaces under an nvme controller directory
    /// (`.../nvme/nvme0`), as (name, its sysfs directory). Multipath path
    /// devices (`nvme0c0n1`) are reported as their head (`nvme0n1`).
    fn namespace_disks(&self, ctrl_dir: &Path) -> Vec<(String, PathBuf)> {
        let mut out = Vec::new();
        for name in sorted_dir_names(ctrl_dir) {
            match namespace_names(&name) {
                Some((n, None)) => out.push((n, ctrl_dir.join(&name))),
                Some((path_dev, Some(head))) => {
                    out.push((path_dev, ctrl_dir.join(&name)));
                    out.push((head.clone(), self.root.join("class/block").join(&head)));
                }
                None => {}
            }
        }
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// Adds `name` (sysfs directory `dir`), its partitions and, recursively,
    /// the devices holding any of them (device-mapper, md) to `acc`.
    fn collect_block(
        &self,
        name: &str,
        dir: &Path,
        family: Option<usize>,
        acc: &mut Vec<BlockDev>,
    ) {
        if acc.iter().any(|b| b.name == name) {
            return;
        }
        let dir = if dir.exists() {
            dir.to_path_buf()
        } else {
            self.root.join("class/block").join(name)
        };
        let holders: Vec<String> = sorted_dir_names(&dir.join("holders"));
        let held_by = holders
            .iter()
            .map(|h| {
                match fs::read_to_string(self.root.join("class/block").join(h).join("dm/name")) {
                    Ok(dm) if !dm.trim().is_empty() => format!("{h} (device-mapper {})", dm.trim()),
                    _ => h.clone(),
                }
            })
            .collect();
        // A device without a `dev` attribute cannot be opened (nor mounted):
        // only its holders matter.
        let me = match fs::read_to_string(dir.join("dev"))
            .ok()
            .and_then(|s| claim::parse_devno(&s))
        {
            Some(dev) => {
                let i = acc.len();
                acc.push(BlockDev {
                    name: name.to_string(),
                    dev,
                    family: family.unwrap_or(i),
                    held_by,
                });
                Some(i)
            }
            None => None,
        };
        for sub in sorted_dir_names(&dir) {
            if sub.starts_with(name) && dir.join(&sub).join("partition").exists() {
                self.collect_block(&sub, &dir.join(&sub), me, acc);
            }
        }
        for h in holders {
            let hdir = self.root.join("class/block").join(&h);
            self.collect_block(&h, &hdir, None, acc);
        }
    }

    /// The block devices of the controller at `bdf` (namespaces, their
    /// partitions, their device-mapper/md holders, recursively) and its
    /// character devices (`nvme0`, `ng0n1`). Empty when it is not bound
    /// to `nvme`.
    fn storage_of(&self, ctrl: &NvmeController) -> (Vec<BlockDev>, Vec<(String, claim::DevNo)>) {
        let mut blocks = Vec::new();
        let mut chars = Vec::new();
        let Some(nvme_name) = &ctrl.nvme_name else {
            return (blocks, chars);
        };
        let ctrl_dir = self.dev_path(&ctrl.bdf).join("nvme").join(nvme_name);
        for (disk, dir) in self.namespace_disks(&ctrl_dir) {
            // A multipath path device (nvme0c0n1) is hidden: no node opens
            // it; its head (listed after it) is what users open and hold.
            if namespace_names(&disk).is_some_and(|(_, head)| head.is_some()) {
                continue;
            }
            self.collect_block(&disk, &dir, None, &mut blocks);
        }
        let char_dev = |dir: &Path| {
            fs::read_to_string(dir.join("dev"))
                .ok()
                .and_then(|s| claim::parse_devno(&s))
        };
        if let Some(d) = char_dev(&ctrl_dir) {
            chars.push((nvme_name.clone(), d));
        }
        for n in sorted_dir_names(&ctrl_dir) {
            if n.starts_with("ng") {
                if let Some(d) = char_dev(&ctrl_dir.join(&n)) {
                    chars.push((n, d));
                }
            }
        }
        (blocks, chars)
    }

    fn check_storage(&self, ctrl: &NvmeController) -> (Claim, Vec<InUse>) {
        let (blocks, chars) = self.storage_of(ctrl);
        #[cfg(test)]
        let fake_busy = self.fake_busy.as_ref();
        #[cfg(not(test))]
        let fake_busy = None;
        claim::check(
            &blocks,
            &chars,
            &claim::Roots {
                sys: &self.root,
                proc_: &self.proc_,
                dev: &self.dev,
                fake_busy,
            },
        )
    }

    /// What makes the controller at `bdf` busy: for every block device of
    /// its namespaces (partitions and device-mapper/md holders included),
    /// the kernel's answer to an exclusive open, and then who holds it:
    /// mounts (in any mount namespace, matched by device number), active
    /// swap, holders, processes with it open (also the controller's and
    /// namespaces' character devices). Empty when the controller is not
    /// bound to `nvme` (it then has no block devices) or nothing uses it.
    pub fn in_use(&self, bdf: &str) -> Result<Vec<InUse>> {
        let ctrl = self.controller(bdf)?;
        Ok(self.check_storage(&ctrl).1)
    }

    /// Claims the block devices `names` (whole disks or partitions, e.g.
    /// `nvme0n1p3`; a whole disk covers its partitions) exclusively, as
    /// `bind` claims a controller's: refused, naming the mount point, swap,
    /// holder or process, while anything uses one. `what` says what the
    /// claim is for, in the refusal. Held until the [`Claim`] is dropped:
    /// meanwhile nothing can mount, swap on or claim them.
    pub fn claim_block_devices(&self, names: &[String], what: &str) -> Result<Claim> {
        let mut blocks = Vec::new();
        for n in names {
            let dir = self.root.join("class/block").join(n);
            if !dir.join("dev").exists() {
                return Err(Error::NotFound(format!(
                    "no block device {n} ({} has no dev attribute)",
                    dir.display()
                )));
            }
            self.collect_block(n, &dir, None, &mut blocks);
        }
        #[cfg(test)]
        let fake_busy = self.fake_busy.as_ref();
        #[cfg(not(test))]
        let fake_busy = None;
        let (claim, uses) = claim::check(
            &blocks,
            &[],
            &claim::Roots {
                sys: &self.root,
                proc_: &self.proc_,
                dev: &self.dev,
                fake_busy,
            },
        );
        if uses.is_empty() {
            return Ok(claim);
        }
        let list: Vec<String> = uses
            .iter()
            .map(|u| format!("{} {}", u.device, u.by))
            .collect();
        Err(Error::Refused(format!(
            "{what}: {} in use: {} (unmount it, swapoff, remove the holders or stop those processes first)",
            names.join(", "),
            list.join(", ")
        )))
    }

    /// The `/dev` directory in use.
    pub(crate) fn dev_root(&self) -> &Path {
        &self.dev
    }

    /// Claims every block device of `ctrl` exclusively, or refuses (naming
    /// what uses it) if anything does. The claim is to be held until the
    /// controller has left its driver.
    fn claim_free(&self, ctrl: &NvmeController) -> Result<Claim> {
        let (claim, uses) = self.check_storage(ctrl);
        if uses.is_empty() {
            return Ok(claim);
        }
        let list: Vec<String> = uses
            .iter()
            .map(|u| format!("{} {}", u.device, u.by))
            .collect();
        let unchecked = uses
            .iter()
            .any(|u| u.by.starts_with("could not be checked"));
        Err(Error::Refused(format!(
            "{} ({}) is in use{}: {}; nothing was unbound (unmount, swapoff, remove the holders or stop those processes first)",
            ctrl.bdf,
            ctrl.nvme_name.as_deref().unwrap_or("nvme"),
            if unchecked { " or could not be checked" } else { "" },
            list.join(", ")
        )))
    }

    fn write_attr(&self, path: &Path, value: &str, what: &str) -> Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io(what, path, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| Error::io(what, path, e))
    }

    fn wait_for_driver(&self, bdf: &str, want: Option<&str>) -> Option<String> {
        let link = self.dev_path(bdf).join("driver");
        let start = Instant::now();
        loop {
            let now = link_name(&link);
            if now.as_deref() == want || start.elapsed() >= self.settle {
                return now;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Hands the controller at `bdf` to gpunvme: unbinds it from its current
    /// driver (refused if its storage is in use, see [`Sysfs::in_use`]; the
    /// block devices stay opened `O_EXCL` until the unbind is done, so
    /// nothing can take them in between), sets
    /// `driver_override` to `gpunvme`, triggers `drivers_probe` and checks
    /// that gpunvme bound it. On failure it tries to give the controller
    /// back to its previous driver and says so.
    pub fn bind(&self, bdf: &str) -> Result<NvmeController> {
        let ctrl = self.controller(bdf)?;
        let bdf = ctrl.bdf.clone();
        if ctrl.driver.as_deref() == Some(GPUNVME_DRIVER) {
            return Ok(ctrl);
        }
        if !self.driver_loaded(GPUNVME_DRIVER) {
            return Err(Error::NotFound(format!(
                "the gpunvme driver is not loaded (no {}): load the module first",
                self.pci().join("drivers").join(GPUNVME_DRIVER).display()
            )));
        }
        let claim = if ctrl.driver.as_deref() == Some(NVME_DRIVER) {
            let c = self.claim_free(&ctrl)?;
            test_pause_holding(&c)?;
            Some(c)
        } else {
            None
        };
        let dev = self.dev_path(&bdf);
        if let Some(d) = &ctrl.driver {
            self.write_attr(
                &dev.join("driver/unbind"),
                &bdf,
                &format!("unbind {bdf} from {d}"),
            )?;
        }
        // The unbind returned: the driver's remove has run and the block
        // devices are gone; let go of them.
        drop(claim);
        let result = self
            .write_attr(
                &dev.join("driver_override"),
                GPUNVME_DRIVER,
                "set driver_override",
            )
            .and_then(|_| {
                self.write_attr(
                    &self.pci().join("drivers_probe"),
                    &bdf,
                    "trigger drivers_probe",
                )
            })
            .and_then(|_| match self.wait_for_driver(&bdf, Some(GPUNVME_DRIVER)) {
                Some(d) if d == GPUNVME_DRIVER => Ok(()),
                now => Err(Error::Invalid(format!(
                    "gpunvme did not bind {bdf} (driver now: {}); see the kernel log",
                    now.as_deref().unwrap_or("none")
                ))),
            });
        if let Err(e) = result {
            let restored = self.restore(
                &bdf,
                ctrl.driver.as_deref(),
                ctrl.driver_override.as_deref(),
            );
            return Err(match e {
                Error::Invalid(m) => Error::Invalid(format!("{m}; {restored}")),
                other => Error::Invalid(format!("{other}; {restored}")),
            });
        }
        self.controller(&bdf)
    }

    /// Best effort after a failed bind: put driver_override back and rebind
    /// the previous driver. Returns a sentence saying what happened.
    fn restore(&self, bdf: &str, driver: Option<&str>, old_override: Option<&str>) -> String {
        let dev = self.dev_path(bdf);
        let _ = self.write_attr(
            &dev.join("driver_override"),
            old_override.unwrap_or("\n"),
            "restore driver_override",
        );
        let Some(d) = driver else {
            return "the controller is left without a driver".into();
        };
        if link_name(&dev.join("driver")).is_none() {
            let bind = self.pci().join("drivers").join(d).join("bind");
            if let Err(e) = self.write_attr(&bind, bdf, "rebind") {
                return format!("giving it back to {d} failed too: {e}");
            }
        }
        match link_name(&dev.join("driver")) {
            Some(now) if now == d => format!("it was given back to {d}"),
            now => format!(
                "giving it back to {d} did not take (driver now: {})",
                now.as_deref().unwrap_or("none")
            ),
        }
    }

    /// Takes the controller at `bdf` from gpunvme. With `to_kernel_nvme`,
    /// sets `driver_override` to `nvme`, triggers `drivers_probe` and checks
    /// that `nvme` bound it; without, clears `driver_override` and leaves
    /// the controller without a driver (a later `drivers_probe` or rescan
    /// lets the kernel match it by class again).
    pub fn unbind(&self, bdf: &str, to_kernel_nvme: bool) -> Result<NvmeController> {
        let ctrl = self.controller(bdf)?;
        let bdf = ctrl.bdf.clone();
        match ctrl.driver.as_deref() {
            Some(GPUNVME_DRIVER) | None => {}
            Some(NVME_DRIVER) if to_kernel_nvme => return Ok(ctrl),
            Some(other) => {
                return Err(Error::Invalid(format!(
                    "{bdf} is bound to {other}, not to gpunvme; nothing to unbind"
                )))
            }
        }
        if to_kernel_nvme && !self.driver_loaded(NVME_DRIVER) {
            return Err(Error::NotFound(format!(
                "the kernel nvme driver is not loaded (no {}): modprobe nvme first",
                self.pci().join("drivers").join(NVME_DRIVER).display()
            )));
        }
        let dev = self.dev_path(&bdf);
        if ctrl.driver.is_some() {
            self.write_attr(
                &dev.join("driver/unbind"),
                &bdf,
                &format!("unbind {bdf} from gpunvme"),
            )?;
        }
        if to_kernel_nvme {
            self.write_attr(
                &dev.join("driver_override"),
                NVME_DRIVER,
                "set driver_override",
            )?;
            self.write_attr(
                &self.pci().join("drivers_probe"),
                &bdf,
                "trigger drivers_probe",
            )?;
            match self.wait_for_driver(&bdf, Some(NVME_DRIVER)) {
                Some(d) if d == NVME_DRIVER => {}
                now => {
                    return Err(Error::Invalid(format!(
                        "nvme did not bind {bdf} (driver now: {}); see the kernel log",
                        now.as_deref().unwrap_or("none")
                    )))
                }
            }
        } else {
            self.write_attr(&dev.join("driver_override"), "\n", "clear driver_override")?;
            if let Some(d) = self.wait_for_driver(&bdf, None) {
                return Err(Error::Invalid(format!(
                    "{bdf} is still bound to {d} after unbind"
                )));
            }
        }
        self.controller(&bdf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A throw-away directory, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "gpunvme-sysfs-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&p);
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    /// A fake /sys with:
    /// - 0000:00:04.0: NVMe, bound to nvme as nvme0, namespaces nvme0n1
    ///   (partitions p1, p2) and nvme0n2 (held by dm-0 = "vg-data");
    /// - 0000:00:05.0: NVMe, bound to gpunvme, node gpunvme0, namespace
    ///   nodes gpunvme0n2 and gpunvme0n10;
    /// - 0000:00:06.0: NVMe, no driver;
    /// - 0000:00:01.0: a non-NVMe device (VGA).
    struct Fake {
        tmp: TempDir,
    }

    impl Fake {
        fn new() -> Self {
            let tmp = TempDir::new("fake");
            let sys = tmp.0.join("sys");
            let pci = sys.join("bus/pci");
            for d in ["nvme", "gpunvme"] {
                write(&pci.join("drivers").join(d).join("bind"), "");
                write(&pci.join("drivers").join(d).join("unbind"), "");
            }
            write(&pci.join("drivers_probe"), "");
            let dev = |bdf: &str, class: &str, driver: Option<&str>| {
                let d = pci.join("devices").join(bdf);
                write(&d.join("class"), &format!("{class}\n"));
                write(&d.join("vendor"), "0x1b36\n");
                write(&d.join("device"), "0x0010\n");
                write(&d.join("driver_override"), "(null)\n");
                if let Some(drv) = driver {
                    symlink(format!("../../drivers/{drv}"), d.join("driver")).unwrap();
                }
                d
            };
            let d4 = dev("0000:00:04.0", "0x010802", Some("nvme"));
            let c = d4.join("nvme/nvme0");
            write(&c.join("nvme0n1/dev"), "259:0\n");
            write(&c.join("nvme0n1/nvme0n1p1/partition"), "1\n");
            write(&c.join("nvme0n1/nvme0n1p1/dev"), "259:1\n");
            write(&c.join("nvme0n1/nvme0n1p2/partition"), "2\n");
            write(&c.join("nvme0n1/nvme0n1p2/dev"), "259:2\n");
            write(&c.join("nvme0n2/dev"), "259:3\n");
            fs::create_dir_all(c.join("nvme0n2/holders")).unwrap();
            symlink(
                "../../../../virtual/block/dm-0",
                c.join("nvme0n2/holders/dm-0"),
            )
            .unwrap();
            write(&sys.join("class/block/dm-0/dm/name"), "vg-data\n");
            write(&sys.join("class/block/dm-0/dev"), "253:0\n");
            dev("0000:00:05.0", "0x010802", Some("gpunvme"));
            // The controller node and two namespace nodes ("gpunvme0n10"
            // sorts before "gpunvme0n2" by name).
            for node in ["gpunvme0n10", "gpunvme0", "gpunvme0n2"] {
                fs::create_dir_all(sys.join("class/misc").join(node)).unwrap();
                symlink(
                    "../../../bus/pci/devices/0000:00:05.0",
                    sys.join("class/misc").join(node).join("device"),
                )
                .unwrap();
            }
            dev("0000:00:06.0", "0x010802", None);
            dev("0000:00:01.0", "0x030000", None);
            write(
                &tmp.0.join("proc/self/mountinfo"),
                "22 1 0:21 / /proc rw - proc proc rw\n21 1 8:1 / / rw - ext4 /dev/sda1 rw\n",
            );
            write(
                &tmp.0.join("proc/swaps"),
                "Filename Type Size Used Priority\n",
            );
            Fake { tmp }
        }

        /// The fake: nothing is busy for the kernel.
        fn sysfs(&self) -> Sysfs {
            self.busy(&[])
        }

        /// The fake, where the kernel refuses `O_EXCL` for `names`.
        fn busy(&self, names: &[&str]) -> Sysfs {
            let mut s = Sysfs::with_root(self.tmp.0.join("sys"))
                .proc_dir(self.tmp.0.join("proc"))
                .dev_dir(self.tmp.0.join("dev"))
                .settle_time(Duration::ZERO);
            s.fake_busy = Some(names.iter().map(|n| n.to_string()).collect());
            s
        }

        /// Appends mountinfo lines ("ID PARENT MAJ:MIN ROOT POINT OPTS - TYPE
        /// SOURCE OPTS") to this process's mount table.
        fn mounts(&self, s: &str) {
            let p = self.tmp.0.join("proc/self/mountinfo");
            let old = fs::read_to_string(&p).unwrap();
            write(&p, &format!("{old}{s}"));
        }

        fn no_dm_holder(&self) {
            fs::remove_file(
                self.pci()
                    .join("devices/0000:00:04.0/nvme/nvme0/nvme0n2/holders/dm-0"),
            )
            .unwrap();
        }

        fn pci(&self) -> PathBuf {
            self.tmp.0.join("sys/bus/pci")
        }

        fn read(&self, rel: &str) -> String {
            fs::read_to_string(self.pci().join(rel)).unwrap()
        }
    }

    #[test]
    fn bdf_normalization() {
        assert_eq!(normalize_bdf("00:04.0").unwrap(), "0000:00:04.0");
        assert_eq!(normalize_bdf("0000:0A:1f.7").unwrap(), "0000:0a:1f.7");
        for bad in [
            "",
            "nvme0",
            "0000:00:04",
            "0000:00:20.0",
            "0000:00:04.8",
            "00000:00:04.0",
            "../x:00:00.0",
        ] {
            assert!(normalize_bdf(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespace_name_parsing() {
        assert_eq!(namespace_names("nvme0n1"), Some(("nvme0n1".into(), None)));
        assert_eq!(
            namespace_names("nvme1c2n3"),
            Some(("nvme1c2n3".into(), Some("nvme1n3".into())))
        );
        assert_eq!(namespace_names("nvme0"), None);
        assert_eq!(namespace_names("nvme0n1p1"), None);
        assert_eq!(namespace_names("ng0n1"), None);
    }

    #[test]
    fn node_name_parsing() {
        assert_eq!(parse_node_name("gpunvme0"), Some((0, None)));
        assert_eq!(parse_node_name("gpunvme12n3"), Some((12, Some(3))));
        for bad in [
            "gpunvme",
            "gpunvmen1",
            "gpunvme0n",
            "gpunvme0p1",
            "nvme0n1",
            "gpunvme-1",
        ] {
            assert_eq!(parse_node_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn lists_only_nvme_controllers() {
        let f = Fake::new();
        let list = f.sysfs().list().unwrap();
        let bdfs: Vec<&str> = list.iter().map(|c| c.bdf.as_str()).collect();
        assert_eq!(bdfs, ["0000:00:04.0", "0000:00:05.0", "0000:00:06.0"]);

        let c = &list[0];
        assert_eq!((c.vendor, c.device), (0x1b36, 0x0010));
        assert_eq!(c.driver.as_deref(), Some("nvme"));
        assert_eq!(c.driver_override, None);
        assert_eq!(c.nvme_name.as_deref(), Some("nvme0"));
        assert_eq!(c.namespaces, ["nvme0n1", "nvme0n2"]);
        assert_eq!(c.node, None);

        let g = &list[1];
        assert_eq!(g.driver.as_deref(), Some("gpunvme"));
        assert_eq!(g.node, Some(f.tmp.0.join("dev/gpunvme0")));
        assert_eq!(
            g.namespace_nodes,
            [
                f.tmp.0.join("dev/gpunvme0n2"),
                f.tmp.0.join("dev/gpunvme0n10")
            ]
        );
        assert!(g.namespaces.is_empty());
        assert!(c.namespace_nodes.is_empty());

        assert_eq!(list[2].driver, None);
    }

    #[test]
    fn controller_rejects_non_nvme_and_missing() {
        let f = Fake::new();
        let s = f.sysfs();
        let e = s.controller("0000:00:01.0").unwrap_err().to_string();
        assert!(
            e.contains("not an NVMe controller") && e.contains("0x030000"),
            "{e}"
        );
        assert!(matches!(
            s.controller("0000:00:09.0"),
            Err(Error::NotFound(_))
        ));
    }

    #[test]
    fn storage_lists_namespaces_partitions_and_holders() {
        let f = Fake::new();
        let s = f.sysfs();
        let ctrl = s.controller("0000:00:04.0").unwrap();
        let (blocks, chars) = s.storage_of(&ctrl);
        let names: Vec<(&str, claim::DevNo, &str)> = blocks
            .iter()
            .map(|b| (b.name.as_str(), b.dev, blocks[b.family].name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("nvme0n1", (259, 0), "nvme0n1"),
                ("nvme0n1p1", (259, 1), "nvme0n1"),
                ("nvme0n1p2", (259, 2), "nvme0n1"),
                ("nvme0n2", (259, 3), "nvme0n2"),
                ("dm-0", (253, 0), "dm-0"),
            ]
        );
        assert_eq!(blocks[3].held_by, ["dm-0 (device-mapper vg-data)"]);
        assert!(chars.is_empty());
    }

    #[test]
    fn multipath_checks_the_head_not_the_hidden_path() {
        // Native NVMe multipath: the controller has the hidden path device
        // nvme1c1n1; the block device users open (and partition) is the
        // head nvme1n1, under the subsystem.
        let f = Fake::new();
        let d6 = f.pci().join("devices/0000:00:06.0");
        fs::remove_file(d6.join("driver")).ok();
        symlink("../../drivers/nvme", d6.join("driver")).unwrap();
        write(&d6.join("nvme/nvme1/dev"), "240:1\n");
        write(&d6.join("nvme/nvme1/nvme1c1n1/dev"), "259:8\n");
        write(&d6.join("nvme/nvme1/ng1n1/dev"), "241:1\n");
        let head = f.tmp.0.join("sys/class/block/nvme1n1");
        write(&head.join("dev"), "259:9\n");
        write(&head.join("nvme1n1p1/partition"), "1\n");
        write(&head.join("nvme1n1p1/dev"), "259:10\n");
        let s = f.sysfs();
        let ctrl = s.controller("0000:00:06.0").unwrap();
        let (blocks, chars) = s.storage_of(&ctrl);
        let names: Vec<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["nvme1n1", "nvme1n1p1"]);
        assert_eq!(
            chars,
            [
                ("nvme1".to_string(), (240, 1)),
                ("ng1n1".to_string(), (241, 1))
            ]
        );
        f.mounts("40 21 259:10 / /home rw - ext4 /dev/nvme1n1p1 rw\n");
        let msg = f
            .busy(&["nvme1n1", "nvme1n1p1"])
            .bind("0000:00:06.0")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("nvme1n1p1 mounted on /home"), "{msg}");
        assert!(!msg.contains("not visible here"), "{msg}");
    }

    #[test]
    fn refuses_bind_when_a_partition_is_mounted() {
        let f = Fake::new();
        f.no_dm_holder();
        f.mounts("40 21 259:2 / /mnt/my\\040data rw - xfs /dev/nvme0n1p2 rw\n");
        // The kernel: the partition is claimed, so is its whole disk.
        let s = f.busy(&["nvme0n1p2", "nvme0n1"]);
        let uses = s.in_use("0000:00:04.0").unwrap();
        assert_eq!(
            uses,
            [InUse {
                device: "nvme0n1p2".into(),
                by: "mounted on /mnt/my data".into()
            }]
        );
        let e = s.bind("0000:00:04.0").unwrap_err();
        assert!(matches!(e, Error::Refused(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("nvme0n1p2 mounted on /mnt/my data"), "{msg}");
        assert!(
            msg.contains("(nvme0)") && msg.contains("nothing was unbound"),
            "{msg}"
        );
        // Nothing was written: still bound to nvme, no override.
        assert_eq!(f.read("drivers/nvme/unbind"), "");
        assert_eq!(f.read("devices/0000:00:04.0/driver_override"), "(null)\n");
    }

    #[test]
    fn mounts_match_by_device_number_not_by_name() {
        // Mounted the way the kernel mounts root: the table says /dev/root.
        let f = Fake::new();
        f.no_dm_holder();
        f.mounts("40 21 259:0 / /data rw - ext4 /dev/root rw\n");
        let msg = f
            .busy(&["nvme0n1"])
            .bind("00:04.0")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("nvme0n1 mounted on /data (as /dev/root, ext4)"),
            "{msg}"
        );
        // A source string naming the disk says nothing: another device.
        let f = Fake::new();
        f.no_dm_holder();
        f.mounts("40 21 8:2 / /x rw - ext4 /dev/nvme0n1 rw\n");
        assert!(f.sysfs().in_use("0000:00:04.0").unwrap().is_empty());
    }

    #[test]
    fn finds_mounts_of_other_mount_namespaces() {
        let f = Fake::new();
        f.no_dm_holder();
        write(
            &f.tmp.0.join("proc/4242/mountinfo"),
            "21 1 8:1 / / rw - ext4 /dev/sda1 rw\n77 21 259:3 / /srv/other rw - ext4 /dev/nvme0n2 rw\n",
        );
        write(&f.tmp.0.join("proc/4242/comm"), "sleep\n");
        let uses = f.busy(&["nvme0n2"]).in_use("0000:00:04.0").unwrap();
        assert_eq!(uses.len(), 1, "{uses:?}");
        assert_eq!(uses[0].device, "nvme0n2");
        assert!(
            uses[0]
                .by
                .starts_with("mounted on /srv/other as seen by pid 4242 (sleep)"),
            "{uses:?}"
        );
    }

    #[test]
    fn refuses_bind_when_a_dm_holder_is_mounted() {
        let f = Fake::new();
        f.mounts("40 21 253:0 / /srv rw - ext4 /dev/mapper/vg-data rw\n");
        let msg = f
            .busy(&["nvme0n2", "dm-0"])
            .bind("0000:00:04.0")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("dm-0 mounted on /srv (as /dev/mapper/vg-data, ext4)"),
            "{msg}"
        );
        assert!(
            msg.contains("nvme0n2 held by dm-0 (device-mapper vg-data)"),
            "{msg}"
        );
        // The holder alone (not mounted) refuses too.
        let msg = f.busy(&["nvme0n2"]).bind("0000:00:04.0");
        let msg = msg.unwrap_err().to_string();
        assert!(
            msg.contains("nvme0n2 held by dm-0 (device-mapper vg-data)"),
            "{msg}"
        );
        assert_eq!(f.read("drivers/nvme/unbind"), "");
    }

    #[test]
    fn refuses_bind_when_used_as_swap() {
        let f = Fake::new();
        f.no_dm_holder();
        write(
            &f.tmp.0.join("proc/swaps"),
            "Filename Type Size Used Priority\n/dev/nvme0n1p1 partition 1024 0 -2\n",
        );
        let msg = f
            .busy(&["nvme0n1p1", "nvme0n1"])
            .bind("0000:00:04.0")
            .unwrap_err()
            .to_string();
        assert!(msg.contains("nvme0n1p1 active swap"), "{msg}");
    }

    #[test]
    fn a_busy_disk_nobody_explains_is_still_refused() {
        let f = Fake::new();
        f.no_dm_holder();
        let msg = f
            .busy(&["nvme0n2"])
            .bind("0000:00:04.0")
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("nvme0n2 held open exclusively by something not visible here"),
            "{msg}"
        );
        assert_eq!(f.read("drivers/nvme/unbind"), "");
    }

    #[test]
    fn unused_controller_is_not_in_use() {
        let f = Fake::new();
        f.no_dm_holder();
        f.mounts("40 21 259:9 / /other rw - ext4 /dev/nvme1n1 rw\n");
        assert!(f.sysfs().in_use("0000:00:04.0").unwrap().is_empty());
    }

    #[test]
    fn bind_writes_the_sequence_and_verifies() {
        let f = Fake::new();
        f.no_dm_holder();
        // The fake kernel does not react to the writes, so the driver link
        // still says nvme afterwards: bind must notice and say so.
        let e = f.sysfs().bind("0000:00:04.0").unwrap_err().to_string();
        assert!(e.contains("gpunvme did not bind 0000:00:04.0"), "{e}");
        assert!(e.contains("given back to nvme"), "{e}");
        assert_eq!(f.read("drivers/nvme/unbind"), "0000:00:04.0");
        assert_eq!(f.read("drivers_probe"), "0000:00:04.0");
        // driver_override was restored (cleared) after the failure.
        assert_eq!(f.read("devices/0000:00:04.0/driver_override"), "\n");
    }

    #[test]
    fn bind_needs_the_module() {
        let f = Fake::new();
        fs::remove_dir_all(f.pci().join("drivers/gpunvme")).unwrap();
        let e = f.sysfs().bind("0000:00:06.0").unwrap_err().to_string();
        assert!(e.contains("gpunvme driver is not loaded"), "{e}");
        assert_eq!(f.read("drivers_probe"), "");
    }

    #[test]
    fn bind_of_a_bound_controller_is_a_no_op() {
        let f = Fake::new();
        let c = f.sysfs().bind("0000:00:05.0").unwrap();
        assert_eq!(c.driver.as_deref(), Some("gpunvme"));
        assert_eq!(f.read("drivers_probe"), "");
    }

    #[test]
    fn unbind_to_nvme_writes_override_and_probes() {
        let f = Fake::new();
        let e = f
            .sysfs()
            .unbind("0000:00:05.0", true)
            .unwrap_err()
            .to_string();
        // The fake link still points at gpunvme.
        assert!(e.contains("nvme did not bind"), "{e}");
        assert_eq!(f.read("drivers/gpunvme/unbind"), "0000:00:05.0");
        assert_eq!(f.read("devices/0000:00:05.0/driver_override"), "nvme");
        assert_eq!(f.read("drivers_probe"), "0000:00:05.0");
    }

    #[test]
    fn unbind_leaving_no_driver_clears_override() {
        let f = Fake::new();
        // Simulate the kernel: the driver link goes away on unbind.
        fs::remove_file(f.pci().join("devices/0000:00:05.0/driver")).unwrap();
        let c = f.sysfs().unbind("0000:00:05.0", false).unwrap();
        assert_eq!(c.driver, None);
        assert_eq!(f.read("devices/0000:00:05.0/driver_override"), "\n");
        assert_eq!(f.read("drivers_probe"), "");
    }

    #[test]
    fn unbind_refuses_other_drivers() {
        let f = Fake::new();
        let e = f
            .sysfs()
            .unbind("0000:00:04.0", false)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bound to nvme, not to gpunvme"), "{e}");
        assert_eq!(f.read("drivers/nvme/unbind"), "");
        // Already where --to-nvme wants it: fine.
        assert!(f.sysfs().unbind("0000:00:04.0", true).is_ok());
    }
}
