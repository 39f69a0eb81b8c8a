// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// relay_microbench.h - the validating relay (relay.h, the port of
// rust/bridge.rs + validate.rs + buffers.rs) timed on the CPU alone, apart
// from the GPU and the software fixture: how many commands one relay
// thread validates and relays per second.
//
// Per pair, in plain host memory: a shadow SQ, the shadow cells, a CQ
// mirror, a PRP pool, the kernel's list slots, a real SQ, a real CQ and the
// controller's doorbell cells, laid out as rust/queues/qpair.rs lays them out. The
// file has its own Buffers (pages with made-up DMA addresses that nothing
// dereferences). Around each pair's relay:
//   client      plays the file: keeps depth-1 commands outstanding from a
//               fixed list of command templates, reaps the CQ mirror and
//               checks every completion (its own command ID back, the
//               expected status, and the controller's fingerprint of what
//               reached it);
//   controller  completes every SQE the doorbell exposes at once (no data,
//               no media): the CQE's result is a fingerprint of the real
//               SQE (opcode, NSID, PRP1, CDW10-13, PRP2 or the first and
//               last entry of the kernel list PRP2 names), and a field the
//               relay must not pass on (flags, MPTR, CDW2/3/14/15) or a list
//               pointer that is not this command ID's kernel slot spoils it.
// Modes:
//   single  one thread runs client, relay step and controller for every
//           pair in turn, each step timed as bridge_thread.c times it
//           (relay_ns); everything stays in that core's caches.
//   cross   the relay runs alone on its own core in the bridge_thread.c
//           loop (relay_thread_loop) (or `relay_threads` relays, each on a
//           core of its own, pair i on relay i % R as the pool hands them
//           out, all pairs one file's) while client threads on other cores
//           play the files and the controller, so every shadow SQE and
//           real CQE the relay reads was last written by another core (as
//           a DMA write would leave it: not in the relay's cache).
// After the timed window every pair is drained and the totals are checked:
// submitted == reaped, accepted == controller commands, no check failed.
#ifndef GPUNVME_BENCH_RELAY_MICROBENCH_H
#define GPUNVME_BENCH_RELAY_MICROBENCH_H

#include "relay.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace mb {

using relay::validate::PAGE;
using relay::validate::Reject;

constexpr uint64_t DATA_BASE = 0x100000000000ull; // made-up DMA addresses of the file's pages
constexpr uint64_t PAIR_STRIDE = 1ull << 20;      // each pair's pages start 1 MiB apart
constexpr uint32_t PAGES_PER_PAIR = 64;           // 256 KiB of buffers per pair
constexpr uint32_t LBA_SHIFT = 9;
constexpr uint64_t NS_BLOCKS = 1ull << 30;
constexpr uint32_t EXP_WINDOW = 1024;             // client's cid -> template table

struct Config {
	const char *mix = "read4k";       // read4k | read8k_prp2 | read128k_list | mixed
	bool fragmented = false;          // every owned page its own range
	bool cross = false;               // relay alone on its core, clients elsewhere
	uint32_t pairs = 64;
	uint32_t depth = 32;
	uint32_t client_threads = 2;      // cross mode
	uint32_t relay_threads = 1;       // cross mode
	double seconds = 0.5;
	std::vector<int> cpus;            // cross mode pinning: [relay0.., client0, ...]
};

struct Result {
	Config cfg;
	size_t buffer_ranges = 0;
	uint64_t cmds = 0, rejected_in_window = 0;   // the timed window
	uint64_t accepted = 0, rejected = 0;         // totals, drain included
	uint64_t relay_ns = 0, wall_ns = 0;
	uint64_t polls = 0, idle_steps = 0, sq_doorbell_writes = 0, cq_doorbell_writes = 0;
	uint64_t controller_cmds = 0, controller_cq_full = 0;
	uint64_t submitted = 0, reaped = 0, check_failures = 0;
	bool drained = false;
	double per_s_relay() const { return relay_ns ? cmds * 1e9 / relay_ns : 0; }
	double per_s_wall() const { return wall_ns ? cmds * 1e9 / wall_ns : 0; }
	bool ok() const
	{
		return drained && check_failures == 0 && submitted == reaped &&
		       accepted + rejected == submitted && controller_cmds == accepted;
	}
};

