// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_wave.h - host threads as the lanes of ONE AMD wavefront, for the
// device library compiled as host C++ (tests/host_pqueue_test.cpp).
//
// What it models: the lanes of a wave move together at every wave
// collective (wave.h: ballot, broadcast), where exactly the active lanes
// take part, and at the points where the kernel's code reconverges
// (reconverge(): a loop or branch the whole wave leaves at once; a lane
// that is done waits there, masked, doing nothing). Which lanes exist is
// a 64-bit lane mask: only those run (a lane outside it is off for the
// whole launch, as an exec mask would have it), each with its real lane
// index, so leaders and ranks are what the hardware would compute.
// branch(cond, fn): the lanes with cond run fn as the active set (its
// collectives are among them only), the others wait, then all go on.
// A lane whose function returns has left the wave.
//
// Between collectives the lanes run freely (host threads), which a wave
// cannot do, but no library result depends on that: lanes of one wave
// interact only through memory and the collectives.
//
// Fail fast, never hang: a collective that not every active lane reaches
// within the limit breaks the wave (every later collective returns at
// once: ballot 0, the lane's own value), and a mismatch (lanes in
// different collectives) is recorded; run() says so.

#ifndef GPUNVME_HOST_WAVE_H
#define GPUNVME_HOST_WAVE_H

#include <gpunvme/wave.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hostwave {

using steady = std::chrono::steady_clock;

class wave {
public:
	explicit wave(uint64_t mask, std::chrono::milliseconds limit = std::chrono::milliseconds(20000))
		: limit_(limit)
	{
		active_.push_back(mask);
	}

	// Run fn(lane) on one thread per lane of the mask; true when the wave
	// never broke and its lanes never disagreed on a collective.
	bool run(const std::function<void(uint32_t)> &fn)
	{
		std::vector<std::thread> t;
		const uint64_t mask = active_[0];
		for (uint32_t l = 0; l < 64; l++) {
			if (!((mask >> l) & 1u))
				continue;
			t.emplace_back([this, l, &fn] {
				static const gpunvme::host_wave_ops ops = {ballot_hook, bcast_hook};
				gpunvme::host_wave = &ops;
				gpunvme::host_wave_ctx = this;
				gpunvme::host_wave_lane = l;
				fn(l);
				leave(l);
				gpunvme::host_wave = nullptr;
			});
		}
		for (auto &x : t)
			x.join();
		std::lock_guard<std::mutex> g(m_);
		return !broken_ && !mismatch_;
	}

	uint64_t ballot(uint32_t lane, bool p) { return collect(lane, BALLOT, p, 0); }
	uint64_t bcast(uint32_t lane, uint64_t v, uint32_t src) { return collect(lane, BCAST, v, src); }
	// The wave's code reconverges here: every active lane arrives first.
	void reconverge(uint32_t lane) { collect(lane, SYNC, 0, 0); }

	// The lanes with cond run fn as the active set, the others wait.
	void branch(uint32_t lane, bool cond, const std::function<void()> &fn)
	{
		const uint64_t m = collect(lane, BRANCH, cond, 0);
		if (cond) {
			fn();
			std::unique_lock<std::mutex> l(m_);
			if (++joined_ == (uint32_t)__builtin_popcountll(m) && active_.size() > 1) {
				active_.pop_back();
				joined_ = 0;
				level_gen_++;
				cv_.notify_all();
			}
		}
		std::unique_lock<std::mutex> l(m_);
		// Wait until the branch's lanes have all joined (the level popped).
		if (!cv_.wait_until(l, steady::now() + limit_, [&] {
			    return broken_ || active_.size() == 1 || level_gen_ != branch_gen_;
		    }))
			broken_ = true;
		cv_.notify_all();
	}

	bool broken()
	{
		std::lock_guard<std::mutex> g(m_);
		return broken_;
	}

private:
	enum kind { BALLOT, BCAST, SYNC, BRANCH };

	static uint64_t ballot_hook(void *ctx, uint32_t lane, bool p)
	{
		return static_cast<wave *>(ctx)->ballot(lane, p);
	}
	static uint64_t bcast_hook(void *ctx, uint32_t lane, uint64_t v, uint32_t src)
	{
		return static_cast<wave *>(ctx)->bcast(lane, v, src);
	}

	// Every lane of the active set arrives; the last one computes the
	// result for all (kept until the next collective completes, which
	// needs every reader to arrive there first).
	uint64_t collect(uint32_t lane, kind k, uint64_t v, uint32_t src)
	{
		std::unique_lock<std::mutex> l(m_);
		if (broken_)
			return k == BALLOT || k == BRANCH ? 0 : v;
		if (arrived_ == 0)
			kind_ = k;
		else if (kind_ != k)
			mismatch_ = true;
		val_[lane] = v;
		arrived_ |= 1ull << lane;
		const uint64_t gen = gen_;
		complete_if_all();
		if (!cv_.wait_until(l, steady::now() + limit_, [&] { return gen_ != gen || broken_; })) {
			broken_ = true;
			cv_.notify_all();
		}
		if (broken_ && gen_ == gen)
			return k == BALLOT || k == BRANCH ? 0 : v;
		return k == BCAST ? res_val_[src] : res_mask_;
	}

	void complete_if_all()
	{
		const uint64_t act = active_.back();
		if (arrived_ == 0 || (arrived_ & act) != act)
			return;
		uint64_t m = 0;
		for (uint32_t i = 0; i < 64; i++)
			if ((act >> i) & 1u) {
				res_val_[i] = val_[i];
				if (val_[i])
					m |= 1ull << i;
			}
		res_mask_ = m;
		if (kind_ == BRANCH) {
			if (m) {
				active_.push_back(m);
				joined_ = 0;
				branch_gen_ = level_gen_;
			} else {
				branch_gen_ = level_gen_ - 1; // nobody branches: nothing to wait for
			}
		}
		arrived_ = 0;
		gen_++;
		cv_.notify_all();
	}

	void leave(uint32_t lane)
	{
		std::lock_guard<std::mutex> g(m_);
		for (auto &a : active_)
			a &= ~(1ull << lane);
		arrived_ &= ~(1ull << lane);
		complete_if_all();
		cv_.notify_all();
	}

	const std::chrono::milliseconds limit_;
	std::mutex m_;
	std::condition_variable cv_;
	std::vector<uint64_t> active_; // stack: the launch mask, then branches
	uint64_t arrived_ = 0, gen_ = 0, res_mask_ = 0;
	uint64_t val_[64] = {}, res_val_[64] = {};
	uint32_t joined_ = 0;
	uint64_t level_gen_ = 0, branch_gen_ = 0;
	kind kind_ = SYNC;
	bool broken_ = false, mismatch_ = false;
};

} // namespace hostwave

#endif // GPUNVME_HOST_WAVE_H
