// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// gpunvme_bench.cu - the device library (include/gpunvme, the same headers
// the AMD build compiles, through compat.h's CUDA path) timed on an NVIDIA
// GPU against sw_nvme_fixture.h, a software NVMe controller that is a
// BENCHMARK FIXTURE (never a test), in UAPI v2's two modes, over the same
// kernel:
//   owner   a raw pair: the GPU writes the real SQ, rings the fixture's
//           doorbell cells and reaps the real CQ (what CLAIM_OWNER gives);
//   shared  a validated pair: the GPU writes a shadow SQ, rings shadow
//           cells and reaps a CQ mirror; relay threads run relay.h, the
//           port of rust/bridge.rs `Relay::step` + rust/validate.rs
//           `check` + rust/buffers.rs, in bridge_thread.c's loop: each SQE
//           is copied once, checked (opcode, namespace, fields, LBA range,
//           PRPs on the file's own pages), rebuilt field by field into the
//           real SQ under a relay command ID, one doorbell per batch; each
//           completion mirrored back under the file's command ID.
// All queues, doorbell cells and shadow cells are cudaHostAlloc(Mapped)
// pinned host memory; the GPU touches them over PCIe.
//
// Measures: ping-pong GPU<->CPU through one mapped cell each way (one-way
// latency = RTT / 2: GPU %globaltimer and the host clock are different
// clocks, so a one-way time is never read across them); QD1 round trip of
// 1-LBA I/Os in both modes (alternating, ratio shared/owner from the same
// run); commands/s for 1..64 queue pairs at batch depths 1/8/32 and at 64
// pairs x 32 with 1, 2, 4 and 8 relay threads; a shared-mode run in which
// every 4th command names a page the file does not own (each must complete
// with Invalid Field + DNR and never reach the fixture); and the CPU-only
// relay microbenchmark (relay_microbench.h). Every I/O is checked: read
// data (GPU), written data (host), each completion's command ID and queue
// ID against the batch the block submitted, its status. Writes
// results.json into the directory given by --out; exits 1 if any check
// failed (never because of a time).

#include <gpunvme/gpunvme.h>

#include "relay.h"
#include "relay_microbench.h"
#include "sw_nvme_fixture.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <sys/prctl.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace gpunvme;

#define CK(x)                                                                  \
	do {                                                                   \
		cudaError_t e_ = (x);                                          \
		if (e_ != cudaSuccess) {                                       \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,  \
				cudaGetErrorString(e_));                       \
			exit(2);                                               \
		}                                                              \
	} while (0)

constexpr uint32_t MAXD = 64;    // ring entries, max
constexpr uint32_t MAXQ = 64;    // queue pairs, max
constexpr uint32_t MAXQD = 32;   // commands per batch, max
// The per-thread API's PRP-list run: pairs x threads x bytes per command.
constexpr uint32_t PT_BIG_Q = 16, PT_BIG_QD = 16, PT_BIG_XFER = 128 * 1024;
// Invalid Field in Command with DNR, as cq_wait() returns it (status field).
constexpr int32_t REJECT_FIELD = 0x4000 | 0x02;

// One queue pair's rings and cells, in mapped pinned host memory.
struct alignas(4096) qmem {
	sqe sq[MAXD];         // the real SQ (owner: the GPU's; shared: the relay's)
	sqe shadow_sq[MAXD];  // shared: the GPU's
	cqe cq[MAXD];         // the fixture's (real) CQ
	cqe shadow_cq[MAXD];  // shared: the CQ mirror
	swnvme::regs regs;    // the fixture's doorbells
	alignas(64) uint8_t shadow[128]; // shadow cells at 0 and 64
};

struct bench_qp {
	qpair q;
	uint64_t buf_dma;  // bus address the PRPs carry
	uint8_t *buf;      // GPU address of the same buffer
};

struct blk_res {
	uint64_t cmds, t_start, t_end;
	// clock64 cycles summed over the lanes' commands: from the submit call
	// to its return, and from there to the completion's return
	uint64_t cyc_submit, cyc_wait;
	int32_t first_err;
	uint32_t nvme_err, vfail, rounds, cid_fail, bad_status;
	uint32_t lat_n; // round times block 0 lane 0 recorded
};

struct bench_args {
	bench_qp *qps;
	blk_res *res;
	uint64_t *lat_ns;
	uint64_t *lat_clk;
	uint32_t lat_cap;
	uint32_t qd;
	uint64_t duration_ns;
	uint32_t max_rounds;
	uint32_t lba_bytes;
	uint64_t ns_blocks;
	uint32_t opc;
	uint32_t verify;
	uint32_t old_poll;      // 1: the library's cq_wait before the one-load poll (cq_wait_old, below)
	uint32_t reject_every;  // k > 0: lane i's PRP is foreign when i % k == k - 1
	uint64_t foreign_dma;   // a page no mapping of the file covers
	uint64_t seed;
};

GPUNVME_HD uint64_t expect_word(uint64_t seed, uint64_t lba)
{
	return seed ^ (lba * 0x9e3779b97f4a7c15ull);
}

// The SM cycle counter, for nvcc and for clang's header-less CUDA mode.
__device__ inline long long sm_clock64()
{
	long long c;
	asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
	return c;
}

__device__ inline void or_relaxed(uint32_t *p, uint32_t v)
{
#if defined(__clang__)
	__atomic_fetch_or(p, v, __ATOMIC_RELAXED);
#else
	atomicOr(p, v);
#endif
}

GPUNVME_HD bool lane_rejected(const bench_args &a, uint32_t i)
{
	return a.reject_every && i % a.reject_every == a.reject_every - 1;
}

// BEFORE: queue.h's cq_wait() as it was before the one-load poll (what
// -DGPUNVME_CQ_POLL_DW3 still builds), verbatim, so one run measures both:
// poll dword 3 alone with ld.acquire.sys, the stop flag on every poll, then
// dwords 0, 1, 2 with three more volatile loads (against a CQ in host
// memory each is a serial PCIe read).
__device__ int32_t cq_wait_old(const qpair &q, uint32_t i, cqe *out)
{
	if (q.error != OK)
		return ERR_IO;
	if (i >= q.inflight || q.tick_hz == 0)
		return ERR_INVAL;

	const cqe *e = &q.cq[cq_slot(q, i)];
	const volatile uint32_t *dw3 =
		(const volatile uint32_t *)((const char *)e + CQE_DW3_OFFSET);
	const uint32_t want = cq_expected_phase(q, i);
	deadline d = deadline_start(wall_ticks(), q.timeout_ticks, q.tick_hz);

	for (;;) {
		uint32_t v = fence::poll_load(dw3);

		if (cqe_phase(v) == want) {
			fence::acquire_system();
			const volatile uint32_t *w = (const volatile uint32_t *)e;
			out->dw0 = w[0];
			out->dw1 = w[1];
			uint32_t dw2 = w[2];
			out->sqhd = (uint16_t)dw2;
			out->sqid = (uint16_t)(dw2 >> 16);
			out->cid = cqe_cid(v);
			out->sf = (uint16_t)(v >> 16);
			return status_ok(cqe_status(v)) ? OK
							: (int32_t)cqe_status(v);
		}
		if (stop_requested(q))
			return ERR_STOPPED;
		int st = d.step(wall_ticks());
		if (st == DEADLINE_EXPIRED)
			return ERR_TIMEOUT;
		if (st == DEADLINE_CLOCK_STUCK)
			return ERR_CLOCK;
	}
}

// queue.h's group_reap() verbatim, calling cq_wait_old.
__device__ int32_t group_reap_old(qpair &q, uint32_t lane, uint32_t n, cqe *out,
				  int32_t *agg)
{
	int32_t rc = lane < n ? cq_wait_old(q, lane, out) : OK;

	if (lane == 0)
		atomic_store_relaxed(agg, OK);
	sync_lanes();
	if (rc < 0)
		atomic_store_relaxed(agg, rc);
	sync_lanes();
	int32_t worst = atomic_load_relaxed(agg);
	sync_lanes();
	if (worst < 0) {
		qpair_fail(q, worst);
		return rc < 0 ? rc : worst;
	}
	cq_release(q, n, lane == 0);
	return rc;
}

// One block = one queue pair. Every round: lanes < qd each submit one
// 1-LBA command in one doorbell (group_submit), then all are reaped
// (group_reap, one CQ doorbell). Block 0 lane 0 records each round's time.
// After the timed part, each completion is matched to the command its ID
// names: an ID outside this batch, a wrong queue ID, an ID seen twice (the
// batch's bit mask not full) or a status other than that command's
// expected one (OK, or Invalid Field + DNR for a foreign PRP) is counted.
__global__ void bench_io(bench_args a)
{
	__shared__ int32_t agg;
	__shared__ uint32_t go;
	__shared__ uint32_t seen;
	__shared__ uint64_t t_start_s;
	const uint32_t lane = lane_id(), b = group_id();
	qpair q = a.qps[b].q;
	uint8_t *buf = a.qps[b].buf + (size_t)lane * a.lba_bytes;
	const uint64_t dma = a.qps[b].buf_dma + (uint64_t)lane * a.lba_bytes;
	const bool foreign = lane_rejected(a, lane);
	const uint64_t prp = foreign ? a.foreign_dma + (uint64_t)lane * a.lba_bytes : dma;
	const uint32_t full = a.qd >= 32 ? 0xffffffffu : (1u << a.qd) - 1;
	uint32_t vfail = 0, nerr = 0, cidf = 0, bst = 0, r;
	uint64_t cyc_s = 0, cyc_w = 0;
	int32_t ferr = OK;

	if (lane == 0)
		t_start_s = wall_ticks();
	sync_lanes();
	const uint64_t t_start = t_start_s;
	for (r = 0;; r++) {
		if (lane == 0) {
			go = r < a.max_rounds && wall_ticks() - t_start < a.duration_ns;
			seen = 0;
		}
		sync_lanes();
		const bool g = go;
		sync_lanes();
		if (!g)
			break;
		const uint16_t base = (uint16_t)(r * a.qd);
		const uint64_t lba = ((uint64_t)b * 7919u + (uint64_t)r * a.qd + lane) % a.ns_blocks;
		if (a.opc == NVME_OPC_WRITE && lane < a.qd && !foreign)
			*(volatile uint64_t *)buf = ~expect_word(a.seed, lba);
		const uint64_t t0 = wall_ticks();
		const long long c0 = sm_clock64();
		int32_t rc = group_submit(q, lane, a.qd,
					  sqe_rw((uint8_t)a.opc, (uint16_t)(base + lane), 1,
						 lba, 0, prp, 0));
		const long long cm = sm_clock64();
		cqe c = {};
		if (rc == OK)
			rc = a.old_poll ? group_reap_old(q, lane, a.qd, &c, &agg)
					: group_reap(q, lane, a.qd, &c, &agg);
		const long long c1 = sm_clock64();
		if (lane < a.qd) {
			cyc_s += (uint64_t)(cm - c0);
			cyc_w += (uint64_t)(c1 - cm);
		}
		const uint64_t t1 = wall_ticks();
		if (rc < 0) { // group-wide: the pair is poisoned
			ferr = rc;
			break;
		}
		if (b == 0 && lane == 0 && r < a.lat_cap) {
			a.lat_ns[r] = t1 - t0;
			a.lat_clk[r] = (uint64_t)(c1 - c0);
		}
		if (lane < a.qd) {
			const uint32_t idx = (uint16_t)(c.cid - base);
			if (idx >= a.qd || c.sqid != b + 1) {
				cidf++;
			} else {
				or_relaxed(&seen, 1u << idx);
				const bool rej = lane_rejected(a, idx);
				bst += rc != (rej ? REJECT_FIELD : OK);
				nerr += rc > 0 && !rej;
			}
		}
		if (a.verify && a.opc == NVME_OPC_READ && lane < a.qd && !foreign &&
		    *(volatile uint64_t *)buf != expect_word(a.seed, lba))
			vfail++;
		sync_lanes();
		if (lane == 0 && seen != full)
			cidf++;
	}
	if (vfail)
		atomic_add_relaxed(&a.res[b].vfail, vfail);
	if (nerr)
		atomic_add_relaxed(&a.res[b].nvme_err, nerr);
	if (cidf)
		atomic_add_relaxed(&a.res[b].cid_fail, cidf);
	if (bst)
		atomic_add_relaxed(&a.res[b].bad_status, bst);
	atom::red64(&a.res[b].cyc_submit, cyc_s);
	atom::red64(&a.res[b].cyc_wait, cyc_w);
	sync_lanes();
	if (lane == 0) {
		a.res[b].t_end = wall_ticks();
		a.res[b].t_start = t_start;
		a.res[b].rounds = r;
		a.res[b].cmds = (uint64_t)r * a.qd;
		a.res[b].first_err = ferr;
		a.res[b].lat_n = r < a.lat_cap ? r : a.lat_cap;
		a.qps[b].q = q;
	}
}

