/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * selftest.h - the round-trip self-test of queue memory, both halves.
 *
 * Before a launch, for every region the kernel will touch (SQ, doorbell
 * cells, CQ or CQ mirror, PRP pool, host-mapped memory), a tiny kernel
 * (examples/selftest.hip) and the host exchange values through one cell of
 * that region, through the very mappings the real kernel and the host use:
 * the GPU address from the same import, the CPU's own mapping. A memory
 * type is a property of the mapping (the page table entry), so one cell
 * stands for its whole region. The question it answers is the one
 * isa-check cannot: does a GPU store reach memory the CPU reads, and does
 * a CPU store reach the GPU's loads, while the kernel runs? An RDNA2/3
 * region mapped cached (NC) fails it: the GPU's stores stay in GL2, its
 * loads hit a stale GL2 line (review s3, 2.4).
 *
 * A cell is two 32-bit words. Word 0 carries the GPU's stores, word 1 the
 * CPU's:
 *
 *   GPU                                       CPU
 *   word 0 := mark   (plain store, then        waits for mark
 *            release_system(): how SQEs and    word 1 := reply
 *            PRP lists are written)
 *   waits for word 1 == reply (poll_load:
 *            how CQEs and the stop flag are read)
 *   word 0 := ack    (the doorbell store)      waits for ack
 *   waits for word 1 == orig1                  word 1 := orig1 (restored)
 *   word 0 := orig0  (plain store, release)    waits for orig0: pass
 *
 * Every wait has a deadline; a GPU wait that ends without its value makes
 * the GPU store nack instead (doorbell store) and stop. The values are
 * fresh per run (a seed), distinct from each other and from what the cell
 * held before, which both sides restore. The GPU's deadline is shorter
 * than the CPU's, so a CPU that sees nack knows the GPU gave up.
 *
 * The file has two halves: the CPU half is plain C (gpunvme-gpu's build
 * compiles it with the system C compiler and calls it from Rust; the host
 * harness, tests/host_selftest_test.cpp, calls the same functions), the
 * GPU half is the device library's C++ (its deadlines are clock.h's).
 * Functions of the CPU half are `static inline` unless the includer
 * defines GPUNVME_ST_API (gpunvme-gpu defines it empty to get external
 * definitions).
 */
#ifndef GPUNVME_SELFTEST_H
#define GPUNVME_SELFTEST_H

#include <stdint.h>

#ifndef GPUNVME_ST_API
#define GPUNVME_ST_API static inline
#endif

#ifdef __cplusplus
#define GPUNVME_ST_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define GPUNVME_ST_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

/* One cell, as the GPU half gets it: its GPU address and the values. */
struct gpunvme_st_region {
	uint64_t cell;  /* GPU address of word 0 (word 1 follows), 8-byte aligned */
	uint32_t mark;  /* word 0: the GPU's first store (plain store + release) */
	uint32_t reply; /* word 1: the CPU's answer */
	uint32_t ack;   /* word 0: the GPU saw reply (doorbell store) */
	uint32_t nack;  /* word 0: a GPU wait ended without its value */
	uint32_t orig0; /* word 0 before the test (the GPU restores it last) */
	uint32_t orig1; /* word 1 before the test (the CPU restores it) */
};

/* What the GPU half writes for its cell, once it is done. */
struct gpunvme_st_result {
	int32_t status;     /* 0, or the failed wait's error (queue.h ERR_*) */
	uint32_t waits;     /* waits passed: 1 saw reply, 2 saw the restore */
	uint32_t seen;      /* the last value it read in word 1 */
	uint32_t done;      /* 1: written */
	uint64_t rtt_ticks; /* wall-clock ticks from storing mark to seeing reply */
};

/* The kernel's one argument. Pointers as 64-bit GPU addresses. */
struct gpunvme_st_args {
	uint64_t regions;       /* struct gpunvme_st_region[nregions] */
	uint64_t results;       /* struct gpunvme_st_result[nregions] */
	uint64_t stop;          /* host stop flag (uint32_t), 0: none */
	uint64_t timeout_ticks; /* each GPU wait (clock.h caps it at 2 s) */
	uint64_t tick_hz;
	uint32_t nregions;
	uint32_t pad;
};

/* The host fills and reads these from Rust (userspace/gpunvme-gpu/src/
 * selftest.rs), which asserts the same numbers. */
