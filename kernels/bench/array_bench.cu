// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// array_bench.cu - the storage array (include/gpunvme/array.h) on an
// NVIDIA GPU against N software NVMe controllers (sw_nvme_fixture.h: a
// BENCHMARK FIXTURE, CPU threads answering from host memory, no media:
// nothing here is an SSD number), each served by its own CPU thread(s),
// raw (owner) pairs, the per-thread API underneath. In one run:
//   miss    every read of the array misses (thread t reads pages t, t + T,
//           ...: a stream far larger than the cache), against the raw
//           per-thread API issuing the same page reads itself (pq_submit_io
//           + pq_wait into a page of its own): commands/s, array over raw
//           (target >= 0.8), alternated raw/array/raw/array;
//   hit     every read hits (a working set placed so no cache set
//           overflows, loaded first), random elements, against a plain
//           device-memory gather of the same elements (target >= 0.5);
//   scale   the miss run over 1, 2, 4, 8 controllers (4 over 1: target
//           >= 3.2);
//   curve   random elements over the resident set and working sets of
//           1.5x to 16x the cache (an array of 16x the cache, --quick too):
//           effective reads/s against the measured hit rate, beside the
//           ideal one (frames / working set).
// The array's counters (loads, evictions, waits, noframe) are each run's
// own: read before and after its launch (the cache lives on from run to
// run). loads_per_read = loads / reads, hit_rate = 1 - loads_per_read (the
// reads that sent no command of their own); loads > reads would mean a
// read loaded its page twice and fails the run's checks.
// Every element read is checked against the pattern at its place on its
// controller (the raw run: the first word of each page), every command's
// status; the fixture's errors are counted. Frames: in mapped host memory
// for miss/scale (the fixture memcpys them), in VRAM for hit/curve (the
// fixture moves a miss's page with cudaMemcpyAsync). Writes
// array.json into --out; exits 1 if a check failed (never because of a
// time). Ratios are within this run; see results/README.md for what a
// fixture number means.

#include <gpunvme/gpunvme.h>

#include "sw_nvme_fixture.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <pthread.h>
#include <sched.h>
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

constexpr uint32_t DEPTH = 256;  // per pair
constexpr uint32_t MAXC = 8;     // controllers
constexpr uint32_t MAXP = 8;     // pairs per controller
constexpr uint64_t SEED = 0xa77a5eedull;

// One pair's rings and doorbell cells, in mapped pinned host memory.
struct alignas(4096) aq {
	sqe sq[DEPTH];
	cqe cq[DEPTH];
	swnvme::regs regs;
};

// What each kernel is asked to do.
struct karg {
	uint64_t pages;     // the working set (miss: the stream) in pages
	uint32_t reads;     // per thread
	uint32_t miss;      // 1: thread t reads pages t + k * threads (a stream)
	uint32_t threads;   // in the launch
	uint32_t lat_every; // thread 0 of each block records its reads' times
	const uint64_t *hit_pages; // hit: the working set's page numbers (else null)
};

struct kres {
	uint64_t ok, bad, err;
	uint64_t t0, t1;    // %globaltimer: first start, last end (min/max over blocks)
	int32_t first_err;
	uint32_t pad;
};

GPUNVME_HD uint64_t lcg(uint64_t &x)
{
	x = x * 6364136223846793005ull + 1442695040888963407ull;
	return x >> 17;
}

// The k-th (page, element-in-page) of thread t.
GPUNVME_HD void pick(const karg &a, uint32_t t, uint32_t k, uint64_t per, uint64_t *page,
		     uint64_t *elem)
{
	uint64_t x = (uint64_t)t * 0x9e3779b97f4a7c15ull + k * 0xbf58476d1ce4e5b9ull + 1;
	const uint64_t r1 = lcg(x), r2 = lcg(x);
	/* miss: a stream (thread t: t, t + threads, ...); else uniform. */
	const uint64_t idx = a.miss ? ((uint64_t)t + (uint64_t)k * a.threads) % a.pages : r1 % a.pages;
	*page = a.hit_pages ? a.hit_pages[idx] : idx;
	*elem = *page * per + r2 % per;
}

