/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * sweep.hip - latency/throughput sweep: the host launches Q workgroups (Q
 * queue pairs) of D lanes (queue depth D, capped at depth-1); each group
 * runs `rounds` batches of D reads of blocks_per_cmd blocks and records
 * the wall-clock ticks per batch. No verification: this measures the path.
 */
#include "example.h"

using namespace gx;

GPUNVME_KERNEL void gpunvme_sweep(qpair *qps, const io_args *args,
				  io_result *res)
{
	GPUNVME_SHARED int32_t agg;
	const io_args a = *args;
	const uint32_t lane = lane_id();
	const uint32_t queue = group_id();
	qpair q = load_qpair(qps);
	io_result *r = &res[queue];
	uint32_t n = batch_size(q, a.cmds_per_queue);
	/* Each lane re-reads its own slice every round: no cache effects on
	 * the GPU side, and the buffer stays small. */
	cmd_place c = place(a, queue, lane % (a.cmds_per_queue ? a.cmds_per_queue : 1));
	sqe e = sqe_read((uint16_t)lane, a.nsid, c.slba,
			 (uint16_t)(a.blocks_per_cmd - 1), c.prp1, c.prp2);
	uint64_t total = 0, worst = 0;
	cqe done;

	if (lane < n && !c.ok)
		note_error(r, ERR_INVAL);
	sync_lanes();
	for (uint32_t round = 0; round < a.rounds; round++) {
		if (group_failed(r))
			break;
		uint64_t t0 = wall_ticks();
		int32_t rc = group_submit(q, lane, n, e);

		if (rc == OK)
			rc = group_reap(q, lane, n, &done, &agg);
		uint64_t dt = wall_ticks() - t0;
		if (rc != OK)
			note_error(r, rc);
		else if (lane < n)
			atomic_add_relaxed(&r->completed, 1u);
		total += dt;
		worst = dt > worst ? dt : worst;
		sync_lanes();
	}
	if (lane == 0) {
		r->ticks_total = total;
		r->ticks_max_round = worst;
	}
	save_qpair(qps, q, res, q.error);
}