// What the controller saw, folded into 32 bits.
inline uint32_t fingerprint(uint8_t opc, uint32_t nsid, uint64_t prp1, uint64_t a, uint64_t b,
			    uint32_t cdw10, uint32_t cdw11, uint32_t cdw12, uint32_t cdw13)
{
	uint64_t h = 0x9e3779b97f4a7c15ull;
	for (uint64_t v : {(uint64_t)opc, (uint64_t)nsid, prp1, a, b, (uint64_t)cdw10,
			   (uint64_t)cdw11, (uint64_t)cdw12, (uint64_t)cdw13}) {
		h ^= v;
		h *= 0xff51afd7ed558ccdull;
		h ^= h >> 33;
	}
	return (uint32_t)h ^ (uint32_t)(h >> 32);
}

struct Tmpl {
	relay::sqe s;
	uint16_t status; // expected CQE status field, phase bit clear
	uint32_t fp;     // expected result (accepted commands)
};

// One pair's memory and the three parties' state.
struct Pair {
	uint32_t depth = 0;
	uint16_t qid = 0;
	// memory (page-aligned allocations)
	relay::sqe *shadow_sq = nullptr, *real_sq = nullptr;
	relay::cqe *shadow_cq = nullptr, *real_cq = nullptr;
	uint8_t *cells = nullptr;
	swnvme::regs *db = nullptr;
	uint64_t *pool = nullptr, *lists = nullptr;
	size_t list_entries = 0, list_bytes = 0;
	std::vector<void *> allocs;
	// relay
	std::unique_ptr<relay::Relay> relay;
	relay::PairPort port;
	relay::Counters ctr;
	// client (the file)
	std::vector<Tmpl> tmpl;
	std::vector<int32_t> exp; // cid & (EXP_WINDOW-1) -> template index, -1 none
	uint32_t c_tail = 0, c_head = 0, c_phase = 1, c_out = 0, c_next = 0;
	uint16_t c_seq = 0;
	uint64_t c_sub = 0, c_reaped = 0, c_bad = 0;
	bool c_submit = true;
	// controller
	uint32_t d_head = 0, d_tail = 0, d_phase = 1;
	uint64_t d_cmds = 0, d_full = 0;

	Pair() = default;
	Pair(const Pair &) = delete;
	Pair &operator=(const Pair &) = delete;
	~Pair()
	{
		for (void *p : allocs)
			free(p);
	}
	template <class T>
	T *alloc(size_t bytes)
	{
		bytes = (bytes + PAGE - 1) / PAGE * PAGE;
		void *p = aligned_alloc(PAGE, bytes);
		if (!p) {
			fprintf(stderr, "relay microbench: out of memory\n");
			abort();
		}
		memset(p, 0, bytes);
		allocs.push_back(p);
		return (T *)p;
	}
};

inline uint64_t page_addr(uint32_t pair, uint32_t k, bool fragmented)
{
	return DATA_BASE + pair * PAIR_STRIDE + (uint64_t)k * PAGE * (fragmented ? 2 : 1);
}

// An address no mapping of the file covers: past this pair's pages.
inline uint64_t foreign_addr(uint32_t pair)
{
	return DATA_BASE + pair * PAIR_STRIDE + 2ull * PAGES_PER_PAIR * PAGE + PAGE;
}

