// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// gpunvme_bench.cu - the device library (include/gpunvme, the same headers
// the AMD build compiles, through compat.h's CUDA path) timed on an NVIDIA
// GPU against sw_nvme_fixture.h, a software NVMe controller that is a
// BENCHMARK FIXTURE (never a test). Two modes over the same kernel:
//   direct   the GPU's qpair points at the fixture's doorbell cells and CQ:
//            what a raw pair (UAPI v2 owner mode) is to the GPU;
//   bridged  the GPU rings shadow cells and reaps a shadow CQ; relay
//            threads run relay.h (UAPI v1's rust/bridge.rs Relay::step,
//            ported) to ring the fixture's doorbells and mirror its CQEs.
//            A v2 shared pair's relay does that and more: it also copies
//            each SQE from a shadow SQ into the real one after checking
//            it, which this port does not model, so "bridged" is a lower
//            bound on a shared pair's cost, not its measurement.
// All queues, doorbell cells and shadow cells are cudaHostAlloc(Mapped)
// pinned host memory; the GPU touches them over PCIe.
//
// Measures: ping-pong GPU<->CPU through one mapped cell each way (one-way
// latency = RTT / 2: GPU %globaltimer and the host clock are different
// clocks, so a one-way time is never read across them); QD1 round trip of
// 1-LBA I/Os in both modes; IOPS for 1..64 queue pairs at several depths.
// Writes results.json into the directory given by --out.

#include <gpunvme/gpunvme.h>

#include "relay.h"
#include "sw_nvme_fixture.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// One queue pair's rings and cells, in mapped pinned host memory.
struct alignas(4096) qmem {
	sqe sq[MAXD];
	cqe cq[MAXD];         // the fixture's (real) CQ
	cqe shadow_cq[MAXD];  // the bridge's mirror
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
	int32_t first_err;
	uint32_t nvme_err, vfail, rounds;
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
	uint32_t reap_v4;  // 1: the proposed cq_wait_v4 (above)
	uint64_t seed;
};

GPUNVME_HD uint64_t expect_word(uint64_t seed, uint64_t lba)
{
	return seed ^ (lba * 0x9e3779b97f4a7c15ull);
}

// PROPOSED library change, measured here before anyone edits queue.h:
// cq_wait() reads dwords 0, 1, 2 of a completed CQE with three separate
// volatile loads; against a CQ in host memory each is a serial PCIe read
// (~1 us on this box). This copy is queue.h's cq_wait()/group_reap() with
// one change: after the phase is seen and acquire_system(), the entry is
// read with ONE 16-byte volatile vector load. Same ordering argument (the
// acquire on dw3 orders the later load), one PCIe round trip instead of 3.
__device__ int32_t cq_wait_v4(const qpair &q, uint32_t i, cqe *out)
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
			uint32_t w0, w1, w2, w3;
			asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
				     : "=r"(w0), "=r"(w1), "=r"(w2), "=r"(w3)
				     : "l"(e)
				     : "memory");
			(void)w3;
			out->dw0 = w0;
			out->dw1 = w1;
			out->sqhd = (uint16_t)w2;
			out->sqid = (uint16_t)(w2 >> 16);
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

