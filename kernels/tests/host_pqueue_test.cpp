// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_pqueue_test.cpp - the per-thread API (pqueue.h) compiled as plain
// host C++. (1) Its slot protocol driven step by step: what an
// interleaving of two threads on one slot does, with the slot words set
// and read directly. (2) AMD's schedule: host threads as the lanes of one
// 64-lane wavefront in lockstep with a lane mask (host_wave.h), against a
// host thread that plays the controller (fetches every SQE up to the SQ
// doorbell in order, answers each with a CQE whose dword 0 is the SQE's
// SLBA, never posts into a full CQ); a lane that is done with a loop the
// wave has not left waits, masked, at reconverge(). It is not a
// controller model. KTAP out.

#include <gpunvme/gpunvme.h>

#include "host_wave.h"
#include "ktap.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
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

// A pair of `depth` in host memory, its shared state, and a controller
// thread (see the top of the file).
struct ctrl_rig {
	const uint32_t depth;
	std::vector<sqe> sq;
	std::vector<cqe> cq;
	std::vector<uint64_t> mem;
	alignas(64) uint32_t sq_db = 0;
	alignas(64) uint32_t cq_db = 0;
	pqueue q{};
	std::atomic<bool> quit{false};
	std::atomic<uint64_t> answered{0};
	uint32_t violations = 0;
	std::thread t;

	ctrl_rig(uint32_t d, uint64_t timeout_ms)
		: depth(d), sq(d), cq(d), mem((pq_bytes(d) + 7) / 8)
	{
		std::memset(sq.data(), 0, d * sizeof(sqe));
		std::memset(cq.data(), 0, d * sizeof(cqe));
		pq_init(mem.data(), d, 0, 0, 1);
		q.sq = sq.data();
		q.cq = cq.data();
		q.sq_db = &sq_db;
		q.cq_db = &cq_db;
		q.depth = d;
		q.tick_hz = 1000000000ull;
		q.timeout_ticks = timeout_ms * 1000000ull;
		pq_attach(q, mem.data());
		t = std::thread([this] { loop(); });
	}
	~ctrl_rig()
	{
		quit = true;
		t.join();
	}

	void loop()
	{
		uint32_t head = 0, tail = 0, phase = 1;
		const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
		while (!quit && std::chrono::steady_clock::now() < end) {
			const uint32_t db = __atomic_load_n(&sq_db, __ATOMIC_ACQUIRE);
			if (db >= depth) {
				violations++;
				return;
			}
			if (db == head) {
				std::this_thread::yield();
				continue;
			}
			const sqe e = sq[head];
			head = (head + 1) % depth;
			// Never post into a full CQ: wait for the head doorbell.
			while (!quit && std::chrono::steady_clock::now() < end &&
			       (tail + 1) % depth == __atomic_load_n(&cq_db, __ATOMIC_ACQUIRE))
				std::this_thread::yield();
			cqe &c = cq[tail];
			c.dw0 = e.cdw10;
			c.dw1 = 0;
			c.sqhd = (uint16_t)head;
			c.sqid = 1;
			__atomic_store_n((uint32_t *)&c + 3, (uint32_t)e.cid | phase << 16, __ATOMIC_RELEASE);
			if (++tail == depth) {
				tail = 0;
				phase ^= 1u;
			}
			answered++;
		}
	}
};

// One read of LBA slba, at page 0 of a pretend buffer.
static const uint64_t g_page[2] = {0x100000, 0x101000};

static int32_t rd(const pqueue &q, uint64_t slba, pq_ticket *t, const pq_held *h = nullptr)
{
	return pq_submit_io(q, NVME_OPC_READ, 1, slba, 0, g_page, 2, 0, 512, t, h);
}

using steady_t = std::chrono::steady_clock::time_point;

static uint64_t ms_since(steady_t t0)
{
	return (uint64_t)std::chrono::duration_cast<std::chrono::milliseconds>(
		std::chrono::steady_clock::now() - t0).count();
}

