// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// host_selftest_test.cpp - the round-trip self-test of queue memory
// (include/gpunvme/selftest.h) on the host. Its GPU half (the device code
// of examples/selftest.hip, as host C++) runs on a thread playing the GPU;
// its CPU half (the C functions gpunvme-gpu calls from Rust before a
// launch) runs on this thread. Between them, a modeled cell: the GPU's
// view and the CPU's view of the same two words, joined by a "memory"
// thread that carries word 0 (the GPU's stores) to the CPU's view and
// word 1 (the CPU's) to the GPU's, each way at once, after a lag, only
// its first change, only once the GPU's half has returned (a mirror
// written to memory late: the field report's doorbell that showed only
// at kernel exit), or never (a stale cache line). What a wrong mapping
// does on a GPU, without one. KTAP out.

#include <gpunvme/selftest.h>

#include "ktap.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace gpunvme;

namespace {

using steady = std::chrono::steady_clock;

constexpr uint64_t MS = 1000000; // ns
constexpr uint64_t GPU_WAIT = 60 * MS;
constexpr uint64_t FIRST = 600 * MS;
constexpr uint64_t STEP = 300 * MS;

enum carry_kind { NOW, LAG, FIRST_CHANGE, AT_EXIT, NEVER };

struct link {
	carry_kind kind;
	uint64_t lag_ns;
};

constexpr link now_link{NOW, 0};

uint64_t now_ns()
{
	return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
		       steady::now().time_since_epoch())
		.count();
}

