// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// host_queue_test.cpp - the device queue library compiled as plain host
// C++ (lanes are host threads). Checks the SQE builders byte-for-byte
// against the NVMe spec offsets and the CQ reap logic (phase bit, wrap,
// per-slot expected phase, timeout, stop flag, NVMe status) against a CQ in
// host memory into which the test itself posts spec-format CQEs. It tests
// the reap logic; it is not a controller model. Output: KTAP.

#include <gpunvme/gpunvme.h>

#include "../hostrun/host_group.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

using namespace gpunvme;

static int g_n, g_pass, g_fail;
static std::atomic<bool> g_ok; // lanes may EXPECT too

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

	// Waits that should succeed get the library's whole 2 s cap: the
	// controller here is a host thread, which a loaded 2-core machine can
	// leave unscheduled for longer than 200 ms (seen: group tests timing
	// out at load 5). The tests of timeouts pass their own short values.
	rig(uint32_t depth, uint64_t timeout_ms = 2000) : sq(depth), cq(depth)
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
		post_sqhd(cid, status, q.sq_tail, dw0);
	}

	void post_sqhd(uint16_t cid, uint32_t status, uint32_t sqhd,
		       uint32_t dw0 = 0, uint16_t sqid = 0)
	{
		uint8_t *b = (uint8_t *)&cq[post_tail];
		uint32_t dw2 = (sqhd & 0xffff) | (uint32_t)sqid << 16;
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

// Lanes as threads for the step functions: lane i runs fn(i); the join is
// the barrier between steps. The group helpers run with real barriers below
// (hostgroup::run_group).
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

// ---- the group helpers with many lanes, through the real barrier ---------

static const hostgroup::limits LIMITS{std::chrono::milliseconds(10000),
				      std::chrono::milliseconds(60000)};

static void test_host_barrier()
{
	// No hook in this thread: sync_lanes() is the plain fence it always was.
	EXPECT(host_barrier == nullptr && host_group_size == 1);
	sync_lanes();

	// Installed: no lane leaves a barrier before all have reached it.
	const uint32_t L = 8, ITER = 300;
	std::vector<uint32_t> arrived(ITER, 0);
	std::atomic<uint32_t> early{0}, bad_id{0};
	bool ok = hostgroup::run_group(3, L, [&](uint32_t lane) {
		for (uint32_t k = 0; k < ITER; k++) {
			__atomic_fetch_add(&arrived[k], 1u, __ATOMIC_RELAXED);
			sync_lanes();
			if (__atomic_load_n(&arrived[k], __ATOMIC_RELAXED) != L)
				early++;
		}
		if (lane_id() != lane || group_id() != 3 || group_size() != L)
			bad_id++;
	}, LIMITS);
	EXPECT(ok && early == 0 && bad_id == 0);
	EXPECT(host_barrier == nullptr); // the lanes' hooks were theirs

	// A lane that never arrives: the others give up at the deadline,
	// and the run says so, instead of hanging.
	hostgroup::limits quick{std::chrono::milliseconds(50), LIMITS.run};
	std::atomic<uint32_t> passed{0};
	uint64_t t0 = now_ns();
	ok = hostgroup::run_group(0, 3, [&](uint32_t lane) {
		if (lane == 2)
			return;
		sync_lanes();
		passed++;
	}, quick);
	uint64_t dt = now_ns() - t0;
	EXPECT(!ok && passed == 2);
	EXPECT(dt >= 50000000ull && dt < 5000000000ull);
}

// The controller's side for the group tests: a thread that fetches every
// SQE up to the SQ doorbell, as a controller does on a doorbell write, and
// posts one CQE per command, each fetched burst in reverse (completion
// order is not submission order), SQHD = its SQ head, SQID 1. plan(cid)
// picks the status (0 = success) or NEVER (the command never completes).
// It counts protocol violations it can see: a doorbell out of range, a
// CQE that would not fit because the host did not free CQ slots.
struct fake_ctrl {
	static constexpr int32_t NEVER = -1;
	rig &r;
	std::function<int32_t(uint16_t)> plan;
	std::vector<sqe> fetched; // in SQ order
	uint32_t sq_head = 0;
	uint64_t posted = 0;
	uint32_t violations = 0;
	std::atomic<bool> quit{false};
	std::thread t;

	explicit fake_ctrl(rig &rr, std::function<int32_t(uint16_t)> p = nullptr)
		: r(rr), plan(std::move(p)), t([this] { loop(); })
	{
	}
	~fake_ctrl() { stop(); }
	void stop()
	{
		quit = true;
		if (t.joinable())
			t.join();
	}

	void loop()
	{
		const uint32_t depth = r.q.depth;
		const auto end = std::chrono::steady_clock::now() +
				 std::chrono::seconds(60);
		while (!quit && std::chrono::steady_clock::now() < end) {
			uint32_t tail = __atomic_load_n(&r.sq_db, __ATOMIC_ACQUIRE);
			if (tail >= depth) {
				violations++;
				return;
			}
			if (tail == sq_head) {
				std::this_thread::yield();
				continue;
			}
			size_t first = fetched.size();
			for (; sq_head != tail; sq_head = (sq_head + 1) % depth)
				fetched.push_back(r.sq[sq_head]);
			for (size_t i = fetched.size(); i-- > first;) {
				uint16_t cid = fetched[i].cid;
				int32_t st = plan ? plan(cid) : 0;
				if (st == NEVER)
					continue;
				uint32_t head = __atomic_load_n(&r.cq_db, __ATOMIC_ACQUIRE);
				if ((r.post_tail + depth - head) % depth >= depth - 1)
					violations++; // CQ full: host overran
				r.post_sqhd(cid, (uint32_t)st, sq_head, 0, 1);
				posted++;
			}
		}
	}
};

struct lane_rec {
	int32_t submit = 1, reap = 1; // 1: this lane never got there
	cqe c{};
};

struct group_run {
	std::vector<uint32_t> n;      // batch size per round
	std::vector<uint16_t> cid0;   // lane i of round k submits cid0[k] + i
	std::vector<std::vector<lane_rec>> rec; // [round][lane]
	std::vector<qpair> final;     // every lane's own copy at the end
	bool barrier_ok = false;
	uint64_t ns = 0;              // wall time of the whole run
};

typedef uint32_t (*batch_fn)(uint32_t round, uint32_t lanes, uint32_t depth);

static uint32_t full_batch(uint32_t, uint32_t lanes, uint32_t depth)
{
	return lanes < depth - 1 ? lanes : depth - 1;
}

// 1..lanes commands, so lanes >= n sit idle through the barriers.
static uint32_t partial_batch(uint32_t round, uint32_t lanes, uint32_t depth)
{
	uint32_t n = 1 + (round * 5 + 2) % lanes;
	return n < depth - 1 ? n : depth - 1;
}

// `lanes` threads, one workgroup, `rounds` rounds of group_submit() +
// group_reap() on their own copies of r.q, exactly like a kernel's loop:
// lane i sends a read with CID cid0 + i and SLBA 1000 * round + i. All
// lanes stop at the first negative result (it is uniform, or the barrier
// breaks and the run says so).
static group_run run_rounds(rig &r, uint32_t lanes, uint32_t rounds, batch_fn batch)
{
	group_run g;
	uint16_t cid = 1;
	for (uint32_t k = 0; k < rounds; k++) {
		g.n.push_back(batch(k, lanes, r.q.depth));
		g.cid0.push_back(cid);
		cid = (uint16_t)(cid + g.n.back());
	}
	g.rec.assign(rounds, std::vector<lane_rec>(lanes));
	g.final.assign(lanes, qpair{});
	int32_t agg = 0x7777; // __shared__: garbage until group_reap sets it
	uint64_t t0 = now_ns();
	g.barrier_ok = hostgroup::run_group(0, lanes, [&](uint32_t lane) {
		qpair q = r.q; // the kernel argument, every lane its own copy
		for (uint32_t k = 0; k < rounds; k++) {
			uint32_t n = g.n[k];
			sqe e = sqe_read((uint16_t)(g.cid0[k] + lane), 1,
					 1000ull * k + lane, 0,
					 0x1000ull * (lane + 1), 0);
			lane_rec &rec = g.rec[k][lane];
			cqe c;
			std::memset((void *)&c, 0xff, sizeof(c));
			rec.submit = group_submit(q, lane, n, e);
			if (rec.submit != OK)
				break;
			rec.reap = group_reap(q, lane, n, &c, &agg);
			rec.c = c;
			if (rec.reap < 0)
				break;
		}
		g.final[lane] = q;
	}, LIMITS);
	g.ns = now_ns() - t0;
	return g;
}

// Every lane's copy of the pair must say the same, and say this.
static bool lanes_at(const group_run &g, uint32_t tail, uint32_t head,
		     uint32_t phase, uint32_t inflight, int32_t error)
{
	bool ok = true;
	for (size_t i = 0; i < g.final.size(); i++) {
		const qpair &q = g.final[i];
		if (q.sq_tail != tail || q.cq_head != head || q.phase != phase ||
		    q.inflight != inflight || q.error != error) {
			std::printf("# lane %zu: sq_tail %u cq_head %u phase %u inflight %u error %d; want %u %u %u %u %d\n",
				    i, q.sq_tail, q.cq_head, q.phase, q.inflight,
				    q.error, tail, head, phase, inflight, error);
			ok = false;
		}
	}
	return ok;
}

// Round k of a clean run: every lane got OK; lane i < n got the CQE of
// lane n-1-i (the burst came back reversed) with SQHD at the new tail; the
// controller fetched the batch in lane order with each lane's own SQE.
static bool round_ok(const group_run &g, const fake_ctrl &ctl, uint32_t k,
		     uint64_t before, uint32_t depth, uint16_t status_cid = 0,
		     int32_t status = 0)
{
	const uint32_t n = g.n[k];
	const uint32_t tail = (uint32_t)((before + n) % depth);
	bool ok = true;
	for (uint32_t i = 0; i < g.rec[k].size(); i++) {
		const lane_rec &x = g.rec[k][i];
		uint16_t want = (uint16_t)(g.cid0[k] + (n - 1 - i));
		int32_t want_rc = i < n && status && want == status_cid ? status : OK;
		if (x.submit != OK || x.reap != want_rc)
			ok = false;
		if (i < n && (x.c.cid != want || x.c.sqhd != tail ||
			      x.c.sqid != 1 || (uint32_t)(x.c.sf >> 1) != (uint32_t)want_rc))
			ok = false;
		if (!ok) {
			std::printf("# round %u lane %u (n %u): submit %d reap %d cid %u sqhd %u sf 0x%x; want reap %d cid %u sqhd %u\n",
				    k, i, n, x.submit, x.reap, x.c.cid, x.c.sqhd,
				    x.c.sf, want_rc, want, tail);
			return false;
		}
	}
	for (uint32_t i = 0; i < n; i++) {
		const sqe &e = ctl.fetched[before + i];
		if (e.opc != NVME_OPC_READ || e.cid != g.cid0[k] + i ||
		    e.cdw10 != 1000u * k + i || e.prp1 != 0x1000ull * (i + 1)) {
			std::printf("# round %u: SQ entry %u: opc %u cid %u slba %u\n",
				    k, i, e.opc, e.cid, e.cdw10);
			return false;
		}
	}
	return true;
}

static void group_clean(uint32_t lanes, uint32_t depth, uint32_t rounds,
			batch_fn batch)
{
	rig r(depth);
	fake_ctrl ctl(r);
	group_run g = run_rounds(r, lanes, rounds, batch);
	ctl.stop();
	EXPECT(g.barrier_ok);

	uint64_t total = 0;
	bool idle_lanes = false;
	for (uint32_t k = 0; k < rounds && g_ok; k++) {
		EXPECT(total + g.n[k] <= ctl.fetched.size());
		if (g_ok)
			EXPECT(round_ok(g, ctl, k, total, depth));
		idle_lanes |= g.n[k] < lanes;
		total += g.n[k];
	}
	const uint32_t pos = (uint32_t)(total % depth);
	const uint32_t phase = 1u ^ (uint32_t)((total / depth) & 1);
	EXPECT(ctl.fetched.size() == total && ctl.posted == total);
	EXPECT(ctl.violations == 0);
	EXPECT(lanes_at(g, pos, pos, phase, 0, OK));
	EXPECT(r.sq_db == pos && r.cq_db == pos); // last rings: lane 0's
	EXPECT(total >= 3ull * depth);           // it wrapped, several laps
	EXPECT(idle_lanes == (batch == partial_batch || lanes > depth - 1));
	std::printf("# %u lanes, depth %u: %u rounds, %llu commands, %.1f ms\n",
		    lanes, depth, rounds, (unsigned long long)total, g.ns / 1e6);
}

static void test_group_2_lanes() { group_clean(2, 3, 40, full_batch); }
static void test_group_4_lanes() { group_clean(4, 5, 40, full_batch); }
static void test_group_8_lanes() { group_clean(8, 16, 30, full_batch); }
// 8 lanes on a depth-4 ring: batches of 3, lanes 3..7 always idle.
static void test_group_8_lanes_depth4() { group_clean(8, 4, 30, full_batch); }
static void test_group_partial_batch() { group_clean(8, 8, 40, partial_batch); }

// An NVMe error status is one lane's business: that lane gets the status,
// the others OK, the entry is consumed and the pair stays usable.
static void test_group_nvme_status()
{
	const uint32_t lanes = 4, depth = 6, rounds = 8;
	const uint32_t lba_range = 0x80 | 1u << 14; // SC 0x80, DNR
	rig r(depth);
	// Round 2 (CIDs 9..12): CID 10 fails; lane 1 submitted it, lane 2
	// reaps it (reverse burst).
	const uint16_t bad = 10;
	fake_ctrl ctl(r, [&](uint16_t cid) {
		return cid == bad ? (int32_t)lba_range : 0;
	});
	group_run g = run_rounds(r, lanes, rounds, full_batch);
	ctl.stop();
	EXPECT(g.barrier_ok);
	EXPECT(g.cid0[2] == 9 && g.n[2] == 4);
	uint64_t total = 0;
	for (uint32_t k = 0; k < rounds && g_ok; k++) {
		EXPECT(round_ok(g, ctl, k, total, depth, bad, (int32_t)lba_range));
		total += g.n[k];
	}
	EXPECT(g.rec[2][2].reap == (int32_t)lba_range && g.rec[2][2].c.cid == bad);
	EXPECT(status_sc((uint32_t)(g.rec[2][2].c.sf >> 1)) == 0x80);
	const uint32_t pos = (uint32_t)(total % depth);
	EXPECT(lanes_at(g, pos, pos, 1u ^ (uint32_t)((total / depth) & 1), 0, OK));
	EXPECT(r.cq_db == pos && ctl.violations == 0);
}

// A command that never completes: the lane waiting for it times out, and
// every lane - the ones whose CQE came (one with an NVMe error), the idle
// one - returns ERR_TIMEOUT, poisons its copy, rings nothing; the next
// group_submit() is ERR_IO everywhere.
static void test_group_timeout_all_agree()
{
	const uint32_t lanes = 4, depth = 8;
	rig r(depth, 50);
	// Batches of 3 (lane 3 idle): round 1 = CIDs 4..6. 4 fails with a
	// status, 5 never completes, 6 succeeds.
	fake_ctrl ctl(r, [](uint16_t cid) {
		return cid == 5 ? fake_ctrl::NEVER : cid == 4 ? 0x80 : 0;
	});
	group_run g = run_rounds(r, lanes, 4, [](uint32_t, uint32_t, uint32_t) {
		return 3u;
	});
	ctl.stop();
	EXPECT(g.barrier_ok);
	EXPECT(round_ok(g, ctl, 0, 0, depth));
	for (uint32_t i = 0; i < lanes; i++) {
		EXPECT(g.rec[1][i].submit == OK);
		EXPECT(g.rec[1][i].reap == ERR_TIMEOUT);
		EXPECT(g.rec[2][i].submit == 1 && g.rec[2][i].reap == 1);
	}
	// CQ slots 3, 4 got CIDs 6 and 4 (reversed, 5 skipped); slot 5 empty.
	EXPECT(g.rec[1][0].c.cid == 6 && g.rec[1][1].c.cid == 4);
	EXPECT((g.rec[1][1].c.sf >> 1) == 0x80);
	// Ring position: submitted 6, reaped 3, nothing rung after round 0.
	EXPECT(lanes_at(g, 6, 3, 1, 3, ERR_TIMEOUT));
	EXPECT(r.sq_db == 6 && r.cq_db == 3);
	EXPECT(g.ns >= 50000000ull && g.ns < 2000000000ull);
	EXPECT(ctl.fetched.size() == 6 && ctl.posted == 5 && ctl.violations == 0);

	// The poisoned pair refuses more work on every lane, through barriers.
	r.q = g.final[0];
	group_run h = run_rounds(r, lanes, 1, full_batch);
	EXPECT(h.barrier_ok);
	for (uint32_t i = 0; i < lanes; i++)
		EXPECT(h.rec[0][i].submit == ERR_IO && h.rec[0][i].reap == 1);
	EXPECT(r.sq_db == 6);
}

// The host's stop flag ends a wait the controller never answers: all
// lanes, idle ones included, agree on ERR_STOPPED well before the cap.
static void test_group_stop_all_agree()
{
	const uint32_t lanes = 8;
	rig r(16, 100000); // 100 s asked; the stop flag wins
	fake_ctrl ctl(r, [](uint16_t) { return fake_ctrl::NEVER; });
	std::thread raiser([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(20));
		__atomic_store_n(&r.stop, 1u, __ATOMIC_RELEASE);
	});
	group_run g = run_rounds(r, lanes, 2, [](uint32_t, uint32_t, uint32_t) {
		return 5u; // lanes 5..7 idle
	});
	raiser.join();
	ctl.stop();
	EXPECT(g.barrier_ok);
	for (uint32_t i = 0; i < lanes; i++) {
		EXPECT(g.rec[0][i].submit == OK);
		EXPECT(g.rec[0][i].reap == ERR_STOPPED);
		EXPECT(g.rec[1][i].submit == 1); // nobody went on
	}
	EXPECT(lanes_at(g, 5, 0, 1, 5, ERR_STOPPED));
	EXPECT(r.sq_db == 5 && r.cq_db == 0);
	EXPECT(g.ns >= 20000000ull && g.ns < 1000000000ull);
	EXPECT(ctl.fetched.size() == 5 && ctl.posted == 0);
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
		{"host_barrier", test_host_barrier},
		{"group_2_lanes", test_group_2_lanes},
		{"group_4_lanes", test_group_4_lanes},
		{"group_8_lanes", test_group_8_lanes},
		{"group_8_lanes_depth4", test_group_8_lanes_depth4},
		{"group_partial_batch", test_group_partial_batch},
		{"group_nvme_status", test_group_nvme_status},
		{"group_timeout_all_agree", test_group_timeout_all_agree},
		{"group_stop_all_agree", test_group_stop_all_agree},
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
