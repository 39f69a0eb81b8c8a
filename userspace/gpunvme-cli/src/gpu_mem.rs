// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! `--gpu SOURCE`: GPU memory for `read`, `write`, `verify` and `bench`,
//! exported as a dma-buf and registered with the controller
//! ([`gpunvme::GpuBuffer`]):
//!
//! - `N` (0, 1, ...): VRAM of GPU N (HIP or CUDA, as `gpu-run` finds it),
//!   exported with the runtime's dma-buf export; copied to and from the
//!   host by the runtime's copy engine;
//! - `udmabuf`: the stand-in the VM tests use where there is no GPU: a
//!   memfd turned into a dma-buf by `/dev/udmabuf` (CONFIG_UDMABUF), its
//!   pages reached by the CPU through the memfd;
//! - `edu`: the same udmabuf, imported by the edu stand-in as well
//!   (`tests/standin`: QEMU's edu device bound to `gpunvme_standin`, a
//!   peer device importing dma-bufs as a GPU driver does), and read back
//!   through edu's DMA engine, so what is checked is what a peer device
//!   sees; edu moves 4 KiB per ~0.2 s, so keep such ranges small.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use gpunvme::{Controller, GpuBuffer};
use gpunvme_gpu::{DeviceMemory, Gpu};

/// Where `--gpu` memory comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSource {
    /// VRAM of GPU N of the runtime found.
    Index(u32),
    /// A udmabuf (memfd pages) standing in for VRAM.
    Udmabuf,
    /// A udmabuf read back through the edu stand-in's DMA.
    Edu,
}

/// Parses `--gpu`: a GPU index, `udmabuf` or `edu`.
pub fn parse_gpu_source(s: &str) -> Result<GpuSource, String> {
    match s {
        "udmabuf" => Ok(GpuSource::Udmabuf),
        "edu" => Ok(GpuSource::Edu),
        n => n.parse().map(GpuSource::Index).map_err(|_| {
            format!("`{s}` is not a GPU memory source: a GPU index (0, 1, ...), udmabuf or edu")
        }),
    }
}

/// Pages of a memfd mapped here (the CPU's view of a udmabuf).
struct MemfdPages {
    map: *mut u8,
    len: usize,
    _memfd: OwnedFd,
}

// SAFETY: the pointer is to a shared mapping owned by this value; it is
// read and written only through GpuMemory's unsafe copies, whose callers
// keep transfers out meanwhile.
unsafe impl Send for MemfdPages {}
// SAFETY: as above.
unsafe impl Sync for MemfdPages {}

impl Drop for MemfdPages {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned. The pages stay alive while
        // the udmabuf (and the module's import of it) references them.
        unsafe { libc::munmap(self.map.cast(), self.len) };
    }
}

/// An import by the edu stand-in, released when dropped.
struct EduImport {
    dev: File,
    handle: u32,
    /// Bytes of the first DMA segment (what edu may reach).
    len: u64,
}

impl Drop for EduImport {
    fn drop(&mut self) {
        let mut r = StandinRelease {
            handle: self.handle,
            pad: 0,
        };
        // SAFETY: STANDIN_IOC_RELEASE takes a struct standin_release.
        unsafe { libc::ioctl(self.dev.as_raw_fd(), STANDIN_IOC_RELEASE, &mut r) };
    }
}

