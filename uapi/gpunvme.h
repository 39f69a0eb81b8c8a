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

/*
 * mmap offsets. Every object a file can map has its own offset, returned by
 * the ioctl that created it; the length must be the size that ioctl returned
 * (the doorbell mapping is always one 4 KiB page). Any other offset or size
 * fails with EINVAL and a log line.
 *
 * SQ and CQ memory are coherent DMA memory (cacheable). The doorbell page is
 * a page of BAR0, mapped uncached: it also holds the doorbells of the admin
 * queue and of every other queue pair on the controller, so a descriptor is
 * as trusted as CAP_SYS_RAWIO (required to open). The module zeroes each
 * admin SQ slot once its command completes, so a stray admin doorbell write
 * only produces error completions.
 *
 * After unbind every mapping is removed (later accesses fault with SIGBUS).
 */

/* Queue depth bounds: at least 2 entries, at most info.max_queue_entries. */
#define GPUNVME_MIN_QUEUE_DEPTH 2

/*
 * GPUNVME_QPAIR_BRIDGED: the CPU bridge stands between the peer and the
 * controller. The "doorbell page" (mmap at db_offset, or exported) is then a
 * page of ordinary memory holding two shadow cells, the SQ tail at sq_db = 0
 * and the CQ head at cq_db = 64; and the CQ (cq_offset, or exported) is a
 * mirror of the real CQ, which stays inside the module. One kernel thread
 * per pair, for the pair's whole life, writes a real doorbell only when its
 * shadow changed and copies each CQE whole, phase dword last. Its counters
 * are in debugfs: gpunvme-<bdf>-q<qid>/{polls, sq_doorbell_writes,
 * cq_doorbell_writes, cqes_mirrored, max_sq_tail, bad_doorbell_values}.
 * Code that drives the queue is the same in both modes.
 */
#define GPUNVME_QPAIR_BRIDGED (1u << 0)

/**
 * struct gpunvme_qpair_create - create an I/O submission/completion queue pair.
 * @size, @version: as for every struct.
 * @depth:     in: entries in each queue, GPUNVME_MIN_QUEUE_DEPTH ..
 *             info.max_queue_entries (EINVAL otherwise).
 * @flags:     in: 0 (direct) or GPUNVME_QPAIR_BRIDGED.
 * @qid:       out: the queue ID (1-based), the same for the SQ and its CQ.
 * @sq_offset: out: mmap offset of the SQ (64-byte entries).
 * @sq_size:   out: bytes to map there (depth * 64 rounded up to 4 KiB).
 * @cq_offset: out: mmap offset of the CQ (16-byte entries; polled, no
 *             interrupts; phase tag starts at 1).
 * @cq_size:   out: bytes to map there.
 * @db_offset: out: mmap offset of the doorbell page holding this pair's
 *             doorbells (4096 bytes; the shadow page when bridged).
 * @sq_db:     out: byte offset of the SQ tail doorbell within that page.
 * @cq_db:     out: byte offset of the CQ head doorbell within that page.
 * @reserved:  in: zero.
 *
 * The queue pair belongs to the file: closing it (or process exit) deletes
 * both queues on the controller (SQ first) before their memory is freed.
 * Errors: EINVAL, ENOSPC (no I/O queue left: info.io_queues in use),
 * ENOMEM, EIO (the controller failed the command; the log has its status),
 * ETIMEDOUT (the controller did not answer the admin command in time),
 * EOPNOTSUPP (a doorbell stride of 4 KiB or more puts this queue's SQ and
 * CQ doorbells on two pages, which one doorbell page cannot export),
 * ENODEV (unbound).
 */
struct gpunvme_qpair_create {
	__u32 size;
	__u32 version;
	__u32 depth;
	__u32 flags;
	__u16 qid;
	__u16 __pad0;
	__u32 __pad1;
	__u64 sq_offset;
	__u64 sq_size;
	__u64 cq_offset;
	__u64 cq_size;
	__u64 db_offset;
	__u32 sq_db;
	__u32 cq_db;
	__u64 reserved[4];
};

/**
 * struct gpunvme_qpair_destroy - delete a queue pair this file created.
 * @qid: in: from GPUNVME_IOC_CREATE_QPAIR.
 * Errors: ENOENT (no such queue pair on this file, e.g. destroyed twice),
 * EINVAL, EIO, ETIMEDOUT (admin command deadline), ENODEV. The queue memory stays mapped (and allocated) until
 * the file is closed, so stale mappings never reach freed memory.
 */
struct gpunvme_qpair_destroy {
	__u32 size;
	__u32 version;
	__u16 qid;
	__u16 __pad0;
	__u32 __pad1;
	__u64 reserved[2];
};

/* Largest single host mapping. */
#define GPUNVME_MAX_MAP_BYTES (64ull << 20)

/**
 * struct gpunvme_map_host - pin a user buffer and map it for the controller's DMA.
 * @addr:      in: user virtual address, 4 KiB aligned.
 * @len:       in: bytes, a multiple of 4 KiB, at most GPUNVME_MAX_MAP_BYTES.
 * @dma_addrs: in: user pointer to an array of __u64 with room for
 *             len / 4096 entries; out (through it): the DMA address of each
 *             4 KiB page, ready for PRP entries.
 * @handle:    out: names the mapping for GPUNVME_IOC_UNMAP.
 * @reserved:  in: zero.
 * Errors: EINVAL (alignment, size), EFAULT (not mapped, or dma_addrs bad),
 * ENOMEM, EIO (DMA mapping failed), ENODEV.
 */
