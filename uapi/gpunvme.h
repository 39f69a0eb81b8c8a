/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * gpunvme: ioctl ABI between the gpunvme kernel module and userspace.
 *
 * This header is the single source of truth: the module mirrors it in
 * rust/uapi.rs (checked by size/offset asserts there) and userspace gets it
 * through bindgen in userspace/gpunvme-sys (checked by a layout test).
 *
 * Rules for every struct here:
 *  - fixed size, explicit padding, 64-bit fields for addresses and counts;
 *  - the first two fields are `size` (sizeof the struct as the caller knows
 *    it) and `version` (GPUNVME_UAPI_VERSION); a mismatch fails with EINVAL
 *    and a line in the kernel log naming both values;
 *  - reserved fields must be zero on input (EINVAL otherwise) so they can
 *    gain meaning later.
 *
 * Device nodes: one per controller bound to gpunvme, /dev/gpunvme<N>, where
 * N is assigned in bind order. Opening needs CAP_SYS_RAWIO (EPERM otherwise):
 * whoever holds the descriptor can make the controller DMA.
 */
#ifndef _UAPI_GPUNVME_H
#define _UAPI_GPUNVME_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUNVME_UAPI_VERSION 1

/* ioctl type byte; not in Documentation/userspace-api/ioctl/ioctl-number.rst */
#define GPUNVME_IOC_MAGIC 0xB7

/* Length of the PCI address string, e.g. "0000:00:04.0" plus NUL, padded. */
#define GPUNVME_BDF_LEN 16
/* Namespaces reported by GET_INFO (active namespaces beyond it are not used). */
#define GPUNVME_MAX_NS 16

/**
 * struct gpunvme_ns_info - one active namespace.
 * @nsid:          namespace ID (1-based).
 * @lba_size:      bytes per logical block in the current format.
 * @capacity_lbas: namespace size (NSZE) in logical blocks.
 */
struct gpunvme_ns_info {
	__u32 nsid;
	__u32 lba_size;
	__u64 capacity_lbas;
};

/**
 * struct gpunvme_info - identity and capabilities of the controller.
 * @size:        in: sizeof(struct gpunvme_info).
 * @version:     in: GPUNVME_UAPI_VERSION.
 * @cap:         out: the controller's CAP register (offset 0x0), raw.
 * @vs:          out: the VS register (offset 0x8), raw: major in bits 31:16,
 *               minor in 15:8, tertiary in 7:0.
 * @pci_vendor:  out: PCI vendor ID of the controller.
 * @pci_device:  out: PCI device ID.
 * @max_queue_entries: out: CAP.MQES + 1, the largest queue depth allowed.
 * @doorbell_stride: out: bytes between doorbells, 4 << CAP.DSTRD.
 * @ready_timeout_ms: out: CAP.TO in milliseconds (units of 500 ms).
 * @bdf:         out: PCI address of the controller, NUL-terminated.
 * @serial:      out: Identify Controller SN, trailing spaces removed, NUL-terminated.
 * @model:       out: Identify Controller MN, likewise.
 * @firmware:    out: Identify Controller FR, likewise.
 * @mdts_bytes:  out: largest transfer of one command in bytes (MDTS applied
 *               to the 4 KiB memory page size); 0 means no limit.
 * @io_queues:   out: I/O queue pairs the controller granted (Set Features,
 *               Number of Queues); CREATE_QPAIR fails with ENOSPC beyond it.
 * @num_namespaces: out: valid entries in @ns.
 * @page_size:   out: controller memory page size in use (CC.MPS), 4096.
 * @ns:          out: the active namespaces, lowest NSID first.
 * @reserved:    in: zero; out: zero.
 */
struct gpunvme_info {
	__u32 size;
	__u32 version;
	__u64 cap;
	__u32 vs;
	__u16 pci_vendor;
	__u16 pci_device;
	__u32 max_queue_entries;
	__u32 doorbell_stride;
	__u32 ready_timeout_ms;
	__u32 __pad0;
	char bdf[GPUNVME_BDF_LEN];
	char serial[24];
	char model[48];
	char firmware[16];
	__u32 mdts_bytes;
	__u32 io_queues;
	__u32 num_namespaces;
	__u32 page_size;
	struct gpunvme_ns_info ns[GPUNVME_MAX_NS];
	__u64 reserved[8];
};

/* Fill struct gpunvme_info. Errors: EINVAL (size/version/reserved), EFAULT,
 * ENODEV (the controller was unbound since open). */
#define GPUNVME_IOC_GET_INFO _IOWR(GPUNVME_IOC_MAGIC, 0x00, struct gpunvme_info)

#endif /* _UAPI_GPUNVME_H */
