// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! A controller bound to gpunvme, reached through its device node.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use gpunvme_sys as sys;
use serde::Serialize;

use crate::error::{Error, Result};
use crate::fork::Owner;
use crate::regs::{Cap, Version};

/// Directory holding the device nodes.
pub const DEV_DIR: &str = "/dev";

/// Path of the device node of the controller with index `n`.
pub fn node_path(n: u32) -> PathBuf {
    Path::new(DEV_DIR).join(format!("gpunvme{n}"))
}

/// Path of the node of controller `n` limited to namespace `nsid`
/// (`/dev/gpunvme<N>n<NSID>`: shared mode only, that namespace only).
pub fn namespace_node_path(n: u32, nsid: u32) -> PathBuf {
    Path::new(DEV_DIR).join(format!("gpunvme{n}n{nsid}"))
}

/// The controller's IOMMU domain as the module reports it
/// (`gpunvme_info.iommu_mode`, `gpunvme_owner.iommu_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IommuMode {
    /// No IOMMU: DMA addresses are physical addresses.
    None,
    /// Passthrough (`iommu=pt`): an IOMMU that does not translate.
    Identity,
    /// Translating, strict invalidation.
    Strict,
    /// Translating, with a flush queue (DMA-FQ): an unmapped page stays
    /// reachable until the next IOTLB flush (up to about 10 ms).
    Lazy,
    /// Blocked, unmanaged or unknown (also any value this crate does not
    /// know, from a newer module).
    Other,
}

impl IommuMode {
    /// Decodes a `GPUNVME_IOMMU_*` value.
    pub fn from_raw(v: u32) -> Self {
        match v {
            sys::GPUNVME_IOMMU_NONE => IommuMode::None,
            sys::GPUNVME_IOMMU_IDENTITY => IommuMode::Identity,
            sys::GPUNVME_IOMMU_STRICT => IommuMode::Strict,
            sys::GPUNVME_IOMMU_LAZY => IommuMode::Lazy,
            _ => IommuMode::Other,
        }
    }

    /// Whether the IOMMU translates the controller's DMA (strict or lazy):
    /// what owner mode needs (unless the module's allow_unsafe_no_iommu
    /// waives it).
    pub fn is_translating(self) -> bool {
        matches!(self, IommuMode::Strict | IommuMode::Lazy)
    }

    /// `none`, `identity (passthrough)`, `strict`, `lazy` or `other`.
    pub fn name(self) -> &'static str {
        match self {
            IommuMode::None => "none",
            IommuMode::Identity => "identity (passthrough)",
            IommuMode::Strict => "strict",
            IommuMode::Lazy => "lazy",
            IommuMode::Other => "other",
        }
    }
}

impl std::fmt::Display for IommuMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The modes this caller may use on a controller now
/// (`gpunvme_info.modes`, `GPUNVME_MODE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Modes {
    /// Shared (validated) queue pairs: set unless another file owns the
    /// controller.
    pub shared: bool,
    /// Owner mode ([`Controller::claim_owner`], raw pairs): this caller
    /// would pass the capability, lockdown and IOMMU checks (the claim can
    /// still meet EBUSY).
    pub owner: bool,
}

impl Modes {
    /// Decodes the `modes` bit mask (unknown bits are ignored).
    pub fn from_raw(bits: u32) -> Self {
        Modes {
            shared: bits & sys::GPUNVME_MODE_SHARED != 0,
            owner: bits & sys::GPUNVME_MODE_OWNER != 0,
        }
    }
}

impl std::fmt::Display for Modes {
    /// `shared, owner`, `shared`, `owner` or `none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.shared, self.owner) {
            (true, true) => f.write_str("shared, owner"),
            (true, false) => f.write_str("shared"),
            (false, true) => f.write_str("owner"),
            (false, false) => f.write_str("none"),
        }
    }
}

/// One active namespace (`struct gpunvme_ns_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Namespace {
    /// Namespace ID (1-based).
    pub nsid: u32,
    /// Bytes per logical block in the current format.
    pub lba_size: u32,
    /// Size in logical blocks (NSZE).
    pub capacity_lbas: u64,
}

