// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! The error type of the gpunvme crate.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong, each variant saying what was attempted.
#[derive(Debug)]
pub enum Error {
    /// A file-system operation (open, read, write, readlink) failed.
    Io {
        /// What was being done, e.g. "open the gpunvme device node".
        what: String,
        /// The path it was done on.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// An ioctl on a gpunvme device node failed.
    Ioctl {
        /// The ioctl's name in the UAPI header, e.g. `GPUNVME_IOC_GET_INFO`.
        name: &'static str,
        /// The request number.
        request: u64,
        /// The device node.
        path: PathBuf,
        /// `errno` as returned by the kernel.
        errno: i32,
    },
    /// The operation was refused because doing it would be unsafe (e.g. a
    /// namespace of the controller is mounted).
    Refused(String),
    /// A device, driver or node does not exist.
    NotFound(String),
    /// The kernel or sysfs returned something this crate does not accept,
    /// or the caller passed an invalid argument.
    Invalid(String),
    /// The controller completed a command with an error status.
    Nvme {
        /// Queue pair.
        qid: u16,
        /// Command identifier.
        cid: u16,
        /// What the command was, e.g. `Read of 1 block(s) at LBA 9 (nsid 1)`.
        command: String,
        /// The completion status (SCT, SC, DNR, ...).
        status: crate::status::Status,
    },
    /// A command did not complete before its deadline.
    Timeout {
        /// Queue pair.
        qid: u16,
        /// The command waited for; `None` when waiting for any.
        cid: Option<u16>,
        /// How long was waited.
        waited: std::time::Duration,
        /// What was outstanding, e.g. `Read of 8 block(s) at LBA 0 (nsid 1)`.
        command: String,
    },
    /// The queue pair refuses new commands: a wait timed out (or the
    /// controller answered a command that was not outstanding), so earlier
    /// commands may still be in flight. It keeps the buffers they use until
    /// it is destroyed; create a new pair.
    Poisoned {
        /// Queue pair.
        qid: u16,
        /// What poisoned it.
        why: String,
    },
    /// The queue pair already has depth - 1 commands outstanding.
    QueueFull {
        /// Queue pair.
        qid: u16,
        /// Commands outstanding.
        outstanding: usize,
    },
    /// The controller (the open file) was opened by another process: this
    /// is a child of a `fork()` (e.g. a PyTorch DataLoader worker). A child
    /// never uses its parent's queue pairs, buffers or file; dropping them
    /// there leaks them (the parent's stay intact). Open the device again
    /// in this process.
    Forked {
        /// The device node.
        path: PathBuf,
        /// The process that opened it.
        opened_by: u32,
        /// This process.
        now: u32,
    },
}

impl Error {
    /// `errno` of the underlying OS error, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::Ioctl { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// The NVMe completion status, if the controller failed the command.
    pub fn nvme_status(&self) -> Option<crate::status::Status> {
        match self {
            Error::Nvme { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub(crate) fn io(what: impl Into<String>, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            path: path.into(),
            source,
        }
    }
}

/// What an errno means for the gpunvme ioctl `name` (see the comments in
/// `uapi/gpunvme.h`).
fn ioctl_hint(name: &str, errno: i32) -> &'static str {
    match (name, errno) {
        ("GPUNVME_IOC_CLAIM_OWNER", libc::EPERM | libc::EACCES) => {
            "owner mode needs CAP_SYS_RAWIO, no kernel lockdown, the controller node (not a \
             namespace node) and a translating IOMMU domain (the kernel log names the mode); \
             shared queue pairs need none of that"
        }
        ("GPUNVME_IOC_CLAIM_OWNER", libc::EBUSY) => {
            "another file owns the controller, or has queue pairs or buffers mapped on it"
        }
        ("GPUNVME_IOC_CLAIM_OWNER", libc::EALREADY) => "this file owns the controller already",
        ("GPUNVME_IOC_CREATE_QPAIR", libc::EPERM | libc::EACCES) => {
            "a raw queue pair needs owner mode: claim the controller first"
        }
        ("GPUNVME_IOC_CREATE_QPAIR", libc::EBUSY) => {
            "another file owns the controller (owner mode): no other file may create queue pairs"
        }
        ("GPUNVME_IOC_MAP_HOST" | "GPUNVME_IOC_MAP_DMABUF", libc::EBUSY) => {
            "another file owns the controller (owner mode): no other file may map buffers"
        }
        (_, libc::EINVAL) => {
            "size/version mismatch with the module or non-zero reserved field; \
             the kernel log names both values"
        }
        (_, libc::EPERM | libc::EACCES) => "not permitted on this node or file",
        (_, libc::ENODEV) => {
            "the controller was unbound from gpunvme, removed, shut down or suspended since the \
             node was opened: close it, bind again if need be, and reopen"
        }
        (_, libc::ENOTTY) => "not a gpunvme device node, or the module does not know this ioctl",
        (_, libc::EFAULT) => "bad user pointer",
        (_, libc::ENOSPC) => "no I/O queue pair left on the controller (info.io_queues in use)",
        (_, libc::EBUSY) => "this file still has queue pairs: destroy them first",
        (_, libc::ENOENT) => "no such queue pair or mapping on this file",
        (_, libc::EIO) => {
            "the controller failed the command (the kernel log has its status), or failed as a \
             whole since the node was opened (fatal status or PCI error; the kernel log says \
             \"cutting off every open file\"): then close the node and reopen it"
        }
        _ => "",
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { what, path, source } => {
                write!(f, "cannot {what} ({}): {source}", path.display())?;
                if source.raw_os_error() == Some(libc::EACCES)
                    || source.raw_os_error() == Some(libc::EPERM)
                {
                    write!(
                        f,
                        " (a gpunvme node's file mode decides who may open it: run as root, \
                         or have a udev rule give your group access)"
                    )?;
                }
                Ok(())
            }
            Error::Ioctl {
                name,
                request,
                path,
                errno,
            } => {
                let os = io::Error::from_raw_os_error(*errno);
                write!(
                    f,
                    "ioctl {name} (0x{request:08x}) on {} failed: {os}",
                    path.display()
                )?;
                let hint = ioctl_hint(name, *errno);
                if !hint.is_empty() {
                    write!(f, " ({hint})")?;
                }
                Ok(())
            }
            Error::Refused(m) => write!(f, "refused: {m}"),
            Error::NotFound(m) => write!(f, "not found: {m}"),
            Error::Invalid(m) => write!(f, "invalid: {m}"),
            Error::Nvme {
                qid,
                cid,
                command,
                status,
            } => write!(f, "NVMe {command} failed on qid {qid} cid {cid}: {status}"),
            Error::Timeout {
                qid,
                cid,
                waited,
                command,
            } => {
                write!(
                    f,
                    "timeout after {:.3} s waiting on qid {qid}",
                    waited.as_secs_f64()
                )?;
                match cid {
                    Some(c) => write!(f, " cid {c}")?,
                    None => write!(f, " for any completion")?,
                }
                if !command.is_empty() {
                    write!(f, " ({command})")?;
                }
                Ok(())
            }
            Error::Poisoned { qid, why } => write!(
                f,
                "qid {qid} takes no new commands: earlier ones may still be in flight ({why}); \
                 it keeps their buffers until it is destroyed"
            ),
            Error::QueueFull { qid, outstanding } => write!(
                f,
                "queue pair {qid} is full: {outstanding} commands outstanding (depth - 1)"
            ),
            Error::Forked {
                path,
                opened_by,
                now,
            } => write!(
                f,
                "{} was opened by process {opened_by}, and this is process {now} (a fork): \
                 a child cannot use its parent's gpunvme queue pairs, buffers or file; \
                 open the device again in this process",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_error_names_the_attempt_and_errno() {
        let e = Error::Ioctl {
            name: "GPUNVME_IOC_GET_INFO",
            request: 0xc088_b700,
            path: "/dev/gpunvme0".into(),
            errno: libc::EINVAL,
        };
        let s = e.to_string();
        assert!(s.contains("GPUNVME_IOC_GET_INFO"), "{s}");
        assert!(s.contains("/dev/gpunvme0"), "{s}");
        assert!(s.contains("version"), "{s}");
        assert_eq!(e.errno(), Some(libc::EINVAL));
    }

    #[test]
    fn owner_mode_errors_say_what_is_missing() {
        let e = |name, errno| {
            Error::Ioctl {
                name,
                request: 0,
                path: "/dev/gpunvme0".into(),
                errno,
            }
            .to_string()
        };
        let s = e("GPUNVME_IOC_CLAIM_OWNER", libc::EPERM);
        assert!(s.contains("CAP_SYS_RAWIO") && s.contains("IOMMU"), "{s}");
        let s = e("GPUNVME_IOC_CREATE_QPAIR", libc::EPERM);
        assert!(s.contains("owner mode"), "{s}");
        let s = e("GPUNVME_IOC_CREATE_QPAIR", libc::EBUSY);
        assert!(s.contains("owns the controller"), "{s}");
        let s = e("GPUNVME_IOC_MAP_HOST", libc::EBUSY);
        assert!(s.contains("owns the controller"), "{s}");
        let s = e("GPUNVME_IOC_UNMAP", libc::EBUSY);
        assert!(s.contains("still has queue pairs"), "{s}");
    }

    #[test]
    fn io_error_says_what_was_attempted() {
        let e = Error::io(
            "open the gpunvme device node",
            "/dev/gpunvme3",
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        let s = e.to_string();
        assert!(
            s.starts_with("cannot open the gpunvme device node (/dev/gpunvme3)"),
            "{s}"
        );
        assert_eq!(e.errno(), Some(libc::ENOENT));
    }
}
