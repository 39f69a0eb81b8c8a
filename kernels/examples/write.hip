/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * write.hip - each workgroup drives one queue pair: fill the GPU buffer
 * with the pattern, write it out (the SSD DMAs straight from VRAM), then
 * one flush so a following read-verify sees media, not just cache.
 */
#include "example.h"

using namespace gx;

GPUNVME_KERNEL void gpunvme_write(qpair *qps, const io_args *args,
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
	cqe done;

	for (uint32_t k = 0; k < a.cmds_per_queue;) {
		uint32_t n = batch_size(q, a.cmds_per_queue - k);
		cmd_place c = place(a, queue, k + lane);

		if (lane < n) {
			uint64_t *w = (uint64_t *)(a.buf + c.off);

			if (!c.ok)
				note_error(r, ERR_INVAL);
			for (uint32_t j = 0; j < c.bytes / 8; j++)
				w[j] = pattern(a.seed,
					       (c.slba << a.lba_shift) +
						       8ull * j);
			/* The SSD reads it mid-kernel (payload contract:
			 * fence.h); sq_put's release orders it too. */
			fence::payload_release();
		}
		sync_lanes();
		if (group_failed(r))
			break;

		sqe e = sqe_write((uint16_t)(k + lane), a.nsid, c.slba,
				  (uint16_t)(a.blocks_per_cmd - 1), c.prp1,
				  c.prp2);
		rc = group_submit(q, lane, n, e);
		if (rc == OK)
			rc = group_reap(q, lane, n, &done, &agg);
		if (rc != OK)
			note_error(r, rc);
		else if (lane < n)
			atomic_add_relaxed(&r->completed, 1u);
		sync_lanes();
		if (group_failed(r))
			break;
		k += n;
	}

	sync_lanes();
	if (!group_failed(r)) {
		rc = group_submit(q, lane, 1, sqe_flush(0xffff, a.nsid));
		if (rc == OK)
			rc = group_reap(q, lane, 1, &done, &agg);
		if (rc != OK)
			note_error(r, rc);
	}
	if (lane == 0)
		r->ticks_total = wall_ticks() - t0;
	save_qpair(qps, q, res, q.error);
}
