// SPDX-License-Identifier: GPL-2.0-only
/*
 * The Rust side mirrors uapi/gpunvme.h by hand (out-of-tree modules can't
 * extend the kernel's bindgen run). This table is what the C compiler says
 * about that header; a KUnit test in rust/uapi.rs compares it with the
 * mirror, so a header change that the mirror missed fails the tests.
 */
#include <linux/stddef.h>
#include <linux/types.h>
#include "gpunvme.h"

const size_t gpunvme_uapi_layout_info[] = {
	sizeof(struct gpunvme_info),
	offsetof(struct gpunvme_info, size),
	offsetof(struct gpunvme_info, version),
	offsetof(struct gpunvme_info, cap),
	offsetof(struct gpunvme_info, vs),
	offsetof(struct gpunvme_info, pci_vendor),
	offsetof(struct gpunvme_info, pci_device),
	offsetof(struct gpunvme_info, max_queue_entries),
	offsetof(struct gpunvme_info, doorbell_stride),
	offsetof(struct gpunvme_info, ready_timeout_ms),
	offsetof(struct gpunvme_info, bdf),
	offsetof(struct gpunvme_info, serial),
	offsetof(struct gpunvme_info, model),
	offsetof(struct gpunvme_info, firmware),
	offsetof(struct gpunvme_info, mdts_bytes),
	offsetof(struct gpunvme_info, io_queues),
	offsetof(struct gpunvme_info, num_namespaces),
	offsetof(struct gpunvme_info, page_size),
	offsetof(struct gpunvme_info, ns),
	offsetof(struct gpunvme_info, iommu_mode),
	offsetof(struct gpunvme_info, modes),
	offsetof(struct gpunvme_info, shared_max_transfer),
	offsetof(struct gpunvme_info, node_nsid),
	offsetof(struct gpunvme_info, quota_qpairs),
	offsetof(struct gpunvme_info, quota_maps),
	offsetof(struct gpunvme_info, reserved),
	sizeof(struct gpunvme_ns_info),
	offsetof(struct gpunvme_ns_info, lba_size),
	offsetof(struct gpunvme_ns_info, capacity_lbas),
};

const unsigned int gpunvme_uapi_ioc_get_info = GPUNVME_IOC_GET_INFO;
const unsigned int gpunvme_uapi_version = GPUNVME_UAPI_VERSION;

const size_t gpunvme_uapi_layout_others[] = {
	sizeof(struct gpunvme_qpair_create),
	offsetof(struct gpunvme_qpair_create, depth),
	offsetof(struct gpunvme_qpair_create, flags),
	offsetof(struct gpunvme_qpair_create, qid),
	offsetof(struct gpunvme_qpair_create, sq_offset),
	offsetof(struct gpunvme_qpair_create, sq_size),
	offsetof(struct gpunvme_qpair_create, cq_offset),
	offsetof(struct gpunvme_qpair_create, cq_size),
	offsetof(struct gpunvme_qpair_create, db_offset),
	offsetof(struct gpunvme_qpair_create, sq_db),
	offsetof(struct gpunvme_qpair_create, cq_db),
	offsetof(struct gpunvme_qpair_create, prp_offset),
	offsetof(struct gpunvme_qpair_create, prp_size),
	offsetof(struct gpunvme_qpair_create, prp_dma),
	offsetof(struct gpunvme_qpair_create, cq_handle),
	sizeof(struct gpunvme_qpair_destroy),
	offsetof(struct gpunvme_qpair_destroy, qid),
	offsetof(struct gpunvme_qpair_destroy, reserved),
	sizeof(struct gpunvme_map_host),
	offsetof(struct gpunvme_map_host, addr),
	offsetof(struct gpunvme_map_host, len),
	offsetof(struct gpunvme_map_host, dma_addrs),
	offsetof(struct gpunvme_map_host, handle),
	offsetof(struct gpunvme_map_host, reserved),
	sizeof(struct gpunvme_unmap),
	offsetof(struct gpunvme_unmap, handle),
	offsetof(struct gpunvme_unmap, reserved),
	sizeof(struct gpunvme_export),
	offsetof(struct gpunvme_export, qid),
	offsetof(struct gpunvme_export, kind),
	offsetof(struct gpunvme_export, flags),
	offsetof(struct gpunvme_export, fd),
	offsetof(struct gpunvme_export, length),
	sizeof(struct gpunvme_map_dmabuf),
	offsetof(struct gpunvme_map_dmabuf, fd),
	offsetof(struct gpunvme_map_dmabuf, handle),
	offsetof(struct gpunvme_map_dmabuf, max_pages),
	offsetof(struct gpunvme_map_dmabuf, dma_addrs),
	offsetof(struct gpunvme_map_dmabuf, len),
	sizeof(struct gpunvme_owner),
	offsetof(struct gpunvme_owner, flags),
	offsetof(struct gpunvme_owner, iommu_mode),
	offsetof(struct gpunvme_owner, reserved),
	0,
};

const unsigned int gpunvme_uapi_iocs[] = {
	GPUNVME_IOC_CREATE_QPAIR,
	GPUNVME_IOC_DESTROY_QPAIR,
	GPUNVME_IOC_MAP_HOST,
	GPUNVME_IOC_UNMAP,
	GPUNVME_IOC_EXPORT,
	GPUNVME_IOC_MAP_DMABUF,
	GPUNVME_IOC_CLAIM_OWNER,
};

const u64 gpunvme_uapi_limits[] = {
	GPUNVME_MAX_MAP_BYTES, GPUNVME_MIN_QUEUE_DEPTH, GPUNVME_QPAIR_RAW, GPUNVME_EXPORT_PRP_POOL,
	GPUNVME_IOMMU_NONE, GPUNVME_IOMMU_IDENTITY, GPUNVME_IOMMU_STRICT, GPUNVME_IOMMU_LAZY,
	GPUNVME_IOMMU_OTHER, GPUNVME_MODE_SHARED, GPUNVME_MODE_OWNER, GPUNVME_QPAIR_CQ_IN_MAP,
};
