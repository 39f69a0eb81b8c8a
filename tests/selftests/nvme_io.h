/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * A minimal polled NVMe I/O client over the gpunvme UAPI (version 2), for
 * selftests: queue pairs, mapped host buffers, PRP lists, synchronous
 * commands. Kept small on purpose; the real client is the Rust library in
 * userspace/.
 *
 * Modes: a queue pair is shared (validated: flags 0; its SQ, CQ and
 * doorbell cells are shadows the module relays, PRP lists live in the
 * pair's PRP pool) or raw (GPUNVME_QPAIR_RAW, owner only). qp_create()
 * makes the kind this run asks for (gpunvme_test_mode(): the suite runs the
 * generic tests once shared and once as owner); qp_create_flags() makes
 * exactly the kind asked for. The same code drives both.
 */
#ifndef GPUNVME_SELFTEST_NVME_IO_H
#define GPUNVME_SELFTEST_NVME_IO_H

#include <fcntl.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include "gpunvme.h"
#include "vmenv.h"

#define UAPI_INIT(s) do { memset(&(s), 0, sizeof(s)); (s).size = sizeof(s); (s).version = GPUNVME_UAPI_VERSION; } while (0)

/* NVMe I/O opcodes the tests use. */
#define OPC_FLUSH        0x00
#define OPC_WRITE        0x01
#define OPC_READ         0x02
#define OPC_WRITE_ZEROES 0x08

/* The status field as qp_sync() returns it (CQE DW3 bits 31:17). */
#define NVME_SC(st)   ((st) & 0xff)
#define NVME_SCT(st)  (((st) >> 8) & 0x7)
#define NVME_DNR      0x4000
#define NVME_SC_INVALID_OPCODE 0x01
#define NVME_SC_INVALID_FIELD  0x02
#define NVME_SC_INVALID_NS     0x0b
#define NVME_SC_LBA_RANGE      0x80

/* Open /dev/gpunvme<N> (the controller node) whose GET_INFO names `bdf`;
 * *index gets N. -1 when there is none. */
static inline int gpunvme_open_ctrl_node(const char *bdf, int *index)
{
	char name[32];
	for (int i = 0; i < 8; i++) {
		struct gpunvme_info info;
		snprintf(name, sizeof(name), "/dev/gpunvme%d", i);
		int fd = open(name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		UAPI_INIT(info);
		if (!ioctl(fd, GPUNVME_IOC_GET_INFO, &info) && !strcmp(info.bdf, bdf)) {
			if (index)
				*index = i;
			return fd;
		}
		close(fd);
	}
	return -1;
}

/* Load gpunvme, bind GPUNVME_BDF to it and open its controller node (a new
 * open file each call); -1 on failure. */
static inline int gpunvme_open_bound(void)
{
	if (load_module() || bind_gpunvme(gpunvme_bdf()))
		return -1;
	return gpunvme_open_ctrl_node(gpunvme_bdf(), NULL);
}

/* /dev/gpunvme<N>n<nsid> of the bound controller into `out`; -1 if not bound. */
static inline int gpunvme_ns_node_path(uint32_t nsid, char *out, size_t len)
{
	int index = -1;
	int fd = gpunvme_open_ctrl_node(gpunvme_bdf(), &index);
	if (fd < 0)
		return -1;
	close(fd);
	snprintf(out, len, "/dev/gpunvme%dn%u", index, nsid);
	return 0;
}

/* Open the namespace node of `nsid`; -errno on failure. */
static inline int gpunvme_open_ns(uint32_t nsid)
{
	char path[64];
	if (gpunvme_ns_node_path(nsid, path, sizeof(path)))
		return -ENODEV;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* GPUNVME_IOC_CLAIM_OWNER; 0 or -errno. *iommu_mode (may be NULL) gets the mode. */
static inline int claim_owner(int fd, uint32_t *iommu_mode)
{
	struct gpunvme_owner o;
	UAPI_INIT(o);
	if (ioctl(fd, GPUNVME_IOC_CLAIM_OWNER, &o))
		return -errno;
	if (iommu_mode)
		*iommu_mode = o.iommu_mode;
	return 0;
}

/* The GPUNVME_IOMMU_* that GET_INFO should report for `bdf`, from the type
 * of its IOMMU group in sysfs; *type gets that type ("none" without one). */
static inline uint32_t expected_iommu_mode(const char *bdf, char *type, size_t len)
{
	iommu_group_type(bdf, type, len);
	if (!type[0]) {
		snprintf(type, len, "none");
		return GPUNVME_IOMMU_NONE;
	}
	if (!strcmp(type, "DMA"))
		return GPUNVME_IOMMU_STRICT;
	if (!strcmp(type, "DMA-FQ"))
		return GPUNVME_IOMMU_LAZY;
	if (!strcmp(type, "identity"))
		return GPUNVME_IOMMU_IDENTITY;
	return GPUNVME_IOMMU_OTHER;
}

static inline int get_info(int fd, struct gpunvme_info *info)
{
	UAPI_INIT(*info);
	return ioctl(fd, GPUNVME_IOC_GET_INFO, info) ? -errno : 0;
}

/* Pages per command: want, or fewer if a shared pair's largest transfer
 * is smaller. */
static inline uint32_t pages_within_limit(const struct gpunvme_info *info, uint32_t want)
{
	return want * 4096 > info->shared_max_transfer ? info->shared_max_transfer / 4096 : want;
}

struct sqe {
	uint8_t opcode, flags;
	uint16_t cid;
	uint32_t nsid, cdw2, cdw3;
	uint64_t mptr, prp1, prp2;
	uint32_t cdw10, cdw11, cdw12, cdw13, cdw14, cdw15;
};
struct cqe {
	uint32_t result, rsvd;
	uint16_t sq_head, sq_id, cid, status;
};
_Static_assert(sizeof(struct sqe) == 64, "SQE is 64 bytes");
_Static_assert(sizeof(struct cqe) == 16, "CQE is 16 bytes");

struct qp {
	int fd;
	struct gpunvme_qpair_create c;
	volatile struct sqe *sq;
	volatile struct cqe *cq;
	volatile uint8_t *db;
	volatile uint64_t *prp;	/* the PRP pool (shared pairs), else NULL */
	uint32_t tail, head, phase;
	uint16_t cid;
};

static inline int qp_is_raw(const struct qp *q)
{
	return !!(q->c.flags & GPUNVME_QPAIR_RAW);
}

/* Create a queue pair with exactly these flags (0: shared, validated;
 * GPUNVME_QPAIR_RAW: the owner's raw pair) and map SQ, CQ, doorbell page
 * and, for a shared pair, the PRP pool. The same code then drives either:
 * db + sq_db is the shadow cell or the real doorbell, cq the mirror or the
 * real CQ. */
static inline int qp_create_flags(int fd, uint32_t depth, uint32_t flags, struct qp *q)
{
	memset(q, 0, sizeof(*q));
	q->fd = fd;
	UAPI_INIT(q->c);
	q->c.depth = depth;
	q->c.flags = flags;
	if (ioctl(fd, GPUNVME_IOC_CREATE_QPAIR, &q->c))
		return -errno;
	q->sq = mmap(NULL, q->c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, q->c.sq_offset);
	q->cq = mmap(NULL, q->c.cq_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, q->c.cq_offset);
	q->db = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, q->c.db_offset);
	if (q->sq == MAP_FAILED || q->cq == MAP_FAILED || q->db == MAP_FAILED)
		return -errno;
	if (q->c.prp_size) {
		void *p = mmap(NULL, q->c.prp_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, q->c.prp_offset);
		if (p == MAP_FAILED)
			return -errno;
		q->prp = p;
	}
	q->phase = 1;
	return 0;
}

/* The queue-pair kind this run tests: owner mode claims the controller for
 * the file (once; EALREADY is fine) and makes raw pairs. */
static inline int qp_create(int fd, uint32_t depth, struct qp *q)
{
	if (gpunvme_test_owner_mode()) {
		int r = claim_owner(fd, NULL);
		if (r && r != -EALREADY)
			return r;
		return qp_create_flags(fd, depth, GPUNVME_QPAIR_RAW, q);
	}
	return qp_create_flags(fd, depth, 0, q);
}

static inline void qp_unmap(struct qp *q)
{
	munmap((void *)q->sq, q->c.sq_size);
	munmap((void *)q->cq, q->c.cq_size);
	munmap((void *)q->db, 4096);
	if (q->prp)
		munmap((void *)q->prp, q->c.prp_size);
	q->prp = NULL;
}

/* DESTROY_QPAIR of qid on fd, its mappings left as they are: 0 or -errno. */
static inline int qpair_destroy(int fd, uint16_t qid)
{
	struct gpunvme_qpair_destroy d;
	UAPI_INIT(d);
	d.qid = qid;
	return ioctl(fd, GPUNVME_IOC_DESTROY_QPAIR, &d) ? -errno : 0;
}

static inline int qp_destroy(struct qp *q)
{
	qp_unmap(q);
	return qpair_destroy(q->fd, q->c.qid);
}

/* Queue one command (no doorbell) under the next command ID. */
static inline uint16_t qp_push(struct qp *q, struct sqe cmd)
{
	cmd.cid = ++q->cid;
	q->sq[q->tail] = cmd;
	q->tail = (q->tail + 1) % q->c.depth;
	return cmd.cid;
}

/* Queue one command with the command ID it already carries. */
static inline void qp_push_raw_cid(struct qp *q, struct sqe cmd)
{
	q->sq[q->tail] = cmd;
	q->tail = (q->tail + 1) % q->c.depth;
}

static inline void qp_ring(struct qp *q)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	*(volatile uint32_t *)(q->db + q->c.sq_db) = q->tail;
}

/* Reap one completion within `ms`; returns 0 and fills `out`, or -ETIMEDOUT. */
static inline int qp_reap(struct qp *q, struct cqe *out, int ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if ((q->cq[q->head].status & 1) == q->phase) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			*out = *(struct cqe *)&q->cq[q->head];
			if (++q->head == q->c.depth) {
				q->head = 0;
				q->phase ^= 1;
			}
			*(volatile uint32_t *)(q->db + q->c.cq_db) = q->head;
			return 0;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			return -ETIMEDOUT;
	}
}