__device__ inline uint32_t __activemask_bench()
{
	uint32_t m;
	asm volatile("activemask.b32 %0;" : "=r"(m));
	return m;
}

// The lanes of mask for which p holds.
__device__ inline uint32_t ballot_bench(uint32_t mask, bool p)
{
	uint32_t r;
	asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %1, 0;\n\t"
		     "vote.sync.ballot.b32 %0, q, %2;\n\t}"
		     : "=r"(r) : "r"((uint32_t)p), "r"(mask));
	return r;
}

// The per-thread API (pqueue.h): lanes < qd of block b each run their own
// loop on pair b, one command in flight per thread: for xfer, poison the
// words to be checked, submit (pq_submit for one LBA with PRP1 as bench_io builds it;
// pq_submit_io through PRP1/PRP2/a PRP list the thread builds in its slot
// of the pair's pool for xfer bytes), wait for that ticket alone, check
// its status, that the completion came back under its own slot's command
// ID and queue ID, and the data (one LBA: its word; xfer: the first,
// middle and last LBA's words). No barrier inside the loop, each thread
// stopping on its own clock (pq_wait()'s linger, the library's default
// unless the run sets one, is what keeps the lanes that wait together one
// group); with reconverge, the warp's lanes end each round at a barrier
// and stop together.
__global__ void bench_pt(bench_args a, const pqueue *pqs, const uint64_t *pages,
			 uint64_t npages, uint32_t xfer, uint32_t reconverge, uint32_t linger)
{
	__shared__ uint64_t t_start_s;
	__shared__ uint32_t rounds_s;
	const uint32_t lane = lane_id(), b = group_id();
	const pqueue q = pqs[b];
	const uint32_t bytes = xfer ? xfer : a.lba_bytes;
	const uint32_t nlb = bytes / a.lba_bytes;
	const uint64_t off = ((uint64_t)b * a.qd + lane) * bytes;
	uint8_t *buf = a.qps[b].buf + off;
	uint32_t vfail = 0, nerr = 0, cidf = 0, bst = 0, r = 0;
	uint64_t cyc_s = 0, cyc_w = 0;
	int32_t ferr = OK;
	// The words checked: the first, middle and last LBA's (one word for
	// a 1-LBA command).
	const uint32_t chk[3] = {0, nlb / 2, nlb - 1};
	const int nchk = nlb == 1 ? 1 : 3;

	if (lane == 0) {
		t_start_s = wall_ticks();
		rounds_s = 0;
	}
	sync_lanes();
	const uint64_t t_start = t_start_s;
	// Regrouping: this warp's lanes < qd (all of them arrive here
	// together) decide together when to stop, so that each round can end
	// with a barrier over all of them.
	const uint32_t part = ballot_bench(__activemask_bench(), lane < a.qd);
	for (r = 0; lane < a.qd; r++) {
		bool go = r < a.max_rounds && wall_ticks() - t_start < a.duration_ns && ferr == OK;
		if (reconverge)
			go = ballot_bench(part, go) == part;
		if (!go)
			break;
		const uint64_t x = (uint64_t)b * 7919u + (uint64_t)r * a.qd + lane;
		const uint64_t lba = xfer ? (x * nlb) % (a.ns_blocks - nlb) : x % a.ns_blocks;
		// One-LBA reads are checked as bench_io checks them, without a
		// poisoned word first: every round reads another LBA, whose word
		// differs, so a read that did not land fails the check. (The
		// poison was an uncached store to host memory per command that
		// the group loop does not make.) xfer ranges wrap, so their words
		// are poisoned.
		for (int k = 0; xfer && k < nchk; k++)
			*(volatile uint64_t *)(buf + (uint64_t)chk[k] * a.lba_bytes) =
				~expect_word(a.seed, lba + chk[k]);
		pq_ticket t;
		const uint64_t t0 = wall_ticks();
		const long long c0 = sm_clock64();
		int32_t rc = xfer ? pq_submit_io(q, NVME_OPC_READ, 1, lba, (uint16_t)(nlb - 1),
						 pages, npages, a.qps[b].buf_dma - pages[0] + off,
						 bytes, &t)
				  : pq_submit(q, sqe_rw(NVME_OPC_READ, 0, 1, lba, 0,
							a.qps[b].buf_dma + off, 0), &t);
		const long long cm = sm_clock64();
		cqe c = {};
		if (rc == OK)
			rc = pq_wait(q, t, &c, linger);
		const long long c1 = sm_clock64();
		cyc_s += (uint64_t)(cm - c0);
		cyc_w += (uint64_t)(c1 - cm);
		const uint64_t t1 = wall_ticks();
		if (rc < 0) {
			ferr = rc;
			if (!reconverge)
				break;
			// Regrouping: the barrier below, then all stop together.
			asm volatile("bar.warp.sync %0;" :: "r"(part));
			continue;
		}
		if (b == 0 && lane == 0 && r < a.lat_cap) {
			a.lat_ns[r] = t1 - t0;
			a.lat_clk[r] = (uint64_t)(c1 - c0);
		}
		nerr += rc > 0;
		bst += rc != OK;
		cidf += c.cid != t.slot || c.sqid != b + 1;
		// No fence of the bench's own: pq_wait() orders the payload after
		// the completion (the reap's system-scope acquire), as group_reap()
		// does for bench_io, which has none either.
		if (a.verify)
			for (int k = 0; k < nchk; k++)
				vfail += *(volatile uint64_t *)(buf + (uint64_t)chk[k] * a.lba_bytes) !=
					 expect_word(a.seed, lba + chk[k]);
		// Optional: the caller's own choice to regroup the warp after each
		// command (how a lockstep kernel would use the per-thread API):
		// every lane of the warp that runs the loop, so they claim, post
		// and wait together; the lanes still submit, ring and wait through
		// pqueue.h alone.
		if (reconverge)
			asm volatile("bar.warp.sync %0;" :: "r"(part));
	}
	if (lane < a.qd) {
		atomic_add_relaxed(&rounds_s, r);
		atom::red64(&a.res[b].cyc_submit, cyc_s);
		atom::red64(&a.res[b].cyc_wait, cyc_w);
	}
	if (b == 0 && lane == 0)
		a.res[b].lat_n = r < a.lat_cap ? r : a.lat_cap;
	if (vfail)
		atomic_add_relaxed(&a.res[b].vfail, vfail);
	if (nerr)
		atomic_add_relaxed(&a.res[b].nvme_err, nerr);
	if (cidf)
		atomic_add_relaxed(&a.res[b].cid_fail, cidf);
	if (bst)
		atomic_add_relaxed(&a.res[b].bad_status, bst);
	if (ferr != OK)
		atomic_set_if_relaxed(&a.res[b].first_err, OK, ferr);
	sync_lanes();
	if (lane == 0) {
		a.res[b].t_end = wall_ticks();
		a.res[b].t_start = t_start;
		a.res[b].rounds = rounds_s / (a.qd ? a.qd : 1);
		a.res[b].cmds = rounds_s;
	}
}

// GPU pings with the library's doorbell store, the CPU answers in another
// mapped cell, the GPU polls it with the library's poll load.
__global__ void pingpong(volatile uint32_t *ping, const volatile uint32_t *pong,
			 uint32_t n, uint64_t *ns, uint64_t *clk)
{
	for (uint32_t i = 1; i <= n; i++) {
		uint64_t t0 = wall_ticks();
		long long c0 = sm_clock64();
		fence::doorbell_write(ping, i);
		uint64_t spins = 0;
		while (fence::poll_load(pong) != i)
			if (++spins > (1ull << 26))
				return;
		long long c1 = sm_clock64();
		uint64_t t1 = wall_ticks();
		ns[i - 1] = t1 - t0;
		clk[i - 1] = (uint64_t)(c1 - c0);
	}
}

// Unit costs: poll_load of a host cell and of a device cell, doorbell_write
// to a host cell; %globaltimer's smallest step; and the CQE poll forms
// against a CQE in host memory and in device memory: the one 16-byte
// load (fence::poll_cqe(), the library's now) and the 32-bit phase poll
// plus the three loads a completed entry cost before.
__global__ void probe(const volatile uint32_t *hcell, const volatile uint32_t *dcell,
		      volatile uint32_t *hdb, uint32_t n, uint64_t *out,
		      const cqe *hcqe, const cqe *dcqe)
{
	uint32_t acc = 0;
	for (int k = 0; k < 2; k++) {
		const cqe *e = k ? dcqe : hcqe;
		uint64_t a0 = wall_ticks();
		for (uint32_t i = 0; i < n; i++) {
			uint32_t w[4];
			fence::poll_cqe(e, w);
			acc += w[0] + w[3];
		}
		uint64_t a1 = wall_ticks();
		for (uint32_t i = 0; i < n; i++) {
			const volatile uint32_t *v = (const volatile uint32_t *)e;
			acc += fence::poll_load(v + 3);
			fence::acquire_system();
			acc += v[0] + v[1] + v[2];
		}
		uint64_t a2 = wall_ticks();
		out[8 + 2 * k] = a1 - a0;
		out[9 + 2 * k] = a2 - a1;
	}
	uint64_t t0 = wall_ticks();
	for (uint32_t i = 0; i < n; i++)
		acc += fence::poll_load(hcell);
	uint64_t t1 = wall_ticks();
	for (uint32_t i = 0; i < n; i++)
		acc += fence::poll_load(dcell);
	uint64_t t2 = wall_ticks();
	for (uint32_t i = 0; i < n; i++)
		fence::doorbell_write(hdb, i + acc * 0);
	uint64_t t3 = wall_ticks();
	uint64_t minstep = ~0ull, prev = wall_ticks();
	for (uint32_t i = 0; i < 100000; i++) {
		uint64_t t = wall_ticks();
		if (t != prev && t - prev < minstep)
			minstep = t - prev;
		prev = t;
	}
	long long c0 = sm_clock64();
	uint64_t g0 = wall_ticks();
	while (wall_ticks() - g0 < 2000000) // 2 ms: SM clock estimate
		;
	long long c1 = sm_clock64();
	uint64_t g1 = wall_ticks();
	out[0] = t1 - t0;
	out[1] = t2 - t1;
	out[2] = t3 - t2;
	out[3] = minstep;
	out[4] = (uint64_t)(c1 - c0);
	out[5] = g1 - g0;
	out[6] = acc;
}

