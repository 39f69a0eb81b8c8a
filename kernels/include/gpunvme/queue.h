/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * queue.h - a GPU-side view of one NVMe queue pair: claim SQ slots, ring
 * the SQ doorbell, reap CQEs by phase bit, ring the CQ head doorbell.
 *
 * Model: one workgroup drives one queue pair. Every lane keeps its own copy
 * of the qpair (a kernel argument or a load from memory) and advances it
 * identically, so no shared queue state and no atomics on the hot path;
 * lane i fills slot tail+i and reaps slot head+i, one lane rings. The SQ
 * and CQ have the same depth and are paired 1:1, so "at most depth-1
 * commands in flight" is the whole flow control: a completed command's SQ
 * slot (and every slot before it) has been fetched by the controller.
 *
 * Every wait is bounded (clock.h) and can be aborted by the host's stop
 * flag; a failed wait poisons the pair (error) because the ring position
 * is then unknown, and the host must reset the queue.
 */
#ifndef GPUNVME_QUEUE_H
#define GPUNVME_QUEUE_H

#include "clock.h"
#include "compat.h"
#include "fence.h"
#include "nvme.h"

namespace gpunvme {

/*
 * Results: 0 ok; > 0 the CQE's 15-bit NVMe status field (cqe_status());
 * < 0 a negated Linux errno, so host code can print it with strerror().
 */
enum : int32_t {
	OK = 0,
	ERR_IO = -5,         /* pair poisoned by an earlier failure */
	ERR_BUSY = -16,      /* not enough free slots */
	ERR_INVAL = -22,     /* bad argument or qpair setup */
	ERR_CLOCK = -62,     /* ETIME: wall clock does not advance */
	ERR_TIMEOUT = -110,  /* ETIMEDOUT: no completion before deadline */
	ERR_STOPPED = -125,  /* ECANCELED: host raised the stop flag */
};

/* Filled by the host; passed to the kernel; written back by lane 0. */
struct qpair {
	sqe *sq;                       /* SQ ring, depth entries (shared: shadow SQ) */
	const cqe *cq;                 /* CQ ring (shared: the module's mirror) */
	volatile uint32_t *sq_db;      /* MMIO doorbell (raw) or shadow cell (shared) */
	volatile uint32_t *cq_db;
	const volatile uint32_t *stop; /* host sets non-zero to abort; may be null */
	uint64_t timeout_ticks;        /* per wait, wall-clock ticks */
	uint64_t tick_hz;              /* wall-clock rate, from the host */
	uint32_t depth;                /* entries in SQ and in CQ */
	uint32_t sq_tail;
	uint32_t cq_head;
	uint32_t phase;                /* phase expected at cq_head (1 after reset) */
	uint32_t inflight;             /* submitted, not yet reaped */
	int32_t error;                 /* first failure; non-zero = poisoned */
};

GPUNVME_HD void qpair_fail(qpair &q, int32_t err)
{
	if (q.error == OK)
		q.error = err;
}

/* Can n more commands go in? Every lane computes the same answer. */
GPUNVME_HD int32_t sq_reserve(const qpair &q, uint32_t n)
{
	if (q.error != OK)
		return ERR_IO;
	if (q.depth < 2 || n == 0 || q.tick_hz == 0)
		return ERR_INVAL;
	if (q.inflight + n > q.depth - 1)
		return ERR_BUSY;
	return OK;
}

GPUNVME_HD uint32_t sq_slot(const qpair &q, uint32_t i)
{
	return (q.sq_tail + i) % q.depth;
}

/*
 * An SQE as four 16-byte stores straight from registers (NVIDIA
 * st.v2.u64, AMD global_store_dwordx4/b128), never byte or word copies.
 */
GPUNVME_HD void sqe_store(sqe *dst, const sqe &e)
{
	const uint64_t *w = (const uint64_t *)&e;
#if defined(GPUNVME_DEV_NVIDIA)
	for (int i = 0; i < 4; i++)
		asm volatile("st.v2.u64 [%0], {%1, %2};"
			     :: "l"((char *)dst + 16 * i), "l"(w[2 * i]),
			     "l"(w[2 * i + 1]) : "memory");
#elif defined(GPUNVME_DEV_AMD)
	/* Global address space: global_store_dwordx4/b128, not flat. The
	 * marker (no instructions; the clobber keeps the stores after it)
	 * tells make isa-check where SQE stores begin: every path from here
	 * to an SQ doorbell must pass a release_system(). */
	typedef uint64_t v2u64 __attribute__((ext_vector_type(2)));
	typedef __attribute__((address_space(1))) v2u64 global_v2u64;
	asm volatile("; gpunvme:sqe" ::: "memory");
	for (int i = 0; i < 4; i++) {
		v2u64 v = {w[2 * i], w[2 * i + 1]};
		((global_v2u64 *)dst)[i] = v;
	}
#else
	uint64_t *d = (uint64_t *)dst;
	for (int i = 0; i < 8; i++)
		d[i] = w[i];
#endif
}

/*
 * Lane i writes the i-th new SQE (sqe_store(): 4x 16-byte stores), then
 * this lane's own system-scope release, so the entry is out of the GPU
 * before the group barrier that precedes the doorbell: the ringing lane
 * cannot order other lanes' stores by itself.
 */
GPUNVME_HD void sq_put(qpair &q, uint32_t i, const sqe &e)
{
	sqe_store(&q.sq[sq_slot(q, i)], e);
	fence::release_system();
}

/* All lanes, after sync_lanes(): advance by n; only the ringer stores. */
GPUNVME_HD void sq_ring(qpair &q, uint32_t n, bool ringer)
{
	q.sq_tail = (q.sq_tail + n) % q.depth;
	q.inflight += n;
	if (ringer)
		fence::sq_doorbell_write(q.sq_db, q.sq_tail);
}

/* CQ slot and the phase it must carry: flips once per wrap past the end. */
GPUNVME_HD uint32_t cq_slot(const qpair &q, uint32_t i)
{
	return (q.cq_head + i) % q.depth;
}

GPUNVME_HD uint32_t cq_expected_phase(const qpair &q, uint32_t i)
{
	return q.phase ^ (uint32_t)(q.cq_head + i >= q.depth);
}

GPUNVME_HD bool stop_requested(const qpair &q)
{
	return q.stop && fence::poll_load(q.stop) != 0;
}

/*
 * The host's stop flag is read once every CQ_STOP_EVERY polls of a wait
 * (and on the first): one more system-scope read per poll would double a
 * poll's cost against host memory. A wait still ends at its fixed-rate
 * clock deadline (clock.h), which is checked on every poll.
 */
constexpr uint32_t CQ_STOP_EVERY = 64;

/*
 * Lane i waits for the i-th outstanding completion. CQEs land in
 * completion order, not submission order: out->cid says which command
 * this one is. Returns OK, the NVMe status (> 0) or a negative error.
 *
 * Each poll is ONE 16-byte load of the whole entry (fence::poll_cqe(),
 * phase in its last dword): the poll that sees the phase already holds
 * dwords 0-2. Build with -DGPUNVME_CQ_POLL_DW3 for the form before it
 * (poll dword 3 alone with ld.acquire, then three more loads), kept for
 * comparison (kernels/bench measures both in one run). Between empty
 * polls: fence::poll_pause() when built with -DGPUNVME_POLL_BACKOFF=1.
 */
GPUNVME_HD int32_t cq_wait(const qpair &q, uint32_t i, cqe *out)
{
	if (q.error != OK)
		return ERR_IO;
	if (i >= q.inflight || q.tick_hz == 0)
		return ERR_INVAL;

	const cqe *e = &q.cq[cq_slot(q, i)];
	const uint32_t want = cq_expected_phase(q, i);
	deadline d = deadline_start(wall_ticks(), q.timeout_ticks, q.tick_hz);

	for (uint32_t k = 0;; k++) {
#if defined(GPUNVME_CQ_POLL_DW3)
		const volatile uint32_t *dw3 =
			(const volatile uint32_t *)((const char *)e + CQE_DW3_OFFSET);
		uint32_t w[4];
		w[3] = fence::poll_load(dw3);
		if (cqe_phase(w[3]) == want) {
			fence::acquire_system();
			const volatile uint32_t *s = (const volatile uint32_t *)e;
			w[0] = s[0];
			w[1] = s[1];
			w[2] = s[2];
#else
		uint32_t w[4];
		fence::poll_cqe(e, w);
		if (cqe_phase(w[3]) == want) {
			/* Phase seen, the entry with it: order what follows
			 * (payload loads) after it. */
			fence::acquire_system();
#endif
			const uint32_t v = w[3];
			out->dw0 = w[0];
			out->dw1 = w[1];
			out->sqhd = (uint16_t)w[2];
			out->sqid = (uint16_t)(w[2] >> 16);
			out->cid = cqe_cid(v);
			out->sf = (uint16_t)(v >> 16);
			return status_ok(cqe_status(v)) ? OK
							: (int32_t)cqe_status(v);
		}
		if (k % CQ_STOP_EVERY == 0 && stop_requested(q))
			return ERR_STOPPED;
		int st = d.step(wall_ticks());
		if (st == DEADLINE_EXPIRED)
			return ERR_TIMEOUT;
		if (st == DEADLINE_CLOCK_STUCK)
			return ERR_CLOCK;
#if GPUNVME_POLL_BACKOFF
		fence::poll_pause();
#endif
	}
}

/* All lanes, after sync_lanes(): consume n CQEs; the ringer frees them. */
GPUNVME_HD void cq_release(qpair &q, uint32_t n, bool ringer)
{
	uint32_t head = q.cq_head + n;

	if (head >= q.depth) {
		head -= q.depth;
		q.phase ^= 1u;
	}
	q.cq_head = head;
	q.inflight -= n;
	if (ringer)
		fence::cq_doorbell_write(q.cq_db, q.cq_head);
}

/*
 * Whole-group helpers for the one-workgroup-per-pair model. Every lane of
 * the group must call them (they contain barriers); n <= group size,
 * lanes >= n idle.
 * agg is a workgroup-shared int32 used to agree on the outcome.
 * In host builds the barrier is the harness's host_barrier (compat.h):
 * with one installed, N threads run these exactly as N GPU lanes do (the
 * host unit test and kernels/hostrun do); without one, use one lane.
 */
GPUNVME_HD int32_t group_submit(qpair &q, uint32_t lane, uint32_t n,
				const sqe &e)
{
	int32_t rc = sq_reserve(q, n);

	if (rc != OK)
		return rc; /* uniform: every lane saw the same q */
	if (lane < n)
		sq_put(q, lane, e);
	sync_lanes();
	sq_ring(q, n, lane == 0);
	return OK;
}

GPUNVME_HD int32_t group_reap(qpair &q, uint32_t lane, uint32_t n, cqe *out,
			      int32_t *agg)
{
	int32_t rc = lane < n ? cq_wait(q, lane, out) : OK;

	if (lane == 0)
		atomic_store_relaxed(agg, OK);
	sync_lanes();
	if (rc < 0)
		atomic_store_relaxed(agg, rc);
	sync_lanes();
	int32_t worst = atomic_load_relaxed(agg);
	sync_lanes(); /* everyone read agg before anyone resets it again */
	if (worst < 0) {
		/* Ring position unknown now: poison, don't ring. */
		qpair_fail(q, worst);
		return rc < 0 ? rc : worst;
	}
	cq_release(q, n, lane == 0);
	return rc; /* OK or this lane's NVMe status */
}

} /* namespace gpunvme */

#endif /* GPUNVME_QUEUE_H */