static inline struct sqe rw_cmd(uint8_t opc, uint32_t nsid, uint64_t slba, uint32_t nlb, uint64_t prp1, uint64_t prp2)
{
	struct sqe c = { .opcode = opc, .nsid = nsid, .prp1 = prp1, .prp2 = prp2 };
	c.cdw10 = (uint32_t)slba;
	c.cdw11 = (uint32_t)(slba >> 32);
	c.cdw12 = nlb - 1;
	return c;
}

/* Submit one command and wait; returns the NVMe status field (0 = success;
 * NVME_SC()/NVME_SCT()/NVME_DNR pick it apart) or -errno. */
static inline int qp_sync(struct qp *q, struct sqe cmd)
{
	struct cqe c;
	uint16_t cid = qp_push(q, cmd);
	qp_ring(q);
	if (qp_reap(q, &c, 5000))
		return -ETIMEDOUT;
	if (c.cid != cid)
		return -EIO;
	return c.status >> 1;
}

/*
 * PRP2 for a transfer over `npages` pages whose addresses are pages[0..]:
 * 0 for one page, pages[1] for two, else a PRP list of pages[1..] built at
 * byte `off` of the PRP pool (shared pair; the module reads it there) or,
 * for a raw pair, in the caller's page `raw_va` whose device address is
 * `raw_dma`. The list must fit in one 4 KiB page: npages - 1 <= 512, and
 * off must leave room before the next 4 KiB boundary.
 */
