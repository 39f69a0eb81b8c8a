/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * array_host.h - the host side of a storage array (array.h) for C and C++
 * programs: the descriptors in C layout (the same bytes as array.h's and
 * pqueue.h's structs, tests/host_array_c_test.c and host_array_test.cpp
 * check both), their geometry, and the module's ioctls a builder needs.
 * What only the GPU runtime can do (allocate the frames, export them as a
 * dma-buf, import queue memory into the GPU, copy the descriptors to VRAM)
 * stays the program's: gpunvme-gpu's StorageArray (Rust) does all of it.
 *
 * Build an array of n controllers:
 *  1. per controller: gpunvme_array_open() (GET_INFO), and for raw pairs
 *     GPUNVME_IOC_CLAIM_OWNER;
 *  2. the frames: frames << page_shift bytes of payload memory (uncached on
 *     RDNA), exported as ONE dma-buf and mapped into every controller with
 *     gpunvme_array_map_frames() (a DMA table each, frame_pages entries, at
 *     [c * frame_pages] of one table);
 *  3. per controller, pairs_per_ctrl pairs: gpunvme_array_create_pair(),
 *     gpunvme_array_export() of doorbell, SQ, CQ (and a shared pair's PRP
 *     pool) and their import into the GPU (the runtime's
 *     hipImportExternalMemory / cuImportExternalMemory / ...), pq_bytes()
 *     of GPU memory filled with gpunvme_pq_shared_init(), and
 *     gpunvme_pq_fill() for the descriptor;
 *  4. the descriptor: gpunvme_array_desc_init(), GPU memory of
 *     gpunvme_array_meta_bytes() zeroed and gpunvme_array_meta_attach(),
 *     gpunvme_array_check(); copy descriptors and tables to the GPU.
 * Tear down in this order, after every kernel using the array has ended:
 * destroy the pairs (GPUNVME_IOC_DESTROY_QPAIR; the controllers stop),
 * drop the GPU's imports of their queue memory, unmap the frames from each
 * controller (GPUNVME_IOC_UNMAP), close the dma-buf, free the GPU memory.
 *
 * Needs uapi/gpunvme.h on the include path (-I.../uapi) as <gpunvme.h>.
 */
#ifndef GPUNVME_ARRAY_HOST_H
#define GPUNVME_ARRAY_HOST_H

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <gpunvme.h> /* uapi/gpunvme.h (angle brackets: not the device header beside this one) */

