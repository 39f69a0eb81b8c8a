/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * array.h - gpunvme::array<T>: a[i] from device code, through a page cache
 * in GPU memory, over one or several NVMe controllers (stripe or
 * replicate), on the per-thread API (pqueue.h). Same source for AMD,
 * NVIDIA and the host (threads as lanes).
 *
 * The array is bytes 0 .. bytes-1 cut into pages of 2^page_shift bytes
 * (4 KiB to 64 KiB). Page p lives on one controller (ARRAY_STRIPE: chunk
 * c = p / chunk_pages on controller c % n_ctrl) or on all of them
 * (ARRAY_REPLICATE: read from one whose pair is healthy, written back to
 * every one), at the controller's base_lba.
 *
 * The cache: n_frames frames of one page each in one buffer (frames),
 * mapped for every controller (frame_dma: the controller's DMA address of
 * every 4 KiB page of it). Frames are grouped in n_sets sets of `ways`
 * (1..16) frames; page p may only be in set hash(p) % n_sets, so a lookup
 * reads one set's state words (8 ways: one 64-byte line) and no table
 * grows with the array. One 64-bit state word per frame:
 *     tag (page + 1, 0: none) << 26 | DEAD | ERROR | WB | DIRTY | BUSY |
 *     VALID | reference count (20 bits)
 * A hit adds a reference with one atomic add (acquire) and checks the tag
 * the add returned (a stray reference on a frame that changed meanwhile
 * is taken back: every transition below is an add or a compare-and-swap
 * from the exact value seen, so it cannot be lost). A miss takes the set's
 * lock (one compare-and-swap, held for one scan, never across I/O),
 * looks again (another lane may have installed the page meanwhile: a page
 * is never in two frames), and takes a victim by the set's clock hand: a
 * frame with no reference and neither BUSY, WB nor DEAD (so a referenced
 * or loading frame is never evicted), clean first; it becomes
 * (page, BUSY, one reference) and the lane that took it loads it: one
 * read through the per-thread API (PRP1/PRP2 or a PRP list in the pair's
 * pool), fence::payload_acquire(), then VALID (release). Lanes that find
 * the page BUSY hold a reference and wait on the state word, not on a
 * command. When only dirty frames are free, the lane writes one back
 * first (WB: readers may go on reading it, a writer sets DIRTY again) and
 * looks again. write(i, v) loads the page if needed, stores v and sets
 * DIRTY (release); flush() writes every dirty frame back (FUA if asked).
 *
 * Coalescing: the lanes of a warp/wave that want the same page act as one:
 * on NVIDIA match.any on the page, on AMD (and the host) a peel (the
 * lowest lane left broadcasts its page, readlane, the lanes with it are
 * its group); the group's leader looks the page up (and loads it: one
 * command however many lanes want it), every lane of the group reads its
 * element, then the leader drops the group's one reference.
 *
 * Errors are values, never hangs: every wait is bounded (a command by its
 * pair's deadline, pqueue.h; a page another lane loads, a set lock or a
 * free frame by 3 x the array's timeout, on the fixed-rate clock, capped;
 * the host's stop flag ends them all). read()/write() return OK, an NVMe
 * status (> 0, the page's command failed: nothing is cached, the next
 * access tries again), ERR_TIMEOUT / ERR_STOPPED / ERR_CLOCK (the wait
 * for the page's command or for another lane's load ended), ERR_IO (the
 * controller's pair is poisoned: the host must recreate it), ERR_NOFRAME
 * (no frame of the page's set could be freed in time: every one was
 * referenced, loading or being written back), ERR_INVAL (an index outside
 * the array, or a page the pair cannot carry in one command). A frame
 * whose command ended without a completion (timeout, stop, poisoned pair)
 * may still be written by the controller later, so it is never used again
 * (DEAD) until the host resets the cache; the page itself is not cached,
 * so a replicated page is read from a healthy controller next time.
 *
 * Liveness on AMD (a wave's lanes run in lockstep, a lane done with a loop
 * waits masked): every lane of the wave stays in one loop until all of
 * them have their page, and each pass of it does one non-blocking step of
 * each lane (look up, try the set lock, poll its command with pq_test(),
 * check a page another wave loads) and then, when any lane has a command
 * to send, the wave's claim together (pq_claim_wave(): a lane with a live
 * command passes it as held, so a claim that needs its slot takes it).
 * A lane holds at most one command at a time, and after coalescing a wave
 * has at most one lane per page: per pair, at most 64 claims of a wave at
 * once, so pairs of depth >= 65 for wave64 (33 for wave32 and NVIDIA's
 * warps; smaller: ERR_INVAL, never a wait).
 *
 * Why no CID pool (review s3, 3.6: a ticket's slot is its command ID and
 * its mailbox, freed when the ticket is taken, so one slow taker stalls
 * its pair): the array's only ticket holders are lanes in the loop above,
 * which poll their one command and take it as soon as it completes
 * (NVIDIA: pq_wait()); a lane that waits for a page someone else loads
 * waits on the frame's state word and holds no ticket. So no ticket is
 * held while its holder does anything else, and decoupling CIDs from SQ
 * positions (a CQ larger than the SQ: a UAPI change) would buy the array
 * nothing. It would matter for callers of pq_test() who compute between
 * submit and take; that is pqueue.h's limit, documented there.
 *
 * Memory: frames are payload (the SSD writes them while kernels run): on
 * RDNA they must be uncached or fine-grained (gpunvme-gpu's
 * Gpu::alloc_payload()); the loader's fence::payload_acquire() orders its
 * completion before VALID, and a hit's acquire (the reference add) orders
 * VALID before the data loads. That a coarse-grained CDNA L2 line a peer's
 * DMA overwrote is dropped by the loader's system-scope acquire is the
 * payload contract's open point (kernels/README.md, section 2).
 */
#ifndef GPUNVME_ARRAY_H
#define GPUNVME_ARRAY_H

#include "clock.h"
#include "compat.h"
#include "fence.h"
#include "nvme.h"
#include "pqueue.h"
#include "queue.h"
#include "wave.h"

namespace gpunvme {

constexpr int32_t ERR_NOFRAME = -105; /* ENOBUFS: no frame of the set could be freed */

enum : uint32_t {
	ARRAY_STRIPE = 0,    /* page p on controller (p / chunk_pages) % n_ctrl */
	ARRAY_REPLICATE = 1, /* every page on every controller */
};

constexpr uint32_t ARRAY_MAX_WAYS = 16;
constexpr uint32_t ARRAY_MIN_PAGE_SHIFT = 12; /* 4 KiB */
constexpr uint32_t ARRAY_MAX_PAGE_SHIFT = 16; /* 64 KiB */

/* The frame state word (see the top of the file). */
namespace fstate {
constexpr uint64_t REF = 1;
constexpr uint64_t REFS = (1ull << 20) - 1;
constexpr uint64_t VALID = 1ull << 20;
constexpr uint64_t BUSY = 1ull << 21;  /* being loaded by the lane that installed it */
constexpr uint64_t DIRTY = 1ull << 22; /* written since its last write-back */
constexpr uint64_t WB = 1ull << 23;    /* being written back */
constexpr uint64_t ERROR = 1ull << 24; /* its load failed: ferr holds why */
constexpr uint64_t DEAD = 1ull << 25;  /* its command never completed: never reused */
constexpr uint32_t TAG_SHIFT = 26;
constexpr uint64_t MAX_PAGES = (1ull << (64 - TAG_SHIFT)) - 2;
} /* namespace fstate */

GPUNVME_HD uint64_t fs_tag(uint64_t s) { return s >> fstate::TAG_SHIFT; }
GPUNVME_HD uint32_t fs_refs(uint64_t s) { return (uint32_t)(s & fstate::REFS); }

/* One controller of the array. */
struct array_ctrl {
	const pqueue *qps;  /* nqp queue pairs of this controller */
	uint64_t base_lba;  /* the array's first LBA there */
	uint64_t lbas;      /* LBAs the array may use there, from base_lba */
	uint32_t nqp;
	uint32_t nsid;
	uint32_t lba_shift; /* log2(LBA size), at most page_shift */
	uint32_t pad;
};
static_assert(sizeof(array_ctrl) == 40, "array_ctrl layout is pinned (gpunvme-gpu)");

/* Slow-path counters (every one counts commands or misses, never hits, so
 * a hit touches no shared counter). */
struct array_stats {
	uint64_t loads;      /* page reads submitted */
	uint64_t writebacks; /* page writes submitted (a replicated page: one per controller) */
	uint64_t evictions;  /* valid pages a load replaced */
	uint64_t waits;      /* lookups that found their page being loaded */
	uint64_t noframe;    /* passes that found no frame of the set free */
	uint64_t failures;   /* loads and write-backs that failed */
	uint64_t dead;       /* frames retired (a command without a completion) */
	uint64_t pad;
};
static_assert(sizeof(array_stats) == 64, "array_stats layout is pinned (gpunvme-gpu)");

/* A buffer the controllers can write (read_block()'s destination), mapped
 * for each of them. */
struct array_buf {
	uint8_t *va;              /* GPU virtual address */
	const uint64_t *page_dma; /* controller c's DMA address of 4 KiB page k: [c * npages + k] */
	uint64_t npages;
};

/* What every thread holds (by value): filled by the host. */
struct array_desc {
	const array_ctrl *ctrl;    /* n_ctrl */
	uint8_t *frames;           /* n_frames << page_shift bytes, GPU virtual address */
	const uint64_t *frame_dma; /* [c * frame_pages + k]: controller c's address of 4 KiB page k */
	uint64_t *state;           /* n_frames state words (array_meta) */
	int32_t *ferr;             /* n_frames: why a frame's load failed */
	uint32_t *set_lock;        /* n_sets */
	uint32_t *hand;            /* n_sets: the sets' clock hands */
	array_stats *stats;        /* may be null */
	int32_t *error;            /* operator[]'s first error; may be null */
	const volatile uint32_t *stop; /* host stop flag; may be null */
	uint64_t bytes;            /* array length */
	uint64_t timeout_ticks;    /* per wait (3x for a page others load), capped */
	uint64_t tick_hz;
	uint32_t n_ctrl;
	uint32_t layout;           /* ARRAY_STRIPE or ARRAY_REPLICATE */
	uint32_t chunk_pages;      /* stripe unit in pages (>= 1) */
	uint32_t page_shift;       /* 12..16 */
	uint32_t n_frames;         /* n_sets * ways */
	uint32_t ways;             /* power of two, 1..16 */
	uint32_t n_sets;
	uint32_t frame_pages;      /* 4 KiB pages of frames: n_frames << (page_shift - 12) */
};
static_assert(sizeof(array_desc) == 136, "array_desc layout is pinned (gpunvme-gpu)");
static_assert(__builtin_offsetof(array_desc, bytes) == 80, "array_desc layout is pinned (gpunvme-gpu)");
static_assert(__builtin_offsetof(array_desc, n_ctrl) == 104, "array_desc layout is pinned (gpunvme-gpu)");
static_assert(__builtin_offsetof(array_desc, frame_pages) == 132, "array_desc layout is pinned (gpunvme-gpu)");

/*
 * The cache's bookkeeping in one GPU-visible allocation of
 * array_meta_bytes() bytes, all zero at the start (zero is an empty frame
 * and a free lock): state words, ferr, locks, hands, stats, error.
 */
GPUNVME_HD uint64_t array_meta_ferr_off(uint32_t n_frames) { return 8ull * n_frames; }
GPUNVME_HD uint64_t array_meta_lock_off(uint32_t n_frames)
{
	return (array_meta_ferr_off(n_frames) + 4ull * n_frames + 63) & ~63ull;
}
GPUNVME_HD uint64_t array_meta_hand_off(uint32_t n_frames, uint32_t n_sets)
{
	return array_meta_lock_off(n_frames) + 4ull * n_sets;
}
GPUNVME_HD uint64_t array_meta_stats_off(uint32_t n_frames, uint32_t n_sets)
{
	return (array_meta_hand_off(n_frames, n_sets) + 4ull * n_sets + 63) & ~63ull;
}
GPUNVME_HD uint64_t array_meta_bytes(uint32_t n_frames, uint32_t n_sets)
{
	return array_meta_stats_off(n_frames, n_sets) + sizeof(array_stats) + 64;
}

/* Host: point d's bookkeeping pointers into mem (the GPU's address of an
 * array_meta_bytes() allocation); d.n_frames and d.n_sets set. */
GPUNVME_HD void array_meta_attach(array_desc &d, void *mem)
{
	uint8_t *b = (uint8_t *)mem;
	d.state = (uint64_t *)b;
	d.ferr = (int32_t *)(b + array_meta_ferr_off(d.n_frames));
	d.set_lock = (uint32_t *)(b + array_meta_lock_off(d.n_frames));
	d.hand = (uint32_t *)(b + array_meta_hand_off(d.n_frames, d.n_sets));
	d.stats = (array_stats *)(b + array_meta_stats_off(d.n_frames, d.n_sets));
	d.error = (int32_t *)(b + array_meta_stats_off(d.n_frames, d.n_sets) + sizeof(array_stats));
}

GPUNVME_HD uint64_t array_page_bytes(const array_desc &d) { return 1ull << d.page_shift; }
GPUNVME_HD uint64_t array_pages(const array_desc &d)
{
	return (d.bytes + array_page_bytes(d) - 1) >> d.page_shift;
}

/* Where page p lives: its controller (the first replica for REPLICATE)
 * and its page index on that controller. */
GPUNVME_HD uint64_t array_local_page(const array_desc &d, uint64_t p, uint32_t *ctrl)
{
	if (d.layout == ARRAY_REPLICATE) {
		*ctrl = (uint32_t)(p % d.n_ctrl);
		return p;
	}
	const uint64_t chunk = p / d.chunk_pages;
	*ctrl = (uint32_t)(chunk % d.n_ctrl);
	return chunk / d.n_ctrl * d.chunk_pages + p % d.chunk_pages;
}

/* The first LBA of local page lp on controller c. */
GPUNVME_HD uint64_t array_lba(const array_desc &d, uint32_t c, uint64_t lp)
{
	return d.ctrl[c].base_lba + (lp << (d.page_shift - d.ctrl[c].lba_shift));
}

/* Where byte x of the array lives: its controller (for REPLICATE the
 * first replica; every replica holds it at the same place) and its byte
 * offset in that controller's namespace. */
GPUNVME_HD uint64_t array_disk_offset(const array_desc &d, uint64_t x, uint32_t *ctrl)
{
	const uint64_t lp = array_local_page(d, x >> d.page_shift, ctrl);
	return (array_lba(d, *ctrl, lp) << d.ctrl[*ctrl].lba_shift) + (x & ((1ull << d.page_shift) - 1));
}

/* Local pages the array needs on each controller. */
GPUNVME_HD uint64_t array_local_pages(const array_desc &d)
{
	const uint64_t n = array_pages(d);
	if (d.layout == ARRAY_REPLICATE)
		return n;
	const uint64_t per = (uint64_t)d.chunk_pages * d.n_ctrl;
	return (n + per - 1) / per * d.chunk_pages;
}

/* Is the descriptor usable? OK or ERR_INVAL (host and device). */
GPUNVME_HD int32_t array_check(const array_desc &d)
{
	if (!d.ctrl || !d.frames || !d.frame_dma || !d.state || !d.ferr || !d.set_lock ||
	    !d.hand || d.n_ctrl == 0 || d.tick_hz == 0 || d.bytes == 0 ||
	    d.page_shift < ARRAY_MIN_PAGE_SHIFT || d.page_shift > ARRAY_MAX_PAGE_SHIFT ||
	    (d.layout != ARRAY_STRIPE && d.layout != ARRAY_REPLICATE) || d.chunk_pages == 0 ||
	    d.ways == 0 || d.ways > ARRAY_MAX_WAYS || (d.ways & (d.ways - 1)) ||
	    d.n_sets == 0 || (uint64_t)d.n_sets * d.ways != d.n_frames ||
	    d.frame_pages != (uint64_t)d.n_frames << (d.page_shift - 12) ||
	    array_pages(d) > fstate::MAX_PAGES)
		return ERR_INVAL;
	const uint64_t lp = array_local_pages(d);
	for (uint32_t c = 0; c < d.n_ctrl; c++) {
		const array_ctrl &x = d.ctrl[c];
		if (!x.qps || x.nqp == 0 || x.lba_shift < 9 || x.lba_shift > d.page_shift ||
		    (1u << (d.page_shift - x.lba_shift)) > 65536 ||
		    x.lbas < (lp << (d.page_shift - x.lba_shift)))
			return ERR_INVAL;
	}
	return OK;
}

/* ---- atomics on the state words (device scope; what the controller
 * must see is ordered by fence.h's system-scope fences) --------------- */
namespace arr_atom {

GPUNVME_HD uint64_t ld(const uint64_t *p) { return atom::ld64(p); }

GPUNVME_HD uint64_t ld_acquire(const uint64_t *p)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_load_n(p, __ATOMIC_ACQUIRE, __MEMORY_SCOPE_DEVICE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t v;
	asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

/* Add, acquire; the old value. */
GPUNVME_HD uint64_t add_acquire(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_fetch_add(p, v, __ATOMIC_ACQUIRE, __MEMORY_SCOPE_DEVICE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t old;
	asm volatile("atom.acquire.gpu.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
	return old;
#else
	return __atomic_fetch_add(p, v, __ATOMIC_ACQUIRE);
#endif
}

/* Add, release; nobody waits for the old value (NVIDIA: red). */
GPUNVME_HD void add_release(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	(void)__scoped_atomic_fetch_add(p, v, __ATOMIC_RELEASE, __MEMORY_SCOPE_DEVICE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("red.release.gpu.add.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
#else
	(void)__atomic_fetch_add(p, v, __ATOMIC_RELEASE);
#endif
}

/* OR, release; nobody waits for the old value. */
GPUNVME_HD void or_release(uint64_t *p, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	(void)__scoped_atomic_fetch_or(p, v, __ATOMIC_RELEASE, __MEMORY_SCOPE_DEVICE);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("red.release.gpu.or.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
#else
	(void)__atomic_fetch_or(p, v, __ATOMIC_RELEASE);
#endif
}

/* *p from expected to v (acquire and release); false if it was not expected. */
GPUNVME_HD bool cas(uint64_t *p, uint64_t expected, uint64_t v)
{
#if defined(GPUNVME_DEV_AMD)
	return __scoped_atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_ACQ_REL,
						  __ATOMIC_RELAXED, __MEMORY_SCOPE_DEVICE);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint64_t old;
	asm volatile("atom.acq_rel.gpu.cas.b64 %0, [%1], %2, %3;"
		     : "=l"(old) : "l"(p), "l"(expected), "l"(v) : "memory");
	return old == expected;
#else
	return __atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_ACQ_REL,
					   __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void st32i(int32_t *p, int32_t v) { atom::st32((uint32_t *)p, (uint32_t)v); }
GPUNVME_HD int32_t ld32i(const int32_t *p) { return (int32_t)atom::ld32((const uint32_t *)p); }

} /* namespace arr_atom */

/* array_stats' counters by index (no pointer-to-member in device code). */
enum : uint32_t {
	AS_LOADS = 0,
	AS_WRITEBACKS,
	AS_EVICTIONS,
	AS_WAITS,
	AS_NOFRAME,
	AS_FAILURES,
	AS_DEAD,
};

static_assert(__builtin_offsetof(array_stats, loads) == 8 * AS_LOADS &&
		      __builtin_offsetof(array_stats, writebacks) == 8 * AS_WRITEBACKS &&
		      __builtin_offsetof(array_stats, evictions) == 8 * AS_EVICTIONS &&
		      __builtin_offsetof(array_stats, waits) == 8 * AS_WAITS &&
		      __builtin_offsetof(array_stats, noframe) == 8 * AS_NOFRAME &&
		      __builtin_offsetof(array_stats, failures) == 8 * AS_FAILURES &&
		      __builtin_offsetof(array_stats, dead) == 8 * AS_DEAD,
	      "array_stats' counters in index order");

GPUNVME_HD void array_count(const array_desc &d, uint32_t counter)
{
	if (d.stats)
		atom::red64((uint64_t *)d.stats + counter, 1);
}

/* ---- the lanes that want the same page: one group, one leader -------- */

#if defined(GPUNVME_DEV_NVIDIA)
namespace warp {
GPUNVME_DEV uint32_t same64(uint32_t mask, uint64_t key)
{
	uint32_t m;
	asm volatile("match.any.sync.b64 %0, %1, %2;" : "=r"(m) : "l"(key), "r"(mask));
	return m;
}
} /* namespace warp */
#endif

/* The caller's group: the lanes of its warp/wave that called with the same
 * page (want), its leader (the lowest of them) and, on NVIDIA, their mask. */
struct array_group {
	uint32_t leader;
	uint32_t mask; /* NVIDIA: the group's lanes */
	bool lead;
};

GPUNVME_HD array_group array_group_of(uint64_t page, bool want)
{
	array_group g;
#if defined(GPUNVME_DEV_NVIDIA)
	const uint32_t act = warp::active(), me = warp::lane();
	/* Lanes with nothing to do share one key and never act. */
	const uint32_t m = warp::same64(act, want ? page : ~0ull);
	g.mask = m;
	g.leader = warp::msb(m & (0u - m));
	g.lead = want && g.leader == me;
#else
	/* The peel: the lowest lane left broadcasts its page (readlane of a
	 * uniform lane: AMD's readfirstlane idiom), the lanes with that page
	 * are its group; until every wanting lane has one. */
	const uint32_t me = wave::lane();
	uint32_t leader = me;
	for (uint64_t todo = wave::ballot(want); todo;) {
		const uint32_t lead = (uint32_t)__builtin_ctzll(todo);
		const uint64_t key = wave::bcast64(page, lead);
		const uint64_t same = wave::ballot(want && page == key) & todo;
		if ((same >> me) & 1u)
			leader = lead;
		todo &= ~same;
	}
	g.mask = 0;
	g.leader = leader;
	g.lead = want && leader == me;
#endif
	return g;
}

/* The leader's v, in every lane of its group (lanes outside any group:
 * their own v). Every active lane calls it. */
GPUNVME_HD uint64_t array_group_bcast(const array_group &g, bool want, uint64_t v)
{
#if defined(GPUNVME_DEV_NVIDIA)
	/* A lane alone on its page (the common case of random reads): its
	 * own acquire ordered its own loads; nothing to send. */
	if (!want || g.mask == 1u << warp::lane())
		return v;
	const uint64_t x = warp::shfl64(g.mask, v, g.leader);
	/* A shuffle orders no memory: the leader's acquire (the reference
	 * add, the state it saw VALID) reaches the group's data loads through
	 * a warp barrier, as pqueue.h's reap hands over a payload. */
	asm volatile("bar.warp.sync %0;" :: "r"(g.mask) : "memory");
	return x;
#else
	/* All singletons (every wanting lane leads itself): nothing to send. */
	const uint64_t wanting = wave::ballot(want);
	if (wave::ballot(g.lead) == wanting)
		return v;
	uint64_t got = v;
	for (uint64_t todo = wanting; todo;) {
		const uint32_t lead = (uint32_t)__builtin_ctzll(todo);
		const uint64_t x = wave::bcast64(v, lead);
		const uint64_t same = wave::ballot(want && g.leader == lead) & todo;
		if ((same >> wave::lane()) & 1u)
			got = x;
		todo &= ~same;
	}
	return got;
#endif
}

/* The group's accesses to its frame are done before its leader drops the
 * reference (or marks it dirty). Every active lane calls it. */
GPUNVME_HD void array_group_sync(const array_group &g, bool want)
{
#if defined(GPUNVME_DEV_NVIDIA)
	/* Alone: the leader's own release (array_unref()) orders its loads. */
	if (want && g.mask != 1u << warp::lane())
		asm volatile("bar.warp.sync %0;" :: "r"(g.mask) : "memory");
#elif defined(GPUNVME_DEV_AMD)
	(void)g;
	(void)want;
	/* One wave: its lanes' loads and stores were issued by the same
	 * instructions; the leader's release atomic waits for all of them
	 * (the wave's counters). This keeps the compiler from moving them. */
	__builtin_amdgcn_wave_barrier();
	__builtin_amdgcn_fence(__ATOMIC_ACQ_REL, "wavefront");
#else
	(void)g;
	(void)want;
	(void)wave::ballot(true); /* host: a barrier when threads form a wave */
#endif
}

/* ---- one lane's page operation: a small state machine ---------------- */

enum : uint32_t {
	AJ_DONE = 0,
	AJ_LOOKUP,  /* find the page in its set (no lock) */
	AJ_INSTALL, /* set lock: look again, or take a victim */
	AJ_WAIT,    /* holding a reference to a frame another lane loads */
	AJ_SUBMIT,  /* a command to send: the next (collective) claim */
	AJ_POLL,    /* a command in flight */
	AJ_FLUSH,   /* flush(): write this frame back if it is dirty */
};

struct array_job {
	uint32_t st;
	uint32_t set;
	uint32_t frame;     /* the frame the job holds or works on */
	uint32_t ctrl;      /* the command's controller */
	uint32_t rep;       /* replicated write-back: controllers done */
	uint32_t polls;
	uint64_t page;      /* the page wanted */
	uint64_t io_page;   /* the page of the command (a write-back: the victim's) */
	int32_t rc;         /* when done: OK (a reference is held) or the error */
	int32_t trc;        /* the command's result; ERR_AGAIN while in flight */
	bool write_back;    /* the command writes io_page back */
	bool then_lookup;   /* after the write-back: look page up again */
	bool fua;
	bool hit;           /* done without a command or a wait */
	bool timed;         /* d started (at the operation's first wait) */
	pq_ticket t;
	pqueue q;           /* the command's pair */
	deadline d;         /* this operation's waits for others */
	deadline dq;        /* the command's wait (AMD and host) */
};

GPUNVME_HD uint32_t array_set_of(const array_desc &d, uint64_t page)
{
	const uint64_t h = (page + 1) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(((h >> 32) * d.n_sets) >> 32);
}

/* The pair a lane of this SM/CU uses on controller c. */
GPUNVME_HD const pqueue &array_pair(const array_desc &d, uint32_t c)
{
	return d.ctrl[c].qps[pq_pick(d.ctrl[c].nqp)];
}

/* The controller a load of page p goes to: its stripe's, or for a
 * replicated page the first of its replicas (from p % n_ctrl on) whose
 * pair is not poisoned. */
GPUNVME_HD uint32_t array_read_ctrl(const array_desc &d, uint64_t p)
{
	uint32_t c;
	(void)array_local_page(d, p, &c);
	if (d.layout != ARRAY_REPLICATE)
		return c;
	for (uint32_t k = 0; k < d.n_ctrl; k++) {
		const uint32_t x = (c + k) % d.n_ctrl;
		if (!pq_failed(array_pair(d, x)))
			return x;
	}
	return c;
}

GPUNVME_HD void array_job_start(const array_desc &d, array_job &j, uint64_t page, bool want)
{
	j.st = want ? AJ_LOOKUP : AJ_DONE;
	j.page = page;
	j.io_page = 0;
	j.set = want ? array_set_of(d, page) : 0;
	j.frame = 0;
	j.ctrl = 0;
	j.rep = 0;
	j.polls = 0;
	j.rc = OK;
	j.trc = ERR_AGAIN;
	j.write_back = false;
	j.then_lookup = false;
	j.fua = false;
	j.hit = false;
	j.timed = false;
	j.t = pq_ticket{0, 0};
	j.q = pqueue{};
	j.d = deadline{0, 0, 0, 0}; /* started at the first wait (a hit reads no clock) */
	j.dq = j.d;
}

GPUNVME_HD void array_finish(array_job &j, int32_t rc)
{
	j.rc = rc;
	j.st = AJ_DONE;
}

/* Between passes that found nothing new: ERR_AGAIN to go on, or why not. */
GPUNVME_HD int32_t array_go_on(const array_desc &d, array_job &j, int32_t expired)
{
	if (!j.timed) {
		/* A page another lane loads: its claim, command and set. */
		j.d = deadline_start(wall_ticks(), 0, d.tick_hz);
		j.d.budget = 3 * clamp_budget(d.timeout_ticks, d.tick_hz);
		j.timed = true;
	}
	j.polls++;
	if (j.polls % PQ_STOP_EVERY == 0 && d.stop && fence::poll_load(d.stop) != 0)
		return ERR_STOPPED;
	const int s = j.d.step(wall_ticks());
	if (s == DEADLINE_EXPIRED)
		return expired;
	if (s == DEADLINE_CLOCK_STUCK)
		return ERR_CLOCK;
	pq_pause();
	return ERR_AGAIN;
}

/*
 * The ways of set st whose tag is `tag`, as a bit mask (at most one bit:
 * a page is never in two frames). The words are read relaxed (a stale or
 * torn view only sends the caller to the add below, which sees the truth,
 * or to the locked look under the set's lock) with constant indices, so
 * they stay in registers; on NVIDIA two ways per 16-byte load when the set
 * is so aligned (the hit path's first round trip: 8 loads, not 16).
 */
GPUNVME_HD uint32_t array_set_match(const uint64_t *st, uint32_t ways, uint64_t tag)
{
	uint64_t s[ARRAY_MAX_WAYS];
#if defined(GPUNVME_DEV_NVIDIA)
	if (ways >= 2 && ((uintptr_t)st & 15) == 0) {
#pragma unroll
		for (uint32_t w = 0; w < ARRAY_MAX_WAYS; w += 2) {
			s[w] = s[w + 1] = 0;
			if (w < ways)
				asm volatile("ld.relaxed.gpu.v2.u64 {%0, %1}, [%2];"
					     : "=l"(s[w]), "=l"(s[w + 1]) : "l"(st + w));
		}
	} else
#endif
	{
#if defined(GPUNVME_DEV_NVIDIA) || defined(GPUNVME_DEV_AMD)
#pragma unroll
#endif
		for (uint32_t w = 0; w < ARRAY_MAX_WAYS; w++)
			s[w] = w < ways ? arr_atom::ld(&st[w]) : 0;
	}
	uint32_t m = 0;
#if defined(GPUNVME_DEV_NVIDIA) || defined(GPUNVME_DEV_AMD)
#pragma unroll
#endif
	for (uint32_t w = 0; w < ARRAY_MAX_WAYS; w++)
		m |= (uint32_t)(w < ways && fs_tag(s[w]) == tag) << w;
	return m;
}

/* array_probe()'s answers. */
enum : int {
	AP_RACED = -1, /* the frame changed between the look and the add: no reference held */
	AP_ABSENT = 0, /* not in its set */
	AP_HIT = 1,    /* VALID: a reference held, the data may be read */
	AP_LOADING = 2 /* being loaded (or its load just failed): a reference held, wait */
};

/*
 * Look page up in its set without the lock: take a reference on the frame
 * whose tag is the page (*frame). The hit path is this and nothing more:
 * the set's words (relaxed), one atomic add (acquire: VALID, and the
 * loader's data before it, then the caller's data loads), no lock, no
 * clock, no shared counter.
 */
GPUNVME_HD int array_probe(const array_desc &d, uint32_t set, uint64_t page, uint32_t *frame)
{
	uint64_t *st = d.state + (uint64_t)set * d.ways;
	const uint64_t tag = page + 1;
	const uint32_t m = array_set_match(st, d.ways, tag);
	if (!m)
		return AP_ABSENT;
#if defined(GPUNVME_DEV_NVIDIA)
	/* nvcc has no __builtin_ctz in device code (it warns, and the call is
	 * not what it says: every hit then missed on the H200). The highest
	 * set bit: m has one, or (a torn relaxed view) the add re-checks. */
	uint32_t w;
	asm("bfind.u32 %0, %1;" : "=r"(w) : "r"(m));
#else
	const uint32_t w = (uint32_t)__builtin_ctz(m);
#endif
	const uint64_t old = arr_atom::add_acquire(&st[w], fstate::REF);
	if (fs_tag(old) != tag) {
		/* Replaced between the load and the add: give it back. */
		arr_atom::add_release(&st[w], (uint64_t)0 - fstate::REF);
		return AP_RACED;
	}
	*frame = set * d.ways + w;
	return (old & fstate::VALID) ? AP_HIT : AP_LOADING;
}

/* The job's look-up (array_probe()): 1: found (j.frame; VALID: done, a
 * hit; BUSY: now waiting for it), 0: not there, -1: raced (look again). */
GPUNVME_HD void array_job_found(const array_desc &d, array_job &j, int probed, uint32_t frame)
{
	j.frame = frame;
	if (probed == AP_HIT) {
		j.hit = true;
		array_finish(j, OK);
	} else {
		array_count(d, AS_WAITS);
		j.st = AJ_WAIT;
	}
}

GPUNVME_HD int array_find(const array_desc &d, array_job &j)
{
	uint32_t frame = 0;
	const int r = array_probe(d, j.set, j.page, &frame);
	if (r == AP_RACED)
		return -1;
	if (r == AP_ABSENT)
		return 0;
	array_job_found(d, j, r, frame);
	return 1;
}

/* A command for the job: the page's load or a write-back of io_page. */
GPUNVME_HD void array_prepare_io(const array_desc &d, array_job &j, uint32_t ctrl)
{
	j.ctrl = ctrl;
	j.q = array_pair(d, ctrl);
	j.trc = ERR_AGAIN;
	j.st = AJ_SUBMIT;
}

/* Under the set's lock: look again, then take a victim by the clock hand
 * (clean first; else one dirty one to write back). */
GPUNVME_HD void array_install(const array_desc &d, array_job &j)
{
	uint32_t *lock = &d.set_lock[j.set];
	if (!atom::try_lock(lock)) {
		const int32_t e = array_go_on(d, j, ERR_TIMEOUT);
		if (e != ERR_AGAIN)
			array_finish(j, e);
		return;
	}
	const int f = array_find(d, j);
	if (f != 0) {
		atom::unlock(lock);
		if (f < 0)
			j.st = AJ_LOOKUP;
		return;
	}
	uint64_t *st = d.state + (uint64_t)j.set * d.ways;
	const uint32_t hand = atom::ld32(&d.hand[j.set]);
	const uint64_t unusable = fstate::BUSY | fstate::WB | fstate::DEAD;
	uint32_t dirty_w = ARRAY_MAX_WAYS;
	uint64_t dirty_s = 0;
	for (uint32_t k = 0; k < d.ways; k++) {
		const uint32_t w = (hand + k) & (d.ways - 1);
		const uint64_t s = arr_atom::ld(&st[w]);
		if (fs_refs(s) || (s & unusable))
			continue;
		if (s & fstate::DIRTY) {
			if (dirty_w == ARRAY_MAX_WAYS) {
				dirty_w = w;
				dirty_s = s;
			}
			continue;
		}
		const uint64_t mine = (j.page + 1) << fstate::TAG_SHIFT | fstate::BUSY | fstate::REF;
		if (!arr_atom::cas(&st[w], s, mine))
			continue; /* a stray reference, or it changed: the next one */
		atom::st32(&d.hand[j.set], (w + 1) & (d.ways - 1));
		atom::unlock(lock);
		if (s & fstate::VALID)
			array_count(d, AS_EVICTIONS);
		j.frame = j.set * d.ways + w;
		j.io_page = j.page;
		j.write_back = false;
		array_prepare_io(d, j, array_read_ctrl(d, j.page));
		return;
	}
	if (dirty_w != ARRAY_MAX_WAYS &&
	    arr_atom::cas(&st[dirty_w], dirty_s,
			  dirty_s - fstate::DIRTY + fstate::WB + fstate::REF)) {
		atom::st32(&d.hand[j.set], (dirty_w + 1) & (d.ways - 1));
		atom::unlock(lock);
		uint32_t c;
		j.frame = j.set * d.ways + dirty_w;
		j.io_page = fs_tag(dirty_s) - 1;
		(void)array_local_page(d, j.io_page, &c);
		j.write_back = true;
		j.then_lookup = true;
		j.rep = 0;
		array_prepare_io(d, j, d.layout == ARRAY_REPLICATE ? 0 : c);
		return;
	}
	atom::unlock(lock);
	array_count(d, AS_NOFRAME);
	const int32_t e = array_go_on(d, j, ERR_NOFRAME);
	if (e != ERR_AGAIN)
		array_finish(j, e);
}

/* Waiting for a frame another lane loads (a reference held). */
GPUNVME_HD void array_wait(const array_desc &d, array_job &j)
{
	uint64_t *sw = &d.state[j.frame];
	const uint64_t s = arr_atom::ld_acquire(sw);
	if (s & fstate::VALID) {
		array_finish(j, OK);
		return;
	}
	int32_t rc = OK;
	if (s & fstate::ERROR)
		rc = arr_atom::ld32i(&d.ferr[j.frame]);
	else
		rc = array_go_on(d, j, ERR_TIMEOUT);
	if (rc != ERR_AGAIN) {
		arr_atom::add_release(sw, (uint64_t)0 - fstate::REF);
		array_finish(j, rc == OK ? ERR_IO : rc);
	}
}

/* flush(): this frame, if it is dirty and no write-back is running. */
GPUNVME_HD void array_flush_step(const array_desc &d, array_job &j)
{
	uint64_t *sw = &d.state[j.frame];
	const uint64_t s = arr_atom::ld(sw);
	if (!(s & fstate::DIRTY) && !(s & fstate::WB)) {
		array_finish(j, OK);
		return;
	}
	if (!(s & (fstate::WB | fstate::BUSY | fstate::DEAD)) && fs_tag(s) &&
	    arr_atom::cas(sw, s, s - fstate::DIRTY + fstate::WB + fstate::REF)) {
		uint32_t c;
		j.io_page = fs_tag(s) - 1;
		(void)array_local_page(d, j.io_page, &c);
		j.write_back = true;
		j.then_lookup = false;
		j.rep = 0;
		array_prepare_io(d, j, d.layout == ARRAY_REPLICATE ? 0 : c);
		return;
	}
	/* Being written back by another lane: wait until it is done, then
	 * look at DIRTY again. */
	const int32_t e = array_go_on(d, j, ERR_TIMEOUT);
	if (e != ERR_AGAIN)
		array_finish(j, e);
}

/* The job's command completed (rc: OK, an NVMe status, or a library
 * error after which it may still be in flight). */
GPUNVME_HD void array_io_done(const array_desc &d, array_job &j, int32_t rc)
{
	uint64_t *sw = &d.state[j.frame];
	const uint64_t tag = (j.io_page + 1) << fstate::TAG_SHIFT;
	if (rc != OK)
		array_count(d, AS_FAILURES);
	if (!j.write_back) {
		if (rc == OK) {
			/* The SSD wrote the frame behind the GPU's caches. */
			fence::payload_acquire();
			arr_atom::add_release(sw, fstate::VALID - fstate::BUSY);
			array_finish(j, OK);
			return;
		}
		/* Not cached (the tag goes), waiters told why; never reused if
		 * the command may still land. The loader's reference goes. */
		arr_atom::st32i(&d.ferr[j.frame], rc);
		uint64_t v = fstate::ERROR - fstate::BUSY - tag - fstate::REF;
		if (rc < 0) {
			v += fstate::DEAD;
			array_count(d, AS_DEAD);
		}
		arr_atom::add_release(sw, v);
		array_finish(j, rc);
		return;
	}
	if (rc == OK && d.layout == ARRAY_REPLICATE && j.rep + 1 < d.n_ctrl) {
		j.rep++;
		array_prepare_io(d, j, j.rep);
		return;
	}
	if (rc != OK) {
		/* Still dirty (what the SSD holds is not known): a later flush or
		 * eviction tries again. */
		arr_atom::add_release(sw, fstate::DIRTY - fstate::WB - fstate::REF);
		array_finish(j, rc);
		return;
	}
	arr_atom::add_release(sw, (uint64_t)0 - fstate::WB - fstate::REF);
	if (j.then_lookup) {
		j.write_back = false;
		j.st = AJ_LOOKUP;
		return;
	}
	array_finish(j, OK);
}

/* One non-blocking step (AMD, host) or one blocking one (NVIDIA: a
 * command is waited for with pq_wait(), lanes make progress on their own). */
GPUNVME_HD void array_step(const array_desc &d, array_job &j)
{
	switch (j.st) {
	case AJ_LOOKUP: {
		const int f = array_find(d, j);
		if (f == 0) {
			j.st = AJ_INSTALL;
		} else if (f < 0) {
			/* Raced with a replacement: look again, bounded. */
			const int32_t e = array_go_on(d, j, ERR_TIMEOUT);
			if (e != ERR_AGAIN)
				array_finish(j, e);
		}
		break;
	}
	case AJ_INSTALL:
		array_install(d, j);
		break;
	case AJ_WAIT:
		array_wait(d, j);
		break;
	case AJ_FLUSH:
		array_flush_step(d, j);
		break;
	case AJ_POLL: {
		int32_t r = j.trc;
#if defined(GPUNVME_DEV_NVIDIA)
		if (r == ERR_AGAIN)
			r = pq_wait(j.q, j.t, nullptr);
#else
		if (r == ERR_AGAIN) {
			r = pq_test(j.q, j.t, nullptr);
			if (r == ERR_AGAIN)
				r = pq_wait_go_on(j.q, j.dq, ++j.polls);
			if (r == ERR_AGAIN && j.q.backoff)
				pq_pause();
		}
#endif
		if (r != ERR_AGAIN)
			array_io_done(d, j, r);
		break;
	}
	default:
		break;
	}
}

/* The command of a job in AJ_SUBMIT: its pq_submit_io_if() arguments. */
GPUNVME_HD int32_t array_submit(const array_desc &d, array_job &j, bool want,
				const pq_held *held)
{
	const array_ctrl &x = d.ctrl[want ? j.ctrl : 0];
	uint32_t c = 0;
	const uint64_t lp = want ? array_local_page(d, j.io_page, &c) : 0;
	const uint64_t lba = want ? array_lba(d, j.ctrl, lp) : 0;
	const uint16_t nlb0 = (uint16_t)((1u << (d.page_shift - x.lba_shift)) - 1);
	const uint8_t opc = j.write_back ? NVME_OPC_WRITE : NVME_OPC_READ;
	if (want && j.write_back)
		fence::payload_release(); /* the frame's data (its writers
					   * released it to this lane) out */
	if (want)
		array_count(d, j.write_back ? AS_WRITEBACKS : AS_LOADS);
	return pq_submit_io_if(j.q, want, opc, x.nsid, lba, nlb0,
			       d.frame_dma + (uint64_t)j.ctrl * d.frame_pages, d.frame_pages,
			       (uint64_t)j.frame << d.page_shift, 1u << d.page_shift, &j.t, held,
			       j.fua ? NVME_RW_FUA : 0);
}

GPUNVME_HD void array_submitted(const array_desc &d, array_job &j, int32_t rc)
{
	if (rc == OK) {
		j.st = AJ_POLL;
		j.trc = ERR_AGAIN;
		j.polls = 0;
		j.dq = deadline_start(wall_ticks(), j.q.timeout_ticks, j.q.tick_hz);
		return;
	}
	/* Nothing went out: the frame can be reused (no DEAD), a load's
	 * waiters get rc, a write-back's frame stays dirty. */
	array_count(d, AS_FAILURES);
	uint64_t *sw = &d.state[j.frame];
	if (!j.write_back) {
		arr_atom::st32i(&d.ferr[j.frame], rc);
		arr_atom::add_release(sw, fstate::ERROR - fstate::BUSY -
						  ((j.io_page + 1) << fstate::TAG_SHIFT) - fstate::REF);
	} else {
		arr_atom::add_release(sw, fstate::DIRTY - fstate::WB - fstate::REF);
	}
	array_finish(j, rc);
}

/* The wave's claim (AMD and host), every active lane together, when one
 * of them has a command to send: a lane with a command in flight passes
 * it as held (a claim that needs its slot takes it). */
GPUNVME_HD void array_claim_pass(const array_desc &d, array_job &j)
{
#if !defined(GPUNVME_DEV_NVIDIA)
	if (!wave::ballot(j.st == AJ_SUBMIT))
		return;
	const bool want = j.st == AJ_SUBMIT;
	const bool live = j.st == AJ_POLL && j.trc == ERR_AGAIN;
	pq_held h = {&j.t, &j.trc, 1};
	if (!want && !live)
		j.q = pqueue{}; /* no pair of its own: serves nothing */
	const int32_t rc = array_submit(d, j, want, live ? &h : nullptr);
	if (want)
		array_submitted(d, j, rc);
#else
	(void)d;
	(void)j;
#endif
}

/*
 * Run every active lane's job to its end (flush()). AMD and the host: the
 * whole wave in one loop (see the top of the file). NVIDIA: each lane on
 * its own, a command waited for with pq_wait().
 */
GPUNVME_HD void array_run(const array_desc &d, array_job &j)
{
#if defined(GPUNVME_DEV_NVIDIA)
	while (j.st != AJ_DONE) {
		array_step(d, j);
		if (j.st == AJ_SUBMIT)
			array_submitted(d, j, array_submit(d, j, true, nullptr));
	}
#else
	for (;;) {
		array_step(d, j);
		array_claim_pass(d, j);
		if (!wave::ballot(j.st != AJ_DONE))
			break;
	}
#endif
}

/* What a group's lanes do with the frame: read or write their element. */
template <typename T> struct array_read_one {
	uint64_t off;
	T *out;
	GPUNVME_HD void operator()(uint8_t *f) const { *out = *(const T *)(f + off); }
};
template <typename T> struct array_write_one {
	uint64_t off;
	T v;
	GPUNVME_HD void operator()(uint8_t *f) const { *(T *)(f + off) = v; }
};
template <typename T> struct array_read_span {
	uint64_t off; /* bytes into the page */
	uint64_t n;
	T *dst;
	GPUNVME_HD void operator()(uint8_t *f) const
	{
		const T *src = (const T *)(f + off);
		for (uint64_t x = 0; x < n; x++)
			dst[x] = src[x];
	}
};

/* The group's leader drops its reference once the group is done with the
 * frame (a write: marks it dirty first; release: the group's stores and
 * loads before it). */
GPUNVME_HD void array_unref(const array_desc &d, uint32_t frame, bool dirty)
{
	if (dirty)
		arr_atom::or_release(&d.state[frame], fstate::DIRTY);
	arr_atom::add_release(&d.state[frame], (uint64_t)0 - fstate::REF);
}

/*
 * One page access for every active lane that wants one (every active lane
 * calls it): the lanes that want the same page are one group, whose leader
 * gets the page's frame (from the cache, from another lane's load, or by
 * loading it: one command), then every lane of the group runs fn on the
 * frame, then the leader drops the reference. OK or the error (the same
 * in the whole group); OK for a lane that wants nothing.
 *
 * AMD and the host: the wave's lanes stay in one loop; a group whose
 * leader is done runs fn and lets its frame go in that same pass, so a
 * lane never holds a frame while it waits for a wave-mate (a small set
 * would otherwise be full of frames their wave no longer needs).
 */
#if defined(GPUNVME_DEV_NVIDIA)
/*
 * NVIDIA: everything after a probe that was not a hit (a wait for another
 * lane's load, the locked install, the command), out of line: the hit
 * path in array_op() keeps the descriptor and its few values in registers
 * and builds no array_job (about 240 bytes, which in line went to local
 * memory on every access). The descriptor by value, so the caller's copy
 * need not live in memory. Returns rc << 32 | frame.
 */
__attribute__((noinline)) GPUNVME_DEV uint64_t array_miss(const array_desc d, uint64_t page,
							 uint32_t set, int probed, uint32_t frame)
{
	array_job j;
	array_job_start(d, j, page, true);
	j.set = set;
	if (probed == AP_LOADING)
		array_job_found(d, j, probed, frame); /* its reference is held: wait */
	else if (probed == AP_ABSENT)
		j.st = AJ_INSTALL; /* the install looks again under the lock */
	/* AP_RACED: AJ_LOOKUP, looks again (then bounded by array_go_on()) */
	array_run(d, j);
	return (uint64_t)(uint32_t)j.rc << 32 | j.frame;
}
#endif

template <typename Fn>
GPUNVME_HD int32_t array_op(const array_desc &d, uint64_t page, bool want, bool dirty, const Fn &fn)
{
	const array_group g = array_group_of(page, want);
#if defined(GPUNVME_DEV_NVIDIA)
	/* The hit path: the leader's probe (one atomic, no job, no clock);
	 * anything else in array_miss(). */
	uint64_t mine = 0; /* rc << 32 | frame */
	if (g.lead) {
		const uint32_t set = array_set_of(d, page);
		uint32_t frame = 0;
		const int probed = array_probe(d, set, page, &frame);
		mine = probed == AP_HIT ? frame : array_miss(d, page, set, probed, frame);
	}
	const uint64_t v = array_group_bcast(g, want, mine);
	const int32_t rc = (int32_t)(uint32_t)(v >> 32);
	if (want && rc == OK)
		fn(d.frames + ((uint64_t)(uint32_t)v << d.page_shift));
	array_group_sync(g, want);
	if (g.lead && rc == OK)
		array_unref(d, (uint32_t)v, dirty);
	return want ? rc : OK;
#else
	array_job j;
	array_job_start(d, j, page, g.lead);
	const uint32_t me = wave::lane();
	const bool singles = wave::ballot(g.lead) == wave::ballot(want);
	bool left = want, served = false;
	int32_t rc = OK;
	for (;;) {
		array_step(d, j);
		array_claim_pass(d, j);
		/* Groups whose leader is done: their lanes use the frame now. */
		const bool ended = g.lead && j.st == AJ_DONE && !served;
		const uint64_t ready = wave::ballot(ended);
		if (ready) {
			const uint64_t mine = (uint64_t)(uint32_t)j.rc << 32 | j.frame;
			uint64_t x = mine;
			bool got = ended;
			for (uint64_t todo = singles ? 0 : ready; todo; todo &= todo - 1) {
				const uint32_t lead = (uint32_t)__builtin_ctzll(todo);
				const uint64_t y = wave::bcast64(mine, lead);
				const uint64_t same = wave::ballot(left && g.leader == lead);
				if ((same >> me) & 1u) {
					x = y;
					got = true;
				}
			}
			if (got) {
				rc = (int32_t)(uint32_t)(x >> 32);
				if (rc == OK)
					fn(d.frames + ((uint64_t)(uint32_t)x << d.page_shift));
				left = false;
			}
			array_group_sync(g, want);
			if (ended) {
				served = true;
				if (j.rc == OK)
					array_unref(d, j.frame, dirty);
			}
		}
		if (!wave::ballot(left || j.st != AJ_DONE))
			break;
	}
	return rc;
#endif
}

GPUNVME_HD void array_note_error(const array_desc &d, int32_t rc)
{
	if (rc != OK && d.error)
		atom::set_error(d.error, rc);
}

/*
 * The typed view. Every function is called by whole warps/waves (the lanes
 * at the call act together; a lane with nothing to do passes want=false
 * where offered, or an index outside the array and ignores ERR_INVAL).
 */
template <typename T> struct array {
	static_assert(sizeof(T) <= 4096 && (sizeof(T) & (sizeof(T) - 1)) == 0,
		      "array<T>: sizeof(T) a power of two, at most 4 KiB (an element never crosses a page)");
	array_desc d;

	GPUNVME_HD explicit array(const array_desc *p) : d(*p) {}
	GPUNVME_HD explicit array(const array_desc &x) : d(x) {}

	GPUNVME_HD uint64_t size() const { return d.bytes / sizeof(T); }

	/* a[i] into *out: OK or the error (see the top of the file). */
	GPUNVME_HD int32_t read(uint64_t i, T *out) const { return access(i, true, out, nullptr); }

	/* a[i], or T{} with the first error kept for error(). */
	GPUNVME_HD T operator[](uint64_t i) const
	{
		T v{};
		array_note_error(d, read(i, &v));
		return v;
	}

	/* a[i] = v (the page loaded first if it is not cached; written back by
	 * an eviction or flush()). */
	GPUNVME_HD int32_t write(uint64_t i, const T &v) const
	{
		T x = v;
		return access(i, true, nullptr, &x);
	}

	/* The same with want: lanes with want=false take part and do nothing. */
	GPUNVME_HD int32_t read_if(bool want, uint64_t i, T *out) const { return access(i, want, out, nullptr); }
	GPUNVME_HD int32_t write_if(bool want, uint64_t i, const T &v) const
	{
		T x = v;
		return access(i, want, nullptr, &x);
	}

	/* n elements from i on into dst (any memory of this thread's): page
	 * by page, each through the cache; the first error ends it. */
	GPUNVME_HD int32_t read_range(uint64_t i, uint64_t n, T *dst) const
	{
		const uint64_t per = array_page_bytes(d) / sizeof(T);
		int32_t first = (i > size() || n > size() - i) ? ERR_INVAL : OK;
		uint64_t k = 0;
		for (;;) {
			const bool want = first == OK && k < n;
#if defined(GPUNVME_DEV_NVIDIA)
			if (!want)
				break;
#else
			if (!wave::ballot(want))
				break;
#endif
			const uint64_t e = i + k;
			const uint64_t in_page = per - e % per;
			const uint64_t cnt = n - k < in_page ? n - k : in_page;
			const array_read_span<T> fn = {(e % per) * sizeof(T), cnt, dst + k};
			const int32_t rc = array_op(d, want ? e / per : 0, want, false, fn);
			if (want && rc != OK)
				first = rc;
			k += want ? cnt : 0;
		}
		return first;
	}

	/*
	 * Streaming, no cache: array page `page` (its page_bytes) into dst at
	 * byte offset off, one command (a replicated page from a healthy
	 * controller), waited for; then payload_acquire(). It does not see
	 * cached writes not yet flushed. Lanes may call it apart (it is the
	 * per-thread API's submit and wait).
	 */
	GPUNVME_HD int32_t read_block(uint64_t page, const array_buf &dst, uint64_t off) const
	{
		const uint64_t len = array_page_bytes(d);
		if (page >= array_pages(d) || off + len > dst.npages * 4096 || (off & 3))
			return ERR_INVAL;
		const uint32_t c = array_read_ctrl(d, page);
		uint32_t c0;
		const uint64_t lp = array_local_page(d, page, &c0);
		const pqueue q = array_pair(d, c);
		pq_ticket t;
		int32_t rc = pq_submit_io(q, NVME_OPC_READ, d.ctrl[c].nsid, array_lba(d, c, lp),
					  (uint16_t)((1u << (d.page_shift - d.ctrl[c].lba_shift)) - 1),
					  dst.page_dma + (uint64_t)c * dst.npages, dst.npages, off,
					  (uint32_t)len, &t);
		if (rc == OK)
			rc = pq_wait(q, t, nullptr);
		if (rc == OK)
			fence::payload_acquire();
		return rc;
	}

	/*
	 * Write every dirty frame back: thread `thread` of `threads` (every
	 * thread of the launch calls it, each taking frames thread,
	 * thread + threads, ...), FUA if asked. Returns the first failure of
	 * this thread's frames (a failed frame stays dirty). Writes made while
	 * it runs may stay dirty.
	 */
	GPUNVME_HD int32_t flush(uint32_t thread, uint32_t threads, bool fua = false) const
	{
		int32_t first = threads ? OK : ERR_INVAL;
		for (uint64_t f = thread;; f += threads) {
			const bool want = first == OK && f < d.n_frames;
#if defined(GPUNVME_DEV_NVIDIA)
			if (!want)
				break;
#else
			if (!wave::ballot(want))
				break;
#endif
			array_job j;
			array_job_start(d, j, 0, false);
			if (want) {
				j.st = AJ_FLUSH;
				j.frame = (uint32_t)f;
				j.fua = fua;
			}
			array_run(d, j);
			if (want && j.rc != OK)
				first = j.rc;
		}
		return first;
	}

	/* operator[]'s first error (OK: none). */
	GPUNVME_HD int32_t error() const { return d.error ? arr_atom::ld32i(d.error) : OK; }

	/* One element, read (out) or written (in), through the group. */
	GPUNVME_HD int32_t access(uint64_t i, bool want, T *out, const T *in) const
	{
		const bool inside = i < size();
		const int32_t bad = want && !inside ? ERR_INVAL : OK;
		want = want && inside;
		const uint64_t byte = want ? i * sizeof(T) : 0;
		const uint64_t page = byte >> d.page_shift;
		const uint64_t off = byte & (array_page_bytes(d) - 1);
		int32_t rc;
		if (in) {
			const array_write_one<T> fn = {off, *in};
			rc = array_op(d, page, want, true, fn);
		} else {
			T dummy;
			const array_read_one<T> fn = {off, out ? out : &dummy};
			rc = array_op(d, page, want, false, fn);
		}
		return bad != OK ? bad : rc;
	}
};

} /* namespace gpunvme */

#endif /* GPUNVME_ARRAY_H */
