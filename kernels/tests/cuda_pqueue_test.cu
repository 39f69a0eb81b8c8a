// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// cuda_pqueue_test.cu - the per-thread API (pqueue.h) on a real NVIDIA GPU
// (nvcc), where its warp paths run: the lanes of a warp that claim, post
// and reap together share one ticket add, one ring and one reap, and a
// lane that waits for its own command takes the entry straight from the
// lane that polled it. SQ, CQ and doorbell cells are mapped host memory;
// one host thread per pair plays the controller (reads each new SQE in
// order, answers with a spec-format CQE whose dword 0 is the SQE's SLBA, so
// every completion is matched to the command it answers, and never posts
// into a CQ that is full as the CQ head doorbell tells it: it waits for the
// doorbell, so a reap that defers the doorbell too long hangs the test into
// its deadline). It is not an NVMe controller. KTAP out.
//
// Each case checks, per command: OK status, the completion's command ID is
// the thread's ticket slot, its queue ID the pair's, its dword 0 the SLBA
// the thread submitted; per thread: every round ran; per pair: everything
// claimed was rung, reaped and taken, the locks are free and nothing was
// poisoned, and the host side saw exactly those commands.
//
// build: nvcc -std=c++17 -arch=sm_90 -Iinclude tests/cuda_pqueue_test.cu

#include <gpunvme/gpunvme.h>

#include "ktap.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

using namespace gpunvme;

constexpr uint32_t DEPTH = 16;

struct pair_mem {
	sqe sq[DEPTH];
	cqe cq[DEPTH];
	alignas(64) uint32_t sq_db;
	alignas(64) uint32_t cq_db;
};

// How a thread picks its pair: its block's, its lane's (lanes of one warp
// on different pairs), or a hash with random delays before each submit.
enum pick { BY_BLOCK = 0, BY_LANE = 1, JITTER = 2 };

struct pt_args {
	const pqueue *pqs;
	uint32_t npairs, rounds, pick;
	uint32_t *done;	 // rounds each thread finished
	uint32_t *bad;	 // completions that answered someone else
	int32_t *first;	 // first failure per thread
};

__device__ uint32_t mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	return x ^ (x >> 16);
}

__global__ void pt_kernel(pt_args a)
{
	const uint32_t tid = blockIdx.x * blockDim.x + threadIdx.x;
	const uint32_t pair = a.pick == BY_BLOCK ? blockIdx.x % a.npairs
			    : a.pick == BY_LANE ? (threadIdx.x % 32) % a.npairs
						: mix(tid) % a.npairs;
	const pqueue q = a.pqs[pair];
	uint32_t r = 0, bad = 0;
	int32_t first = OK;

	for (; r < a.rounds; r++) {
		if (a.pick == JITTER)
			asm volatile("nanosleep.u32 %0;" :: "r"(mix(tid * 977u + r) % 4096u));
		const uint64_t slba = (uint64_t)tid * a.rounds + r;
		pq_ticket t;
		int32_t rc = pq_submit(q, sqe_rw(NVME_OPC_READ, 0, 1, slba, 0, 0x1000, 0), &t);
		cqe c = {};
		if (rc == OK)
			rc = pq_wait(q, t, &c);
		if (rc != OK) {
			first = rc;
			break;
		}
		bad += c.dw0 != (uint32_t)slba || c.cid != t.slot || c.sqid != pair + 1;
	}
	a.done[tid] = r;
	a.bad[tid] = bad;
	a.first[tid] = first;
}

// The host side of one pair: every new SQE in order, one CQE each (dword
// 0: the SLBA's low word), never more CQEs outstanding than the CQ holds.
struct host_ctrl {
	pair_mem *m = nullptr;
	uint16_t qid = 0;
	std::atomic<bool> run{true};
	uint64_t cmds = 0, rings = 0, cq_full = 0;
	uint32_t head = 0, tail = 0, phase = 1;
	// The linger cases: the command with SLBA hold_slba is answered once
	// *flag is set or hold_s seconds have passed, whichever is first;
	// flag_seen says which.
	uint64_t hold_slba = ~0ull;
	const volatile uint32_t *flag = nullptr;
	double hold_s = 0;
	bool flag_seen = false;

	void hold()
	{
		const auto t0 = std::chrono::steady_clock::now();
		while (!*flag && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < hold_s)
			;
		flag_seen = *flag != 0;
	}

