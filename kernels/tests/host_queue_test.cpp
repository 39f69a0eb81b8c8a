// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_queue_test.cpp - the device queue library compiled as plain host
// C++ (lanes are host threads). Checks the SQE builders byte-for-byte
// against the NVMe spec offsets and the CQ reap logic (phase bit, wrap,
// per-slot expected phase, timeout, stop flag, NVMe status) against a CQ in
// host memory into which the test itself posts spec-format CQEs. It tests
// the reap logic; it is not a controller model. Output: KTAP.

#include <gpunvme/gpunvme.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

using namespace gpunvme;

static int g_n, g_pass, g_fail;
static bool g_ok;

#define EXPECT(cond)                                                        \
	do {                                                                \
		if (!(cond)) {                                              \
			std::printf("# %s:%d: expected %s\n", __FILE__,     \
				    __LINE__, #cond);                       \
			g_ok = false;                                       \
		}                                                           \
	} while (0)

static void run(const char *name, void (*fn)())
{
	g_ok = true;
	fn();
	g_n++;
	if (g_ok)
		g_pass++;
	else
		g_fail++;
	std::printf("%s %d %s\n", g_ok ? "ok" : "not ok", g_n, name);
}

static uint64_t now_ns() { return wall_ticks(); }

// Little-endian field readers over the raw SQE bytes.
static uint64_t le(const uint8_t *b, int off, int len)
{
	uint64_t v = 0;
	for (int i = len - 1; i >= 0; i--)
		v = v << 8 | b[off + i];
	return v;
}

static void test_sqe_read_layout()
{
	sqe e = sqe_read(0x1234, 0x11223344, 0x0102030405060708ull, 7,
			 0xaabbccdd00001000ull, 0xaabbccdd00002000ull);
	uint8_t b[64];
	std::memcpy(b, &e, 64);

	EXPECT(b[0] == 0x02);
	EXPECT(b[1] == 0); // PRPs, not fused
	EXPECT(le(b, 2, 2) == 0x1234);
	EXPECT(le(b, 4, 4) == 0x11223344);
	EXPECT(le(b, 8, 16) == 0); // CDW2, CDW3, MPTR
	EXPECT(le(b, 16, 8) == 0);
	EXPECT(le(b, 24, 8) == 0xaabbccdd00001000ull);
	EXPECT(le(b, 32, 8) == 0xaabbccdd00002000ull);
	EXPECT(le(b, 40, 4) == 0x05060708); // CDW10 SLBA low
	EXPECT(le(b, 44, 4) == 0x01020304); // CDW11 SLBA high
	EXPECT(le(b, 48, 4) == 7);          // CDW12 NLB, 0-based
	for (int i = 52; i < 64; i++)
		EXPECT(b[i] == 0);
}

static void test_sqe_write_flush_layout()
{
	sqe w = sqe_write(7, 1, 42, 0, 0x1000, 0, NVME_RW_FUA);
	uint8_t b[64];
	std::memcpy(b, &w, 64);
	EXPECT(b[0] == 0x01);
	EXPECT(le(b, 2, 2) == 7);
	EXPECT(le(b, 40, 4) == 42 && le(b, 44, 4) == 0);
	EXPECT(le(b, 48, 4) == (1u << 30)); // NLB 0 = one block, FUA

	sqe f = sqe_flush(9, 3);
	std::memcpy(b, &f, 64);
	EXPECT(b[0] == 0x00);
	EXPECT(le(b, 2, 2) == 9 && le(b, 4, 4) == 3);
	for (int i = 8; i < 64; i++)
		EXPECT(b[i] == 0);
}

static void test_prp_pair()
{
	uint64_t p1, p2;
	EXPECT(prp_pair(0x10000, 4096, 4096, &p1, &p2) && p1 == 0x10000 && p2 == 0);
	EXPECT(prp_pair(0x10200, 4096, 4096, &p1, &p2) && p2 == 0x11000);
	EXPECT(prp_pair(0x10000, 8192, 4096, &p1, &p2) && p2 == 0x11000);
	EXPECT(!prp_pair(0x10200, 8192, 4096, &p1, &p2)); // 3 pages: PRP list
}

static void test_cqe_decode()
{
	// DW3 = CID 0xbeef | P | SC 0x80 | SCT 1 | DNR
	uint32_t st = 0x80 | 1u << 8 | 1u << 14;
	uint32_t dw3 = 0xbeef | 1u << 16 | st << 17;
	uint8_t b[16] = {};
	std::memcpy(b + 12, &dw3, 4);
	cqe c;
	std::memcpy(&c, b, 16);
	EXPECT(c.cid == 0xbeef);
	EXPECT((c.sf & 1) == 1);
	EXPECT(cqe_phase(dw3) == 1 && cqe_cid(dw3) == 0xbeef);
	EXPECT(cqe_status(dw3) == st);
	EXPECT(status_sc(st) == 0x80 && status_sct(st) == 1 && status_dnr(st));
	EXPECT(!status_ok(st) && status_ok(1u << 14)); // DNR alone is success
}

// A queue pair in host memory plus the test's side of it: it posts CQEs at
// its own tail with its own phase, exactly as the spec lays them out.
struct rig {
	std::vector<sqe> sq;
	std::vector<cqe> cq;
	uint32_t sq_db = 0, cq_db = 0, stop = 0;
	uint32_t post_tail = 0, post_phase = 1;
	qpair q{};

	rig(uint32_t depth, uint64_t timeout_ms = 200) : sq(depth), cq(depth)
	{
		std::memset((void *)cq.data(), 0, depth * sizeof(cqe));
		q.sq = sq.data();
		q.cq = cq.data();
		q.sq_db = &sq_db;
		q.cq_db = &cq_db;
		q.stop = &stop;
		q.tick_hz = 1000000000ull; // host ticks are ns
		q.timeout_ticks = timeout_ms * 1000000ull;
		q.depth = depth;
		q.phase = 1;
	}

	void post(uint16_t cid, uint32_t status = 0, uint32_t dw0 = 0)
	{
		uint8_t *b = (uint8_t *)&cq[post_tail];
		uint32_t dw2 = (uint32_t)(q.sq_tail & 0xffff); // SQHD
		uint32_t dw3 = cid | post_phase << 16 | status << 17;
		std::memcpy(b + 0, &dw0, 4);
		std::memcpy(b + 8, &dw2, 4);
		// Phase dword last, released: the reader keys on it.
		__atomic_store_n((uint32_t *)(b + 12), dw3, __ATOMIC_RELEASE);
		if (++post_tail == q.depth) {
			post_tail = 0;
			post_phase ^= 1;
		}
	}
};

// Lanes as threads: lane i runs fn(i); joining is the group barrier.
template <typename F> static void lanes(uint32_t n, F fn)
{
	std::vector<std::thread> t;
	for (uint32_t i = 0; i < n; i++)
		t.emplace_back([=] {
			host_lane_id = i;
			fn(i);
		});
	for (auto &x : t)
		x.join();
}

static void test_submit_lanes()
{
	rig r(8);
	EXPECT(sq_reserve(r.q, 3) == OK);
	lanes(3, [&](uint32_t i) {
		qpair q = r.q; // every lane has its own copy
		sq_put(q, i, sqe_read((uint16_t)(100 + i), 1, i, 0, 0x1000 * i, 0));
	});
	sq_ring(r.q, 3, true);
	EXPECT(r.sq_db == 3 && r.q.sq_tail == 3 && r.q.inflight == 3);
	for (int i = 0; i < 3; i++)
		EXPECT(r.sq[i].cid == 100 + i && r.sq[i].opc == NVME_OPC_READ);
	EXPECT(r.sq[3].opc == 0 && r.sq[3].cid == 0);
}

static void test_reap_lanes_out_of_order()
{
	rig r(8);
	sq_ring(r.q, 3, true);
	r.post(12);
	r.post(10);
	r.post(11);
	uint16_t got[3] = {};
	int32_t rc[3] = {1, 1, 1};
	lanes(3, [&](uint32_t i) {
		cqe c;
		rc[i] = cq_wait(r.q, i, &c);
		got[i] = c.cid;
	});
	EXPECT(rc[0] == OK && rc[1] == OK && rc[2] == OK);
	EXPECT(got[0] == 12 && got[1] == 10 && got[2] == 11); // CQ order
	cq_release(r.q, 3, true);
	EXPECT(r.cq_db == 3 && r.q.cq_head == 3 && r.q.inflight == 0);
	EXPECT(r.q.phase == 1);
}

static void test_wrap_and_slot_phase()
{
	rig r(4);
	uint32_t cid = 0;
	// 3 commands per batch on a depth-4 ring: batches straddle the end.
	for (int round = 0; round < 6; round++) {
		EXPECT(sq_reserve(r.q, 3) == OK);
		EXPECT(sq_reserve(r.q, 4) == ERR_BUSY); // depth-1 in flight max
		for (uint32_t i = 0; i < 3; i++)
			sq_put(r.q, i, sqe_read((uint16_t)(cid + i), 1, 0, 0, 0, 0));
		sq_ring(r.q, 3, true);
		EXPECT(r.sq_db == r.q.sq_tail);
		// Expected phase per slot flips exactly at the ring's end.
		for (uint32_t i = 0; i < 3; i++)
			EXPECT(cq_expected_phase(r.q, i) ==
			       (r.q.phase ^ (uint32_t)(r.q.cq_head + i >= 4)));
		for (uint32_t i = 0; i < 3; i++)
			r.post((uint16_t)(cid + i));
		for (uint32_t i = 0; i < 3; i++) {
			cqe c;
			EXPECT(cq_wait(r.q, i, &c) == OK);
			EXPECT(c.cid == cid + i);
		}
		uint32_t head_before = r.q.cq_head, phase_before = r.q.phase;
		cq_release(r.q, 3, true);
		EXPECT(r.q.cq_head == (head_before + 3) % 4);
		EXPECT(r.q.phase == (phase_before ^ (uint32_t)(head_before + 3 >= 4)));
		EXPECT(r.cq_db == r.q.cq_head);
		cid += 3;
	}
	// 18 entries on a depth-4 ring: head 2, four wraps, phase back to 1.
	EXPECT(r.q.cq_head == 2 && r.q.phase == 1 && r.q.sq_tail == 2);
}

static void test_stale_phase_times_out()
{
	rig r(4, 30);
	// One full lap: slots now hold phase-1 entries from the last lap.
	for (int i = 0; i < 4; i++) {
		sq_ring(r.q, 1, true);
		r.post((uint16_t)i);
		cqe c;
		EXPECT(cq_wait(r.q, 0, &c) == OK);
		cq_release(r.q, 1, true);
	}
	EXPECT(r.q.phase == 0);
	sq_ring(r.q, 1, true); // submitted, never completed
	cqe c;
	uint64_t t0 = now_ns();
	int32_t rc = cq_wait(r.q, 0, &c);
	uint64_t dt = now_ns() - t0;
	EXPECT(rc == ERR_TIMEOUT);          // stale phase-1 entry not taken
	EXPECT(dt >= 30000000ull && dt < 1000000000ull);
}

static void test_stop_flag()
{
	rig r(4, 100000); // asks for 100 s; the cap and the stop flag win
	sq_ring(r.q, 1, true);
	std::thread t([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		__atomic_store_n(&r.stop, 1u, __ATOMIC_RELEASE);
	});
	cqe c;
	uint64_t t0 = now_ns();
	int32_t rc = cq_wait(r.q, 0, &c);
	uint64_t dt = now_ns() - t0;
	t.join();
	EXPECT(rc == ERR_STOPPED);
	EXPECT(dt >= 20000000ull && dt < 1000000000ull);
}

static void test_nvme_status_returned()
{
	rig r(4);
	sq_ring(r.q, 2, true);
	uint32_t lba_range = 0x80; // SCT 0, SC 0x80 LBA out of range
	r.post(1, lba_range | 1u << 14);
	r.post(2);
	int32_t agg = 0;
	cqe c;
	EXPECT(cq_wait(r.q, 0, &c) == (int32_t)(lba_range | 1u << 14));
	EXPECT(status_sc((uint32_t)(c.sf >> 1)) == 0x80);
	// group_reap (one host lane): NVMe errors still consume the entry.
	rig g(4);
	sq_ring(g.q, 1, true);
	g.post(5, lba_range);
	EXPECT(group_reap(g.q, 0, 1, &c, &agg) == (int32_t)lba_range);
	EXPECT(g.q.error == OK && g.q.cq_head == 1 && g.cq_db == 1);
}

static void test_group_timeout_poisons()
{
	rig r(4, 10);
	int32_t agg = 0;
	cqe c;
	EXPECT(group_submit(r.q, 0, 1, sqe_flush(1, 1)) == OK);
	EXPECT(r.sq_db == 1 && r.sq[0].opc == NVME_OPC_FLUSH);
	EXPECT(group_reap(r.q, 0, 1, &c, &agg) == ERR_TIMEOUT);
	EXPECT(r.q.error == ERR_TIMEOUT);
	EXPECT(r.cq_db == 0 && r.q.cq_head == 0); // no ring on failure
	EXPECT(group_submit(r.q, 0, 1, sqe_flush(2, 1)) == ERR_IO);
	EXPECT(cq_wait(r.q, 0, &c) == ERR_IO);
}

static void test_invalid_setup()
{
	rig r(4);
	cqe c;
	EXPECT(cq_wait(r.q, 0, &c) == ERR_INVAL); // nothing in flight
	r.q.tick_hz = 0;                          // rate unknown: refuse
	EXPECT(sq_reserve(r.q, 1) == ERR_INVAL);
	rig one(1);
	EXPECT(sq_reserve(one.q, 1) == ERR_INVAL);
}

static void test_deadline_logic()
{
	const uint64_t hz = 100000000; // 100 MHz, the RDNA wall clock
	EXPECT(clamp_budget(100 * hz, hz) == 2 * hz);
	EXPECT(clamp_budget(hz / 2, hz) == hz / 2);

	// A clock stuck at -1 (HIP 5.2 wall_clock64 on gfx11) must end the wait.
	deadline d = deadline_start(~0ull, hz, hz);
	int st = DEADLINE_RUNNING;
	uint32_t reads = 0;
	while (st == DEADLINE_RUNNING && reads < 10 * CLOCK_STUCK_READS) {
		st = d.step(~0ull);
		reads++;
	}
	EXPECT(st == DEADLINE_CLOCK_STUCK && reads == CLOCK_STUCK_READS);

	// Expiry across counter wrap.
	d = deadline_start(~0ull - 10, 100, hz);
	EXPECT(d.step(~0ull) == DEADLINE_RUNNING);
	EXPECT(d.step(50) == DEADLINE_RUNNING);
	EXPECT(d.step(89) == DEADLINE_EXPIRED);

	// Zero timeout: one look, then expired.
	d = deadline_start(5, 0, hz);
	EXPECT(d.step(6) == DEADLINE_EXPIRED);
}

int main()
{
	static const struct {
		const char *name;
		void (*fn)();
	} tests[] = {
		{"sqe_read_layout", test_sqe_read_layout},
		{"sqe_write_flush_layout", test_sqe_write_flush_layout},
		{"prp_pair", test_prp_pair},
		{"cqe_decode", test_cqe_decode},
		{"submit_lanes", test_submit_lanes},
		{"reap_lanes_out_of_order", test_reap_lanes_out_of_order},
		{"wrap_and_slot_phase", test_wrap_and_slot_phase},
		{"stale_phase_times_out", test_stale_phase_times_out},
		{"stop_flag", test_stop_flag},
		{"nvme_status_returned", test_nvme_status_returned},
		{"group_timeout_poisons", test_group_timeout_poisons},
		{"invalid_setup", test_invalid_setup},
		{"deadline_logic", test_deadline_logic},
	};
	const int n = sizeof(tests) / sizeof(tests[0]);

	std::printf("KTAP version 1\n1..%d\n", n);
	for (const auto &t : tests)
		run(t.name, t.fn);
	std::printf("%d passed, %d failed\n", g_pass, g_fail);
	return g_fail ? 1 : 0;
}