// What a well-behaved controller computes from a real SQE (see top).
inline uint32_t controller_fp(const Pair &p, const relay::sqe &e)
{
	uint32_t spoil = 0;
	if (e.flags || e.mptr || e.cdw2 || e.cdw3 || e.cdw14 || e.cdw15)
		spoil = 1;
	uint64_t a = e.prp2, b = 0;
	const uint64_t lists_dma = (uint64_t)(uintptr_t)p.lists;
	if (e.prp2 >= lists_dma && e.prp2 < lists_dma + p.list_bytes) {
		// A PRP list: it must be this command ID's kernel slot.
		if (e.prp2 != lists_dma + (uint64_t)e.cid * p.list_entries * 8)
			spoil = 1;
		const uint64_t len = ((uint64_t)(e.cdw12 & 0xffffu) + 1) << LBA_SHIFT;
		const uint64_t first = PAGE - (e.prp1 & (PAGE - 1));
		const uint64_t n = relay::validate::div_ceil(len - first, PAGE);
		const uint64_t *l = (const uint64_t *)(uintptr_t)e.prp2;
		if (n == 0 || n > p.list_entries)
			spoil = 1;
		else {
			a = l[0];
			b = l[n - 1];
		}
	}
	return fingerprint(e.opc, e.nsid, e.prp1, a, b, e.cdw10, e.cdw11, e.cdw12, e.cdw13) ^ spoil;
}

// ---------------------------------------------------------------- templates

inline relay::sqe rw(uint8_t opc, uint64_t slba, uint32_t blocks, uint64_t prp1, uint64_t prp2)
{
	relay::sqe s{};
	s.opc = opc;
	s.nsid = 1;
	s.prp1 = prp1;
	s.prp2 = prp2;
	s.cdw10 = (uint32_t)slba;
	s.cdw11 = (uint32_t)(slba >> 32);
	s.cdw12 = blocks - 1;
	// Fields the relay does not pass on: must not reach the controller.
	s.cdw2 = 0xc0ffee;
	s.cdw3 = 0xbeef;
	s.cdw13 = 0xab00 | 0x07; // directive bits dropped, DSM byte kept
	return s;
}

// Accepted: the fingerprint of what the relay must build from s; a list's
// entries are what the client wrote to the pool.
inline Tmpl accepted(const relay::sqe &s, uint64_t a, uint64_t b)
{
	Tmpl t{s, 0, 0};
	switch (s.opc) {
	case relay::validate::FLUSH:
		t.fp = fingerprint(s.opc, s.nsid, 0, 0, 0, 0, 0, 0, 0);
		break;
	case relay::validate::WRITE_ZEROES:
		t.fp = fingerprint(s.opc, s.nsid, 0, 0, 0, s.cdw10, s.cdw11, s.cdw12, 0);
		break;
	default:
		t.fp = fingerprint(s.opc, s.nsid, s.prp1, a, b, s.cdw10, s.cdw11, s.cdw12, s.cdw13 & 0xff);
	}
	return t;
}

inline Tmpl rejected(const relay::sqe &s, Reject why)
{
	return Tmpl{s, relay::validate::status(why), 0};
}

// A list of `entries` owned pages written at pool page `pool_page`.
inline Tmpl list_read(Pair &p, uint32_t pi, bool frag, uint64_t slba, uint32_t first_page,
		      uint32_t entries, uint32_t pool_page)
{
	uint64_t *l = p.pool + (size_t)pool_page * (PAGE / 8);
	for (uint32_t i = 0; i < entries; i++)
		l[i] = page_addr(pi, (first_page + 1 + i) % PAGES_PER_PAIR, frag);
	const uint64_t pool_dma = (uint64_t)(uintptr_t)p.pool;
	relay::sqe s = rw(relay::validate::READ, slba, (entries + 1) * (uint32_t)(PAGE >> LBA_SHIFT),
			  page_addr(pi, first_page, frag), pool_dma + (uint64_t)pool_page * PAGE);
	return accepted(s, l[0], l[entries - 1]);
}