static inline uint64_t qp_prp2(struct qp *q, const uint64_t *pages, uint32_t npages, uint64_t off,
			       void *raw_va, uint64_t raw_dma)
{
	if (npages <= 1)
		return 0;
	if (npages == 2)
		return pages[1];
	volatile uint64_t *list = q->prp ? q->prp + off / 8 : (volatile uint64_t *)raw_va;
	for (uint32_t i = 1; i < npages; i++)
		list[i - 1] = pages[i];
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return q->prp ? q->c.prp_dma + off : raw_dma;
}

/* A counter of a shared pair's relay thread from debugfs, or -1. */
static inline long long qp_counter(uint16_t qid, const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s-q%u/%s", gpunvme_bdf(), qid, name);
	return read_number(path, -1);
}

/* Module-wide count of I/O queue pairs whose memory is allocated (debugfs
 * of the bound controller), or -1. */
static inline long long qpairs_allocated(void)
{
	char path[160];
	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/qpairs_allocated", gpunvme_bdf());
	return read_number(path, -1);
}

/* Export `kind` of pair `qid` of `fd` as a dma-buf: its fd in *out; 0 or -errno. */
static inline int export_fd(int fd, uint16_t qid, uint16_t kind, int *out)
{
	struct gpunvme_export e;
	UAPI_INIT(e);
	e.qid = qid;
	e.kind = kind;
	e.flags = O_CLOEXEC | O_RDWR;
	if (ioctl(fd, GPUNVME_IOC_EXPORT, &e))
		return -errno;
	*out = e.fd;
	return 0;
}