GPUNVME_ST_STATIC_ASSERT(sizeof(struct gpunvme_st_region) == 32, "gpunvme_st_region layout is pinned");
GPUNVME_ST_STATIC_ASSERT(sizeof(struct gpunvme_st_result) == 24, "gpunvme_st_result layout is pinned");
GPUNVME_ST_STATIC_ASSERT(sizeof(struct gpunvme_st_args) == 48, "gpunvme_st_args layout is pinned");

/* Verdicts (gpunvme_st_cpu.verdict). */
#define GPUNVME_ST_RUNNING 0u
#define GPUNVME_ST_PASS 1u
#define GPUNVME_ST_GPU_TO_CPU 2u      /* a GPU store was not seen by the CPU in time */
#define GPUNVME_ST_GPU_TO_CPU_LATE 3u /* ...seen only after the GPU had given up */
#define GPUNVME_ST_CPU_TO_GPU 4u      /* the GPU did not see a CPU store in time */
#define GPUNVME_ST_FOREIGN 5u         /* the cell held a value neither side wrote */
#define GPUNVME_ST_GPU_ERROR 6u       /* the GPU half ended otherwise (stop flag, clock) */
#define GPUNVME_ST_NO_RESULT 7u       /* the kernel did not finish: no GPU result */

/* Steps of the CPU half (gpunvme_st_cpu.step): what it waits for. */
#define GPUNVME_ST_WAIT_MARK 0u
#define GPUNVME_ST_WAIT_ACK 1u
#define GPUNVME_ST_WAIT_RESTORE 2u
#define GPUNVME_ST_FINISHED 3u

/* queue.h's ERR_TIMEOUT: a GPU wait that reached its deadline. */
#define GPUNVME_ST_ERR_TIMEOUT (-110)

#if !(defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__))

/* The CPU half of one cell. */
struct gpunvme_st_cpu {
	struct gpunvme_st_region r;
	uint32_t step;     /* GPUNVME_ST_WAIT_*; the step it ended in */
	uint32_t verdict;  /* GPUNVME_ST_* */
	uint32_t seen;     /* the last value it read in word 0 */
	uint32_t pad;
	uint64_t since_ns; /* when the current step began */
	uint64_t first_ns; /* deadline of the first step (the launch included) */
	uint64_t step_ns;  /* deadline of each later step */
	uint64_t rtt_ns;   /* from storing reply to seeing ack */
};

GPUNVME_ST_STATIC_ASSERT(sizeof(struct gpunvme_st_cpu) == 80, "gpunvme_st_cpu layout is pinned");

