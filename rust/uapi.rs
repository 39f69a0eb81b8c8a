// SPDX-License-Identifier: GPL-2.0-only

//! Rust mirror of `uapi/gpunvme.h` and the checks every ioctl argument gets.
//!
//! The header is the source of truth; `rust/uapi/uapi_layout.c` publishes the C
//! compiler's view of it and the KUnit test below compares the two.

pub(crate) mod chardev;
pub(crate) mod file;
pub(crate) mod owner;
pub(crate) mod quota;

use kernel::{
    ioctl::{_IOW, _IOWR},
    prelude::*,
    transmute::{AsBytes, FromBytes},
};

pub(crate) const UAPI_VERSION: u32 = 2;
pub(crate) const IOC_MAGIC: u32 = 0xB7;
pub(crate) const BDF_LEN: usize = 16;
pub(crate) const MAX_NS: usize = 16;

/// `struct gpunvme_ns_info`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct NsInfo {
    pub(crate) nsid: u32,
    pub(crate) lba_size: u32,
    pub(crate) capacity_lbas: u64,
}

/// `struct gpunvme_info`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Info {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) cap: u64,
    pub(crate) vs: u32,
    pub(crate) pci_vendor: u16,
    pub(crate) pci_device: u16,
    pub(crate) max_queue_entries: u32,
    pub(crate) doorbell_stride: u32,
    pub(crate) ready_timeout_ms: u32,
    pub(crate) pad0: u32,
    pub(crate) bdf: [u8; BDF_LEN],
    pub(crate) serial: [u8; 24],
    pub(crate) model: [u8; 48],
    pub(crate) firmware: [u8; 16],
    pub(crate) mdts_bytes: u32,
    pub(crate) io_queues: u32,
    pub(crate) num_namespaces: u32,
    pub(crate) page_size: u32,
    pub(crate) ns: [NsInfo; MAX_NS],
    pub(crate) iommu_mode: u32,
    pub(crate) modes: u32,
    pub(crate) shared_max_transfer: u32,
    pub(crate) node_nsid: u32,
    pub(crate) quota_qpairs: u32,
    pub(crate) quota_maps: u32,
    pub(crate) reserved: [u64; 5],
}

impl Default for Info {
    fn default() -> Self {
        // SAFETY: all-zero bytes are a valid `Info` (integers only).
        unsafe { core::mem::zeroed() }
    }
}

// SAFETY: `Info` and `NsInfo` are `repr(C)` integers and integer arrays
// only, every padding byte spelled out as a field: any bit pattern is valid.
unsafe impl FromBytes for Info {}
// SAFETY: as above, no implicit padding, so all bytes are initialized.
unsafe impl AsBytes for Info {}
// SAFETY: see `Info`.
unsafe impl FromBytes for NsInfo {}
// SAFETY: see `Info`.
unsafe impl AsBytes for NsInfo {}

/// `struct gpunvme_qpair_create`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct QpairCreate {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) depth: u32,
    pub(crate) flags: u32,
    pub(crate) qid: u16,
    pub(crate) pad0: u16,
    pub(crate) pad1: u32,
    pub(crate) sq_offset: u64,
    pub(crate) sq_size: u64,
    pub(crate) cq_offset: u64,
    pub(crate) cq_size: u64,
    pub(crate) db_offset: u64,
    pub(crate) sq_db: u32,
    pub(crate) cq_db: u32,
    pub(crate) prp_offset: u64,
    pub(crate) prp_size: u64,
    pub(crate) prp_dma: u64,
    pub(crate) cq_handle: u32,
    pub(crate) pad2: u32,
    /// None left (`cq_handle` took the last word): `read_arg!` checks an
    /// empty list.
    pub(crate) reserved: [u64; 0],
}

/// `struct gpunvme_qpair_destroy`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct QpairDestroy {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) qid: u16,
    pub(crate) pad0: u16,
    pub(crate) pad1: u32,
    pub(crate) reserved: [u64; 2],
}

/// `struct gpunvme_map_host`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MapHost {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) dma_addrs: u64,
    pub(crate) handle: u32,
    pub(crate) pad0: u32,
    pub(crate) reserved: [u64; 4],
}

/// `struct gpunvme_unmap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Unmap {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) handle: u32,
    pub(crate) pad0: u32,
    pub(crate) reserved: [u64; 2],
}

/// `struct gpunvme_export`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Export {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) qid: u16,
    pub(crate) kind: u16,
    pub(crate) flags: u32,
    pub(crate) fd: i32,
    pub(crate) pad0: u32,
    pub(crate) length: u64,
    pub(crate) reserved: [u64; 2],
}

/// `struct gpunvme_map_dmabuf`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct MapDmabuf {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) fd: i32,
    pub(crate) handle: u32,
    pub(crate) max_pages: u64,
    pub(crate) dma_addrs: u64,
    pub(crate) len: u64,
    pub(crate) reserved: [u64; 4],
}

