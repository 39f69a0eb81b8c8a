// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `gpunvme sriov`: give a virtual function of an SR-IOV NVMe controller
//! its own queue and interrupt resources, bring its secondary controller
//! online, attach a namespace to it and enable the VF, while the physical
//! function stays with the kernel nvme driver (and its file systems).
//!
//! Every admin command goes through the kernel nvme driver's passthrough
//! ioctl on the PF's `/dev/nvmeX` (the PF's driver owns its admin queue).
//! With `--print` nothing is changed: the equivalent nvme-cli commands are
//! printed instead.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use gpunvme::sysfs::{normalize_bdf, Sysfs, GPUNVME_DRIVER};

use crate::habits::{parse_device, Device, Output};

use crate::Res;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

/// `-o json`: the report is one JSON document on stdout, so the progress
/// lines go to stderr, and into the document's "log".
static JSON: AtomicBool = AtomicBool::new(false);
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

macro_rules! say {
    ($($t:tt)*) => {{
        let line = format!($($t)*);
        if JSON.load(Relaxed) {
            eprintln!("{line}");
            LINES.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        } else {
            println!("{line}");
        }
    }};
}

/// What `-o json` reports besides the log.
#[derive(Default)]
struct Report {
    pf: Option<serde_json::Value>,
    vfs: Vec<serde_json::Value>,
}

#[derive(Args, Debug)]
pub struct SriovArgs {
    /// The physical function: its PCI address (0000:01:00.0 or 01:00.0)
    /// or its kernel nvme node (/dev/nvme0, nvme0). It must be bound to
    /// the nvme driver.
    #[arg(value_name = "DEVICE", value_parser = parse_device)]
    pf: Device,
    /// Number of VFs to enable; 0 takes the secondary controllers offline
    /// (detaching the -n namespaces) and disables the VFs.
    #[arg(long, value_name = "N", default_value_t = 1)]
    vfs: u16,
    /// Flexible queue resources per VF (NVMe's VQ resources; its admin
    /// queue counts: N-1 I/O queue pairs). Default: the most the
    /// controller allows per VF.
    #[arg(long, value_name = "N")]
    flex_queues: Option<u16>,
    /// Flexible interrupt resources per VF (VI). Default: the most allowed.
    #[arg(long, value_name = "N")]
    flex_interrupts: Option<u16>,
    /// Namespace to attach to a VF's controller (repeat, or a list 2,3:
    /// the first goes to VF 1, the next to VF 2, ...). With --vfs 0:
    /// namespaces to detach.
    #[arg(
        short = 'n',
        long = "namespace-id",
        value_name = "NSID",
        value_delimiter = ','
    )]
    nsid: Vec<u32>,
    /// With --vfs 0: also give every flexible resource back to the primary
    /// controller (takes a PF reset, as shrinking it does).
    #[arg(long)]
    reclaim: bool,
    /// Change nothing: print the equivalent nvme-cli and sysfs commands.
    #[arg(long)]
    print: bool,
    #[command(flatten)]
    out: Output,
}

/// An error with the errno it stands for, shown as "... (errno N: text)".
#[derive(Debug)]
struct Failed(String, i32);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let os = io::Error::from_raw_os_error(self.1).to_string();
        let text = os.split(" (os error").next().unwrap_or(&os);
        write!(f, "{} (errno {}: {text})", self.0, self.1)
    }
}
impl std::error::Error for Failed {}

fn fail<T>(errno: i32, msg: impl Into<String>) -> Result<T, Box<dyn std::error::Error>> {
    Err(Box::new(Failed(msg.into(), errno)))
}

// ---- admin passthrough -------------------------------------------------------

/// `struct nvme_passthru_cmd` of <linux/nvme_ioctl.h> (72 bytes).
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}
const _: () = assert!(std::mem::size_of::<PassthruCmd>() == 72);
/// `NVME_IOCTL_ADMIN_CMD`: _IOWR('N', 0x41, struct nvme_admin_cmd).
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;

const OPC_IDENTIFY: u8 = 0x06;
const OPC_NS_ATTACH: u8 = 0x15;
const OPC_VIRT_MGMT: u8 = 0x1C;
const CNS_CTRL: u32 = 0x01;
const CNS_PRIMARY_CAPS: u32 = 0x14;
const CNS_SECONDARY_LIST: u32 = 0x15;
/// Virtualization Management actions and resource types.
const ACT_PRIMARY_ALLOC: u8 = 1;
const ACT_OFFLINE: u8 = 7;
const ACT_SECONDARY_ASSIGN: u8 = 8;
const ACT_ONLINE: u8 = 9;
const RT_VQ: u8 = 0;
const RT_VI: u8 = 1;

/// The PF's admin queue, through the kernel nvme driver.
struct Admin {
    file: fs::File,
    path: PathBuf,
}