	void loop()
	{
		uint32_t last = 0;
		while (run.load(std::memory_order_relaxed)) {
			const uint32_t db = __atomic_load_n(&m->sq_db, __ATOMIC_ACQUIRE);
			if (db != last) {
				rings++;
				last = db;
			}
			while (head != db) {
				const uint32_t cq_head = __atomic_load_n(&m->cq_db, __ATOMIC_ACQUIRE);
				if ((tail + 1) % DEPTH == cq_head) {
					// As a controller does: wait for the GPU to
					// ring the CQ head (counted once per wait).
					cq_full++;
					while (run.load(std::memory_order_relaxed) &&
					       __atomic_load_n(&m->cq_db, __ATOMIC_ACQUIRE) == cq_head)
						;
					continue;
				}
				sqe e;
				std::memcpy(&e, (const void *)&m->sq[head], sizeof(e));
				uint64_t slba;
				std::memcpy(&slba, (const uint8_t *)&e + 40, 8);
				head = (head + 1) % DEPTH;
				if (slba == hold_slba)
					hold();
				uint8_t *b = (uint8_t *)&m->cq[tail];
				const uint32_t dw0 = (uint32_t)slba, dw1 = 0;
				const uint32_t dw2 = head | (uint32_t)qid << 16;
				std::memcpy(b, &dw0, 4);
				std::memcpy(b + 4, &dw1, 4);
				std::memcpy(b + 8, &dw2, 4);
				__atomic_store_n((uint32_t *)(b + 12), e.cid | phase << 16,
						 __ATOMIC_RELEASE);
				cmds++;
				if (++tail == DEPTH) {
					tail = 0;
					phase ^= 1;
				}
			}
		}
	}
};


