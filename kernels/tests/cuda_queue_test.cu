// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// cuda_queue_test.cu - the queue library on a real NVIDIA GPU (nvcc), with
// SQ, CQ, doorbell cells and stop flag in mapped host memory and a host
// thread playing the controller: it watches the SQ doorbell cell, reads
// the new SQEs and posts spec-format CQEs. That proves, on hardware, that
// the doorbell store leaves the GPU while the kernel runs (no completion
// otherwise), that the poll sees CPU writes, and that timeout (globaltimer)
// and stop paths end the kernel. It is not an NVMe controller. KTAP out.
//
// build: nvcc -std=c++17 -arch=sm_90 -Iinclude tests/cuda_queue_test.cu

#include <gpunvme/gpunvme.h>

#include "ktap.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

using namespace gpunvme;

constexpr uint32_t DEPTH = 8;
constexpr uint32_t MAX_CMDS = 1024;

struct ring_mem {
	sqe sq[DEPTH];
	cqe cq[DEPTH];
	uint32_t sq_db, cq_db, stop;
	qpair q;
	int32_t rc[MAX_CMDS];
	uint32_t cid[MAX_CMDS];
};

__global__ void qtest(ring_mem *m, uint32_t rounds, uint32_t n)
{
	__shared__ int32_t agg;
	qpair q = m->q;
	uint32_t lane = lane_id();

	for (uint32_t r = 0; r < rounds && q.error == OK; r++) {
		uint32_t k = r * n + lane;
		cqe c;
		int32_t rc = group_submit(q, lane, n,
					  sqe_read((uint16_t)k, 1, k, 0, 0x1000, 0));
		if (rc == OK)
			rc = group_reap(q, lane, n, &c, &agg);
		if (lane < n && k < MAX_CMDS) {
			m->rc[k] = rc;
			m->cid[k] = rc >= 0 ? c.cid : 0xffffffffu;
		}
	}
	sync_lanes();
	if (lane == 0)
		m->q = q;
}

// The host side of the rings: completes every new SQE, CID echoed.
struct fake_ctrl {
	ring_mem *m;
	volatile bool run = true, respond = true;
	uint16_t fail_cid = 0xffff;
	uint32_t head = 0, tail = 0, phase = 1, rings = 0;

	void loop()
	{
		uint32_t last = 0;
		while (run) {
			uint32_t db = __atomic_load_n(&m->sq_db, __ATOMIC_ACQUIRE);
			if (db != last) {
				rings++;
				last = db;
			}
			while (respond && head != db) {
				sqe e;
				std::memcpy(&e, (const void *)&m->sq[head], sizeof(e));
				uint32_t st = e.cid == fail_cid ? 0x80u : 0u;
				uint8_t *b = (uint8_t *)&m->cq[tail];
				uint32_t dw2 = (head + 1) % DEPTH;
				std::memcpy(b + 8, &dw2, 4);
				__atomic_store_n((uint32_t *)(b + 12),
						 e.cid | phase << 16 | st << 17,
						 __ATOMIC_RELEASE);
				head = (head + 1) % DEPTH;
				if (++tail == DEPTH) {
					tail = 0;
					phase ^= 1;
				}
			}
		}
	}
};


static ring_mem *fresh(uint64_t timeout_ms)
{
	ring_mem *m;
	if (cudaHostAlloc(&m, sizeof(*m), cudaHostAllocMapped) != cudaSuccess)
		return nullptr;
	std::memset(m, 0, sizeof(*m));
	ring_mem *d;
	cudaHostGetDevicePointer(&d, m, 0);
	m->q.sq = d->sq;
	m->q.cq = d->cq;
	m->q.sq_db = &d->sq_db;
	m->q.cq_db = &d->cq_db;
	m->q.stop = &d->stop;
	m->q.tick_hz = 1000000000ull; // %globaltimer is in ns
	m->q.timeout_ticks = timeout_ms * 1000000ull;
	m->q.depth = DEPTH;
	m->q.phase = 1;
	return m;
}

