// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// relay.h - the module's bridge relay as of UAPI v1 (rust/bridge.rs,
// `Relay::step`) ported to host C++ for the bench, rule for rule. UAPI v2's
// shared pairs relay from a shadow SQ and check every SQE before copying it
// into the real SQ; that part is not ported (see gpunvme_bench.cu). The v1
// rules:
//   - a doorbell is rung only when its shadow value changed (and only when
//     it is < depth; an out-of-range value is counted once per distinct
//     value and never forwarded);
//   - every new real CQE (phase == expected) is mirrored whole into the
//     shadow CQ, dwords 0-2 first, a write barrier, the phase dword last;
//   - one Relay lives as long as its queue pair: last_tail/last_head are
//     never reset, so a stale tail is never re-rung.
// The Port is the same six operations as the Rust trait. Here the "real
// doorbells" are the software fixture's doorbell cells, not BAR0 MMIO.
//
// One deliberate difference, in real_cqe(): Rust's read_volatile of a
// 16-byte Cqe does not say in which order the dwords are loaded; against a
// CPU writer (the fixture) that could pair a new phase dword with stale
// dwords 0-2. The port loads the phase dword first (acquire), then 0-2. A
// real controller writes the CQE as one PCIe TLP, so the module is not
// exposed the same way, but the same change there would cost nothing.
#ifndef GPUNVME_BENCH_RELAY_H
#define GPUNVME_BENCH_RELAY_H

#include <gpunvme/nvme.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "sw_nvme_fixture.h"

namespace bridge {

using gpunvme::cqe;

constexpr uint32_t SHADOW_SQ_TAIL = 0;  // byte offsets in the shadow page
constexpr uint32_t SHADOW_CQ_HEAD = 64;

struct Counters {
	uint64_t polls = 0;
	uint64_t sq_doorbell_writes = 0;
	uint64_t cq_doorbell_writes = 0;
	uint64_t cqes_mirrored = 0;
	uint64_t max_sq_tail = 0;
	uint64_t bad_doorbell_values = 0;
};

inline bool cqe_phase(const cqe &c) { return c.sf & 1u; }

// The real memory of one bridged queue pair (host pointers).
struct Port {
	uint8_t *shadow;          // shadow page the GPU rings
	swnvme::regs *real;       // the controller's doorbells
	const cqe *real_cq;       // the controller's CQ
	cqe *shadow_cq;           // what the GPU reaps

	uint32_t shadow_sq_tail() const
	{
		return swnvme::ld_acquire((const volatile uint32_t *)(shadow + SHADOW_SQ_TAIL));
	}
	uint32_t shadow_cq_head() const
	{
		return swnvme::ld_acquire((const volatile uint32_t *)(shadow + SHADOW_CQ_HEAD));
	}
	void ring_sq(uint32_t tail) const { swnvme::st_release(&real->sq_tail_db, tail); }
	void ring_cq(uint32_t head) const { swnvme::st_release(&real->cq_head_db, head); }
	cqe real_cqe(uint32_t slot) const
	{
		const volatile uint32_t *s = (const volatile uint32_t *)&real_cq[slot];
		uint32_t w[4];
		w[3] = swnvme::ld_acquire(&s[3]);
		w[0] = s[0];
		w[1] = s[1];
		w[2] = s[2];
		cqe c;
		__builtin_memcpy(&c, w, sizeof(c));
		return c;
	}
	void mirror_cqe(uint32_t slot, const cqe &c) const
	{
		volatile uint32_t *dst = (volatile uint32_t *)&shadow_cq[slot];
		const uint32_t *src = (const uint32_t *)&c;
		for (int i = 0; i < 3; i++)
			dst[i] = src[i];
		std::atomic_thread_fence(std::memory_order_release); // dma_mb(Write)
		dst[3] = src[3];
	}
};

class Relay {
public:
	explicit Relay(uint32_t depth) : depth_(depth) {}

	// One pass; true when anything moved. Same order as bridge.rs.
	bool step(const Port &port, Counters &c)
	{
		bool progress = false;
		c.polls += 1;

		uint32_t tail = port.shadow_sq_tail();
		if (tail != last_tail_) {
			if (tail < depth_) {
				port.ring_sq(tail);
				last_tail_ = tail;
				c.sq_doorbell_writes += 1;
				c.max_sq_tail = std::max<uint64_t>(c.max_sq_tail, tail);
				progress = true;
			} else if (tail != last_bad_) {
				c.bad_doorbell_values += 1;
				last_bad_ = tail;
			}
		}

		for (;;) {
			cqe e = port.real_cqe(cq_slot_);
			if (cqe_phase(e) != phase_)
				break;
			port.mirror_cqe(cq_slot_, e);
			c.cqes_mirrored += 1;
			cq_slot_ += 1;
			if (cq_slot_ == depth_) {
				cq_slot_ = 0;
				phase_ = !phase_;
			}
			progress = true;
		}

		uint32_t head = port.shadow_cq_head();
		if (head != last_head_ && head < depth_) {
			port.ring_cq(head);
			last_head_ = head;
			c.cq_doorbell_writes += 1;
			progress = true;
		}
		return progress;
	}

private:
	uint32_t depth_;
	uint32_t last_tail_ = 0;
	uint32_t last_head_ = 0;
	uint32_t cq_slot_ = 0;
	bool phase_ = true;
	uint32_t last_bad_ = UINT32_MAX;
};

} // namespace bridge

#endif // GPUNVME_BENCH_RELAY_H