/*
 * A counter the relay thread updates after the client's last step (the CQ
 * head relay, a bad value it drops): poll it until it reaches `want` or 1 s
 * passes, and return what it holds then.
 */
static inline long long qp_counter_settles(uint16_t qid, const char *name, long long want)
{
	long long v = qp_counter(qid, name);
	for (int i = 0; i < 1000 && v != want; i++) {
		usleep(1000);
		v = qp_counter(qid, name);
	}
	return v;
}

struct hostbuf {
	uint8_t *p;
	size_t len;
	uint64_t *dma;
	uint32_t handle;
};

static inline int hostbuf_map(int fd, size_t len, struct hostbuf *b)
{
	struct gpunvme_map_host m;
	memset(b, 0, sizeof(*b));
	b->len = len;
	b->p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b->dma = calloc(len / 4096, sizeof(uint64_t));
	if (b->p == MAP_FAILED || !b->dma)
		return -ENOMEM;
	UAPI_INIT(m);
	m.addr = (uintptr_t)b->p;
	m.len = len;
	m.dma_addrs = (uintptr_t)b->dma;
	if (ioctl(fd, GPUNVME_IOC_MAP_HOST, &m))
		return -errno;
	b->handle = m.handle;
	return 0;
}

/* GPUNVME_IOC_UNMAP of mapping `handle`: 0 or -errno. */
static inline int unmap_handle(int fd, uint32_t handle)
{
	struct gpunvme_unmap u;
	UAPI_INIT(u);
	u.handle = handle;
	return ioctl(fd, GPUNVME_IOC_UNMAP, &u) ? -errno : 0;
}

static inline int hostbuf_unmap(int fd, struct hostbuf *b)
{
	int r = unmap_handle(fd, b->handle);
	if (!r) {
		munmap(b->p, b->len);
		free(b->dma);
	}
	return r;
}

/* Deterministic pattern: every byte depends on seed, LBA and offset. */
static inline uint8_t pattern_byte(uint32_t seed, uint64_t lba, uint32_t off)
{
	uint64_t x = (seed * 0x9E3779B97F4A7C15ull) ^ (lba * 0xBF58476D1CE4E5B9ull) ^ (off / 8 * 0x94D049BB133111EBull);
	x ^= x >> 31;
	return (uint8_t)(x >> ((off % 8) * 8));
}

/* Fill `len` bytes at p with the pattern of the blocks from `lba`. */
static inline void pattern_fill(uint8_t *p, size_t len, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern_byte(seed, lba + i / lbs, i % lbs);
}

/* Index of the first byte that differs from the pattern, or -1. */
static inline long pattern_check(const uint8_t *p, size_t len, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern_byte(seed, lba + i / lbs, i % lbs))
			return i;
	return -1;
}

#endif