inline bool make_templates(Pair &p, uint32_t pi, const char *mix, bool frag)
{
	using namespace relay::validate;
	const uint32_t pool_pages = (uint32_t)(p.list_bytes / PAGE);
	auto pg = [&](uint32_t k) { return page_addr(pi, k % PAGES_PER_PAIR, frag); };
	const uint64_t base = (uint64_t)pi * 1000000;
	p.tmpl.clear();
	if (!strcmp(mix, "read4k")) {
		for (uint32_t k = 0; k < 16; k++)
			p.tmpl.push_back(accepted(rw(READ, base + k * 8, 8, pg(k), 0), 0, 0));
	} else if (!strcmp(mix, "read8k_prp2")) {
		for (uint32_t k = 0; k < 16; k++)
			p.tmpl.push_back(accepted(rw(READ, base + k * 16, 16, pg(2 * k), pg(2 * k + 1)), pg(2 * k + 1), 0));
	} else if (!strcmp(mix, "read128k_list")) {
		for (uint32_t k = 0; k < 16 && k < pool_pages; k++)
			p.tmpl.push_back(list_read(p, pi, frag, base + k * 256, 2 * k, 31, k));
	} else if (!strcmp(mix, "mixed")) {
		// 20 commands: 13 4 KiB reads, 2 8 KiB writes, a 64 KiB and a
		// 128 KiB list read, a flush, a write zeroes and one rejected
		// command (a foreign page, a bad opcode or an LBA out of range,
		// depending on the pair).
		for (uint32_t k = 0; k < 13; k++)
			p.tmpl.push_back(accepted(rw(READ, base + k * 8, 8, pg(k), 0), 0, 0));
		for (uint32_t k = 0; k < 2; k++)
			p.tmpl.push_back(accepted(rw(WRITE, base + 200 + k * 16, 16, pg(20 + 2 * k), pg(21 + 2 * k)), pg(21 + 2 * k), 0));
		if (pool_pages < 2)
			return false;
		p.tmpl.push_back(list_read(p, pi, frag, base + 400, 30, 15, 0));
		p.tmpl.push_back(list_read(p, pi, frag, base + 600, 40, 31, 1));
		relay::sqe f{};
		f.opc = FLUSH;
		f.nsid = 1;
		f.prp1 = 0x1234; // ignored for a flush
		p.tmpl.push_back(accepted(f, 0, 0));
		relay::sqe wz = rw(WRITE_ZEROES, base + 800, 64, 0, 0);
		wz.cdw12 |= 1u << 25; // DEAC
		p.tmpl.push_back(accepted(wz, 0, 0));
		switch (pi % 3) {
		case 0:
			p.tmpl.push_back(rejected(rw(READ, base, 8, foreign_addr(pi), 0), Reject::Field));
			break;
		case 1: {
			relay::sqe bad = rw(READ, base, 8, pg(0), 0);
			bad.opc = 0x05; // compare? no: not on the allow-list
			p.tmpl.push_back(rejected(bad, Reject::Opcode));
			break;
		}
		default:
			p.tmpl.push_back(rejected(rw(READ, NS_BLOCKS - 4, 8, pg(0), 0), Reject::LbaRange));
		}
	} else {
		return false;
	}
	return !p.tmpl.empty();
}

// ------------------------------------------------------------------ parties

