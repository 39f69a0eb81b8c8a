// SPDX-License-Identifier: MIT OR GPL-2.0-only
/// `GPUNVME_IOC_GET_INFO` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_GET_INFO: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x00, ::core::mem::size_of::<crate::gpunvme_info>());
/// `GPUNVME_IOC_CREATE_QPAIR` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_CREATE_QPAIR: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x01, ::core::mem::size_of::<crate::gpunvme_qpair_create>());
/// `GPUNVME_IOC_DESTROY_QPAIR` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_DESTROY_QPAIR: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x02, ::core::mem::size_of::<crate::gpunvme_qpair_destroy>());
/// `GPUNVME_IOC_MAP_HOST` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_MAP_HOST: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x03, ::core::mem::size_of::<crate::gpunvme_map_host>());
/// `GPUNVME_IOC_UNMAP` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_UNMAP: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x04, ::core::mem::size_of::<crate::gpunvme_unmap>());
/// `GPUNVME_IOC_EXPORT` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_EXPORT: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x05, ::core::mem::size_of::<crate::gpunvme_export>());
/// `GPUNVME_IOC_MAP_DMABUF` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_MAP_DMABUF: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x06, ::core::mem::size_of::<crate::gpunvme_map_dmabuf>());
/// `GPUNVME_IOC_CLAIM_OWNER` from the UAPI header, encoded by [`crate::ioc::ioc`].
pub const GPUNVME_IOC_CLAIM_OWNER: crate::IoctlRequest = crate::ioc::ioc(crate::ioc::READ | crate::ioc::WRITE, crate::GPUNVME_IOC_MAGIC as u32, 0x07, ::core::mem::size_of::<crate::gpunvme_owner>());
/// Every ioctl request defined in the UAPI header.
pub const IOCTLS: &[crate::IoctlDef] = &[
    crate::IoctlDef { name: "GPUNVME_IOC_GET_INFO", request: GPUNVME_IOC_GET_INFO, arg_type: Some("gpunvme_info") },
    crate::IoctlDef { name: "GPUNVME_IOC_CREATE_QPAIR", request: GPUNVME_IOC_CREATE_QPAIR, arg_type: Some("gpunvme_qpair_create") },
    crate::IoctlDef { name: "GPUNVME_IOC_DESTROY_QPAIR", request: GPUNVME_IOC_DESTROY_QPAIR, arg_type: Some("gpunvme_qpair_destroy") },
    crate::IoctlDef { name: "GPUNVME_IOC_MAP_HOST", request: GPUNVME_IOC_MAP_HOST, arg_type: Some("gpunvme_map_host") },
    crate::IoctlDef { name: "GPUNVME_IOC_UNMAP", request: GPUNVME_IOC_UNMAP, arg_type: Some("gpunvme_unmap") },
    crate::IoctlDef { name: "GPUNVME_IOC_EXPORT", request: GPUNVME_IOC_EXPORT, arg_type: Some("gpunvme_export") },
    crate::IoctlDef { name: "GPUNVME_IOC_MAP_DMABUF", request: GPUNVME_IOC_MAP_DMABUF, arg_type: Some("gpunvme_map_dmabuf") },
    crate::IoctlDef { name: "GPUNVME_IOC_CLAIM_OWNER", request: GPUNVME_IOC_CLAIM_OWNER, arg_type: Some("gpunvme_owner") },
];