// A wave can wait on itself (review s3, 3.5) and must not: a 64-lane wave
// with two lanes on (0 and 63), one pair of depth 5 (4 slots). Lane 0
// holds a live ticket (1) and lane 63 two (2, 3), all completed, none
// taken; ticket 0 was taken. Both lanes claim again, lane 0 first:
// lane 0 gets ticket 4 (slot 0, free at once: ticket 0 was taken), lane 63
// ticket 5 (slot 1: free once ticket 1, lane 0's, is taken). Each passes
// its live tickets as held. The old AMD claim: lane 0's slot is free, so it
// leaves its claim loop and sits masked until the wave leaves it, never
// taking ticket 1; lane 63 spins into its deadline (ERR_TIMEOUT, the pair
// poisoned). Now: the wave claims as one, and lane 0 keeps serving its held
// ticket until lane 63's slot is free too.
static void test_wave_self_wait()
{
	ctrl_rig r(5, 400);
	hostwave::wave w(1ull | 1ull << 63);
	int32_t rc[64][4];
	cqe got[64][4];
	for (auto &x : rc)
		for (auto &y : x)
			y = 1;
	const auto t0 = std::chrono::steady_clock::now();
	bool ok = w.run([&](uint32_t lane) {
		const pqueue q = r.q;
		pq_ticket t[3];
		int32_t hrc[3] = {ERR_AGAIN, ERR_AGAIN, ERR_AGAIN};
		cqe c{};
		// Ticket 0 (lane 0, waited for and taken), 1 (lane 0, live).
		w.branch(lane, lane == 0, [&] {
			int32_t a = rd(q, 100, &t[0]);
			if (a == OK)
				a = pq_wait(q, t[0], &c);
			rc[lane][0] = a;
			rc[lane][1] = rd(q, 101, &t[0]);
		});
		// Tickets 2 and 3 (lane 63, live).
		w.branch(lane, lane == 63, [&] {
			rc[lane][0] = rd(q, 102, &t[0]);
			rc[lane][1] = rd(q, 103, &t[1]);
		});
		// Everything answered, so the held tickets are complete.
		while (r.answered < 4 && ms_since(t0) < 5000)
			std::this_thread::yield();
		if (lane == 63) // lane 0 takes its ticket first
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
		const uint32_t nh = lane == 0 ? 1 : 2;
		pq_held h = {t, hrc, nh};
		pq_ticket nt;
		rc[lane][2] = rd(q, 200 + lane, &nt, &h);
		w.reconverge(lane); // the wave leaves the claim loop together
		rc[lane][3] = rc[lane][2] == OK ? pq_wait(q, nt, &got[lane][3]) : rc[lane][2];
		for (uint32_t k = 0; k < nh; k++)
			if (hrc[k] == ERR_AGAIN)
				hrc[k] = pq_wait(q, t[k], nullptr);
		for (uint32_t k = 0; k < nh; k++)
			if (hrc[k] != OK)
				rc[lane][3] = hrc[k];
	});
	const pq_shared *s = r.q.st;
	char why[200];
	std::snprintf(why, sizeof(why),
		      "wave ok %d; lane 0: %d %d claim %d wait %d; lane 63: %d %d claim %d wait %d; error %d, tickets %llu, cqes %llu, %llu ms",
		      ok, rc[0][0], rc[0][1], rc[0][2], rc[0][3], rc[63][0], rc[63][1], rc[63][2],
		      rc[63][3], s->error, (unsigned long long)s->cid_ticket,
		      (unsigned long long)s->cqes, (unsigned long long)ms_since(t0));
	bool all = ok && s->error == 0 && s->cid_ticket == 6 && s->cqes == 6 && r.violations == 0;
	for (uint32_t l : {0u, 63u})
		for (int k = 0; k < 4; k++)
			all = all && rc[l][k] == OK;
	all = all && got[0][3].dw0 == 200 && got[63][3].dw0 == 263;
	result(all, "wave_lane_waits_for_a_ticket_its_done_lane_holds", why);
}

// More lanes of one wave on a pair than it has command slots: 64 lanes, a
// pair of depth 33. The old claim: lanes with tickets 32..63 wait for
// tickets 0..31, whose lanes sit masked (done with the claim) until the
// deadline (ERR_TIMEOUT, poisoned pair). Now: every lane gets ERR_INVAL at
// once, no ticket taken, the pair not poisoned.
static void test_wave_more_lanes_than_slots()
{
	ctrl_rig r(33, 400);
	hostwave::wave w(~0ull);
	int32_t rc[64];
	for (auto &x : rc)
		x = 1;
	const auto t0 = std::chrono::steady_clock::now();
	bool ok = w.run([&](uint32_t lane) {
		pq_ticket t;
		rc[lane] = rd(r.q, lane, &t);
		w.reconverge(lane);
		if (rc[lane] == OK)
			rc[lane] = pq_wait(r.q, t, nullptr);
	});
	const uint64_t ms = ms_since(t0);
	uint32_t inval = 0;
	for (int32_t x : rc)
		inval += x == ERR_INVAL;
	char why[160];
	std::snprintf(why, sizeof(why), "wave ok %d; %u of 64 ERR_INVAL (lane 0 %d, lane 63 %d), error %d, tickets %llu, %llu ms",
		      ok, inval, rc[0], rc[63], r.q.st->error,
		      (unsigned long long)r.q.st->cid_ticket, (unsigned long long)ms);
	result(ok && inval == 64 && r.q.st->error == 0 && r.q.st->cid_ticket == 0 && ms < 300,
	       "wave_more_lanes_than_slots_refused_at_once", why);
}

