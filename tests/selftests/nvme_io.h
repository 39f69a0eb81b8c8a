/* SPDX-License-Identifier: GPL-2.0 */
/*
 * A minimal polled NVMe I/O client over the gpunvme UAPI, for selftests:
 * one queue pair, one mapped host buffer, synchronous commands. Kept small
 * on purpose; the real client is the Rust library in userspace/.
 */
#ifndef GPUNVME_SELFTEST_NVME_IO_H
#define GPUNVME_SELFTEST_NVME_IO_H

#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include "gpunvme.h"
#include "vmenv.h"

#define UAPI_INIT(s) do { memset(&(s), 0, sizeof(s)); (s).size = sizeof(s); (s).version = GPUNVME_UAPI_VERSION; } while (0)

/* Load gpunvme, bind GPUNVME_BDF to it and open its node; -1 on failure. */
static inline int gpunvme_open_bound(void)
{
	char name[32];
	if (load_module() || bind_gpunvme(gpunvme_bdf()))
		return -1;
	for (int i = 0; i < 8; i++) {
		struct gpunvme_info info;
		snprintf(name, sizeof(name), "/dev/gpunvme%d", i);
		int fd = open(name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		UAPI_INIT(info);
		if (!ioctl(fd, GPUNVME_IOC_GET_INFO, &info) && !strcmp(info.bdf, gpunvme_bdf()))
			return fd;
		close(fd);
	}
	return -1;
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
	uint32_t tail, head, phase;
	uint16_t cid;
};


/* Create a queue pair; `flags` 0 (direct) or GPUNVME_QPAIR_BRIDGED. The
 * same code then drives either: db + sq_db is the real doorbell or the
 * bridge's shadow cell, and cq the real CQ or its mirror. */
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
	q->phase = 1;
	return 0;
}

static inline int qp_create(int fd, uint32_t depth, struct qp *q)
{
	return qp_create_flags(fd, depth, 0, q);
}

static inline int qp_destroy(struct qp *q)
{
	struct gpunvme_qpair_destroy d;
	munmap((void *)q->sq, q->c.sq_size);
	munmap((void *)q->cq, q->c.cq_size);
	munmap((void *)q->db, 4096);
	UAPI_INIT(d);
	d.qid = q->c.qid;
	return ioctl(q->fd, GPUNVME_IOC_DESTROY_QPAIR, &d) ? -errno : 0;
}

/* Queue one command (no doorbell). */
static inline uint16_t qp_push(struct qp *q, struct sqe cmd)
{
	cmd.cid = ++q->cid;
	q->sq[q->tail] = cmd;
	q->tail = (q->tail + 1) % q->c.depth;
	return cmd.cid;
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

/* Submit one command and wait; returns the NVMe status field (0 = success) or -errno. */
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

struct hostbuf {
	uint8_t *p;
	size_t len;
	uint64_t *dma;
	uint32_t handle;
};

static inline int hostbuf_map(int fd, size_t len, struct hostbuf *b)
{
	struct gpunvme_map_host m;
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

static inline int hostbuf_unmap(int fd, struct hostbuf *b)
{
	struct gpunvme_unmap u;
	UAPI_INIT(u);
	u.handle = b->handle;
	int r = ioctl(fd, GPUNVME_IOC_UNMAP, &u) ? -errno : 0;
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

#endif