// The file: reap and check the CQ mirror, then top the shadow SQ up to
// depth-1 outstanding (the library's flow control).
inline void client(Pair &p)
{
	const uint32_t D = p.depth;
	uint32_t n = 0;
	for (;;) {
		const uint32_t *w = (const uint32_t *)&p.shadow_cq[p.c_head];
		const uint32_t dw3 = __atomic_load_n(&w[3], __ATOMIC_ACQUIRE);
		if (((dw3 >> 16) & 1u) != p.c_phase)
			break;
		const uint32_t dw0 = __atomic_load_n(&w[0], __ATOMIC_RELAXED);
		const uint32_t dw2 = __atomic_load_n(&w[2], __ATOMIC_RELAXED);
		const uint16_t cid = (uint16_t)dw3, sf = (uint16_t)((dw3 >> 16) & ~1u);
		int32_t &k = p.exp[cid & (EXP_WINDOW - 1)];
		if (k < 0 || (uint16_t)(dw2 >> 16) != p.qid) {
			p.c_bad++;
		} else {
			const Tmpl &t = p.tmpl[(size_t)k];
			if (sf != t.status || (t.status == 0 && dw0 != t.fp))
				p.c_bad++;
			k = -1;
		}
		if (++p.c_head == D) {
			p.c_head = 0;
			p.c_phase ^= 1;
		}
		p.c_out--;
		p.c_reaped++;
		n++;
	}
	if (n)
		__atomic_store_n((uint32_t *)(p.cells + relay::SHADOW_CQ_HEAD), p.c_head, __ATOMIC_RELEASE);
	if (!p.c_submit)
		return;
	n = 0;
	while (p.c_out < D - 1) {
		relay::sqe s = p.tmpl[p.c_next].s;
		s.cid = p.c_seq;
		p.exp[p.c_seq & (EXP_WINDOW - 1)] = (int32_t)p.c_next;
		p.shadow_sq[p.c_tail] = s;
		if (++p.c_next == p.tmpl.size())
			p.c_next = 0;
		p.c_seq++;
		p.c_tail = p.c_tail + 1 == D ? 0 : p.c_tail + 1;
		p.c_out++;
		p.c_sub++;
		n++;
	}
	if (n)
		__atomic_store_n((uint32_t *)(p.cells + relay::SHADOW_SQ_TAIL), p.c_tail, __ATOMIC_RELEASE);
}

// The controller: completes everything the doorbell exposes, at once.
inline void controller(Pair &p)
{
	const uint32_t D = p.depth;
	const uint32_t db = swnvme::ld_acquire(&p.db->sq_tail_db);
	if (db >= D)
		return;
	while (p.d_head != db) {
		const uint32_t head = swnvme::ld_acquire(&p.db->cq_head_db);
		if ((p.d_tail + 1) % D == head) {
			p.d_full++;
			break;
		}
		relay::sqe e;
		memcpy(&e, (const void *)&p.real_sq[p.d_head], sizeof(e));
		p.d_head = p.d_head + 1 == D ? 0 : p.d_head + 1;
		volatile uint32_t *c = (volatile uint32_t *)&p.real_cq[p.d_tail];
		c[0] = controller_fp(p, e);
		c[1] = 0;
		c[2] = p.d_head | (uint32_t)p.qid << 16;
		swnvme::st_release(&c[3], e.cid | p.d_phase << 16);
		if (++p.d_tail == D) {
			p.d_tail = 0;
			p.d_phase ^= 1;
		}
		p.d_cmds++;
	}
}

// ------------------------------------------------------------------ the run

struct World {
	relay::Buffers buffers;
	relay::validate::Limits limits;
	std::vector<std::unique_ptr<Pair>> pairs;
};

// One pair's memory, relay and port, as rust/queues/qpair.rs sizes them: the PRP
// pool and the kernel lists are each depth * list_entries * 8 bytes,
// list_entries a power of two (pool_pages_min raises the pool's size).
inline void init_pair(Pair &p, uint16_t qid, uint32_t depth, const relay::Buffers *buffers,
		      const relay::validate::Limits *limits, size_t pool_pages_min = 0)
{
	using namespace relay::validate;
	const size_t le = pair_list_entries(limits->max_transfer);
	const size_t lb = pair_list_bytes(depth, le);
	const size_t pb = std::max(lb, pool_pages_min * PAGE);
	p.depth = depth;
	p.qid = qid;
	p.shadow_sq = p.alloc<relay::sqe>(depth * sizeof(relay::sqe));
	p.real_sq = p.alloc<relay::sqe>(depth * sizeof(relay::sqe));
	p.shadow_cq = p.alloc<relay::cqe>(depth * sizeof(relay::cqe));
	p.real_cq = p.alloc<relay::cqe>(depth * sizeof(relay::cqe));
	p.cells = p.alloc<uint8_t>(PAGE);
	p.db = p.alloc<swnvme::regs>(sizeof(swnvme::regs));
	p.pool = p.alloc<uint64_t>(pb);
	p.lists = p.alloc<uint64_t>(lb);
	p.list_entries = le;
	p.list_bytes = lb;
	p.exp.assign(EXP_WINDOW, -1);
	p.relay = std::make_unique<relay::Relay>(qid, depth);
	relay::PairPort &pp = p.port;
	pp.real_sq = p.real_sq;
	pp.real_cq = p.real_cq;
	pp.cells = p.cells;
	pp.shadow_sq = p.shadow_sq;
	pp.shadow_cq = p.shadow_cq;
	pp.pool = (const uint8_t *)p.pool;
	pp.pool_dma = (uint64_t)(uintptr_t)p.pool;
	pp.pool_bytes = pb;
	pp.lists = p.lists;
	pp.lists_dma = (uint64_t)(uintptr_t)p.lists;
	pp.list_entries = le;
	pp.real_db = p.db;
	pp.buffers = buffers;
	pp.limits = limits;
	pp.qid = qid;
}