static double launch(ring_mem *m, uint32_t rounds, uint32_t n, uint32_t lanes)
{
	ring_mem *d;
	cudaHostGetDevicePointer(&d, m, 0);
	auto t0 = std::chrono::steady_clock::now();
	qtest<<<1, lanes>>>(d, rounds, n);
	cudaError_t e = cudaDeviceSynchronize();
	double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
	if (e != cudaSuccess)
		std::printf("# cuda: %s\n", cudaGetErrorString(e));
	return e == cudaSuccess ? s : -1;
}

int main()
{
	std::printf("KTAP version 1\n1..4\n");

	{ // 1: many wrapping rounds, doorbells seen mid-kernel
		ring_mem *m = fresh(1000);
		fake_ctrl c{m};
		std::thread t([&] { c.loop(); });
		const uint32_t rounds = 100, n = 5; // 500 cmds, 62 wraps of 8
		double s = launch(m, rounds, n, 32);
		c.run = false;
		t.join();
		bool ok = s >= 0 && m->q.error == OK && m->q.inflight == 0;
		for (uint32_t k = 0; k < rounds * n; k++) {
			uint32_t batch = k / n * n;
			ok = ok && m->rc[k] == OK && m->cid[k] >= batch && m->cid[k] < batch + n;
		}
		ok = ok && m->sq_db == (rounds * n) % DEPTH && m->cq_db == m->sq_db &&
		     m->q.phase == (1u ^ ((rounds * n / DEPTH) & 1u));
		std::printf("# %u cmds in %.3f s (%.1f us/batch), %u doorbell changes seen\n",
			    rounds * n, s, s * 1e6 / rounds, c.rings);
		result(ok, "roundtrip_wrap_100_rounds_of_5_depth_8");
		cudaFreeHost(m);
	}
	{ // 2: NVMe status delivered to the right lane, queue stays usable
		ring_mem *m = fresh(1000);
		fake_ctrl c{m};
		c.fail_cid = 7;
		std::thread t([&] { c.loop(); });
		double s = launch(m, 4, 4, 4);
		c.run = false;
		t.join();
		bool ok = s >= 0 && m->q.error == OK;
		for (uint32_t k = 0; k < 16; k++) {
			int32_t want = m->cid[k] == 7 ? 0x80 : OK;
			ok = ok && m->rc[k] == want;
		}
		result(ok, "nvme_status_to_lane");
		cudaFreeHost(m);
	}
	{ // 3: no completion: bounded by the wall-clock deadline
		ring_mem *m = fresh(50);
		fake_ctrl c{m};
		c.respond = false;
		std::thread t([&] { c.loop(); });
		double s = launch(m, 1, 2, 2);
		c.run = false;
		t.join();
		bool ok = s >= 0.05 && s < 1.0 && m->q.error == ERR_TIMEOUT &&
			  m->rc[0] == ERR_TIMEOUT && m->cq_db == 0 && c.rings == 1;
		std::printf("# timeout after %.3f s (asked 0.050)\n", s);
		result(ok, "timeout_globaltimer_50ms");
		cudaFreeHost(m);
	}
	{ // 4: stop flag ends a long wait (100 s asked, 2 s cap)
		ring_mem *m = fresh(100000);
		fake_ctrl c{m};
		c.respond = false;
		std::thread t([&] { c.loop(); });
		std::thread stopper([&] {
			std::this_thread::sleep_for(std::chrono::milliseconds(100));
			__atomic_store_n(&m->stop, 1u, __ATOMIC_RELEASE);
		});
		double s = launch(m, 1, 1, 1);
		stopper.join();
		c.run = false;
		t.join();
		bool ok = s >= 0.1 && s < 1.5 && m->q.error == ERR_STOPPED;
		std::printf("# stopped after %.3f s\n", s);
		result(ok, "stop_flag");
		cudaFreeHost(m);
	}
	return summary();
}
