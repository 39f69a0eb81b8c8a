/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * guide_read.hip - the programming guide's kernel (kernels/README.md shows
 * this file verbatim; `make -C kernels guide-check` compares the two).
 *
 * Every thread reads its own `blocks` LBAs into GPU memory with one
 * command of the per-thread API (pqueue.h) and checks every 64-bit word
 * against example.h's pattern: thread t reads LBAs slba + t * blocks on,
 * into buf at byte t * blocks * LBA size, on queue pair t % npairs.
 *
 * Payload contract: the SSD writes buf while the kernel runs, so on AMD
 * buf must be fine-grained or uncached memory: gpunvme-gpu's
 * Gpu::alloc_payload() allocates it uncached there. The
 * kernel's half is fence::payload_acquire() between the completion and
 * the first load of the data (make isa-check demands it).
 */
#include "example.h"

using namespace gx;

struct guide_args {
	const uint64_t *page_dma; /* DMA address of each 4 KiB page of buf */
	uint8_t *buf;             /* the same buffer, GPU virtual address */
	uint64_t npages;
	uint64_t slba;            /* first LBA of thread 0 */
	uint64_t seed;            /* pattern seed the blocks were written with */
	uint32_t nsid;
	uint32_t lba_shift;       /* log2(LBA size) */
	uint32_t blocks;          /* LBAs per thread: one command */
	uint32_t npairs;          /* queue pairs in pqs */
};
/* Filled from Rust: gpunvme_gpu::kernel_abi::GuideArgs pins the same. */
static_assert(sizeof(guide_args) == 56 && __builtin_offsetof(guide_args, npairs) == 52,
	      "guide_args layout is pinned");

GPUNVME_KERNEL void gpunvme_guide_read(const pqueue *pqs, const guide_args *args,
				       io_result *res)
{
	const guide_args a = *args;
	const uint32_t t = group_id() * group_size() + lane_id();
	const pqueue q = pqs[t % a.npairs];
	const uint32_t bytes = a.blocks << a.lba_shift;
	const uint64_t off = (uint64_t)t * bytes;
	pq_ticket ticket;
	cqe c;

	/* Submit: the library claims a command slot, builds PRP1/PRP2 (or a
	 * PRP list in the pair's pool), writes the SQE and rings. */
	int32_t rc = pq_submit_io(q, NVME_OPC_READ, a.nsid, a.slba + (uint64_t)t * a.blocks,
				  (uint16_t)(a.blocks - 1), a.page_dma, a.npages,
				  off, bytes, &ticket);
	/* Wait for this thread's own completion: bounded by the pair's
	 * deadline and the host's stop flag. rc > 0 is an NVMe status. */
	if (rc == OK)
		rc = pq_wait(q, ticket, &c);
	if (rc != OK) {
		note_error(res, rc);
		return;
	}

	/* The SSD wrote behind the GPU's caches: acquire, then check. */
	fence::payload_acquire();
	const uint64_t *w = (const uint64_t *)(a.buf + off);
	uint32_t bad = 0;

	for (uint32_t j = 0; j < bytes / 8; j++)
		bad += w[j] != pattern(a.seed, (a.slba << a.lba_shift) + off + 8ull * j);
	if (bad)
		atomic_add_relaxed(&res->mismatches, bad);
	atomic_add_relaxed(&res->completed, 1u);
}
