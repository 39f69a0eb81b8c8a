/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * pqueue.h - the per-thread API: any thread of any block submits one
 * command to a queue pair it shares with everyone else, gets a ticket, and
 * waits for (or tests) that ticket alone. The group API (queue.h) stays the
 * fast path for lockstep kernels; a pair is driven by one API at a time.
 *
 * Shared state (pq_shared, the ready marks and the per-command slots) lives
 * in GPU-visible memory (pq_bytes(depth)) the host fills with pq_init()
 * and points a descriptor at with pq_attach(); every
 * thread holds a copy of the pqueue descriptor (pointers and constants).
 *
 *  submit   1. take a ticket, lock-free: a 64-bit counter (one atomic
 *              add; on NVIDIA one per warp for the lanes that take theirs
 *              together on the same pair, pq_take_number(); on AMD and
 *              the host one per wave and pair, the wave's lanes on that
 *              pair getting one contiguous block, pq_claim_wave()). Ticket c
 *              owns command slot c % (depth-1) in round c / (depth-1) AND
 *              SQ position sq_base + c (one counter for both), and waits
 *              (bounded, reaping meanwhile) until the slot's previous
 *              owner has taken its completion. The slot index is the NVMe
 *              command ID, and the slot's part of the PRP pool holds this
 *              command's PRP list.
 *           2. write the SQE at the ticket's SQ position as four 16-byte
 *              stores, then a system-scope release
 *              (the same fence::release_system() as sq_put()), then mark
 *              the position ready.
 *           3. ring, coalesced: whoever takes the ring lock (one fetch-or
 *              on a word that holds the lock bit and the tail rung so far,
 *              so the same round trip returns the tail; a thread that
 *              finds it taken leaves) advances the SQ tail over every
 *              consecutive ready position and writes the doorbell once for
 *              all of them (fence::sq_doorbell_write(), the group API's
 *              store). On NVIDIA one lane rings for the warp's lanes that
 *              post together, and when their positions are consecutive it
 *              skips reading their marks. Unlocking stores the new tail
 *              (a release: the doorbell store is performed before the next
 *              ringer's, so doorbell values never go back); then it
 *              re-checks the next position; a marker that found the lock
 *              taken checked it after its mark (sequentially consistent
 *              fences on both sides), so a ready command is never left
 *              unrung.
 *  reap     peek first, lock only for work: read the CQ head, phase
 *           and CQE count (one cache line, no lock), poll the entries
 *           there; only when a new phase is seen take the CQ lock (one
 *           compare-and-swap), and keep what was polled only if head,
 *           phase and the 64-bit CQE count are still what the peek read
 *           (nobody consumed anything in between; the count never
 *           repeats). The lock holder consumes the CQ in order: poll
 *           whole entries several at once, one 16-byte load each
 *           (fence::poll_cqe_batch(); on NVIDIA the warp's lanes that reap
 *           together poll one entry each and agree by ballot), so the poll
 *           that sees a phase already holds the entry; fence::
 *           acquire_system() once; route each new entry by command ID
 *           into that command's slot (fields, a release fence, then the
 *           slot's seq), track the SQ head from the CQE's SQ head field (a
 *           head past what was claimed, a command ID that is not in
 *           flight: the pair is poisoned), and ring the CQ head doorbell
 *           once for the whole batch. On NVIDIA, a lane that reaps while
 *           it waits for its own live ticket takes its entry straight from
 *           the lane that polled it (shuffles, then a warp barrier after
 *           the poller's acquire) and frees its slot itself: no store and
 *           reload through the slot. Only lanes on the same pair reap
 *           together (match.any on the pair).
 *  wait     poll your own slot; reap when nobody else is; bounded on the
 *           fixed-rate clock (clock.h) and by the host's stop flag (read
 *           every PQ_STOP_EVERY polls); optional backoff between polls.
 *           A ticket is waited for by one thread (a second waiter's take
 *           fails its compare-and-swap: ERR_INVAL). On NVIDIA the lanes
 *           of a warp that enter a wait together leave it together, a
 *           done lane lingering (and reaping) for at most
 *           PQ_LINGER_NS ns of the fixed-rate clock for the others
 *           (pq_wait()).
 *
 * Flow control: at most depth-1 commands hold a slot, so at most depth-1
 * SQ entries are unconsumed and the SQ and CQ never overflow. A slot is
 * free again once its completion is taken, which can be before the reap's
 * CQ head doorbell reaches the controller: with depth-1 commands in
 * flight the controller can then find the CQ full for a moment and waits
 * for the doorbell (NVMe: a controller never posts into a full CQ). Proof of the
 * SQ side: ticket c (position sq_base + c) writes its SQE only after
 * ticket c - (depth-1) completed, so the controller fetched that ticket's
 * position and (it fetches in order) every earlier one, the position of
 * ticket c - depth, whose SQ entry c reuses, among them. A ticket waits
 * only for earlier tickets (its slot's previous round; the ring for
 * earlier positions), so no wait is circular: a ticket still waiting for
 * its slot holds back the doorbell for later positions (they are marked,
 * and rung once it posts) but never anything it waits for. pq_wait()'s
 * linger makes a done lane wait for others, bounded in time (linger_ns),
 * so it can delay but never close a cycle.
 *
 * Performance: the lanes of a warp that claim, post and reap together
 * share one ticket add, one ring and one reap round. Left to leave a wait
 * as their own completions arrive (linger 0), free-running lanes split
 * into groups of about 14 that claim, ring and reap apart: 0.49-0.58x the
 * group API's rate on the H200 bench (64 pairs x 32 threads against a CPU
 * fixture). With the default linger (then 32 polls; now 32 us, about the
 * same on that bench's host-memory CQ; not re-measured since) they stay
 * one group: 0.83-0.92x, and 0.91-0.97x when the caller also regroups the
 * warp (__syncwarp()) after each command (kernels/bench/results/h200-v8,
 * h200-v9, h200-v10).
 *
 * Limits: a thread may hold several tickets; a claim waits for the slot's
 * previous round to be taken, and on a shared pair that can be the
 * claiming thread's own live ticket: pass those (pq_held, as pq_io() does)
 * and the claim takes them itself; otherwise it waits until its deadline
 * (ERR_TIMEOUT). Claims are FIFO per slot: with T threads on a pair, a
 * claim waits for about T / (depth-1) command lifetimes. On a GPU those
 * are microseconds; with host threads as lanes on an oversubscribed CPU
 * each needs a given thread to be scheduled, and 32 threads on depth 4
 * were seen to pass the 2 s cap (ERR_TIMEOUT). A failed wait poisons the
 * pair (pq_shared::error) as queue.h does; the host resets the queue.
 *
 * AMD (no independent thread scheduling: a lane that is done with a loop
 * sits masked until its whole wave leaves it) is live by construction,
 * pq_claim_wave(): the lanes of a wave that claim together take one
 * contiguous block of tickets per pair, and every one of them stays in
 * the claim loop, serving its held tickets, until all have their slots.
 * The rule, per pair, for the lanes of one wave:
 *   - at most depth-1 of them claim together (more: ERR_INVAL for each of
 *     them at once, nothing taken, the pair not poisoned);
 *   - a lane that holds live tickets on the pair while it claims passes
 *     them as held (pq_io() does), and no lane holds a live ticket there
 *     that it could not serve while others of its wave claim: claim from
 *     the same place in the code (every lane in pq_io()'s loop joins each
 *     pass's claim; a lane that only waits is in pq_wait(), which needs
 *     nothing from masked lanes).
 * Then a claim waits only for a ticket older than its wave's block, held
 * by a lane that serves it in this loop, by another wave or thread, or by
 * a lane waiting for it: never for itself (tests/host_pqueue_test.cpp
 * runs the schedule with threads as the lanes of a 64-lane wave).
 */
#ifndef GPUNVME_PQUEUE_H
#define GPUNVME_PQUEUE_H

#include "clock.h"
#include "compat.h"
#include "fence.h"
#include "nvme.h"
#include "queue.h"
#include "wave.h"

#if defined(GPUNVME_HOST_ONLY)
#include <sched.h>
#endif

namespace gpunvme {

constexpr int32_t ERR_AGAIN = -11; /* EAGAIN: pq_test(): not completed yet */

/* The stop flag is read once every this many polls of a wait. */
constexpr uint32_t PQ_STOP_EVERY = 64;

/* pq_wait()'s default linger (NVIDIA): nanoseconds, on the fixed-rate
 * clock, a done lane waits for the other lanes of its warp that entered
 * the wait with it. In time, not polls: a poll costs about 19 ns against a
 * CQ in VRAM and about 1 us against one in host memory (H200), so a count
 * of polls meant anything from 0.6 to 32 us. 32 us is what the former
 * default of 32 polls was on the bench's host-memory CQ. */
#ifndef GPUNVME_PQ_LINGER_NS
#define GPUNVME_PQ_LINGER_NS 32000
#endif
constexpr uint32_t PQ_LINGER_NS = GPUNVME_PQ_LINGER_NS;

/*
 * Device-scope atomics for the shared bookkeeping (all threads of one GPU).
 * What the controller must see is ordered by fence.h's system-scope
 * fences, never by these.
 */
namespace atom {

#if defined(GPUNVME_DEV_AMD)
#define GPUNVME_AT_SCOPE __MEMORY_SCOPE_DEVICE
#endif

GPUNVME_HD uint64_t add64(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_fetch_add(p, v, __ATOMIC_RELAXED, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t old;
	asm volatile("atom.relaxed.gpu.add.u64 %0, [%1], %2;"
		     : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
#else
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD uint32_t ld32(const uint32_t *p)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_load_n(p, __ATOMIC_RELAXED, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t v;
	asm volatile("ld.relaxed.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD uint64_t ld64(const uint64_t *p)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_load_n(p, __ATOMIC_RELAXED, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t v;
	asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD uint32_t ld32_acquire(const uint32_t *p)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_load_n(p, __ATOMIC_ACQUIRE, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t v;
	asm volatile("ld.acquire.gpu.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

GPUNVME_HD void st32(uint32_t *p, uint32_t v)
{
#if defined(GPUNVME_DEV_AMD)
	__scoped_atomic_store_n(p, v, __ATOMIC_RELAXED, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("st.relaxed.gpu.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
#else
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void st64(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	__scoped_atomic_store_n(p, v, __ATOMIC_RELAXED, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("st.relaxed.gpu.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
#else
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void st64_release(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	__scoped_atomic_store_n(p, v, __ATOMIC_RELEASE, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("st.release.gpu.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
#else
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

/* OR v into *p, acquire; returns the old value (one round trip). */
GPUNVME_HD uint64_t or64_acquire(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_fetch_or(p, v, __ATOMIC_ACQUIRE, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t old;
	asm volatile("atom.acquire.gpu.or.b64 %0, [%1], %2;"
		     : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
#else
	return __atomic_fetch_or(p, v, __ATOMIC_ACQUIRE);
#endif
}

GPUNVME_HD void st32_release(uint32_t *p, uint32_t v)
{
#if defined(GPUNVME_DEV_AMD)
	__scoped_atomic_store_n(p, v, __ATOMIC_RELEASE, GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("st.release.gpu.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
#else
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
#endif
}

GPUNVME_HD void fence_release()
{
#if defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "agent");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_RELEASE);
#endif
}

GPUNVME_HD void fence_acquire()
{
#if defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "agent");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.acq_rel.gpu;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
#endif
}

/* Store-load ordering between threads (the ring lock's re-check). */
GPUNVME_HD void fence_sc()
{
#if defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.sc.gpu;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/* Add v to a statistics counter; nobody waits for the old value (NVIDIA:
 * red, no round trip on the caller's path). */
GPUNVME_HD void red64(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_NVIDIA)
	asm volatile("red.relaxed.gpu.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
#else
	(void)add64(p, v);
#endif
}

/* One attempt at a lock word (0 free, 1 held); acquire on success. One
 * compare-and-swap, no load before it: every caller tries only when it
 * has work for the holder (a ready mark, a CQE seen), so the lock is
 * rarely contended and the load would be one more serial round trip. */
GPUNVME_HD bool try_lock(uint32_t *p)
{
#if defined(GPUNVME_DEV_AMD)
	uint32_t expected = 0;
	return __scoped_atomic_compare_exchange_n(p, &expected, 1u, false,
						  __ATOMIC_ACQUIRE,
						  __ATOMIC_RELAXED,
						  GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t old;
	asm volatile("atom.acquire.gpu.cas.b32 %0, [%1], 0, 1;"
		     : "=r"(old) : "l"(p) : "memory");
	return old == 0;
#else
	uint32_t expected = 0;
	return __atomic_compare_exchange_n(p, &expected, 1u, false,
					   __ATOMIC_ACQUIRE, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void unlock(uint32_t *p) { st32_release(p, 0); }

/* *p from expected to v, release (what came before, loads included, is
 * ordered before it); false, and nothing stored, if *p was not expected. */
GPUNVME_HD bool cas32_release(uint32_t *p, uint32_t expected, uint32_t v)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_compare_exchange_n(p, &expected, v, false,
						  __ATOMIC_RELEASE,
						  __ATOMIC_RELAXED,
						  GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t old;
	asm volatile("atom.release.gpu.cas.b32 %0, [%1], %2, %3;"
		     : "=r"(old) : "l"(p), "r"(expected), "r"(v) : "memory");
	return old == expected;
#else
	return __atomic_compare_exchange_n(p, &expected, v, false,
					   __ATOMIC_RELEASE, __ATOMIC_RELAXED);
#endif
}

/* First error wins. */
GPUNVME_HD void set_error(int32_t *p, int32_t err)
{
#if defined(GPUNVME_DEV_AMD)
	int32_t expected = 0;
	__scoped_atomic_compare_exchange_n(p, &expected, err, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED,
					   GPUNVME_AT_SCOPE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t old;
	asm volatile("atom.relaxed.gpu.cas.b32 %0, [%1], 0, %2;"
		     : "=r"(old) : "l"(p), "r"(err) : "memory");
	asm volatile("" :: "r"(old)); /* used: nvcc's warning 550 is an error here */
#else
	int32_t expected = 0;
	__atomic_compare_exchange_n(p, &expected, err, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
#endif
}

} /* namespace atom */

/* Between polls that found nothing: give the memory system (or, on the
 * host, the CPU) to someone else for a moment. */
GPUNVME_HD void pq_pause()
{
#if defined(GPUNVME_HOST_ONLY)
	sched_yield();
#else
	fence::poll_pause(); /* s_sleep 1 / nanosleep 64 ns */
#endif
}

/*
 * The SM (NVIDIA) or compute unit (AMD: SE/SA/CU or WGP ids from the
 * hardware id register) this thread runs on, for spreading threads over
 * queue pairs; the host's group id on the host.
 */
GPUNVME_HD uint32_t unit_id()
{
#if defined(GPUNVME_DEV_NVIDIA)
	uint32_t v;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
	return v;
#elif defined(GPUNVME_DEV_AMD) && defined(__GFX9__)
	/* HW_REG_HW_ID (4): CU_ID[11:8] SH_ID[12] SE_ID[15:13]. */
	return (__builtin_amdgcn_s_getreg((31 << 11) | 4) >> 8) & 0xffu;
#elif defined(GPUNVME_DEV_AMD)
	/* HW_REG_HW_ID1 (23): WGP_ID[13:10] SA_ID[16] SE_ID[20:18]. */
	return (__builtin_amdgcn_s_getreg((31 << 11) | 23) >> 10) & 0x7ffu;
#else
	return host_group_id;
#endif
}

/* A queue pair for this thread out of n: by SM/CU, or pass your own. */
GPUNVME_HD uint32_t pq_pick(uint32_t n) { return n ? unit_id() % n : 0; }

/* Per command ID: the routed completion. seq: 4r free for round r, 4r+1
 * submitted, 4r+2 completed (dw0/dw2/dw3 valid), then 4(r+1). */
struct alignas(16) pq_slot {
	uint32_t seq;
	uint32_t dw0;
	uint32_t dw2; /* SQ head | SQ id << 16 */
	uint32_t dw3; /* CID | phase << 16 | status << 17 */
};

/* Shared bookkeeping of one pair; hot words on their own cache lines. */
struct pq_shared {
	uint64_t cid_ticket;  /* tickets taken (command slots and SQ positions) */
	uint64_t sq_base;     /* SQ position of ticket 0 (ticket c: sq_base + c) */
	uint64_t pad0[6];
	uint64_t db_word;     /* SQ positions rung << 1 | 1 while the ring lock is held */
	uint64_t sq_doorbells; /* SQ doorbell writes */
	uint64_t pad2[6];
	uint32_t cq_lock;
	uint32_t cq_head;
	uint32_t phase;
	int32_t error;        /* first failure: the pair is poisoned */
	uint64_t sq_head;     /* SQ head from the CQEs (monotonic) */
	uint64_t cq_doorbells; /* CQ doorbell writes */
	uint64_t cqes;        /* CQEs consumed */
	uint64_t pad3[3];
};
static_assert(sizeof(pq_shared) == 192, "pq_shared: three cache lines");

/* Where a pair's shared state lies in one allocation of pq_bytes(depth). */
GPUNVME_HD uint64_t pq_ready_off() { return sizeof(pq_shared); }
GPUNVME_HD uint64_t pq_slots_off(uint32_t depth)
{
	return (pq_ready_off() + 4ull * depth + 63) & ~63ull;
}
GPUNVME_HD uint64_t pq_bytes(uint32_t depth)
{
	return pq_slots_off(depth) + sizeof(pq_slot) * (uint64_t)depth;
}

/* What every thread holds (by value, like qpair). */
struct pqueue {
	sqe *sq;
	const cqe *cq;
	volatile uint32_t *sq_db;
	volatile uint32_t *cq_db;
	const volatile uint32_t *stop; /* may be null */
	pq_shared *st;
	uint32_t *ready;               /* depth marks: position p ready = p+1 */
	pq_slot *slots;                /* depth-1 command slots */
	/* PRP pool: prp_stride bytes per command slot at prp_va; the
	 * controller names byte x of it prp_dma + x (shared mode: the
	 * module's pool), or, with prp_page_dma, prp_page_dma[x / 4096] +
	 * x % 4096 (a pool in pages the file mapped, owner mode). */
	uint64_t *prp_va;
	const uint64_t *prp_page_dma;
	uint64_t prp_dma;
	uint64_t timeout_ticks;
	uint64_t tick_hz;
	uint32_t depth;
	uint32_t prp_stride;           /* power of two, 8..4096; 0: no pool */
	uint32_t max_transfer;         /* bytes per command (MDTS), 0: none */
	uint32_t backoff;              /* 1: pq_pause() between empty polls */
};

/*
 * Host: fill the shared state of a pair whose ring position is (sq_tail,
 * cq_head, phase), e.g. a fresh pair (0, 0, 1) or what the group API left.
 * mem: pq_bytes(depth) bytes; for GPU memory build it in host memory and
 * copy it over.
 */
GPUNVME_HD void pq_init(void *mem, uint32_t depth, uint32_t sq_tail,
			uint32_t cq_head, uint32_t phase)
{
	uint8_t *b = (uint8_t *)mem;

	for (uint64_t i = 0; i < pq_bytes(depth); i++)
		b[i] = 0;
	pq_shared *s = (pq_shared *)mem;
	s->sq_base = s->sq_head = sq_tail;
	s->db_word = (uint64_t)sq_tail << 1;
	s->cq_head = cq_head;
	s->phase = phase;
	/* Marks are p+1: position sq_tail's entry holds a value it never
	 * matches (0, or sq_tail+1 - depth*k != sq_tail+1). */
}

/* Host: point a descriptor's shared-state pointers into mem (its address
 * as the GPU sees it). */
GPUNVME_HD void pq_attach(pqueue &q, void *mem)
{
	q.st = (pq_shared *)mem;
	q.ready = (uint32_t *)((uint8_t *)mem + pq_ready_off());
	q.slots = (pq_slot *)((uint8_t *)mem + pq_slots_off(q.depth));
}

/* Largest power of two <= pool bytes per command slot, at most a page, so
 * no slot's list crosses a page (a pool is page aligned). */
GPUNVME_HD uint32_t pq_prp_stride(uint64_t pool_bytes, uint32_t depth)
{
	uint64_t per = depth ? pool_bytes / depth : 0;
	uint32_t s = 4096;

	while (s >= 8 && s > per)
		s >>= 1;
	return s >= 8 ? s : 0;
}

GPUNVME_HD bool pq_failed(const pqueue &q)
{
	return atom::ld32((const uint32_t *)&q.st->error) != 0;
}

GPUNVME_HD void pq_fail(const pqueue &q, int32_t err)
{
	atom::set_error(&q.st->error, err);
}

GPUNVME_HD bool pq_stop(const pqueue &q)
{
	return q.stop && fence::poll_load(q.stop) != 0;
}

#if defined(GPUNVME_DEV_NVIDIA)
/* Warp helpers (NVIDIA; lanes of a warp run apart under independent
 * thread scheduling, so every one names the lanes it takes). */
namespace warp {
GPUNVME_DEV uint32_t active()
{
	uint32_t m;
	asm volatile("activemask.b32 %0;" : "=r"(m));
	return m;
}
/* The lanes of mask whose p is this lane's: lanes of one warp may use
 * different pairs, and only those on one pair may act as one. */
GPUNVME_DEV uint32_t same(uint32_t mask, const void *p)
{
	uint32_t m;
	asm volatile("match.any.sync.b64 %0, %1, %2;"
		     : "=r"(m) : "l"((uint64_t)p), "r"(mask));
	return m;
}
GPUNVME_DEV uint32_t lane()
{
	uint32_t l;
	asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
	return l;
}
GPUNVME_DEV uint32_t popc(uint32_t x)
{
	uint32_t c;
	asm("popc.b32 %0, %1;" : "=r"(c) : "r"(x));
	return c;
}
GPUNVME_DEV uint32_t msb(uint32_t x) /* x != 0 */
{
	uint32_t b;
	asm("bfind.u32 %0, %1;" : "=r"(b) : "r"(x));
	return b;
}
GPUNVME_DEV uint32_t shfl(uint32_t mask, uint32_t v, uint32_t src)
{
	uint32_t r;
	asm volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, %3;"
		     : "=r"(r) : "r"(v), "r"(src), "r"(mask));
	return r;
}
/* A 64-bit value from lane src. */
GPUNVME_DEV uint64_t shfl64(uint32_t mask, uint64_t v, uint32_t src)
{
	return (uint64_t)shfl(mask, (uint32_t)(v >> 32), src) << 32 | shfl(mask, (uint32_t)v, src);
}
GPUNVME_DEV uint32_t ballot(uint32_t mask, bool p)
{
	uint32_t r;
	asm volatile("{\n\t.reg .pred q;\n\t"
		     "setp.ne.u32 q, %1, 0;\n\t"
		     "vote.sync.ballot.b32 %0, q, %2;\n\t}"
		     : "=r"(r) : "r"((uint32_t)p), "r"(mask));
	return r;
}
} /* namespace warp */
#endif

/*
 * Take one number from a 64-bit counter. NVIDIA: the lanes of a warp that
 * arrive together (activemask) for the same counter take theirs with ONE
 * atomic add, the lowest
 * of them adding the count, each lane its rank above the old value: a
 * warp's 32 claims cost one device-scope atomic instead of 32 serialized
 * ones on the same word. (AMD and the host: pq_claim_wave(), one add
 * per wave and pair.)
 */
GPUNVME_HD uint64_t pq_take_number(uint64_t *p)
{
#if defined(GPUNVME_DEV_NVIDIA)
	const uint32_t mask = warp::same(warp::active(), p), me = warp::lane();
	const uint32_t leader = warp::msb(mask & (0u - mask));
	const uint32_t rank = warp::popc(mask & ((1u << me) - 1u));
	uint64_t base = 0;
	if (me == leader)
		base = atom::add64(p, warp::popc(mask));
	return warp::shfl64(mask, base, leader) + rank;
#else
	return atom::add64(p, 1);
#endif
}

/* SQ positions rung so far (the tail the doorbell last carried). */
GPUNVME_HD uint64_t pq_rung(const pq_shared *s)
{
	return atom::ld64(&s->db_word) >> 1;
}

/*
 * Ring the SQ doorbell for every consecutive ready position, if nobody
 * else is doing it (see the top of the file for why nothing is lost).
 * [own_lo, own_hi): positions the caller (with the lanes it rings for)
 * marked before the call; their marks are not read again.
 */
GPUNVME_HD void pq_ring(const pqueue &q, uint64_t own_lo = 0, uint64_t own_hi = 0)
{
	pq_shared *s = q.st;

	for (;;) {
		atom::fence_sc(); /* the caller's mark before the lock check */
		/* Lock and tail in one word: one fetch-or takes the lock and
		 * returns the tail; held already: the holder re-checks after
		 * it unlocks. */
		const uint64_t w = atom::or64_acquire(&s->db_word, 1);
		if (w & 1)
			return;
		const uint64_t t0 = w >> 1;
		uint64_t t = own_lo <= t0 && t0 < own_hi ? own_hi : t0;
		/* Marks 8 at a time (independent loads), then one acquire. */
		for (bool more = true; more && t - t0 < q.depth - 1;) {
			uint32_t m[8];
			for (int i = 0; i < 8; i++)
				m[i] = atom::ld32(&q.ready[(t + i) % q.depth]);
			for (int i = 0; i < 8 && more; i++) {
				if (m[i] == (uint32_t)t + 1 && t - t0 < q.depth - 1)
					t++;
				else
					more = false;
			}
		}
		atom::fence_acquire();
		if (t != t0) {
			atom::red64(&s->sq_doorbells, 1);
			/* release (system) + the store: every marked SQE was
			 * released by its writer before its mark. */
			fence::sq_doorbell_write(q.sq_db, (uint32_t)(t % q.depth));
			fence::doorbell_handoff(); /* performed before the next ringer's */
		}
		atom::st64_release(&s->db_word, t << 1); /* unlock, the new tail */
		atom::fence_sc(); /* the unlock before the re-check */
		if (atom::ld32(&q.ready[t % q.depth]) != (uint32_t)t + 1)
			return;
		own_lo = own_hi = 0;
	}
}

/* The reaper's view of the CQ: head, phase and CQEs consumed so far,
 * read without the lock (a peek) or under it (authoritative). Only the
 * lock holder changes them; the 64-bit count never repeats, so a peek
 * equal to the authoritative view under the lock means nobody consumed
 * anything since the peek. */
struct pq_cqview {
	uint32_t head, phase;
	uint64_t cqes;
	int32_t error; /* read along (same cache line), not compared */
};

GPUNVME_HD bool pq_same_view(const pq_cqview &a, const pq_cqview &b)
{
	return a.head == b.head && a.phase == b.phase && a.cqes == b.cqes;
}

GPUNVME_HD pq_cqview pq_cq_view(const pq_shared *s)
{
	pq_cqview v;
	v.head = atom::ld32(&s->cq_head);
	v.phase = atom::ld32(&s->phase);
	v.cqes = atom::ld64(&s->cqes);
	v.error = (int32_t)atom::ld32((const uint32_t *)&s->error);
	return v;
}

/*
 * Consume whatever the CQ holds, in order: peek (head, phase, count; no
 * lock), poll POLL_BATCH entries at once (one 16-byte load each); nothing
 * new: return 0 without touching the lock. Otherwise take the CQ lock,
 * keep the polled entries only if the view is unchanged, acquire once,
 * route each new CQE to its command's slot, track the SQ head, publish
 * the batch's slots behind one release fence, ring the CQ head doorbell
 * once. Returns CQEs consumed (0: none, someone else holds the lock, or
 * someone reaped since the peek), or a negative error (the pair is
 * poisoned).
 */
GPUNVME_HD int32_t pq_reap_one(const pqueue &q)
{
	pq_shared *s = q.st;
	const pq_cqview peek = pq_cq_view(s);
	const uint32_t nslots = q.depth - 1;
	uint32_t head = peek.head, phase = peek.phase;
	bool polled = false, locked = false;
	uint64_t sqh = 0;
	int32_t err = OK;
	uint32_t n = 0;

	while (err == OK && n < nslots) {
		const void *p[fence::POLL_BATCH];
		uint32_t w[fence::POLL_BATCH][4];
		for (int i = 0; i < fence::POLL_BATCH; i++)
			p[i] = &q.cq[(head + i) % q.depth];
		/* Whole entries, one 16-byte load each, all in flight at once. */
		fence::poll_cqe_batch(p, w);
		uint32_t m = 0, k = nslots - n < (uint32_t)fence::POLL_BATCH
					? nslots - n : (uint32_t)fence::POLL_BATCH;
		while (m < k && cqe_phase(w[m][3]) == (phase ^ (uint32_t)(head + m >= q.depth)))
			m++;
		if (m == 0)
			break;
		if (!polled) {
			/* New entries seen: now the lock, and only if nobody
			 * consumed anything since the peek are they ours. */
			polled = true;
			if (!atom::try_lock(&s->cq_lock))
				return pq_failed(q) ? ERR_IO : 0;
			locked = true;
			sqh = atom::ld64(&s->sq_head);
			if (!pq_same_view(pq_cq_view(s), peek))
				break; /* n == 0: unlock, retry on the next poll */
			if (pq_failed(q)) {
				err = ERR_IO;
				break;
			}
		}
		/* Phases seen (the entries with them): order what follows after
		 * them; every position they consumed was claimed before this. */
		fence::acquire_system();
		const uint64_t claimed = atom::ld64(&s->sq_base) + atom::ld64(&s->cid_ticket);
		uint32_t seq[fence::POLL_BATCH], ok = 0;
		for (; ok < m; ok++) {
			const uint32_t cid = cqe_cid(w[ok][3]);
			const uint32_t hd = w[ok][2] & 0xffffu;
			const uint64_t nh = sqh + (hd + q.depth - (uint32_t)(sqh % q.depth)) % q.depth;
			seq[ok] = cid < nslots ? atom::ld32(&q.slots[cid].seq) : 0;
			if (hd >= q.depth || nh > claimed || cid >= nslots ||
			    (seq[ok] & 3u) != 1u) {
				/* Not a command in flight, or an SQ head past
				 * anything submitted: nothing can be trusted. */
				err = ERR_IO;
				break;
			}
			sqh = nh;
			pq_slot *sl = &q.slots[cid];
			atom::st32(&sl->dw0, w[ok][0]);
			atom::st32(&sl->dw2, w[ok][2]);
			atom::st32(&sl->dw3, w[ok][3]);
		}
		atom::fence_release(); /* the fields before the seqs */
		for (uint32_t i = 0; i < ok; i++)
			atom::st32(&q.slots[cqe_cid(w[i][3])].seq, seq[i] + 1);
		n += ok;
		head += ok;
		if (head >= q.depth) {
			head -= q.depth;
			phase ^= 1u;
		}
		if (ok < (uint32_t)fence::POLL_BATCH)
			break;
	}
	if (n) {
		atom::st32(&s->cq_head, head);
		atom::st32(&s->phase, phase);
		atom::st64(&s->sq_head, sqh);
		atom::st64(&s->cqes, peek.cqes + n); /* == the view under the lock */
		if (err == OK) {
			atom::red64(&s->cq_doorbells, 1);
			fence::cq_doorbell_write(q.cq_db, head);
		}
	}
	if (err != OK)
		pq_fail(q, err);
	if (locked)
		atom::unlock(&s->cq_lock);
	else if (peek.error != OK)
		err = ERR_IO; /* nothing new, and the pair is poisoned */
	return err != OK ? err : (int32_t)n;
}

#if defined(GPUNVME_DEV_NVIDIA)
/*
 * NVIDIA: the lanes of a warp that call pq_reap() together reap together.
 * One of them peeks at the view (pq_cq_view(), no lock); each polls one
 * entry (rank r: head + r, one 16-byte load), so up to 32 entries cost one
 * memory round trip, and the valid prefix is agreed by ballot. Nothing
 * new: done, the lock untouched. Otherwise the leader takes the CQ lock
 * and checks that the view is still the peeked one (else it unlocks and
 * the next poll retries); after acquire_system() each lane of the prefix
 * routes its entry; the lock holder rings the CQ doorbell once and
 * unlocks. Lanes of one warp run apart under
 * independent thread scheduling, so a single lock holder polling for 31
 * spinning lanes was the per-thread API's bottleneck on the H200.
 */

/* A lane of a warp reap that waits for its own ticket (pq_test()): the
 * slot, the ticket's seq, and the slot's seq it read before the reap
 * (owner only when that is the ticket's: the command is in flight). */
struct pq_owner {
	uint32_t slot, tseq, seq0;
};

/* What a waiting lane got straight from the lane that polled its entry. */
struct pq_direct {
	bool got;
	uint32_t w0, w2, w3;
};

/* The lane of rank r (0-based) in mask (bit r+1-th set bit). */
GPUNVME_DEV uint32_t warp_nth(uint32_t mask, uint32_t r)
{
	uint32_t l;
	asm("fns.b32 %0, %1, 0, %2;" : "=r"(l) : "r"(mask), "r"(r + 1));
	return l;
}

/* OR of v over the lanes of mask. */
GPUNVME_DEV uint32_t warp_or(uint32_t mask, uint32_t v)
{
#if __CUDA_ARCH__ >= 800
	uint32_t r;
	asm volatile("redux.sync.or.b32 %0, %1, %2;" : "=r"(r) : "r"(v), "r"(mask));
	return r;
#else
	uint32_t r = 0;
	for (uint32_t b = 0; b < 32; b++)
		if (warp::ballot(mask, (v >> b) & 1u))
			r |= 1u << b;
	return r;
#endif
}

GPUNVME_DEV int32_t pq_reap_warp(const pqueue &q, pq_owner own = {~0u, 0, 1},
				 pq_direct *direct = nullptr)
{
	pq_shared *s = q.st;
	const uint32_t mask = warp::same(warp::active(), q.st), me = warp::lane();
	const uint32_t leader = warp::msb(mask & (0u - mask));
	const uint32_t rank = warp::popc(mask & ((1u << me) - 1u));
	const uint32_t lanes = warp::popc(mask);
	const uint32_t nslots = q.depth - 1;
	/* The peek: the leader reads the view (one cache line), no lock. */
	pq_cqview peek = {0, 0, 0, 0};
	if (me == leader)
		peek = pq_cq_view(s);
	uint32_t head = warp::shfl(mask, peek.head, leader);
	uint32_t phase = warp::shfl(mask, peek.phase, leader);
	const bool poisoned = warp::shfl(mask, (uint32_t)peek.error, leader) != 0;
	if (poisoned)
		return ERR_IO;
	uint64_t sqh = 0, claimed = 0;
	int32_t err = OK;
	uint32_t n = 0;
	bool locked = false, got_mine = false;

	while (err == OK && n < nslots) {
		const uint32_t k = nslots - n < lanes ? nslots - n : lanes;
		const uint32_t at = head + rank; /* < 2 * depth: k <= depth - 1 */
		const cqe *e = &q.cq[at % q.depth];
		uint32_t w[4] = {0, 0, 0, 0};
		if (rank < k)
			fence::poll_cqe(e, w); /* one 16-byte load: the entry */
		const bool ok = rank < k &&
				cqe_phase(w[3]) == (phase ^ (uint32_t)(at >= q.depth));
		const uint32_t bad = warp::ballot(mask, !ok) & mask;
		const uint32_t m = bad ? warp::popc(mask & ((bad & (0u - bad)) - 1u)) : lanes;
		if (m == 0)
			break;
		if (!locked) {
			/* New entries seen: now the lock (one CAS), and only if
			 * nobody consumed anything since the peek are they ours.
			 * What was claimed is read along (a bound on the SQ head;
			 * read again after the acquire when it is short). */
			uint32_t got = 0;
			if (me == leader && atom::try_lock(&s->cq_lock)) {
				sqh = atom::ld64(&s->sq_head);
				claimed = atom::ld64(&s->sq_base) + atom::ld64(&s->cid_ticket);
				const pq_cqview now = pq_cq_view(s);
				got = pq_same_view(now, peek) ? 1u : 2u;
				if (now.error != OK)
					got = 3u;
			}
			got = warp::shfl(mask, got, leader);
			if (got == 0)
				return 0; /* someone else is reaping */
			locked = true;
			if (got == 2u)
				break; /* n == 0: unlock; the next poll retries */
			if (got == 3u) {
				err = ERR_IO;
				break;
			}
			sqh = warp::shfl64(mask, sqh, leader);
			claimed = warp::shfl64(mask, claimed, leader);
		}
		const bool mine = rank < m;
		/* Phases seen, with their entries: order what follows. */
		fence::acquire_system();
		/* A lane waiting for one of these entries (its ticket live:
		 * the slot's seq was its ticket's before the reap) takes it
		 * straight from the lane that polled it: every lane's entry
		 * CID, then each looks for its own slot. */
		const uint32_t key = mine ? cqe_cid(w[3]) : ~0u;
		uint32_t cids[32];
#pragma unroll
		for (uint32_t l = 0; l < 32; l++)
			cids[l] = warp::shfl(mask, key, (mask >> l) & 1u ? l : leader);
		const uint32_t routers = warp::ballot(mask, mine);
		uint32_t hit = 32;
		if (own.seq0 == own.tseq && !got_mine) {
#pragma unroll
			for (uint32_t l = 0; l < 32; l++)
				if (((routers >> l) & 1u) && cids[l] == own.slot)
					hit = l;
		}
		const uint32_t taken = warp_or(mask, hit < 32 ? 1u << hit : 0u);
		const bool direct_to_owner = mine && ((taken >> me) & 1u);
		/* The rest go through their slots: in flight (seq 4r+1) or
		 * nothing can be trusted. */
		uint32_t seq = 0;
		bool wrong = false;
		if (mine) {
			const uint32_t cid = cqe_cid(w[3]);
			if (!direct_to_owner && cid < nslots)
				seq = atom::ld32(&q.slots[cid].seq);
			wrong = (w[2] & 0xffffu) >= q.depth || cid >= nslots ||
				(!direct_to_owner && (seq & 3u) != 1u);
		}
		/* The SQ head after the batch: the last entry's (they only
		 * grow in CQ order); never past what was claimed. */
		const uint32_t src = warp_nth(mask, m - 1);
		const uint32_t hd = warp::shfl(mask, w[2] & 0xffffu, src);
		const uint64_t nh = sqh + (hd + q.depth - (uint32_t)(sqh % q.depth)) % q.depth;
		if (nh > claimed) {
			/* Read before the acquire: maybe stale; every position
			 * the controller consumed was claimed before now. */
			if (me == leader)
				claimed = atom::ld64(&s->sq_base) + atom::ld64(&s->cid_ticket);
			claimed = warp::shfl64(mask, claimed, leader);
		}
		if (warp::ballot(mask, mine && wrong) || hd >= q.depth || nh > claimed) {
			err = ERR_IO;
			break;
		}
		if (mine && !direct_to_owner) {
			pq_slot *sl = &q.slots[cqe_cid(w[3])];
			atom::st32(&sl->dw0, w[0]);
			atom::st32(&sl->dw2, w[2]);
			atom::st32(&sl->dw3, w[3]);
			atom::fence_release(); /* the fields before the seq */
			atom::st32(&sl->seq, seq + 1);
		}
		/* The owners' words, from the lanes that polled them. */
		const uint32_t f = hit < 32 ? hit : me;
		const uint32_t w0 = warp::shfl(mask, w[0], f);
		const uint32_t w2 = warp::shfl(mask, w[2], f);
		const uint32_t w3 = warp::shfl(mask, w[3], f);
		if (hit < 32) {
			got_mine = true;
			if (direct) {
				direct->got = true;
				direct->w0 = w0;
				direct->w2 = w2;
				direct->w3 = w3;
			}
		}
		sqh = nh;
		n += m;
		head += m;
		if (head >= q.depth) {
			head -= q.depth;
			phase ^= 1u;
		}
		if (m < lanes)
			break;
	}
	if (me == leader && locked) {
		if (n) {
			atom::st32(&s->cq_head, head);
			atom::st32(&s->phase, phase);
			atom::st64(&s->sq_head, sqh);
			atom::st64(&s->cqes, peek.cqes + n); /* == the view under the lock */
			if (err == OK) {
				atom::red64(&s->cq_doorbells, 1);
				fence::cq_doorbell_write(q.cq_db, head);
				fence::doorbell_handoff();
			}
		}
		if (err != OK)
			pq_fail(q, err);
		atom::unlock(&s->cq_lock);
	}
	/* The pollers' acquire before the owners' payload loads and slot
	 * release (a warp barrier orders memory among its lanes). */
	if (n)
		asm volatile("bar.warp.sync %0;" :: "r"(mask) : "memory");
	return err != OK ? err : (int32_t)n;
}
#endif

/* Reap: the warp's lanes together on NVIDIA, one thread elsewhere. */
GPUNVME_HD int32_t pq_reap(const pqueue &q)
{
#if defined(GPUNVME_DEV_NVIDIA)
	return pq_reap_warp(q);
#else
	return pq_reap_one(q);
#endif
}

/* A submitted command: its slot (= command ID) and the slot's seq. */
struct pq_ticket {
	uint32_t slot;
	uint32_t seq;
};

/*
 * Tickets the calling thread holds while it claims another: ticket c waits
 * for the slot's previous round (ticket c - (depth-1)) to be taken, and on
 * a shared pair that may be one of the caller's own. Given them, the claim
 * takes such a ticket's completion itself (rc[i] from ERR_AGAIN to its
 * result) instead of waiting for itself until the deadline. pq_io() does.
 * On AMD the ticket may be one a lane of the caller's own wave needs: every
 * lane of the wave keeps taking its held tickets until the whole wave has
 * its slots (pq_claim_wave()).
 */
struct pq_held {
	const pq_ticket *t;
	int32_t *rc; /* ERR_AGAIN: still to be taken */
	uint32_t n;
};

GPUNVME_HD int32_t pq_take(const pqueue &q, pq_ticket t, cqe *out);

/* After poll i of a wait or spin found nothing: ERR_AGAIN to poll again, or the
 * failure (the stop flag, the deadline), which poisons the pair. */
GPUNVME_HD int32_t pq_wait_go_on(const pqueue &q, deadline &d, uint32_t i)
{
	int32_t err = ERR_AGAIN;
	if (i % PQ_STOP_EVERY == 0 && pq_stop(q))
		err = ERR_STOPPED;
	int st = d.step(wall_ticks());
	if (st == DEADLINE_EXPIRED)
		err = ERR_TIMEOUT;
	else if (st == DEADLINE_CLOCK_STUCK)
		err = ERR_CLOCK;
	if (err != ERR_AGAIN)
		pq_fail(q, err);
	return err;
}

#if defined(GPUNVME_DEV_NVIDIA)
/*
 * Spin until *p == want, reaping meanwhile; bounded by the deadline and the
 * stop flag (read every PQ_STOP_EVERY polls). A failure poisons the pair.
 * (NVIDIA's claim; AMD's and the host's claim loop is pq_claim_wave().)
 */
GPUNVME_HD int32_t pq_spin(const pqueue &q, const uint32_t *p, uint32_t want,
			   const pq_held *h = nullptr)
{
	deadline d = deadline_start(wall_ticks(), q.timeout_ticks, q.tick_hz);

	for (uint32_t i = 1;; i++) {
		if (atom::ld32_acquire(p) == want)
			return OK;
		for (uint32_t k = 0; h && k < h->n; k++)
			if (h->rc[k] == ERR_AGAIN &&
			    atom::ld32_acquire(&q.slots[h->t[k].slot].seq) == h->t[k].seq + 1)
				h->rc[k] = pq_take(q, h->t[k], nullptr);
		/* The reap's peek reads the pair's error word too: a poisoned
		 * pair ends here with ERR_IO. */
		int32_t r = pq_reap(q);
		if (r < 0)
			return r;
		if (r > 0 && atom::ld32_acquire(p) == want)
			return OK;
		const int32_t err = pq_wait_go_on(q, d, i);
		if (err != ERR_AGAIN)
			return err;
		if (r == 0 && q.backoff)
			pq_pause();
	}
}
#endif

/* Take a ticket: its command slot, the seq the slot is free at, and its
 * SQ position; waits until the slot is free. */
#if defined(GPUNVME_DEV_NVIDIA)
GPUNVME_HD int32_t pq_claim(const pqueue &q, uint32_t *slot, uint32_t *seq,
			    uint64_t *pos, const pq_held *h = nullptr)
{
	if (q.depth < 2 || q.tick_hz == 0 || !q.st)
		return ERR_INVAL;
	/* Error word, base and ticket issued together (no load waits for
	 * another); a ticket taken on a poisoned pair is never posted, and
	 * nothing on that pair is waited for again. */
	const bool failed = pq_failed(q);
	const uint64_t base = atom::ld64(&q.st->sq_base);
	const uint32_t nslots = q.depth - 1;
	const uint64_t c = pq_take_number(&q.st->cid_ticket);

	if (failed)
		return ERR_IO;
	*slot = (uint32_t)(c % nslots);
	*seq = (uint32_t)(c / nslots) * 4u;
	*pos = base + c;
	return pq_spin(q, &q.slots[*slot].seq, *seq, h);
}
#else
/*
 * AMD (and the host, whose threads are one-lane waves unless a harness
 * joins them, wave.h): the claim of every active lane of the wave at once.
 * Every active lane calls it; want: this lane takes a ticket (a lane that
 * takes none still serves its held tickets while the others claim).
 *
 * 1. One block per pair: the lowest lane left broadcasts its pair, the
 *    lanes on it take one contiguous block of tickets with ONE atomic add
 *    (by lane order), and the loop goes on with the lanes on other pairs.
 *    More lanes on one pair than it has command slots: each of them gets
 *    ERR_INVAL at once, nothing taken (they would wait for each other).
 * 2. The wave stays in the claim loop until every lane's slot is free:
 *    a lane whose slot is free keeps serving its held tickets (and
 *    reaping) instead of sitting masked, so a lane of the wave can wait
 *    for a ticket another lane holds; the loop exits by ballot, so all
 *    lanes leave it together.
 * Why nothing waits for itself: ticket c waits for ticket c - (depth-1)
 * to be taken; with the block at most depth-1 long, that ticket is older
 * than the block, so it is either held by a lane in this loop (served
 * here, if passed as held), by another wave or thread (it progresses on
 * its own), or waited for by a lane that is in pq_wait() (which waits only
 * for its own completion).
 */
GPUNVME_HD int32_t pq_claim_wave(const pqueue &q, bool want, uint32_t *slot,
				 uint32_t *seq, uint64_t *pos, const pq_held *h)
{
	const bool valid = q.depth >= 2 && q.tick_hz != 0 && q.st;
	const bool need = want && valid;
	const uint32_t nslots = valid ? q.depth - 1 : 1;
	int32_t rc = want && !valid ? ERR_INVAL : OK;
	/* Error word and base issued before the add (no load waits for
	 * another); a ticket taken on a poisoned pair is never posted. */
	const bool failed = need && pq_failed(q);
	const uint64_t base = need ? atom::ld64(&q.st->sq_base) : 0;
	const uint32_t me = wave::lane();
	uint64_t c = 0;

	for (uint64_t todo = wave::ballot(need); todo;) {
		const uint32_t lead = (uint32_t)__builtin_ctzll(todo);
		const uint64_t key = wave::bcast64((uint64_t)(uintptr_t)q.st, lead);
		const uint64_t same =
			wave::ballot(need && (uint64_t)(uintptr_t)q.st == key) & todo;
		const uint32_t n = (uint32_t)__builtin_popcountll(same);
		uint64_t b = ~0ull; /* refused */
		if (me == lead && n <= nslots)
			b = atom::add64(&q.st->cid_ticket, n);
		b = wave::bcast64(b, lead);
		if ((same >> me) & 1u) {
			if (b == ~0ull)
				rc = ERR_INVAL;
			else
				c = b + wave::rank(same);
		}
		todo &= ~same;
	}
	bool pending = need && rc == OK;
	if (pending && failed) {
		rc = ERR_IO;
		pending = false;
	}
	if (pending) {
		*slot = (uint32_t)(c % nslots);
		*seq = (uint32_t)(c / nslots) * 4u;
		*pos = base + c;
	}
	const bool serve = valid && h && h->n;
	deadline d = deadline_start(wall_ticks(), q.timeout_ticks, q.tick_hz);

	for (uint32_t i = 1;; i++) {
		if (pending && atom::ld32_acquire(&q.slots[*slot].seq) == *seq)
			pending = false;
		for (uint32_t k = 0; serve && k < h->n; k++)
			if (h->rc[k] == ERR_AGAIN &&
			    atom::ld32_acquire(&q.slots[h->t[k].slot].seq) == h->t[k].seq + 1)
				h->rc[k] = pq_take(q, h->t[k], nullptr);
		if (!wave::ballot(pending))
			return rc; /* every lane of the wave at once */
		/* The reap's peek reads the pair's error word too: a poisoned
		 * pair ends here with ERR_IO. */
		const int32_t r = pending || serve ? pq_reap(q) : 0;
		if (!pending)
			continue;
		if (r < 0) {
			rc = r;
			pending = false;
		} else if (r > 0 && atom::ld32_acquire(&q.slots[*slot].seq) == *seq) {
			pending = false;
		} else {
			const int32_t err = pq_wait_go_on(q, d, i);
			if (err != ERR_AGAIN) {
				rc = err;
				pending = false;
			} else if (r == 0 && q.backoff) {
				pq_pause();
			}
		}
	}
}

GPUNVME_HD int32_t pq_claim(const pqueue &q, uint32_t *slot, uint32_t *seq,
			    uint64_t *pos, const pq_held *h = nullptr)
{
	return pq_claim_wave(q, true, slot, seq, pos, h);
}
#endif

/* Post a claimed slot's command (e.cid is set here) and ring. */
GPUNVME_HD void pq_post(const pqueue &q, uint32_t slot, uint32_t seq,
			uint64_t p, sqe e, pq_ticket *t)
{
	e.cid = (uint16_t)slot;
	atom::st32(&q.slots[slot].seq, seq + 1);
#if defined(GPUNVME_DEV_NVIDIA)
	/* The warp's lanes that post together on this pair: one of them
	 * rings for all (after bar.warp.sync, which orders every lane's mark
	 * before the ringer's fence_sc, as if each lane had called pq_ring()
	 * itself). When their positions are consecutive (one claim), the
	 * ringer knows they are marked without reading the marks. */
	const uint32_t mask = warp::same(warp::active(), q.st), me = warp::lane();
	const uint32_t first = warp::msb(mask & (0u - mask)), last = warp::msb(mask);
	const uint32_t rank = warp::popc(mask & ((1u << me) - 1u));
	const uint64_t p0 = warp::shfl64(mask, p, first);
	const bool run = warp::ballot(mask, p == p0 + rank) == mask;
#endif
	const uint32_t at = (uint32_t)(p % q.depth);
	sqe_store(&q.sq[at], e);
	fence::release_system(); /* SQE (and PRP list) out before the mark */
	atom::st32(&q.ready[at], (uint32_t)p + 1);
#if defined(GPUNVME_DEV_NVIDIA)
	asm volatile("bar.warp.sync %0;" :: "r"(mask) : "memory");
	if (me == last) {
		if (run)
			pq_ring(q, p0, p + 1);
		else
			pq_ring(q);
	}
#else
	pq_ring(q, p, p + 1);
#endif
	t->slot = slot;
	t->seq = seq + 1;
}

/* Submit e (its PRPs as given; cid is overwritten with the slot). */
GPUNVME_HD int32_t pq_submit(const pqueue &q, const sqe &e, pq_ticket *t)
{
	uint32_t slot, seq;
	uint64_t pos;
	int32_t rc = pq_claim(q, &slot, &seq, &pos);

	if (rc != OK)
		return rc;
	pq_post(q, slot, seq, pos, e, t);
	return OK;
}

/* PRP list entries a transfer of len bytes at buffer offset off needs. */
GPUNVME_HD uint64_t prp_list_entries(uint64_t off, uint64_t len)
{
	uint64_t first = 4096 - (off & 4095);

	return len <= first ? 0 : (len - first + 4095) / 4096;
}

/* Can pq_submit_io() take this transfer on q? */
GPUNVME_HD int32_t pq_io_check(const pqueue &q, uint64_t npages, uint64_t off,
			       uint64_t len)
{
	if (len == 0 || (off & 3) || off + len > npages * 4096 ||
	    (q.max_transfer && len > q.max_transfer))
		return ERR_INVAL;
	uint64_t n = prp_list_entries(off, len);
	if (n > 1 && (q.prp_stride == 0 || n * 8 > q.prp_stride))
		return ERR_INVAL;
	return OK;
}

/*
 * Read/write len bytes at byte offset off of a buffer given page by page
 * (page_dma[i]: the DMA address of its i-th 4 KiB page, as MAP_HOST and
 * MAP_DMABUF return them), through PRP1, PRP2 or a PRP list the device
 * builds in the command slot's part of the pair's PRP pool. cdw12_flags:
 * NVME_RW_FUA and/or NVME_RW_LR (array.h's flush with FUA).
 */
GPUNVME_HD int32_t pq_submit_io_if(const pqueue &q, bool want, uint8_t opc,
				   uint32_t nsid, uint64_t slba, uint16_t nlb0,
				   const uint64_t *page_dma, uint64_t npages,
				   uint64_t off, uint32_t len, pq_ticket *t,
				   const pq_held *held, uint32_t cdw12_flags = 0)
{
	int32_t rc = want ? pq_io_check(q, npages, off, len) : OK;
	uint32_t slot = 0, seq = 0;
	uint64_t pos = 0;
#if defined(GPUNVME_DEV_NVIDIA)
	if (!want || rc != OK)
		return rc;
	rc = pq_claim(q, &slot, &seq, &pos, held);
#else
	/* Every active lane joins the wave's claim, the ones without a
	 * command (or with a bad one) to serve their held tickets. */
	const int32_t crc = pq_claim_wave(q, want && rc == OK, &slot, &seq, &pos, held);
	if (!want)
		return OK;
	if (rc == OK)
		rc = crc;
#endif
	if (rc != OK)
		return rc;
	const uint64_t pg = off / 4096;
	const uint64_t prp1 = page_dma[pg] + (off & 4095);
	const uint64_t n = prp_list_entries(off, len);
	uint64_t prp2 = 0;

	if (n == 1) {
		prp2 = page_dma[pg + 1];
	} else if (n > 1) {
		const uint64_t at = (uint64_t)slot * q.prp_stride;
		uint64_t *list = (uint64_t *)((uint8_t *)q.prp_va + at);
		for (uint64_t i = 0; i < n; i++)
			list[i] = page_dma[pg + 1 + i];
		prp2 = q.prp_page_dma ? q.prp_page_dma[at / 4096] + at % 4096
				      : q.prp_dma + at;
	}
	pq_post(q, slot, seq, pos, sqe_rw(opc, 0, nsid, slba, nlb0, prp1, prp2, cdw12_flags), t);
	return OK;
}

GPUNVME_HD int32_t pq_submit_io(const pqueue &q, uint8_t opc, uint32_t nsid,
				uint64_t slba, uint16_t nlb0,
				const uint64_t *page_dma, uint64_t npages,
				uint64_t off, uint32_t len, pq_ticket *t,
				const pq_held *held = nullptr)
{
	return pq_submit_io_if(q, true, opc, nsid, slba, nlb0, page_dma, npages,
			       off, len, t, held);
}

/* A completion's dwords 0, 2 and 3 to *out (if given); OK or its status. */
GPUNVME_HD int32_t pq_result(uint32_t dw0, uint32_t dw2, uint32_t dw3, cqe *out)
{
	if (out) {
		out->dw0 = dw0;
		out->dw1 = 0;
		out->sqhd = (uint16_t)dw2;
		out->sqid = (uint16_t)(dw2 >> 16);
		out->cid = cqe_cid(dw3);
		out->sf = (uint16_t)(dw3 >> 16);
	}
	return status_ok(cqe_status(dw3)) ? OK : (int32_t)cqe_status(dw3);
}

/*
 * Completed: copy it out and free the slot for its next round. The slot
 * is freed by a compare-and-swap from the completed seq (t.seq + 1), after
 * the fields were read: a second waiter on the same ticket, which read
 * the fields after the first had freed the slot and a new round had
 * completed, fails it and gets ERR_INVAL instead of the next round's
 * result (and never rewinds the slot).
 */
GPUNVME_HD int32_t pq_take(const pqueue &q, pq_ticket t, cqe *out)
{
	pq_slot *sl = &q.slots[t.slot];
	const uint32_t dw0 = atom::ld32(&sl->dw0);
	const uint32_t dw2 = atom::ld32(&sl->dw2);
	const uint32_t v = atom::ld32(&sl->dw3);

	if (!atom::cas32_release(&sl->seq, t.seq + 1, t.seq + 3))
		return ERR_INVAL; /* taken already: a spent ticket */
	return pq_result(dw0, dw2, v, out);
}

#if defined(GPUNVME_DEV_NVIDIA)
/*
 * One poll of ticket t (live), or, not live, a lane that already has its
 * result lending itself to the warp's reap: every lane of a waiting group
 * calls this together, so the reap polls with all of them.
 */
GPUNVME_DEV int32_t pq_test_warp(const pqueue &q, pq_ticket t, cqe *out, bool live)
{
	/* The slot's seq is loaded relaxed and first used after the reap's
	 * peek went out (one round trip for both); the reap hands this lane
	 * its own entry when it polls it while the ticket is live. */
	const uint32_t seq = live ? atom::ld32(&q.slots[t.slot].seq) : 0;
	pq_direct d = {false, 0, 0, 0};
	const int32_t r = pq_reap_warp(q, live ? pq_owner{t.slot, t.seq, seq} : pq_owner{~0u, 0, 1},
				       &d);
	if (!live)
		return ERR_AGAIN;
	if (d.got) {
		/* Free for its next round (after the reap's warp barrier,
		 * which ordered the poller's acquire before this): from the
		 * live seq, never routed; a second lane on the same ticket
		 * fails it (ERR_INVAL), as in pq_take(). */
		if (!atom::cas32_release(&q.slots[t.slot].seq, t.seq, t.seq + 3))
			return ERR_INVAL;
		return pq_result(d.w0, d.w2, d.w3, out);
	}
	if (seq == t.seq + 1) {
		atom::fence_acquire(); /* the routed fields after their seq */
		return pq_take(q, t, out);
	}
	if (seq != t.seq)
		return ERR_INVAL; /* not a live ticket */
	if (r < 0)
		return r;
	if (r > 0 && atom::ld32_acquire(&q.slots[t.slot].seq) == t.seq + 1)
		return pq_take(q, t, out);
	return ERR_AGAIN;
}
#endif

/*
 * Has ticket t completed? OK or its NVMe status (> 0) when it has (the
 * ticket is then spent), ERR_AGAIN when not yet, < 0 on failure.
 */
GPUNVME_HD int32_t pq_test(const pqueue &q, pq_ticket t, cqe *out)
{
	if (t.slot >= q.depth - 1)
		return ERR_INVAL;
#if defined(GPUNVME_DEV_NVIDIA)
	return pq_test_warp(q, t, out, true);
#else
	uint32_t seq = atom::ld32_acquire(&q.slots[t.slot].seq);

	if (seq == t.seq + 1)
		return pq_take(q, t, out);
	if (seq != t.seq)
		return ERR_INVAL; /* not a live ticket */
	/* Nothing consumed by this reap: the slot was just checked (another
	 * reaper's routing is seen on the next call); the reap's peek read
	 * the pair's error word (ERR_IO when poisoned). */
	int32_t r = pq_reap(q);
	if (r < 0)
		return r;
	if (r > 0 && atom::ld32_acquire(&q.slots[t.slot].seq) == t.seq + 1)
		return pq_take(q, t, out);
	return ERR_AGAIN;
#endif
}

/*
 * Wait for ticket t, bounded (clock.h) and abortable (stop flag).
 *
 * linger_ns (NVIDIA): the lanes of a warp that enter pq_wait() together
 * leave it together once all of them are done, or, when some are still
 * waiting linger_ns nanoseconds (the fixed-rate clock, tick_hz) after the
 * first of them was seen done, the done ones leave then. A done lane keeps
 * polling for the others meanwhile. So a warp's lanes stay one group for
 * their next claim, ring and reap instead of splitting as their
 * completions arrive; the price is that a lane may return up to linger_ns
 * after its own completion. Bounded, so a lane whose own progress after
 * the wait is what another lane waits for (it takes another ticket of its
 * own, say) holds it up for at most linger_ns, never into its deadline.
 * 0: leave as soon as the own completion is taken (the behaviour before
 * the linger). Elsewhere it does nothing (an AMD wavefront's lanes leave a
 * loop together anyway; the host's lanes are threads).
 */
GPUNVME_HD int32_t pq_wait(const pqueue &q, pq_ticket t, cqe *out,
			   uint32_t linger_ns = PQ_LINGER_NS)
{
	if (q.tick_hz == 0)
		return ERR_INVAL;
	deadline d = deadline_start(wall_ticks(), q.timeout_ticks, q.tick_hz);
#if defined(GPUNVME_DEV_NVIDIA)
	if (t.slot >= q.depth - 1)
		return ERR_INVAL;
	uint32_t mask = warp::active();
	/* At most 4.3 s asked, tick_hz at most a few GHz: no overflow. */
	const uint64_t linger = (uint64_t)linger_ns * q.tick_hz / 1000000000ull;
	uint64_t since = 0;
	bool lingering = false;
	int32_t rc = ERR_AGAIN;

	for (uint32_t i = 1;; i++) {
		const bool live = rc == ERR_AGAIN;
		const int32_t r = pq_test_warp(q, t, out, live);
		if (live)
			rc = r != ERR_AGAIN ? r : pq_wait_go_on(q, d, i);
		/* Every lane of mask computes the same pending set, so they
		 * agree on who leaves: all, the done ones, or none. */
		const uint32_t pending = warp::ballot(mask, rc == ERR_AGAIN);
		if (pending == 0)
			return rc;
		if (pending != mask) {
			/* From when the first lane was seen done; the lanes
			 * read their clocks apart, so they leave when any of
			 * them sees the linger over (a ballot: all agree). */
			const uint64_t now = wall_ticks();
			if (!lingering) {
				lingering = true;
				since = now;
			}
			if (warp::ballot(mask, now - since >= linger)) {
				if (rc != ERR_AGAIN)
					return rc;
				mask = pending;
				lingering = false;
			}
		}
		if (q.backoff)
			pq_pause();
	}
#else
	(void)linger_ns;
	for (uint32_t i = 1;; i++) {
		int32_t rc = pq_test(q, t, out);
		if (rc != ERR_AGAIN)
			return rc;
		rc = pq_wait_go_on(q, d, i);
		if (rc != ERR_AGAIN)
			return rc;
		if (q.backoff)
			pq_pause();
	}
#endif
}

/*
 * Io-style: a transfer of any length, split at the pair's largest transfer
 * (MDTS; a PRP list must also fit the slot's share of the pool) into
 * commands of whole LBAs, up to `window` (<= 8) in flight from this thread.
 * Returns OK or the first failure (NVMe status > 0, or < 0); every
 * submitted command is waited for either way.
 */
GPUNVME_HD int32_t pq_io(const pqueue &q, uint8_t opc, uint32_t nsid,
			 uint64_t slba, uint32_t lba_shift,
			 const uint64_t *page_dma, uint64_t npages, uint64_t off,
			 uint64_t len, uint32_t window)
{
	const uint64_t lba = 1ull << lba_shift;
	uint64_t chunk = q.max_transfer ? q.max_transfer : (1u << 21);

	if (q.prp_stride) {
		/* PRP1's page plus stride/8 list entries. */
		uint64_t by_list = (uint64_t)(q.prp_stride / 8) * 4096;
		chunk = chunk < by_list ? chunk : by_list;
	} else if (chunk > 4096) {
		chunk = 4096; /* no pool: PRP1 + PRP2 from a page start */
	}
	chunk = chunk / lba * lba;
	if (len % lba || chunk == 0 || window == 0)
		return ERR_INVAL;
	if (chunk > (65536ull << lba_shift))
		chunk = 65536ull << lba_shift;
	window = window > 8 ? 8 : window;
	pq_ticket t[8];
	int32_t trc[8];
	uint32_t head = 0, live = 0;
	int32_t first = OK;

	for (uint64_t done = 0; done < len || live;) {
		/* Every lane still in this loop joins one claim per pass (AMD:
		 * the lanes of a wave; pq_claim_wave()), the ones with nothing
		 * to submit now serving their held tickets meanwhile, so no
		 * lane claims while another lane of its wave holds a live
		 * ticket it could not serve. */
		const bool sub = done < len && live < window && first == OK;
		const uint64_t n = len - done < chunk ? len - done : chunk;
		/* Our live tickets, in ring order from head, so the claim can
		 * take one that stands in its own way. */
		pq_ticket ht[8];
		int32_t hrc[8];
		for (uint32_t i = 0; i < live; i++) {
			ht[i] = t[(head + i) % 8];
			hrc[i] = trc[(head + i) % 8];
		}
		pq_held held = {ht, hrc, live};
		const uint32_t at = (head + live) % 8;
		int32_t rc = pq_submit_io_if(q, sub, opc, nsid, slba + (done >> lba_shift),
					     (uint16_t)((n >> lba_shift) - 1),
					     page_dma, npages, off + done,
					     (uint32_t)n, &t[at], &held);
		for (uint32_t i = 0; i < live; i++)
			trc[(head + i) % 8] = hrc[i];
		if (sub) {
			if (rc != OK) {
				first = rc;
				continue;
			}
			trc[at] = ERR_AGAIN;
			live++;
			done += n;
			continue;
		}
		if (!live)
			break;
		rc = trc[head] != ERR_AGAIN ? trc[head] : pq_wait(q, t[head], nullptr);
		if (rc != OK && first == OK)
			first = rc;
		if (rc < 0)
			break; /* poisoned: the rest can no longer be waited for */
		head = (head + 1) % 8;
		live--;
	}
	return first;
}

} /* namespace gpunvme */

#endif /* GPUNVME_PQUEUE_H */
