/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * pthread_io.hip - the per-thread API (pqueue.h): every thread of every
 * block, on its own, writes or reads cmds_per_thread commands of
 * bytes_per_cmd each (PRP1, PRP2 or a PRP list the thread builds in its
 * command slot's part of the pair's pool), on a queue pair picked by its
 * SM/CU (or by its global index), sharing that pair with whoever else
 * picked it. A read checks every 64-bit word against example.h's pattern.
 */
#include "example.h"

using namespace gx;

struct pt_args {
	const uint64_t *page_dma; /* DMA address of each 4 KiB page of buf */
	uint8_t *buf;             /* the buffer, GPU virtual address */
	uint64_t npages;
	uint64_t slba;            /* LBA of buffer byte 0 */
	uint64_t seed;
	uint32_t nsid;
	uint32_t lba_shift;
	uint32_t bytes_per_cmd;   /* a multiple of the LBA size */
	uint32_t cmds_per_thread;
	uint32_t npairs;
	uint32_t opc;             /* NVME_OPC_WRITE or NVME_OPC_READ */
	uint32_t by_unit;         /* 1: pair = pq_pick(npairs) (SM/CU id) */
	uint32_t pad;
};
/* Filled from Rust (gpunvme gpu-run --api thread): gpunvme_gpu::kernel_abi::
 * PtArgs pins the same. */
static_assert(sizeof(pt_args) == 72 && __builtin_offsetof(pt_args, nsid) == 40 &&
	      __builtin_offsetof(pt_args, by_unit) == 64, "pt_args layout is pinned");

GPUNVME_KERNEL void gpunvme_pthread_io(const pqueue *pqs, const pt_args *args,
				       io_result *res)
{
	const pt_args a = *args;
	const uint32_t g = group_id() * group_size() + lane_id();
	const uint32_t pair = a.by_unit ? pq_pick(a.npairs) : g % a.npairs;
	const pqueue q = pqs[pair];

	for (uint32_t k = 0; k < a.cmds_per_thread; k++) {
		const uint64_t off = ((uint64_t)g * a.cmds_per_thread + k) * a.bytes_per_cmd;
		const uint64_t slba = a.slba + (off >> a.lba_shift);
		const uint16_t nlb0 = (uint16_t)((a.bytes_per_cmd >> a.lba_shift) - 1);
		pq_ticket t;
		cqe c;

		if (a.opc == NVME_OPC_WRITE)
			for (uint32_t j = 0; j < a.bytes_per_cmd / 8; j++)
				((uint64_t *)(a.buf + off))[j] =
					pattern(a.seed, (a.slba << a.lba_shift) + off + 8ull * j);
		if (a.opc == NVME_OPC_WRITE)
			fence::payload_release(); /* payload contract: fence.h */
		int32_t rc = pq_submit_io(q, (uint8_t)a.opc, a.nsid, slba, nlb0,
					  a.page_dma, a.npages, off,
					  a.bytes_per_cmd, &t);
		if (rc == OK)
			rc = pq_wait(q, t, &c);
		if (rc == OK && c.cid != t.slot)
			rc = ERR_IO; /* routed to the wrong slot */
		if (rc != OK) {
			note_error(res, rc);
			return;
		}
		if (a.opc == NVME_OPC_READ) {
			/* The payload came from a peer: drop stale lines
			 * (payload contract: fence.h). */
			fence::payload_acquire();
			const uint64_t *w = (const uint64_t *)(a.buf + off);
			uint32_t bad = 0;

			for (uint32_t j = 0; j < a.bytes_per_cmd / 8; j++)
				bad += w[j] != pattern(a.seed, (a.slba << a.lba_shift) + off + 8ull * j);
			if (bad)
				atomic_add_relaxed(&res->mismatches, bad);
		}
		atomic_add_relaxed(&res->completed, 1u);
	}
}