// Full waves, sharing pairs, many rounds: two 32-lane waves (lane masks
// 0x5555... and ~0 >> 32) on one pair of depth 33, each lane pq_io() of 6
// LBAs with a window of 2 (it holds a ticket while it claims the next, so
// the two waves' blocks interleave and a claim can need a ticket the
// other wave, or a lane of its own, holds). Every command completes with
// its own SLBA's answer, the pair is left consistent.
static void test_two_waves_pq_io()
{
	ctrl_rig r(33, 1000);
	hostwave::wave a(0x5555555555555555ull), b(0xffffffffull);
	int32_t rc[2][64];
	for (auto &x : rc)
		for (auto &y : x)
			y = 1;
	auto lane_fn = [&](int wv) {
		return [&, wv](uint32_t lane) {
			const uint64_t slba = (uint64_t)(wv * 64 + lane) * 6;
			rc[wv][lane] = pq_io(r.q, NVME_OPC_READ, 1, slba, 9, g_page, 2, 0, 6 * 512, 2);
		};
	};
	// One command per LBA: a 512-byte max transfer.
	r.q.max_transfer = 512;
	bool oka = false, okb = false;
	std::thread ta([&] { oka = a.run(lane_fn(0)); });
	std::thread tb([&] { okb = b.run(lane_fn(1)); });
	ta.join();
	tb.join();
	uint32_t bad = 0;
	for (int wv = 0; wv < 2; wv++)
		for (uint32_t l = 0; l < 64; l++)
			if (((wv ? 0xffffffffull : 0x5555555555555555ull) >> l) & 1u)
				bad += rc[wv][l] != OK;
	const pq_shared *s = r.q.st;
	char why[200];
	std::snprintf(why, sizeof(why), "waves ok %d %d; %u lanes failed (first wave lane 0: %d); error %d, tickets %llu, cqes %llu, answered %llu",
		      oka, okb, bad, rc[0][0], s->error, (unsigned long long)s->cid_ticket,
		      (unsigned long long)s->cqes, (unsigned long long)r.answered.load());
	result(oka && okb && bad == 0 && s->error == 0 && s->cid_ticket == 64 * 6 &&
		       s->cqes == 64 * 6 && r.answered == 64 * 6 && r.violations == 0,
	       "two_waves_pq_io_window_2_share_a_pair", why);
}

// The ticket a pq_ticket stands for on a pair of depth d.
static uint64_t ticket_no(pq_ticket t, uint32_t depth)
{
	return (uint64_t)(t.seq - 1) / 4 * (depth - 1) + t.slot;
}

// One block per wave and pair, whatever else claims meanwhile: a 64-lane
// wave whose even lanes use pair A and odd lanes pair B (depth 65 both),
// 20 rounds of submit + wait, while a host thread on each pair claims and
// waits as fast as it can. Every round, the lanes on one pair hold
// consecutive tickets in lane order (the old per-lane add let the other
// thread's claims fall between them, which is what lets a wave wait on
// itself); every command completes.
static void test_wave_blocks_are_contiguous()
{
	ctrl_rig a(65, 1000), b(65, 1000);
	hostwave::wave w(~0ull);
	std::atomic<bool> stop{false};
	std::atomic<uint32_t> other_bad{0};
	auto other = [&](ctrl_rig &r) {
		for (uint64_t k = 0; !stop && k < 100000; k++) {
			pq_ticket t;
			if (rd(r.q, 9000 + k, &t) != OK || pq_wait(r.q, t, nullptr) != OK) {
				other_bad++;
				return;
			}
		}
	};
	std::thread oa(other, std::ref(a)), ob(other, std::ref(b));
	constexpr uint32_t ROUNDS = 20;
	static uint64_t tk[ROUNDS][64];
	static int32_t rc[ROUNDS][64];
	bool ok = w.run([&](uint32_t lane) {
		ctrl_rig &r = lane % 2 ? b : a;
		for (uint32_t k = 0; k < ROUNDS; k++) {
			pq_ticket t{};
			rc[k][lane] = rd(r.q, lane * 100 + k, &t);
			tk[k][lane] = ticket_no(t, r.depth);
			w.reconverge(lane);
			if (rc[k][lane] == OK)
				rc[k][lane] = pq_wait(r.q, t, nullptr);
			w.reconverge(lane);
		}
	});
	stop = true;
	oa.join();
	ob.join();
	uint32_t gaps = 0, fails = 0;
	for (uint32_t k = 0; k < ROUNDS; k++)
		for (uint32_t l = 0; l < 64; l++) {
			fails += rc[k][l] != OK;
			if (l >= 2)
				gaps += tk[k][l] != tk[k][l - 2] + 1;
		}
	char why[200];
	std::snprintf(why, sizeof(why), "wave ok %d; %u of %u lanes off their block, %u failed, other threads %u failed; errors %d %d",
		      ok, gaps, ROUNDS * 62, fails, other_bad.load(), a.q.st->error, b.q.st->error);
	result(ok && gaps == 0 && fails == 0 && other_bad == 0 && a.q.st->error == 0 &&
		       b.q.st->error == 0,
	       "wave_takes_one_ticket_block_per_pair_against_other_claimers", why);
}

int main()
{
	std::printf("KTAP version 1\n1..6\n");
	test_double_take();
	test_spent_ticket();
	test_wave_self_wait();
	test_wave_more_lanes_than_slots();
	test_two_waves_pq_io();
	test_wave_blocks_are_contiguous();
	return summary();
}