pub(crate) const EXPORT_DOORBELL: u16 = 1;
pub(crate) const EXPORT_SQ: u16 = 2;
pub(crate) const EXPORT_CQ: u16 = 3;
pub(crate) const EXPORT_PRP_POOL: u16 = 4;

/// `struct gpunvme_owner`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub(crate) struct Owner {
    pub(crate) size: u32,
    pub(crate) version: u32,
    pub(crate) flags: u32,
    pub(crate) iommu_mode: u32,
    pub(crate) reserved: [u64; 2],
}

pub(crate) const IOMMU_NONE: u32 = 0;
pub(crate) const IOMMU_IDENTITY: u32 = 1;
pub(crate) const IOMMU_STRICT: u32 = 2;
pub(crate) const IOMMU_LAZY: u32 = 3;
pub(crate) const IOMMU_OTHER: u32 = 4;
pub(crate) const MODE_SHARED: u32 = 1 << 0;
pub(crate) const MODE_OWNER: u32 = 1 << 1;

macro_rules! plain_uapi_struct {
    ($($t:ty),*) => {$(
        // SAFETY: `repr(C)` integers and integer arrays only, every padding
        // byte spelled out as a field: any bit pattern is valid.
        unsafe impl FromBytes for $t {}
        // SAFETY: as above, no implicit padding, so all bytes are initialized.
        unsafe impl AsBytes for $t {}
    )*};
}
plain_uapi_struct!(
    QpairCreate,
    QpairDestroy,
    MapHost,
    Unmap,
    Export,
    MapDmabuf,
    Owner
);

pub(crate) const MAX_MAP_BYTES: u64 = 64 << 20;
/// UAPI version 1's bridged flag: refused with a log line since version 2.
pub(crate) const QPAIR_V1_BRIDGED: u32 = 1 << 0;
pub(crate) const QPAIR_RAW: u32 = 1 << 1;
pub(crate) const QPAIR_CQ_IN_MAP: u32 = 1 << 2;
pub(crate) const MIN_QUEUE_DEPTH: u32 = 2;

pub(crate) const IOC_GET_INFO: u32 = _IOWR::<Info>(IOC_MAGIC, 0x00);
pub(crate) const IOC_CREATE_QPAIR: u32 = _IOWR::<QpairCreate>(IOC_MAGIC, 0x01);
pub(crate) const IOC_DESTROY_QPAIR: u32 = _IOW::<QpairDestroy>(IOC_MAGIC, 0x02);
pub(crate) const IOC_MAP_HOST: u32 = _IOWR::<MapHost>(IOC_MAGIC, 0x03);
pub(crate) const IOC_UNMAP: u32 = _IOW::<Unmap>(IOC_MAGIC, 0x04);
pub(crate) const IOC_EXPORT: u32 = _IOWR::<Export>(IOC_MAGIC, 0x05);
pub(crate) const IOC_MAP_DMABUF: u32 = _IOWR::<MapDmabuf>(IOC_MAGIC, 0x06);
pub(crate) const IOC_CLAIM_OWNER: u32 = _IOWR::<Owner>(IOC_MAGIC, 0x07);

/// Why an ioctl argument header was refused; the caller logs it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Size { got: u32, want: u32 },
    Version { got: u32, want: u32 },
    ReservedNonZero,
}

/// Every UAPI struct starts with `size` and `version` and ends in reserved
/// words that must be zero on input.
pub(crate) fn check_header(
    size: u32,
    version: u32,
    want_size: usize,
    reserved: &[u64],
) -> Result<(), HeaderError> {
    let want = want_size as u32;
    if size != want {
        return Err(HeaderError::Size { got: size, want });
    }
    if version != UAPI_VERSION {
        return Err(HeaderError::Version {
            got: version,
            want: UAPI_VERSION,
        });
    }
    if reserved.iter().any(|&r| r != 0) {
        return Err(HeaderError::ReservedNonZero);
    }
    Ok(())
}

#[kernel::prelude::kunit_tests(gpunvme_uapi)]
mod tests {
    use super::*;
    use core::mem::{offset_of, size_of};

    extern "C" {
        static gpunvme_uapi_layout_info: [usize; 29];
        static gpunvme_uapi_ioc_get_info: u32;
        static gpunvme_uapi_version: u32;
        static gpunvme_uapi_layout_others: [usize; 44];
        static gpunvme_uapi_iocs: [u32; 7];
        static gpunvme_uapi_limits: [u64; 12];
    }