inline bool setup(World &w, const Config &c)
{
	using namespace relay::validate;
	w.limits.ns = {Ns{1, LBA_SHIFT, NS_BLOCKS}};
	w.limits.max_transfer = shared_max_transfer(0);
	if (c.depth < 2 || c.depth > EXP_WINDOW)
		return false;
	for (uint32_t i = 0; i < c.pairs; i++) {
		// The file maps each pair's buffer as one mapping (handle i+1).
		std::vector<uint64_t> pages;
		for (uint32_t k = 0; k < PAGES_PER_PAIR; k++)
			pages.push_back(page_addr(i, k, c.fragmented));
		w.buffers.add(i + 1, pages.data(), pages.size());
		auto p = std::make_unique<Pair>();
		init_pair(*p, (uint16_t)(i + 1), c.depth, &w.buffers, &w.limits);
		if (!make_templates(*p, i, c.mix, c.fragmented))
			return false;
		w.pairs.push_back(std::move(p));
	}
	return true;
}

inline void pin_to(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t s;
	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
}

inline Result run(const Config &c)
{
	Result r;
	r.cfg = c;
	World w;
	if (!setup(w, c)) {
		r.check_failures = 1;
		return r;
	}
	r.buffer_ranges = w.buffers.ranges();
	std::vector<relay::PairCtx> ctx;
	for (auto &p : w.pairs)
		ctx.push_back({p->relay.get(), &p->port, &p->ctr, 0});
	std::mutex lock; // the pool thread's lock
	const uint64_t dur = (uint64_t)(c.seconds * 1e9);

	if (!c.cross) {
		const uint64_t t0 = relay::ktime_get_ns();
		uint64_t now = t0;
		while (now - t0 < dur) {
			{
				std::lock_guard<std::mutex> g(lock);
				for (size_t i = 0; i < w.pairs.size(); i++) {
					Pair &p = *w.pairs[i];
					client(p);
					const uint64_t s = relay::ktime_get_ns();
					ctx[i].idle_steps += !p.relay->step(p.port, p.ctr);
					p.ctr.relay_ns += relay::ktime_get_ns() - s;
					controller(p);
				}
			}
			now = relay::ktime_get_ns();
		}
		r.wall_ns = now - t0;
	} else {
		std::atomic<bool> stop{false}, clients_stop{false};
		const uint32_t C = std::max<uint32_t>(1, c.client_threads);
		const uint32_t R = std::max<uint32_t>(1, std::min<uint32_t>(c.relay_threads, c.pairs));
		auto cpu = [&](size_t i) { return i < c.cpus.size() ? c.cpus[i] : -1; };
		// Each relay thread its pairs and its lock (bridge_thread.c).
		std::vector<std::vector<relay::PairCtx>> tctx(R);
		for (size_t i = 0; i < ctx.size(); i++)
			tctx[i % R].push_back(ctx[i]);
		std::vector<std::mutex> locks(R);
		std::vector<uint64_t> rt0(R), rt1(R);
		std::vector<std::thread> rts;
		for (uint32_t t = 0; t < R; t++)
			rts.emplace_back([&, t] {
				pin_to(cpu(t));
				rt0[t] = relay::ktime_get_ns();
				relay::relay_thread_loop(tctx[t], locks[t], stop);
				rt1[t] = relay::ktime_get_ns();
			});
		std::vector<std::thread> cl;
		for (uint32_t t = 0; t < C; t++)
			cl.emplace_back([&, t] {
				pin_to(cpu(R + t));
				while (!clients_stop.load(std::memory_order_relaxed))
					for (size_t i = t; i < w.pairs.size(); i += C) {
						client(*w.pairs[i]);
						controller(*w.pairs[i]);
					}
			});
		usleep((useconds_t)(c.seconds * 1e6));
		stop = true;
		for (auto &t : rts)
			t.join();
		clients_stop = true;
		for (auto &t : cl)
			t.join();
		r.wall_ns = *std::max_element(rt1.begin(), rt1.end()) - *std::min_element(rt0.begin(), rt0.end());
		// The threads' idle-step counts are in their copies of the contexts.
		for (size_t i = 0; i < ctx.size(); i++)
			ctx[i].idle_steps = tctx[i % R][i / R].idle_steps;
	}

	// Totals of the timed window, then drain single-threaded and check.
	for (size_t i = 0; i < w.pairs.size(); i++) {
		const Pair &p = *w.pairs[i];
		r.accepted += p.ctr.sqes_accepted;
		r.rejected += p.ctr.sqes_rejected;
		r.relay_ns += p.ctr.relay_ns;
		r.polls += p.ctr.polls;
		r.idle_steps += ctx[i].idle_steps;
		r.sq_doorbell_writes += p.ctr.sq_doorbell_writes;
		r.cq_doorbell_writes += p.ctr.cq_doorbell_writes;
	}
	r.cmds = r.accepted + r.rejected;
	r.rejected_in_window = r.rejected;
	for (auto &p : w.pairs)
		p->c_submit = false;
	bool busy = true;
	for (int it = 0; it < 10000 && busy; it++) {
		busy = false;
		for (auto &pp : w.pairs) {
			Pair &p = *pp;
			client(p);
			p.relay->step(p.port, p.ctr);
			controller(p);
			busy |= p.c_out != 0;
		}
	}
	r.drained = !busy;
	uint64_t acc = 0, rej = 0;
	for (auto &pp : w.pairs) {
		const Pair &p = *pp;
		acc += p.ctr.sqes_accepted;
		rej += p.ctr.sqes_rejected;
		r.submitted += p.c_sub;
		r.reaped += p.c_reaped;
		r.check_failures += p.c_bad + (p.relay->in_flight() != 0) + p.ctr.bad_doorbell_values;
		r.controller_cmds += p.d_cmds;
		r.controller_cq_full += p.d_full;
	}
	r.accepted = acc; // totals including the drain, for ok()
	r.rejected = rej;
	return r;
}