// ---------------------------------------------------------------- host side

static std::vector<int> g_cpus;
static int cpu_at(int idx) { return g_cpus.empty() ? -1 : g_cpus[idx % g_cpus.size()]; }
static void pin(int idx) { mb::pin_to(cpu_at(idx)); }

struct stats {
	double p50, p90, p99, p999, min, max, mean;
	size_t n;
};

static stats summarize(std::vector<double> v)
{
	stats s{};
	s.n = v.size();
	if (v.empty())
		return s;
	std::sort(v.begin(), v.end());
	auto pct = [&](double p) { return v[std::min(v.size() - 1, (size_t)(p * (v.size() - 1) + 0.5))]; };
	s.p50 = pct(0.50);
	s.p90 = pct(0.90);
	s.p99 = pct(0.99);
	s.p999 = pct(0.999);
	s.min = v.front();
	s.max = v.back();
	double sum = 0;
	for (double x : v)
		sum += x;
	s.mean = sum / v.size();
	return s;
}

static std::string js(const stats &s)
{
	char b[512];
	snprintf(b, sizeof(b),
		 "{\"n\": %zu, \"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, "
		 "\"min\": %.3f, \"max\": %.3f, \"mean\": %.3f}",
		 s.n, s.p50, s.p90, s.p99, s.p999, s.min, s.max, s.mean);
	return b;
}

struct world {
	qmem *qm_h = nullptr, *qm_d = nullptr;
	uint8_t *hbuf_h = nullptr, *hbuf_d = nullptr; // mapped host data buffers
	uint8_t *vbuf = nullptr;                        // VRAM data buffers
	uint8_t *ns = nullptr;                          // namespace (pinned)
	uint64_t ns_blocks = 65536;
	uint32_t lba_bytes = 512;
	uint64_t seed = 0x5eed5eed12345678ull;
	size_t buf_bytes = 0;
	bench_qp *qps_d = nullptr;
	blk_res *res_d = nullptr;
	uint64_t *lat_ns_d = nullptr, *lat_clk_d = nullptr;
	uint32_t lat_cap = 400000;
	cudaStream_t ks;
	int fixture_threads = 4, relay_threads = 4;
	double sm_ghz = 0;
	// Shared mode: the file's mapped pages, its limits, the pairs' PRP
	// pools and the kernel's list slots (host memory; the 1-LBA I/Os of
	// this bench never need a list, the microbenchmark does).
	relay::Buffers buffers;
	relay::validate::Limits limits;
	size_t list_entries = 0, list_bytes = 0;
	uint8_t *pools = nullptr, *pools_d = nullptr; // mapped: the GPU builds lists
	uint64_t *lists = nullptr;
	// The per-thread API: each pair's shared state (pq_bytes(MAXD)), the
	// descriptors, and the host data buffer's page addresses.
	uint8_t *pq_mem_d = nullptr;
	size_t pq_stride = 0;
	pqueue *pqs_d = nullptr;
	uint64_t *pages_d = nullptr;
	uint64_t npages = 0;
	uint64_t foreign_dma = 0;
	cqe *dcq = nullptr; // CQs in device memory (cudaMalloc), MAXD per pair
} W;

struct fix_tctx {
	cudaStream_t s;
};

static bool vram_xfer(void *tctx, bool to_ns, uint64_t prp, uint8_t *nsp, uint32_t len)
{
	cudaStream_t s = ((fix_tctx *)tctx)->s;
	cudaError_t e = to_ns ? cudaMemcpyAsync(nsp, (void *)prp, len, cudaMemcpyDeviceToHost, s)
			      : cudaMemcpyAsync((void *)prp, nsp, len, cudaMemcpyHostToDevice, s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s);
	return e == cudaSuccess;
}

// A CQE into a CQ in device memory: the copy engine writes the 16 bytes
// into VRAM over PCIe from the fixture's pinned host ring (no wait: the
// stream keeps the copies in order, and the host slot is not reused before
// the GPU has reaped the entry and rung the CQ head past it).
static bool cq_push_vram(void *tctx, cqe *dev, const cqe *src, uint32_t n)
{
	cudaStream_t s = ((fix_tctx *)tctx)->s;
	return cudaMemcpyAsync(dev, src, sizeof(cqe) * n, cudaMemcpyHostToDevice, s) == cudaSuccess;
}

// The file maps [base, base + len) (MAP_HOST / MAP_DMABUF): one DMA
// address per 4 KiB page, as the module records them.
static void map_pages(uint32_t handle, uint64_t base, size_t len)
{
	std::vector<uint64_t> pages;
	for (uint64_t p = base & ~4095ull; p < base + len; p += 4096)
		pages.push_back(p);
	W.buffers.add(handle, pages.data(), pages.size());
}

struct run_cfg {
	const char *mode;     // "owner" | "shared"
	const char *data;     // "host" | "vram"
	uint32_t nq, qd;
	double seconds;
	uint32_t opc = NVME_OPC_READ;
	bool verify = true;
	int fthreads = 0, rthreads = 0; // 0: W's defaults
	uint32_t reject_every = 0;      // shared: every k-th lane names a foreign page
	uint32_t max_rounds = 0xffffffffu;
	uint32_t api = 0;               // 0: group API (bench_io), 1: per-thread (bench_pt)
	uint32_t xfer = 0;              // per-thread: bytes per command (0: one LBA)
	uint32_t backoff = 0;           // per-thread: nanosleep between empty polls
	uint32_t reconverge = 0;        // per-thread: bar.warp.sync after each command
	uint32_t linger = PQ_LINGER_NS; // per-thread: pq_wait()'s linger in ns (0: leave at once)
	bool old_poll = false;          // the library's cq_wait before the one-load poll
	bool cq_vram = false;           // owner: the CQ in device memory (copy-engine writes)
};

struct run_out {
	uint32_t depth = 0;
	int F = 0, R = 0;
	uint64_t cmds = 0, rounds0 = 0;
	double seconds = 0, iops = 0;
	stats lat_ns{}, lat_clk_ns{};
	uint64_t nvme_err = 0, vfail = 0, cid_fail = 0, bad_status = 0;
	uint64_t fixture_errors = 0, fixture_cmds = 0, bad_db = 0, write_check_fail = 0;
	uint64_t expect_rejected = 0, relay_idle_steps = 0;
	int32_t first_err = 0;
	relay::Counters rc{};
	uint64_t pt_sq_doorbells = 0, pt_cq_doorbells = 0, pt_cqes = 0;
	int32_t pt_error = 0;
	double submit_ns = 0, wait_ns = 0; // per command, clock64 at the SM clock
	uint64_t cq_full_stalls = 0;        // the fixture found a CQ full
	double gbps = 0;
	bool ok = false;
};

static bool shared_mode(const run_cfg &c) { return !strcmp(c.mode, "shared"); }