impl Admin {
    fn open(path: &Path) -> Result<Self, Box<dyn std::error::Error>> {
        match fs::OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => Ok(Admin {
                file,
                path: path.to_path_buf(),
            }),
            Err(e) => fail(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("open {}", path.display()),
            ),
        }
    }

    /// One admin command; `data` (if any) is its data buffer. Returns CQE
    /// dword 0. The ioctl is synchronous: the kernel has finished with
    /// `data` when it returns.
    fn cmd(
        &self,
        what: &str,
        mut c: PassthruCmd,
        data: Option<&mut [u8]>,
    ) -> Result<u32, Box<dyn std::error::Error>> {
        if let Some(d) = data {
            c.addr = d.as_mut_ptr() as u64;
            c.data_len = d.len() as u32;
        }
        c.timeout_ms = 10_000;
        // SAFETY: `c` is a valid nvme_passthru_cmd that lives across the
        // call; its addr/data_len name a live buffer of that length (or 0),
        // which the kernel reads or writes only during this synchronous ioctl.
        let rc = unsafe {
            libc::ioctl(
                self.file.as_raw_fd(),
                NVME_IOCTL_ADMIN_CMD as _,
                &mut c as *mut PassthruCmd,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            let hint = if errno == libc::EACCES || errno == libc::EPERM {
                " (admin passthrough needs CAP_SYS_ADMIN: run as root)"
            } else {
                ""
            };
            return fail(
                errno,
                format!("{what} on {}: {e}{hint}", self.path.display()),
            );
        }
        if rc > 0 {
            let (sct, sc) = ((rc >> 8) & 7, rc & 0xff);
            return fail(
                libc::EIO,
                format!("{what} on {}: the controller refused it: status 0x{rc:x} (SCT {sct}, SC 0x{sc:02x}{})", self.path.display(), status_name(sct, sc)),
            );
        }
        Ok(c.result)
    }

    fn identify(
        &self,
        cns: u32,
        cntid: u16,
        what: &str,
    ) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut buf = vec![0u8; 4096];
        let c = PassthruCmd {
            opcode: OPC_IDENTIFY,
            cdw10: cns | (u32::from(cntid) << 16),
            ..Default::default()
        };
        self.cmd(what, c, Some(&mut buf))?;
        Ok(buf)
    }

    fn virt_mgmt(
        &self,
        what: &str,
        cntlid: u16,
        rt: u8,
        act: u8,
        nr: u16,
    ) -> Result<u32, Box<dyn std::error::Error>> {
        self.cmd(what, virt_mgmt_cmd(cntlid, rt, act, nr), None)
    }

    /// Namespace Attachment (SEL 0 attach, 1 detach) for one controller.
    fn ns_attach(
        &self,
        nsid: u32,
        cntlid: u16,
        attach: bool,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let mut list = vec![0u8; 4096];
        list[0..2].copy_from_slice(&1u16.to_le_bytes());
        list[2..4].copy_from_slice(&cntlid.to_le_bytes());
        let c = PassthruCmd {
            opcode: OPC_NS_ATTACH,
            nsid,
            cdw10: if attach { 0 } else { 1 },
            ..Default::default()
        };
        let what = format!(
            "Namespace Attachment ({} namespace {nsid}, controller {cntlid})",
            if attach { "attach" } else { "detach" }
        );
        self.cmd(&what, c, Some(&mut list)).map(|_| ())
    }
}

/// Virtualization Management: CDW10 = CNTLID << 16 | RT << 8 | ACT,
/// CDW11 = NR (what `nvme virt-mgmt -c -r -a -n` sends).
fn virt_mgmt_cmd(cntlid: u16, rt: u8, act: u8, nr: u16) -> PassthruCmd {
    PassthruCmd {
        opcode: OPC_VIRT_MGMT,
        cdw10: (u32::from(cntlid) << 16) | (u32::from(rt) << 8) | u32::from(act),
        cdw11: u32::from(nr),
        ..Default::default()
    }
}

fn status_name(sct: i32, sc: i32) -> &'static str {
    match (sct, sc) {
        (0, 0x01) => ": Invalid Command Opcode, no Virtualization Management?",
        (0, 0x02) => ": Invalid Field in Command",
        (1, 0x18) => ": Namespace Already Attached",
        (1, 0x19) => ": Namespace Is Private",
        (1, 0x1a) => ": Namespace Not Attached",
        (1, 0x1c) => ": Controller List Invalid",
        (1, 0x1f) => ": Invalid Controller Identifier",
        (1, 0x20) => ": Invalid Secondary Controller State",
        (1, 0x21) => ": Invalid Number of Controller Resources",
        (1, 0x22) => ": Invalid Resource Identifier",
        _ => "",
    }
}

// ---- Identify data -------------------------------------------------------------

fn le16(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}
fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
}