inline std::string json(const Result &r)
{
	char b[1536];
	snprintf(b, sizeof(b),
		 "{\"mix\": \"%s\", \"ranges\": \"%s\", \"buffer_ranges\": %zu, \"mode\": \"%s\", "
		 "\"pairs\": %u, \"depth\": %u, \"client_threads\": %u, \"relay_threads\": %u, \"seconds\": %.3f, "
		 "\"cmds\": %llu, \"rejected\": %llu, \"accepted_total\": %llu, \"rejected_total\": %llu, "
		 "\"relay_ns\": %llu, \"wall_ns\": %llu, "
		 "\"cmds_per_s_relay_time\": %.0f, \"cmds_per_s_wall\": %.0f, \"ns_per_cmd_relay_time\": %.2f, "
		 "\"polls\": %llu, \"idle_steps\": %llu, \"sq_doorbell_writes\": %llu, \"cq_doorbell_writes\": %llu, "
		 "\"controller_cmds\": %llu, \"controller_cq_full\": %llu, \"submitted\": %llu, \"reaped\": %llu, "
		 "\"check_failures\": %llu, \"drained\": %s, \"ok\": %s}",
		 r.cfg.mix, r.cfg.fragmented ? "fragmented" : "contiguous", r.buffer_ranges,
		 r.cfg.cross ? "cross" : "single", r.cfg.pairs, r.cfg.depth,
		 r.cfg.cross ? r.cfg.client_threads : 0, r.cfg.cross ? r.cfg.relay_threads : 1, r.cfg.seconds,
		 (unsigned long long)r.cmds, (unsigned long long)r.rejected_in_window,
		 (unsigned long long)r.accepted, (unsigned long long)r.rejected,
		 (unsigned long long)r.relay_ns, (unsigned long long)r.wall_ns, r.per_s_relay(),
		 r.per_s_wall(), r.cmds ? (double)r.relay_ns / r.cmds : 0.0,
		 (unsigned long long)r.polls, (unsigned long long)r.idle_steps,
		 (unsigned long long)r.sq_doorbell_writes, (unsigned long long)r.cq_doorbell_writes,
		 (unsigned long long)r.controller_cmds, (unsigned long long)r.controller_cq_full,
		 (unsigned long long)r.submitted, (unsigned long long)r.reaped,
		 (unsigned long long)r.check_failures, r.drained ? "true" : "false", r.ok() ? "true" : "false");
	return b;
}

