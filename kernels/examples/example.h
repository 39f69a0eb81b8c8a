/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * example.h - what the example kernels share: their argument blocks, the
 * data pattern the write kernel stores and the read kernel checks, and
 * loading/saving a queue pair around a launch.
 */
#ifndef GPUNVME_EXAMPLE_H
#define GPUNVME_EXAMPLE_H

#include <gpunvme/gpunvme.h>

namespace gx {

using namespace gpunvme;

/* One launch = gridDim workgroups = that many queue pairs. */
struct io_args {
	uint64_t slba;          /* first LBA of the whole run */
	uint64_t buf_dma;       /* bus address of buf, for PRPs */
	uint8_t *buf;           /* the same buffer, GPU virtual address */
	uint64_t seed;          /* pattern seed */
	uint32_t nsid;
	uint32_t lba_shift;     /* log2(LBA size) */
	uint32_t blocks_per_cmd;
	uint32_t cmds_per_queue;
	uint32_t page_size;     /* controller memory page size (CC.MPS) */
	uint32_t rounds;        /* sweep only: batches per queue */
};

/* Per queue pair, written by the group. */
struct io_result {
	int32_t status;         /* first error: < 0 gpunvme, > 0 NVMe status */
	uint32_t completed;
	uint32_t mismatches;    /* read-verify: 64-bit words that differ */
	uint32_t pad;
	uint64_t ticks_total;   /* wall-clock ticks, first ring to last reap */
	uint64_t ticks_max_round;
};

/*
 * The host fills these blocks from Rust (userspace/gpunvme-gpu/src/
 * kernel_abi.rs), which asserts the same numbers: change both or neither.
 */
static_assert(sizeof(qpair) == 80, "qpair layout is pinned");
static_assert(__builtin_offsetof(qpair, stop) == 32, "qpair layout is pinned");
static_assert(__builtin_offsetof(qpair, tick_hz) == 48, "qpair layout is pinned");
static_assert(__builtin_offsetof(qpair, depth) == 56, "qpair layout is pinned");
static_assert(__builtin_offsetof(qpair, error) == 76, "qpair layout is pinned");
static_assert(sizeof(io_args) == 56, "io_args layout is pinned");
static_assert(__builtin_offsetof(io_args, buf) == 16, "io_args layout is pinned");
static_assert(__builtin_offsetof(io_args, nsid) == 32, "io_args layout is pinned");
static_assert(__builtin_offsetof(io_args, rounds) == 52, "io_args layout is pinned");
static_assert(sizeof(io_result) == 32, "io_result layout is pinned");
static_assert(__builtin_offsetof(io_result, ticks_total) == 16, "io_result layout is pinned");
static_assert(__builtin_offsetof(io_result, ticks_max_round) == 24, "io_result layout is pinned");
/* The per-thread API's descriptor and shared state (guide_read.hip). */
static_assert(sizeof(pqueue) == 120, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pqueue, st) == 40, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pqueue, prp_va) == 64, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pqueue, timeout_ticks) == 88, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pqueue, depth) == 104, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pqueue, backoff) == 116, "pqueue layout is pinned");
static_assert(__builtin_offsetof(pq_shared, phase) == 136, "pq_shared layout is pinned");

/* splitmix64: the expected 64-bit word at byte offset off of the disk. */
GPUNVME_HD uint64_t pattern(uint64_t seed, uint64_t off)
{
	uint64_t z = seed + (off >> 3) * 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Every lane takes its own copy of the pair (see queue.h). */
GPUNVME_HD qpair load_qpair(const qpair *qps)
{
	return qps[group_id()];
}

/* Lane 0 writes the advanced ring position back for the next launch. */
GPUNVME_HD void save_qpair(qpair *qps, const qpair &q, io_result *res,
			   int32_t status)
{
	sync_lanes();
	if (lane_id() == 0) {
		qps[group_id()] = q;
		if (res[group_id()].status == OK)
			res[group_id()].status = status;
	}
}

/* First error of a group wins; NVMe statuses (> 0) included. */
GPUNVME_HD void note_error(io_result *r, int32_t rc)
{
	if (rc != OK)
		atomic_set_if_relaxed(&r->status, OK, rc);
}

/* Command k of this queue: its LBA, buffer offset and PRPs. */
struct cmd_place {
	uint64_t slba;
	uint64_t off;
	uint64_t prp1, prp2;
	uint32_t bytes;
	bool ok;
};

GPUNVME_HD cmd_place place(const io_args &a, uint32_t queue, uint32_t k)
{
	cmd_place c;
	uint64_t idx = (uint64_t)queue * a.cmds_per_queue + k;

	c.bytes = a.blocks_per_cmd << a.lba_shift;
	c.slba = a.slba + idx * a.blocks_per_cmd;
	c.off = idx * c.bytes;
	c.ok = a.blocks_per_cmd >= 1 && a.blocks_per_cmd <= 65536 &&
	       prp_pair(a.buf_dma + c.off, c.bytes, a.page_size, &c.prp1,
			&c.prp2);
	return c;
}

/* Uniform after a barrier: has any lane of this group failed? */
GPUNVME_HD bool group_failed(io_result *r)
{
	return atomic_load_relaxed(&r->status) != OK;
}

/* Commands per batch: lanes, free slots and work left all bound it. */
GPUNVME_HD uint32_t batch_size(const qpair &q, uint32_t left)
{
	uint32_t n = group_size();

	if (n > q.depth - 1)
		n = q.depth - 1;
	return n < left ? n : left;
}

} /* namespace gx */

#endif /* GPUNVME_EXAMPLE_H */
