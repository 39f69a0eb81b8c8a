// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// host_group.h - N host threads as one gpunvme workgroup, for the device
// library compiled as host C++ (kernels/hostrun, kernels/tests).
//
// Each thread gets its lane identity in the library's thread_locals
// (host_lane_id, host_group_id, host_group_size) and the group's barrier as
// gpunvme::host_barrier, so sync_lanes() is a real barrier and the code a
// GPU runs (group_submit()/group_reap(), the example kernels) runs
// unchanged with many lanes.
//
// Fail fast, never hang: a barrier wait gives up after a deadline and then
// breaks the barrier for good (every later wait returns at once, so the
// lanes run out through the library's own bounded waits), and the launcher
// waits for its threads with a deadline too; if they are still running past
// it, nothing sensible is left to do and the process exits ("Bail out!").

#ifndef GPUNVME_HOST_GROUP_H
#define GPUNVME_HOST_GROUP_H

#include <gpunvme/compat.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

namespace hostgroup {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// A reusable (generation-counted) barrier for `lanes` threads. The mutex
// gives sync_lanes() its release/acquire: everything a lane wrote before
// the barrier is visible to every lane after it.
class barrier {
public:
	barrier(uint32_t lanes, milliseconds limit) : lanes_(lanes), limit_(limit) {}

	// true: all lanes arrived. false: the deadline passed (this wait's or
	// another lane's), and the barrier is broken from then on.
	bool wait()
	{
		std::unique_lock<std::mutex> l(m_);
		if (broken_)
			return false;
		const uint64_t gen = gen_;
		if (++arrived_ == lanes_) {
			arrived_ = 0;
			gen_++;
			cv_.notify_all();
			return true;
		}
		if (cv_.wait_until(l, steady::now() + limit_,
				   [&] { return gen_ != gen || broken_; }))
			return gen_ != gen;
		broken_ = true;
		cv_.notify_all();
		return false;
	}

	bool broken()
	{
		std::lock_guard<std::mutex> l(m_);
		return broken_;
	}

	// Completed barriers so far (every lane passed them).
	uint64_t generations()
	{
		std::lock_guard<std::mutex> l(m_);
		return gen_;
	}

	// What gpunvme::host_barrier points at; ctx is the barrier.
	static void hook(void *ctx) { static_cast<barrier *>(ctx)->wait(); }

private:
	std::mutex m_;
	std::condition_variable cv_;
	const uint32_t lanes_;
	const milliseconds limit_;
	uint32_t arrived_ = 0;
	uint64_t gen_ = 0;
	bool broken_ = false;
};

// Limits for one group run. barrier: the longest a lane may wait at
// sync_lanes() for the others; it must exceed the longest wait the code
// does between two barriers (a cq_wait(): at most clock.h's cap, 2 s).
// run: the whole group, start to last thread done.
struct limits {
	milliseconds barrier{20000};
	milliseconds run{120000};
};

// Run fn(lane) on `lanes` threads forming workgroup `gid` (lane_id(),
// group_id(), group_size(), sync_lanes() all as a GPU lane sees them).
// Returns false when the group's barrier broke (a lane never arrived).
template <typename F>
bool run_group(uint32_t gid, uint32_t lanes, F fn, limits lim = limits())
{
	struct state {
		std::mutex m;
		std::condition_variable cv;
		uint32_t done = 0;
	};
	auto st = std::make_shared<state>();
	barrier bar(lanes, lim.barrier);
	std::vector<std::thread> t;
	t.reserve(lanes);
	for (uint32_t i = 0; i < lanes; i++)
		t.emplace_back([&, i, st] {
			gpunvme::host_lane_id = i;
			gpunvme::host_group_id = gid;
			gpunvme::host_group_size = lanes;
			gpunvme::host_barrier_ctx = &bar;
			gpunvme::host_barrier = barrier::hook;
			fn(i);
			gpunvme::host_barrier = nullptr;
			gpunvme::host_barrier_ctx = nullptr;
			std::lock_guard<std::mutex> l(st->m);
			st->done++;
			st->cv.notify_all();
		});
	{
		std::unique_lock<std::mutex> l(st->m);
		if (!st->cv.wait_until(l, steady::now() + lim.run,
				       [&] { return st->done == lanes; })) {
			// Lanes still running hold references into this frame:
			// neither joining nor returning is safe.
			std::printf("Bail out! group %u: %u of %u lanes still running after %lld ms\n",
				    gid, lanes - st->done, lanes,
				    (long long)lim.run.count());
			std::fflush(stdout);
			_exit(1);
		}
	}
	for (auto &x : t)
		x.join();
	return !bar.broken();
}

} // namespace hostgroup

#endif // GPUNVME_HOST_GROUP_H