inline void print(const Result &r)
{
	printf("RELAY %-13s %-10s %-6s %u relay(s) %2u pairs x %2u: %6.2f M cmds/s of relay time (%5.1f ns/cmd), "
	       "%6.2f M/s wall; %llu cmds (%llu rejected), %llu idle steps, checks %s\n",
	       r.cfg.mix, r.cfg.fragmented ? "fragmented" : "contiguous", r.cfg.cross ? "cross" : "single",
	       r.cfg.cross ? r.cfg.relay_threads : 1, r.cfg.pairs, r.cfg.depth, r.per_s_relay() / 1e6, r.cmds ? (double)r.relay_ns / r.cmds : 0.0,
	       r.per_s_wall() / 1e6, (unsigned long long)r.cmds, (unsigned long long)r.rejected_in_window,
	       (unsigned long long)r.idle_steps, r.ok() ? "ok" : "FAILED");
	fflush(stdout);
}

// The standard set: every mix, both buffer layouts, both modes.
inline std::vector<Config> standard(double seconds, uint32_t client_threads, const std::vector<int> &cpus)
{
	std::vector<Config> v;
	for (bool cross : {false, true})
		for (const char *mix : {"read4k", "read8k_prp2", "read128k_list", "mixed"})
			for (bool frag : {false, true}) {
				Config c;
				c.mix = mix;
				c.fragmented = frag;
				c.cross = cross;
				c.seconds = seconds;
				c.client_threads = client_threads;
				c.cpus = cpus;
				v.push_back(c);
			}
	return v;
}

// The scaling set: read4k and mixed, contiguous, cross mode, 1, 2 and 4
// relay threads, each alone on one of `relay_cpus`, against the same
// clients on the same `client_cpus` in every run.
inline std::vector<Config> scaling(double seconds, const std::vector<int> &relay_cpus,
				   const std::vector<int> &client_cpus)
{
	std::vector<Config> v;
	for (const char *mix : {"read4k", "mixed"})
		for (uint32_t r : {1u, 2u, 4u}) {
			Config c;
			c.mix = mix;
			c.cross = true;
			c.relay_threads = r;
			c.seconds = seconds;
			c.client_threads = (uint32_t)client_cpus.size();
			c.cpus.assign(relay_cpus.begin(), relay_cpus.begin() + std::min<size_t>(r, relay_cpus.size()));
			c.cpus.insert(c.cpus.end(), client_cpus.begin(), client_cpus.end());
			v.push_back(c);
		}
	return v;
}

} // namespace mb

#endif // GPUNVME_BENCH_RELAY_MICROBENCH_H