// queue.h's group_reap() verbatim, calling cq_wait_v4.
__device__ int32_t group_reap_v4(qpair &q, uint32_t lane, uint32_t n, cqe *out,
				 int32_t *agg)
{
	int32_t rc = lane < n ? cq_wait_v4(q, lane, out) : OK;

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
__global__ void bench_io(bench_args a)
{
	__shared__ int32_t agg;
	__shared__ uint32_t go;
	__shared__ uint64_t t_start_s;
	const uint32_t lane = lane_id(), b = group_id();
	qpair q = a.qps[b].q;
	uint8_t *buf = a.qps[b].buf + (size_t)lane * a.lba_bytes;
	const uint64_t dma = a.qps[b].buf_dma + (uint64_t)lane * a.lba_bytes;
	uint32_t vfail = 0, nerr = 0, r;
	int32_t ferr = OK;

	if (lane == 0)
		t_start_s = wall_ticks();
	sync_lanes();
	const uint64_t t_start = t_start_s;
	for (r = 0;; r++) {
		if (lane == 0)
			go = r < a.max_rounds && wall_ticks() - t_start < a.duration_ns;
		sync_lanes();
		const bool g = go;
		sync_lanes();
		if (!g)
			break;
		const uint64_t lba = ((uint64_t)b * 7919u + (uint64_t)r * a.qd + lane) % a.ns_blocks;
		if (a.opc == NVME_OPC_WRITE && lane < a.qd)
			*(volatile uint64_t *)buf = ~expect_word(a.seed, lba);
		const uint64_t t0 = wall_ticks();
		const long long c0 = clock64();
		int32_t rc = group_submit(q, lane, a.qd,
					  sqe_rw((uint8_t)a.opc, (uint16_t)(r * a.qd + lane), 1,
						 lba, 0, dma, 0));
		cqe c = {};
		if (rc == OK)
			rc = a.reap_v4 ? group_reap_v4(q, lane, a.qd, &c, &agg)
				       : group_reap(q, lane, a.qd, &c, &agg);
		const long long c1 = clock64();
		const uint64_t t1 = wall_ticks();
		if (rc < 0) { // group-wide: the pair is poisoned
			ferr = rc;
			break;
		}
		nerr += rc > 0;
		if (b == 0 && lane == 0 && r < a.lat_cap) {
			a.lat_ns[r] = t1 - t0;
			a.lat_clk[r] = (uint64_t)(c1 - c0);
		}
		if (a.verify && a.opc == NVME_OPC_READ && lane < a.qd && rc == OK &&
		    *(volatile uint64_t *)buf != expect_word(a.seed, lba))
			vfail++;
	}
	if (vfail)
		atomicAdd(&a.res[b].vfail, vfail);
	if (nerr)
		atomicAdd(&a.res[b].nvme_err, nerr);
	sync_lanes();
	if (lane == 0) {
		a.res[b].t_end = wall_ticks();
		a.res[b].t_start = t_start;
		a.res[b].rounds = r;
		a.res[b].cmds = (uint64_t)r * a.qd;
		a.res[b].first_err = ferr;
		a.qps[b].q = q;
	}
}

// GPU pings with the library's doorbell store, the CPU answers in another
// mapped cell, the GPU polls it with the library's poll load.
__global__ void pingpong(volatile uint32_t *ping, const volatile uint32_t *pong,
			 uint32_t n, uint64_t *ns, uint64_t *clk)
{
	for (uint32_t i = 1; i <= n; i++) {
		uint64_t t0 = wall_ticks();
		long long c0 = clock64();
		fence::doorbell_write(ping, i);
		uint64_t spins = 0;
		while (fence::poll_load(pong) != i)
			if (++spins > (1ull << 26))
				return;
		long long c1 = clock64();
		uint64_t t1 = wall_ticks();
		ns[i - 1] = t1 - t0;
		clk[i - 1] = (uint64_t)(c1 - c0);
	}
}

// Unit costs: poll_load of a host cell and of a device cell, doorbell_write
// to a host cell; and %globaltimer's smallest step.
__global__ void probe(const volatile uint32_t *hcell, const volatile uint32_t *dcell,
		      volatile uint32_t *hdb, uint32_t n, uint64_t *out)
{
	uint32_t acc = 0;
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
	long long c0 = clock64();
	uint64_t g0 = wall_ticks();
	while (wall_ticks() - g0 < 2000000) // 2 ms: SM clock estimate
		;
	long long c1 = clock64();
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
static void pin(int idx)
{
	if (g_cpus.empty())
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(g_cpus[idx % g_cpus.size()], &s);
	pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

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

struct run_cfg {
	const char *mode;     // "direct" | "bridged"
	const char *data;     // "host" | "vram"
	uint32_t nq, qd;
	double seconds;
	uint32_t opc = NVME_OPC_READ;
	bool backoff = false; // relay runner: module's idle backoff (bridge_thread.c)
	bool verify = true;
	int fthreads = 0, rthreads = 0; // 0: W's defaults
	bool reap_v4 = false;           // proposed cq_wait (one 16-byte CQE load)
};

struct run_out {
	uint64_t cmds = 0;
	double seconds = 0, iops = 0;
	stats lat_ns{}, lat_clk_ns{};
	uint64_t nvme_err = 0, vfail = 0, fixture_errors = 0, fixture_cmds = 0, bad_db = 0;
	int32_t first_err = 0;
	bridge::Counters rc{};
	uint64_t write_check_fail = 0;
};

static run_out run_io(const run_cfg &c)
{
	const bool bridged = !strcmp(c.mode, "bridged");
	const bool vram = !strcmp(c.data, "vram");
	const uint32_t depth = std::min<uint32_t>(MAXD, std::max<uint32_t>(8, 2 * c.qd));
	const int F = std::min<int>(c.fthreads ? c.fthreads : W.fixture_threads, c.nq);
	const int R = std::min<int>(c.rthreads ? c.rthreads : W.relay_threads, c.nq);
	run_out o;

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
	swnvme::fixture fx(nc);
	std::vector<swnvme::queue> fq(c.nq);
	std::vector<bridge::Relay> relays;
	std::vector<bridge::Port> ports(c.nq);
	std::vector<bridge::Counters> ctr(c.nq);
	std::vector<bench_qp> hq(c.nq);
	for (uint32_t i = 0; i < c.nq; i++) {
		qmem *h = &W.qm_h[i], *d = &W.qm_d[i];
		fq[i].sq = h->sq;
		fq[i].cq = h->cq;
		fq[i].r = &h->regs;
		fq[i].depth = depth;
		fq[i].qid = (uint16_t)(i + 1);
		relays.emplace_back(depth);
		ports[i] = {h->shadow, &h->regs, h->cq, h->shadow_cq};
		qpair &q = hq[i].q;
		memset(&q, 0, sizeof(q));
		q.sq = d->sq;
		q.cq = bridged ? d->shadow_cq : d->cq;
		q.sq_db = bridged ? (volatile uint32_t *)(d->shadow + bridge::SHADOW_SQ_TAIL) : &d->regs.sq_tail_db;
		q.cq_db = bridged ? (volatile uint32_t *)(d->shadow + bridge::SHADOW_CQ_HEAD) : &d->regs.cq_head_db;
		q.stop = nullptr; // every wait still ends at timeout_ticks
		q.tick_hz = 1000000000ull;
		q.timeout_ticks = 1000000000ull;
		q.depth = depth;
		q.phase = 1;
		size_t off = (size_t)i * MAXQD * W.lba_bytes;
		hq[i].buf = vram ? W.vbuf + off : W.hbuf_d + off;
		hq[i].buf_dma = (uint64_t)hq[i].buf;
	}
	CK(cudaMemcpy(W.qps_d, hq.data(), sizeof(bench_qp) * c.nq, cudaMemcpyHostToDevice));
	CK(cudaMemset(W.res_d, 0, sizeof(blk_res) * c.nq));

	std::atomic<bool> stop{false};
	std::vector<std::thread> th;
	int core = 1;
	for (int t = 0; t < F; t++, core++)
		th.emplace_back([&, t, core] {
			pin(core);
			fix_tctx tc{};
			if (vram)
				CK(cudaStreamCreateWithFlags(&tc.s, cudaStreamNonBlocking));
			while (!stop.load(std::memory_order_relaxed))
				for (uint32_t i = t; i < c.nq; i += F)
					fx.service(fq[i], &tc);
			if (vram)
				cudaStreamDestroy(tc.s);
		});
	if (bridged)
		for (int t = 0; t < R; t++, core++)
			th.emplace_back([&, t, core] {
				pin(core);
				// usleep_range(20, 30) in the kthread has 10 us of
				// slack; give usleep() the same (default is 50 us).
				if (c.backoff)
					prctl(PR_SET_TIMERSLACK, 10000UL, 0, 0, 0);
				unsigned idle = 0, sleep_us = 20;
				while (!stop.load(std::memory_order_relaxed)) {
					bool p = false;
					for (uint32_t i = t; i < c.nq; i += R)
						p |= relays[i].step(ports[i], ctr[i]);
					if (!c.backoff || p) {
						idle = 0;
						sleep_us = 20;
						continue;
					}
					// bridge_thread.c: 64 idle passes, then sleep
					// 20 us doubling to 1 ms.
					if (++idle < 64)
						continue;
					usleep(sleep_us);
					sleep_us = std::min(sleep_us * 2, 1000u);
				}
			});

	bench_args a{};
	a.qps = W.qps_d;
	a.res = W.res_d;
	a.lat_ns = W.lat_ns_d;
	a.lat_clk = W.lat_clk_d;
	a.lat_cap = W.lat_cap;
	a.qd = c.qd;
	a.duration_ns = (uint64_t)(c.seconds * 1e9);
	a.max_rounds = 0xffffffffu;
	a.lba_bytes = W.lba_bytes;
	a.ns_blocks = W.ns_blocks;
	a.opc = c.opc;
	a.verify = c.verify;
	a.reap_v4 = c.reap_v4;
	a.seed = W.seed;
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
	uint64_t t0 = ~0ull, t1 = 0;
	for (auto &r : res) {
		o.cmds += r.cmds;
		o.nvme_err += r.nvme_err;
		o.vfail += r.vfail;
		if (r.first_err && !o.first_err)
			o.first_err = r.first_err;
		t0 = std::min(t0, r.t_start);
		t1 = std::max(t1, r.t_end);
	}
	o.seconds = (t1 - t0) * 1e-9;
	o.iops = o.cmds / o.seconds;
	uint32_t n = std::min(res[0].rounds, W.lat_cap);
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
		o.rc.polls += ctr[i].polls;
		o.rc.sq_doorbell_writes += ctr[i].sq_doorbell_writes;
		o.rc.cq_doorbell_writes += ctr[i].cq_doorbell_writes;
		o.rc.cqes_mirrored += ctr[i].cqes_mirrored;
		o.rc.bad_doorbell_values += ctr[i].bad_doorbell_values;
	}
	if (c.opc == NVME_OPC_WRITE) // every LBA block 0 wrote holds ~pattern
		for (uint64_t r = 0; r < std::min<uint64_t>(res[0].rounds, W.ns_blocks); r++) {
			uint64_t lba = r * c.qd % W.ns_blocks, v;
			memcpy(&v, W.ns + lba * W.lba_bytes, 8);
			o.write_check_fail += v != ~expect_word(W.seed, lba);
		}
	return o;
}

static std::string run_json(const run_cfg &c, const run_out &o)
{
	char b[2048];
	snprintf(b, sizeof(b),
		 "{\"mode\": \"%s\", \"data\": \"%s\", \"op\": \"%s\", \"relay_backoff\": %s, \"cq_wait\": \"%s\", "
		 "\"queue_pairs\": %u, \"qd\": %u, \"fixture_threads\": %d, \"relay_threads\": %d, "
		 "\"cmds\": %llu, \"seconds\": %.4f, \"iops\": %.0f, "
		 "\"round_us_globaltimer\": %s, \"round_us_clock64\": %s, "
		 "\"nvme_errors\": %llu, \"verify_failures\": %llu, \"write_check_failures\": %llu, "
		 "\"first_error\": %d, \"fixture_cmds\": %llu, \"fixture_bad_doorbells\": %llu, "
		 "\"relay\": {\"polls\": %llu, \"sq_doorbell_writes\": %llu, \"cq_doorbell_writes\": %llu, "
		 "\"cqes_mirrored\": %llu, \"bad_doorbell_values\": %llu}}",
		 c.mode, c.data, c.opc == NVME_OPC_READ ? "read" : "write", c.backoff ? "true" : "false",
		 c.reap_v4 ? "proposed_v4" : "library",
		 c.nq, c.qd, std::min<int>(c.fthreads ? c.fthreads : W.fixture_threads, c.nq),
		 !strcmp(c.mode, "bridged") ? std::min<int>(c.rthreads ? c.rthreads : W.relay_threads, c.nq) : 0,
		 (unsigned long long)o.cmds, o.seconds, o.iops, js(o.lat_ns).c_str(),
		 js(o.lat_clk_ns).c_str(), (unsigned long long)o.nvme_err,
		 (unsigned long long)o.vfail, (unsigned long long)o.write_check_fail, o.first_err,
		 (unsigned long long)o.fixture_cmds, (unsigned long long)o.bad_db,
		 (unsigned long long)o.rc.polls, (unsigned long long)o.rc.sq_doorbell_writes,
		 (unsigned long long)o.rc.cq_doorbell_writes, (unsigned long long)o.rc.cqes_mirrored,
		 (unsigned long long)o.rc.bad_doorbell_values);
	return b;
}

int main(int argc, char **argv)
{
	const char *out = ".";
	bool quick = false;
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
		else {
			fprintf(stderr, "usage: %s [--out DIR] [--fixture-threads N] [--relay-threads N] [--lba-bytes B] [--quick]\n", argv[0]);
			return 2;
		}
	}
	cpu_set_t cs;
	sched_getaffinity(0, sizeof(cs), &cs);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &cs))
			g_cpus.push_back(i);
	pin(0);

	CK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleSpin));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	int drv = 0, rt = 0;
	cudaDriverGetVersion(&drv);
	cudaRuntimeGetVersion(&rt);
	CK(cudaStreamCreateWithFlags(&W.ks, cudaStreamNonBlocking));

	CK(cudaHostAlloc(&W.qm_h, sizeof(qmem) * MAXQ, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&W.qm_d, W.qm_h, 0));
	W.buf_bytes = (size_t)MAXQ * MAXQD * W.lba_bytes;
	CK(cudaHostAlloc(&W.hbuf_h, W.buf_bytes, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&W.hbuf_d, W.hbuf_h, 0));
	CK(cudaMalloc(&W.vbuf, W.buf_bytes));
	CK(cudaHostAlloc(&W.ns, W.ns_blocks * W.lba_bytes, cudaHostAllocDefault));
	CK(cudaMalloc(&W.qps_d, sizeof(bench_qp) * MAXQ));
	CK(cudaMalloc(&W.res_d, sizeof(blk_res) * MAXQ));
	CK(cudaMalloc(&W.lat_ns_d, 8ull * W.lat_cap));
	CK(cudaMalloc(&W.lat_clk_d, 8ull * W.lat_cap));

	// Probe: unit costs and the SM clock (for clock64 -> ns).
	uint32_t *cells_h, *cells_d, *dcell;
	CK(cudaHostAlloc(&cells_h, 4096, cudaHostAllocMapped));
	memset(cells_h, 0, 4096);
	CK(cudaHostGetDevicePointer(&cells_d, cells_h, 0));
	CK(cudaMalloc(&dcell, 64));
	CK(cudaMemset(dcell, 0, 64));
	uint64_t *pr_d, pr[8];
	CK(cudaMalloc(&pr_d, 64));
	const uint32_t NP = 2000;
	probe<<<1, 1, 0, W.ks>>>(cells_d, dcell, cells_d + 64, NP, pr_d);
	CK(cudaStreamSynchronize(W.ks));
	CK(cudaMemcpy(pr, pr_d, 64, cudaMemcpyDeviceToHost));
	W.sm_ghz = (double)pr[4] / (double)pr[5];
	printf("# %s  driver %d runtime %d  SM clock %.3f GHz  globaltimer step %llu ns\n",
	       prop.name, drv, rt, W.sm_ghz, (unsigned long long)pr[3]);
	printf("# poll_load host %.0f ns, device %.0f ns, doorbell_write host %.0f ns\n",
	       pr[0] / (double)NP, pr[1] / (double)NP, pr[2] / (double)NP);

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
	char hb[2048];
	snprintf(hb, sizeof(hb),
		 "{\n\"gpu\": \"%s\", \"cuda_driver_version\": %d, \"cuda_runtime_version\": %d,\n"
		 "\"sm_clock_ghz_measured\": %.4f, \"globaltimer_step_ns\": %llu,\n"
		 "\"lba_bytes\": %u, \"lbas_per_io\": 1, \"ns_blocks\": %llu, \"cpus\": %zu,\n"
		 "\"fixture_threads\": %d, \"relay_threads\": %d,\n"
		 "\"probe_ns\": {\"poll_load_host\": %.1f, \"poll_load_device\": %.1f, \"doorbell_write_host\": %.1f},\n"
		 "\"pingpong\": {\"note\": \"GPU doorbell_write to a mapped host cell, CPU thread answers in another, GPU poll_load; one_way = rtt/2\", "
		 "\"rtt_us_globaltimer\": %s, \"rtt_us_clock64\": %s, \"one_way_us_clock64\": %s},\n",
		 prop.name, drv, rt, W.sm_ghz, (unsigned long long)pr[3], W.lba_bytes,
		 (unsigned long long)W.ns_blocks, g_cpus.size(), W.fixture_threads, W.relay_threads,
		 pr[0] / (double)NP, pr[1] / (double)NP, pr[2] / (double)NP,
		 js(s_rtt).c_str(), js(s_rttc).c_str(), js(s_ow).c_str());
	json += hb;

	// QD1 round trips.
	const double qd1s = quick ? 0.2 : 1.0;
	std::vector<run_cfg> qd1 = {
		{"direct", "host", 1, 1, qd1s},
		{"bridged", "host", 1, 1, qd1s},
		{"bridged", "host", 1, 1, qd1s, NVME_OPC_READ, true},
		{"direct", "host", 1, 1, qd1s, NVME_OPC_WRITE},
		{"bridged", "host", 1, 1, qd1s, NVME_OPC_WRITE},
		{"direct", "vram", 1, 1, qd1s},
		{"bridged", "vram", 1, 1, qd1s},
	};
	for (const char *m : {"direct", "bridged"}) {
		run_cfg c{m, "host", 1, 1, qd1s};
		c.reap_v4 = true;
		qd1.push_back(c);
	}
	json += "\"qd1\": [\n";
	double p50_direct = 0, p50_bridged = 0;
	for (size_t i = 0; i < qd1.size(); i++) {
		run_out o = run_io(qd1[i]);
		printf("QD1 %-7s %-4s %-5s backoff=%d v4=%d: %llu I/Os, p50 %.2f us p99 %.2f us p99.9 %.2f us (clock64 p50 %.2f p99 %.2f) err %llu vfail %llu wfail %llu ferr %d\n",
		       qd1[i].mode, qd1[i].data, qd1[i].opc == NVME_OPC_READ ? "read" : "write", qd1[i].backoff, qd1[i].reap_v4,
		       (unsigned long long)o.cmds, o.lat_ns.p50, o.lat_ns.p99, o.lat_ns.p999,
		       o.lat_clk_ns.p50, o.lat_clk_ns.p99, (unsigned long long)o.nvme_err,
		       (unsigned long long)o.vfail, (unsigned long long)o.write_check_fail, o.first_err);
		fflush(stdout);
		if (i == 0)
			p50_direct = o.lat_clk_ns.p50;
		if (i == 1)
			p50_bridged = o.lat_clk_ns.p50;
		json += "  " + run_json(qd1[i], o) + (i + 1 < qd1.size() ? ",\n" : "\n");
	}
	json += "],\n";

	// IOPS sweep.
	std::vector<uint32_t> nqs = {1, 2, 4, 8, 16, 32, 64}, qds = {1, 8, 32};
	const double sw = quick ? 0.05 : 0.25;
	json += "\"iops\": [\n";
	bool first = true;
	for (const char *mode : {"direct", "bridged"})
		for (uint32_t qd : qds)
			for (uint32_t nq : nqs) {
				run_cfg c{mode, "host", nq, qd, sw};
				c.verify = true;
				run_out o = run_io(c);
				printf("IOPS %-7s qpairs %2u qd %2u: %10.0f IOPS  round p50 %.2f us p99 %.2f us  err %llu vfail %llu ferr %d\n",
				       mode, nq, qd, o.iops, o.lat_clk_ns.p50, o.lat_clk_ns.p99,
				       (unsigned long long)o.nvme_err, (unsigned long long)o.vfail, o.first_err);
				fflush(stdout);
				json += std::string(first ? "  " : ",\n  ") + run_json(c, o);
				first = false;
			}
	// The largest point again with more CPU threads: is it CPU-bound?
	for (const char *mode : {"direct", "bridged"}) {
		run_cfg c{mode, "host", 64, 32, sw};
		c.fthreads = 6;
		c.rthreads = 6;
		run_out o = run_io(c);
		printf("IOPS %-7s qpairs 64 qd 32, 6+6 threads: %10.0f IOPS ferr %d\n", mode, o.iops, o.first_err);
		json += ",\n  " + run_json(c, o);
	}
	for (const char *mode : {"direct", "bridged"})
		for (uint32_t qd : qds) {
			run_cfg c{mode, "host", 64, qd, sw};
			c.reap_v4 = true;
			run_out o = run_io(c);
			printf("IOPS %-7s qpairs 64 qd %2u, proposed cq_wait_v4: %10.0f IOPS round p50 %.2f us ferr %d vfail %llu\n",
			       mode, qd, o.iops, o.lat_clk_ns.p50, o.first_err, (unsigned long long)o.vfail);
			json += ",\n  " + run_json(c, o);
		}
	json += "\n],\n";
	char tb[512];
	snprintf(tb, sizeof(tb),
		 "\"targets\": {\"bridged_qd1_p50_us\": %.3f, \"bridged_qd1_p50_under_10us\": %s, "
		 "\"direct_qd1_p50_us\": %.3f, \"bridged_over_direct_qd1\": %.3f, \"ratio_under_1_5\": %s}\n}\n",
		 p50_bridged, p50_bridged < 10 ? "true" : "false", p50_direct,
		 p50_bridged / p50_direct, p50_bridged / p50_direct < 1.5 ? "true" : "false");
	json += tb;
	std::string path = std::string(out) + "/results.json";
	FILE *f = fopen(path.c_str(), "w");
	if (!f) {
		perror(path.c_str());
		return 1;
	}
	fputs(json.c_str(), f);
	fclose(f);
	printf("# wrote %s\n", path.c_str());
	return 0;
}