impl Namespace {
    /// Size in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.capacity_lbas.saturating_mul(self.lba_size as u64)
    }
}

/// A NUL-terminated C string field from the module.
fn c_string(field: &str, raw: &[core::ffi::c_char]) -> Result<String> {
    let bytes: Vec<u8> = raw.iter().map(|&c| c as u8).collect();
    let end = bytes.iter().position(|&b| b == 0).ok_or_else(|| {
        Error::Invalid(format!(
            "gpunvme_info.{field} from the module is not NUL-terminated"
        ))
    })?;
    // Identify strings are ASCII by the spec; don't fail on a bad byte.
    Ok(String::from_utf8_lossy(&bytes[..end])
        .trim_end()
        .to_string())
}

/// Identity and capabilities of a controller, decoded from
/// `struct gpunvme_info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Info {
    /// PCI address, e.g. `0000:00:04.0`.
    pub bdf: String,
    /// PCI vendor ID.
    pub pci_vendor: u16,
    /// PCI device ID.
    pub pci_device: u16,
    /// The CAP register, decoded.
    pub cap: Cap,
    /// The VS register, decoded.
    pub version: Version,
    /// Largest queue depth allowed (CAP.MQES + 1), as the module reports it.
    pub max_queue_entries: u32,
    /// Bytes between doorbells (4 << CAP.DSTRD), as the module reports it.
    pub doorbell_stride: u32,
    /// CAP.TO in milliseconds, as the module reports it.
    pub ready_timeout_ms: u32,
    /// Identify Controller serial number (SN).
    pub serial: String,
    /// Identify Controller model number (MN).
    pub model: String,
    /// Identify Controller firmware revision (FR).
    pub firmware: String,
    /// Largest transfer of one command in bytes; `None`: no limit.
    pub max_transfer_bytes: Option<u32>,
    /// I/O queue pairs the controller granted.
    pub io_queues: u32,
    /// Controller memory page size in use (CC.MPS), in bytes.
    pub page_size: u32,
    /// Active namespaces, lowest NSID first.
    pub namespaces: Vec<Namespace>,
    /// The controller's IOMMU domain.
    pub iommu_mode: IommuMode,
    /// The modes this caller may use now.
    pub modes: Modes,
    /// Largest transfer of one command on a shared pair, in bytes (MDTS,
    /// capped at 2 MiB so one PRP-list page covers it); `None` if the
    /// module reported 0.
    pub shared_max_transfer_bytes: Option<u32>,
    /// The namespace this file is limited to (opened through a namespace
    /// node, `/dev/gpunvme<N>n<NSID>`); `None` on the controller node.
    pub node_nsid: Option<u32>,
    /// Queue pairs this file may hold at once (module parameter
    /// `max_qpairs_per_file`; creating more fails with `EDQUOT`); `None`:
    /// no limit (the owner is exempt).
    pub quota_qpairs: Option<u32>,
    /// Buffers (host and dma-buf) this file may have mapped at once
    /// (`max_maps_per_file`); `None`: no limit.
    pub quota_maps: Option<u32>,
}