#ifdef __cplusplus
extern "C" {
#define GPUNVME_C_ASSERT(c, m) static_assert(c, m)
#else
#define GPUNVME_C_ASSERT(c, m) _Static_assert(c, m)
#endif

/* pqueue.h's struct pqueue: one pair as the per-thread API sees it; every
 * pointer is a GPU address. */
struct gpunvme_pqueue_c {
	uint64_t sq, cq, sq_db, cq_db, stop;
	uint64_t st, ready, slots; /* shared state: gpunvme_pq_attach() */
	uint64_t prp_va, prp_page_dma, prp_dma;
	uint64_t timeout_ticks, tick_hz;
	uint32_t depth, prp_stride, max_transfer, backoff;
};

/* array.h's struct array_ctrl. */
struct gpunvme_array_ctrl_c {
	uint64_t qps; /* GPU address of nqp struct gpunvme_pqueue_c */
	uint64_t base_lba, lbas;
	uint32_t nqp, nsid, lba_shift, pad;
};

/* array.h's struct array_stats. */
struct gpunvme_array_stats_c {
	uint64_t loads, writebacks, evictions, waits, noframe, failures, dead, pad;
};

#define GPUNVME_ARRAY_STRIPE 0u
#define GPUNVME_ARRAY_REPLICATE 1u
#define GPUNVME_ERR_NOFRAME (-105) /* ENOBUFS: no frame of the page's set could be freed */

/* array.h's struct array_desc. */
struct gpunvme_array_desc_c {
	uint64_t ctrl, frames, frame_dma;
	uint64_t state, ferr, set_lock, hand, stats, error; /* gpunvme_array_meta_attach() */
	uint64_t stop, bytes, timeout_ticks, tick_hz;
	uint32_t n_ctrl, layout, chunk_pages, page_shift;
	uint32_t n_frames, ways, n_sets, frame_pages;
};

GPUNVME_C_ASSERT(sizeof(struct gpunvme_pqueue_c) == 120, "pqueue layout");
GPUNVME_C_ASSERT(offsetof(struct gpunvme_pqueue_c, depth) == 104, "pqueue layout");
GPUNVME_C_ASSERT(sizeof(struct gpunvme_array_ctrl_c) == 40, "array_ctrl layout");
GPUNVME_C_ASSERT(sizeof(struct gpunvme_array_stats_c) == 64, "array_stats layout");
GPUNVME_C_ASSERT(sizeof(struct gpunvme_array_desc_c) == 136, "array_desc layout");
GPUNVME_C_ASSERT(offsetof(struct gpunvme_array_desc_c, bytes) == 80, "array_desc layout");
GPUNVME_C_ASSERT(offsetof(struct gpunvme_array_desc_c, n_ctrl) == 104, "array_desc layout");
GPUNVME_C_ASSERT(offsetof(struct gpunvme_array_desc_c, frame_pages) == 132, "array_desc layout");

/* ---- the per-thread API's shared state (pqueue.h) ------------------- */

static inline uint64_t gpunvme_pq_slots_off(uint32_t depth)
{
	return (192 + 4ull * depth + 63) & ~63ull;
}

/* Bytes of a pair's shared state (pq_bytes). */
static inline uint64_t gpunvme_pq_bytes(uint32_t depth)
{
	return gpunvme_pq_slots_off(depth) + 16ull * depth;
}

/* A fresh pair's shared state (pq_init(mem, depth, 0, 0, 1)) in host
 * memory of gpunvme_pq_bytes(depth), to copy to the GPU. */
static inline void gpunvme_pq_shared_init(void *img, uint32_t depth)
{
	const uint32_t phase = 1;

	memset(img, 0, (size_t)gpunvme_pq_bytes(depth));
	memcpy((uint8_t *)img + 136, &phase, 4); /* pq_shared::phase */
}

/* Pool bytes per command slot (pq_prp_stride). */
static inline uint32_t gpunvme_pq_prp_stride(uint64_t pool_bytes, uint32_t depth)
{
	const uint64_t per = depth ? pool_bytes / depth : 0;
	uint32_t s = 4096;

	while (s >= 8 && s > per)
		s >>= 1;
	return s >= 8 ? s : 0;
}

/*
 * A shared pair's descriptor: c as GPUNVME_IOC_CREATE_QPAIR returned it;
 * the GPU addresses of the imported doorbell page, SQ, CQ and PRP pool, of
 * its shared state (gpunvme_pq_bytes(), filled by gpunvme_pq_shared_init())
 * and of the stop flag (0: none); timeout in ticks of tick_hz. A raw pair
 * (no module pool): pool 0 and, for pages over 8 KiB, a pool of its own in
 * memory mapped for the controller: set prp_va, prp_page_dma and
 * prp_stride after.
 */
static inline void gpunvme_pq_fill(struct gpunvme_pqueue_c *q, const struct gpunvme_qpair_create *c,
				   uint64_t db, uint64_t sq, uint64_t cq, uint64_t pool, uint64_t st,
				   uint64_t stop, uint64_t tick_hz, uint64_t timeout_ticks,
				   uint32_t max_transfer)
{
	memset(q, 0, sizeof(*q));
	q->sq = sq;
	q->cq = cq;
	q->sq_db = db + c->sq_db;
	q->cq_db = db + c->cq_db;
	q->stop = stop;
	q->st = st;
	q->ready = st + 192;
	q->slots = st + gpunvme_pq_slots_off(c->depth);
	q->prp_va = pool;
	q->prp_dma = c->prp_dma;
	q->timeout_ticks = timeout_ticks;
	q->tick_hz = tick_hz;
	q->depth = c->depth;
	q->prp_stride = pool ? gpunvme_pq_prp_stride(c->prp_size, c->depth) : 0;
	q->max_transfer = max_transfer;
	q->backoff = 1;
}

/* ---- the array's geometry (array.h) ---------------------------------- */

static inline uint64_t gpunvme_array_meta_lock_off(uint32_t n_frames)
{
	return (12ull * n_frames + 63) & ~63ull;
}

static inline uint64_t gpunvme_array_meta_stats_off(uint32_t n_frames, uint32_t n_sets)
{
	return (gpunvme_array_meta_lock_off(n_frames) + 8ull * n_sets + 63) & ~63ull;
}

/* Bytes of the cache's bookkeeping (array_meta_bytes), zero at the start. */
static inline uint64_t gpunvme_array_meta_bytes(uint32_t n_frames, uint32_t n_sets)
{
	return gpunvme_array_meta_stats_off(n_frames, n_sets) + 64 + 64;
}

/* The bookkeeping at GPU address meta (array_meta_attach). */
static inline void gpunvme_array_meta_attach(struct gpunvme_array_desc_c *d, uint64_t meta)
{
	d->state = meta;
	d->ferr = meta + 8ull * d->n_frames;
	d->set_lock = meta + gpunvme_array_meta_lock_off(d->n_frames);
	d->hand = d->set_lock + 4ull * d->n_sets;
	d->stats = meta + gpunvme_array_meta_stats_off(d->n_frames, d->n_sets);
	d->error = d->stats + 64;
}

/* Pages of the array, and pages of it on each controller. */
static inline uint64_t gpunvme_array_pages(const struct gpunvme_array_desc_c *d)
{
	return (d->bytes + (1ull << d->page_shift) - 1) >> d->page_shift;
}

static inline uint64_t gpunvme_array_local_pages(const struct gpunvme_array_desc_c *d)
{
	const uint64_t n = gpunvme_array_pages(d);
	const uint64_t per = (uint64_t)d->chunk_pages * d->n_ctrl;

	if (d->layout == GPUNVME_ARRAY_REPLICATE)
		return n;
	return per ? (n + per - 1) / per * d->chunk_pages : 0;
}

/*
 * The descriptor's geometry: ctrl and frame_dma are GPU addresses of the
 * tables, frames of the frames; n_frames = n_sets * ways. The bookkeeping
 * pointers come from gpunvme_array_meta_attach().
 */
static inline void gpunvme_array_desc_init(struct gpunvme_array_desc_c *d, uint64_t ctrl,
					   uint32_t n_ctrl, uint64_t frames, uint64_t frame_dma,
					   uint32_t n_frames, uint32_t ways, uint32_t page_shift,
					   uint32_t layout, uint32_t chunk_pages, uint64_t bytes,
					   uint64_t stop, uint64_t tick_hz, uint64_t timeout_ticks)
{
	memset(d, 0, sizeof(*d));
	d->ctrl = ctrl;
	d->n_ctrl = n_ctrl;
	d->frames = frames;
	d->frame_dma = frame_dma;
	d->n_frames = n_frames;
	d->ways = ways;
	d->n_sets = ways ? n_frames / ways : 0;
	d->page_shift = page_shift;
	d->frame_pages = (uint32_t)((uint64_t)n_frames << (page_shift >= 12 ? page_shift - 12 : 0));
	d->layout = layout;
	d->chunk_pages = layout == GPUNVME_ARRAY_REPLICATE ? 1 : chunk_pages;
	d->bytes = bytes;
	d->stop = stop;
	d->tick_hz = tick_hz;
	d->timeout_ticks = timeout_ticks;
}

/* array_check() on the host: 0, or -EINVAL. ctrls: the host copy of the
 * controllers' table. */
static inline int gpunvme_array_check(const struct gpunvme_array_desc_c *d,
				      const struct gpunvme_array_ctrl_c *ctrls)
{
	if (!d->ctrl || !d->frames || !d->frame_dma || !d->state || !d->n_ctrl || !d->tick_hz ||
	    !d->bytes || d->page_shift < 12 || d->page_shift > 16 ||
	    (d->layout != GPUNVME_ARRAY_STRIPE && d->layout != GPUNVME_ARRAY_REPLICATE) ||
	    !d->chunk_pages || !d->ways || d->ways > 16 || (d->ways & (d->ways - 1)) || !d->n_sets ||
	    (uint64_t)d->n_sets * d->ways != d->n_frames ||
	    d->frame_pages != (uint64_t)d->n_frames << (d->page_shift - 12) ||
	    gpunvme_array_pages(d) > (1ull << 38) - 2)
		return -EINVAL;
	const uint64_t lp = gpunvme_array_local_pages(d);
	for (uint32_t c = 0; c < d->n_ctrl; c++) {
		const struct gpunvme_array_ctrl_c *x = &ctrls[c];
		if (!x->qps || !x->nqp || x->lba_shift < 9 || x->lba_shift > d->page_shift ||
		    (1u << (d->page_shift - x->lba_shift)) > 65536 ||
		    x->lbas < (lp << (d->page_shift - x->lba_shift)))
			return -EINVAL;
	}
	return 0;
}

/* ---- the module's ioctls ---------------------------------------------- */

#define GPUNVME_UAPI_HDR(s)                                                \
	do {                                                               \
		memset(&(s), 0, sizeof(s));                                \
		(s).size = sizeof(s);                                      \
		(s).version = GPUNVME_UAPI_VERSION;                        \
	} while (0)

/* Opens a controller node (/dev/gpunvme<N>) and reads its info: the fd,
 * or -errno. */
static inline int gpunvme_array_open(const char *node, struct gpunvme_info *info)
{
	const int fd = open(node, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	GPUNVME_UAPI_HDR(*info);
	if (ioctl(fd, GPUNVME_IOC_GET_INFO, info)) {
		const int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

/* The frames' dma-buf mapped for this controller: dma receives max_pages
 * DMA addresses (one per 4 KiB page), *handle the UNMAP handle. 0 or -errno. */
static inline int gpunvme_array_map_frames(int fd, int dmabuf_fd, uint64_t max_pages, uint64_t *dma,
					   uint32_t *handle)
{
	struct gpunvme_map_dmabuf m;

	GPUNVME_UAPI_HDR(m);
	m.fd = dmabuf_fd;
	m.max_pages = max_pages;
	m.dma_addrs = (uintptr_t)dma;
	if (ioctl(fd, GPUNVME_IOC_MAP_DMABUF, &m))
		return -errno;
	*handle = m.handle;
	return 0;
}

/* A queue pair: flags 0 (shared) or GPUNVME_QPAIR_RAW (the owner's). 0 or -errno. */
static inline int gpunvme_array_create_pair(int fd, uint32_t depth, uint32_t flags,
					    struct gpunvme_qpair_create *c)
{
	GPUNVME_UAPI_HDR(*c);
	c->depth = depth;
	c->flags = flags;
	return ioctl(fd, GPUNVME_IOC_CREATE_QPAIR, c) ? -errno : 0;
}

/* Part of a pair (GPUNVME_EXPORT_*) as a dma-buf for the GPU to import:
 * the fd, or -errno. */
static inline int gpunvme_array_export(int fd, uint16_t qid, uint16_t kind)
{
	struct gpunvme_export x;

	GPUNVME_UAPI_HDR(x);
	x.qid = qid;
	x.kind = kind;
	x.flags = O_CLOEXEC | O_RDWR;
	return ioctl(fd, GPUNVME_IOC_EXPORT, &x) ? -errno : x.fd;
}

/* Teardown: a pair, then (once the file has no pairs left) a mapping. */
static inline int gpunvme_array_destroy_pair(int fd, uint16_t qid)
{
	struct gpunvme_qpair_destroy d;

	GPUNVME_UAPI_HDR(d);
	d.qid = qid;
	return ioctl(fd, GPUNVME_IOC_DESTROY_QPAIR, &d) ? -errno : 0;
}

static inline int gpunvme_array_unmap(int fd, uint32_t handle)
{
	struct gpunvme_unmap u;

	GPUNVME_UAPI_HDR(u);
	u.handle = handle;
	return ioctl(fd, GPUNVME_IOC_UNMAP, &u) ? -errno : 0;
}

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_ARRAY_HOST_H */