/// One resource type of the Primary Controller Capabilities (CNS 14h).
#[derive(Debug, Clone, Copy)]
struct Flex {
    /// Flexible resources in total (VQFRT / VIFRT).
    total: u32,
    /// Assigned to secondary controllers (VQRFA / VIRFA).
    secondaries: u32,
    /// Allocated to the primary (VQRFAP / VIRFAP).
    primary: u16,
    /// The primary's private ones (VQPRT / VIPRT).
    private: u16,
    /// Most per secondary (VQFRSM / VIFRSM).
    max_per_secondary: u16,
}

fn flex(b: &[u8], base: usize) -> Flex {
    Flex {
        total: le32(b, base),
        secondaries: le32(b, base + 4),
        primary: le16(b, base + 8),
        private: le16(b, base + 10),
        max_per_secondary: le16(b, base + 12),
    }
}

/// What the PF's Identify answers say: its CNTLID, flexible queues and
/// interrupts, and the secondary controllers.
type State = (u16, Flex, Flex, Vec<Secondary>);

/// Secondary Controller List entry (CNS 15h).
#[derive(Debug, Clone, Copy)]
struct Secondary {
    scid: u16,
    online: bool,
    vfn: u16,
    nvq: u16,
    nvi: u16,
}

fn secondaries(b: &[u8]) -> Vec<Secondary> {
    let n = usize::from(b[0]).min(127);
    (0..n)
        .map(|i| {
            let e = &b[32 + 32 * i..64 + 32 * i];
            Secondary {
                scid: le16(e, 0),
                online: e[4] & 1 != 0,
                vfn: le16(e, 8),
                nvq: le16(e, 10),
                nvi: le16(e, 12),
            }
        })
        .collect()
}

// ---- sysfs ---------------------------------------------------------------------

struct Pf {
    bdf: String,
    dir: PathBuf,
    /// nvmeX
    name: String,
    node: PathBuf,
}