static inline uint32_t gpunvme_st_mix(uint32_t x)
{
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

/* A value from seed that is none of a, b, c. */
static inline uint32_t gpunvme_st_pick(uint32_t seed, uint32_t a, uint32_t b, uint32_t c)
{
	uint32_t v = gpunvme_st_mix(seed);

	while (v == a || v == b || v == c)
		v = gpunvme_st_mix(v + 1);
	return v;
}

static inline uint32_t gpunvme_st_ld(volatile uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

static inline void gpunvme_st_st(volatile uint32_t *p, uint32_t v)
{
	__atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

/*
 * The values for the cell at cpu (the CPU's mapping; cell_gpu is the same
 * memory's GPU address): reads what the cell holds now (restored at the
 * end) and picks values from seed that differ from it and each other.
 */
GPUNVME_ST_API void gpunvme_st_prepare(struct gpunvme_st_region *r, volatile uint32_t *cpu,
				       uint64_t cell_gpu, uint32_t seed)
{
	r->cell = cell_gpu;
	r->orig0 = gpunvme_st_ld(&cpu[0]);
	r->orig1 = gpunvme_st_ld(&cpu[1]);
	r->mark = gpunvme_st_pick(seed ^ 0x5e1f7e57u, r->orig0, r->orig0, r->orig0);
	r->ack = gpunvme_st_pick(r->mark, r->orig0, r->mark, r->mark);
	r->nack = gpunvme_st_pick(r->ack, r->orig0, r->mark, r->ack);
	r->reply = gpunvme_st_pick(r->nack ^ 0xa5a5a5a5u, r->orig1, r->orig1, r->orig1);
}

/* Starts the CPU half at now_ns, with its deadlines (ns). */
GPUNVME_ST_API void gpunvme_st_cpu_start(struct gpunvme_st_cpu *s, const struct gpunvme_st_region *r,
					 uint64_t now_ns, uint64_t first_ns, uint64_t step_ns)
{
	s->r = *r;
	s->step = GPUNVME_ST_WAIT_MARK;
	s->verdict = GPUNVME_ST_RUNNING;
	s->seen = r->orig0;
	s->pad = 0;
	s->since_ns = now_ns;
	s->first_ns = first_ns;
	s->step_ns = step_ns;
	s->rtt_ns = 0;
}

static inline uint32_t gpunvme_st_end(struct gpunvme_st_cpu *s, uint32_t verdict)
{
	s->verdict = verdict;
	return verdict;
}

/*
 * One look at the cell (cpu: the CPU's mapping of word 0) at now_ns; the
 * verdict, GPUNVME_ST_RUNNING while it waits. Non-blocking: the caller
 * polls every cell in turn. Its verdict is preliminary until
 * gpunvme_st_judge() has heard the GPU's side.
 */
GPUNVME_ST_API uint32_t gpunvme_st_cpu_step(struct gpunvme_st_cpu *s, volatile uint32_t *cpu,
					    uint64_t now_ns)
{
	const struct gpunvme_st_region *r = &s->r;
	uint32_t v;
	uint64_t limit;

	if (s->verdict != GPUNVME_ST_RUNNING)
		return s->verdict;
	v = gpunvme_st_ld(&cpu[0]);
	s->seen = v;
	limit = s->step == GPUNVME_ST_WAIT_MARK ? s->first_ns : s->step_ns;
	switch (s->step) {
	case GPUNVME_ST_WAIT_MARK:
		if (v == r->mark) {
			gpunvme_st_st(&cpu[1], r->reply);
			s->step = GPUNVME_ST_WAIT_ACK;
			s->since_ns = now_ns;
			return GPUNVME_ST_RUNNING;
		}
		if (v == r->nack) /* its mark never showed; its give-up did */
			return gpunvme_st_end(s, GPUNVME_ST_GPU_TO_CPU_LATE);
		if (v != r->orig0)
			return gpunvme_st_end(s, GPUNVME_ST_FOREIGN);
		break;
	case GPUNVME_ST_WAIT_ACK:
		if (v == r->ack) {
			s->rtt_ns = now_ns - s->since_ns;
			gpunvme_st_st(&cpu[1], r->orig1);
			s->step = GPUNVME_ST_WAIT_RESTORE;
			s->since_ns = now_ns;
			return GPUNVME_ST_RUNNING;
		}
		if (v == r->nack)
			return gpunvme_st_end(s, GPUNVME_ST_CPU_TO_GPU);
		if (v != r->mark)
			return gpunvme_st_end(s, GPUNVME_ST_FOREIGN);
		break;
	case GPUNVME_ST_WAIT_RESTORE:
		if (v == r->orig0) {
			s->step = GPUNVME_ST_FINISHED;
			return gpunvme_st_end(s, GPUNVME_ST_PASS);
		}
		if (v == r->nack)
			return gpunvme_st_end(s, GPUNVME_ST_CPU_TO_GPU);
		if (v != r->ack)
			return gpunvme_st_end(s, GPUNVME_ST_FOREIGN);
		break;
	default:
		return gpunvme_st_end(s, GPUNVME_ST_FOREIGN);
	}
	if (now_ns - s->since_ns >= limit)
		return gpunvme_st_end(s, s->step == GPUNVME_ST_WAIT_MARK ? GPUNVME_ST_GPU_TO_CPU
									: GPUNVME_ST_CPU_TO_GPU);
	return GPUNVME_ST_RUNNING;
}

/*
 * The final verdict, once the kernel has finished (g: its result for this
 * cell) or will not (g null). The CPU's view alone cannot tell a CPU store
 * the GPU never saw from a GPU store the CPU never saw when the GPU went
 * silent after its first store; the GPU's result can: it says which of
 * its waits passed.
 */
GPUNVME_ST_API uint32_t gpunvme_st_judge(struct gpunvme_st_cpu *s, const struct gpunvme_st_result *g)
{
	uint32_t v = s->verdict;

	if (v == GPUNVME_ST_RUNNING)
		v = s->step == GPUNVME_ST_WAIT_MARK ? GPUNVME_ST_GPU_TO_CPU : GPUNVME_ST_CPU_TO_GPU;
	if (v == GPUNVME_ST_FOREIGN || v == GPUNVME_ST_GPU_TO_CPU_LATE)
		return gpunvme_st_end(s, v);
	if (!g || !g->done)
		return gpunvme_st_end(s, v == GPUNVME_ST_PASS ? GPUNVME_ST_NO_RESULT : v);
	if (v == GPUNVME_ST_PASS)
		return gpunvme_st_end(s, g->status == 0 && g->waits == 2 ? GPUNVME_ST_PASS
									 : GPUNVME_ST_FOREIGN);
	/* The GPU ended otherwise than by a deadline (stop flag, stuck clock). */
	if (g->status != 0 && g->status != GPUNVME_ST_ERR_TIMEOUT)
		return gpunvme_st_end(s, GPUNVME_ST_GPU_ERROR);
	/* Waiting for ack: the GPU saw reply (so it stored ack): ack was lost.
	 * Waiting for the restore: the GPU saw it (so it stored orig0). */
	if ((s->step == GPUNVME_ST_WAIT_ACK && g->waits >= 1) ||
	    (s->step == GPUNVME_ST_WAIT_RESTORE && g->waits >= 2))
		return gpunvme_st_end(s, GPUNVME_ST_GPU_TO_CPU);
	return gpunvme_st_end(s, v);
}

/* Puts back what the cell held; only once the kernel has finished. */
GPUNVME_ST_API void gpunvme_st_restore(const struct gpunvme_st_region *r, volatile uint32_t *cpu)
{
	gpunvme_st_st(&cpu[1], r->orig1);
	gpunvme_st_st(&cpu[0], r->orig0);
}

/* A verdict's name. */
GPUNVME_ST_API const char *gpunvme_st_verdict_name(uint32_t v)
{
	switch (v) {
	case GPUNVME_ST_RUNNING: return "running";
	case GPUNVME_ST_PASS: return "pass";
	case GPUNVME_ST_GPU_TO_CPU: return "gpu-to-cpu";
	case GPUNVME_ST_GPU_TO_CPU_LATE: return "gpu-to-cpu-late";
	case GPUNVME_ST_CPU_TO_GPU: return "cpu-to-gpu";
	case GPUNVME_ST_FOREIGN: return "foreign";
	case GPUNVME_ST_GPU_ERROR: return "gpu-error";
	case GPUNVME_ST_NO_RESULT: return "no-result";
	default: return "unknown";
	}
}

#endif /* the CPU half */

#ifdef __cplusplus
#include "clock.h"
#include "fence.h"
#include "queue.h"

namespace gpunvme {
namespace selftest {

/* The way SQEs and PRP lists are written: a plain store, then the release. */
GPUNVME_HD void store_released(volatile uint32_t *w, uint32_t v)
{
	*(uint32_t *)w = v;
	fence::release_system();
}

/* Polls *w (the way CQEs and the stop flag are read) until it is want. */
GPUNVME_HD int32_t wait_word(const volatile uint32_t *w, uint32_t want, uint64_t timeout_ticks,
			     uint64_t tick_hz, const volatile uint32_t *stop, uint32_t *seen)
{
	deadline d = deadline_start(wall_ticks(), timeout_ticks, tick_hz);

	for (;;) {
		const uint32_t v = fence::poll_load(w);

		*seen = v;
		if (v == want)
			return OK;
		if (stop && fence::poll_load(stop) != 0)
			return ERR_STOPPED;
		const int s = d.step(wall_ticks());
		if (s == DEADLINE_EXPIRED)
			return ERR_TIMEOUT;
		if (s == DEADLINE_CLOCK_STUCK)
			return ERR_CLOCK;
	}
}

/* The GPU half of one cell (see the top of this file). */
GPUNVME_HD void run_cell(const gpunvme_st_region &r, uint64_t timeout_ticks, uint64_t tick_hz,
			 const volatile uint32_t *stop, gpunvme_st_result *out)
{
	volatile uint32_t *w = (volatile uint32_t *)(uintptr_t)r.cell;
	uint32_t seen = 0, waits = 0;
	const uint64_t t0 = wall_ticks();

	store_released(&w[0], r.mark);
	int32_t rc = wait_word(&w[1], r.reply, timeout_ticks, tick_hz, stop, &seen);
	const uint64_t rtt = wall_ticks() - t0;
	if (rc == OK) {
		waits = 1;
		fence::doorbell_write(&w[0], r.ack);
		rc = wait_word(&w[1], r.orig1, timeout_ticks, tick_hz, stop, &seen);
	}
	if (rc == OK) {
		waits = 2;
		store_released(&w[0], r.orig0);
	} else {
		fence::doorbell_write(&w[0], r.nack);
	}
	out->status = rc;
	out->waits = waits;
	out->seen = seen;
	out->rtt_ticks = rtt;
	out->done = 1;
}

} /* namespace selftest */
} /* namespace gpunvme */
#endif /* __cplusplus */

#endif /* GPUNVME_SELFTEST_H */
