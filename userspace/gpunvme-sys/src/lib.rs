// SPDX-License-Identifier: MIT OR GPL-2.0-only
//! Raw bindings to the gpunvme ioctl ABI.
//!
//! Everything here is generated from `uapi/gpunvme.h`, the single source
//! of truth, ahead of time (committed in `src/generated/`, so a build needs
//! no libclang): structs and `GPUNVME_*` constants by bindgen, ioctl
//! request numbers by the build script from the header's
//! `#define GPUNVME_IOC_* _IO*()` lines, encoded by [`ioc`] (bindgen cannot
//! expand `_IOWR`). `tests/layout.rs` checks both against a C compiler;
//! `tests/generated.rs` (feature `regenerate`, run by `make check`) checks
//! that regenerating gives the committed files.
//!
//! Use the `gpunvme` crate for a safe API.

#![allow(non_camel_case_types, non_upper_case_globals, non_snake_case)]
#![allow(clippy::all)]

mod bindings {
    #![allow(
        non_camel_case_types,
        non_upper_case_globals,
        non_snake_case,
        dead_code
    )]
    #![allow(clippy::all, rustdoc::all)]
    include!("generated/bindings.rs");
}
pub use bindings::*;

/// The type of an ioctl request number (`unsigned long` in the kernel).
pub type IoctlRequest = core::ffi::c_ulong;

/// One ioctl defined by the UAPI header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoctlDef {
    /// The macro's name, e.g. `GPUNVME_IOC_GET_INFO`.
    pub name: &'static str,
    /// The encoded request number.
    pub request: IoctlRequest,
    /// The argument's C type (without `struct`), if any.
    pub arg_type: Option<&'static str>,
}

pub mod ioc {
    //! Linux `_IOC()` request encoding (`include/uapi/asm-generic/ioctl.h`
    //! and the architectures that override it).

    use crate::IoctlRequest;

    /// Bits of the command number.
    pub const NRBITS: u32 = 8;
    /// Bits of the type ("magic") byte.
    pub const TYPEBITS: u32 = 8;

    #[cfg(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    ))]
    mod arch {
        pub const SIZEBITS: u32 = 13;
        pub const DIRBITS: u32 = 3;
        pub const NONE: u32 = 1;
        pub const READ: u32 = 2;
        pub const WRITE: u32 = 4;
    }
    #[cfg(not(any(
        target_arch = "powerpc",
        target_arch = "powerpc64",
        target_arch = "mips",
        target_arch = "mips64",
        target_arch = "sparc",
        target_arch = "sparc64"
    )))]
    mod arch {
        pub const SIZEBITS: u32 = 14;
        pub const DIRBITS: u32 = 2;
        pub const NONE: u32 = 0;
        pub const READ: u32 = 2;
        pub const WRITE: u32 = 1;
    }
    pub use arch::{DIRBITS, NONE, READ, SIZEBITS, WRITE};

    /// Shift of the command number.
    pub const NRSHIFT: u32 = 0;
    /// Shift of the type byte.
    pub const TYPESHIFT: u32 = NRSHIFT + NRBITS;
    /// Shift of the argument size.
    pub const SIZESHIFT: u32 = TYPESHIFT + TYPEBITS;
    /// Shift of the direction bits.
    pub const DIRSHIFT: u32 = SIZESHIFT + SIZEBITS;

    /// `_IOC(dir, type, nr, size)`. Fails to compile (const panic) when a
    /// field does not fit, as the C macro would silently truncate.
    pub const fn ioc(dir: u32, ty: u32, nr: u32, size: usize) -> IoctlRequest {
        assert!(dir < (1 << DIRBITS), "ioctl direction out of range");
        assert!(ty < (1 << TYPEBITS), "ioctl type byte out of range");
        assert!(nr < (1 << NRBITS), "ioctl number out of range");
        assert!(
            size < (1 << SIZEBITS),
            "ioctl argument too large for _IOC_SIZEBITS"
        );
        ((dir << DIRSHIFT) | (ty << TYPESHIFT) | (nr << NRSHIFT) | ((size as u32) << SIZESHIFT))
            as IoctlRequest
    }

    /// `_IOC_DIR(req)`.
    pub const fn dir(req: IoctlRequest) -> u32 {
        ((req as u32) >> DIRSHIFT) & ((1 << DIRBITS) - 1)
    }
    /// `_IOC_TYPE(req)`.
    pub const fn ty(req: IoctlRequest) -> u32 {
        ((req as u32) >> TYPESHIFT) & ((1 << TYPEBITS) - 1)
    }
    /// `_IOC_NR(req)`.
    pub const fn nr(req: IoctlRequest) -> u32 {
        ((req as u32) >> NRSHIFT) & ((1 << NRBITS) - 1)
    }
    /// `_IOC_SIZE(req)`.
    pub const fn size(req: IoctlRequest) -> usize {
        (((req as u32) >> SIZESHIFT) & ((1 << SIZEBITS) - 1)) as usize
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn roundtrip() {
            let r = ioc(READ | WRITE, 0xB7, 0x2a, 136);
            assert_eq!(dir(r), READ | WRITE);
            assert_eq!(ty(r), 0xB7);
            assert_eq!(nr(r), 0x2a);
            assert_eq!(size(r), 136);
        }

        #[cfg(target_arch = "x86_64")]
        #[test]
        fn known_kernel_values() {
            // From the kernel headers: BLKGETSIZE64 = _IOR(0x12, 114, size_t),
            // FIONREAD-style _IO: NVME_IOCTL_ID = _IO('N', 0x40).
            assert_eq!(ioc(READ, 0x12, 114, 8), 0x8008_1272);
            assert_eq!(ioc(NONE, b'N' as u32, 0x40, 0), 0x4e40);
        }
    }
}

mod ioctls {
    include!("generated/ioctls.rs");
}
pub use ioctls::*;

pub mod layout {
    //! Layout facts of the bindings, for the layout test (see
    //! `tests/layout.rs`), which compares them with what a C compiler says.
    include!("generated/layout.rs");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_info_is_iowr_on_the_magic() {
        assert_eq!(ioc::ty(GPUNVME_IOC_GET_INFO), GPUNVME_IOC_MAGIC);
        assert_eq!(ioc::nr(GPUNVME_IOC_GET_INFO), 0);
        assert_eq!(ioc::dir(GPUNVME_IOC_GET_INFO), ioc::READ | ioc::WRITE);
        assert_eq!(
            ioc::size(GPUNVME_IOC_GET_INFO),
            core::mem::size_of::<gpunvme_info>()
        );
    }

    #[test]
    fn every_header_ioctl_is_listed() {
        assert!(IOCTLS.iter().any(|d| d.name == "GPUNVME_IOC_GET_INFO"
            && d.request == GPUNVME_IOC_GET_INFO
            && d.arg_type == Some("gpunvme_info")));
        for d in IOCTLS {
            assert_eq!(ioc::ty(d.request), GPUNVME_IOC_MAGIC, "{}", d.name);
        }
    }
}