/// What a registration owns: the memory behind the dma-buf, kept by the
/// queue pair after a timed-out transfer (see [`GpuBuffer`]).
enum Backing {
    Memfd(MemfdPages),
    Edu(MemfdPages, EduImport),
    /// The Gpu is leaked for the process's lifetime (the CLI exits after
    /// one command), so the allocation can outlive any borrow.
    Vram(Mutex<DeviceMemory<'static>>),
}

/// GPU memory registered for transfers, and the host's way in and out.
pub struct GpuMemory {
    buf: GpuBuffer,
    what: String,
}

// ---- the udmabuf and stand-in ioctls (include/uapi/linux/udmabuf.h,
// tests/standin/standin_uapi.h) ------------------------------------------

#[repr(C)]
struct UdmabufCreate {
    memfd: u32,
    flags: u32,
    offset: u64,
    size: u64,
}
const UDMABUF_FLAGS_CLOEXEC: u32 = 1;
const UDMABUF_CREATE: libc::c_ulong = gpunvme::sys::ioc::ioc(
    gpunvme::sys::ioc::WRITE,
    b'u' as u32,
    0x42,
    std::mem::size_of::<UdmabufCreate>(),
);

#[repr(C)]
struct StandinImport {
    fd: i32,
    handle: u32,
    dma_addr: u64,
    len: u64,
    nents: u32,
    pad: u32,
}
#[repr(C)]
struct StandinRead {
    handle: u32,
    len: u32,
    offset: u64,
    buf: u64,
}
#[repr(C)]
struct StandinRelease {
    handle: u32,
    pad: u32,
}
const STANDIN_MAGIC: u32 = 0xB8;
const STANDIN_MAX_READ: usize = 4096;
const STANDIN_IOC_IMPORT: libc::c_ulong = gpunvme::sys::ioc::ioc(
    gpunvme::sys::ioc::READ | gpunvme::sys::ioc::WRITE,
    STANDIN_MAGIC,
    0x00,
    std::mem::size_of::<StandinImport>(),
);
const STANDIN_IOC_READ: libc::c_ulong = gpunvme::sys::ioc::ioc(
    gpunvme::sys::ioc::WRITE,
    STANDIN_MAGIC,
    0x02,
    std::mem::size_of::<StandinRead>(),
);
const STANDIN_IOC_RELEASE: libc::c_ulong = gpunvme::sys::ioc::ioc(
    gpunvme::sys::ioc::WRITE,
    STANDIN_MAGIC,
    0x04,
    std::mem::size_of::<StandinRelease>(),
);

fn os_err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// A memfd of `len` bytes, its udmabuf, and the memfd mapped here.
fn udmabuf(len: usize) -> Result<(OwnedFd, MemfdPages), String> {
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe {
        libc::memfd_create(
            c"gpunvme-vram-standin".as_ptr(),
            libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err("memfd_create"));
    }
    // SAFETY: a fresh descriptor of ours.
    let memfd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: plain calls on our memfd.
    if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0
        || unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0
    {
        return Err(os_err("sizing the memfd"));
    }
    // SAFETY: a new shared mapping of the memfd's len bytes.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(os_err("mmap of the memfd"));
    }
    let pages = MemfdPages {
        map: map.cast(),
        len,
        _memfd: memfd,
    };
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/udmabuf")
        .map_err(|e| format!("--gpu udmabuf: /dev/udmabuf: {e} (CONFIG_UDMABUF)"))?;
    let mut c = UdmabufCreate {
        memfd: fd as u32,
        flags: UDMABUF_FLAGS_CLOEXEC,
        offset: 0,
        size: len as u64,
    };
    // SAFETY: UDMABUF_CREATE takes a struct udmabuf_create; `c` is one.
    let buf = unsafe { libc::ioctl(dev.as_raw_fd(), UDMABUF_CREATE, &mut c) };
    if buf < 0 {
        return Err(os_err("UDMABUF_CREATE"));
    }
    // SAFETY: the ioctl returned a new descriptor of ours.
    Ok((unsafe { OwnedFd::from_raw_fd(buf) }, pages))
}

