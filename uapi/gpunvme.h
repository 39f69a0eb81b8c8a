/* SPDX-License-Identifier: GPL-2.0-only WITH Linux-syscall-note */
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
 * When the controller fails or goes away (unbind, device removal, a
 * reboot or kexec, system suspend, a PCI error reported by AER, CSTS.CFS,
 * or CSTS reading all-ones, which the module checks every 100 ms), every
 * file open at that moment is cut off for good: every ioctl fails (EIO for
 * a controller fatal status or a PCI error, ENODEV otherwise; even after
 * the controller comes back), every mapping is removed (later accesses
 * fault with SIGBUS), its exports are revoked, and poll()/epoll on the
 * descriptor reports EPOLLERR | EPOLLHUP (before that poll() reports
 * nothing and blocks). Close it. After a fatal status the module disables
 * and re-initialises the controller, so a new open works; after all-ones
 * (surprise removal) new opens fail with ENODEV until the controller is
 * bound again; after suspend (ENODEV meanwhile), on resume; after an AER
 * error (EIO meanwhile), once recovery resets the slot. Unbind, reboot and suspend first delete the I/O queues and do
 * a normal shutdown (CC.SHN) with a 5 s deadline. A lost admin completion
 * (ETIMEDOUT) is not such a failure: see GPUNVME_IOC_CREATE_QPAIR.
 *
 * Device nodes: one per controller bound to gpunvme, /dev/gpunvme<N>, where
 * N is assigned in bind order, and one per active namespace (NSID 1..4),
 * /dev/gpunvme<N>n<NSID>. Opening needs no capability: the node's file mode
 * (0600 root by default; a udev rule can give a group access) decides who
 * may use the controller in shared mode. Two modes, never mixed on one
 * controller:
 *
 *  - Shared mode (the default, any number of files): a queue pair's SQ, CQ
 *    and doorbells that a file sees are shadows in memory the module owns.
 *    A module thread takes each new SQE from the shadow SQ, checks it
 *    (opcode Read/Write/Flush/Write Zeroes, an active namespace (only the
 *    node's own on a namespace node), LBA range inside it, no SGL, no
 *    metadata pointer, PRP1/PRP2 and every PRP-list entry inside a buffer
 *    this same file mapped, PRP lists read from the pair's PRP pool and
 *    copied into kernel memory first) and only then copies it into the real
 *    SQ under a command ID the module picks. The completion is mirrored
 *    back with the file's own command ID. A rejected SQE never reaches the
 *    controller: it completes in the shadow CQ with Invalid Command Opcode
 *    (SC 0x01), Invalid Field in Command (0x02), Invalid Namespace or
 *    Format (0x0b) or LBA Out of Range (0x80), DNR set, and is counted in
 *    debugfs (sqes_rejected). The real doorbell page, SQ and CQ never leave
 *    the kernel.
 *
 *  - Owner mode (raw access, GPUNVME_IOC_CLAIM_OWNER): one file per
 *    controller. Only the owner may create GPUNVME_QPAIR_RAW pairs, whose
 *    real SQ, CQ and doorbell page it maps or exports. That is
 *    controller-wide authority, like a VFIO device fd: the doorbell page
 *    holds the admin doorbells and every queue's doorbells, and an SQE's
 *    PRPs are raw device addresses, so the owner (and every GPU it gives the
 *    queues to) can make the controller DMA to or from any address mapped
 *    for the device, the module's own queues included, and ring any queue.
 *    Only the IOMMU bounds it: claiming needs CAP_SYS_RAWIO, is refused
 *    under lockdown (LOCKDOWN_PCI_ACCESS) and unless the device is in a
 *    translating IOMMU domain (module parameter allow_unsafe_no_iommu=1
 *    waives that last check, tainting the kernel). The admin queue skips
 *    completions that are not its own, so an owner's stray admin doorbell
 *    write does not break it for the files that come after.
 */
#ifndef _UAPI_GPUNVME_H
#define _UAPI_GPUNVME_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define GPUNVME_UAPI_VERSION 2

/* ioctl type byte; not in Documentation/userspace-api/ioctl/ioctl-number.rst */
#define GPUNVME_IOC_MAGIC 0xB7

/* Length of the PCI address string, e.g. "0000:00:04.0" plus NUL, padded. */
#define GPUNVME_BDF_LEN 16
/* Namespaces reported by GET_INFO (active namespaces beyond it are not used). */
#define GPUNVME_MAX_NS 16

/**
 * struct gpunvme_ns_info - one active namespace.
 * @nsid:          namespace ID (1-based).
 * @lba_size:      bytes per logical block in the current format; 0 while
 *                 the namespace is detached, deleted, being identified
 *                 again after a change, or in a format the module does not
 *                 carry (metadata): its commands are then refused.
 * @capacity_lbas: namespace size (NSZE) in logical blocks (0 when
 *                 @lba_size is).
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
 * @iommu_mode:  out: the controller's IOMMU domain, GPUNVME_IOMMU_*.
 * @modes:       out: GPUNVME_MODE_* this caller may use now: SHARED unless
 *               an owner holds the controller; OWNER when a claim by this
 *               caller would pass the capability, lockdown and IOMMU checks
 *               (it may still get EBUSY).
 * @shared_max_transfer: out: largest transfer of one shared-mode command in
 *               bytes (mdts_bytes, capped at 2 MiB so one PRP-list page
 *               covers it).
 * @node_nsid:   out: the namespace this file is limited to (a namespace
 *               node), or 0 (the controller node: every active namespace).
 * @quota_qpairs: out: queue pairs this file may hold at once (module
 *               parameter max_qpairs_per_file); CREATE_QPAIR fails with
 *               EDQUOT beyond it. 0: no limit (the owner is exempt).
 * @quota_maps:  out: buffers (MAP_HOST and MAP_DMABUF together) this file
 *               may have mapped at once (max_maps_per_file); EDQUOT beyond.
 *               0: no limit.
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
	__u32 iommu_mode;
	__u32 modes;
	__u32 shared_max_transfer;
	__u32 node_nsid;
	__u32 quota_qpairs;
	__u32 quota_maps;
	__u64 reserved[5];
};

/* gpunvme_info.iommu_mode */
#define GPUNVME_IOMMU_NONE     0	/* no IOMMU: DMA addresses are physical */
#define GPUNVME_IOMMU_IDENTITY 1	/* passthrough (iommu=pt): not translating */
#define GPUNVME_IOMMU_STRICT   2	/* translating, strict invalidation */
#define GPUNVME_IOMMU_LAZY     3	/* translating, flush queue (DMA-FQ): an
					 * unmapped page stays reachable until the
					 * next IOTLB flush (up to ~10 ms) */
#define GPUNVME_IOMMU_OTHER    4	/* blocked, unmanaged or unknown */

/* gpunvme_info.modes */
#define GPUNVME_MODE_SHARED (1u << 0)
#define GPUNVME_MODE_OWNER  (1u << 1)

/* Fill struct gpunvme_info. Errors: EINVAL (size/version/reserved), EFAULT,
 * ENODEV (the controller was unbound or went away since open), EIO (it
 * failed since open; see "When the controller fails" above). */
#define GPUNVME_IOC_GET_INFO _IOWR(GPUNVME_IOC_MAGIC, 0x00, struct gpunvme_info)

/*
 * mmap offsets. Every object a file can map has its own offset, returned by
 * the ioctl that created it; the length must be the size that ioctl returned
 * (the doorbell mapping is always one 4 KiB page). Any other offset or size
 * fails with EINVAL and a log line.
 *
 * SQ, CQ and PRP-pool memory are coherent DMA memory (cacheable). The
 * doorbell page of a shared pair is a page of that memory holding two
 * shadow cells; of an owner's raw pair it is the page of BAR0 (mapped
 * uncached) that also holds the admin doorbells and every other queue's.
 *
 * After unbind or a failure every mapping is removed (later accesses fault
 * with SIGBUS).
 */

/* Queue depth bounds: at least 2 entries, at most info.max_queue_entries. */
#define GPUNVME_MIN_QUEUE_DEPTH 2

/*
 * Bit 0 (GPUNVME_QPAIR_BRIDGED in UAPI version 1) is gone: shared mode is
 * the relayed mode now, and it validates. A set bit 0 is EINVAL.
 *
 * GPUNVME_QPAIR_RAW: an owner-mode pair (the file must hold
 * GPUNVME_IOC_CLAIM_OWNER; EPERM otherwise). The SQ, CQ and doorbell page
 * the file maps or exports are the real ones; nothing is checked.
 *
 * Without it the pair is shared (validated): the doorbell page is a page of
 * memory with the SQ tail cell at sq_db = 0 and the CQ head cell at
 * cq_db = 64; the SQ is a shadow the module reads, the CQ a mirror it
 * writes; and PRP lists must be built in the pair's PRP pool (prp_offset,
 * prp_size; its entries' addresses start at prp_dma). One thread of a small
 * relay pool (at most one per online CPU; module parameter relay_threads)
 * serves the pair for its whole life, writes a real doorbell only when
 * there is something new and copies each CQE whole, phase dword last. Its
 * counters are in debugfs: gpunvme-<bdf>-q<qid>/{polls, sq_doorbell_writes,
 * cq_doorbell_writes, cqes_mirrored, max_sq_tail, bad_doorbell_values,
 * sqes_accepted, sqes_rejected, relay_ns, cpu_ns_per_million_commands,
 * file_pass_checks_max},
 * and per open file (destroyed pairs included) in
 * gpunvme-<bdf>/relay_cpu_per_file. Code that drives the queue is the same in
 * both modes; a CQE's SQ head is the shadow SQ's head in shared mode.
 */
#define GPUNVME_QPAIR_RAW (1u << 1)

/*
 * GPUNVME_QPAIR_CQ_IN_MAP (raw pairs only): the controller writes the CQ
 * into the start of mapping cq_handle of this file (GPUNVME_IOC_MAP_DMABUF,
 * e.g. GPU memory exported as a dma-buf, so a GPU polls its CQ in its own
 * memory; or GPUNVME_IOC_MAP_HOST) instead of memory of the module. The
 * mapping must be one run of DMA addresses (what the controller sees is
 * contiguous, as a CQ needs) of at least cq_size bytes (EINVAL otherwise;
 * the log says which). It stays mapped while the pair lives: UNMAP fails
 * with EBUSY until the pair is destroyed, and an exporter's revoke keeps
 * it (see GPUNVME_IOC_MAP_DMABUF). The pair's CQ has no mmap offset
 * (cq_offset 0) and cannot be exported.
 */
#define GPUNVME_QPAIR_CQ_IN_MAP (1u << 2)

/**
 * struct gpunvme_qpair_create - create an I/O submission/completion queue pair.
 * @size, @version: as for every struct.
 * @depth:     in: entries in each queue, GPUNVME_MIN_QUEUE_DEPTH ..
 *             info.max_queue_entries (EINVAL otherwise).
 * @flags:     in: 0 (shared, validated) or GPUNVME_QPAIR_RAW (owner only),
 *             optionally with GPUNVME_QPAIR_CQ_IN_MAP.
 * @qid:       out: the queue ID (1-based), the same for the SQ and its CQ.
 * @sq_offset: out: mmap offset of the SQ (64-byte entries).
 * @sq_size:   out: bytes to map there (depth * 64 rounded up to 4 KiB).
 * @cq_offset: out: mmap offset of the CQ (16-byte entries; polled, no
 *             interrupts; phase tag starts at 1); 0 with
 *             GPUNVME_QPAIR_CQ_IN_MAP.
 * @cq_size:   out: bytes to map there (with GPUNVME_QPAIR_CQ_IN_MAP: the
 *             bytes of the mapping the controller writes).
 * @db_offset: out: mmap offset of the doorbell page holding this pair's
 *             doorbells (4096 bytes; the shadow page of a shared pair).
 * @sq_db:     out: byte offset of the SQ tail doorbell within that page.
 * @cq_db:     out: byte offset of the CQ head doorbell within that page.
 * @prp_offset: out: shared pairs: mmap offset of the PRP pool, where the
 *             file builds PRP lists (0 for a raw pair).
 * @prp_size:  out: bytes of the PRP pool (0 for a raw pair).
 * @prp_dma:   out: the address that names the pool's first byte in a PRP2
 *             (0 for a raw pair). A shared SQE whose transfer needs a PRP
 *             list must point PRP2 into the pool (8-byte aligned); the
 *             module reads the list there.
 * @cq_handle: in: with GPUNVME_QPAIR_CQ_IN_MAP, the handle of the mapping
 *             that holds the CQ; 0 otherwise.
 * @__pad2:    in: zero.
 *
 * The queue pair belongs to the file: closing it (or process exit) deletes
 * both queues on the controller (SQ first) before their memory is freed.
 * Errors: EINVAL, EPERM (GPUNVME_QPAIR_RAW without owning the controller),
 * EBUSY (another file owns the controller, or it is not yet reset after its
 * owner left), ENOSPC (no I/O queue left: info.io_queues in use), EDQUOT
 * (this file holds info.quota_qpairs pairs already), ENOMEM, EIO (the controller failed the command; the log has its status),
 * ETIMEDOUT (the controller did not answer the admin command in time),
 * EOPNOTSUPP (a doorbell stride of 4 KiB or more puts this queue's SQ and
 * CQ doorbells on two pages, which one doorbell page cannot export, or
 * beyond the end of BAR0),
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
	__u64 prp_offset;
	__u64 prp_size;
	__u64 prp_dma;
	__u32 cq_handle;
	__u32 __pad2;
};

/**
 * struct gpunvme_qpair_destroy - delete a queue pair this file created.
 * @qid: in: from GPUNVME_IOC_CREATE_QPAIR.
 * Errors: ENOENT (no such queue pair on this file, e.g. destroyed twice),
 * EINVAL, EIO, ETIMEDOUT (admin command deadline), ENODEV. The queue memory
 * stays mapped (and allocated) until its last mmap is unmapped, so stale
 * mappings never reach freed memory, and while an importer of an export of
 * it did not let go (see struct gpunvme_export); it is freed as soon as
 * neither holds it.
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
 * The pinned pages are charged to the caller's RLIMIT_MEMLOCK (as VFIO and
 * RDMA do; CAP_IPC_LOCK lifts the limit) until UNMAP or close. No lock of
 * the module is held while pinning, so a range whose faults wait (e.g.
 * userfaultfd) holds up only this call.
 * Errors: EINVAL (alignment, size), EFAULT (not mapped, or dma_addrs bad),
 * ENOMEM (also: RLIMIT_MEMLOCK would be exceeded), EIO (DMA mapping
 * failed), EBUSY (another file owns the controller), EDQUOT (this file has
 * info.quota_maps buffers mapped already), ENODEV.
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
 * When the exporter revokes or moves the buffer, its pages leave the file's
 * own pages first (a shared-mode command naming them is refused with
 * Invalid Field from then on). The mapping is removed only once every
 * command this file's relays accepted before the revoke has completed
 * (waited for, up to 1 s); if one has not, or if the file has raw queue
 * pairs (whose commands the module never sees), the mapping is kept until
 * the file unmaps it (UNMAP, after its queue pairs are destroyed) or
 * closes, or the controller is known stopped or unbound, and the exporter
 * sees it still mapped (it must keep the memory).
 * After a removal a raw command aimed at the pages fails in the IOMMU.
 * Errors: EBADF, EINVAL (size not 4 KiB multiple, more pages than
 * max_pages, max_pages out of range, unaligned segments), EOPNOTSUPP,
 * ETIMEDOUT (exporter fences), EINTR/ERESTARTSYS (a signal during that
 * wait), EBUSY (another file owns the controller), EDQUOT (this file has
 * info.quota_maps buffers mapped already), ENODEV.
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
 * pairs on the controller, which may DMA into the buffer: live ones, one
 * being created or destroyed, or one whose delete the controller did not
 * confirm; destroy them first, or close the file), EINVAL.
 */
struct gpunvme_unmap {
	__u32 size;
	__u32 version;
	__u32 handle;
	__u32 __pad0;
	__u64 reserved[2];
};

/* What GPUNVME_IOC_EXPORT exports. */
#define GPUNVME_EXPORT_DOORBELL 1	/* the pair's doorbell page (4 KiB): BAR0 for a raw
					 * pair, the shadow cells' page for a shared one */
#define GPUNVME_EXPORT_SQ       2	/* the SQ memory (sq_size bytes) */
#define GPUNVME_EXPORT_CQ       3	/* the CQ memory (cq_size bytes) */
#define GPUNVME_EXPORT_PRP_POOL 4	/* a shared pair's PRP pool (prp_size bytes) */

/**
 * struct gpunvme_export - export part of a queue pair as a dma-buf, for a
 * GPU (or any DMA peer) to import into its own address space. A shared
 * pair exports its shadows (doorbell cells, SQ, CQ mirror, PRP pool); only
 * a raw pair of the owner exports the real doorbell page and queues.
 * @qid:    in: a live queue pair of this file.
 * @kind:   in: GPUNVME_EXPORT_*.
 * @flags:  in: O_CLOEXEC and O_RDWR only (for the new fd).
 * @fd:     out: the dma-buf file descriptor.
 * @length: out: its size in bytes. For the doorbell, the queue's doorbells
 *          are at sq_db / cq_db from GPUNVME_IOC_CREATE_QPAIR.
 * @reserved: in: zero.
 *
 * A raw pair's doorbell dma-buf is MMIO, exported like VFIO exports a BAR: only
 * importers that allow peer-to-peer and implement invalidate_mappings may
 * attach (EOPNOTSUPP otherwise), and mapping fails with the p2pdma error
 * (EINVAL) when the PCI topology between the importer and the controller
 * has no peer-to-peer path; the kernel log names both devices. Queue
 * memory can be imported by any revocable importer.
 *
 * Every export is revoked when its queue pair is destroyed, its file closed
 * or the controller unbound: importers get invalidate_mappings and later
 * maps fail with ENODEV. The module then waits up to 5 s for importers to
 * unmap and for their fences; memory an importer still maps after that is
 * kept (never reused for another queue) and the log says so. Once the
 * controller confirmed the queue's deletion and every importer let go, it
 * is freed at the next create, destroy, unmap, munmap or close of any file
 * of the controller (or the next disable or unbind); memory an importer
 * holds at unbind is never freed. Errors: ENOENT (no such live queue pair), EINVAL,
 * ENODEV (unbound), EOPNOTSUPP (no p2pdma provider for the doorbell),
 * EDQUOT (the pair has max_exports_per_qpair exports already; owners are
 * exempt), ENOMEM, EMFILE (no free descriptor).
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

/**
 * struct gpunvme_owner - claim owner mode (raw access) for this file.
 * @flags:      in: 0.
 * @iommu_mode: out: GPUNVME_IOMMU_* of the controller.
 * @reserved:   in: zero.
 *
 * Ownership lasts until the file is closed. While a file owns the
 * controller, no other file can create queue pairs (EBUSY).
 * Errors: EPERM (no CAP_SYS_RAWIO; kernel lockdown; a namespace node; the
 * device is not in a translating IOMMU domain and allow_unsafe_no_iommu is
 * off: the log names the mode), EBUSY (another file owns the controller,
 * or has queue pairs or buffers mapped), EALREADY (this file owns it
 * already), EINVAL, ENODEV. While a file owns the controller, other files'
 * MAP_HOST and MAP_DMABUF fail with EBUSY too: raw SQEs could name any
 * buffer mapped for the device.
 */
struct gpunvme_owner {
	__u32 size;
	__u32 version;
	__u32 flags;
	__u32 iommu_mode;
	__u64 reserved[2];
};

#define GPUNVME_IOC_CLAIM_OWNER   _IOWR(GPUNVME_IOC_MAGIC, 0x07, struct gpunvme_owner)

#endif /* _UAPI_GPUNVME_H */