// The pattern's word for element e (where the array puts it).
GPUNVME_HD uint64_t expected(const array_desc &d, uint64_t e)
{
	uint32_t c;
	const uint64_t o = array_disk_offset(d, e * 8, &c);
	uint64_t z = SEED + (o >> 3) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

__device__ inline void res_note(kres *r, uint64_t ok, uint64_t bad, uint64_t err, int32_t ferr,
				uint64_t t0, uint64_t t1)
{
	atom::red64(&r->ok, ok);
	atom::red64(&r->bad, bad);
	atom::red64(&r->err, err);
	if (ferr)
		atom::set_error(&r->first_err, ferr);
	// min / max of the blocks' times.
	asm volatile("red.relaxed.gpu.min.u64 [%0], %1;" :: "l"(&r->t0), "l"(t0) : "memory");
	asm volatile("red.relaxed.gpu.max.u64 [%0], %1;" :: "l"(&r->t1), "l"(t1) : "memory");
}

__global__ void k_array(const array_desc *desc, karg a, kres *res, uint64_t *lat)
{
	const array<uint64_t> arr(desc);
	const uint32_t t = group_id() * group_size() + lane_id();
	const uint64_t per = array_page_bytes(arr.d) / 8;
	uint64_t ok = 0, bad = 0, err = 0;
	int32_t ferr = OK;
	const uint64_t t0 = wall_ticks();
	for (uint32_t k = 0; k < a.reads; k++) {
		uint64_t page, e, v = 0;
		pick(a, t, k, per, &page, &e);
		const uint64_t s = wall_ticks();
		const int32_t rc = arr.read(e, &v);
		if (lane_id() == 0 && lat && k < a.lat_every)
			lat[(uint64_t)group_id() * a.lat_every + k] = wall_ticks() - s;
		if (rc != OK) {
			err++;
			if (ferr == OK)
				ferr = rc;
			continue;
		}
		if (v == expected(arr.d, e))
			ok++;
		else
			bad++;
	}
	res_note(res, ok, bad, err, ferr, t0, wall_ticks());
}

// The same page reads through the per-thread API: thread t reads each
// page into its own page of `land` (DMA table: land_dma, identity for
// every controller), on the pair of its SM, and checks the page's first
// word.
__global__ void k_raw(const array_desc *desc, karg a, const uint8_t *land, uint64_t land_dma,
		      uint64_t land_pages, kres *res, uint64_t *lat, const uint64_t *page_dma)
{
	const array_desc d = *desc;
	const uint32_t t = group_id() * group_size() + lane_id();
	const uint64_t pb = array_page_bytes(d), per = pb / 8;
	uint64_t ok = 0, bad = 0, err = 0;
	int32_t ferr = OK;
	(void)land_dma;
	const uint64_t t0 = wall_ticks();
	for (uint32_t k = 0; k < a.reads; k++) {
		uint64_t page, e;
		pick(a, t, k, per, &page, &e);
		uint32_t c;
		const uint64_t lp = array_local_page(d, page, &c);
		const pqueue q = array_pair(d, c);
		const uint64_t s = wall_ticks();
		pq_ticket tk;
		int32_t rc = pq_submit_io(q, NVME_OPC_READ, d.ctrl[c].nsid, array_lba(d, c, lp),
					  (uint16_t)((pb >> d.ctrl[c].lba_shift) - 1), page_dma,
					  land_pages, (uint64_t)t * pb, (uint32_t)pb, &tk);
		if (rc == OK)
			rc = pq_wait(q, tk, nullptr);
		if (lane_id() == 0 && lat && k < a.lat_every)
			lat[(uint64_t)group_id() * a.lat_every + k] = wall_ticks() - s;
		if (rc != OK) {
			err++;
			if (ferr == OK)
				ferr = rc;
			continue;
		}
		fence::payload_acquire();
		const uint64_t w = *(const volatile uint64_t *)(land + (uint64_t)t * pb);
		if (w == expected(d, page * per))
			ok++;
		else
			bad++;
	}
	res_note(res, ok, bad, err, ferr, t0, wall_ticks());
}

// A plain device-memory gather of the same elements (the array's content
// laid out flat in VRAM): the hit path's baseline.
__global__ void k_gather(const array_desc *desc, karg a, const uint64_t *flat, kres *res)
{
	const array_desc d = *desc;
	const uint32_t t = group_id() * group_size() + lane_id();
	const uint64_t per = array_page_bytes(d) / 8;
	uint64_t ok = 0, bad = 0;
	const uint64_t t0 = wall_ticks();
	for (uint32_t k = 0; k < a.reads; k++) {
		uint64_t page, e;
		pick(a, t, k, per, &page, &e);
		if (flat[e] == expected(d, e))
			ok++;
		else
			bad++;
	}
	res_note(res, ok, bad, 0, OK, t0, wall_ticks());
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

static uint64_t host_pattern(uint64_t off)
{
	uint64_t z = SEED + (off >> 3) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

struct xfer_ctx {
	cudaStream_t s;
};

static bool vram_xfer(void *tctx, bool to_ns, uint64_t prp, uint8_t *nsp, uint32_t len)
{
	cudaStream_t s = ((xfer_ctx *)tctx)->s;
	cudaError_t e = to_ns ? cudaMemcpyAsync(nsp, (void *)prp, len, cudaMemcpyDeviceToHost, s)
			      : cudaMemcpyAsync((void *)prp, nsp, len, cudaMemcpyHostToDevice, s);
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(s);
	return e == cudaSuccess;
}

struct options {
	uint32_t page_shift = 12;
	uint32_t frames = 16384;    // 64 MiB of 4 KiB frames
	uint32_t ways = 16;
	uint32_t pairs = 4;         // per controller
	uint32_t fthreads = 1;      // fixture CPU threads per controller
	uint32_t grid = 0;          // 0: 2 x SMs
	uint32_t block = 64;
	uint32_t reads = 32;        // per thread per run
	uint64_t stream_pages = 262144; // the stream (miss)
	uint64_t curve_pages = 0;       // the hit/curve array: 16x the cache (at least the stream)
	bool quick = false;
};

// The machine: N controllers (fixtures + their rings), the frames, the
// array's descriptor and tables in VRAM.
struct rig {
	options o;
	uint32_t n = 1;
	bool frames_vram = false;
	aq *q_h = nullptr, *q_d = nullptr;        // MAXC * MAXP pairs
	std::vector<uint8_t *> ns;                // per controller
	uint64_t ns_blocks = 0;
	uint8_t *frames_h = nullptr, *frames_d = nullptr;
	uint8_t *frames_host_dev = nullptr;           // frames_h as the GPU addresses it
	uint8_t *land_h = nullptr, *land_d = nullptr; // the raw run's pages
	uint64_t land_pages = 0;
	uint8_t *pools_h = nullptr, *pools_d = nullptr;
	uint64_t pool_bytes = 0;
	uint8_t *pq_mem = nullptr;
	pqueue *pqs_d = nullptr;
	array_ctrl *ctrl_d = nullptr;
	uint64_t *frame_dma_d = nullptr, *land_dma_d = nullptr;
	uint8_t *meta_d = nullptr;
	array_desc *desc_d = nullptr;
	array_desc d{};                           // as the GPU has it
	array_desc dh{};                          // the same, ctrl a host copy
	std::vector<array_ctrl> ctrl_h;
	std::vector<swnvme::queue> fq;
	std::vector<std::unique_ptr<swnvme::fixture>> fx;
	std::atomic<bool> stop{false};
	std::vector<std::thread> th;
	uint64_t pages = 0;
};

static const uint32_t LBA = 512;

static uint64_t frame_bytes(const options &o) { return (uint64_t)o.frames << o.page_shift; }

// Builds an array over n controllers; its working content: the stream.
// Waits: 1 s, or 10 s with frames in VRAM, where the fixture moves each
// command's data with a synchronous cudaMemcpy (tens of microseconds while
// the kernel runs): a full ring's last command can wait longer than 1 s
// for a fixture that is slow, not for a lost command.
static uint64_t wait_ticks(bool frames_vram)
{
	return frames_vram ? 10000000000ull : 1000000000ull;
}

// The array: `pages` pages (the stream, or for hit/curve o.curve_pages).
static void rig_up(rig &r, uint32_t n, bool frames_vram, uint64_t pages)
{
	r.n = n;
	r.frames_vram = frames_vram;
	const options &o = r.o;
	const uint64_t pb = 1ull << o.page_shift;
	r.pages = pages / n * n;
	const uint64_t local = r.pages / n;
	r.ns_blocks = local * (pb / LBA);
	if (r.ns.empty())
		for (uint32_t c = 0; c < MAXC; c++)
			r.ns.push_back(nullptr);
	for (uint32_t c = 0; c < n; c++) {
		if (r.ns[c])
			continue;
		// Controller c is in arrays of n > c controllers: the largest
		// share it ever holds is the smallest such power of two's (the
		// stream's); controller 0 alone also holds the curve's array.
		uint32_t nmin = 1;
		while (nmin <= c)
			nmin *= 2;
		const uint64_t bytes = (c == 0 ? std::max(o.stream_pages, o.curve_pages) : o.stream_pages / nmin) * pb;
		CK(cudaHostAlloc(&r.ns[c], bytes, cudaHostAllocDefault));
		// Namespace byte o holds the pattern's word at o, whatever the
		// array's shape.
		uint64_t *w = (uint64_t *)r.ns[c];
		for (uint64_t i = 0; i < bytes / 8; i++)
			w[i] = host_pattern(8 * i);
	}
	const uint32_t frame_pages = (uint32_t)(frame_bytes(o) / 4096);
	std::vector<uint64_t> fdma((size_t)n * frame_pages);
	uint8_t *fdev = frames_vram ? r.frames_d : r.frames_host_dev;
	for (uint32_t c = 0; c < n; c++)
		for (uint32_t p = 0; p < frame_pages; p++)
			fdma[(size_t)c * frame_pages + p] = (uint64_t)(fdev + 4096ull * p);
	CK(cudaMemcpy(r.frame_dma_d, fdma.data(), 8 * fdma.size(), cudaMemcpyHostToDevice));
	// Pairs: fresh rings and per-thread state.
	memset(r.q_h, 0, sizeof(aq) * MAXC * MAXP);
	std::vector<pqueue> pq((size_t)n * o.pairs);
	const size_t st = (pq_bytes(DEPTH) + 255) & ~(size_t)255;
	std::vector<uint8_t> img(st * pq.size());
	r.fq.assign(pq.size(), swnvme::queue{});
	for (uint32_t c = 0; c < n; c++)
		for (uint32_t i = 0; i < o.pairs; i++) {
			const size_t k = (size_t)c * o.pairs + i;
			aq *h = &r.q_h[k], *dv = &r.q_d[k];
			r.fq[k].sq = h->sq;
			r.fq[k].cq = h->cq;
			r.fq[k].r = &h->regs;
			r.fq[k].depth = DEPTH;
			r.fq[k].qid = (uint16_t)(i + 1);
			pqueue &p = pq[k];
			p = pqueue{};
			p.sq = dv->sq;
			p.cq = dv->cq;
			p.sq_db = &dv->regs.sq_tail_db;
			p.cq_db = &dv->regs.cq_head_db;
			p.timeout_ticks = wait_ticks(frames_vram);
			p.tick_hz = 1000000000ull;
			p.depth = DEPTH;
			p.prp_va = (uint64_t *)(r.pools_d + k * r.pool_bytes);
			p.prp_dma = (uint64_t)(uintptr_t)(r.pools_h + k * r.pool_bytes);
			p.prp_stride = pq_prp_stride(r.pool_bytes, DEPTH);
			pq_init(&img[k * st], DEPTH, 0, 0, 1);
			pq_attach(p, r.pq_mem + k * st);
		}
	CK(cudaMemcpy(r.pq_mem, img.data(), img.size(), cudaMemcpyHostToDevice));
	CK(cudaMemcpy(r.pqs_d, pq.data(), sizeof(pqueue) * pq.size(), cudaMemcpyHostToDevice));
	std::vector<array_ctrl> ac(n);
	for (uint32_t c = 0; c < n; c++) {
		ac[c] = array_ctrl{};
		ac[c].qps = r.pqs_d + (size_t)c * o.pairs;
		ac[c].base_lba = 0;
		ac[c].lbas = r.ns_blocks;
		ac[c].nqp = o.pairs;
		ac[c].nsid = 1;
		ac[c].lba_shift = 9;
	}
	CK(cudaMemcpy(r.ctrl_d, ac.data(), sizeof(array_ctrl) * n, cudaMemcpyHostToDevice));
	r.ctrl_h = ac;
	array_desc &d = r.d;
	d = array_desc{};
	d.ctrl = r.ctrl_d;
	d.frames = fdev;
	d.frame_dma = r.frame_dma_d;
	d.bytes = r.pages * pb;
	d.timeout_ticks = wait_ticks(frames_vram);
	d.tick_hz = 1000000000ull;
	d.n_ctrl = n;
	d.layout = ARRAY_STRIPE;
	d.chunk_pages = 1;
	d.page_shift = o.page_shift;
	d.n_frames = o.frames;
	d.ways = o.ways;
	d.n_sets = o.frames / o.ways;
	d.frame_pages = frame_pages;
	array_meta_attach(d, r.meta_d);
	CK(cudaMemset(r.meta_d, 0, array_meta_bytes(d.n_frames, d.n_sets)));
	CK(cudaMemcpy(r.desc_d, &d, sizeof(d), cudaMemcpyHostToDevice));
	r.dh = d;
	r.dh.ctrl = r.ctrl_h.data();
	// Fixtures: one per controller, its own namespace; its threads serve
	// its pairs (pair i by thread i % fthreads).
	r.fx.clear();
	for (uint32_t c = 0; c < n; c++) {
		swnvme::ns_config nc{};
		nc.ns = r.ns[c];
		nc.ns_blocks = r.ns_blocks;
		nc.lba_bytes = LBA;
		if (frames_vram) {
			nc.xfer = vram_xfer;
		} else {
			// Frames and the raw run's pages: mapped host memory, bus
			// address = device pointer (unified addressing).
			nc.dma_base = (uint64_t)r.frames_host_dev;
			nc.dma_len = frame_bytes(o) + r.land_pages * 4096;
			nc.host_base = r.frames_h;
		}
		nc.list_lo[0] = (uint64_t)(uintptr_t)r.pools_h;
		nc.list_hi[0] = nc.list_lo[0] + r.pool_bytes * MAXC * MAXP;
		r.fx.push_back(std::make_unique<swnvme::fixture>(nc));
	}
	r.stop = false;
	int core = 1;
	for (uint32_t c = 0; c < n; c++)
		for (uint32_t f = 0; f < o.fthreads; f++, core++)
			r.th.emplace_back([&r, c, f, core] {
				pin(core);
				xfer_ctx tc{};
				if (r.frames_vram)
					CK(cudaStreamCreateWithFlags(&tc.s, cudaStreamNonBlocking));
				while (!r.stop.load(std::memory_order_relaxed))
					for (uint32_t i = f; i < r.o.pairs; i += r.o.fthreads)
						r.fx[c]->service(r.fq[(size_t)c * r.o.pairs + i], &tc);
				if (r.frames_vram) {
					cudaStreamSynchronize(tc.s);
					cudaStreamDestroy(tc.s);
				}
			});
}

static uint64_t rig_down(rig &r)
{
	r.stop = true;
	for (auto &t : r.th)
		t.join();
	r.th.clear();
	uint64_t errs = 0;
	for (auto &q : r.fq)
		errs += q.errors + q.bad_doorbells;
	return errs;
}

struct run_out {
	std::string kind, pattern;
	uint32_t n_ctrl = 0;
	// The array's counters are this run's own (after minus before: the
	// cache and its counters live on from run to run).
	uint64_t reads = 0, ok = 0, bad = 0, err = 0, loads = 0, evictions = 0, waits = 0, noframe = 0;
	double seconds = 0, reads_per_s = 0, cmds_per_s = 0, gbps = 0;
	// loads_per_read: page reads submitted per element read (a group of
	// lanes on one page, or lanes waiting for another's load, share one);
	// hit_rate = 1 - loads_per_read: the reads that sent no command of
	// their own. A lane's read loads its page at most once, so loads <=
	// reads (accounting_ok); -1: not an array run.
	double loads_per_read = -1, hit_rate = -1;
	bool accounting_ok = true;
	double lat_p50_us = 0, lat_p99_us = 0;
	int32_t first_err = 0;
	bool ok_all = false;
};

static kres *g_res;
static uint64_t *g_lat;
static cudaStream_t g_ks;
static bool g_all_ok = true;

static void percentiles(uint64_t n, double *p50, double *p99)
{
	std::vector<uint64_t> v(n);
	CK(cudaMemcpy(v.data(), g_lat, 8 * n, cudaMemcpyDeviceToHost));
	v.erase(std::remove(v.begin(), v.end(), 0ull), v.end());
	std::sort(v.begin(), v.end());
	*p50 = v.empty() ? 0 : v[v.size() / 2] / 1000.0;
	*p99 = v.empty() ? 0 : v[std::min(v.size() - 1, (size_t)(v.size() * 0.99))] / 1000.0;
}

static array_stats stats_now(const rig &r)
{
	array_stats s;
	CK(cudaMemcpy(&s, r.d.stats, sizeof(s), cudaMemcpyDeviceToHost));
	return s;
}

// s0: the array's counters before the launch (null: not an array run).
static run_out finish(rig &r, const char *kind, const char *pattern, const karg &a, uint32_t grid,
		      const array_stats *s0)
{
	while (cudaStreamQuery(g_ks) == cudaErrorNotReady)
		usleep(200);
	CK(cudaStreamSynchronize(g_ks));
	CK(cudaGetLastError());
	kres res;
	CK(cudaMemcpy(&res, g_res, sizeof(res), cudaMemcpyDeviceToHost));
	run_out o;
	o.kind = kind;
	o.pattern = pattern;
	o.n_ctrl = r.n;
	o.reads = (uint64_t)a.threads * a.reads;
	o.ok = res.ok;
	o.bad = res.bad;
	o.err = res.err;
	o.first_err = res.first_err;
	o.seconds = res.t1 > res.t0 ? (res.t1 - res.t0) * 1e-9 : 0;
	o.reads_per_s = o.seconds > 0 ? o.reads / o.seconds : 0;
	if (s0) {
		const array_stats s = stats_now(r);
		o.loads = s.loads - s0->loads;
		o.evictions = s.evictions - s0->evictions;
		o.waits = s.waits - s0->waits;
		o.noframe = s.noframe - s0->noframe;
		o.loads_per_read = o.reads ? (double)o.loads / o.reads : 0;
		o.hit_rate = 1.0 - o.loads_per_read;
		o.accounting_ok = o.loads <= o.reads;
		if (!o.accounting_ok)
			printf("# ACCOUNTING: %llu loads for %llu reads (a read loaded its page twice?)\n",
			       (unsigned long long)o.loads, (unsigned long long)o.reads);
	}
	const bool raw = !strcmp(kind, "raw");
	const uint64_t cmds = raw ? o.reads : o.loads;
	o.cmds_per_s = o.seconds > 0 ? cmds / o.seconds : 0;
	o.gbps = o.cmds_per_s * (1ull << r.o.page_shift) / 1e9;
	if (a.lat_every)
		percentiles((uint64_t)grid * a.lat_every, &o.lat_p50_us, &o.lat_p99_us);
	o.ok_all = o.ok == o.reads && o.bad == 0 && o.err == 0 && o.seconds > 0 && o.accounting_ok;
	g_all_ok &= o.ok_all;
	char hb[96] = "";
	if (s0)
		snprintf(hb, sizeof(hb), "  loads/read %.4f (hit %.4f) waits %llu noframe %llu", o.loads_per_read,
			 o.hit_rate, (unsigned long long)o.waits, (unsigned long long)o.noframe);
	printf("%-6s %-6s %u ctrl: %9.3f M reads/s  %9.3f M cmds/s  %7.2f GB/s%s  p50 %.2f us p99 %.2f us  "
	       "ok %llu bad %llu err %llu (first %d)  %s\n",
	       kind, pattern, r.n, o.reads_per_s / 1e6, o.cmds_per_s / 1e6, o.gbps, hb,
	       o.lat_p50_us, o.lat_p99_us, (unsigned long long)o.ok, (unsigned long long)o.bad,
	       (unsigned long long)o.err, o.first_err, o.ok_all ? "ok" : "CHECK FAILED");
	fflush(stdout);
	return o;
}

static uint64_t g_lat_bytes;

static void reset_res()
{
	kres z{};
	z.t0 = ~0ull;
	CK(cudaMemcpy(g_res, &z, sizeof(z), cudaMemcpyHostToDevice));
	CK(cudaMemset(g_lat, 0, g_lat_bytes));
}

static run_out run_array(rig &r, const char *pattern, karg a, uint32_t grid, uint32_t block)
{
	reset_res();
	const array_stats s0 = stats_now(r);
	k_array<<<grid, block, 0, g_ks>>>(r.desc_d, a, g_res, g_lat);
	return finish(r, "array", pattern, a, grid, &s0);
}

static run_out run_raw(rig &r, karg a, uint32_t grid, uint32_t block)
{
	reset_res();
	k_raw<<<grid, block, 0, g_ks>>>(r.desc_d, a, r.land_d, 0, r.land_pages, g_res, g_lat, r.land_dma_d);
	return finish(r, "raw", "miss", a, grid, nullptr);
}

static run_out run_gather(rig &r, karg a, const uint64_t *flat, uint32_t grid, uint32_t block)
{
	reset_res();
	k_gather<<<grid, block, 0, g_ks>>>(r.desc_d, a, flat, g_res);
	return finish(r, "gather", "hit", a, grid, nullptr);
}

static std::string js(const run_out &o)
{
	// Not an array run: no loads per read, no hit rate (null).
	char lpr[32] = "null", hr[32] = "null";
	if (o.loads_per_read >= 0) {
		snprintf(lpr, sizeof(lpr), "%.6f", o.loads_per_read);
		snprintf(hr, sizeof(hr), "%.6f", o.hit_rate);
	}
	char b[1280];
	snprintf(b, sizeof(b),
		 "{\"kind\": \"%s\", \"pattern\": \"%s\", \"controllers\": %u, \"reads\": %llu, \"seconds\": %.6f, "
		 "\"reads_per_s\": %.0f, \"cmds_per_s\": %.0f, \"gb_per_s\": %.3f, \"loads\": %llu, \"evictions\": %llu, "
		 "\"waits\": %llu, \"noframe\": %llu, \"loads_per_read\": %s, "
		 "\"hit_rate\": %s, \"lat_us_p50\": %.3f, \"lat_us_p99\": %.3f, \"ok\": %llu, \"bad\": %llu, \"err\": %llu, "
		 "\"first_error\": %d, \"checks_ok\": %s}",
		 o.kind.c_str(), o.pattern.c_str(), o.n_ctrl, (unsigned long long)o.reads, o.seconds,
		 o.reads_per_s, o.cmds_per_s, o.gbps, (unsigned long long)o.loads,
		 (unsigned long long)o.evictions, (unsigned long long)o.waits, (unsigned long long)o.noframe,
		 lpr, hr, o.lat_p50_us, o.lat_p99_us,
		 (unsigned long long)o.ok, (unsigned long long)o.bad, (unsigned long long)o.err, o.first_err,
		 o.ok_all ? "true" : "false");
	return b;
}

// The largest working set (pages 0..W-1 in order, skipping none) no set of
// the cache overflows with: all of it stays resident.
static std::vector<uint64_t> resident_set(const array_desc &d, uint64_t limit)
{
	std::vector<uint32_t> fill(d.n_sets, 0);
	std::vector<uint64_t> pages;
	for (uint64_t p = 0; p < limit && pages.size() < d.n_frames; p++) {
		const uint32_t s = array_set_of(d, p);
		if (fill[s] < d.ways) {
			fill[s]++;
			pages.push_back(p);
		}
	}
	return pages;
}

int main(int argc, char **argv)
{
	const char *out = ".";
	options o;
	std::vector<uint32_t> scale = {1, 2, 4, 8};
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--out") && i + 1 < argc)
			out = argv[++i];
		else if (!strcmp(argv[i], "--frames") && i + 1 < argc)
			o.frames = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--pairs") && i + 1 < argc)
			o.pairs = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fixture-threads") && i + 1 < argc)
			o.fthreads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--grid") && i + 1 < argc)
			o.grid = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--block") && i + 1 < argc)
			o.block = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reads") && i + 1 < argc)
			o.reads = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--quick"))
			o.quick = true;
		else {
			fprintf(stderr, "usage: %s [--out DIR] [--frames N] [--pairs P] [--fixture-threads F] "
				"[--grid G] [--block B] [--reads R] [--quick]\n", argv[0]);
			return 2;
		}
	}
	if (o.pairs == 0 || o.pairs > MAXP || o.fthreads == 0 || o.frames % o.ways) {
		fprintf(stderr, "--pairs 1..%u, --fixture-threads >= 1, --frames a multiple of %u\n", MAXP, o.ways);
		return 2;
	}
	if (o.quick) {
		o.reads = 8;
		o.stream_pages = 32768;
	}
	o.curve_pages = std::max<uint64_t>(o.stream_pages, 16ull * o.frames);
	cpu_set_t cs;
	sched_getaffinity(0, sizeof(cs), &cs);
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, &cs))
			g_cpus.push_back(i);
	pin(0);
	CK(cudaSetDeviceFlags(cudaDeviceMapHost | cudaDeviceScheduleSpin));
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	CK(cudaStreamCreateWithFlags(&g_ks, cudaStreamNonBlocking));
	const uint32_t grid = o.grid ? o.grid : 128; // 128 x 64: as many threads as half the frames
	const uint32_t threads = grid * o.block;
	const uint64_t pb = 1ull << o.page_shift;

	rig r;
	r.o = o;
	CK(cudaHostAlloc(&r.q_h, sizeof(aq) * MAXC * MAXP, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&r.q_d, r.q_h, 0));
	// Frames (host variant) and the raw run's pages: one mapped region.
	r.land_pages = (uint64_t)threads * pb / 4096;
	CK(cudaHostAlloc(&r.frames_h, frame_bytes(o) + r.land_pages * 4096, cudaHostAllocMapped));
	uint8_t *fh_dev;
	CK(cudaHostGetDevicePointer(&fh_dev, r.frames_h, 0));
	r.frames_host_dev = fh_dev;
	CK(cudaMalloc(&r.frames_d, frame_bytes(o)));
	r.land_h = r.frames_h + frame_bytes(o);
	r.land_d = fh_dev + frame_bytes(o);
	{
		std::vector<uint64_t> ld(r.land_pages);
		for (uint64_t p = 0; p < r.land_pages; p++)
			ld[p] = (uint64_t)(r.land_d + 4096 * p);
		CK(cudaMalloc(&r.land_dma_d, 8 * ld.size()));
		CK(cudaMemcpy(r.land_dma_d, ld.data(), 8 * ld.size(), cudaMemcpyHostToDevice));
	}
	// PRP pools: room for a page's list per command slot, in mapped host
	// memory the fixture reads lists from (bus address = host address).
	r.pool_bytes = (uint64_t)DEPTH * std::max<uint64_t>(8, pb / 4096 * 8);
	r.pool_bytes = (r.pool_bytes + 4095) & ~4095ull;
	CK(cudaHostAlloc(&r.pools_h, r.pool_bytes * MAXC * MAXP, cudaHostAllocMapped));
	CK(cudaHostGetDevicePointer(&r.pools_d, r.pools_h, 0));
	const size_t st = (pq_bytes(DEPTH) + 255) & ~(size_t)255;
	CK(cudaMalloc(&r.pq_mem, st * MAXC * MAXP));
	CK(cudaMalloc(&r.pqs_d, sizeof(pqueue) * MAXC * MAXP));
	CK(cudaMalloc(&r.ctrl_d, sizeof(array_ctrl) * MAXC));
	CK(cudaMalloc(&r.frame_dma_d, 8 * (frame_bytes(o) / 4096) * MAXC));
	CK(cudaMalloc(&r.meta_d, array_meta_bytes(o.frames, o.frames / o.ways)));
	CK(cudaMalloc(&r.desc_d, sizeof(array_desc)));
	CK(cudaMalloc(&g_res, sizeof(kres)));
	const uint32_t lat_every = 16;
	g_lat_bytes = 8ull * grid * lat_every;
	CK(cudaMalloc(&g_lat, g_lat_bytes));
	printf("# %s; %u x %u threads; %u frames of %llu KiB in sets of %u; %u pairs of depth %u per controller, "
	       "%u fixture thread(s) each; %zu CPUs\n",
	       prop.name, grid, o.block, o.frames, (unsigned long long)(pb >> 10), o.ways, o.pairs, DEPTH,
	       o.fthreads, g_cpus.size());

	std::string json = "{\n\"fixture\": \"sw_nvme_fixture.h: software NVMe controllers answered by CPU threads, "
			   "no media: not an SSD\",\n";
	char hb[512];
	snprintf(hb, sizeof(hb), "\"gpu\": \"%s\", \"grid\": %u, \"block\": %u, \"frames\": %u, \"page_bytes\": %llu, "
		 "\"ways\": %u, \"pairs_per_ctrl\": %u, \"depth\": %u, \"fixture_threads_per_ctrl\": %u,\n",
		 prop.name, grid, o.block, o.frames, (unsigned long long)pb, o.ways, o.pairs, DEPTH, o.fthreads);
	json += hb;

	// 1. Miss: raw and array alternated, over one controller, frames in
	// host memory.
	karg miss{};
	json += "\"miss\": [\n";
	double raw_m[2] = {0, 0}, arr_m[2] = {0, 0};
	rig_up(r, 1, false, o.stream_pages);
	miss.pages = r.pages;
	miss.reads = o.reads;
	miss.miss = 1;
	miss.threads = threads;
	miss.lat_every = lat_every;
	for (int rep = 0; rep < 2; rep++) {
		run_out a = run_raw(r, miss, grid, o.block);
		CK(cudaMemset(r.meta_d, 0, array_meta_bytes(r.d.n_frames, r.d.n_sets)));
		run_out b = run_array(r, "miss", miss, grid, o.block);
		raw_m[rep] = a.cmds_per_s;
		arr_m[rep] = b.cmds_per_s;
		json += "  " + js(a) + ",\n  " + js(b) + (rep ? "\n" : ",\n");
	}
	uint64_t ferr = rig_down(r);
	json += "],\n";

	// 2. Scale: the array's miss run over 1, 2, 4, 8 controllers.
	json += "\"scale\": [\n";
	std::vector<double> sc;
	for (size_t i = 0; i < scale.size(); i++) {
		if (scale[i] * o.fthreads + 1 > g_cpus.size())
			printf("# scale %u: %u fixture threads on %zu CPUs (shared cores)\n", scale[i],
			       scale[i] * o.fthreads, g_cpus.size());
		rig_up(r, scale[i], false, o.stream_pages);
		miss.pages = r.pages;
		run_out b = run_array(r, "miss", miss, grid, o.block);
		run_out a = run_raw(r, miss, grid, o.block);
		ferr += rig_down(r);
		sc.push_back(b.cmds_per_s);
		json += "  " + js(b) + ",\n  " + js(a) + (i + 1 < scale.size() ? ",\n" : "\n");
	}
	json += "],\n";

	// 3. Hit: a resident working set (frames in VRAM), loaded once, then
	// random elements; the same elements gathered from flat VRAM.
	// The array holds 16x the cache (the curve's largest working set;
	// in --quick too: a smaller array would cap the curve at its size).
	rig_up(r, 1, true, o.curve_pages);
	std::vector<uint64_t> res_pages = resident_set(r.d, r.pages);
	uint64_t *hp_d, *flat_d;
	CK(cudaMalloc(&hp_d, 8 * res_pages.size()));
	CK(cudaMemcpy(hp_d, res_pages.data(), 8 * res_pages.size(), cudaMemcpyHostToDevice));
	const uint64_t flat_words = (res_pages.back() + 1) * pb / 8;
	CK(cudaMalloc(&flat_d, 8 * flat_words));
	{
		std::vector<uint64_t> flat(flat_words);
		for (uint64_t e = 0; e < flat_words; e++) {
			uint32_t c;
			flat[e] = host_pattern(array_disk_offset(r.dh, 8 * e, &c));
		}
		CK(cudaMemcpy(flat_d, flat.data(), 8 * flat_words, cudaMemcpyHostToDevice));
	}
	// Warm-up: every resident page read once (a stream over the list).
	karg warm{};
	warm.pages = res_pages.size();
	warm.reads = (uint32_t)((res_pages.size() + threads - 1) / threads);
	warm.miss = 1;
	warm.threads = threads;
	warm.hit_pages = hp_d;
	karg hit = warm;
	hit.miss = 0;
	hit.reads = o.reads * 4;
	hit.lat_every = lat_every;
	json += "\"hit\": [\n";
	double hit_arr[2] = {0, 0}, hit_gather[2] = {0, 0};
	run_out warmup = run_array(r, "warmup", warm, grid, o.block);
	json += "  " + js(warmup) + ",\n";
	for (int rep = 0; rep < 2; rep++) {
		run_out b = run_array(r, "hit", hit, grid, o.block);
		run_out g = run_gather(r, hit, flat_d, grid, o.block);
		hit_arr[rep] = b.reads_per_s;
		hit_gather[rep] = g.reads_per_s;
		json += "  " + js(b) + ",\n  " + js(g) + (rep ? "\n" : ",\n");
	}
	json += "],\n";

	// 4. Curve: working sets from the resident one to 16x the cache,
	// uniform random elements. ideal_hit_rate: frames / working set (a
	// fully associative cache under uniform reads, in steady state), what
	// hit_rate should approach; the first run of a size starts from the
	// previous one's cache.
	json += "\"curve\": [\n";
	const double mult[] = {0, 1.5, 2, 4, 8, 16};
	for (size_t i = 0; i < sizeof(mult) / sizeof(mult[0]); i++) {
		karg c = hit;
		c.reads = o.reads;
		if (mult[i] > 0) {
			c.hit_pages = nullptr;
			c.pages = std::min<uint64_t>(r.pages, (uint64_t)(mult[i] * o.frames));
		}
		if (mult[i] > 0 && c.pages < (uint64_t)(mult[i] * o.frames))
			printf("# curve %.1fx: the array holds only %llu pages\n", mult[i], (unsigned long long)r.pages);
		const double ideal = std::min(1.0, (double)o.frames / (double)c.pages);
		printf("# curve: working set %llu pages (%.2fx the cache), ideal hit rate %.4f\n",
		       (unsigned long long)c.pages, (double)c.pages / o.frames, ideal);
		run_out b = run_array(r, "curve", c, grid, o.block);
		char wb[160];
		snprintf(wb, sizeof(wb), ", \"working_set_pages\": %llu, \"working_set_x_cache\": %.3f, \"ideal_hit_rate\": %.4f}",
			 (unsigned long long)c.pages, (double)c.pages / o.frames, ideal);
		std::string j = js(b);
		j.pop_back();
		json += "  " + j + wb + (i + 1 < sizeof(mult) / sizeof(mult[0]) ? ",\n" : "\n");
	}
	json += "],\n";
	ferr += rig_down(r);

	const double miss_ratio = std::min(raw_m[0] ? arr_m[0] / raw_m[0] : 0, raw_m[1] ? arr_m[1] / raw_m[1] : 0);
	const double hit_ratio = std::min(hit_gather[0] ? hit_arr[0] / hit_gather[0] : 0,
					  hit_gather[1] ? hit_arr[1] / hit_gather[1] : 0);
	const double s41 = sc.size() > 2 && sc[0] ? sc[2] / sc[0] : 0;
	g_all_ok &= ferr == 0;
	char tb[1024];
	snprintf(tb, sizeof(tb),
		 "\"targets\": {\"miss_array_over_raw_cmds_per_s\": [%.4f, %.4f], \"miss_target\": 0.8, \"miss_met\": %s, "
		 "\"hit_array_over_gather_reads_per_s\": [%.4f, %.4f], \"hit_target\": 0.5, \"hit_met\": %s, "
		 "\"scale_cmds_per_s\": [%.0f, %.0f, %.0f, %.0f], \"scale_4_over_1\": %.4f, \"scale_target\": 3.2, "
		 "\"scale_met\": %s, \"fixture_errors\": %llu},\n\"all_checks_ok\": %s\n}\n",
		 raw_m[0] ? arr_m[0] / raw_m[0] : 0, raw_m[1] ? arr_m[1] / raw_m[1] : 0, miss_ratio >= 0.8 ? "true" : "false",
		 hit_gather[0] ? hit_arr[0] / hit_gather[0] : 0, hit_gather[1] ? hit_arr[1] / hit_gather[1] : 0,
		 hit_ratio >= 0.5 ? "true" : "false", sc.size() > 0 ? sc[0] : 0, sc.size() > 1 ? sc[1] : 0,
		 sc.size() > 2 ? sc[2] : 0, sc.size() > 3 ? sc[3] : 0, s41, s41 >= 3.2 ? "true" : "false",
		 (unsigned long long)ferr, g_all_ok ? "true" : "false");
	json += tb;
	printf("TARGET miss: array/raw commands/s %.3f, %.3f (target >= 0.8: %s)\n",
	       raw_m[0] ? arr_m[0] / raw_m[0] : 0, raw_m[1] ? arr_m[1] / raw_m[1] : 0, miss_ratio >= 0.8 ? "met" : "NOT met");
	printf("TARGET hit: array/gather reads/s %.3f, %.3f (target >= 0.5: %s)\n",
	       hit_gather[0] ? hit_arr[0] / hit_gather[0] : 0, hit_gather[1] ? hit_arr[1] / hit_gather[1] : 0,
	       hit_ratio >= 0.5 ? "met" : "NOT met");
	printf("TARGET scale: 4 controllers over 1 %.3f (target >= 3.2: %s)\n", s41, s41 >= 3.2 ? "met" : "NOT met");
	printf("CHECKS %s (fixture errors %llu)\n", g_all_ok ? "all ok" : "SOME FAILED", (unsigned long long)ferr);
	std::string path = std::string(out) + "/array.json";
	FILE *f = fopen(path.c_str(), "w");
	if (!f) {
		perror(path.c_str());
		return 1;
	}
	fputs(json.c_str(), f);
	fclose(f);
	printf("# wrote %s\n", path.c_str());
	return g_all_ok ? 0 : 1;
}