fn read_attr(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn write_attr(p: &Path, v: &str, what: &str) -> Res {
    if let Err(e) = fs::write(p, v) {
        let errno = e.raw_os_error().unwrap_or(libc::EIO);
        let hint = if errno == libc::EACCES || errno == libc::EPERM {
            " (run as root)"
        } else {
            ""
        };
        return fail(
            errno,
            format!("{what}: write {v:?} to {}: {e}{hint}", p.display()),
        );
    }
    Ok(())
}

fn link_name(p: &Path) -> Option<String> {
    fs::read_link(p)
        .ok()?
        .file_name()?
        .to_str()
        .map(str::to_string)
}

fn resolve_pf(sysfs: &Sysfs, arg: &str) -> Result<Pf, Box<dyn std::error::Error>> {
    let pci = sysfs.root().join("bus/pci/devices");
    let bdf = if let Some(name) = arg.strip_prefix("/dev/") {
        let dev = sysfs.root().join("class/nvme").join(name).join("device");
        match fs::canonicalize(&dev)
            .ok()
            .and_then(|p| p.file_name()?.to_str().map(str::to_string))
        {
            Some(b) => b,
            None => {
                return fail(
                    libc::ENODEV,
                    format!(
                        "{arg} is not a kernel nvme controller node (no {})",
                        dev.display()
                    ),
                )
            }
        }
    } else {
        normalize_bdf(arg)?
    };
    let dir = pci.join(&bdf);
    if !dir.exists() {
        return fail(libc::ENODEV, format!("no PCI device {bdf}"));
    }
    if link_name(&dir.join("physfn")).is_some() {
        return fail(
            libc::EINVAL,
            format!("{bdf} is a virtual function; give its physical function"),
        );
    }
    if read_attr(&dir.join("sriov_totalvfs"))
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(0)
        == 0
    {
        return fail(
            libc::EOPNOTSUPP,
            format!(
                "{bdf} does not support SR-IOV (no SR-IOV capability: {} missing or 0)",
                dir.join("sriov_totalvfs").display()
            ),
        );
    }
    let driver = link_name(&dir.join("driver"));
    if driver.as_deref() != Some("nvme") {
        return fail(
            libc::ENODEV,
            format!(
                "{bdf} is bound to {}: the PF must be bound to the kernel nvme driver, whose admin queue carries the commands",
                driver.as_deref().unwrap_or("no driver")
            ),
        );
    }
    let name = fs::read_dir(dir.join("nvme"))
        .ok()
        .and_then(|mut d| d.find_map(|e| e.ok()?.file_name().to_str().map(str::to_string)))
        .ok_or_else(|| {
            Failed(
                format!(
                    "{bdf}: no nvme controller under {}",
                    dir.join("nvme").display()
                ),
                libc::ENODEV,
            )
        })?;
    let node = PathBuf::from("/dev").join(&name);
    Ok(Pf {
        bdf,
        dir,
        name,
        node,
    })
}

fn numvfs(pf: &Pf) -> u16 {
    read_attr(&pf.dir.join("sriov_numvfs"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// VF index (1-based VFN) -> its PCI address, from the PF's virtfnN links.
fn vf_bdf(pf: &Pf, vfn: u16) -> Option<String> {
    link_name(&pf.dir.join(format!("virtfn{}", vfn.checked_sub(1)?)))
}

/// The VF's address before it exists: offset and stride from sysfs.
fn vf_bdf_planned(pf: &Pf, vfn: u16) -> String {
    let rd = |a: &str| read_attr(&pf.dir.join(a)).and_then(|s| s.parse::<u32>().ok());
    let parse = || -> Option<String> {
        let (dom, rest) = pf.bdf.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (dev, func) = rest.split_once('.')?;
        let rid = (u32::from_str_radix(bus, 16).ok()? << 8)
            | (u32::from_str_radix(dev, 16).ok()? << 3)
            | func.parse::<u32>().ok()?;
        let r = rid + rd("sriov_offset")? + rd("sriov_stride")? * (u32::from(vfn) - 1);
        Some(format!(
            "{dom}:{:02x}:{:02x}.{}",
            r >> 8,
            (r >> 3) & 0x1f,
            r & 7
        ))
    };
    parse().unwrap_or_else(|| format!("<VF {vfn} address>"))
}

fn wait_until(what: &str, deadline: Duration, mut ok: impl FnMut() -> bool) -> Res {
    let start = Instant::now();
    while !ok() {
        if start.elapsed() > deadline {
            return fail(
                libc::ETIMEDOUT,
                format!("{what}: not done after {deadline:?}"),
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

// ---- the command -----------------------------------------------------------------

pub fn sriov(sysfs: &Sysfs, a: &SriovArgs) -> Res {
    JSON.store(a.out.json(), Relaxed);
    let mut rep = Report::default();
    let r = run(sysfs, a, &mut rep);
    if a.out.json() && r.is_ok() {
        let log = std::mem::take(&mut *LINES.lock().unwrap_or_else(|e| e.into_inner()));
        let action = match (a.print, a.vfs) {
            (true, _) => "print",
            (false, 0) => "disable",
            (false, _) => "enable",
        };
        let doc = serde_json::json!({
            "action": action,
            "physical_function": rep.pf,
            "vfs": rep.vfs,
            "log": log,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    }
    r
}

fn run(sysfs: &Sysfs, a: &SriovArgs, rep: &mut Report) -> Res {
    if a.reclaim && a.vfs != 0 {
        return fail(libc::EINVAL, "--reclaim goes with --vfs 0");
    }
    let pf_arg = match &a.pf {
        Device::Bdf(b) => b.clone(),
        Device::KernelNvme(n) => format!("/dev/{n}"),
        Device::Namespace(p) => {
            return fail(
                libc::EINVAL,
                format!(
                    "{}: a namespace; give the physical function's PCI address or kernel nvme node (/dev/nvmeN)",
                    p.display()
                ),
            )
        }
        Device::Node(p) => {
            return fail(
                libc::EINVAL,
                format!(
                    "{}: give the physical function's PCI address or kernel nvme node (/dev/nvmeN), not a gpunvme node",
                    p.display()
                ),
            )
        }
    };
    let pf = resolve_pf(sysfs, &pf_arg)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 && !a.print {
        return fail(
            libc::EPERM,
            "gpunvme sriov changes the PF's resources and sysfs: run it as root (or use --print)",
        );
    }
    let admin = match Admin::open(&pf.node) {
        Ok(x) => Some(x),
        Err(e) if a.print => {
            say!(
                "# cannot read {} ({e}): placeholders below",
                pf.node.display()
            );
            None
        }
        Err(e) => return Err(e),
    };
    let read = |admin: &Admin| -> Result<State, Box<dyn std::error::Error>> {
        let id = admin.identify(CNS_CTRL, 0, "Identify Controller")?;
        let cntlid = le16(&id, 78);
        // OACS bit 7 (Virtualization Management) is what the spec says to
        // check, but QEMU 7.2 leaves it clear while implementing the
        // command: the Identify CNS 14h/15h answers decide.
        let vms = le16(&id, 256) & (1 << 7) != 0;
        // Only the controller's refusal (a status: EIO) means "no such
        // command set"; other errors pass through as they are.
        let no_vm = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
            if e.downcast_ref::<Failed>().is_none_or(|f| f.1 != libc::EIO) {
                return e;
            }
            Box::new(Failed(
                format!(
                    "{}: no Virtualization Management (OACS bit 7 {}; {e})",
                    pf.bdf,
                    if vms { "set" } else { "clear" }
                ),
                libc::EOPNOTSUPP,
            ))
        };
        let caps = admin
            .identify(
                CNS_PRIMARY_CAPS,
                0,
                "Identify Primary Controller Capabilities",
            )
            .map_err(no_vm)?;
        let list = admin
            .identify(CNS_SECONDARY_LIST, 0, "Identify Secondary Controller List")
            .map_err(no_vm)?;
        Ok((cntlid, flex(&caps, 32), flex(&caps, 64), secondaries(&list)))
    };
    let state = match &admin {
        Some(ad) => match read(ad) {
            Ok(s) => Some(s),
            Err(e) if a.print => {
                say!("# cannot read the controller ({e}): placeholders below");
                None
            }
            Err(e) => return Err(e),
        },
        None => None,
    };
    if let Some((cntlid, vq, vi, secs)) = &state {
        let flex = |f: &Flex| {
            serde_json::json!({"total": f.total, "primary": f.primary, "secondaries": f.secondaries,
                               "max_per_vf": f.max_per_secondary, "private": f.private})
        };
        rep.pf = Some(serde_json::json!({
            "bdf": pf.bdf, "node": pf.name, "primary_controller": cntlid,
            "flexible_queues": flex(vq), "flexible_interrupts": flex(vi),
            "secondary_controllers": secs.iter().map(|s| serde_json::json!({
                "controller": s.scid, "vf": s.vfn, "online": s.online, "queues": s.nvq, "interrupts": s.nvi,
            })).collect::<Vec<_>>(),
        }));
        say!(
            "{} ({}): primary controller {cntlid}; flexible queues {} (primary {}, secondaries {}, at most {} per VF; {} private), flexible interrupts {} (primary {}, secondaries {}, at most {} per VF; {} private); {} secondary controllers",
            pf.bdf, pf.name, vq.total, vq.primary, vq.secondaries, vq.max_per_secondary, vq.private,
            vi.total, vi.primary, vi.secondaries, vi.max_per_secondary, vi.private, secs.len()
        );
        for s in secs {
            say!(
                "  secondary controller {}: VF {}, {}, {} queues, {} interrupts",
                s.scid,
                s.vfn,
                if s.online { "online" } else { "offline" },
                s.nvq,
                s.nvi
            );
        }
    }
    if a.vfs == 0 {
        return disable(sysfs, &pf, admin.as_ref(), state.as_ref(), a);
    }
    let Some((cntlid, vq, vi, secs)) = state else {
        return print_plan(&pf, a, "<PRIMARY CNTLID>", &[], 2, 1, None);
    };
    if vq.total == 0 || vi.total == 0 {
        return fail(
            libc::ENOSPC,
            format!(
                "{}: no flexible resources to give a VF (VQFRT {}, VIFRT {})",
                pf.bdf, vq.total, vi.total
            ),
        );
    }
    let total_vfs: u16 = read_attr(&pf.dir.join("sriov_totalvfs"))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if a.vfs > total_vfs {
        return fail(
            libc::EINVAL,
            format!(
                "{}: --vfs {} but the PF supports {total_vfs}",
                pf.bdf, a.vfs
            ),
        );
    }
    let mut chosen: Vec<Secondary> = secs
        .iter()
        .copied()
        .filter(|s| s.vfn >= 1 && s.vfn <= a.vfs)
        .collect();
    chosen.sort_by_key(|s| s.vfn);
    if chosen.len() != usize::from(a.vfs) {
        return fail(
            libc::ENODEV,
            format!(
                "{}: the Secondary Controller List names {} of the {} VFs wanted",
                pf.bdf,
                chosen.len(),
                a.vfs
            ),
        );
    }
    if a.nsid.len() > usize::from(a.vfs) {
        return fail(
            libc::EINVAL,
            format!("{} --namespace-id values for {} VFs", a.nsid.len(), a.vfs),
        );
    }
    let per = |f: &Flex| (f.total / u32::from(a.vfs)).min(u32::from(f.max_per_secondary)) as u16;
    let q = a.flex_queues.unwrap_or_else(|| per(&vq));
    let i = a.flex_interrupts.unwrap_or_else(|| per(&vi));
    if q < 2 {
        return fail(
            libc::EINVAL,
            format!(
                "--flex-queues {q}: a VF needs at least 2 (its admin queue and one I/O queue pair)"
            ),
        );
    }
    if i < 1 {
        return fail(libc::EINVAL, "--flex-interrupts 0: a VF needs at least 1");
    }
    for (name, n, f) in [("queues", q, &vq), ("interrupts", i, &vi)] {
        if n > f.max_per_secondary || u32::from(n) * u32::from(a.vfs) > f.total {
            return fail(
                libc::ENOSPC,
                format!("--{name} {n} for {} VF(s): the controller has {} flexible {name}, at most {} per VF", a.vfs, f.total, f.max_per_secondary),
            );
        }
    }
    let want_vq = vq.total - u32::from(q) * u32::from(a.vfs);
    let want_vi = vi.total - u32::from(i) * u32::from(a.vfs);
    if a.print {
        return print_plan(
            &pf,
            a,
            &cntlid.to_string(),
            &chosen,
            q,
            i,
            Some((want_vq, want_vi)),
        );
    }
    let Some(admin) = admin else {
        unreachable!("opened above unless --print")
    };
    if numvfs(&pf) != 0 {
        return fail(
            libc::EBUSY,
            format!(
                "{}: {} VFs are already enabled; `gpunvme sriov {} --vfs 0` first",
                pf.bdf,
                numvfs(&pf),
                pf.bdf
            ),
        );
    }

    // 1. The primary's flexible allocation takes effect at its next reset.
    if u32::from(vq.primary) > want_vq || u32::from(vi.primary) > want_vi {
        set_primary(sysfs, &pf, &admin, cntlid, want_vq as u16, want_vi as u16)?;
    } else {
        say!("primary controller {cntlid}: holds {} flexible queues and {} interrupts, no reset needed", vq.primary, vi.primary);
    }

    // 3. Enable the VFs, with no driver probing them: their controllers
    //    are offline until step 4.
    write_attr(
        &pf.dir.join("sriov_drivers_autoprobe"),
        "0",
        "stop drivers probing the VFs",
    )?;
    write_attr(
        &pf.dir.join("sriov_numvfs"),
        &a.vfs.to_string(),
        "enable the VFs",
    )?;
    wait_until("the VFs to appear", Duration::from_secs(30), || {
        (1..=a.vfs).all(|n| vf_bdf(&pf, n).is_some())
    })?;
    say!(
        "{}: {} VF(s) enabled (sriov_drivers_autoprobe 0)",
        pf.bdf,
        a.vfs
    );

    // 4. Resources to each secondary controller, then online.
    for (k, s) in chosen.iter().enumerate() {
        let vf = vf_bdf(&pf, s.vfn).unwrap_or_default();
        admin.virt_mgmt(
            "Virtualization Management (assign queues)",
            s.scid,
            RT_VQ,
            ACT_SECONDARY_ASSIGN,
            q,
        )?;
        admin.virt_mgmt(
            "Virtualization Management (assign interrupts)",
            s.scid,
            RT_VI,
            ACT_SECONDARY_ASSIGN,
            i,
        )?;
        admin.virt_mgmt(
            "Virtualization Management (online)",
            s.scid,
            0,
            ACT_ONLINE,
            0,
        )?;
        say!("VF {} ({vf}): secondary controller {} online with {q} queues ({} I/O queue pairs) and {i} interrupts", s.vfn, s.scid, q - 1);
        if let Some(&nsid) = a.nsid.get(k) {
            admin.ns_attach(nsid, s.scid, true)?;
            say!(
                "VF {} ({vf}): namespace {nsid} attached to controller {}",
                s.vfn,
                s.scid
            );
        }
        say!("  next: gpunvme bind {vf}");
        rep.vfs.push(serde_json::json!({
            "vf": s.vfn, "bdf": vf, "secondary_controller": s.scid, "queues": q,
            "io_queue_pairs": q - 1, "interrupts": i, "namespace": a.nsid.get(k),
        }));
    }
    Ok(())
}

/// Sets the primary's flexible allocation and resets the PF (FLR through
/// the PCI core: nvme quiesces and restarts around it, mounted file systems
/// just wait), then checks that the controller applied it.
fn set_primary(sysfs: &Sysfs, pf: &Pf, admin: &Admin, cntlid: u16, vq: u16, vi: u16) -> Res {
    admin.virt_mgmt(
        "Virtualization Management (primary flexible queues)",
        cntlid,
        RT_VQ,
        ACT_PRIMARY_ALLOC,
        vq,
    )?;
    admin.virt_mgmt(
        "Virtualization Management (primary flexible interrupts)",
        cntlid,
        RT_VI,
        ACT_PRIMARY_ALLOC,
        vi,
    )?;
    say!("primary controller {cntlid}: flexible allocation set to {vq} queues and {vi} interrupts (takes effect at reset)");
    write_attr(&pf.dir.join("reset"), "1", "reset the PF (FLR)")?;
    let state = sysfs.root().join("class/nvme").join(&pf.name).join("state");
    wait_until(
        &format!("{} back to live after the reset", pf.name),
        Duration::from_secs(60),
        || read_attr(&state).as_deref() == Some("live"),
    )?;
    let caps = admin.identify(
        CNS_PRIMARY_CAPS,
        0,
        "Identify Primary Controller Capabilities",
    )?;
    let (q, i) = (flex(&caps, 32).primary, flex(&caps, 64).primary);
    if (q, i) != (vq, vi) {
        return fail(libc::EIO, format!("after the reset the primary holds {q} flexible queues and {i} interrupts, not {vq} and {vi}"));
    }
    say!("{}: reset (FLR); {} is live again, the primary holds {q} flexible queues and {i} interrupts", pf.bdf, pf.name);
    Ok(())
}

/// `--vfs 0`: secondaries offline (namespaces detached), VFs disabled.
fn disable(
    sysfs: &Sysfs,
    pf: &Pf,
    admin: Option<&Admin>,
    state: Option<&State>,
    a: &SriovArgs,
) -> Res {
    let n = numvfs(pf);
    for vfn in 1..=n {
        if let Some(vf) = vf_bdf(pf, vfn) {
            let drv = link_name(
                &sysfs
                    .root()
                    .join("bus/pci/devices")
                    .join(&vf)
                    .join("driver"),
            );
            if drv.as_deref() == Some(GPUNVME_DRIVER) && !a.print {
                return fail(
                    libc::EBUSY,
                    format!("VF {vfn} ({vf}) is bound to gpunvme: `gpunvme unbind {vf}` first"),
                );
            }
            if drv.is_some() && !a.print {
                let used = sysfs.in_use(&vf)?;
                if !used.is_empty() {
                    return fail(
                        libc::EBUSY,
                        format!(
                            "VF {vfn} ({vf}) is in use ({} {})",
                            used[0].device, used[0].by
                        ),
                    );
                }
            }
        }
    }
    let secs: Vec<Secondary> = state.map(|s| s.3.clone()).unwrap_or_default();
    let cntlid = state.map_or("<PRIMARY CNTLID>".to_string(), |s| s.0.to_string());
    if a.print {
        let dev = pf.node.display();
        for (k, s) in secs
            .iter()
            .filter(|s| s.online || s.nvq > 0 || s.nvi > 0)
            .enumerate()
        {
            if let Some(nsid) = a.nsid.get(k) {
                say!(
                    "nvme detach-ns {dev} --namespace-id={nsid} --controllers={}",
                    s.scid
                );
            }
            say!(
                "nvme virt-mgmt {dev} --cntlid={} --act={ACT_OFFLINE}",
                s.scid
            );
            say!(
                "nvme virt-mgmt {dev} --cntlid={} --rt={RT_VQ} --act={ACT_SECONDARY_ASSIGN} --nr=0",
                s.scid
            );
            say!(
                "nvme virt-mgmt {dev} --cntlid={} --rt={RT_VI} --act={ACT_SECONDARY_ASSIGN} --nr=0",
                s.scid
            );
        }
        say!("echo 0 > {}", pf.dir.join("sriov_numvfs").display());
        say!(
            "echo 1 > {}",
            pf.dir.join("sriov_drivers_autoprobe").display()
        );
        if a.reclaim {
            let (q, i) = state.map_or(("<VQFRT>".into(), "<VIFRT>".into()), |s| {
                (s.1.total.to_string(), s.2.total.to_string())
            });
            say!("nvme virt-mgmt {dev} --cntlid={cntlid} --rt={RT_VQ} --act={ACT_PRIMARY_ALLOC} --nr={q}");
            say!("nvme virt-mgmt {dev} --cntlid={cntlid} --rt={RT_VI} --act={ACT_PRIMARY_ALLOC} --nr={i}");
            say!("echo 1 > {}", pf.dir.join("reset").display());
        }
        return Ok(());
    }
    let admin = admin.expect("opened unless --print");
    let (pcntlid, vq, vi) = state.map(|s| (s.0, s.1, s.2)).expect("read unless --print");
    // Secondaries that are online or hold resources: VF order, as attached.
    for (k, s) in secs
        .iter()
        .filter(|s| s.online || s.nvq > 0 || s.nvi > 0)
        .enumerate()
    {
        if let Some(&nsid) = a.nsid.get(k) {
            admin.ns_attach(nsid, s.scid, false)?;
            say!("namespace {nsid} detached from controller {}", s.scid);
        }
        if s.online {
            admin.virt_mgmt(
                "Virtualization Management (offline)",
                s.scid,
                0,
                ACT_OFFLINE,
                0,
            )?;
        }
        admin.virt_mgmt(
            "Virtualization Management (take queues back)",
            s.scid,
            RT_VQ,
            ACT_SECONDARY_ASSIGN,
            0,
        )?;
        admin.virt_mgmt(
            "Virtualization Management (take interrupts back)",
            s.scid,
            RT_VI,
            ACT_SECONDARY_ASSIGN,
            0,
        )?;
        say!(
            "secondary controller {} (VF {}) offline, its {} queues and {} interrupts taken back",
            s.scid,
            s.vfn,
            s.nvq,
            s.nvi
        );
    }
    write_attr(&pf.dir.join("sriov_numvfs"), "0", "disable the VFs")?;
    write_attr(
        &pf.dir.join("sriov_drivers_autoprobe"),
        "1",
        "restore sriov_drivers_autoprobe",
    )?;
    say!("{}: VFs disabled ({n} were enabled)", pf.bdf);
    if a.reclaim {
        let (q, i) = (
            vq.total.min(u32::from(u16::MAX)) as u16,
            vi.total.min(u32::from(u16::MAX)) as u16,
        );
        set_primary(sysfs, pf, admin, pcntlid, q, i)?;
    }
    Ok(())
}

/// `--print`: the same steps as nvme-cli and sysfs commands.
fn print_plan(
    pf: &Pf,
    a: &SriovArgs,
    cntlid: &str,
    chosen: &[Secondary],
    q: u16,
    i: u16,
    keep: Option<(u32, u32)>,
) -> Res {
    let dev = pf.node.display();
    let (kq, ki) = match keep {
        Some((kq, ki)) => (kq.to_string(), ki.to_string()),
        None => (
            "<flexible queues the primary keeps>".into(),
            "<flexible interrupts the primary keeps>".into(),
        ),
    };
    say!(
        "# as root; {} stays with the nvme driver throughout",
        pf.bdf
    );
    say!("nvme virt-mgmt {dev} --cntlid={cntlid} --rt={RT_VQ} --act={ACT_PRIMARY_ALLOC} --nr={kq}");
    say!("nvme virt-mgmt {dev} --cntlid={cntlid} --rt={RT_VI} --act={ACT_PRIMARY_ALLOC} --nr={ki}");
    say!("echo 1 > {}", pf.dir.join("reset").display());
    say!(
        "echo 0 > {}",
        pf.dir.join("sriov_drivers_autoprobe").display()
    );
    say!("echo {} > {}", a.vfs, pf.dir.join("sriov_numvfs").display());
    for vfn in 1..=a.vfs {
        let scid = chosen
            .iter()
            .find(|s| s.vfn == vfn)
            .map_or(format!("<SCID of VF {vfn}>"), |s| s.scid.to_string());
        say!("nvme virt-mgmt {dev} --cntlid={scid} --rt={RT_VQ} --act={ACT_SECONDARY_ASSIGN} --nr={q}");
        say!("nvme virt-mgmt {dev} --cntlid={scid} --rt={RT_VI} --act={ACT_SECONDARY_ASSIGN} --nr={i}");
        say!("nvme virt-mgmt {dev} --cntlid={scid} --act={ACT_ONLINE}");
        if let Some(nsid) = a.nsid.get(usize::from(vfn - 1)) {
            say!("nvme attach-ns {dev} --namespace-id={nsid} --controllers={scid}");
        }
        say!("gpunvme bind {}", vf_bdf_planned(pf, vfn));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primary_caps_and_secondary_list_decode() {
        let mut caps = vec![0u8; 4096];
        caps[32..36].copy_from_slice(&4u32.to_le_bytes()); // VQFRT
        caps[36..40].copy_from_slice(&1u32.to_le_bytes()); // VQRFA
        caps[40..42].copy_from_slice(&3u16.to_le_bytes()); // VQRFAP
        caps[42..44].copy_from_slice(&61u16.to_le_bytes()); // VQPRT
        caps[44..46].copy_from_slice(&4u16.to_le_bytes()); // VQFRSM
        caps[64..68].copy_from_slice(&2u32.to_le_bytes()); // VIFRT
        caps[76..78].copy_from_slice(&2u16.to_le_bytes()); // VIFRSM
        let vq = flex(&caps, 32);
        assert_eq!(
            (
                vq.total,
                vq.secondaries,
                vq.primary,
                vq.private,
                vq.max_per_secondary
            ),
            (4, 1, 3, 61, 4)
        );
        let vi = flex(&caps, 64);
        assert_eq!((vi.total, vi.max_per_secondary), (2, 2));

        let mut list = vec![0u8; 4096];
        list[0] = 2;
        for (i, (scid, vfn, online)) in [(2u16, 1u16, true), (3, 2, false)].into_iter().enumerate()
        {
            let e = 32 + 32 * i;
            list[e..e + 2].copy_from_slice(&scid.to_le_bytes());
            list[e + 4] = online as u8;
            list[e + 8..e + 10].copy_from_slice(&vfn.to_le_bytes());
            list[e + 10..e + 12].copy_from_slice(&4u16.to_le_bytes());
            list[e + 12..e + 14].copy_from_slice(&1u16.to_le_bytes());
        }
        let s = secondaries(&list);
        assert_eq!(s.len(), 2);
        assert_eq!(
            (s[0].scid, s[0].vfn, s[0].online, s[0].nvq, s[0].nvi),
            (2, 1, true, 4, 1)
        );
        assert_eq!((s[1].scid, s[1].vfn, s[1].online), (3, 2, false));
    }

    #[test]
    fn virt_mgmt_dwords() {
        let c = virt_mgmt_cmd(2, RT_VI, ACT_SECONDARY_ASSIGN, 3);
        assert_eq!((c.opcode, c.cdw10, c.cdw11), (0x1C, 0x0002_0108, 3));
        let c = virt_mgmt_cmd(0x41, RT_VQ, ACT_PRIMARY_ALLOC, 0);
        assert_eq!((c.cdw10, c.cdw11), (0x0041_0001, 0));
    }
}