    #[test]
    fn queue_and_map_layouts_match_header() {
        let mirror = [
            size_of::<QpairCreate>(),
            offset_of!(QpairCreate, depth),
            offset_of!(QpairCreate, flags),
            offset_of!(QpairCreate, qid),
            offset_of!(QpairCreate, sq_offset),
            offset_of!(QpairCreate, sq_size),
            offset_of!(QpairCreate, cq_offset),
            offset_of!(QpairCreate, cq_size),
            offset_of!(QpairCreate, db_offset),
            offset_of!(QpairCreate, sq_db),
            offset_of!(QpairCreate, cq_db),
            offset_of!(QpairCreate, prp_offset),
            offset_of!(QpairCreate, prp_size),
            offset_of!(QpairCreate, prp_dma),
            offset_of!(QpairCreate, cq_handle),
            size_of::<QpairDestroy>(),
            offset_of!(QpairDestroy, qid),
            offset_of!(QpairDestroy, reserved),
            size_of::<MapHost>(),
            offset_of!(MapHost, addr),
            offset_of!(MapHost, len),
            offset_of!(MapHost, dma_addrs),
            offset_of!(MapHost, handle),
            offset_of!(MapHost, reserved),
            size_of::<Unmap>(),
            offset_of!(Unmap, handle),
            offset_of!(Unmap, reserved),
            size_of::<Export>(),
            offset_of!(Export, qid),
            offset_of!(Export, kind),
            offset_of!(Export, flags),
            offset_of!(Export, fd),
            offset_of!(Export, length),
            size_of::<MapDmabuf>(),
            offset_of!(MapDmabuf, fd),
            offset_of!(MapDmabuf, handle),
            offset_of!(MapDmabuf, max_pages),
            offset_of!(MapDmabuf, dma_addrs),
            offset_of!(MapDmabuf, len),
            size_of::<Owner>(),
            offset_of!(Owner, flags),
            offset_of!(Owner, iommu_mode),
            offset_of!(Owner, reserved),
            0,
        ];
        // SAFETY: the C object defines these read-only tables at link time.
        let (layout, iocs, limits) = unsafe {
            (
                gpunvme_uapi_layout_others,
                gpunvme_uapi_iocs,
                gpunvme_uapi_limits,
            )
        };
        assert_eq!(mirror, layout);
        assert_eq!(
            [
                IOC_CREATE_QPAIR,
                IOC_DESTROY_QPAIR,
                IOC_MAP_HOST,
                IOC_UNMAP,
                IOC_EXPORT,
                IOC_MAP_DMABUF,
                IOC_CLAIM_OWNER
            ],
            iocs
        );
        let consts = [
            MAX_MAP_BYTES,
            u64::from(MIN_QUEUE_DEPTH),
            u64::from(QPAIR_RAW),
            u64::from(EXPORT_PRP_POOL),
            u64::from(IOMMU_NONE),
            u64::from(IOMMU_IDENTITY),
            u64::from(IOMMU_STRICT),
            u64::from(IOMMU_LAZY),
            u64::from(IOMMU_OTHER),
            u64::from(MODE_SHARED),
            u64::from(MODE_OWNER),
            u64::from(QPAIR_CQ_IN_MAP),
        ];
        assert_eq!(consts, limits);
    }

    #[test]
    fn info_layout_matches_header() {
        let mirror = [
            size_of::<Info>(),
            offset_of!(Info, size),
            offset_of!(Info, version),
            offset_of!(Info, cap),
            offset_of!(Info, vs),
            offset_of!(Info, pci_vendor),
            offset_of!(Info, pci_device),
            offset_of!(Info, max_queue_entries),
            offset_of!(Info, doorbell_stride),
            offset_of!(Info, ready_timeout_ms),
            offset_of!(Info, bdf),
            offset_of!(Info, serial),
            offset_of!(Info, model),
            offset_of!(Info, firmware),
            offset_of!(Info, mdts_bytes),
            offset_of!(Info, io_queues),
            offset_of!(Info, num_namespaces),
            offset_of!(Info, page_size),
            offset_of!(Info, ns),
            offset_of!(Info, iommu_mode),
            offset_of!(Info, modes),
            offset_of!(Info, shared_max_transfer),
            offset_of!(Info, node_nsid),
            offset_of!(Info, quota_qpairs),
            offset_of!(Info, quota_maps),
            offset_of!(Info, reserved),
            size_of::<NsInfo>(),
            offset_of!(NsInfo, lba_size),
            offset_of!(NsInfo, capacity_lbas),
        ];
        // SAFETY: the C object defines these read-only tables at link time.
        let (c_layout, c_ioc, c_version) = unsafe {
            (
                gpunvme_uapi_layout_info,
                gpunvme_uapi_ioc_get_info,
                gpunvme_uapi_version,
            )
        };
        assert_eq!(mirror, c_layout);
        assert_eq!(IOC_GET_INFO, c_ioc);
        assert_eq!(UAPI_VERSION, c_version);
    }

    #[test]
    fn header_checks() {
        let n = size_of::<Info>();
        assert_eq!(check_header(n as u32, 2, n, &[0; 6]), Ok(()));
        assert_eq!(
            check_header(8, 2, n, &[0; 6]),
            Err(HeaderError::Size {
                got: 8,
                want: n as u32
            })
        );
        assert_eq!(
            check_header(n as u32, 1, n, &[0; 6]),
            Err(HeaderError::Version { got: 1, want: 2 })
        );
        assert_eq!(
            check_header(n as u32, 2, n, &[0, 0, 1]),
            Err(HeaderError::ReservedNonZero)
        );
    }
}
