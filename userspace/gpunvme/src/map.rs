// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Owned memory mappings (munmap on drop).

use std::io;
use std::os::fd::RawFd;
use std::ptr::NonNull;

/// One `mmap` region, unmapped when dropped.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a Mapping is plain memory owned by this value; who may touch it
// concurrently is governed by the types that embed it.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself exposes only raw pointers.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(len: usize, flags: libc::c_int, fd: RawFd, offset: u64) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a fresh mapping at an address of the kernel's choosing
        // overlaps nothing Rust owns.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned NULL"),
            len,
        })
    }

    /// Private anonymous zeroed memory, page aligned.
    pub(crate) fn anonymous(len: usize) -> io::Result<Self> {
        Self::new(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    }

    /// `MAP_SHARED` of `fd` at byte `offset`, read/write.
    pub(crate) fn shared(fd: RawFd, offset: u64, len: usize) -> io::Result<Self> {
        Self::new(len, libc::MAP_SHARED, fd, offset)
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing borrows the
        // region past the owner's lifetime.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_is_page_aligned_and_zeroed() {
        let m = Mapping::anonymous(3 * 4096).unwrap();
        assert_eq!(m.ptr() as usize % 4096, 0);
        assert_eq!(m.len(), 3 * 4096);
        // SAFETY: the mapping is live and 3 pages long.
        let s = unsafe { std::slice::from_raw_parts(m.ptr(), m.len()) };
        assert!(s.iter().all(|&b| b == 0));
        assert!(Mapping::anonymous(0).is_err());
    }
}
