// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_nvme_model.h - a model NVMe controller for the device library's
// host tests (tests/host_array_test.cpp): one host thread serves every
// queue pair of the controller (fetch the SQEs up to the SQ doorbell in
// order, execute READ / WRITE against a namespace in host memory through
// PRP1, PRP2 or a PRP list, post a CQE with the phase tag last, never into
// a full CQ). What makes it a test's model rather than a fixture:
//  - its own DMA address space: the device's address of host memory is
//    the host address plus a per-controller offset, and only windows the
//    test registered (frames, PRP pools, buffers) translate, so a command
//    built from another controller's address table fails (Data Transfer
//    Error) instead of passing by accident;
//  - counters per LBA (how many reads began there), per opcode, FUA;
//  - knobs: mute (stop answering: no fetch, no completion, as a controller
//    that hangs), a delay before each read completes.
// Each pair comes with the per-thread API's descriptor (pqueue) and shared
// state, ready for pqueue.h / array.h.

#ifndef GPUNVME_HOST_NVME_MODEL_H
#define GPUNVME_HOST_NVME_MODEL_H

#include <gpunvme/pqueue.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace nvmemodel {

using namespace gpunvme;

struct window {
	uint64_t dma;
	uint8_t *va;
	uint64_t len;
};

struct qp {
	uint32_t depth;
	uint16_t qid;
	std::vector<sqe> sq;
	std::vector<cqe> cq;
	alignas(64) uint32_t sq_db = 0;
	alignas(64) uint32_t cq_db = 0;
	void *pq_mem = nullptr;
	uint8_t *pool = nullptr;
	uint64_t pool_bytes = 0;
	pqueue q{};
	// the controller's side
	uint32_t head = 0, tail = 0, phase = 1;

	~qp()
	{
		std::free(pq_mem);
		std::free(pool);
	}
};

class controller {
	const uint32_t k_, lba_;
	const uint64_t blocks_;

public:
	// A namespace of `blocks` LBAs of `lba_bytes` (zeroed), controller
	// index k (its DMA offset).
	controller(uint32_t k, uint64_t blocks, uint32_t lba_bytes)
		: k_(k), lba_(lba_bytes), blocks_(blocks), ns(blocks * lba_bytes), reads_at(blocks)
	{
		for (auto &x : reads_at)
			x = 0;
	}
	~controller() { stop(); }

	uint64_t dma_of(const void *p) const { return (uint64_t)(uintptr_t)p + offset(); }
	uint64_t offset() const { return (uint64_t)(k_ + 1) << 48; }

	void add_window(uint8_t *va, uint64_t len)
	{
		std::lock_guard<std::mutex> g(wl_);
		win_.push_back({dma_of(va), va, len});
	}

	// A pair of `depth` with its PRP pool (stride bytes per slot) and the
	// per-thread API's state; call before start().
	qp &add_pair(uint32_t depth, uint32_t stride, uint64_t timeout_ms,
		     const volatile uint32_t *stop_flag = nullptr)
	{
		auto p = std::make_unique<qp>();
		p->depth = depth;
		p->qid = (uint16_t)(pairs.size() + 1);
		p->sq.assign(depth, sqe{});
		p->cq.assign(depth, cqe{});
		p->pq_mem = std::aligned_alloc(64, (pq_bytes(depth) + 63) / 64 * 64);
		pq_init(p->pq_mem, depth, 0, 0, 1);
		p->pool_bytes = (uint64_t)stride * depth;
		p->pool = (uint8_t *)std::aligned_alloc(4096, (p->pool_bytes + 4095) / 4096 * 4096);
		std::memset(p->pool, 0, p->pool_bytes);
		add_window(p->pool, p->pool_bytes);
		pqueue &q = p->q;
		q = pqueue{};
		q.sq = p->sq.data();
		q.cq = p->cq.data();
		q.sq_db = &p->sq_db;
		q.cq_db = &p->cq_db;
		q.stop = stop_flag;
		q.depth = depth;
		q.tick_hz = 1000000000ull;
		q.timeout_ticks = timeout_ms * 1000000ull;
		q.backoff = 1;
		q.prp_va = (uint64_t *)p->pool;
		q.prp_dma = dma_of(p->pool);
		q.prp_stride = pq_prp_stride(p->pool_bytes, depth);
		pq_attach(q, p->pq_mem);
		pairs.push_back(std::move(p));
		return *pairs.back();
	}

	void start()
	{
		quit_ = false;
		th_ = std::thread([this] { loop(); });
	}
	void stop()
	{
		quit_ = true;
		if (th_.joinable())
			th_.join();
	}