impl Info {
    /// Decodes what `GPUNVME_IOC_GET_INFO` returned. The module's derived
    /// fields must agree with the raw CAP: a disagreement is a module bug and
    /// is reported rather than papered over.
    pub fn from_raw(raw: &sys::gpunvme_info) -> Result<Self> {
        let bdf = c_string("bdf", &raw.bdf)?;
        let nns = raw.num_namespaces as usize;
        if nns > raw.ns.len() {
            return Err(Error::Invalid(format!(
                "module reports {nns} namespaces, more than GPUNVME_MAX_NS ({})",
                raw.ns.len()
            )));
        }
        if raw.reserved.iter().any(|&r| r != 0) {
            return Err(Error::Invalid(
                "gpunvme_info.reserved came back non-zero: the module speaks a newer ABI".into(),
            ));
        }
        let cap = Cap::from_raw(raw.cap);
        let checks = [
            (
                "max_queue_entries",
                raw.max_queue_entries,
                cap.max_queue_entries(),
            ),
            (
                "doorbell_stride",
                raw.doorbell_stride,
                cap.doorbell_stride(),
            ),
            (
                "ready_timeout_ms",
                raw.ready_timeout_ms,
                cap.ready_timeout_ms(),
            ),
        ];
        for (name, got, want) in checks {
            if got != want {
                return Err(Error::Invalid(format!(
                    "module reports {name} = {got} but CAP 0x{:016x} says {want}",
                    raw.cap
                )));
            }
        }
        Ok(Info {
            bdf,
            pci_vendor: raw.pci_vendor,
            pci_device: raw.pci_device,
            cap,
            version: Version::from_raw(raw.vs),
            max_queue_entries: raw.max_queue_entries,
            doorbell_stride: raw.doorbell_stride,
            ready_timeout_ms: raw.ready_timeout_ms,
            serial: c_string("serial", &raw.serial)?,
            model: c_string("model", &raw.model)?,
            firmware: c_string("firmware", &raw.firmware)?,
            max_transfer_bytes: (raw.mdts_bytes != 0).then_some(raw.mdts_bytes),
            io_queues: raw.io_queues,
            page_size: raw.page_size,
            namespaces: raw.ns[..nns]
                .iter()
                .map(|n| Namespace {
                    nsid: n.nsid,
                    lba_size: n.lba_size,
                    capacity_lbas: n.capacity_lbas,
                })
                .collect(),
            iommu_mode: IommuMode::from_raw(raw.iommu_mode),
            modes: Modes::from_raw(raw.modes),
            shared_max_transfer_bytes: (raw.shared_max_transfer != 0)
                .then_some(raw.shared_max_transfer),
            node_nsid: (raw.node_nsid != 0).then_some(raw.node_nsid),
            quota_qpairs: (raw.quota_qpairs != 0).then_some(raw.quota_qpairs),
            quota_maps: (raw.quota_maps != 0).then_some(raw.quota_maps),
        })
    }

    /// Largest transfer of one command on a pair of `mode`, in bytes;
    /// `None`: no limit. Shared pairs are bounded by
    /// [`shared_max_transfer_bytes`](Self::shared_max_transfer_bytes) (or,
    /// if the module did not report it, MDTS capped at 2 MiB as the module
    /// caps it); raw pairs by MDTS.
    pub fn max_transfer_for(&self, mode: crate::Mode) -> Option<u32> {
        match mode {
            crate::Mode::Raw => self.max_transfer_bytes,
            crate::Mode::Shared => Some(self.shared_max_transfer_bytes.unwrap_or_else(|| {
                self.max_transfer_bytes
                    .map_or(SHARED_TRANSFER_CAP, |m| m.min(SHARED_TRANSFER_CAP))
            })),
        }
    }
}

/// The module's cap on one shared-mode transfer: 2 MiB, what one PRP-list
/// page (512 entries) covers.
pub const SHARED_TRANSFER_CAP: u32 = 2 << 20;

/// What the file has alive on the kernel side, for the UNMAP-while-queues
/// rule (see [`crate::DmaBuffer`]).
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// Queue pairs created through this file and not yet destroyed.
    pub(crate) live_qpairs: usize,
    /// Mappings (host memory, or a dma-buf: no memory of ours) whose UNMAP
    /// got EBUSY: UNMAPped again when the last queue pair goes; their host
    /// memory, if any, is unmapped from this process only once an UNMAP
    /// succeeded (else it waits for the file's close).
    pub(crate) deferred: Vec<(u32, Option<crate::map::Mapping>)>,
    /// Memory the module may still use (a failed DESTROY_QPAIR or UNMAP):
    /// never unmapped while the file is open. Closing the file hands it to
    /// the module's release, which stops or quarantines whatever could
    /// still reach it (and keeps such pages pinned), so only then is it
    /// unmapped from this process.
    pub(crate) until_close: Vec<crate::map::Mapping>,
    /// The IOMMU mode `GPUNVME_IOC_CLAIM_OWNER` reported, once this file
    /// owns the controller (it does until it is closed).
    pub(crate) owner: Option<IommuMode>,
}