impl GpuMemory {
    /// `bytes` (rounded up to whole pages) of memory from `src`,
    /// registered on `ctrl`.
    pub fn new(
        ctrl: &Arc<Controller>,
        src: &GpuSource,
        bytes: usize,
    ) -> Result<Self, Box<dyn std::error::Error>> {
        let len = bytes.max(1).div_ceil(4096) * 4096;
        if len as u64 > GpuBuffer::MAX_BYTES {
            return Err(format!(
                "--gpu: {len} bytes of GPU memory; one registration takes at most {} MiB",
                GpuBuffer::MAX_BYTES >> 20
            )
            .into());
        }
        let (buf, what) = match src {
            GpuSource::Udmabuf => {
                let (fd, pages) = udmabuf(len)?;
                let buf = GpuBuffer::register_owned(ctrl, &fd, Backing::Memfd(pages))?;
                (
                    buf,
                    "udmabuf (memfd pages standing in for VRAM, CPU copies)".to_string(),
                )
            }
            GpuSource::Edu => {
                let (fd, pages) = udmabuf(len)?;
                let dev = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/gpunvme_standin")
                    .map_err(|e| {
                        format!(
                            "--gpu edu: /dev/gpunvme_standin: {e} (load tests/standin's \
                             gpunvme_standin.ko and bind the edu device to it)"
                        )
                    })?;
                let mut imp = StandinImport {
                    fd: fd.as_raw_fd(),
                    handle: 0,
                    dma_addr: 0,
                    len: 0,
                    nents: 0,
                    pad: 0,
                };
                // SAFETY: STANDIN_IOC_IMPORT takes a struct standin_import.
                if unsafe { libc::ioctl(dev.as_raw_fd(), STANDIN_IOC_IMPORT, &mut imp) } != 0 {
                    return Err(os_err("--gpu edu: STANDIN_IOC_IMPORT").into());
                }
                let edu = EduImport {
                    dev,
                    handle: imp.handle,
                    len: imp.len,
                };
                let what = format!(
                    "udmabuf read back by the edu stand-in's DMA (import {}, {} bytes reachable)",
                    imp.handle, imp.len
                );
                let buf = GpuBuffer::register_owned(ctrl, &fd, Backing::Edu(pages, edu))?;
                (buf, what)
            }
            GpuSource::Index(n) => {
                let gpu: &'static Gpu = Box::leak(Box::new(
                    Gpu::open(*n).map_err(|e| format!("--gpu {n}: {e}"))?,
                ));
                let mem = gpu.alloc(len)?;
                let fd = gpu.export_dmabuf(&mem)?;
                let what = format!(
                    "VRAM of GPU {n} ({}, {})",
                    gpu.device().name,
                    gpu.runtime().kind
                );
                let buf = GpuBuffer::register_owned(ctrl, &fd, Backing::Vram(Mutex::new(mem)))?;
                (buf, what)
            }
        };
        Ok(GpuMemory { buf, what })
    }

    /// The registration.
    pub fn buffer(&self) -> &GpuBuffer {
        &self.buf
    }

    /// What the memory is, for people.
    pub fn describe(&self) -> &str {
        &self.what
    }

    fn backing(&self) -> &Backing {
        self.buf
            .owner::<Backing>()
            .expect("registered with its backing")
    }

    /// Copies `src` into the memory at `offset`.
    ///
    /// # Safety
    ///
    /// No transfer on this memory is in flight, nor one that timed out.
    pub unsafe fn copy_in(&self, offset: usize, src: &[u8]) -> Result<(), String> {
        self.check(offset, src.len())?;
        match self.backing() {
            Backing::Memfd(p) | Backing::Edu(p, _) => {
                // SAFETY: inside the mapping (checked); the caller keeps the
                // controller out of these pages meanwhile.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr(), p.map.add(offset), src.len())
                };
                Ok(())
            }
            Backing::Vram(m) => m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .write_at(offset, src)
                .map_err(|e| e.to_string()),
        }
    }

    /// Copies the memory at `offset` into `dst`.
    ///
    /// # Safety
    ///
    /// As for [`copy_in`](Self::copy_in).
    pub unsafe fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result<(), String> {
        self.check(offset, dst.len())?;
        match self.backing() {
            Backing::Memfd(p) => {
                // SAFETY: as for copy_in.
                unsafe {
                    std::ptr::copy_nonoverlapping(p.map.add(offset), dst.as_mut_ptr(), dst.len())
                };
                Ok(())
            }
            Backing::Edu(_, edu) => {
                if (offset + dst.len()) as u64 > edu.len {
                    return Err(format!(
                        "--gpu edu: bytes {offset}..{} lie beyond the {} bytes edu's import \
                         reaches: read fewer blocks",
                        offset + dst.len(),
                        edu.len
                    ));
                }
                for (i, part) in dst.chunks_mut(STANDIN_MAX_READ).enumerate() {
                    let mut r = StandinRead {
                        handle: edu.handle,
                        len: part.len() as u32,
                        offset: (offset + i * STANDIN_MAX_READ) as u64,
                        buf: part.as_mut_ptr() as u64,
                    };
                    // SAFETY: STANDIN_IOC_READ copies `len` bytes into
                    // `buf`, which `part` covers.
                    if unsafe { libc::ioctl(edu.dev.as_raw_fd(), STANDIN_IOC_READ, &mut r) } != 0 {
                        return Err(os_err("--gpu edu: STANDIN_IOC_READ"));
                    }
                }
                Ok(())
            }
            Backing::Vram(m) => m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .read_at(offset, dst)
                .map_err(|e| e.to_string()),
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), String> {
        if (offset as u64).saturating_add(len as u64) > self.buf.len() {
            return Err(format!(
                "{len} bytes at offset {offset} do not fit {} bytes of GPU memory",
                self.buf.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(parse_gpu_source("0"), Ok(GpuSource::Index(0)));
        assert_eq!(parse_gpu_source("3"), Ok(GpuSource::Index(3)));
        assert_eq!(parse_gpu_source("udmabuf"), Ok(GpuSource::Udmabuf));
        assert_eq!(parse_gpu_source("edu"), Ok(GpuSource::Edu));
        let e = parse_gpu_source("vram").unwrap_err();
        assert!(e.contains("udmabuf or edu"), "{e}");
    }

    /// The request numbers the C headers give (x86_64 and aarch64).
    #[test]
    fn ioctl_numbers_match_the_headers() {
        assert_eq!(UDMABUF_CREATE, 0x4018_7542);
        assert_eq!(STANDIN_IOC_IMPORT, 0xc020_b800);
        assert_eq!(STANDIN_IOC_READ, 0x4018_b802);
        assert_eq!(STANDIN_IOC_RELEASE, 0x4008_b804);
    }
}
