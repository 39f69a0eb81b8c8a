// SPDX-License-Identifier: GPL-2.0 OR MIT
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

static bool run_case(uint32_t npairs, uint32_t blocks, uint32_t threads, uint32_t rounds,
		     uint32_t pick)
{
	pair_mem *pm = nullptr;
	CK(cudaHostAlloc(&pm, sizeof(pair_mem) * npairs, cudaHostAllocMapped));
	std::memset(pm, 0, sizeof(pair_mem) * npairs);
	pair_mem *pm_d = nullptr;
	CK(cudaHostGetDevicePointer(&pm_d, pm, 0));
	const size_t st_bytes = (pq_bytes(DEPTH) + 255) & ~(size_t)255;
	uint8_t *st_d = nullptr;
	CK(cudaMalloc(&st_d, st_bytes * npairs));
	std::vector<uint8_t> img(st_bytes * npairs);
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
	pqueue *pqs_d = nullptr;
	CK(cudaMalloc(&pqs_d, sizeof(pqueue) * npairs));
	CK(cudaMemcpy(pqs_d, pqs.data(), sizeof(pqueue) * npairs, cudaMemcpyHostToDevice));
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
	CK(cudaMemcpy(img.data(), st_d, img.size(), cudaMemcpyDeviceToHost));
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
		const pq_shared *s = (const pq_shared *)&img[st_bytes * i];
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
	cudaFree(pqs_d);
	cudaFree(st_d);
	cudaFreeHost(pm);
	return ok;
}

int main()
{
	std::printf("KTAP version 1\n1..4\n");
	result(run_case(2, 4, 64, 200, BY_BLOCK), "pt_two_blocks_per_pair_wrapping");
	result(run_case(3, 2, 64, 100, BY_LANE), "pt_lanes_of_one_warp_on_three_pairs");
	result(run_case(4, 4, 96, 100, JITTER), "pt_random_pairs_and_delays");
	result(run_case(1, 1, 32, 500, BY_BLOCK), "pt_one_warp_one_pair_500_rounds");
	return summary();
}