uint32_t ld(const volatile uint32_t *p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
void st(volatile uint32_t *p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

// One direction of the memory between the two views.
struct carrier {
	link l;
	const volatile uint32_t *src;
	volatile uint32_t *dst;
	uint32_t last;     // the source's value last looked at
	uint64_t since;    // when it took that value
	bool changed = false;

	void step(bool gpu_done)
	{
		const uint32_t v = ld(src);
		switch (l.kind) {
		case NOW:
			st(dst, v);
			break;
		case LAG:
			if (v != last) {
				last = v;
				since = now_ns();
			}
			if (now_ns() - since >= l.lag_ns && ld(dst) != v)
				st(dst, v);
			break;
		case FIRST_CHANGE:
			if (!changed && v != last) {
				st(dst, v);
				changed = true;
			}
			break;
		case AT_EXIT:
			if (gpu_done)
				st(dst, v);
			break;
		case NEVER:
			break;
		}
	}
};

struct outcome {
	uint32_t prelim = 0, verdict = 0, step = 0;
	gpunvme_st_region r{};
	gpunvme_st_result g{};
	gpunvme_st_cpu s{};
	uint32_t cpu0 = 0, cpu1 = 0; // the CPU's view after the restore
};

// One self-test of one cell. one_copy: the GPU and the CPU see one memory
// (coherent by construction); else the views are joined by to_cpu (word 0)
// and to_gpu (word 1). foreign: a value another writer puts in the CPU's
// view of word 0 before the test starts (0: none).
outcome run(bool one_copy, link to_cpu, link to_gpu, uint32_t orig0, uint32_t orig1,
	    uint32_t seed, uint32_t foreign = 0)
{
	alignas(16) static uint32_t gpu_view[4], cpu_view[4];
	volatile uint32_t *cv = cpu_view;
	volatile uint32_t *gv = one_copy ? cpu_view : gpu_view;
	st(&cv[0], orig0);
	st(&cv[1], orig1);
	st(&gv[0], orig0);
	st(&gv[1], orig1);

	outcome o;
	gpunvme_st_prepare(&o.r, cv, (uint64_t)(uintptr_t)gv, seed);
	if (foreign)
		st(&cv[0], foreign);

	std::atomic<bool> gpu_done{false}, stop{false};
	carrier c0{to_cpu, &gv[0], &cv[0], orig0, now_ns()};
	carrier c1{to_gpu, &cv[1], &gv[1], orig1, now_ns()};
	std::thread mem;
	if (!one_copy)
		mem = std::thread([&] {
			while (!stop.load()) {
				const bool done = gpu_done.load();
				c0.step(done);
				c1.step(done);
				std::this_thread::yield();
			}
		});
	std::thread gpu([&] {
		selftest::run_cell(o.r, GPU_WAIT, 1000000000ull, nullptr, &o.g);
		gpu_done.store(true);
	});

	gpunvme_st_cpu_start(&o.s, &o.r, now_ns(), FIRST, STEP);
	while ((o.prelim = gpunvme_st_cpu_step(&o.s, cv, now_ns())) == GPUNVME_ST_RUNNING)
		std::this_thread::yield();
	gpu.join(); // the kernel finishes: its waits are bounded
	stop.store(true);
	if (mem.joinable())
		mem.join();
	o.step = o.s.step;
	o.verdict = gpunvme_st_judge(&o.s, &o.g);
	gpunvme_st_restore(&o.r, cv);
	o.cpu0 = ld(&cv[0]);
	o.cpu1 = ld(&cv[1]);
	return o;
}

char why[512];

const char *describe(const outcome &o)
{
	std::snprintf(why, sizeof(why),
		      "verdict %s (preliminary %s) in step %u; GPU status %d waits %u seen 0x%08x; "
		      "CPU saw 0x%08x; after restore 0x%08x 0x%08x",
		      gpunvme_st_verdict_name(o.verdict), gpunvme_st_verdict_name(o.prelim), o.step,
		      o.g.status, o.g.waits, o.g.seen, o.s.seen, o.cpu0, o.cpu1);
	return why;
}

bool restored(const outcome &o, uint32_t orig0, uint32_t orig1)
{
	return o.cpu0 == orig0 && o.cpu1 == orig1;
}

void test_coherent_cells_pass()
{
	outcome o = run(true, now_link, now_link, 0x1234, 0x5678, 1);
	result(o.verdict == GPUNVME_ST_PASS && o.g.status == 0 && o.g.waits == 2 &&
		       restored(o, 0x1234, 0x5678),
	       "one memory for both sides: pass, both words restored", describe(o));

	o = run(false, now_link, now_link, 0, 0, 2);
	result(o.verdict == GPUNVME_ST_PASS && restored(o, 0, 0),
	       "two views carried at once: pass", describe(o));
}

// A slow path is not a wrong one: 5 ms each way, inside every deadline.
void test_a_slow_but_coherent_path_passes()
{
	const link lag{LAG, 5 * MS};
	outcome o = run(false, lag, lag, 7, 9, 3);
	// GPU: mark out (>= 5 ms) and reply back (>= 5 ms); CPU: reply out, ack back.
	result(o.verdict == GPUNVME_ST_PASS && o.g.rtt_ticks >= 10 * MS && o.s.rtt_ns >= 10 * MS &&
		       restored(o, 7, 9),
	       "carried after 5 ms each way: pass, both round trips at least 10 ms", describe(o));
}

// The field report's doorbell that lingered until kernel exit, here for
// every GPU store to the cell: the CPU sees only the GPU's last store, its
// give-up, once the GPU has returned.
void test_a_mirror_written_to_memory_late_is_refused()
{
	outcome o = run(false, link{AT_EXIT, 0}, now_link, 0, 0, 4);
	result(o.verdict == GPUNVME_ST_GPU_TO_CPU_LATE && o.step == GPUNVME_ST_WAIT_MARK &&
		       o.g.status == -110 && o.g.waits == 0 && restored(o, 0, 0),
	       "GPU stores that reach memory only at kernel exit: refused (gpu-to-cpu-late)",
	       describe(o));

	// Late beyond the GPU's patience but inside the CPU's: refused as well.
	o = run(false, link{LAG, 3 * GPU_WAIT}, now_link, 0, 0, 5);
	result(o.verdict == GPUNVME_ST_GPU_TO_CPU_LATE && o.g.status == -110,
	       "GPU stores that reach the CPU after the GPU gave up: refused (gpu-to-cpu-late)",
	       describe(o));
}

void test_gpu_stores_that_never_reach_the_cpu_are_refused()
{
	const uint64_t t0 = now_ns();
	outcome o = run(false, link{NEVER, 0}, now_link, 0, 0, 6);
	const uint64_t took = now_ns() - t0;
	result(o.verdict == GPUNVME_ST_GPU_TO_CPU && o.step == GPUNVME_ST_WAIT_MARK &&
		       o.s.seen == 0 && took >= FIRST && took < FIRST + 500 * MS,
	       "GPU stores never seen by the CPU: refused (gpu-to-cpu) at the first deadline",
	       describe(o));
}

// A stale line on the GPU's side: its loads keep the old word 1.
void test_cpu_stores_the_gpu_never_sees_are_refused()
{
	outcome o = run(false, now_link, link{NEVER, 0}, 0, 0, 7);
	result(o.verdict == GPUNVME_ST_CPU_TO_GPU && o.step == GPUNVME_ST_WAIT_ACK &&
		       o.g.status == -110 && o.g.waits == 0 && o.g.seen == 0 && restored(o, 0, 0),
	       "CPU stores never seen by the GPU: refused (cpu-to-gpu), the GPU saw only the old word",
	       describe(o));

	// Its first change arrives, the restore never does.
	o = run(false, now_link, link{FIRST_CHANGE, 0}, 0, 0, 8);
	result(o.verdict == GPUNVME_ST_CPU_TO_GPU && o.step == GPUNVME_ST_WAIT_RESTORE &&
		       o.g.waits == 1 && o.g.seen == o.r.reply,
	       "the CPU's restore never seen by the GPU: refused (cpu-to-gpu) in the restore step",
	       describe(o));
}

// Word 0 carries only the GPU's first store (mark), so its doorbell store
// (ack) is lost: the CPU alone would blame its own reply; the GPU's result
// (it saw reply) says the ack went missing.
void test_a_lost_doorbell_store_is_told_apart_from_a_lost_reply()
{
	outcome o = run(false, link{FIRST_CHANGE, 0}, now_link, 0, 0, 9);
	result(o.prelim == GPUNVME_ST_CPU_TO_GPU && o.verdict == GPUNVME_ST_GPU_TO_CPU &&
		       o.step == GPUNVME_ST_WAIT_ACK && o.g.waits >= 1,
	       "a lost doorbell store: refused as gpu-to-cpu once the GPU's result is heard",
	       describe(o));
}

void test_a_value_neither_side_wrote_is_refused()
{
	outcome o = run(false, link{NEVER, 0}, now_link, 0, 0, 10, 0xdeadbeef);
	result(o.verdict == GPUNVME_ST_FOREIGN && o.s.seen == 0xdeadbeef && restored(o, 0, 0),
	       "a value neither side wrote: refused (foreign), the cell restored", describe(o));
}

// The CPU half with made-up timestamps: the deadlines are exact, and
// judge() combines both views as documented.
void test_the_cpu_half_step_by_step()
{
	alignas(8) uint32_t cell[2] = {0, 0};
	volatile uint32_t *c = cell;
	gpunvme_st_region r;
	gpunvme_st_cpu s;
	gpunvme_st_prepare(&r, c, 0x1000, 11);
	gpunvme_st_cpu_start(&s, &r, 1000, 50, 20);
	bool ok = gpunvme_st_cpu_step(&s, c, 1049) == GPUNVME_ST_RUNNING &&
		  gpunvme_st_cpu_step(&s, c, 1050) == GPUNVME_ST_GPU_TO_CPU;
	gpunvme_st_result none{};
	ok = ok && gpunvme_st_judge(&s, &none) == GPUNVME_ST_GPU_TO_CPU;
	result(ok, "cpu half: no mark by the first deadline is gpu-to-cpu, exactly at it");

	gpunvme_st_cpu_start(&s, &r, 0, 50, 20);
	cell[0] = r.mark;
	ok = gpunvme_st_cpu_step(&s, c, 10) == GPUNVME_ST_RUNNING && cell[1] == r.reply &&
	     gpunvme_st_cpu_step(&s, c, 29) == GPUNVME_ST_RUNNING &&
	     gpunvme_st_cpu_step(&s, c, 30) == GPUNVME_ST_CPU_TO_GPU;
	const gpunvme_st_cpu waiting_ack = s;
	gpunvme_st_result g{-110, 0, 0, 1, 0};
	ok = ok && gpunvme_st_judge(&s, &g) == GPUNVME_ST_CPU_TO_GPU;
	s = waiting_ack;
	g.waits = 1;
	ok = ok && gpunvme_st_judge(&s, &g) == GPUNVME_ST_GPU_TO_CPU;
	s = waiting_ack;
	ok = ok && gpunvme_st_judge(&s, nullptr) == GPUNVME_ST_CPU_TO_GPU;
	s = waiting_ack;
	g = {-125, 0, 0, 1, 0};
	ok = ok && gpunvme_st_judge(&s, &g) == GPUNVME_ST_GPU_ERROR;
	result(ok, "cpu half: a silent GPU after the reply is judged by the GPU's result");

	gpunvme_st_cpu_start(&s, &r, 0, 50, 20);
	cell[0] = r.mark;
	gpunvme_st_cpu_step(&s, c, 1);
	cell[0] = r.ack;
	ok = gpunvme_st_cpu_step(&s, c, 5) == GPUNVME_ST_RUNNING && cell[1] == r.orig1 &&
	     s.rtt_ns == 4;
	cell[0] = r.orig0;
	ok = ok && gpunvme_st_cpu_step(&s, c, 6) == GPUNVME_ST_PASS;
	const gpunvme_st_cpu passed = s;
	g = {0, 2, r.orig1, 1, 0};
	ok = ok && gpunvme_st_judge(&s, &g) == GPUNVME_ST_PASS;
	s = passed;
	ok = ok && gpunvme_st_judge(&s, nullptr) == GPUNVME_ST_NO_RESULT;
	s = passed;
	g = {-110, 1, 0, 1, 0}; // the CPU saw orig0, which the GPU never stored
	ok = ok && gpunvme_st_judge(&s, &g) == GPUNVME_ST_FOREIGN;
	result(ok, "cpu half: a pass needs the GPU's own result to agree");

	// nack while waiting for the mark: the GPU gave up, its mark never showed.
	gpunvme_st_cpu_start(&s, &r, 0, 50, 20);
	cell[0] = r.nack;
	result(gpunvme_st_cpu_step(&s, c, 1) == GPUNVME_ST_GPU_TO_CPU_LATE,
	       "cpu half: nack before the mark is gpu-to-cpu-late");
}

void test_values_differ_from_the_cell_and_each_other()
{
	alignas(8) uint32_t cell[2] = {0, 0};
	gpunvme_st_region r;
	bool ok = true;
	for (uint32_t seed = 0; seed < 2000 && ok; seed++) {
		cell[0] = 0;
		cell[1] = 0;
		gpunvme_st_prepare(&r, cell, 0, seed);
		// Make the cell hold what this seed picks first: it must pick others.
		cell[0] = r.mark;
		cell[1] = r.reply;
		const gpunvme_st_region first = r;
		gpunvme_st_prepare(&r, cell, 0, seed);
		ok = r.orig0 == first.mark && r.orig1 == first.reply && r.mark != r.orig0 &&
		     r.ack != r.orig0 && r.nack != r.orig0 && r.mark != r.ack && r.mark != r.nack &&
		     r.ack != r.nack && r.reply != r.orig1;
	}
	gpunvme_st_prepare(&r, cell, 0, 1);
	gpunvme_st_region r2;
	gpunvme_st_prepare(&r2, cell, 0, 2);
	result(ok && r.mark != r2.mark,
	       "values: none equals what the cell held or another, and they change with the seed");
}

} // namespace

int main()
{
	std::printf("KTAP version 1\n1..15\n");
	test_coherent_cells_pass();
	test_a_slow_but_coherent_path_passes();
	test_a_mirror_written_to_memory_late_is_refused();
	test_gpu_stores_that_never_reach_the_cpu_are_refused();
	test_cpu_stores_the_gpu_never_sees_are_refused();
	test_a_lost_doorbell_store_is_told_apart_from_a_lost_reply();
	test_a_value_neither_side_wrote_is_refused();
	test_the_cpu_half_step_by_step();
	test_values_differ_from_the_cell_and_each_other();
	return summary();
}
