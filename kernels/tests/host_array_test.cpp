// SPDX-License-Identifier: GPL-2.0 OR MIT
//
// host_array_test.cpp - gpunvme::array<T> (array.h) compiled as plain host
// C++ over 1, 2 and 4 model controllers (host_nvme_model.h), host threads
// as lanes: free threads (as NVIDIA's independent lanes, and hostrun), and
// threads joined into one lockstep 64-lane wave (host_wave.h: AMD's
// schedule, coalescing by the peel, the wave's claim with held tickets).
// The expected data is computed here from the layout's definition, not
// with the library's own mapping. KTAP out.

#include <gpunvme/array.h>
#include <gpunvme/array_host.h>

#include "host_nvme_model.h"
#include "host_wave.h"
#include "ktap.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

using namespace gpunvme;
using steady = std::chrono::steady_clock;

static uint64_t splitmix(uint64_t seed, uint64_t off) // example.h's pattern
{
	uint64_t z = seed + (off >> 3) * 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t ms_since(steady::time_point t0)
{
	return (uint64_t)std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count();
}

struct cfg {
	uint32_t n_ctrl = 1;
	uint32_t layout = ARRAY_STRIPE;
	uint32_t chunk = 1;
	uint32_t page_shift = 12;
	uint32_t frames = 64;
	uint32_t ways = 8;
	uint32_t nqp = 2;
	uint32_t depth = 33;
	uint64_t bytes = 256 * 4096;
	uint64_t timeout_ms = 1000;
	uint32_t lba_bytes = 512;
	uint64_t base_lba = 64;  // the array's first LBA on every controller
	uint64_t ns_extra = 128; // namespace LBAs past what the array needs
	uint64_t seed = 0x5eed;
};

// N model controllers, the frames mapped for each, the cache's
// bookkeeping, and the descriptor.
struct rig {
	cfg c;
	std::vector<std::unique_ptr<nvmemodel::controller>> ctrls;
	std::vector<std::vector<pqueue>> qps;
	std::vector<array_ctrl> actrl;
	uint8_t *frames = nullptr;
	std::vector<uint64_t> frame_dma;
	void *meta = nullptr;
	uint32_t stop = 0;
	array_desc d{};

	uint64_t page_bytes() const { return 1ull << c.page_shift; }
	uint64_t pages() const { return (c.bytes + page_bytes() - 1) / page_bytes(); }
	uint64_t local_pages() const
	{
		if (c.layout == ARRAY_REPLICATE)
			return pages();
		const uint64_t per = (uint64_t)c.chunk * c.n_ctrl;
		return (pages() + per - 1) / per * c.chunk;
	}
	uint64_t lbas_per_page() const { return page_bytes() / c.lba_bytes; }

	explicit rig(const cfg &x) : c(x)
	{
		const uint64_t frame_bytes = (uint64_t)c.frames << c.page_shift;
		frames = (uint8_t *)std::aligned_alloc(4096, frame_bytes);
		std::memset(frames, 0xA5, frame_bytes);
		const uint64_t blocks = c.base_lba + local_pages() * lbas_per_page() + c.ns_extra;
		const uint32_t frame_pages = (uint32_t)(frame_bytes / 4096);
		frame_dma.resize((size_t)c.n_ctrl * frame_pages);
		qps.resize(c.n_ctrl);
		for (uint32_t k = 0; k < c.n_ctrl; k++) {
			ctrls.push_back(std::make_unique<nvmemodel::controller>(k, blocks, c.lba_bytes));
			nvmemodel::controller &m = *ctrls.back();
			const uint64_t seed = c.layout == ARRAY_REPLICATE ? c.seed : c.seed + k;
			m.fill([&](uint64_t o) { return splitmix(seed, o); });
			m.add_window(frames, frame_bytes);
			for (uint32_t p = 0; p < frame_pages; p++)
				frame_dma[(size_t)k * frame_pages + p] = m.dma_of(frames + 4096ull * p);
			const uint32_t stride = 256; // a 64 KiB page: 15 list entries
			for (uint32_t i = 0; i < c.nqp; i++)
				qps[k].push_back(m.add_pair(c.depth, stride, c.timeout_ms, &stop).q);
			array_ctrl a{};
			a.base_lba = c.base_lba;
			a.lbas = local_pages() * lbas_per_page();
			a.nqp = c.nqp;
			a.nsid = 1;
			a.lba_shift = (uint32_t)__builtin_ctz(c.lba_bytes);
			actrl.push_back(a);
		}
		for (uint32_t k = 0; k < c.n_ctrl; k++)
			actrl[k].qps = qps[k].data();
		d.ctrl = actrl.data();
		d.frames = frames;
		d.frame_dma = frame_dma.data();
		d.stop = &stop;
		d.bytes = c.bytes;
		d.timeout_ticks = c.timeout_ms * 1000000ull;
		d.tick_hz = 1000000000ull;
		d.n_ctrl = c.n_ctrl;
		d.layout = c.layout;
		d.chunk_pages = c.chunk;
		d.page_shift = c.page_shift;
		d.n_frames = c.frames;
		d.ways = c.ways;
		d.n_sets = c.frames / c.ways;
		d.frame_pages = frame_pages;
		reset_cache();
		for (auto &m : ctrls)
			m->start();
	}
	~rig()
	{
		for (auto &m : ctrls)
			m->stop();
		std::free(frames);
		std::free(meta);
	}

	// A fresh (empty) cache: new bookkeeping, frames poisoned.
	void reset_cache()
	{
		std::free(meta);
		const uint64_t n = array_meta_bytes(d.n_frames, d.n_sets);
		meta = std::aligned_alloc(64, (n + 63) / 64 * 64);
		std::memset(meta, 0, n);
		array_meta_attach(d, meta);
		std::memset(frames, 0xA5, (uint64_t)c.frames << c.page_shift);
	}

	// Where element byte x lives, by the layout's definition: controller
	// and namespace byte offset (for REPLICATE: on every controller).
	void where(uint64_t x, uint32_t *k, uint64_t *ns_off) const
	{
		const uint64_t p = x / page_bytes(), in = x % page_bytes();
		uint64_t lp = p;
		*k = 0;
		if (c.layout == ARRAY_STRIPE) {
			const uint64_t chunk = p / c.chunk;
			*k = (uint32_t)(chunk % c.n_ctrl);
			lp = chunk / c.n_ctrl * c.chunk + p % c.chunk;
		}
		*ns_off = (c.base_lba + lp * lbas_per_page()) * c.lba_bytes + in;
	}
	uint64_t expect(uint64_t i) const
	{
		uint32_t k;
		uint64_t o;
		where(8 * i, &k, &o);
		return splitmix(c.layout == ARRAY_REPLICATE ? c.seed : c.seed + k, o);
	}
	uint64_t reads() const
	{
		uint64_t n = 0;
		for (auto &m : ctrls)
			n += m->reads;
		return n;
	}
	uint64_t writes() const
	{
		uint64_t n = 0;
		for (auto &m : ctrls)
			n += m->writes;
		return n;
	}
	uint64_t errors() const
	{
		uint64_t n = 0;
		for (auto &m : ctrls)
			n += m->errors + m->violations;
		return n;
	}
	array_stats stats() const { return *d.stats; }
};

// n threads, thread t a lane of "CU" t % groups (its pairs: pq_pick).
static void run_threads(uint32_t n, uint32_t groups, const std::function<void(uint32_t)> &fn)
{
	std::vector<std::thread> t;
	for (uint32_t i = 0; i < n; i++)
		t.emplace_back([&, i] {
			host_group_id = i % groups;
			fn(i);
		});
	for (auto &x : t)
		x.join();
}

struct tally {
	std::atomic<uint64_t> ok{0}, wrong{0}, failed{0};
	std::atomic<int32_t> first{0};
	void note(int32_t rc, bool right)
	{
		if (rc != OK) {
			failed++;
			int32_t z = 0;
			first.compare_exchange_strong(z, rc);
		} else if (right) {
			ok++;
		} else {
			wrong++;
		}
	}
};

// Every element, read by 16 threads on 4 "CUs", against the pattern; the
// cache holds every page, so each page is read from its controller once.
static void test_every_element(uint32_t n_ctrl, uint32_t chunk, uint32_t page_shift,
			       uint32_t layout, const char *name)
{
	cfg c;
	c.n_ctrl = n_ctrl;
	c.chunk = chunk;
	c.layout = layout;
	c.page_shift = page_shift;
	c.bytes = 96ull << page_shift;
	c.frames = 128;
	rig r(c);
	const int32_t chk = array_check(r.d);
	array<uint64_t> a(r.d);
	tally t;
	const uint64_t n = a.size();
	run_threads(16, 4, [&](uint32_t lane) {
		for (uint64_t i = lane; i < n; i += 16) {
			uint64_t v = 0;
			const int32_t rc = a.read(i, &v);
			t.note(rc, v == r.expect(i));
		}
	});
	const array_stats s = r.stats();
	// Each controller read exactly its pages (replicate: p % n_ctrl first).
	uint32_t per_ok = 1;
	for (uint32_t k = 0; k < n_ctrl; k++) {
		uint64_t want = 0;
		for (uint64_t p = 0; p < r.pages(); p++) {
			uint32_t kk;
			uint64_t o;
			r.where(p * r.page_bytes(), &kk, &o);
			want += (layout == ARRAY_REPLICATE ? (uint32_t)(p % n_ctrl) : kk) == k;
		}
		per_ok &= r.ctrls[k]->reads == want;
	}
	char why[240];
	std::snprintf(why, sizeof(why),
		      "check %d; %llu of %llu right, %llu wrong, %llu failed (first %d); loads %llu reads %llu (pages %llu), per-controller counts %s, model errors %llu",
		      chk, (unsigned long long)t.ok.load(), (unsigned long long)n,
		      (unsigned long long)t.wrong.load(), (unsigned long long)t.failed.load(),
		      t.first.load(), (unsigned long long)s.loads, (unsigned long long)r.reads(),
		      (unsigned long long)r.pages(), per_ok ? "right" : "wrong",
		      (unsigned long long)r.errors());
	result(chk == OK && t.ok == n && s.loads == r.pages() && r.reads() == r.pages() && per_ok &&
		       r.errors() == 0 && s.failures == 0,
	       name, why);
}

// A cache much smaller than the working set, under load: 8 threads read
// whole pages (read_range) and single elements at random over 128 pages
// through 8 frames (one set): every value right, pages evicted and read
// again, no failure.
static void test_eviction_under_load()
{
	cfg c;
	c.n_ctrl = 2;
	c.frames = 8;
	c.ways = 8;
	c.bytes = 128 * 4096;
	rig r(c);
	array<uint64_t> a(r.d);
	tally t;
	const uint64_t per = 4096 / 8;
	run_threads(8, 4, [&](uint32_t lane) {
		uint64_t x = 0x9e3779b97f4a7c15ull * (lane + 1);
		std::vector<uint64_t> buf(per);
		for (int k = 0; k < 150; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			const uint64_t p = (x >> 33) % r.pages();
			if (k % 2) {
				const int32_t rc = a.read_range(p * per, per, buf.data());
				bool right = true;
				for (uint64_t e = 0; e < per; e++)
					right &= buf[e] == r.expect(p * per + e);
				t.note(rc, right);
			} else {
				const uint64_t i = p * per + (x >> 20) % per;
				uint64_t v = 0;
				const int32_t rc = a.read(i, &v);
				t.note(rc, v == r.expect(i));
			}
		}
	});
	const array_stats s = r.stats();
	char why[240];
	std::snprintf(why, sizeof(why),
		      "%llu right, %llu wrong, %llu failed (first %d); loads %llu evictions %llu waits %llu noframe %llu; model reads %llu errors %llu",
		      (unsigned long long)t.ok.load(), (unsigned long long)t.wrong.load(),
		      (unsigned long long)t.failed.load(), t.first.load(),
		      (unsigned long long)s.loads, (unsigned long long)s.evictions,
		      (unsigned long long)s.waits, (unsigned long long)s.noframe,
		      (unsigned long long)r.reads(), (unsigned long long)r.errors());
	result(t.ok == 8 * 150 && s.evictions > 0 && s.loads == r.reads() && s.loads > r.pages() / 2 &&
		       r.errors() == 0 && s.failures == 0,
	       "eviction_under_load_8_frames_128_pages_every_value_right", why);
}

// A referenced frame is never evicted: 8 threads each hold a page's frame
// for 2 ms in the middle of reading it (array_op with a slow reader) while
// the others need frames of the same 4-way set; a frame replaced under a
// reader would show another page's words in its second half.
struct slow_reader {
	const rig *r;
	uint64_t page;
	bool *right;
	void operator()(uint8_t *f) const
	{
		const uint64_t *w = (const uint64_t *)f, n = 4096 / 8;
		bool ok = true;
		for (uint64_t e = 0; e < n / 2; e++)
			ok &= w[e] == r->expect(page * n + e);
		std::this_thread::sleep_for(std::chrono::milliseconds(2));
		for (uint64_t e = n / 2; e < n; e++)
			ok &= w[e] == r->expect(page * n + e);
		*right = ok;
	}
};

static void test_referenced_frame_never_evicted()
{
	cfg c;
	c.frames = 4;
	c.ways = 4;
	c.bytes = 32 * 4096;
	rig r(c);
	tally t;
	run_threads(8, 2, [&](uint32_t lane) {
		for (int k = 0; k < 25; k++) {
			const uint64_t p = (lane * 7 + k * 3) % r.pages();
			bool right = false;
			const slow_reader fn = {&r, p, &right};
			const int32_t rc = array_op(r.d, p, true, false, fn);
			t.note(rc, right);
		}
	});
	const array_stats s = r.stats();
	char why[200];
	std::snprintf(why, sizeof(why), "%llu right, %llu wrong, %llu failed (first %d); evictions %llu noframe %llu",
		      (unsigned long long)t.ok.load(), (unsigned long long)t.wrong.load(),
		      (unsigned long long)t.failed.load(), t.first.load(),
		      (unsigned long long)s.evictions, (unsigned long long)s.noframe);
	result(t.ok == 8 * 25 && s.evictions > 0 && s.noframe > 0,
	       "referenced_frame_never_evicted_readers_hold_frames_of_a_full_set", why);
}

// Many lanes on one page while it loads (free threads: no coalescing, the
// set lock makes one of them the loader, the others wait on the frame):
// the controller takes 100 ms per read; 32 threads read 32 elements of one
// page at once: one read command, every value right.
static void test_many_threads_one_page()
{
	cfg c;
	c.n_ctrl = 2;
	rig r(c);
	r.ctrls[1]->read_delay_us = 100000;
	array<uint64_t> a(r.d);
	tally t;
	const uint64_t page = 5; // controller 1
	std::atomic<uint32_t> ready{0};
	run_threads(32, 4, [&](uint32_t lane) {
		ready++;
		while (ready < 32)
			std::this_thread::yield();
		const uint64_t i = page * 512 + lane * 16;
		uint64_t v = 0;
		const int32_t rc = a.read(i, &v);
		t.note(rc, v == r.expect(i));
	});
	const array_stats s = r.stats();
	uint32_t k;
	uint64_t o;
	r.where(page * 4096, &k, &o);
	const uint32_t at = r.ctrls[k]->reads_at[o / 512];
	char why[200];
	std::snprintf(why, sizeof(why), "%llu right, %llu failed (first %d); reads of the page %u (controller %u), loads %llu, waits %llu",
		      (unsigned long long)t.ok.load(), (unsigned long long)t.failed.load(),
		      t.first.load(), at, k, (unsigned long long)s.loads, (unsigned long long)s.waits);
	result(t.ok == 32 && at == 1 && r.reads() == 1 && s.loads == 1 && s.waits > 0,
	       "many_threads_on_one_page_while_it_loads_one_command", why);
}

// The same with the 64 lanes of one lockstep wave: the peel makes them one
// group, so one lane looks up, one command, nobody waits on the frame.
static void test_wave_one_page()
{
	cfg c;
	c.depth = 65;
	rig r(c);
	r.ctrls[0]->read_delay_us = 20000;
	array<uint64_t> a(r.d);
	hostwave::wave w(~0ull);
	int32_t rc[64];
	uint64_t got[64];
	const uint64_t page = 9;
	const bool ran = w.run([&](uint32_t lane) {
		got[lane] = 0;
		rc[lane] = a.read(page * 512 + lane * 8, &got[lane]);
	});
	uint32_t right = 0;
	for (uint32_t l = 0; l < 64; l++)
		right += rc[l] == OK && got[l] == r.expect(page * 512 + l * 8);
	const array_stats s = r.stats();
	char why[160];
	std::snprintf(why, sizeof(why), "wave ok %d; %u of 64 right (lane 0 rc %d); reads %llu, loads %llu, waits %llu",
		      ran, right, rc[0], (unsigned long long)r.reads(), (unsigned long long)s.loads,
		      (unsigned long long)s.waits);
	result(ran && right == 64 && r.reads() == 1 && s.loads == 1 && s.waits == 0,
	       "wave_64_lanes_one_page_one_group_one_command", why);
}

// A lockstep wave over 2 controllers with a cache smaller than one pass's
// pages (16 frames in 2 sets; each pass's 64 lanes want about 40 pages,
// some shared): the wave's loop lets a group's frame go as soon as it is
// served, claims together with held tickets; 12 passes, every value right.
static void test_wave_small_sets()
{
	cfg c;
	c.n_ctrl = 2;
	c.frames = 16;
	c.ways = 8;
	c.depth = 65;
	c.bytes = 256 * 4096;
	rig r(c);
	array<uint64_t> a(r.d);
	hostwave::wave w(~0ull);
	std::atomic<uint32_t> right{0}, bad{0};
	std::atomic<int32_t> first{0};
	const bool ran = w.run([&](uint32_t lane) {
		uint64_t x = 12345 + lane / 2; // pairs of lanes share pages
		for (int k = 0; k < 12; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			const uint64_t i = ((x >> 33) % r.pages()) * 512 + lane % 2;
			uint64_t v = 0;
			const int32_t rc = a.read(i, &v);
			if (rc == OK && v == r.expect(i)) {
				right++;
			} else {
				bad++;
				int32_t z = 0;
				first.compare_exchange_strong(z, rc);
			}
		}
	});
	const array_stats s = r.stats();
	char why[200];
	std::snprintf(why, sizeof(why), "wave ok %d; %u right, %u bad (first %d); loads %llu evictions %llu noframe %llu",
		      ran, right.load(), bad.load(), first.load(), (unsigned long long)s.loads,
		      (unsigned long long)s.evictions, (unsigned long long)s.noframe);
	result(ran && right == 64 * 12 && s.evictions > 0 && r.errors() == 0,
	       "wave_64_lanes_2_controllers_cache_smaller_than_a_pass", why);
}

// The wave's claim serves a wave-mate's live command (AMD's schedule): a
// pair of depth 2 (one command slot); lane 0 has a read in flight there
// (the controller answers after 50 ms), lane 1 must claim the same slot
// for its own read. Both run array_run() as one lockstep wave: lane 1's
// claim can only get the slot once lane 0's completion is taken, and
// lane 0 is in the same claim (it passes its command as held and takes it
// there). Without that, lane 1 would wait for its deadline (1 s).
static void test_wave_claim_serves_a_live_command()
{
	cfg c;
	c.nqp = 1;
	c.depth = 2;
	c.frames = 8;
	rig r(c);
	r.ctrls[0]->read_delay_us = 50000;
	array_job ja, jb;
	const uint64_t pa = 3, pb = 11;
	array_job_start(r.d, ja, pa, true);
	array_job_start(r.d, jb, pb, true);
	// Frames 0 and 1 installed by hand, as array_install() leaves them.
	ja.frame = 0;
	jb.frame = 1;
	r.d.state[0] = (pa + 1) << fstate::TAG_SHIFT | fstate::BUSY | fstate::REF;
	r.d.state[1] = (pb + 1) << fstate::TAG_SHIFT | fstate::BUSY | fstate::REF;
	ja.io_page = pa;
	jb.io_page = pb;
	array_prepare_io(r.d, ja, 0);
	array_prepare_io(r.d, jb, 0);
	array_submitted(r.d, ja, array_submit(r.d, ja, true, nullptr)); // lane 0's, in flight
	const bool a_live = ja.st == AJ_POLL;
	hostwave::wave w(3);
	const auto t0 = steady::now();
	const bool ran = w.run([&](uint32_t lane) { array_run(r.d, lane ? jb : ja); });
	const uint64_t ms = ms_since(t0);
	uint64_t wrong = 0;
	for (uint64_t e = 0; e < 512; e++) {
		wrong += ((uint64_t *)r.frames)[e] != r.expect(pa * 512 + e);
		wrong += ((uint64_t *)(r.frames + 4096))[e] != r.expect(pb * 512 + e);
	}
	char why[200];
	std::snprintf(why, sizeof(why), "lane 0 live before %d; wave ok %d; rc %d / %d in %llu ms; words wrong %llu; states %llx %llx",
		      a_live, ran, ja.rc, jb.rc, (unsigned long long)ms, (unsigned long long)wrong,
		      (unsigned long long)r.d.state[0], (unsigned long long)r.d.state[1]);
	const uint64_t valid_a = (pa + 1) << fstate::TAG_SHIFT | fstate::VALID | fstate::REF;
	const uint64_t valid_b = (pb + 1) << fstate::TAG_SHIFT | fstate::VALID | fstate::REF;
	result(a_live && ran && ja.rc == OK && jb.rc == OK && ms < 700 && wrong == 0 &&
		       r.d.state[0] == valid_a && r.d.state[1] == valid_b,
	       "wave_claim_takes_a_wave_mates_live_command_for_its_slot", why);
}

// Dirty write-back, then read back: 2 controllers (stripe, chunk 2), 8
// frames for 64 pages, 8 threads write every element (so evictions write
// dirty frames back while writes go on), flush (FUA); each controller's
// namespace holds exactly the new words where the layout puts them (and
// the old ones elsewhere); then a fresh cache reads everything back.
static uint64_t new_word(uint64_t i) { return ~splitmix(0xd1d1, 8 * i); }

static void test_write_back(uint32_t layout, const char *name)
{
	cfg c;
	c.n_ctrl = 2;
	c.layout = layout;
	c.chunk = 2;
	c.frames = 8;
	c.bytes = 64 * 4096;
	rig r(c);
	array<uint64_t> a(r.d);
	const uint64_t n = a.size();
	tally wr;
	run_threads(8, 4, [&](uint32_t lane) {
		for (uint64_t i = lane; i < n; i += 8)
			wr.note(a.write(i, new_word(i)), true);
	});
	std::atomic<int32_t> frc{OK};
	run_threads(4, 4, [&](uint32_t lane) {
		const int32_t rc = a.flush(lane, 4, true);
		if (rc != OK)
			frc = rc;
	});
	const array_stats s1 = r.stats();
	// The namespaces, word by word.
	uint64_t ns_wrong = 0;
	for (uint32_t k = 0; k < c.n_ctrl; k++) {
		const nvmemodel::controller &m = *r.ctrls[k];
		const uint64_t seed = layout == ARRAY_REPLICATE ? c.seed : c.seed + k;
		std::vector<uint8_t> mine(m.ns.size() / 8, 0);
		for (uint64_t i = 0; i < n; i++) {
			uint32_t kk;
			uint64_t o;
			r.where(8 * i, &kk, &o);
			if (layout == ARRAY_REPLICATE || kk == k) {
				mine[o / 8] = 1;
				ns_wrong += m.word(o) != new_word(i);
			}
		}
		for (uint64_t o = 0; o < m.ns.size(); o += 8)
			if (!mine[o / 8])
				ns_wrong += m.word(o) != splitmix(seed, o);
	}
	uint64_t dirty_left = 0;
	for (uint32_t f = 0; f < c.frames; f++)
		dirty_left += (r.d.state[f] & (fstate::DIRTY | fstate::WB)) != 0;
	// Read back through a fresh cache.
	r.reset_cache();
	array<uint64_t> b(r.d);
	tally rd;
	run_threads(8, 4, [&](uint32_t lane) {
		for (uint64_t i = lane; i < n; i += 8) {
			uint64_t v = 0;
			const int32_t rc = b.read(i, &v);
			rd.note(rc, v == new_word(i));
		}
	});
	const uint64_t copies = layout == ARRAY_REPLICATE ? c.n_ctrl : 1;
	uint64_t fua = 0;
	for (auto &m : r.ctrls)
		fua += m->fua_writes;
	char why[300];
	std::snprintf(why, sizeof(why),
		      "writes %llu failed (first %d), flush %d; write-backs %llu (model writes %llu, FUA %llu), dirty frames left %llu; namespace words wrong %llu; read back %llu of %llu right, %llu failed (first %d)",
		      (unsigned long long)wr.failed.load(), wr.first.load(), frc.load(),
		      (unsigned long long)s1.writebacks, (unsigned long long)r.writes(),
		      (unsigned long long)fua, (unsigned long long)dirty_left,
		      (unsigned long long)ns_wrong, (unsigned long long)rd.ok.load(),
		      (unsigned long long)n, (unsigned long long)rd.failed.load(), rd.first.load());
	result(wr.failed == 0 && frc == OK && dirty_left == 0 && ns_wrong == 0 && rd.ok == n &&
		       s1.writebacks == r.writes() && r.writes() >= copies * r.pages() && fua > 0 &&
		       r.errors() == 0,
	       name, why);
}

// A controller that stops answering: 2 controllers (stripe), controller 1
// muted, a 200 ms deadline. 8 threads read every page once: controller 0's
// are all right; controller 1's end in errors (ERR_TIMEOUT for the first
// of each pair, then ERR_IO: poisoned), each within the bound, and the
// frames those commands may still write are retired; then controller 0's
// pages are read again (the cache still works for the healthy one).
static void test_dead_controller()
{
	cfg c;
	c.n_ctrl = 2;
	c.timeout_ms = 200;
	c.frames = 32;
	c.bytes = 32 * 4096;
	rig r(c);
	r.ctrls[1]->mute = true;
	array<uint64_t> a(r.d);
	tally good, dead;
	std::atomic<uint64_t> worst_ms{0};
	std::atomic<uint32_t> timeouts{0}, ios{0};
	auto pass = [&](bool only_healthy) {
		run_threads(8, 2, [&](uint32_t lane) {
			for (uint64_t p = lane; p < r.pages(); p += 8) {
				uint32_t k;
				uint64_t o;
				r.where(p * 4096, &k, &o);
				if (only_healthy && k == 1)
					continue;
				const uint64_t i = p * 512 + 3;
				uint64_t v = 0;
				const auto t0 = steady::now();
				const int32_t rc = a.read(i, &v);
				const uint64_t ms = ms_since(t0);
				uint64_t w = worst_ms;
				while (ms > w && !worst_ms.compare_exchange_weak(w, ms))
					;
				if (k == 0) {
					good.note(rc, v == r.expect(i));
				} else {
					dead.note(rc, false);
					timeouts += rc == ERR_TIMEOUT;
					ios += rc == ERR_IO;
				}
			}
		});
	};
	const auto t0 = steady::now();
	pass(false);
	pass(true);
	const uint64_t total_ms = ms_since(t0);
	const array_stats s = r.stats();
	uint64_t healthy = 0;
	for (uint64_t p = 0; p < r.pages(); p++) {
		uint32_t k;
		uint64_t o;
		r.where(p * 4096, &k, &o);
		healthy += k == 0;
	}
	char why[300];
	std::snprintf(why, sizeof(why),
		      "healthy: %llu of %llu right, %llu failed (first %d); dead: %llu failed (%u ERR_TIMEOUT, %u ERR_IO, first %d); slowest read %llu ms, all %llu ms; frames retired %llu",
		      (unsigned long long)good.ok.load(), (unsigned long long)(2 * healthy),
		      (unsigned long long)good.failed.load(), good.first.load(),
		      (unsigned long long)dead.failed.load(), timeouts.load(), ios.load(),
		      dead.first.load(), (unsigned long long)worst_ms.load(),
		      (unsigned long long)total_ms, (unsigned long long)s.dead);
	// Each wait is bounded: a read waits at most for its claim and its
	// command (2 x 200 ms) or for another lane's load (3 x 200 ms).
	result(good.ok == 2 * healthy && good.failed == 0 && dead.failed == r.pages() - healthy &&
		       timeouts >= 1 && timeouts + ios == dead.failed && worst_ms < 1500 &&
		       s.dead >= timeouts && s.dead <= dead.failed,
	       "controller_that_stops_answering_ends_in_errors_the_other_goes_on", why);
}

// A frame whose command never completed is retired, not reused: the
// controller may still write it. 2 controllers, 16 frames; 4 reads of
// controller 1's pages time out (it is muted), then controller 0's 16
// pages are read through the 12 frames left (evictions), then controller 1
// answers its old commands late (their data lands in the retired frames),
// then controller 0's pages are read again: every value right (a reused
// frame would now hold controller 1's page).
static void test_late_completion_hits_only_retired_frames()
{
	cfg c;
	c.n_ctrl = 2;
	c.timeout_ms = 150;
	c.frames = 16;
	c.bytes = 32 * 4096;
	c.nqp = 1;
	rig r(c);
	r.ctrls[1]->mute = true;
	array<uint64_t> a(r.d);
	std::atomic<uint32_t> dead_fail{0};
	run_threads(4, 1, [&](uint32_t lane) {
		uint64_t v;
		dead_fail += a.read((2 * lane + 1) * 512, &v) != OK; // odd pages: controller 1
	});
	tally t;
	auto healthy_pass = [&] {
		run_threads(4, 1, [&](uint32_t lane) {
			for (uint64_t p = 2 * lane; p < r.pages(); p += 8) {
				const uint64_t i = p * 512 + 5;
				uint64_t v = 0;
				const int32_t rc = a.read(i, &v);
				t.note(rc, v == r.expect(i));
			}
		});
	};
	healthy_pass();
	r.ctrls[1]->mute = false;
	const auto t0 = steady::now();
	while (r.ctrls[1]->reads < 1 && ms_since(t0) < 2000)
		std::this_thread::yield();
	std::this_thread::sleep_for(std::chrono::milliseconds(50));
	healthy_pass();
	uint32_t retired = 0;
	for (uint32_t f = 0; f < c.frames; f++)
		retired += (r.d.state[f] & fstate::DEAD) && fs_tag(r.d.state[f]) == 0;
	const array_stats s = r.stats();
	char why[220];
	std::snprintf(why, sizeof(why), "%u of 4 reads of the mute controller failed; frames retired %u (stats %llu); late reads %llu; healthy %llu of 32 right, %llu failed (first %d)",
		      dead_fail.load(), retired, (unsigned long long)s.dead,
		      (unsigned long long)r.ctrls[1]->reads.load(), (unsigned long long)t.ok.load(),
		      (unsigned long long)t.failed.load(), t.first.load());
	result(dead_fail == 4 && retired >= 1 && retired == s.dead && r.ctrls[1]->reads >= 1 &&
		       t.ok == 32,
	       "frame_of_a_command_without_completion_is_retired_late_data_lands_only_there", why);
}

// Replicated, one replica dead: the first read of a page from it fails
// (ERR_TIMEOUT), after which loads go to the healthy replica: a retry of
// every failed read returns the right value.
static void test_replicate_survives_a_dead_replica()
{
	cfg c;
	c.n_ctrl = 2;
	c.layout = ARRAY_REPLICATE;
	c.timeout_ms = 200;
	c.nqp = 1;
	c.bytes = 32 * 4096;
	rig r(c);
	r.ctrls[1]->mute = true;
	array<uint64_t> a(r.d);
	tally t;
	std::atomic<uint32_t> retried{0};
	run_threads(4, 1, [&](uint32_t lane) {
		for (uint64_t p = lane; p < r.pages(); p += 4) {
			const uint64_t i = p * 512 + 1;
			uint64_t v = 0;
			int32_t rc = a.read(i, &v);
			if (rc != OK) {
				retried++;
				rc = a.read(i, &v);
			}
			t.note(rc, v == r.expect(i));
		}
	});
	char why[160];
	std::snprintf(why, sizeof(why), "%llu of %llu right after at most one retry (%u retried), %llu failed (first %d)",
		      (unsigned long long)t.ok.load(), (unsigned long long)r.pages(), retried.load(),
		      (unsigned long long)t.failed.load(), t.first.load());
	result(t.ok == r.pages() && retried >= 1, "replicate_reads_go_on_from_the_healthy_replica", why);
}

// An NVMe status comes back as the value and nothing is cached: a
// namespace that ends inside the array (LBA Out of Range, SC 0x80, for the
// pages past its end); the frame is reused (not retired), pages before the
// end still read right, and the same failing read fails the same way again.
static void test_nvme_status()
{
	cfg c;
	c.bytes = 32 * 4096;
	c.ns_extra = 0;
	rig r(c);
	// The last 4 pages are past the namespace's end: make it shorter by
	// claiming a larger array on the same controller.
	array_ctrl big = r.actrl[0];
	big.lbas += 8 * r.lbas_per_page();
	r.actrl[0] = big;
	r.d.bytes = c.bytes + 8 * 4096;
	array<uint64_t> a(r.d);
	uint64_t v = 0;
	const int32_t past = a.read((32 + 2) * 512, &v);
	const int32_t again = a.read((32 + 2) * 512 + 1, &v);
	uint64_t right = 0;
	for (uint64_t p = 0; p < 32; p++) {
		uint64_t x = 0;
		right += a.read(p * 512 + 7, &x) == OK && x == r.expect(p * 512 + 7);
	}
	const array_stats s = r.stats();
	char why[200];
	std::snprintf(why, sizeof(why), "read past the end: %d, again %d (want 0x80 both); %llu of 32 pages right; retired %llu, failures %llu",
		      past, again, (unsigned long long)right, (unsigned long long)s.dead,
		      (unsigned long long)s.failures);
	result(past == 0x80 && again == 0x80 && right == 32 && s.dead == 0 && s.failures == 2,
	       "nvme_status_returned_page_not_cached_frame_reused", why);
}

// Bad input gets ERR_INVAL at once, and no command: an index past the end,
// a range that crosses it; array_check() refuses bad descriptors.
static void test_bad_input()
{
	cfg c;
	c.bytes = 8 * 4096;
	rig r(c);
	array<uint64_t> a(r.d);
	uint64_t v = 0, buf[8];
	const auto t0 = steady::now();
	const int32_t r1 = a.read(a.size(), &v);
	const int32_t r2 = a.read_range(a.size() - 4, 8, buf);
	const int32_t r3 = a.write(a.size() + 100, 1);
	const uint64_t ms = ms_since(t0);
	array_desc bad = r.d;
	int checks = array_check(r.d) == OK;
	bad.ways = 3;
	checks += array_check(bad) == ERR_INVAL;
	bad = r.d;
	bad.page_shift = 11;
	checks += array_check(bad) == ERR_INVAL;
	bad = r.d;
	bad.n_sets = 2; // 2 x 8 != 64 frames
	checks += array_check(bad) == ERR_INVAL;
	array_ctrl small = r.actrl[0];
	small.lbas = 1;
	bad = r.d;
	bad.ctrl = &small;
	checks += array_check(bad) == ERR_INVAL;
	char why[160];
	std::snprintf(why, sizeof(why), "read %d, read_range %d, write %d in %llu ms; reads %llu; %d of 5 checks right",
		      r1, r2, r3, (unsigned long long)ms, (unsigned long long)r.reads(), checks);
	result(r1 == ERR_INVAL && r2 == ERR_INVAL && r3 == ERR_INVAL && ms < 50 && r.reads() == 0 &&
		       checks == 5,
	       "bad_index_is_einval_at_once_and_check_refuses_bad_descriptors", why);
}

// read_block(): a page into a buffer of the caller's, mapped for every
// controller, without the cache (no frame used); 16 KiB pages (a PRP list).
static void test_read_block()
{
	cfg c;
	c.n_ctrl = 2;
	c.page_shift = 14;
	c.bytes = 16 << 14;
	rig r(c);
	const uint64_t pb = 1ull << 14, pages4k = 2 * pb / 4096;
	uint8_t *buf = (uint8_t *)std::aligned_alloc(4096, 2 * pb);
	std::memset(buf, 0xA5, 2 * pb);
	std::vector<uint64_t> dma(2 * pages4k);
	for (uint32_t k = 0; k < 2; k++) {
		r.ctrls[k]->add_window(buf, 2 * pb);
		for (uint64_t p = 0; p < pages4k; p++)
			dma[k * pages4k + p] = r.ctrls[k]->dma_of(buf + 4096 * p);
	}
	const array_buf ab = {buf, dma.data(), pages4k};
	array<uint64_t> a(r.d);
	const int32_t r1 = a.read_block(3, ab, 0);  // controller 1
	const int32_t r2 = a.read_block(6, ab, pb); // controller 0
	uint64_t wrong = 0;
	for (uint64_t e = 0; e < pb / 8; e++) {
		wrong += ((uint64_t *)buf)[e] != r.expect(3 * pb / 8 + e);
		wrong += ((uint64_t *)(buf + pb))[e] != r.expect(6 * pb / 8 + e);
	}
	const int32_t r3 = a.read_block(16, ab, 0);
	const array_stats s = r.stats();
	char why[160];
	std::snprintf(why, sizeof(why), "read_block %d %d, words wrong %llu, past the end %d; cache loads %llu, model reads %llu",
		      r1, r2, (unsigned long long)wrong, r3, (unsigned long long)s.loads,
		      (unsigned long long)r.reads());
	result(r1 == OK && r2 == OK && wrong == 0 && r3 == ERR_INVAL && s.loads == 0 && r.reads() == 2,
	       "read_block_streams_a_page_without_the_cache", why);
	std::free(buf);
}

// The host's stop flag ends every wait: a muted controller, 4 threads on
// one page (one loads, three wait on its frame) and 4 on others; the flag
// is raised after 100 ms, every read ends with ERR_STOPPED well before the
// 1 s deadline.
static void test_stop_flag()
{
	cfg c;
	rig r(c);
	r.ctrls[0]->mute = true;
	array<uint64_t> a(r.d);
	std::atomic<uint32_t> stopped{0}, io{0}, other{0};
	std::atomic<uint64_t> worst{0};
	std::thread raiser([&] {
		std::this_thread::sleep_for(std::chrono::milliseconds(100));
		__atomic_store_n(&r.stop, 1u, __ATOMIC_RELEASE);
	});
	run_threads(8, 2, [&](uint32_t lane) {
		const uint64_t i = (lane < 4 ? 3 : 10 + lane) * 512;
		uint64_t v;
		const auto t0 = steady::now();
		const int32_t rc = a.read(i, &v);
		const uint64_t ms = ms_since(t0);
		uint64_t w = worst;
		while (ms > w && !worst.compare_exchange_weak(w, ms))
			;
		(rc == ERR_STOPPED ? stopped : rc == ERR_IO ? io : other)++;
	});
	raiser.join();
	char why[140];
	std::snprintf(why, sizeof(why), "%u ERR_STOPPED, %u ERR_IO (their pair poisoned by a stop), %u other; slowest %llu ms",
		      stopped.load(), io.load(), other.load(), (unsigned long long)worst.load());
	result(stopped >= 1 && stopped + io == 8 && worst < 800,
	       "stop_flag_ends_loads_and_waits_with_err_stopped", why);
}

// The C header's structs are array.h's and pqueue.h's, field by field.
#define SAME(ct, cf, t, f) static_assert(offsetof(ct, cf) == offsetof(t, f), #t "::" #f)
SAME(gpunvme_array_desc_c, ctrl, array_desc, ctrl);
SAME(gpunvme_array_desc_c, frames, array_desc, frames);
SAME(gpunvme_array_desc_c, frame_dma, array_desc, frame_dma);
SAME(gpunvme_array_desc_c, state, array_desc, state);
SAME(gpunvme_array_desc_c, ferr, array_desc, ferr);
SAME(gpunvme_array_desc_c, set_lock, array_desc, set_lock);
SAME(gpunvme_array_desc_c, hand, array_desc, hand);
SAME(gpunvme_array_desc_c, stats, array_desc, stats);
SAME(gpunvme_array_desc_c, error, array_desc, error);
SAME(gpunvme_array_desc_c, stop, array_desc, stop);
SAME(gpunvme_array_desc_c, bytes, array_desc, bytes);
SAME(gpunvme_array_desc_c, timeout_ticks, array_desc, timeout_ticks);
SAME(gpunvme_array_desc_c, tick_hz, array_desc, tick_hz);
SAME(gpunvme_array_desc_c, n_ctrl, array_desc, n_ctrl);
SAME(gpunvme_array_desc_c, layout, array_desc, layout);
SAME(gpunvme_array_desc_c, chunk_pages, array_desc, chunk_pages);
SAME(gpunvme_array_desc_c, page_shift, array_desc, page_shift);
SAME(gpunvme_array_desc_c, n_frames, array_desc, n_frames);
SAME(gpunvme_array_desc_c, ways, array_desc, ways);
SAME(gpunvme_array_desc_c, n_sets, array_desc, n_sets);
SAME(gpunvme_array_desc_c, frame_pages, array_desc, frame_pages);
SAME(gpunvme_array_ctrl_c, qps, array_ctrl, qps);
SAME(gpunvme_array_ctrl_c, base_lba, array_ctrl, base_lba);
SAME(gpunvme_array_ctrl_c, lbas, array_ctrl, lbas);
SAME(gpunvme_array_ctrl_c, nqp, array_ctrl, nqp);
SAME(gpunvme_array_ctrl_c, nsid, array_ctrl, nsid);
SAME(gpunvme_array_ctrl_c, lba_shift, array_ctrl, lba_shift);
SAME(gpunvme_array_stats_c, dead, array_stats, dead);
SAME(gpunvme_pqueue_c, sq, pqueue, sq);
SAME(gpunvme_pqueue_c, cq, pqueue, cq);
SAME(gpunvme_pqueue_c, sq_db, pqueue, sq_db);
SAME(gpunvme_pqueue_c, cq_db, pqueue, cq_db);
SAME(gpunvme_pqueue_c, stop, pqueue, stop);
SAME(gpunvme_pqueue_c, st, pqueue, st);
SAME(gpunvme_pqueue_c, ready, pqueue, ready);
SAME(gpunvme_pqueue_c, slots, pqueue, slots);
SAME(gpunvme_pqueue_c, prp_va, pqueue, prp_va);
SAME(gpunvme_pqueue_c, prp_page_dma, pqueue, prp_page_dma);
SAME(gpunvme_pqueue_c, prp_dma, pqueue, prp_dma);
SAME(gpunvme_pqueue_c, timeout_ticks, pqueue, timeout_ticks);
SAME(gpunvme_pqueue_c, tick_hz, pqueue, tick_hz);
SAME(gpunvme_pqueue_c, depth, pqueue, depth);
SAME(gpunvme_pqueue_c, prp_stride, pqueue, prp_stride);
SAME(gpunvme_pqueue_c, max_transfer, pqueue, max_transfer);
SAME(gpunvme_pqueue_c, backoff, pqueue, backoff);
static_assert(sizeof(gpunvme_array_desc_c) == sizeof(array_desc) &&
		      sizeof(gpunvme_array_ctrl_c) == sizeof(array_ctrl) &&
		      sizeof(gpunvme_array_stats_c) == sizeof(array_stats) &&
		      sizeof(gpunvme_pqueue_c) == sizeof(pqueue),
	      "the C header's structs are the device library's");

// And their geometry is array.h's: the bookkeeping for many cache shapes,
// a pair's shared state, the check on every bad descriptor of the test
// above, on the rig's own descriptor.
static void test_c_header_matches()
{
	uint32_t meta_bad = 0, pq_bad = 0, check_bad = 0;
	for (uint32_t ways : {1u, 2u, 8u, 16u})
		for (uint32_t sets : {1u, 3u, 64u, 1000u}) {
			array_desc d{};
			d.n_frames = sets * ways;
			d.n_sets = sets;
			uint8_t *base = (uint8_t *)(uintptr_t)0x100000;
			array_meta_attach(d, base);
			gpunvme_array_desc_c c{};
			c.n_frames = sets * ways;
			c.n_sets = sets;
			gpunvme_array_meta_attach(&c, 0x100000);
			meta_bad += (uint64_t)(uintptr_t)d.state != c.state ||
				    (uint64_t)(uintptr_t)d.ferr != c.ferr ||
				    (uint64_t)(uintptr_t)d.set_lock != c.set_lock ||
				    (uint64_t)(uintptr_t)d.hand != c.hand ||
				    (uint64_t)(uintptr_t)d.stats != c.stats ||
				    (uint64_t)(uintptr_t)d.error != c.error ||
				    array_meta_bytes(d.n_frames, sets) != gpunvme_array_meta_bytes(c.n_frames, sets);
		}
	for (uint32_t depth : {2u, 33u, 65u, 1024u}) {
		pqueue q{};
		q.depth = depth;
		pq_attach(q, (void *)(uintptr_t)0x200000);
		gpunvme_qpair_create qc{};
		qc.depth = depth;
		gpunvme_pqueue_c c;
		gpunvme_pq_fill(&c, &qc, 0, 0, 0, 0, 0x200000, 0, 1, 1, 0);
		std::vector<uint8_t> a(pq_bytes(depth)), b(gpunvme_pq_bytes(depth), 0xff);
		pq_init(a.data(), depth, 0, 0, 1);
		gpunvme_pq_shared_init(b.data(), depth);
		pq_bad += (uint64_t)(uintptr_t)q.ready != c.ready ||
			  (uint64_t)(uintptr_t)q.slots != c.slots || a != b ||
			  pq_prp_stride(4096ull * depth / 3, depth) != gpunvme_pq_prp_stride(4096ull * depth / 3, depth);
	}
	cfg x;
	x.n_ctrl = 2;
	rig r(x);
	array_desc bad[4] = {r.d, r.d, r.d, r.d};
	bad[1].ways = 3;
	bad[2].page_shift = 17;
	bad[3].n_sets = 3;
	for (const array_desc &d : bad) {
		gpunvme_array_desc_c c;
		std::memcpy(&c, &d, sizeof(c));
		std::vector<gpunvme_array_ctrl_c> cc(r.d.n_ctrl);
		std::memcpy(cc.data(), r.actrl.data(), sizeof(gpunvme_array_ctrl_c) * cc.size());
		check_bad += (array_check(d) == OK) != (gpunvme_array_check(&c, cc.data()) == 0);
	}
	char why[120];
	std::snprintf(why, sizeof(why), "meta layouts differing %u of 16, pair states %u of 4, checks %u of 4",
		      meta_bad, pq_bad, check_bad);
	result(meta_bad == 0 && pq_bad == 0 && check_bad == 0,
	       "c_header_geometry_and_checks_are_array_h_s", why);
}

// The hit path's look-up (array_probe(), what NVIDIA's array_op() runs
// before anything else): for every set width and every way, a VALID frame
// is a hit with a reference taken, a BUSY one an AP_LOADING with a
// reference taken, a page not in the set (or a frame of another set with
// its tag) AP_ABSENT with nothing taken.
static void test_probe_every_way()
{
	bool ok = true;
	char why[160] = "";
	for (uint32_t ways = 1; ways <= ARRAY_MAX_WAYS && ok; ways *= 2) {
		const uint32_t n_sets = 4;
		std::vector<uint64_t> state((size_t)n_sets * ways + 2, 0);
		// Unaligned too: the state words one word in (NVIDIA's paired
		// loads need 16 bytes; the host takes the scalar path either way).
		for (uint32_t shift = 0; shift < 2 && ok; shift++) {
			array_desc d{};
			d.state = state.data() + shift;
			d.ways = ways;
			d.n_sets = n_sets;
			d.n_frames = n_sets * ways;
			for (uint32_t set = 0; set < n_sets && ok; set++)
				for (uint32_t w = 0; w < ways && ok; w++) {
					for (auto &x : state)
						x = 0;
					const uint64_t page = 1000 + set * 64 + w;
					uint64_t *sw = &d.state[set * ways + w];
					for (int busy = 0; busy < 2 && ok; busy++) {
						*sw = (page + 1) << fstate::TAG_SHIFT | (busy ? fstate::BUSY : fstate::VALID) | 3;
						uint32_t f = ~0u;
						const int r = array_probe(d, set, page, &f);
						const int want = busy ? AP_LOADING : AP_HIT;
						const uint32_t other = (set + 1) % n_sets;
						uint32_t g = ~0u;
						const int r2 = n_sets > 1 ? array_probe(d, other, page, &g) : AP_ABSENT;
						const int r3 = array_probe(d, set, page + 1, &g);
						if (r != want || f != set * ways + w || fs_refs(*sw) != 4 || r2 != AP_ABSENT ||
						    r3 != AP_ABSENT || g != ~0u) {
							snprintf(why, sizeof(why),
								 "ways %u shift %u set %u way %u busy %d: probe %d frame %u refs %u, other set %d, other page %d",
								 ways, shift, set, w, busy, r, f, fs_refs(*sw), r2, r3);
							ok = false;
						}
					}
				}
		}
	}
	result(ok, "probe_every_way_hit_loading_absent_references_right", why);
}

int main()
{
	std::printf("KTAP version 1\n1..23\n");
	test_probe_every_way();
	test_every_element(1, 1, 12, ARRAY_STRIPE, "every_element_1_controller_4k_pages");
	test_every_element(2, 1, 12, ARRAY_STRIPE, "every_element_2_controllers_stripe_chunk_1");
	test_every_element(4, 1, 12, ARRAY_STRIPE, "every_element_4_controllers_stripe_chunk_1");
	test_every_element(4, 3, 14, ARRAY_STRIPE, "every_element_4_controllers_stripe_chunk_3_16k_pages");
	test_every_element(2, 1, 16, ARRAY_STRIPE, "every_element_2_controllers_64k_pages_prp_lists");
	test_every_element(2, 1, 12, ARRAY_REPLICATE, "every_element_2_controllers_replicate_reads_spread");
	test_eviction_under_load();
	test_referenced_frame_never_evicted();
	test_many_threads_one_page();
	test_wave_one_page();
	test_wave_small_sets();
	test_wave_claim_serves_a_live_command();
	test_write_back(ARRAY_STRIPE, "dirty_write_back_under_eviction_then_flush_fua_then_read_back_stripe");
	test_write_back(ARRAY_REPLICATE, "dirty_write_back_replicate_every_copy_written");
	test_dead_controller();
	test_late_completion_hits_only_retired_frames();
	test_replicate_survives_a_dead_replica();
	test_nvme_status();
	test_bad_input();
	test_read_block();
	test_stop_flag();
	test_c_header_matches();
	return summary();
}