/// An open gpunvme device node: `/dev/gpunvme<N>` (the controller) or
/// `/dev/gpunvme<N>n<NSID>` (one namespace, shared mode only). Opening
/// needs no capability: the node's file mode decides who may use the
/// controller in shared mode; owner mode ([`Controller::claim_owner`])
/// needs CAP_SYS_RAWIO and more.
///
/// Queue pairs ([`crate::QueuePair`]), DMA buffers ([`crate::DmaBuffer`])
/// and dma-buf mappings ([`crate::DmabufMapping`]) hold an
/// [`Arc`](std::sync::Arc) of it: they belong to this file, so a
/// controller and its queues can live in one struct, and the file is
/// closed (releasing whatever is left on the kernel side, ownership
/// included) when the last of them and the caller's `Arc` are gone.
///
/// # Fork
///
/// A controller belongs to the process that opened it. In a child of
/// `fork()` (a PyTorch DataLoader worker, `os.fork`, `multiprocessing`)
/// every operation on it, its queue pairs, buffers and mappings fails with
/// [`Error::Forked`] before it touches the queues or issues an ioctl, and
/// dropping them there leaks them instead (an ioctl from the child would
/// act on the parent's open file: a drop would destroy the parent's pairs).
/// The child sees its copy of a [`crate::DmaBuffer`]'s bytes as they were
/// at the fork; the controller never writes that copy. Open the device
/// again in the child to use it there. The file is opened `O_CLOEXEC`, so
/// an `exec` drops it.
#[derive(Debug)]
pub struct Controller {
    // Field order is drop order: the file is closed before the memory
    // parked in `state` is unmapped (see `Lifecycle::until_close`).
    file: File,
    path: PathBuf,
    state: Mutex<Lifecycle>,
    /// The process that opened the file.
    owner: Owner,
    /// A passthrough back end answers the ioctls instead of the module;
    /// `file` is then its memfd (what queue pairs mmap).
    passthrough: Option<std::sync::Arc<crate::passthrough::Device>>,
    /// The in-process controller model of the unit tests, which answers
    /// the ioctls instead of the kernel.
    #[cfg(test)]
    pub(crate) model: Option<std::sync::Arc<crate::model::Model>>,
}

/// Closing the file (dropping the fields) is the module's business; the
/// unit tests' controller model stops its queues here, as a close would.
impl Drop for Controller {
    fn drop(&mut self) {
        if !self.owner.is_current() {
            // A forked child: the module's mappings were not copied into
            // this process (VM_DONTCOPY), so unmapping their addresses here
            // could unmap whatever the child mapped there since. Leak them;
            // closing the child's descriptor leaves the parent's file open.
            let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
            std::mem::forget(std::mem::take(&mut st.until_close));
            std::mem::forget(std::mem::take(&mut st.deferred));
            // A passthrough back end's relay threads are the parent's: the
            // child has none to stop, nor any business with its memory.
            std::mem::forget(self.passthrough.take());
        } else {
            #[cfg(test)]
            if let Some(m) = &self.model {
                m.close();
            }
        }
    }
}