static run_out run_io(const run_cfg &c)
{
	const bool shared = shared_mode(c);
	const bool vram = !strcmp(c.data, "vram");
	const uint32_t depth = std::min<uint32_t>(MAXD, std::max<uint32_t>(8, 2 * c.qd));
	const int F = std::min<int>(c.fthreads ? c.fthreads : W.fixture_threads, c.nq);
	const int R = shared ? std::min<int>(c.rthreads ? c.rthreads : W.relay_threads, c.nq) : 0;
	run_out o;
	o.depth = depth;
	o.F = F;
	o.R = R;

	// Fresh queue pairs: zeroed rings, phase 1, one relay each for its life.
	memset(W.qm_h, 0, sizeof(qmem) * c.nq);
	for (uint64_t l = 0; l < W.ns_blocks; l++) {
		uint64_t v = expect_word(W.seed, l);
		memcpy(W.ns + l * W.lba_bytes, &v, 8);
	}

	swnvme::ns_config nc{};
	nc.ns = W.ns;
	nc.ns_blocks = W.ns_blocks;
	nc.lba_bytes = W.lba_bytes;
	nc.dma_base = (uint64_t)W.hbuf_d;
	nc.dma_len = W.buf_bytes;
	nc.host_base = W.hbuf_h;
	if (vram)
		nc.xfer = vram_xfer;
	const bool cq_vram = c.cq_vram && !shared;
	if (cq_vram) {
		nc.cq_push = cq_push_vram;
		CK(cudaMemset(W.dcq, 0, sizeof(cqe) * MAXD * c.nq));
	}
	nc.list_lo[0] = (uint64_t)(uintptr_t)W.pools;
	nc.list_hi[0] = nc.list_lo[0] + W.list_bytes * MAXQ;
	nc.list_lo[1] = (uint64_t)(uintptr_t)W.lists;
	nc.list_hi[1] = nc.list_lo[1] + W.list_bytes * MAXQ;
	swnvme::fixture fx(nc);
	std::vector<pqueue> pq(c.nq);
	std::vector<uint8_t> pq_img(W.pq_stride * c.nq);
	std::vector<swnvme::queue> fq(c.nq);
	std::vector<std::unique_ptr<relay::Relay>> relays;
	std::vector<relay::PairPort> ports(c.nq);
	std::vector<relay::Counters> ctr(c.nq);
	std::vector<bench_qp> hq(c.nq);
	for (uint32_t i = 0; i < c.nq; i++) {
		qmem *h = &W.qm_h[i], *d = &W.qm_d[i];
		fq[i].sq = h->sq;
		fq[i].cq = h->cq;
		fq[i].r = &h->regs;
		fq[i].depth = depth;
		fq[i].qid = (uint16_t)(i + 1);
		if (cq_vram)
			fq[i].cq_dev = W.dcq + (size_t)i * MAXD;
		relays.push_back(std::make_unique<relay::Relay>((uint16_t)(i + 1), depth));
		relay::PairPort &pp = ports[i];
		pp.real_sq = h->sq;
		pp.real_cq = h->cq;
		pp.cells = h->shadow;
		pp.shadow_sq = h->shadow_sq;
		pp.shadow_cq = h->shadow_cq;
		pp.pool = W.pools + (size_t)i * W.list_bytes;
		pp.pool_dma = (uint64_t)(uintptr_t)pp.pool;
		pp.pool_bytes = W.list_bytes;
		pp.lists = W.lists + (size_t)i * W.list_bytes / 8;
		pp.lists_dma = (uint64_t)(uintptr_t)pp.lists;
		pp.list_entries = W.list_entries;
		pp.real_db = &h->regs;
		pp.buffers = &W.buffers;
		pp.qid = (uint16_t)(i + 1);
		pp.limits = &W.limits;
		qpair &q = hq[i].q;
		memset(&q, 0, sizeof(q));
		q.sq = shared ? d->shadow_sq : d->sq;
		q.cq = shared ? d->shadow_cq : cq_vram ? W.dcq + (size_t)i * MAXD : d->cq;
		q.sq_db = shared ? (volatile uint32_t *)(d->shadow + relay::SHADOW_SQ_TAIL) : &d->regs.sq_tail_db;
		q.cq_db = shared ? (volatile uint32_t *)(d->shadow + relay::SHADOW_CQ_HEAD) : &d->regs.cq_head_db;
		q.stop = nullptr; // every wait still ends at timeout_ticks
		q.tick_hz = 1000000000ull;
		q.timeout_ticks = 1000000000ull;
		q.depth = depth;
		q.phase = 1;
		size_t off = c.api ? 0 : (size_t)i * MAXQD * W.lba_bytes; // bench_pt adds its own
		hq[i].buf = vram ? W.vbuf + off : W.hbuf_d + off;
		hq[i].buf_dma = (uint64_t)hq[i].buf;
		pqueue &p = pq[i];
		p = pqueue{};
		p.sq = q.sq;
		p.cq = q.cq;
		p.sq_db = q.sq_db;
		p.cq_db = q.cq_db;
		p.timeout_ticks = q.timeout_ticks;
		p.tick_hz = q.tick_hz;
		p.depth = depth;
		p.backoff = c.backoff;
		// Owner: the pool is the pair's stretch of W.pools (host memory the
		// fixture reads at its host address); shared: the module's pool,
		// the same memory, which the relay checks and copies.
		p.prp_va = (uint64_t *)(W.pools_d + (size_t)i * W.list_bytes);
		p.prp_dma = (uint64_t)(uintptr_t)(W.pools + (size_t)i * W.list_bytes);
		p.prp_stride = pq_prp_stride(W.list_bytes, depth);
		pq_init(&pq_img[(size_t)i * W.pq_stride], depth, 0, 0, 1);
		pq_attach(p, W.pq_mem_d + (size_t)i * W.pq_stride);
	}
	CK(cudaMemcpy(W.qps_d, hq.data(), sizeof(bench_qp) * c.nq, cudaMemcpyHostToDevice));
	if (c.api) {
		CK(cudaMemcpy(W.pq_mem_d, pq_img.data(), pq_img.size(), cudaMemcpyHostToDevice));
		CK(cudaMemcpy(W.pqs_d, pq.data(), sizeof(pqueue) * c.nq, cudaMemcpyHostToDevice));
	}
	CK(cudaMemset(W.res_d, 0, sizeof(blk_res) * c.nq));

	std::atomic<bool> stop{false};
	std::vector<std::thread> th;
	int core = 1;
	for (int t = 0; t < F; t++, core++)
		th.emplace_back([&, t, core] {
			pin(core);
			fix_tctx tc{};
			if (vram || cq_vram)
				CK(cudaStreamCreateWithFlags(&tc.s, cudaStreamNonBlocking));
			while (!stop.load(std::memory_order_relaxed))
				for (uint32_t i = t; i < c.nq; i += F)
					fx.service(fq[i], &tc);
			if (vram || cq_vram) {
				cudaStreamSynchronize(tc.s);
				cudaStreamDestroy(tc.s);
			}
		});
	// Relay pool (bridge_thread.c): a new pair goes to the thread serving
	// the fewest, so pair i to thread i % R; each thread runs the module's
	// loop (spin 200 us after the last progress, then sleep 20 us..1 ms).
	std::vector<std::vector<relay::PairCtx>> tpairs(R);
	std::vector<std::mutex> tlocks(R);
	for (uint32_t i = 0; i < c.nq && R; i++)
		tpairs[i % R].push_back({relays[i].get(), &ports[i], &ctr[i], 0});
	for (int t = 0; t < R; t++, core++)
		th.emplace_back([&, t, core] {
			pin(core);
			// usleep_range(s, s + s/2): about s/2 of slack at 20 us.
			prctl(PR_SET_TIMERSLACK, 10000UL, 0, 0, 0);
			relay::relay_thread_loop(tpairs[t], tlocks[t], stop);
		});

	bench_args a{};
	a.qps = W.qps_d;
	a.res = W.res_d;
	a.lat_ns = W.lat_ns_d;
	a.lat_clk = W.lat_clk_d;
	a.lat_cap = W.lat_cap;
	a.qd = c.qd;
	a.duration_ns = (uint64_t)(c.seconds * 1e9);
	a.max_rounds = c.max_rounds;
	a.lba_bytes = W.lba_bytes;
	a.ns_blocks = W.ns_blocks;
	a.opc = c.opc;
	a.verify = c.verify;
	a.old_poll = c.old_poll;
	a.reject_every = c.reject_every;
	a.foreign_dma = W.foreign_dma;
	a.seed = W.seed;
	if (c.api)
		bench_pt<<<c.nq, std::max<uint32_t>(32, c.qd), 0, W.ks>>>(a, W.pqs_d, W.pages_d,
									  W.npages, c.xfer, c.reconverge,
									  c.linger);
	else
		bench_io<<<c.nq, std::max<uint32_t>(32, c.qd), 0, W.ks>>>(a);
	CK(cudaGetLastError());
	while (cudaStreamQuery(W.ks) == cudaErrorNotReady)
		usleep(1000);
	CK(cudaStreamSynchronize(W.ks));
	stop = true;
	for (auto &t : th)
		t.join();

	std::vector<blk_res> res(c.nq);
	CK(cudaMemcpy(res.data(), W.res_d, sizeof(blk_res) * c.nq, cudaMemcpyDeviceToHost));
	uint64_t t0 = ~0ull, t1 = 0, rejected_per_round = 0;
	for (uint32_t l = 0; l < c.qd; l++) {
		bench_args probe_args{};
		probe_args.reject_every = c.reject_every;
		rejected_per_round += lane_rejected(probe_args, l);
	}
	for (auto &r : res) {
		o.cmds += r.cmds;
		o.nvme_err += r.nvme_err;
		o.vfail += r.vfail;
		o.cid_fail += r.cid_fail;
		o.bad_status += r.bad_status;
		o.expect_rejected += (uint64_t)r.rounds * rejected_per_round;
		if (r.first_err && !o.first_err)
			o.first_err = r.first_err;
		t0 = std::min(t0, r.t_start);
		t1 = std::max(t1, r.t_end);
	}
	o.rounds0 = res[0].rounds;
	{
		uint64_t cs = 0, cw = 0;
		for (auto &r : res) {
			cs += r.cyc_submit;
			cw += r.cyc_wait;
		}
		o.submit_ns = o.cmds ? cs / W.sm_ghz / o.cmds : 0;
		o.wait_ns = o.cmds ? cw / W.sm_ghz / o.cmds : 0;
	}
	o.seconds = (t1 - t0) * 1e-9;
	o.iops = o.seconds > 0 ? o.cmds / o.seconds : 0;
	o.gbps = o.iops * (c.xfer ? c.xfer : W.lba_bytes) / 1e9;
	bool pt_ok = true;
	if (c.api) { // every ticket claimed was rung, reaped and taken
		for (uint32_t i = 0; i < c.nq; i++) {
			pq_shared st;
			CK(cudaMemcpy(&st, W.pq_mem_d + (size_t)i * W.pq_stride, sizeof(st),
				      cudaMemcpyDeviceToHost));
			o.pt_sq_doorbells += st.sq_doorbells;
			o.pt_cq_doorbells += st.cq_doorbells;
			o.pt_cqes += st.cqes;
			if (st.error && !o.pt_error)
				o.pt_error = st.error;
			pt_ok &= st.error == 0 && st.cid_ticket == res[i].cmds &&
				 st.sq_base == 0 && (st.db_word >> 1) == res[i].cmds &&
				 (st.db_word & 1) == 0 &&
				 st.sq_head == res[i].cmds && st.cqes == res[i].cmds;
		}
	}
	uint32_t n = std::min(res[0].lat_n, W.lat_cap); // block 0 lane 0's round times
	std::vector<uint64_t> ln(n), lc(n);
	CK(cudaMemcpy(ln.data(), W.lat_ns_d, 8 * n, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(lc.data(), W.lat_clk_d, 8 * n, cudaMemcpyDeviceToHost));
	std::vector<double> vn(n), vc(n);
	for (uint32_t i = 0; i < n; i++) {
		vn[i] = ln[i] / 1000.0;            // us, %globaltimer
		vc[i] = lc[i] / W.sm_ghz / 1000.0; // us, clock64 at the measured SM clock
	}
	o.lat_ns = summarize(vn);
	o.lat_clk_ns = summarize(vc);
	for (uint32_t i = 0; i < c.nq; i++) {
		o.fixture_cmds += fq[i].cmds;
		o.fixture_errors += fq[i].errors;
		o.bad_db += fq[i].bad_doorbells;
		o.cq_full_stalls += fq[i].cq_full_stalls;
		o.rc.add(ctr[i]);
	}
	for (auto &tp : tpairs)
		for (auto &pc : tp)
			o.relay_idle_steps += pc.idle_steps;
	if (c.opc == NVME_OPC_WRITE) // every LBA block 0 wrote holds ~pattern
		for (uint64_t r = 0; r < std::min<uint64_t>(res[0].rounds, W.ns_blocks); r++)
			for (uint32_t l = 0; l < c.qd; l++) {
				if (lane_rejected(a, l))
					continue;
				uint64_t lba = (r * c.qd + l) % W.ns_blocks, v;
				memcpy(&v, W.ns + lba * W.lba_bytes, 8);
				o.write_check_fail += v != ~expect_word(W.seed, lba);
			}
	// Every command completed as it should, and in shared mode exactly the
	// accepted ones reached the fixture.
	const uint64_t accepted = o.cmds - o.expect_rejected;
	o.ok = pt_ok && o.first_err == 0 && o.vfail == 0 && o.cid_fail == 0 && o.bad_status == 0 &&
	       o.nvme_err == 0 && o.write_check_fail == 0 && o.fixture_errors == 0 && o.bad_db == 0 &&
	       o.cmds > 0 && o.fixture_cmds == accepted &&
	       (!shared || (o.rc.sqes_accepted == accepted && o.rc.sqes_rejected == o.expect_rejected &&
			    o.rc.bad_doorbell_values == 0));
	return o;
}

static std::string run_json(const run_cfg &c, const run_out &o)
{
	char b[4096];
	snprintf(b, sizeof(b),
		 "{\"mode\": \"%s\", \"data\": \"%s\", \"op\": \"%s\", \"cq_wait\": \"%s\", \"cq_in\": \"%s\", "
		 "\"queue_pairs\": %u, \"qd\": %u, \"ring_depth\": %u, \"fixture_threads\": %d, \"relay_threads\": %d, "
		 "\"reject_every\": %u, \"cmds\": %llu, \"seconds\": %.4f, \"iops\": %.0f, "
		 "\"round_us_globaltimer\": %s, \"round_us_clock64\": %s, "
		 "\"nvme_errors\": %llu, \"verify_failures\": %llu, \"write_check_failures\": %llu, "
		 "\"cid_failures\": %llu, \"status_failures\": %llu, \"expected_rejections\": %llu, "
		 "\"first_error\": %d, \"fixture_cmds\": %llu, \"fixture_errors\": %llu, \"fixture_bad_doorbells\": %llu, "
		 "\"relay\": {\"polls\": %llu, \"idle_steps\": %llu, \"sq_doorbell_writes\": %llu, \"cq_doorbell_writes\": %llu, "
		 "\"cqes_mirrored\": %llu, \"bad_doorbell_values\": %llu, \"sqes_accepted\": %llu, \"sqes_rejected\": %llu, "
		 "\"relay_ns\": %llu, \"relay_ns_per_cmd\": %.1f}, "
		 "\"api\": \"%s\", \"backoff\": %u, \"reconverge\": %u, \"linger_ns\": %u, \"bytes_per_cmd\": %u, \"gb_per_s\": %.3f, "
		 "\"per_thread\": {\"sq_doorbell_writes\": %llu, \"cq_doorbell_writes\": %llu, \"cqes\": %llu, \"error\": %d}, "
		 "\"submit_ns_per_cmd\": %.1f, \"wait_ns_per_cmd\": %.1f, \"fixture_cq_full_stalls\": %llu, "
		 "\"ok\": %s}",
		 c.mode, c.data, c.opc == NVME_OPC_READ ? "read" : "write",
		 c.old_poll ? "before_dw3_poll" : "library_one_16B_load", c.cq_vram ? "vram" : "host", c.nq, c.qd, o.depth, o.F, o.R, c.reject_every,
		 (unsigned long long)o.cmds, o.seconds, o.iops, js(o.lat_ns).c_str(),
		 js(o.lat_clk_ns).c_str(), (unsigned long long)o.nvme_err,
		 (unsigned long long)o.vfail, (unsigned long long)o.write_check_fail,
		 (unsigned long long)o.cid_fail, (unsigned long long)o.bad_status,
		 (unsigned long long)o.expect_rejected, o.first_err,
		 (unsigned long long)o.fixture_cmds, (unsigned long long)o.fixture_errors,
		 (unsigned long long)o.bad_db,
		 (unsigned long long)o.rc.polls, (unsigned long long)o.relay_idle_steps,
		 (unsigned long long)o.rc.sq_doorbell_writes, (unsigned long long)o.rc.cq_doorbell_writes,
		 (unsigned long long)o.rc.cqes_mirrored, (unsigned long long)o.rc.bad_doorbell_values,
		 (unsigned long long)o.rc.sqes_accepted, (unsigned long long)o.rc.sqes_rejected,
		 (unsigned long long)o.rc.relay_ns,
		 o.cmds ? (double)o.rc.relay_ns / (double)o.cmds : 0.0,
		 c.api ? "per_thread" : "group", c.backoff, c.reconverge, c.api ? c.linger : 0, c.xfer ? c.xfer : W.lba_bytes, o.gbps,
		 (unsigned long long)o.pt_sq_doorbells, (unsigned long long)o.pt_cq_doorbells,
		 (unsigned long long)o.pt_cqes, o.pt_error, o.submit_ns, o.wait_ns, (unsigned long long)o.cq_full_stalls, o.ok ? "true" : "false");
	return b;
}

static bool g_all_ok = true;

// printf writes a non-finite double as nan/inf, which JSON has no word
// for: outside string literals, those become null.
static std::string json_finite(const std::string &in)
{
	std::string o;
	bool str = false;
	for (size_t i = 0; i < in.size(); i++) {
		const char ch = in[i];
		if (str) {
			o += ch;
			if (ch == '\\' && i + 1 < in.size())
				o += in[++i];
			else if (ch == '"')
				str = false;
			continue;
		}
		if (ch == '"') {
			str = true;
			o += ch;
			continue;
		}
		size_t k = i + (ch == '-');
		if (in.compare(k, 3, "nan") == 0 || in.compare(k, 3, "inf") == 0) {
			o += "null";
			i = k + 2;
			continue;
		}
		o += ch;
	}
	return o;
}

static run_out run_print(const char *tag, const run_cfg &c)
{
	run_out o = run_io(c);
	g_all_ok &= o.ok;
	printf("%-5s %-6s %-4s %-5s%s%s%s q%-2u qd%-2u F%d R%d%s: %10.0f cmds/s  round p50 %6.2f us p99 %6.2f us p99.9 %6.2f us  "
	       "relay %5.0f ns/cmd  submit %6.0f ns wait %6.0f ns cqfull %llu  err %llu vfail %llu wfail %llu cidfail %llu stfail %llu rej %llu/%llu ferr %d  %s\n",
	       tag, c.mode, c.data, c.opc == NVME_OPC_READ ? "read" : "write", c.old_poll ? " OLDPOLL" : "", c.cq_vram ? " CQvram" : "",
	       c.api ? " per-thread" : "",
	       c.nq, c.qd, o.F, o.R, c.reject_every ? " +foreign" : "", o.iops, o.lat_clk_ns.p50,
	       o.lat_clk_ns.p99, o.lat_clk_ns.p999, o.cmds ? (double)o.rc.relay_ns / o.cmds : 0.0,
	       o.submit_ns, o.wait_ns, (unsigned long long)o.cq_full_stalls, (unsigned long long)o.nvme_err, (unsigned long long)o.vfail,
	       (unsigned long long)o.write_check_fail, (unsigned long long)o.cid_fail,
	       (unsigned long long)o.bad_status, (unsigned long long)o.rc.sqes_rejected,
	       (unsigned long long)o.expect_rejected, o.first_err, o.ok ? "ok" : "CHECK FAILED");
	fflush(stdout);
	return o;
}

static double median(std::vector<double> v)
{
	if (v.empty())
		return 0;
	std::sort(v.begin(), v.end());
	return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// The CPU-only relay microbenchmark: every mix, both buffer layouts, one
// thread (hot caches) and relay-alone-on-its-core (client threads feed it).
static std::string microbench(double seconds, double *headline_single, double *headline_cross,
			      double *idle_frac_cross)
{
	const uint32_t ncpu = (uint32_t)std::max<size_t>(1, g_cpus.size());
	const uint32_t clients = ncpu >= 6 ? 4 : std::max<uint32_t>(1, ncpu - 2);
	std::vector<int> cpus;
	for (uint32_t i = 0; i < 1 + clients; i++)
		cpus.push_back(cpu_at(1 + (int)i));
	std::string j = "\"relay_microbench\": {\"note\": \"CPU only: relay.h (Relay::step + validate::check + "
			"Buffers::owns_page) over 64 pairs x 32-entry rings, an in-memory controller that completes at "
			"once; cmds_per_s_relay_time = commands / time inside Relay::step (the module's relay_ns); "
			"cmds_per_s_wall = commands / the relay thread's elapsed time (single: the whole loop incl. "
			"client and controller; cross: relay thread alone, client threads on other cores)\", \"runs\": [\n";
	bool first = true;
	{ // warm-up (caches, clocks, first-touch): not recorded, still checked
		mb::Config w = mb::standard(seconds, clients, cpus)[0];
		w.seconds = 0.1;
		g_all_ok &= mb::run(w).ok();
	}
	for (const mb::Config &c : mb::standard(seconds, clients, cpus)) {
		mb::Result r = mb::run(c);
		mb::print(r);
		g_all_ok &= r.ok();
		if (!strcmp(c.mix, "read4k") && !c.fragmented) {
			if (c.cross) {
				*headline_cross = r.per_s_wall();
				*idle_frac_cross = r.polls ? (double)r.idle_steps / r.polls : 0;
			} else {
				*headline_single = r.per_s_relay();
			}
		}
		j += std::string(first ? "  " : ",\n  ") + mb::json(r);
		first = false;
	}
	j += "\n]},\n";
	// Scaling: 1, 2 and 4 relay threads, each alone on its core (CPUs 1-4
	// of this process's), against the same 8 client threads on the CPUs
	// after them in every run (pairs i on relay i % R, one file).
	j += "\"relay_scaling\": {\"note\": \"cross mode, one file's 64 pairs x 32; relay threads on CPUs 1-4, "
	     "client threads (the files and the controllers) on CPUs 5-12 in every run; ratio = cmds_per_s_wall / "
	     "the 1-thread run of the same mix (target: 4 threads >= 3.2x, 1 thread >= 5 M/s)\", \"runs\": [\n";
	first = true;
	if (ncpu >= 6) {
		std::vector<int> rc, cc;
		for (int i = 1; i <= 4; i++)
			rc.push_back(cpu_at(i));
		for (int i = 5; i < (int)ncpu && cc.size() < 8; i++)
			cc.push_back(cpu_at(i));
		double base = 0;
		for (const mb::Config &c : mb::scaling(seconds, rc, cc)) {
			mb::Result r = mb::run(c);
			mb::print(r);
			g_all_ok &= r.ok();
			if (c.relay_threads == 1)
				base = r.per_s_wall();
			const double ratio = base ? r.per_s_wall() / base : 0;
			printf("# relay scaling %-8s %u thread(s), %zu clients: %.2f M cmds/s wall, %.2fx one thread\n", c.mix,
			       c.relay_threads, cc.size(), r.per_s_wall() / 1e6, ratio);
			char extra[96];
			snprintf(extra, sizeof(extra), ", \"ratio_to_one_thread\": %.3f}", ratio);
			std::string one = mb::json(r);
			one.pop_back();
			j += std::string(first ? "  " : ",\n  ") + one + extra;
			first = false;
		}
	}
	j += "\n]},\n";
	return j;
}

int main(int argc, char **argv)
{
	const char *out = ".";
	bool quick = false, mb_only = false, no_mb = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--fixture-threads") && i + 1 < argc)
			W.fixture_threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--relay-threads") && i + 1 < argc)
			W.relay_threads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--lba-bytes") && i + 1 < argc)
			W.lba_bytes = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			quick = true;
		else if (!strcmp(argv[i], "--microbench-only"))
			mb_only = true;
		else if (!strcmp(argv[i], "--no-microbench"))
			no_mb = true;
		else {
			fprintf(stderr, "usage: %s [--out DIR] [--fixture-threads N] [--relay-threads N] [--lba-bytes B] "
				"[--quick] [--microbench-only | --no-microbench]\n", argv[0]);
			return 2;
		}
	}
	if (W.lba_bytes < 512 || W.lba_bytes > 4096 || (W.lba_bytes & (W.lba_bytes - 1))) {
		fprintf(stderr, "--lba-bytes: a power of two from 512 to 4096\n");
		return 2;
	}
	cpu_set_t cs;
	sched_getaffinity(0, sizeof(cs), &cs);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &cs))
			g_cpus.push_back(i);
	pin(0);
	const double mbs = quick ? 0.1 : 0.5;

	if (mb_only) {
		double s = 0, x = 0, idle = 0;
		std::string j = "{\n" + microbench(mbs, &s, &x, &idle);
		j += "\"microbench_only\": true\n}\n";
		std::string path = std::string(out) + "/relay_microbench.json";
		FILE *f = fopen(path.c_str(), "w");
		if (!f) {
			perror(path.c_str());
			return 1;
		}
		fputs(json_finite(j).c_str(), f);
		fclose(f);
		printf("# wrote %s\n", path.c_str());
		return g_all_ok ? 0 : 1;
	}

	CK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleSpin));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	CK(cudaStreamCreateWithFlags(&W.ks, cudaStreamNonBlocking));

	CK(cudaHostAlloc(&W.qm_h, sizeof(qmem) * MAXQ, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&W.qm_d, W.qm_h, 0));
	// Room for bench_pt's 128 KiB commands too (PT_BIG_Q x PT_BIG_QD of them).
	W.buf_bytes = std::max<size_t>((size_t)MAXQ * MAXQD * W.lba_bytes,
				       (size_t)PT_BIG_Q * PT_BIG_QD * PT_BIG_XFER);
	CK(cudaHostAlloc(&W.hbuf_h, W.buf_bytes, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&W.hbuf_d, W.hbuf_h, 0));
	CK(cudaMalloc(&W.vbuf, W.buf_bytes));
	CK(cudaHostAlloc(&W.ns, W.ns_blocks * W.lba_bytes, cudaHostAllocDefault));
	CK(cudaMalloc(&W.qps_d, sizeof(bench_qp) * MAXQ));
	CK(cudaMalloc(&W.res_d, sizeof(blk_res) * MAXQ));
	CK(cudaMalloc(&W.lat_ns_d, 8ull * W.lat_cap));
	CK(cudaMalloc(&W.lat_clk_d, 8ull * W.lat_cap));

	// Shared mode's file: it mapped the host data buffers (handle 1) and
	// the VRAM ones (handle 2); namespace 1 is the fixture's; MDTS none
	// (2 MiB cap), so 512 list entries per command, as rust/qpair.rs sizes it.
	map_pages(1, (uint64_t)W.hbuf_d, W.buf_bytes);
	map_pages(2, (uint64_t)W.vbuf, W.buf_bytes);
	{
		uint32_t shift = 0;
		while ((1u << shift) < W.lba_bytes)
			shift++;
		W.limits.ns = {relay::validate::Ns{1, shift, W.ns_blocks}};
	}
	W.limits.max_transfer = relay::validate::shared_max_transfer(0);
	W.list_entries = relay::validate::pair_list_entries(W.limits.max_transfer);
	W.list_bytes = relay::validate::pair_list_bytes(MAXD, W.list_entries);
	CK(cudaHostAlloc(&W.pools, W.list_bytes * MAXQ, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&W.pools_d, W.pools, 0));
	W.lists = (uint64_t *)aligned_alloc(4096, W.list_bytes * MAXQ);
	W.pq_stride = (pq_bytes(MAXD) + 255) & ~(size_t)255;
	CK(cudaMalloc(&W.pq_mem_d, W.pq_stride * MAXQ));
	CK(cudaMalloc(&W.pqs_d, sizeof(pqueue) * MAXQ));
	{
		W.npages = W.buf_bytes / 4096;
		std::vector<uint64_t> pg(W.npages);
		for (uint64_t i = 0; i < W.npages; i++)
			pg[i] = (uint64_t)W.hbuf_d + 4096 * i;
		CK(cudaMalloc(&W.pages_d, 8 * W.npages));
		CK(cudaMemcpy(W.pages_d, pg.data(), 8 * W.npages, cudaMemcpyHostToDevice));
	}
	if (!W.pools || !W.lists) {
		fprintf(stderr, "out of memory\n");
		return 2;
	}
	memset(W.pools, 0, W.list_bytes * MAXQ);
	memset(W.lists, 0, W.list_bytes * MAXQ);
	// A page the file does not own, for the rejection run (never touched).
	W.foreign_dma = (((uint64_t)W.hbuf_d + W.buf_bytes + 4095) & ~4095ull) + (1ull << 20);
	while (W.buffers.owns_page(W.foreign_dma) ||
	       W.buffers.owns_page(W.foreign_dma + 4096 * ((MAXQD * W.lba_bytes + 4095) / 4096)))
		W.foreign_dma += 1ull << 30;

	// Probe: unit costs and the SM clock (for clock64 -> ns).
	uint32_t *cells_h, *cells_d, *dcell;
	CK(cudaHostAlloc(&cells_h, 4096, cudaHostAllocMapped));
	memset(cells_h, 0, 4096);
	CK(cudaHostGetDevicePointer(&cells_d, cells_h, 0));
	CK(cudaMalloc(&dcell, 64));
	CK(cudaMemset(dcell, 0, 64));
	uint64_t *pr_d, pr[16];
	CK(cudaMalloc(&pr_d, 128));
	CK(cudaMalloc(&W.dcq, sizeof(cqe) * MAXD * MAXQ));
	CK(cudaMemset(W.dcq, 0, sizeof(cqe) * MAXD * MAXQ));
	const uint32_t NP = 2000;
	probe<<<1, 1, 0, W.ks>>>(cells_d, dcell, cells_d + 64, NP, pr_d,
				 (const cqe *)(cells_d + 768), W.dcq);
	CK(cudaStreamSynchronize(W.ks));
	CK(cudaMemcpy(pr, pr_d, 128, cudaMemcpyDeviceToHost));
	W.sm_ghz = (double)pr[4] / (double)pr[5];
	printf("# %s  driver %d runtime %d  SM clock %.3f GHz  globaltimer step %llu ns  %zu CPUs\n",
	       prop.name, drv, rt, W.sm_ghz, (unsigned long long)pr[3], g_cpus.size());
	printf("# poll_load host %.0f ns, device %.0f ns, doorbell_write host %.0f ns\n",
	       pr[0] / (double)NP, pr[1] / (double)NP, pr[2] / (double)NP);
	printf("POLL  CQE poll, one 16-byte load: CQ in host memory %.0f ns, in device memory %.0f ns; "
	       "before (32-bit phase poll + acquire + 3 loads): host %.0f ns, device %.0f ns\n",
	       pr[8] / (double)NP, pr[10] / (double)NP, pr[9] / (double)NP, pr[11] / (double)NP);

	// Ping-pong.
	const uint32_t NPP = quick ? 2000 : 20000;
	uint64_t *pn_d, *pc_d;
	CK(cudaMalloc(&pn_d, 8ull * NPP));
	CK(cudaMalloc(&pc_d, 8ull * NPP));
	volatile uint32_t *ping_h = cells_h + 256, *pong_h = cells_h + 512;
	std::atomic<bool> pp_stop{false};
	std::thread ponger([&] {
		pin(1);
		uint32_t last = 0;
		while (!pp_stop.load(std::memory_order_relaxed)) {
			uint32_t v = swnvme::ld_acquire(ping_h);
			if (v != last) {
				swnvme::st_release(pong_h, v);
				last = v;
			}
		}
	});
	pingpong<<<1, 1, 0, W.ks>>>(cells_d + 256, cells_d + 512, NPP, pn_d, pc_d);
	CK(cudaStreamSynchronize(W.ks));
	pp_stop = true;
	ponger.join();
	std::vector<uint64_t> pn(NPP), pc(NPP);
	CK(cudaMemcpy(pn.data(), pn_d, 8ull * NPP, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(pc.data(), pc_d, 8ull * NPP, cudaMemcpyDeviceToHost));
	std::vector<double> rtt, rttc, ow;
	for (uint32_t i = 100; i < NPP; i++) { // skip warm-up
		rtt.push_back(pn[i] / 1000.0);
		rttc.push_back(pc[i] / W.sm_ghz / 1000.0);
		ow.push_back(pc[i] / W.sm_ghz / 2000.0);
	}
	stats s_rtt = summarize(rtt), s_rttc = summarize(rttc), s_ow = summarize(ow);
	printf("# ping-pong RTT p50 %.2f us p99 %.2f us (clock64: p50 %.2f p99 %.2f) -> one-way ~%.2f us\n",
	       s_rtt.p50, s_rtt.p99, s_rttc.p50, s_rttc.p99, s_ow.p50);

	std::string json;
	char hb[3072];
	snprintf(hb, sizeof(hb),
		 "{\n\"uapi\": 2, \"modes\": {\"owner\": \"raw pair: GPU writes the real SQ, rings the fixture's doorbell, reaps the real CQ\", "
		 "\"shared\": \"validated pair: GPU writes a shadow SQ and shadow cells, reaps the CQ mirror; relay.h (bridge.rs Relay::step + "
		 "validate.rs check + buffers.rs owns_page) on bridge_thread.c's loop between the GPU and the fixture\"},\n"
		 "\"fixture\": \"sw_nvme_fixture.h: software NVMe controller answered by CPU threads, no media: not an SSD\",\n"
		 "\"gpu\": \"%s\", \"cuda_driver_version\": %d, \"cuda_runtime_version\": %d,\n"
		 "\"sm_clock_ghz_measured\": %.4f, \"globaltimer_step_ns\": %llu,\n"
		 "\"lba_bytes\": %u, \"lbas_per_io\": 1, \"ns_blocks\": %llu, \"cpus\": %zu,\n"
		 "\"fixture_threads\": %d, \"relay_threads\": %d, \"buffer_ranges\": %zu, \"list_entries\": %zu,\n"
		 "\"probe_ns\": {\"poll_load_host\": %.1f, \"poll_load_device\": %.1f, \"doorbell_write_host\": %.1f, "
		 "\"cqe_poll_one_16B_load_host\": %.1f, \"cqe_poll_one_16B_load_device\": %.1f, "
		 "\"cqe_before_dw3_poll_plus_3_loads_host\": %.1f, \"cqe_before_dw3_poll_plus_3_loads_device\": %.1f},\n"
		 "\"pingpong\": {\"note\": \"GPU doorbell_write to a mapped host cell, CPU thread answers in another, GPU poll_load; one_way = rtt/2\", "
		 "\"rtt_us_globaltimer\": %s, \"rtt_us_clock64\": %s, \"one_way_us_clock64\": %s},\n",
		 prop.name, drv, rt, W.sm_ghz, (unsigned long long)pr[3], W.lba_bytes,
		 (unsigned long long)W.ns_blocks, g_cpus.size(), W.fixture_threads, W.relay_threads,
		 W.buffers.ranges(), W.list_entries,
		 pr[0] / (double)NP, pr[1] / (double)NP, pr[2] / (double)NP,
		 pr[8] / (double)NP, pr[10] / (double)NP, pr[9] / (double)NP, pr[11] / (double)NP,
		 js(s_rtt).c_str(), js(s_rttc).c_str(), js(s_ow).c_str());
	json += hb;

	// QD1 round trips. Three reps, each: owner, shared (the library now:
	// one 16-byte CQE load per poll) and owner with the library's cq_wait
	// BEFORE that change (cq_wait_old), in rotating order; the ratios are
	// taken within each rep, their median reported. Then writes, VRAM data
	// (both modes), the per-thread API at QD1, the shared mode before the
	// change, and the CQ in device memory (owner; the fixture's CQE reaches
	// VRAM through the copy engine), with the one-load poll and before it.
	const double qd1s = quick ? 0.2 : 1.0;
	std::vector<run_cfg> qd1;
	for (int rep = 0; rep < 3; rep++)
		for (int k = 0; k < 3; k++) {
			const int w = (k + rep) % 3;
			run_cfg c{w == 1 ? "shared" : "owner", "host", 1, 1, qd1s};
			c.old_poll = w == 2;
			qd1.push_back(c);
		}
	const size_t qd1_reps = qd1.size();
	for (const char *m : {"owner", "shared"}) {
		run_cfg c{m, "host", 1, 1, qd1s};
		c.opc = NVME_OPC_WRITE;
		qd1.push_back(c);
	}
	for (const char *m : {"owner", "shared"})
		qd1.push_back(run_cfg{m, "vram", 1, 1, qd1s});
	const size_t qd1_pt = qd1.size();
	{
		run_cfg c{"owner", "host", 1, 1, qd1s};
		c.api = 1;
		qd1.push_back(c);
	}
	{
		run_cfg c{"shared", "host", 1, 1, qd1s};
		c.old_poll = true;
		qd1.push_back(c);
	}
	const size_t qd1_cqv = qd1.size();
	for (int old : {0, 1}) {
		run_cfg c{"owner", "host", 1, 1, qd1s};
		c.cq_vram = true;
		c.old_poll = old;
		qd1.push_back(c);
	}
	json += "\"qd1\": [\n";
	std::vector<double> p50_owner, p50_shared, p99_owner, p99_shared, ratios;
	std::vector<double> p50_old, ratios_old;
	double pt_qd1 = 0, cqv_new = 0, cqv_old = 0;
	std::vector<run_out> qo;
	for (size_t i = 0; i < qd1.size(); i++) {
		run_out o = run_print("QD1", qd1[i]);
		qo.push_back(o);
		if (i < qd1_reps) {
			const bool sh = shared_mode(qd1[i]);
			if (qd1[i].old_poll) {
				p50_old.push_back(o.lat_clk_ns.p50);
			} else {
				(sh ? p50_shared : p50_owner).push_back(o.lat_clk_ns.p50);
				(sh ? p99_shared : p99_owner).push_back(o.lat_clk_ns.p99);
			}
		}
		if (i == qd1_pt)
			pt_qd1 = o.lat_clk_ns.p50;
		if (i == qd1_cqv)
			cqv_new = o.lat_clk_ns.p50;
		if (i == qd1_cqv + 1)
			cqv_old = o.lat_clk_ns.p50;
		json += "  " + run_json(qd1[i], o) + (i + 1 < qd1.size() ? ",\n" : "\n");
	}
	for (size_t rep = 0; rep < p50_owner.size() && rep < p50_shared.size(); rep++)
		ratios.push_back(p50_owner[rep] > 0 ? p50_shared[rep] / p50_owner[rep] : 0);
	for (size_t rep = 0; rep < p50_owner.size() && rep < p50_old.size(); rep++)
		ratios_old.push_back(p50_old[rep] > 0 ? p50_owner[rep] / p50_old[rep] : 0);
	json += "],\n";

	// Shared mode refuses what it must: every 4th command of a QD8 batch
	// names a page the file never mapped.
	{
		run_cfg c{"shared", "host", 1, 8, 10.0};
		c.reject_every = 4;
		c.max_rounds = quick ? 500 : 2000;
		run_out o = run_print("CHECK", c);
		json += "\"rejection_check\": " + run_json(c, o) + ",\n";
	}

	// Commands/s sweep.
	std::vector<uint32_t> nqs = {1, 2, 4, 8, 16, 32, 64}, qds = {1, 8, 32};
	const double sw = quick ? 0.05 : 0.25;
	json += "\"iops\": [\n";
	bool first = true;
	for (const char *mode : {"owner", "shared"})
		for (uint32_t qd : qds)
			for (uint32_t nq : nqs) {
				run_cfg c{mode, "host", nq, qd, sw};
				run_out o = run_print("IOPS", c);
				json += std::string(first ? "  " : ",\n  ") + run_json(c, o);
				first = false;
			}
	json += "\n],\n";

	// 64 pairs x batch depth 32 (64-entry rings): owner, shared with 1, 2,
	// 4 and 8 relay threads (4 fixture threads throughout), and both with
	// the library's cq_wait from before the one-load poll (cq_wait_old).
	const double hs = quick ? 0.2 : 1.0;
	json += "\"pairs64_qd32\": [\n";
	double iops_owner = 0, iops_shared = 0, iops_shared_1t = 0, iops_owner_old = 0;
	std::vector<run_cfg> big;
	big.push_back(run_cfg{"owner", "host", 64, 32, hs});
	for (int r : {1, 2, 4, 8}) {
		run_cfg c{"shared", "host", 64, 32, hs};
		c.rthreads = r;
		big.push_back(c);
	}
	for (const char *m : {"owner", "shared"}) { // before the one-load poll
		run_cfg c{m, "host", 64, 32, hs};
		c.old_poll = true;
		big.push_back(c);
	}
	for (size_t i = 0; i < big.size(); i++) {
		run_out o = run_print("64x32", big[i]);
		if (i == 0)
			iops_owner = o.iops;
		if (i == 1)
			iops_shared_1t = o.iops;
		if (shared_mode(big[i]) && o.R == W.relay_threads && !big[i].old_poll)
			iops_shared = o.iops;
		if (!shared_mode(big[i]) && big[i].old_poll)
			iops_owner_old = o.iops;
		json += "  " + run_json(big[i], o) + (i + 1 < big.size() ? ",\n" : "\n");
	}
	json += "],\n";

	// The per-thread API beside the group API: 64 pairs x 32 threads, one
	// command in flight per thread (the group run above has 32 per block in
	// one batch), owner and shared (1 relay thread), then the group API
	// again; then 128 KiB reads through PRP lists the threads build, owner
	// and shared, against what the fixture's own threads get from memcpy
	// of the same 128 KiB blocks (the fixture moves data with memcpy).
	json += "\"per_thread\": [\n";
	double pt_owner = 0, pt_shared1 = 0, group_again = 0, big_owner = 0, big_shared = 0;
	double pt_regrouped = 0, group_third = 0;
	std::vector<run_cfg> pt;
	{
		run_cfg c{"owner", "host", 64, 32, hs};
		c.api = 1;
		pt.push_back(c);
		c.mode = "shared";
		c.rthreads = 1;
		pt.push_back(c);
		pt.push_back(run_cfg{"owner", "host", 64, 32, hs});
		run_cfg b{"owner", "host", PT_BIG_Q, PT_BIG_QD, hs};
		b.api = 1;
		b.xfer = PT_BIG_XFER;
		pt.push_back(b);
		b.mode = "shared";
		pt.push_back(b);
		run_cfg k{"owner", "host", 64, 32, hs}; // with backoff (nanosleep)
		k.api = 1;
		k.backoff = 1;
		pt.push_back(k);
		k.reconverge = 1; // backoff + the warp regrouped after each command
		pt.push_back(k);
		k.backoff = 0;    // regrouped, no backoff
		pt.push_back(k);
		pt.push_back(run_cfg{"owner", "host", 64, 32, hs}); // the group API a third time
		// Free-running again, with pq_wait()'s linger at 0 (a lane leaves
		// as soon as its own completion is taken: the library before the
		// linger), 8 and 128 us (what 8 and 128 polls were on this
		// host-memory CQ); then the group API a fourth time.
		run_cfg l{"owner", "host", 64, 32, hs};
		l.api = 1;
		for (uint32_t v : {0u, 8000u, 128000u}) {
			l.linger = v;
			pt.push_back(l);
		}
		pt.push_back(run_cfg{"owner", "host", 64, 32, hs});
		// Shared (1 relay thread), the default linger and 0, side by side.
		l.mode = "shared";
		l.rthreads = 1;
		for (uint32_t v : {PQ_LINGER_NS, 0u}) {
			l.linger = v;
			pt.push_back(l);
		}
	}
	double pt_linger[3] = {0, 0, 0}, group_fourth = 0, shared_linger[2] = {0, 0};
	for (size_t i = 0; i < pt.size(); i++) {
		char tag[16];
		snprintf(tag, sizeof(tag), "PTl%u", pt[i].linger);
		run_out o = run_print(pt[i].xfer ? "PRP" : pt[i].reconverge ? (pt[i].backoff ? "PTrb" : "PTr") :
				      pt[i].backoff ? "PTbo" :
				      !pt[i].api || pt[i].linger == PQ_LINGER_NS ? "PT" : tag, pt[i]);
		if (pt[i].xfer)
			printf("PRP   %s: %.2f GB/s in %u KiB reads, %llu SQ doorbell writes for %llu commands\n",
			       pt[i].mode, o.gbps, pt[i].xfer / 1024,
			       (unsigned long long)o.pt_sq_doorbells, (unsigned long long)o.cmds);
		else if (pt[i].api)
			// Commands per SQ doorbell (how well rings coalesce) and per
			// CQ doorbell (one per reap that consumed: commands per round).
			printf("PTdb  %s: %llu SQ and %llu CQ doorbell writes for %llu commands "
			       "(%.1f and %.1f commands each)\n",
			       pt[i].mode, (unsigned long long)o.pt_sq_doorbells,
			       (unsigned long long)o.pt_cq_doorbells, (unsigned long long)o.cmds,
			       o.pt_sq_doorbells ? (double)o.cmds / o.pt_sq_doorbells : 0.0,
			       o.pt_cq_doorbells ? (double)o.cmds / o.pt_cq_doorbells : 0.0);
		if (i == 0)
			pt_owner = o.iops;
		if (i == 1)
			pt_shared1 = o.iops;
		if (i == 2)
			group_again = o.iops;
		if (i == 3)
			big_owner = o.gbps;
		if (i == 4)
			big_shared = o.gbps;
		if (i == 7)
			pt_regrouped = o.iops;
		if (i == 8)
			group_third = o.iops;
		if (i >= 9 && i <= 11)
			pt_linger[i - 9] = o.iops;
		if (i == 12)
			group_fourth = o.iops;
		if (i >= 13 && i <= 14)
			shared_linger[i - 13] = o.iops;
		json += "  " + run_json(pt[i], o) + (i + 1 < pt.size() ? ",\n" : "\n");
	}
	json += "],\n";
	// The fixture's memcpy ceiling: its threads (pinned as the fixture's
	// are) copying 128 KiB blocks from the namespace into the data buffer.
	double memcpy_gbps = 0;
	{
		const int F = std::min<int>(W.fixture_threads, (int)PT_BIG_Q);
		const double secs = quick ? 0.1 : 0.5;
		std::atomic<uint64_t> bytes{0};
		std::vector<std::thread> mt;
		auto t0 = std::chrono::steady_clock::now();
		for (int t = 0; t < F; t++)
			mt.emplace_back([&, t] {
				pin(1 + t);
				uint64_t n = 0, k = 0;
				const size_t blocks = W.buf_bytes / PT_BIG_XFER;
				const size_t nsb = (size_t)W.ns_blocks * W.lba_bytes / PT_BIG_XFER;
				while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < secs) {
					std::memcpy(W.hbuf_h + ((k * F + t) % blocks) * PT_BIG_XFER,
						    W.ns + ((k * 7 + t) % nsb) * PT_BIG_XFER, PT_BIG_XFER);
					n += PT_BIG_XFER;
					k++;
				}
				bytes += n;
			});
		for (auto &x : mt)
			x.join();
		double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
		memcpy_gbps = bytes / el / 1e9;
		printf("MEMCPY fixture threads %d: %.2f GB/s in 128 KiB copies (namespace -> mapped host buffer)\n",
		       F, memcpy_gbps);
	}
	const double pt_ratio = iops_owner ? pt_owner / iops_owner : 0;
	const double pt_ratio2 = group_again ? pt_owner / group_again : 0;
	// The regrouped per-thread run (PTr) against the group runs on either
	// side of it.
	const double ptr_ratio = group_again ? pt_regrouped / group_again : 0;
	const double ptr_ratio2 = group_third ? pt_regrouped / group_third : 0;

	double mb_single = 0, mb_cross = 0, mb_idle = 0;
	if (!no_mb)
		json += microbench(mbs, &mb_single, &mb_cross, &mb_idle);

	const double p50o = median(p50_owner), p50s = median(p50_shared), ratio = median(ratios);
	const double p50old = median(p50_old), ratio_old = median(ratios_old);
	const double pp50 = s_rttc.p50;
	const double g_pp = pp50 > 0 ? p50o / pp50 : 0, pt_pp = pp50 > 0 ? pt_qd1 / pp50 : 0;
	const bool pp_met = g_pp > 0 && g_pp <= 2.0;
	const bool ratio_met = ratio > 0 && ratio <= 1.15, relay_met = mb_cross >= 5e6;
	char tb[4096];
	snprintf(tb, sizeof(tb),
		 "\"targets\": {\"qd1_p50_us_owner\": %.3f, \"qd1_p50_us_shared\": %.3f, "
		 "\"qd1_p99_us_owner\": %.3f, \"qd1_p99_us_shared\": %.3f, "
		 "\"qd1_p50_ratio_shared_over_owner\": %.4f, \"qd1_p50_ratio_per_rep\": [%.4f, %.4f, %.4f], "
		 "\"qd1_ratio_target\": 1.15, \"qd1_ratio_met\": %s,\n"
		 "  \"pairs64_qd32_cmds_per_s_owner\": %.0f, \"pairs64_qd32_cmds_per_s_shared\": %.0f, "
		 "\"pairs64_qd32_cmds_per_s_shared_1_relay_thread\": %.0f, \"pairs64_qd32_ratio_shared_over_owner\": %.4f,\n"
		 "  \"relay_thread_cmds_per_s_read4k_cross\": %.0f, \"relay_thread_idle_step_fraction_cross\": %.4f, "
		 "\"relay_thread_cmds_per_s_read4k_single_relay_time\": %.0f, "
		 "\"relay_thread_target\": 5000000, \"relay_thread_target_met\": %s, \"microbench_ran\": %s,\n"
		 "  \"per_thread_64x32_cmds_per_s_owner\": %.0f, \"per_thread_64x32_cmds_per_s_shared_1_relay_thread\": %.0f, "
		 "\"group_64x32_cmds_per_s_owner_again\": %.0f, \"per_thread_over_group_64x32_owner\": %.4f, "
		 "\"per_thread_over_group_64x32_owner_again\": %.4f, \"per_thread_target\": 0.8, \"per_thread_target_met\": %s,\n"
		 "  \"per_thread_regrouped_64x32_cmds_per_s_owner\": %.0f, \"group_64x32_cmds_per_s_owner_third\": %.0f, "
		 "\"per_thread_regrouped_over_group_again\": %.4f, \"per_thread_regrouped_over_group_third\": %.4f, "
		 "\"per_thread_regrouped_target_met\": %s,\n"
		 "  \"per_thread_linger_ns_default\": %u, \"per_thread_linger0_cmds_per_s\": %.0f, "
		 "\"per_thread_linger8us_cmds_per_s\": %.0f, \"per_thread_linger128us_cmds_per_s\": %.0f, "
		 "\"group_64x32_cmds_per_s_owner_fourth\": %.0f, "
		 "\"per_thread_shared_1_relay_thread_linger_default_cmds_per_s\": %.0f, "
		 "\"per_thread_shared_1_relay_thread_linger0_cmds_per_s\": %.0f,\n"
		 "  \"prp128k_gb_per_s_owner\": %.3f, \"prp128k_gb_per_s_shared\": %.3f, \"fixture_memcpy_gb_per_s\": %.3f, "
		 "\"prp128k_owner_over_memcpy\": %.4f, \"prp128k_shared_over_memcpy\": %.4f,\n"
		 "  \"pingpong_rtt_p50_us_clock64\": %.3f, \"qd1_p50_us_group_owner\": %.3f, \"qd1_p50_us_per_thread_owner\": %.3f, "
		 "\"qd1_group_over_pingpong\": %.4f, \"qd1_per_thread_over_pingpong\": %.4f, \"qd1_over_pingpong_target\": 2.0, "
		 "\"qd1_over_pingpong_met\": %s,\n"
		 "  \"qd1_p50_us_owner_before_one_load_poll\": %.3f, \"qd1_p50_ratio_after_over_before\": %.4f, "
		 "\"qd1_p50_ratio_after_over_before_per_rep\": [%.4f, %.4f, %.4f], "
		 "\"pairs64_qd32_cmds_per_s_owner_before_one_load_poll\": %.0f, \"pairs64_qd32_after_over_before\": %.4f,\n"
		 "  \"cqe_poll_ns_host\": %.1f, \"cqe_poll_ns_device\": %.1f, \"cqe_before_ns_host\": %.1f, \"cqe_before_ns_device\": %.1f, "
		 "\"qd1_p50_us_owner_cq_vram\": %.3f, \"qd1_p50_us_owner_cq_vram_before_one_load_poll\": %.3f, "
		 "\"cq_vram_note\": \"CQ in device memory: cudaMalloc; the fixture's CPU thread builds each CQE in its pinned host ring and the GPU copy engine writes it into VRAM (cudaMemcpyAsync H2D, 16 B per CQE); no CPU mapping of VRAM (BAR1) is used, so its QD1 includes the copy's launch and transfer\"},\n"
		 "\"all_checks_ok\": %s\n}\n",
		 p50o, p50s, median(p99_owner), median(p99_shared), ratio,
		 ratios.size() > 0 ? ratios[0] : 0, ratios.size() > 1 ? ratios[1] : 0,
		 ratios.size() > 2 ? ratios[2] : 0, ratio_met ? "true" : "false",
		 iops_owner, iops_shared, iops_shared_1t, iops_owner ? iops_shared / iops_owner : 0,
		 mb_cross, mb_idle, mb_single, relay_met ? "true" : "false", no_mb ? "false" : "true",
		 pt_owner, pt_shared1, group_again, pt_ratio, pt_ratio2,
		 std::min(pt_ratio, pt_ratio2) >= 0.8 ? "true" : "false",
		 pt_regrouped, group_third, ptr_ratio, ptr_ratio2,
		 std::min(ptr_ratio, ptr_ratio2) >= 0.8 ? "true" : "false",
		 PQ_LINGER_NS, pt_linger[0], pt_linger[1], pt_linger[2], group_fourth,
		 shared_linger[0], shared_linger[1],
		 big_owner, big_shared, memcpy_gbps, memcpy_gbps ? big_owner / memcpy_gbps : 0,
		 memcpy_gbps ? big_shared / memcpy_gbps : 0,
		 pp50, p50o, pt_qd1, g_pp, pt_pp, pp_met ? "true" : "false",
		 p50old, ratio_old, ratios_old.size() > 0 ? ratios_old[0] : 0,
		 ratios_old.size() > 1 ? ratios_old[1] : 0, ratios_old.size() > 2 ? ratios_old[2] : 0,
		 iops_owner_old, iops_owner_old ? iops_owner / iops_owner_old : 0,
		 pr[8] / (double)NP, pr[10] / (double)NP, pr[9] / (double)NP, pr[11] / (double)NP,
		 cqv_new, cqv_old,
		 g_all_ok ? "true" : "false");
	json += tb;
	printf("TARGET QD1 p50: owner %.2f us, shared %.2f us, shared/owner %.3f (target <= 1.15: %s; "
	       "both doorbells end at a CPU thread in this fixture, so ~1.0 by construction)\n",
	       p50o, p50s, ratio, ratio_met ? "met" : "NOT met");
	printf("TARGET 64x32: owner %.2f M cmds/s, shared (%d relay threads) %.2f M, shared (1 relay thread) %.2f M\n",
	       iops_owner / 1e6, W.relay_threads, iops_shared / 1e6, iops_shared_1t / 1e6);
	if (!no_mb)
		printf("TARGET one relay thread, 4 KiB reads, relay alone on its core: %.2f M validated cmds/s "
		       "(idle steps %.1f%%; hot-cache single thread: %.2f M/s of relay time) (target >= 5 M: %s)\n",
		       mb_cross / 1e6, 100 * mb_idle, mb_single / 1e6, relay_met ? "met" : "NOT met");
	printf("TARGET per-thread API 64x32 owner: %.2f M cmds/s, group API %.2f M (again: %.2f M): per-thread/group %.3f (%.3f) (target >= 0.8: %s)\n",
	       pt_owner / 1e6, iops_owner / 1e6, group_again / 1e6, pt_ratio, pt_ratio2,
	       std::min(pt_ratio, pt_ratio2) >= 0.8 ? "met" : "NOT met");
	printf("TARGET per-thread API 64x32 owner, the warp regrouped after each command (PTr): %.2f M cmds/s, "
	       "group API before it %.2f M, after it %.2f M: %.3f / %.3f (>= 0.8 against both: %s)\n",
	       pt_regrouped / 1e6, group_again / 1e6, group_third / 1e6, ptr_ratio, ptr_ratio2,
	       std::min(ptr_ratio, ptr_ratio2) >= 0.8 ? "met" : "NOT met");
	{
		const double g = (group_third + group_fourth) / 2;
		printf("LINGER per-thread API 64x32 owner, free-running, pq_wait() linger in ns: "
		       "%u (default) %.2f M cmds/s; 0 %.2f M, 8 us %.2f M, 128 us %.2f M against the group API "
		       "around them (%.2f M, %.2f M): %.3f / %.3f / %.3f of their mean\n",
		       PQ_LINGER_NS, pt_owner / 1e6, pt_linger[0] / 1e6, pt_linger[1] / 1e6,
		       pt_linger[2] / 1e6, group_third / 1e6, group_fourth / 1e6, g ? pt_linger[0] / g : 0,
		       g ? pt_linger[1] / g : 0, g ? pt_linger[2] / g : 0);
		printf("LINGER per-thread API 64x32 shared, 1 relay thread, free-running: linger %u %.2f M cmds/s, "
		       "0 %.2f M (%.3f)\n", PQ_LINGER_NS, shared_linger[0] / 1e6, shared_linger[1] / 1e6,
		       shared_linger[1] ? shared_linger[0] / shared_linger[1] : 0);
	}
	printf("TARGET 128 KiB reads through PRP lists: owner %.2f GB/s, shared %.2f GB/s; fixture memcpy %.2f GB/s: %.3f / %.3f of it\n",
	       big_owner, big_shared, memcpy_gbps, memcpy_gbps ? big_owner / memcpy_gbps : 0,
	       memcpy_gbps ? big_shared / memcpy_gbps : 0);
	printf("TARGET QD1 p50 vs ping-pong RTT p50 %.2f us: group API %.2f us (%.2fx), per-thread API %.2f us (%.2fx) "
	       "(target group <= 2.0x: %s)\n", pp50, p50o, g_pp, pt_qd1, pt_pp, pp_met ? "met" : "NOT met");
	printf("TARGET one-load CQE poll: QD1 owner p50 %.2f us, before %.2f us (after/before %.3f); "
	       "64x32 owner %.2f M/s, before %.2f M/s (after/before %.3f)\n",
	       p50o, p50old, ratio_old, iops_owner / 1e6, iops_owner_old / 1e6,
	       iops_owner_old ? iops_owner / iops_owner_old : 0);
	printf("TARGET CQ host vs device memory: CQE poll %.0f / %.0f ns (before: %.0f / %.0f ns); "
	       "QD1 owner p50 CQ in host memory %.2f us, in VRAM via copy engine %.2f us (before: %.2f us)\n",
	       pr[8] / (double)NP, pr[10] / (double)NP, pr[9] / (double)NP, pr[11] / (double)NP,
	       p50o, cqv_new, cqv_old);
	printf("CHECKS %s\n", g_all_ok ? "all ok" : "SOME FAILED");
	std::string path = std::string(out) + "/results.json";
	FILE *f = fopen(path.c_str(), "w");
	if (!f) {
		perror(path.c_str());
		return 1;
	}
	fputs(json_finite(json).c_str(), f);
	fclose(f);
	printf("# wrote %s\n", path.c_str());
	return g_all_ok ? 0 : 1;
}
