/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * read_verify.hip - each workgroup drives one queue pair: read
 * cmds_per_queue commands into the GPU buffer (the SSD DMAs straight into
 * VRAM), then check every 64-bit word against the pattern that
 * write.hip stored.
 */
#include "example.h"

using namespace gx;

GPUNVME_KERNEL void gpunvme_read_verify(qpair *qps, const io_args *args,
					io_result *res)
{
	GPUNVME_SHARED int32_t agg;
	const io_args a = *args;
	const uint32_t lane = lane_id();
	const uint32_t queue = group_id();
	qpair q = load_qpair(qps);
	io_result *r = &res[queue];
	uint64_t t0 = wall_ticks();
	int32_t rc = OK;

	for (uint32_t k = 0; k < a.cmds_per_queue;) {
		uint32_t n = batch_size(q, a.cmds_per_queue - k);
		cmd_place c = place(a, queue, k + lane);
		sqe e = sqe_read((uint16_t)(k + lane), a.nsid, c.slba,
				 (uint16_t)(a.blocks_per_cmd - 1), c.prp1,
				 c.prp2);
		cqe done;

		if (lane < n && !c.ok)
			note_error(r, ERR_INVAL);
		sync_lanes();
		if (group_failed(r))
			break; /* uniform: read after the barrier */

		rc = group_submit(q, lane, n, e);
		if (rc == OK)
			rc = group_reap(q, lane, n, &done, &agg);
		if (rc != OK)
			note_error(r, rc);
		sync_lanes();
		if (group_failed(r))
			break;

		/* The payload came from a peer: drop stale lines first
		 * (payload contract: fence.h). */
		fence::payload_acquire();
		if (lane < n) {
			const uint64_t *w = (const uint64_t *)(a.buf + c.off);
			uint32_t bad = 0;

			for (uint32_t j = 0; j < c.bytes / 8; j++)
				bad += w[j] != pattern(a.seed,
						       (c.slba << a.lba_shift) +
							       8ull * j);
			atomic_add_relaxed(&r->mismatches, bad);
			atomic_add_relaxed(&r->completed, 1u);
		}
		k += n;
	}
	if (lane == 0)
		r->ticks_total = wall_ticks() - t0;
	save_qpair(qps, q, res, q.error);
}