#define CK(x)                                                                  \
	do {                                                                   \
		cudaError_t e_ = (x);                                          \
		if (e_ != cudaSuccess) {                                       \
			std::printf("# %s: %s\n", #x, cudaGetErrorString(e_)); \
			return false;                                          \
		}                                                              \
	} while (0)

// npairs pairs: SQ, CQ and doorbell cells in mapped host memory, the
// per-thread API's shared state in device memory, the descriptors too.
struct pairs {
	pair_mem *pm = nullptr, *pm_d = nullptr;
	uint8_t *st_d = nullptr;
	pqueue *pqs_d = nullptr;
	size_t st_bytes = (pq_bytes(DEPTH) + 255) & ~(size_t)255;
	std::vector<uint8_t> img;

	bool make(uint32_t npairs)
	{
		CK(cudaHostAlloc(&pm, sizeof(pair_mem) * npairs, cudaHostAllocMapped));
		std::memset(pm, 0, sizeof(pair_mem) * npairs);
		CK(cudaHostGetDevicePointer(&pm_d, pm, 0));
		CK(cudaMalloc(&st_d, st_bytes * npairs));
		img.resize(st_bytes * npairs);
		std::vector<pqueue> pqs(npairs);
		for (uint32_t i = 0; i < npairs; i++) {
			pqueue &q = pqs[i];
			std::memset(&q, 0, sizeof(q));
			q.sq = pm_d[i].sq;
			q.cq = pm_d[i].cq;
			q.sq_db = &pm_d[i].sq_db;
			q.cq_db = &pm_d[i].cq_db;
			q.depth = DEPTH;
			q.tick_hz = 1000000000ull; // %globaltimer is in ns
			q.timeout_ticks = 2000000000ull;
			pq_init(&img[st_bytes * i], DEPTH, 0, 0, 1);
			pq_attach(q, st_d + st_bytes * i);
		}
		CK(cudaMemcpy(st_d, img.data(), img.size(), cudaMemcpyHostToDevice));
		CK(cudaMalloc(&pqs_d, sizeof(pqueue) * npairs));
		CK(cudaMemcpy(pqs_d, pqs.data(), sizeof(pqueue) * npairs, cudaMemcpyHostToDevice));
		return true;
	}

	// The shared state back into img (pair i at st_bytes * i).
	bool fetch()
	{
		CK(cudaMemcpy(img.data(), st_d, img.size(), cudaMemcpyDeviceToHost));
		return true;
	}

	~pairs()
	{
		cudaFree(pqs_d);
		cudaFree(st_d);
		cudaFreeHost(pm);
	}
};

static bool run_case(uint32_t npairs, uint32_t blocks, uint32_t threads, uint32_t rounds,
		     uint32_t pick)
{
	pairs ps;
	if (!ps.make(npairs))
		return false;
	pair_mem *pm = ps.pm;
	const pqueue *pqs_d = ps.pqs_d;
	const uint32_t n = blocks * threads;
	uint32_t *done_d, *bad_d;
	int32_t *first_d;
	CK(cudaMalloc(&done_d, 4 * n));
	CK(cudaMalloc(&bad_d, 4 * n));
	CK(cudaMalloc(&first_d, 4 * n));

	std::vector<host_ctrl> ctrl(npairs);
	std::vector<std::thread> th;
	for (uint32_t i = 0; i < npairs; i++) {
		ctrl[i].m = &pm[i];
		ctrl[i].qid = (uint16_t)(i + 1);
		th.emplace_back([&, i] { ctrl[i].loop(); });
	}
	pt_args a{pqs_d, npairs, rounds, pick, done_d, bad_d, first_d};
	pt_kernel<<<blocks, threads>>>(a);
	cudaError_t ke = cudaDeviceSynchronize();
	for (auto &c : ctrl)
		c.run = false;
	for (auto &t : th)
		t.join();
	if (ke != cudaSuccess) {
		std::printf("# kernel: %s\n", cudaGetErrorString(ke));
		return false;
	}
	std::vector<uint32_t> done(n), bad(n);
	std::vector<int32_t> first(n);
	CK(cudaMemcpy(done.data(), done_d, 4 * n, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(bad.data(), bad_d, 4 * n, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(first.data(), first_d, 4 * n, cudaMemcpyDeviceToHost));
	if (!ps.fetch())
		return false;
	bool ok = true;
	uint64_t total = 0, unfinished = 0, wrong = 0;
	int32_t err = OK;
	for (uint32_t i = 0; i < n; i++) {
		total += done[i];
		unfinished += done[i] != rounds;
		wrong += bad[i];
		if (first[i] != OK && err == OK)
			err = first[i];
	}
	ok = unfinished == 0 && wrong == 0 && err == OK && total == (uint64_t)n * rounds;
	std::printf("# %u pairs, %u x %u threads, %u rounds: %llu commands, %llu unfinished threads, "
		    "%llu wrong completions, first error %d\n",
		    npairs, blocks, threads, rounds, (unsigned long long)total,
		    (unsigned long long)unfinished, (unsigned long long)wrong, err);
	uint64_t seen = 0;
	for (uint32_t i = 0; i < npairs; i++) {
		const pq_shared *s = (const pq_shared *)&ps.img[ps.st_bytes * i];
		const uint64_t c = ctrl[i].cmds;
		seen += c;
		const bool settled = s->error == 0 && s->cid_ticket == c && (s->db_word >> 1) == c &&
				     (s->db_word & 1) == 0 && s->sq_head == c && s->cqes == c &&
				     s->cq_lock == 0;
		std::printf("# pair %u: %llu commands, %llu SQ doorbells (%llu seen), %llu CQ doorbells, "
			    "tickets %llu, rung %llu, sq_head %llu, cqes %llu, error %d, waited for CQ space %llu times%s\n",
			    i + 1, (unsigned long long)c, (unsigned long long)s->sq_doorbells,
			    (unsigned long long)ctrl[i].rings, (unsigned long long)s->cq_doorbells,
			    (unsigned long long)s->cid_ticket, (unsigned long long)(s->db_word >> 1),
			    (unsigned long long)s->sq_head, (unsigned long long)s->cqes, s->error,
			    (unsigned long long)ctrl[i].cq_full, settled ? "" : "  NOT SETTLED");
		ok &= settled;
	}
	ok &= seen == total;
	cudaFree(done_d);
	cudaFree(bad_d);
	cudaFree(first_d);
	return ok;
}

// pq_wait()'s linger: two lanes of one warp each submit a command, lane
// 0's first (the host answers it at once), then lane 1's (SLBA HOLD_SLBA,
// which the host holds); both wait together with the given linger. Lane 0
// sets a flag in host memory as soon as its wait returns, so the host
// knows, when it answers lane 1, whether lane 0 had left by then.
constexpr uint64_t HOLD_SLBA = 0xb0b;
constexpr uint64_t FIRST_SLBA = 7;

__global__ void linger_kernel(const pqueue *qs, uint32_t linger, volatile uint32_t *left,
			      int32_t *rc_out, uint32_t *dw0_out)
{
	const uint32_t lane = threadIdx.x;
	const pqueue q = qs[0];
	pq_ticket t = {};
	int32_t rc = OK;
	for (uint32_t l = 0; l < 2; l++) {
		if (lane == l)
			rc = pq_submit(q, sqe_rw(NVME_OPC_READ, 0, 1, lane ? HOLD_SLBA : FIRST_SLBA, 0,
						 0x1000, 0), &t);
		__syncwarp();
	}
	cqe c = {};
	if (rc == OK)
		rc = pq_wait(q, t, &c, linger);
	if (lane == 0) {
		*left = 1;
		__threadfence_system();
	}
	rc_out[lane] = rc;
	dw0_out[lane] = c.dw0;
}

// want_left: whether lane 0 must have left its wait before lane 1's
// command, held up to hold_s seconds, was answered.
static bool run_linger_case(uint32_t linger, double hold_s, bool want_left)
{
	pairs ps;
	if (!ps.make(1))
		return false;
	uint32_t *flag = nullptr, *flag_d = nullptr, *dw0_d = nullptr;
	int32_t *rc_d = nullptr;
	CK(cudaHostAlloc(&flag, 64, cudaHostAllocMapped));
	*flag = 0;
	CK(cudaHostGetDevicePointer(&flag_d, flag, 0));
	CK(cudaMalloc(&rc_d, 8));
	CK(cudaMalloc(&dw0_d, 8));
	host_ctrl ctrl;
	ctrl.m = ps.pm;
	ctrl.qid = 1;
	ctrl.hold_slba = HOLD_SLBA;
	ctrl.flag = flag;
	ctrl.hold_s = hold_s;
	std::thread th([&] { ctrl.loop(); });
	linger_kernel<<<1, 2>>>(ps.pqs_d, linger, flag_d, rc_d, dw0_d);
	const cudaError_t ke = cudaDeviceSynchronize();
	ctrl.run = false;
	th.join();
	if (ke != cudaSuccess) {
		std::printf("# kernel: %s\n", cudaGetErrorString(ke));
		return false;
	}
	int32_t rc[2];
	uint32_t dw0[2];
	CK(cudaMemcpy(rc, rc_d, 8, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(dw0, dw0_d, 8, cudaMemcpyDeviceToHost));
	std::printf("# linger %u ns: lane 0 rc %d dw0 %u, lane 1 rc %d dw0 %#x, %llu commands; "
		    "lane 0 had %s its wait when lane 1's command (held up to %.3f s) was answered\n",
		    linger, rc[0], dw0[0], rc[1], dw0[1], (unsigned long long)ctrl.cmds,
		    ctrl.flag_seen ? "left" : "NOT left", hold_s);
	cudaFree(rc_d);
	cudaFree(dw0_d);
	cudaFreeHost(flag);
	return rc[0] == OK && rc[1] == OK && dw0[0] == FIRST_SLBA && dw0[1] == HOLD_SLBA &&
	       ctrl.cmds == 2 && ctrl.flag_seen == want_left;
}

int main()
{
	std::printf("KTAP version 1\n1..7\n");
	result(run_case(2, 4, 64, 200, BY_BLOCK), "pt_two_blocks_per_pair_wrapping");
	result(run_case(3, 2, 64, 100, BY_LANE), "pt_lanes_of_one_warp_on_three_pairs");
	result(run_case(4, 4, 96, 100, JITTER), "pt_random_pairs_and_delays");
	result(run_case(1, 1, 32, 500, BY_BLOCK), "pt_one_warp_one_pair_500_rounds");
	// A done lane stays while its warp's other lane waits (20 ms here,
	// well inside the linger asked for and the 2 s deadline).
	result(run_linger_case(1u << 30, 0.02, false), "pt_wait_linger_keeps_the_warp_together");
	// Lane 1's completion comes only once lane 0 has left: the default
	// linger lets it go after PQ_LINGER_NS (32 us), long before 1 s; an
	// unbounded linger would hold lane 0 until lane 1's deadline.
	result(run_linger_case(PQ_LINGER_NS, 1.0, true), "pt_wait_linger_is_bounded");
	result(run_linger_case(0, 1.0, true), "pt_wait_linger_0_leaves_at_once");
	return summary();
}