impl Controller {
    /// Opens a device node by path, e.g. `/dev/gpunvme0`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("open the gpunvme device node", &path, e))?;
        Ok(Controller {
            file,
            path,
            state: Mutex::new(Lifecycle::default()),
            owner: Owner::here(),
            passthrough: None,
            #[cfg(test)]
            model: None,
        })
    }

    /// Opens a kernel NVMe namespace (`/dev/ngXnY`, `/dev/nvmeXnY` or a
    /// partition `/dev/nvmeXnYpZ`) through the passthrough back end (see
    /// [`crate::passthrough`]): no gpunvme module involved. The controller
    /// answers like a module namespace node in shared mode: one namespace
    /// (the window, its LBAs relative to the window), shared queue pairs
    /// whose every command a relay thread of this process checks and
    /// submits through io_uring, host buffers.
    pub fn open_passthrough(
        device: impl AsRef<Path>,
        opts: &crate::passthrough::Options,
    ) -> Result<Self> {
        let dev = crate::passthrough::open(device.as_ref(), opts)?;
        Self::with_passthrough(dev)
    }

    /// A controller answered by the passthrough back end `dev` (e.g. one
    /// made by [`crate::passthrough::open_model`]).
    pub fn with_passthrough(dev: crate::passthrough::Device) -> Result<Self> {
        let file = dev
            .memfd()
            .try_clone()
            .map_err(|e| Error::io("duplicate the passthrough memfd", &dev.path, e))?;
        Ok(Controller {
            file,
            path: dev.path.clone(),
            state: Mutex::new(Lifecycle::default()),
            owner: Owner::here(),
            passthrough: Some(std::sync::Arc::new(dev)),
            #[cfg(test)]
            model: None,
        })
    }

    /// The passthrough back end behind this controller, if it is one.
    pub fn passthrough(&self) -> Option<&std::sync::Arc<crate::passthrough::Device>> {
        self.passthrough.as_ref()
    }

    /// Opens `/dev/gpunvme<n>`.
    pub fn open_index(n: u32) -> Result<Self> {
        Self::open(node_path(n))
    }

    /// The device node's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Issues `GPUNVME_IOC_GET_INFO` and decodes the answer.
    pub fn info(&self) -> Result<Info> {
        let mut raw = sys::gpunvme_info {
            size: std::mem::size_of::<sys::gpunvme_info>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            ..Default::default()
        };
        // SAFETY: GPUNVME_IOC_GET_INFO takes a pointer to a struct
        // gpunvme_info, whose size is encoded in the request; `raw` is such
        // a struct, live and exclusively borrowed for the call.
        unsafe {
            self.ioctl(
                "GPUNVME_IOC_GET_INFO",
                sys::GPUNVME_IOC_GET_INFO,
                &mut raw as *mut _ as *mut _,
            )?
        };
        Info::from_raw(&raw)
    }

    /// Claims owner mode for this file (`GPUNVME_IOC_CLAIM_OWNER`): from
    /// now until the file is closed only this file may create queue pairs
    /// or map buffers on the controller, and it may create raw pairs
    /// ([`crate::Mode::Raw`]: the real SQ, CQ and doorbell page, nothing
    /// checked). Returns the controller's IOMMU mode, the only bound on
    /// what a raw pair's PRPs can reach.
    ///
    /// Fails with EPERM (no CAP_SYS_RAWIO, kernel lockdown, a namespace
    /// node, or the device is not in a translating IOMMU domain: the
    /// kernel log names the mode), EBUSY (another file owns the controller,
    /// or has queue pairs or buffers mapped), EALREADY (this file owns it
    /// already).
    pub fn claim_owner(&self) -> Result<IommuMode> {
        // Before the lock: a child may have inherited it held.
        self.check_process()?;
        if self.passthrough.is_some() {
            return Err(Error::Refused(format!(
                "{}: owner mode needs a controller bound to the gpunvme module; a passthrough back \
                 end has no raw queues (the relay checks every command)",
                self.path.display()
            )));
        }
        let mut o = sys::gpunvme_owner {
            size: std::mem::size_of::<sys::gpunvme_owner>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            ..Default::default()
        };
        let mut st = self.lifecycle();
        // SAFETY: GPUNVME_IOC_CLAIM_OWNER takes a struct gpunvme_owner; `o`
        // is one, live and exclusively borrowed for the call.
        unsafe {
            self.ioctl(
                "GPUNVME_IOC_CLAIM_OWNER",
                sys::GPUNVME_IOC_CLAIM_OWNER,
                &mut o as *mut _ as *mut _,
            )?
        };
        let mode = IommuMode::from_raw(o.iommu_mode);
        st.owner = Some(mode);
        Ok(mode)
    }

    /// Whether this file owns the controller ([`claim_owner`](Self::claim_owner)
    /// succeeded); its IOMMU mode then.
    pub fn owner(&self) -> Option<IommuMode> {
        self.lifecycle().owner
    }

    /// Whether this is the process that opened the node (not a child of a
    /// `fork()` since): everything but this, [`path`](Self::path) and
    /// [`opened_by`](Self::opened_by) fails with [`Error::Forked`] in any
    /// other process.
    pub fn is_usable_here(&self) -> bool {
        self.owner.is_current()
    }

    /// The id of the process that opened the node.
    pub fn opened_by(&self) -> u32 {
        self.owner.pid()
    }

    /// [`is_usable_here`](Self::is_usable_here) without a system call (the
    /// fork counter only).
    pub(crate) fn is_usable_here_fast(&self) -> bool {
        self.owner.unforked()
    }

    /// [`Error::Forked`] unless this is the process that opened the node
    /// (the fork counter and getpid(): before any ioctl or lock).
    pub fn check_process(&self) -> Result<()> {
        if self.owner.is_current() {
            Ok(())
        } else {
            Err(self.forked())
        }
    }

    /// [`Error::Forked`] unless no fork happened since the open: the fork
    /// counter only, no system call. A child made by `fork()` (libc's, which
    /// runs the `pthread_atfork` handlers) has bumped it, one made by a raw
    /// `clone` has not: for the queue fast path, and for a second check on a
    /// path whose entry made [`check_process`](Self::check_process) in the
    /// same thread (a thread's process changes only when that thread forks).
    pub fn check_unforked(&self) -> Result<()> {
        if self.owner.unforked() {
            Ok(())
        } else {
            Err(self.forked())
        }
    }

    pub(crate) fn forked(&self) -> Error {
        Error::Forked {
            path: self.path.clone(),
            opened_by: self.owner.pid(),
            now: Owner::current_pid(),
        }
    }

    /// The open descriptor (for mmap).
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }

    pub(crate) fn lifecycle(&self) -> MutexGuard<'_, Lifecycle> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mappings whose UNMAP is waiting for the queue pairs to go.
    pub fn deferred_unmaps(&self) -> usize {
        self.lifecycle().deferred.len()
    }

    /// Memory regions kept mapped until this file is closed, because the
    /// module may still use them (a DESTROY_QPAIR or UNMAP failed): a
    /// poisoned pair's buffers after a failed destroy, for instance.
    pub fn kept_until_close(&self) -> usize {
        self.lifecycle().until_close.len()
    }

    /// # Safety
    /// `arg` must be valid for the access `request` encodes.
    pub(crate) unsafe fn ioctl(
        &self,
        name: &'static str,
        request: sys::IoctlRequest,
        arg: *mut libc::c_void,
    ) -> Result<libc::c_int> {
        // A child's ioctl would act on its parent's file.
        self.check_process()?;
        if let Some(d) = &self.passthrough {
            // SAFETY: as for the kernel: the caller guarantees `arg`.
            return unsafe { d.ioctl(request, arg) }.map_err(|errno| Error::Ioctl {
                name,
                #[allow(clippy::useless_conversion)]
                request: u64::from(request),
                path: self.path.clone(),
                errno,
            });
        }
        #[cfg(test)]
        if let Some(m) = &self.model {
            // SAFETY: as for the kernel: the caller guarantees `arg`.
            return match unsafe { m.ioctl(request, arg) } {
                Ok(r) => Ok(r),
                #[allow(clippy::useless_conversion)]
                Err(errno) => Err(Error::Ioctl {
                    name,
                    request: u64::from(request),
                    path: self.path.clone(),
                    errno,
                }),
            };
        }
        // SAFETY: the fd is owned by `self.file` and open; the caller
        // guarantees `arg` matches `request`.
        let ret = unsafe { libc::ioctl(self.file.as_raw_fd(), request as _, arg) };
        if ret < 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            // c_ulong is u32 on 32-bit targets.
            #[allow(clippy::useless_conversion)]
            let request = u64::from(request);
            return Err(Error::Ioctl {
                name,
                request,
                path: self.path.clone(),
                errno,
            });
        }
        Ok(ret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw_info(cap: u64) -> sys::gpunvme_info {
        let c = Cap::from_raw(cap);
        let mut raw = sys::gpunvme_info {
            size: std::mem::size_of::<sys::gpunvme_info>() as u32,
            version: sys::GPUNVME_UAPI_VERSION,
            cap,
            vs: 0x0001_0400,
            pci_vendor: 0x1b36,
            pci_device: 0x0010,
            max_queue_entries: c.max_queue_entries(),
            doorbell_stride: c.doorbell_stride(),
            ready_timeout_ms: c.ready_timeout_ms(),
            ..Default::default()
        };
        fill(&mut raw.bdf, b"0000:00:04.0\0");
        fill(&mut raw.serial, b"deadbeef   \0");
        fill(&mut raw.model, b"QEMU NVMe Ctrl\0");
        fill(&mut raw.firmware, b"7.2.0\0");
        raw.mdts_bytes = 512 * 1024;
        raw.io_queues = 8;
        raw.page_size = 4096;
        raw.num_namespaces = 2;
        raw.ns[0] = sys::gpunvme_ns_info {
            nsid: 1,
            lba_size: 512,
            capacity_lbas: 2048,
        };
        raw.ns[1] = sys::gpunvme_ns_info {
            nsid: 3,
            lba_size: 4096,
            capacity_lbas: 10,
        };
        raw.iommu_mode = sys::GPUNVME_IOMMU_STRICT;
        raw.modes = sys::GPUNVME_MODE_SHARED;
        raw.shared_max_transfer = 512 * 1024;
        raw
    }

    fn fill(dst: &mut [core::ffi::c_char], src: &[u8]) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s as _;
        }
    }

    #[test]
    fn decodes_info() {
        let cap = 0x3ff | (1 << 16) | (20 << 24) | (2u64 << 32) | (1u64 << 37);
        let i = Info::from_raw(&raw_info(cap)).unwrap();
        assert_eq!(i.bdf, "0000:00:04.0");
        assert_eq!((i.pci_vendor, i.pci_device), (0x1b36, 0x0010));
        assert_eq!(i.version.to_string(), "1.4.0");
        assert_eq!(i.max_queue_entries, 1024);
        assert_eq!(i.doorbell_stride, 16);
        assert_eq!(i.ready_timeout_ms, 10_000);
        assert!(i.cap.cqr);
        assert_eq!(i.serial, "deadbeef");
        assert_eq!(i.model, "QEMU NVMe Ctrl");
        assert_eq!(i.firmware, "7.2.0");
        assert_eq!(i.max_transfer_bytes, Some(512 * 1024));
        assert_eq!((i.io_queues, i.page_size), (8, 4096));
        assert_eq!(i.namespaces.len(), 2);
        assert_eq!(i.namespaces[1].nsid, 3);
        assert_eq!(i.namespaces[0].capacity_bytes(), 1024 * 1024);
        assert_eq!(i.iommu_mode, IommuMode::Strict);
        assert_eq!(
            i.modes,
            Modes {
                shared: true,
                owner: false
            }
        );
        assert_eq!(i.shared_max_transfer_bytes, Some(512 * 1024));
        assert_eq!(i.node_nsid, None);
        assert_eq!((i.quota_qpairs, i.quota_maps), (None, None));
        assert_eq!(i.max_transfer_for(crate::Mode::Shared), Some(512 * 1024));
        assert_eq!(i.max_transfer_for(crate::Mode::Raw), Some(512 * 1024));

        let mut raw = raw_info(cap);
        raw.mdts_bytes = 0;
        raw.num_namespaces = 0;
        raw.shared_max_transfer = 0;
        raw.node_nsid = 3;
        raw.quota_qpairs = 8;
        raw.quota_maps = 64;
        raw.modes = sys::GPUNVME_MODE_SHARED | sys::GPUNVME_MODE_OWNER | (1 << 7);
        raw.iommu_mode = 99;
        let i = Info::from_raw(&raw).unwrap();
        assert_eq!(i.max_transfer_bytes, None);
        assert!(i.namespaces.is_empty());
        assert_eq!(i.node_nsid, Some(3));
        assert_eq!((i.quota_qpairs, i.quota_maps), (Some(8), Some(64)));
        assert_eq!(i.modes.to_string(), "shared, owner");
        assert_eq!(i.iommu_mode, IommuMode::Other);
        // No MDTS: raw pairs have no limit, shared ones the module's 2 MiB.
        assert_eq!(i.max_transfer_for(crate::Mode::Raw), None);
        assert_eq!(
            i.max_transfer_for(crate::Mode::Shared),
            Some(SHARED_TRANSFER_CAP)
        );
    }

    #[test]
    fn iommu_modes_and_mode_bits_decode() {
        let names: Vec<String> = (0..=5)
            .map(|v| IommuMode::from_raw(v).to_string())
            .collect();
        assert_eq!(
            names,
            [
                "none",
                "identity (passthrough)",
                "strict",
                "lazy",
                "other",
                "other"
            ]
        );
        assert!(IommuMode::Strict.is_translating() && IommuMode::Lazy.is_translating());
        assert!(!IommuMode::Identity.is_translating() && !IommuMode::None.is_translating());
        assert_eq!(
            serde_json::to_value(IommuMode::Identity).unwrap(),
            serde_json::json!("identity")
        );
        assert_eq!(Modes::from_raw(0).to_string(), "none");
        assert_eq!(
            Modes::from_raw(sys::GPUNVME_MODE_OWNER).to_string(),
            "owner"
        );
        assert_eq!(sys::GPUNVME_MODE_SHARED, 1);
        assert_eq!(sys::GPUNVME_MODE_OWNER, 2);
        assert_eq!(namespace_node_path(0, 2), Path::new("/dev/gpunvme0n2"));
    }

    #[test]
    fn rejects_inconsistent_module_answers() {
        let mut raw = raw_info(0x3ff);
        raw.doorbell_stride = 8;
        let e = Info::from_raw(&raw).unwrap_err().to_string();
        assert!(e.contains("doorbell_stride = 8"), "{e}");

        let mut raw = raw_info(0x3ff);
        raw.reserved[3] = 1;
        assert!(Info::from_raw(&raw).is_err());
        let mut raw = raw_info(0x3ff);
        raw.reserved[4] = 1;
        assert!(Info::from_raw(&raw).is_err());

        let mut raw = raw_info(0x3ff);
        raw.num_namespaces = 17;
        assert!(Info::from_raw(&raw)
            .unwrap_err()
            .to_string()
            .contains("GPUNVME_MAX_NS"));

        let mut raw = raw_info(0x3ff);
        raw.bdf = [b'a' as _; 16];
        assert!(Info::from_raw(&raw)
            .unwrap_err()
            .to_string()
            .contains("NUL"));
    }

    #[test]
    fn ioctl_on_a_non_gpunvme_file_maps_errno() {
        // /dev/null accepts the open but not our ioctl: ENOTTY.
        let c = Controller::open("/dev/null").unwrap();
        let e = c.info().unwrap_err();
        match &e {
            Error::Ioctl { name, errno, .. } => {
                assert_eq!(*name, "GPUNVME_IOC_GET_INFO");
                assert_eq!(*errno, libc::ENOTTY);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(e.to_string().contains("not a gpunvme device node"), "{e}");
        let e = c.claim_owner().unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOTTY));
        assert_eq!(c.owner(), None, "a failed claim owns nothing");
    }

    #[test]
    fn open_missing_node_says_what_it_tried() {
        let e = Controller::open("/nonexistent/gpunvme9").unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        assert!(e.to_string().contains("open the gpunvme device node"));
    }
}