	// Pattern fill: the 64-bit word at namespace byte offset o is f(o).
	template <typename F> void fill(F f)
	{
		for (uint64_t o = 0; o + 8 <= ns.size(); o += 8) {
			uint64_t v = f(o);
			std::memcpy(&ns[o], &v, 8);
		}
	}
	uint64_t word(uint64_t o) const
	{
		uint64_t v;
		std::memcpy(&v, &ns[o], 8);
		return v;
	}

	std::atomic<bool> mute{false};
	std::atomic<uint32_t> read_delay_us{0};
	std::atomic<uint64_t> reads{0}, writes{0}, fua_writes{0}, errors{0}, violations{0};
	std::vector<std::unique_ptr<qp>> pairs;
	std::vector<uint8_t> ns;
	std::vector<std::atomic<uint32_t>> reads_at; // reads that began at this LBA

private:
	uint8_t *translate(uint64_t dma, uint64_t len)
	{
		std::lock_guard<std::mutex> g(wl_);
		for (const window &w : win_)
			if (dma >= w.dma && dma - w.dma + len <= w.len)
				return w.va + (dma - w.dma);
		return nullptr;
	}

	// SC, SCT 0: 0 ok, 0x01 opcode, 0x02 field, 0x04 transfer, 0x0b ns, 0x80 range.
	uint32_t execute(const sqe &e)
	{
		if (e.opc != NVME_OPC_READ && e.opc != NVME_OPC_WRITE)
			return 0x01;
		if (e.nsid != 1)
			return 0x0b;
		const uint64_t slba = (uint64_t)e.cdw10 | (uint64_t)e.cdw11 << 32;
		const uint64_t nlb = (e.cdw12 & 0xffffu) + 1;
		if (slba >= blocks_ || nlb > blocks_ - slba)
			return 0x80;
		const bool wr = e.opc == NVME_OPC_WRITE;
		if (wr) {
			writes++;
			if (e.cdw12 & NVME_RW_FUA)
				fua_writes++;
		} else {
			reads++;
			reads_at[slba]++;
			if (uint32_t us = read_delay_us.load())
				std::this_thread::sleep_for(std::chrono::microseconds(us));
		}
		uint64_t len = nlb * lba_;
		uint8_t *nsp = &ns[slba * lba_];
		const uint64_t first = 4096 - (e.prp1 & 4095);
		const uint64_t len1 = len < first ? len : first;
		auto move = [&](uint64_t dma, uint64_t n) {
			uint8_t *h = translate(dma, n);
			if (!h)
				return false;
			if (wr)
				std::memcpy(nsp, h, n);
			else
				std::memcpy(h, nsp, n);
			nsp += n;
			return true;
		};
		if (!move(e.prp1, len1))
			return 0x04;
		len -= len1;
		if (len == 0)
			return 0;
		if (len <= 4096) {
			if (e.prp2 & 4095)
				return 0x02;
			return move(e.prp2, len) ? 0 : 0x04;
		}
		const uint64_t n = (len + 4095) / 4096;
		const uint8_t *list = translate(e.prp2, 8 * n);
		if (!list || (e.prp2 & 7))
			return 0x02;
		for (uint64_t i = 0; i < n; i++) {
			uint64_t a;
			std::memcpy(&a, list + 8 * i, 8);
			const uint64_t l = len < 4096 ? len : 4096;
			if ((a & 4095) || !move(a, l))
				return 0x04;
			len -= l;
		}
		return 0;
	}

	bool service(qp &p)
	{
		const uint32_t db = __atomic_load_n(&p.sq_db, __ATOMIC_ACQUIRE);
		if (db >= p.depth) {
			violations++;
			return false;
		}
		bool any = false;
		while (p.head != db && !quit_) {
			if ((p.tail + 1) % p.depth == __atomic_load_n(&p.cq_db, __ATOMIC_ACQUIRE))
				break; // never post into a full CQ
			const sqe e = p.sq[p.head];
			p.head = (p.head + 1) % p.depth;
			const uint32_t st = execute(e);
			errors += st != 0;
			cqe &c = p.cq[p.tail];
			c.dw0 = 0;
			c.dw1 = 0;
			c.sqhd = (uint16_t)p.head;
			c.sqid = p.qid;
			__atomic_store_n((uint32_t *)&c + 3, (uint32_t)e.cid | p.phase << 16 | st << 17,
					 __ATOMIC_RELEASE);
			if (++p.tail == p.depth) {
				p.tail = 0;
				p.phase ^= 1u;
			}
			any = true;
		}
		return any;
	}

	void loop()
	{
		while (!quit_) {
			bool any = false;
			if (!mute)
				for (auto &p : pairs)
					any |= service(*p);
			if (!any)
				std::this_thread::yield();
		}
	}

	std::mutex wl_;
	std::vector<window> win_;
	std::atomic<bool> quit_{false};
	std::thread th_;
};

} // namespace nvmemodel

#endif // GPUNVME_HOST_NVME_MODEL_H
