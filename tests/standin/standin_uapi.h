/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
/*
 * gpunvme_standin: test-only "GPU stand-in". The module binds QEMU's edu
 * device (PCI 1234:11e8, through driver_override "gpunvme_standin") and uses
 * edu's DMA engine as a peer device: it imports dma-bufs exactly like a GPU
 * driver would (dynamic attach, allow_peer2peer, revocable) and makes edu
 * DMA to/from the addresses its own (IOMMU-translated) mapping returned.
 *
 * Device node: /dev/gpunvme_standin (one edu device at a time). Imports
 * belong to the file: close releases them; unbind releases every import and
 * later calls fail with ENODEV. Each edu transfer is bounded (2 s deadline,
 * ETIMEDOUT); edu moves data through its 4 KiB internal buffer, so every
 * WRITE32 / READ is two transfers (~100 ms of virtual time each).
 */
#ifndef _UAPI_GPUNVME_STANDIN_H
#define _UAPI_GPUNVME_STANDIN_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define STANDIN_IOC_MAGIC 0xB8
/* Largest READ: edu's internal buffer. */
#define STANDIN_MAX_READ 4096

/**
 * struct standin_import - import a dma-buf for the edu device.
 * @fd:       in: dma-buf file descriptor.
 * @handle:   out: names the import in later calls.
 * @dma_addr: out: edu's DMA address of the first byte (first sg entry).
 * @len:      out: bytes covered by that first sg entry; WRITE32/READ must
 *            stay inside [0, len).
 * @nents:    out: DMA-mapped sg entries (informational).
 * Errors: whatever dma_buf_get / dma_buf_dynamic_attach /
 * dma_buf_map_attachment returned, verbatim (e.g. EOPNOTSUPP or EINVAL from
 * an exporter refusing this P2P topology), each logged.
 */
struct standin_import {
	__s32 fd;
	__u32 handle;
	__u64 dma_addr;
	__u64 len;
	__u32 nents;
	__u32 __pad;
};

/* WRITE32: edu DMAs the 4-byte @value to dma_addr + @offset.
 * Errors: ENOENT (handle), EINVAL (offset not 4-aligned or past len),
 * ENODEV (the exporter revoked the import, or edu unbound), ETIMEDOUT. */
struct standin_write32 {
	__u32 handle;
	__u32 value;
	__u64 offset;
};

/* READ: edu DMAs @len (1..STANDIN_MAX_READ) bytes from dma_addr + @offset
 * into its buffer; they are copied to user address @buf. Errors as WRITE32,
 * plus EFAULT. */
struct standin_read {
	__u32 handle;
	__u32 len;
	__u64 offset;
	__u64 buf;
};

/* RAW_WRITE32: edu DMAs @value to an arbitrary bus address @dma_addr that
 * no import produced (negative tests: the IOMMU must block it). */
struct standin_raw_write32 {
	__u64 dma_addr;
	__u32 value;
	__u32 __pad;
};

/* RELEASE: unmap, detach, dma_buf_put. Errors: ENOENT. */
struct standin_release {
	__u32 handle;
	__u32 __pad;
};

#define STANDIN_IOC_IMPORT      _IOWR(STANDIN_IOC_MAGIC, 0x00, struct standin_import)
#define STANDIN_IOC_WRITE32     _IOW(STANDIN_IOC_MAGIC, 0x01, struct standin_write32)
#define STANDIN_IOC_READ        _IOW(STANDIN_IOC_MAGIC, 0x02, struct standin_read)
#define STANDIN_IOC_RAW_WRITE32 _IOW(STANDIN_IOC_MAGIC, 0x03, struct standin_raw_write32)
#define STANDIN_IOC_RELEASE     _IOW(STANDIN_IOC_MAGIC, 0x04, struct standin_release)
/* EXPORT_NO_P2P: returns a new dma-buf fd (one page of system memory) whose
 * exporter clears peer2peer on attach, as a GPU driver does when it has no
 * peer-to-peer path and would migrate VRAM to system memory. */
#define STANDIN_IOC_EXPORT_NO_P2P _IO(STANDIN_IOC_MAGIC, 0x05)

/*
 * KMEMLEAK_CONTROL: a deliberate leak, the positive control of the kmemleak
 * checks (tests/selftests/gpunvme_hotplug_test.c). Each call allocates one
 * object of STANDIN_KMEMLEAK_CONTROL_SIZE bytes with KVec (krealloc, as
 * gpunvme allocates) in the Rust function `kmemleak_control`, writes
 * STANDIN_KMEMLEAK_CONTROL_MAGIC (32 bytes, what kmemleak's hex dump shows)
 * and @tag after it, and forgets it: nothing ever frees it. The size is
 * above a page so that KFENCE never samples it (a KFENCE object can stay
 * referenced from KFENCE's own metadata). @flags must be 0.
 */
struct standin_kmemleak_control {
	__u32 tag;
	__u32 flags;
};
#define STANDIN_KMEMLEAK_CONTROL_SIZE 5000
#define STANDIN_KMEMLEAK_CONTROL_MAGIC "gpunvme_standin kmemleak control"
#define STANDIN_IOC_KMEMLEAK_CONTROL _IOW(STANDIN_IOC_MAGIC, 0x06, struct standin_kmemleak_control)

#endif
