// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_pqueue_test.cpp - the per-thread API (pqueue.h) compiled as plain
// host C++, its slot protocol driven step by step: what an interleaving
// of two threads on one slot does, with the slot words set and read
// directly. KTAP out.

#include <gpunvme/gpunvme.h>

#include "ktap.h"

#include <cstdio>
#include <cstring>
#include <vector>

using namespace gpunvme;

// One pair's shared state in host memory, no controller: the tests play
// the reaper by writing slot words themselves.
struct pq_rig {
	static constexpr uint32_t DEPTH = 4;
	std::vector<uint64_t> mem;
	sqe sq[DEPTH];
	cqe cq[DEPTH];
	uint32_t sq_db = 0, cq_db = 0;
	pqueue q{};

	pq_rig() : mem((pq_bytes(DEPTH) + 7) / 8)
	{
		std::memset(sq, 0, sizeof(sq));
		std::memset(cq, 0, sizeof(cq));
		pq_init(mem.data(), DEPTH, 0, 0, 1);
		q.sq = sq;
		q.cq = cq;
		q.sq_db = &sq_db;
		q.cq_db = &cq_db;
		q.depth = DEPTH;
		q.tick_hz = 1000000000ull;
		q.timeout_ticks = q.tick_hz / 10;
		pq_attach(q, mem.data());
	}

	// The reaper's routing of a completion into slot s: fields, then seq.
	void route(uint32_t s, uint32_t seq_completed, uint32_t dw0)
	{
		q.slots[s].dw0 = dw0;
		q.slots[s].dw2 = 1u << 16;
		q.slots[s].dw3 = s; // CID s, phase 0, status 0
		__atomic_store_n(&q.slots[s].seq, seq_completed, __ATOMIC_RELEASE);
	}
};

// Two waiters on one ticket (pqueue.h: API misuse, but it must not hand
// one of them the next round's result nor rewind the slot). A takes round
// 0's result and frees the slot; a new owner submits and completes round
// 1; B, which saw round 0 complete too, takes only now: it must get
// ERR_INVAL, leave the slot at round 1's "completed", and round 1's owner
// must still get round 1's result.
static void test_double_take()
{
	pq_rig r;
	const pq_ticket t0 = {0, 1}; // slot 0, round 0, submitted
	cqe c{};

	r.route(0, 2, 111);
	const int32_t a = pq_take(r.q, t0, &c);
	const bool a_ok = a == OK && c.dw0 == 111 && r.q.slots[0].seq == 4;

	// Round 1: claimed (seq 4), submitted (5), completed (6).
	const pq_ticket t1 = {0, 5};
	r.q.slots[0].seq = 5;
	r.route(0, 6, 222);
	c = cqe{};
	const int32_t b = pq_take(r.q, t0, &c); // the second waiter, late
	const uint32_t after_b = r.q.slots[0].seq;
	const int32_t o = pq_take(r.q, t1, &c);

	char why[160];
	std::snprintf(why, sizeof(why),
		      "first take %d (ok %d); second take %d dw0 %u, slot seq after it %u (want %d, 6); round 1's take %d dw0 %u",
		      a, a_ok, b, c.dw0, after_b, ERR_INVAL, o, c.dw0);
	result(a_ok && b == ERR_INVAL && after_b == 6 && o == OK && c.dw0 == 222 &&
		       r.q.slots[0].seq == 8,
	       "double_take_second_waiter_gets_einval_and_slot_not_rewound", why);
}

// A spent ticket stays spent: pq_test() and pq_take() on it again.
static void test_spent_ticket()
{
	pq_rig r;
	const pq_ticket t0 = {1, 1};
	cqe c{};

	r.route(1, 2, 7);
	const int32_t first = pq_test(r.q, t0, &c);
	const int32_t again = pq_test(r.q, t0, &c);
	const int32_t take = pq_take(r.q, t0, &c);
	char why[120];
	std::snprintf(why, sizeof(why), "test %d, test again %d, take again %d, seq %u",
		      first, again, take, r.q.slots[1].seq);
	result(first == OK && again == ERR_INVAL && take == ERR_INVAL && r.q.slots[1].seq == 4,
	       "spent_ticket_is_einval", why);
}

int main()
{
	std::printf("KTAP version 1\n1..2\n");
	test_double_take();
	test_spent_ticket();
	return summary();
}