struct gpunvme_map_host {
	__u32 size;
	__u32 version;
	__u64 addr;
	__u64 len;
	__u64 dma_addrs;
	__u32 handle;
	__u32 __pad0;
	__u64 reserved[4];
};

/**
 * struct gpunvme_map_dmabuf - import a dma-buf (GPU memory) for the
 * controller's DMA, the way RDMA imports GPU memory.
 * @fd:        in: the dma-buf file descriptor (the module takes its own
 *             reference; the fd may be closed afterwards).
 * @max_pages: in: room in @dma_addrs, in 4 KiB pages: 1 ..
 *             GPUNVME_MAX_MAP_BYTES / 4096 (so at most 64 MiB per import).
 * @dma_addrs: in: user pointer to __u64[max_pages]; out (through it): the
 *             DMA address of each 4 KiB page, ready for PRP entries.
 * @len:       out: bytes mapped (the whole dma-buf).
 * @handle:    out: names the mapping for GPUNVME_IOC_UNMAP.
 * @reserved:  in: zero.
 *
 * The attachment allows peer-to-peer and is pinned. An exporter that would
 * have to move the buffer to system memory to reach the controller (no
 * peer-to-peer path) is refused with EOPNOTSUPP, never silently migrated.
 * When the exporter revokes or moves the buffer, the mapping is removed at
 * once: I/O to its addresses then fails in the IOMMU and the command
 * completes with an error status.
 * Errors: EBADF, EINVAL (size not 4 KiB multiple, more pages than
 * max_pages, max_pages out of range, unaligned segments), EOPNOTSUPP,
 * ETIMEDOUT (exporter fences), EINTR/ERESTARTSYS (a signal during that
 * wait), ENODEV.
 */
struct gpunvme_map_dmabuf {
	__u32 size;
	__u32 version;
	__s32 fd;
	__u32 handle;
	__u64 max_pages;
	__u64 dma_addrs;
	__u64 len;
	__u64 reserved[4];
};

/**
 * struct gpunvme_unmap - undo GPUNVME_IOC_MAP_HOST or GPUNVME_IOC_MAP_DMABUF.
 * @handle: in.
 * Errors: ENOENT (unknown handle, e.g. unmapped twice; also after unbind,
 * which already released every mapping), EBUSY (this file still has queue
 * pairs on the controller, which may DMA into the buffer: destroy them
 * first), EINVAL.
 */
struct gpunvme_unmap {
	__u32 size;
	__u32 version;
	__u32 handle;
	__u32 __pad0;
	__u64 reserved[2];
};

/* What GPUNVME_IOC_EXPORT exports. */
#define GPUNVME_EXPORT_DOORBELL 1	/* the 4 KiB BAR0 page holding the pair's doorbells */
#define GPUNVME_EXPORT_SQ       2	/* the SQ memory (sq_size bytes) */
#define GPUNVME_EXPORT_CQ       3	/* the CQ memory (cq_size bytes) */

/**
 * struct gpunvme_export - export part of a queue pair as a dma-buf, for a
 * GPU (or any DMA peer) to import into its own address space.
 * @qid:    in: a live queue pair of this file.
 * @kind:   in: GPUNVME_EXPORT_*.
 * @flags:  in: O_CLOEXEC and O_RDWR only (for the new fd).
 * @fd:     out: the dma-buf file descriptor.
 * @length: out: its size in bytes. For the doorbell, the queue's doorbells
 *          are at sq_db / cq_db from GPUNVME_IOC_CREATE_QPAIR.
 * @reserved: in: zero.
 *
 * The doorbell dma-buf is MMIO, exported like VFIO exports a BAR: only
 * importers that allow peer-to-peer and implement invalidate_mappings may
 * attach (EOPNOTSUPP otherwise), and mapping fails with the p2pdma error
 * (EINVAL) when the PCI topology between the importer and the controller
 * has no peer-to-peer path; the kernel log names both devices. Queue
 * memory can be imported by any revocable importer.
 *
 * Every export is revoked when its queue pair is destroyed, its file closed
 * or the controller unbound: importers get invalidate_mappings and later
 * maps fail with ENODEV. Errors: ENOENT (no such live queue pair), EINVAL,
 * ENODEV (unbound), EOPNOTSUPP (no p2pdma provider for the doorbell),
 * ENOMEM, EMFILE (no free descriptor).
 */
struct gpunvme_export {
	__u32 size;
	__u32 version;
	__u16 qid;
	__u16 kind;
	__u32 flags;
	__s32 fd;
	__u32 __pad0;
	__u64 length;
	__u64 reserved[2];
};

#define GPUNVME_IOC_CREATE_QPAIR  _IOWR(GPUNVME_IOC_MAGIC, 0x01, struct gpunvme_qpair_create)
#define GPUNVME_IOC_DESTROY_QPAIR _IOW(GPUNVME_IOC_MAGIC, 0x02, struct gpunvme_qpair_destroy)
#define GPUNVME_IOC_MAP_HOST      _IOWR(GPUNVME_IOC_MAGIC, 0x03, struct gpunvme_map_host)
#define GPUNVME_IOC_UNMAP         _IOW(GPUNVME_IOC_MAGIC, 0x04, struct gpunvme_unmap)
#define GPUNVME_IOC_EXPORT        _IOWR(GPUNVME_IOC_MAGIC, 0x05, struct gpunvme_export)
#define GPUNVME_IOC_MAP_DMABUF    _IOWR(GPUNVME_IOC_MAGIC, 0x06, struct gpunvme_map_dmabuf)

#endif /* _UAPI_GPUNVME_H */
