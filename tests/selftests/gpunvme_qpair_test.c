// SPDX-License-Identifier: GPL-2.0-only
/*
 * Queue pairs, host buffers and mmap through the gpunvme UAPI, with real
 * I/O against QEMU's NVMe: known patterns written and every byte read back.
 *
 * The queue pairs are shared (validated) ones by default, raw pairs of the
 * controller's owner when the run asks for owner mode (mode.env, see
 * gpunvme_test_owner_mode()): the suite runs this file both ways.
 */
#include <signal.h>
#include <setjmp.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

FIXTURE(io) {
	int fd;
	struct gpunvme_info info;
	uint32_t lbs;
	uint64_t cap;
	struct hostbuf buf;
};

FIXTURE_SETUP(io)
{
	self->fd = gpunvme_open_bound();
	ASSERT_LE(0, self->fd);
	UAPI_INIT(self->info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &self->info));
	ASSERT_LE(1, self->info.num_namespaces);
	self->lbs = self->info.ns[0].lba_size;
	self->cap = self->info.ns[0].capacity_lbas;
	ASSERT_EQ(0, hostbuf_map(self->fd, 64 * 4096, &self->buf));
	TH_LOG("queue pairs: %s", gpunvme_test_owner_mode() ? "raw (owner mode)" : "shared");
}

FIXTURE_TEARDOWN(io)
{
	close(self->fd);
}

static void fill(struct hostbuf *b, size_t off, size_t len, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (size_t i = 0; i < len; i++)
		b->p[off + i] = pattern_byte(seed, lba + i / lbs, i % lbs);
}

/* Index of the first byte that differs from the pattern, or -1. */
static long check(struct hostbuf *b, size_t off, size_t len, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (size_t i = 0; i < len; i++)
		if (b->p[off + i] != pattern_byte(seed, lba + i / lbs, i % lbs))
			return i;
	return -1;
}

/* Write `pages` pages at `lba` from buffer page `pg`, read them back into
 * page `pg + pages`, compare every byte. PRP2 is the second page. */
static int roundtrip(struct qp *q, struct hostbuf *b, uint32_t nsid, uint64_t lba, int pages, int pg,
		     uint32_t lbs, uint32_t seed)
{
	size_t len = pages * 4096;
	uint32_t nlb = len / lbs;
	fill(b, pg * 4096, len, seed, lba, lbs);
	int st = qp_sync(q, rw_cmd(OPC_WRITE, nsid, lba, nlb, b->dma[pg], pages > 1 ? b->dma[pg + 1] : 0));
	if (st)
		return st < 0 ? st : 0x10000 | st;
	memset(b->p + (pg + pages) * 4096, 0, len);
	st = qp_sync(q, rw_cmd(OPC_READ, 1, lba, nlb, b->dma[pg + pages], pages > 1 ? b->dma[pg + pages + 1] : 0));
	if (st)
		return st < 0 ? st : 0x20000 | st;
	return check(b, (pg + pages) * 4096, len, seed, lba, lbs) < 0 ? 0 : -EILSEQ;
}

TEST_F(io, write_read_one_page)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 1, 0, 1, 0, self->lbs, 1));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(io, write_read_two_pages_prp2)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 1, 64, 2, 4, self->lbs, 2));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(io, last_lba)
{
	struct qp q;
	uint64_t last = self->cap - 4096 / self->lbs;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 1, last, 1, 0, self->lbs, 3));
	EXPECT_EQ(0, qp_destroy(&q));
}

/* The layout CREATE_QPAIR reports for this run's kind of pair. */
TEST_F(io, qpair_layout)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	uint32_t stride = self->info.doorbell_stride;
	if (qp_is_raw(&q)) {
		/* The real doorbells, where the NVMe specification puts them. */
		EXPECT_EQ((0x1000 + 2 * q.c.qid * stride) % 4096, q.c.sq_db);
		EXPECT_EQ((0x1000 + (2 * q.c.qid + 1) * stride) % 4096, q.c.cq_db);
		EXPECT_EQ(0, q.c.prp_offset);
		EXPECT_EQ(0, q.c.prp_size);
		EXPECT_EQ(0, q.c.prp_dma);
	} else {
		/* Shadow cells and a PRP pool. */
		EXPECT_EQ(0, q.c.sq_db);
		EXPECT_EQ(64, q.c.cq_db);
		EXPECT_NE(0, q.c.prp_offset);
		EXPECT_LE(4096, q.c.prp_size);
		EXPECT_EQ(0, q.c.prp_size % 4096);
		EXPECT_EQ(0, q.c.prp_dma % 8);
	}
	EXPECT_EQ(16 * 64 <= 4096 ? 4096 : 16 * 64, q.c.sq_size);
	EXPECT_EQ(4096, q.c.cq_size);
	EXPECT_EQ(0, q.c.cq_handle);
	EXPECT_EQ(0, qp_destroy(&q));
}

/* Transfers of 16 and 64 KiB through a PRP list (in the PRP pool of a
 * shared pair, in a page of the buffer for a raw one), every byte checked. */
TEST_F(io, write_read_prp_list)
{
	struct qp q;
	uint64_t pages[16];
	uint32_t sizes[] = { 4, 16 };
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	for (unsigned t = 0; t < 2; t++) {
		uint32_t n = sizes[t];
		uint64_t lba = 3000 + t * 256;
		uint32_t nlb = n * 4096 / self->lbs;
		if (self->info.mdts_bytes && n * 4096 > self->info.mdts_bytes)
			continue;
		pattern_fill(self->buf.p, n * 4096, 60 + t, lba, self->lbs);
		for (uint32_t i = 0; i < n; i++)
			pages[i] = self->buf.dma[i];
		/* The raw list page is page 63 of the buffer. */
		uint64_t prp2 = qp_prp2(&q, pages, n, 0, self->buf.p + 63 * 4096, self->buf.dma[63]);
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, lba, nlb, pages[0], prp2))) TH_LOG("%u pages", n);
		memset(self->buf.p + 20 * 4096, 0, n * 4096);
		for (uint32_t i = 0; i < n; i++)
			pages[i] = self->buf.dma[20 + i];
		prp2 = qp_prp2(&q, pages, n, 0, self->buf.p + 63 * 4096, self->buf.dma[63]);
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, lba, nlb, pages[0], prp2))) TH_LOG("%u pages", n);
		EXPECT_EQ(-1, pattern_check(self->buf.p + 20 * 4096, n * 4096, 60 + t, lba, self->lbs))
			TH_LOG("%u pages", n);
	}
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(io, lba_out_of_range_is_reported)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	int st = qp_sync(&q, rw_cmd(OPC_READ, 1, self->cap, 1, self->buf.dma[0], 0));
	EXPECT_EQ(0x80, st & 0x7ff) TH_LOG("status %#x", st); /* SCT 0, SC 0x80: LBA Out of Range */
	st = qp_sync(&q, rw_cmd(OPC_READ, 0, 0, 1, self->buf.dma[0], 0));
	EXPECT_EQ(0x0b, st & 0x7ff) TH_LOG("status %#x", st); /* NSID 0: Invalid Namespace or Format */
	EXPECT_EQ(0, qp_destroy(&q));
}

/* Several laps of a depth-4 queue, batches of 3 (depth - 1), every byte checked. */
TEST_F(io, queue_wrap_batches)
{
	struct qp q;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create(self->fd, 4, &q));
	for (int round = 0; round < 8; round++) {
		uint16_t cids[3];
		struct cqe c;
		for (int i = 0; i < 3; i++) {
			uint64_t lba = (round * 3 + i) * per;
			fill(&self->buf, i * 4096, 4096, 100 + round, lba, self->lbs);
			cids[i] = qp_push(&q, rw_cmd(OPC_WRITE, 1, lba, per, self->buf.dma[i], 0));
		}
		qp_ring(&q);
		/* Completions may arrive in any order: each CID exactly once. */
		int seen = 0;
		for (int i = 0; i < 3; i++) {
			ASSERT_EQ(0, qp_reap(&q, &c, 5000));
			EXPECT_EQ(0, c.status >> 1);
			for (int j = 0; j < 3; j++)
				if (c.cid == cids[j])
					seen |= 1 << j;
		}
		EXPECT_EQ(7, seen);
	}
	for (int round = 0; round < 8; round++)
		for (int i = 0; i < 3; i++) {
			uint64_t lba = (round * 3 + i) * per;
			memset(self->buf.p + 8 * 4096, 0, 4096);
			ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, lba, per, self->buf.dma[8], 0)));
			EXPECT_EQ(-1, check(&self->buf, 8 * 4096, 4096, 100 + round, lba, self->lbs));
		}
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(io, four_queue_pairs_interleaved)
{
	struct qp q[4];
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, qp_create(self->fd, 8, &q[i]));
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, roundtrip(&q[i], &self->buf, 1, 1000 + i * 16, 1, i * 2, self->lbs, 50 + i));
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, qp_destroy(&q[i]));
}

TEST_F(io, bad_qpair_arguments)
{
	struct gpunvme_qpair_create c;
	uint32_t bad_depths[] = { 0, 1, self->info.max_queue_entries + 1 };
	for (unsigned i = 0; i < 3; i++) {
		UAPI_INIT(c);
		c.depth = bad_depths[i];
		EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
		EXPECT_EQ(EINVAL, errno);
	}
	/* Bit 0 was GPUNVME_QPAIR_BRIDGED in version 1; bit 3 never existed;
	 * GPUNVME_QPAIR_CQ_IN_MAP needs a raw pair. */
	uint32_t bad_flags[] = { 1u << 0, 1u << 3, (1u << 0) | GPUNVME_QPAIR_RAW, 1u << 31,
				 GPUNVME_QPAIR_CQ_IN_MAP };
	for (unsigned i = 0; i < 5; i++) {
		UAPI_INIT(c);
		c.depth = 8;
		c.flags = bad_flags[i];
		EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c)) TH_LOG("flags %#x", bad_flags[i]);
		EXPECT_EQ(EINVAL, errno) TH_LOG("flags %#x", bad_flags[i]);
	}
	UAPI_INIT(c);
	c.depth = 8;
	c.__pad2 = 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
	/* A CQ handle without the flag that says to use it. */
	UAPI_INIT(c);
	c.depth = 8;
	c.cq_handle = 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
	/* A raw pair without owning the controller (this file has not claimed
	 * it yet in either mode). */
	UAPI_INIT(c);
	c.depth = 8;
	c.flags = GPUNVME_QPAIR_RAW;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EPERM, errno);

	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	struct gpunvme_qpair_destroy d;
	UAPI_INIT(d);
	d.qid = q.c.qid + 100;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_DESTROY_QPAIR, &d));
	EXPECT_EQ(ENOENT, errno);
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(-ENOENT, qp_destroy(&q)); /* twice */
}

TEST_F(io, bad_mmaps)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	void *p;
	p = mmap(NULL, q.c.sq_size * 2, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.sq_offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, 0);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.sq_offset + (99ull << 12));
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, self->fd, q.c.db_offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.db_offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	if (q.c.prp_size) {
		p = mmap(NULL, q.c.prp_size + 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.prp_offset);
		EXPECT_EQ(MAP_FAILED, p);
		EXPECT_EQ(EINVAL, errno);
		p = mmap(NULL, q.c.prp_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, self->fd, q.c.prp_offset);
		EXPECT_EQ(MAP_FAILED, p);
		EXPECT_EQ(EINVAL, errno);
	}
	EXPECT_EQ(0, qp_destroy(&q));
	/* A destroyed pair's objects cannot be mapped again. */
	p = mmap(NULL, q.c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.sq_offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.db_offset);
	EXPECT_EQ(MAP_FAILED, p);
	EXPECT_EQ(EINVAL, errno);
}

/*
 * A MAP_HOST whose page addresses cannot be handed out (dma_addrs points at
 * a read-only page) while the file has a pair: a command may already name
 * the pages, so they stay pinned, but as the file's own mapping, unpinned
 * at its close like any other, not kept until the controller is disabled.
 */
TEST_F(io, host_buffer_refused_late_goes_with_its_file)
{
	struct gpunvme_map_host m;
	struct qp q;
	const size_t len = 64 * 1024;
	int f = gpunvme_open_bound();
	ASSERT_LE(0, f);
	/* Shared: in owner mode the fixture's file is the owner already. */
	ASSERT_EQ(0, qp_create_flags(f, 8, 0, &q));
	uint8_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, buf);
	ASSERT_NE(MAP_FAILED, ro);
	memset(buf, 0x5a, len);
	long locked0 = vm_locked_kb();
	ASSERT_LE(0, locked0);
	int kept0 = klog_count("keeping memory the controller may still use", NULL);

	UAPI_INIT(m);
	m.addr = (uintptr_t)buf;
	m.len = len;
	m.dma_addrs = (uintptr_t)ro;
	EXPECT_EQ(-1, ioctl(f, GPUNVME_IOC_MAP_HOST, &m));
	EXPECT_EQ(EFAULT, errno);
	EXPECT_EQ(locked0 + (long)(len / 1024), vm_locked_kb()) TH_LOG("unpinned while the pair may name it");
	EXPECT_EQ(kept0, klog_count("keeping memory the controller may still use", NULL))
		TH_LOG("kept until the controller is disabled");

	qp_unmap(&q);
	close(f);
	EXPECT_EQ(locked0, vm_locked_kb()) TH_LOG("still pinned after its file closed");
	munmap(buf, len);
	munmap(ro, 4096);
}

/*
 * The pages of a MAP_HOST refused that late leave the file's buffers at
 * once: a command naming them is rejected by the relay, and the pages are
 * not written, while a command naming a mapping the file does hold runs.
 * The reply is refused by putting the request in a read-only page: the
 * page addresses (a writable array) were handed out already, so the test
 * knows what to name.
 */
TEST_F(io, host_buffer_refused_late_cannot_be_named)
{
	struct qp q;
	struct hostbuf hb;
	uint64_t addrs[2] = {0, 0};
	const uint32_t nsid = self->info.ns[0].nsid, per = 4096 / self->lbs;
	int f = gpunvme_open_bound();
	ASSERT_LE(0, f);
	/* Shared (the relay checks every command): in owner mode the fixture's
	 * file is the owner already. */
	ASSERT_EQ(0, qp_create_flags(f, 8, 0, &q));
	ASSERT_EQ(0, hostbuf_map(f, 4096, &hb));
	uint8_t *buf = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct gpunvme_map_host *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, buf);
	ASSERT_NE(MAP_FAILED, (void *)m);
	memset(buf, 0x5a, 2 * 4096);
	UAPI_INIT(*m);
	m->addr = (uintptr_t)buf;
	m->len = 2 * 4096;
	m->dma_addrs = (uintptr_t)addrs;
	ASSERT_EQ(0, mprotect(m, 4096, PROT_READ));
	EXPECT_EQ(-1, ioctl(f, GPUNVME_IOC_MAP_HOST, m));
	EXPECT_EQ(EFAULT, errno);
	ASSERT_NE(0, addrs[1]) TH_LOG("the page addresses were not handed out before the reply");

	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, nsid, 0, per, hb.dma[0], 0)));
	int st = qp_sync(&q, rw_cmd(OPC_READ, nsid, 0, per, addrs[1], 0));
	EXPECT_TRUE(st > 0 && NVME_SCT(st) == 0 && NVME_SC(st) == NVME_SC_INVALID_FIELD && (st & NVME_DNR))
		TH_LOG("a READ into a refused mapping: status %#x, want Invalid Field with DNR", st);
	long bad = -1;
	for (long i = 0; i < 2 * 4096 && bad < 0; i++)
		if (buf[i] != 0x5a)
			bad = i;
	EXPECT_EQ(-1, bad) TH_LOG("the refused pages were written at byte %ld", bad);

	qp_unmap(&q);
	close(f);
	munmap(buf, 2 * 4096);
	munmap(m, 4096);
}

TEST_F(io, bad_host_buffers)
{
	struct gpunvme_map_host m;
	uint64_t addrs[4];
	UAPI_INIT(m);
	m.addr = (uintptr_t)self->buf.p + 100;
	m.len = 4096;
	m.dma_addrs = (uintptr_t)addrs;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_MAP_HOST, &m));
	EXPECT_EQ(EINVAL, errno);
	m.addr = (uintptr_t)self->buf.p;
	m.len = 0;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_MAP_HOST, &m));
	EXPECT_EQ(EINVAL, errno);
	m.len = GPUNVME_MAX_MAP_BYTES + 4096;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_MAP_HOST, &m));
	EXPECT_EQ(EINVAL, errno);
	/* Nothing mapped at this address. */
	void *hole = mmap(NULL, 8192, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(hole, 8192);
	m.addr = (uintptr_t)hole;
	m.len = 8192;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_MAP_HOST, &m));
	EXPECT_EQ(EFAULT, errno);

	/* UNMAP while a queue pair lives is refused; afterwards it works once. */
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	struct gpunvme_unmap u;
	UAPI_INIT(u);
	u.handle = self->buf.handle;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_UNMAP, &u));
	EXPECT_EQ(EBUSY, errno);
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(0, ioctl(self->fd, GPUNVME_IOC_UNMAP, &u));
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_UNMAP, &u));
	EXPECT_EQ(ENOENT, errno);
}

/* Every I/O queue pair of the controller can be taken: by the owner's one
 * file, or in shared mode by several files, none past its quota. */
TEST_F(io, more_queues_than_available)
{
	struct gpunvme_info info = self->info;
	if (gpunvme_test_owner_mode()) {
		/* Once it owns the controller, GET_INFO reports no quota. */
		int r = claim_owner(self->fd, NULL);
		ASSERT_TRUE(r == 0 || r == -EALREADY);
		ASSERT_EQ(0, get_info(self->fd, &info));
		ASSERT_EQ(0, info.quota_qpairs) TH_LOG("an owner has no queue-pair quota");
	}
	uint32_t n = info.io_queues;
	uint32_t per = info.quota_qpairs ? info.quota_qpairs : n;
	uint32_t nfiles = (n + per - 1) / per;
	struct qp *q = calloc(n, sizeof(*q));
	int *fds = calloc(nfiles, sizeof(int));
	ASSERT_NE(NULL, q);
	ASSERT_NE(NULL, fds);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t f = i / per;
		if (i % per == 0)
			fds[f] = f ? gpunvme_open_bound() : self->fd;
		ASSERT_LE(0, fds[f]);
		ASSERT_EQ(0, qp_create(fds[f], 2, &q[i])) TH_LOG("queue %u of %u (file %u)", i + 1, n, f);
	}
	struct gpunvme_qpair_create c;
	UAPI_INIT(c);
	c.depth = 2;
	int fresh = gpunvme_open_bound();
	ASSERT_LE(0, fresh);
	/* Full: the owner's file, or in shared mode a file holding none. */
	EXPECT_EQ(-1, ioctl(gpunvme_test_owner_mode() ? self->fd : fresh, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(ENOSPC, errno);
	for (uint32_t i = 0; i < n; i++)
		EXPECT_EQ(0, qp_destroy(&q[i]));
	/* All freed: one more works again. */
	struct qp again;
	EXPECT_EQ(0, qp_create(self->fd, 2, &again));
	EXPECT_EQ(0, qp_destroy(&again));
	close(fresh);
	for (uint32_t f = 1; f < nfiles; f++)
		close(fds[f]);
	free(fds);
	free(q);
}

/* A module parameter's value (/sys/module/gpunvme/parameters/NAME), or -1. */
static long long param(const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "/sys/module/gpunvme/parameters/%s", name);
	return read_number(path, -1);
}

/* M4: one shared-mode file that takes every queue pair, buffer and export
 * its quotas allow gets EDQUOT past each, and still leaves a second file
 * able to create a pair, map memory and do I/O. Without the quotas the
 * first file took every I/O queue pair (the second got ENOSPC). */
TEST_F(io, file_quotas_leave_room_for_others)
{
	if (gpunvme_test_owner_mode())
		SKIP(return, "an owner is exempt from the quotas (it has the controller alone)");
	uint32_t nq = self->info.quota_qpairs, nm = self->info.quota_maps;
	ASSERT_LT(0, nq) TH_LOG("GET_INFO reports no queue-pair quota");
	ASSERT_LT(0, nm) TH_LOG("GET_INFO reports no mapping quota");
	EXPECT_EQ(nq, param("max_qpairs_per_file"));
	EXPECT_EQ(nm, param("max_maps_per_file"));
	ASSERT_LT(nq, self->info.io_queues) TH_LOG("the default quota must leave pairs for others");
	long long nx = param("max_exports_per_qpair");
	ASSERT_LT(0, nx);

	struct qp *q = calloc(nq, sizeof(*q));
	struct hostbuf *b = calloc(nm, sizeof(*b));
	ASSERT_NE(NULL, q);
	ASSERT_NE(NULL, b);
	for (uint32_t i = 0; i < nq; i++) {
		ASSERT_EQ(0, qp_create(self->fd, 2, &q[i])) TH_LOG("pair %u of %u", i + 1, nq);
	}
	struct qp extra;
	EXPECT_EQ(-EDQUOT, qp_create(self->fd, 2, &extra));
	/* The fixture's buffer is one of the file's maps. */
	for (uint32_t i = 1; i < nm; i++) {
		ASSERT_EQ(0, hostbuf_map(self->fd, 4096, &b[i])) TH_LOG("buffer %u of %u", i + 1, nm);
	}
	struct hostbuf over;
	EXPECT_EQ(-EDQUOT, hostbuf_map(self->fd, 4096, &over));
	int xfd[16];
	ASSERT_GE(16, nx);
	for (long long i = 0; i < nx; i++) {
		ASSERT_EQ(0, export_fd(self->fd, q[0].c.qid, GPUNVME_EXPORT_SQ, &xfd[i])) TH_LOG("export %lld", i + 1);
	}
	int x = -1;
	EXPECT_EQ(-EDQUOT, export_fd(self->fd, q[0].c.qid, GPUNVME_EXPORT_CQ, &x));
	/* Another export of another pair still works. */
	EXPECT_EQ(0, export_fd(self->fd, q[1].c.qid, GPUNVME_EXPORT_CQ, &x));
	close(x);

	/* The second tenant: a pair, a buffer and I/O, every byte checked. */
	int other = gpunvme_open_bound();
	ASSERT_LE(0, other);
	struct qp oq;
	struct hostbuf ob;
	ASSERT_EQ(0, hostbuf_map(other, 8 * 4096, &ob));
	ASSERT_EQ(0, qp_create(other, 8, &oq));
	EXPECT_EQ(0, roundtrip(&oq, &ob, 1, 4000, 2, 0, self->lbs, 77));
	EXPECT_EQ(0, qp_destroy(&oq));
	EXPECT_EQ(0, hostbuf_unmap(other, &ob));
	close(other);

	/* Giving one back makes room again. */
	for (long long i = 0; i < nx; i++)
		close(xfd[i]);
	EXPECT_EQ(0, qp_destroy(&q[nq - 1]));
	EXPECT_EQ(0, qp_create(self->fd, 2, &q[nq - 1]));
	for (uint32_t i = 0; i < nq; i++)
		EXPECT_EQ(0, qp_destroy(&q[i]));
	for (uint32_t i = 1; i < nm; i++)
		EXPECT_EQ(0, hostbuf_unmap(self->fd, &b[i]));
	EXPECT_EQ(0, hostbuf_map(self->fd, 4096, &over));
	EXPECT_EQ(0, hostbuf_unmap(self->fd, &over));
	free(b);
	free(q);
}

/* A process killed with its queue full of reads leaves the controller
 * usable: the module deletes its queues on close, then unpins. */
TEST_F(io, killed_process_leaves_controller_usable)
{
	/* In owner mode the child claims the controller, which no other file
	 * may do while this one has buffers mapped: give them back meanwhile. */
	if (gpunvme_test_owner_mode())
		ASSERT_EQ(0, hostbuf_unmap(self->fd, &self->buf));
	pid_t pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int fd = gpunvme_open_bound();
		struct qp q;
		struct hostbuf b;
		struct cqe c;
		if (fd < 0 || qp_create(fd, 256, &q) || hostbuf_map(fd, 4096 * 16, &b))
			_exit(3);
		for (;;) {
			for (int i = 0; i < 255; i++)
				qp_push(&q, rw_cmd(OPC_READ, 1, (i * 8) % 4096, 8, b.dma[i % 16], 0));
			qp_ring(&q);
			for (int i = 0; i < 255; i++)
				if (qp_reap(&q, &c, 5000))
					_exit(4);
		}
	}
	usleep(400 * 1000);
	ASSERT_EQ(0, kill(pid, SIGKILL));
	int status;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFSIGNALED(status)) TH_LOG("child exited early with %d", WEXITSTATUS(status));
	if (gpunvme_test_owner_mode())
		ASSERT_EQ(0, hostbuf_map(self->fd, 64 * 4096, &self->buf));
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 1, 2048, 2, 10, self->lbs, 77));
	EXPECT_EQ(0, qp_destroy(&q));
}

static int export_one(int fd, uint16_t qid, uint16_t kind, struct gpunvme_export *e)
{
	UAPI_INIT(*e);
	e->qid = qid;
	e->kind = kind;
	e->flags = O_CLOEXEC;
	return ioctl(fd, GPUNVME_IOC_EXPORT, e) ? -errno : 0;
}

/* Exports are dma-buf fds of the right size; bad requests are refused. */
TEST_F(io, export_dmabufs)
{
	struct qp q;
	struct gpunvme_export e;
	char link[64], target[128];
	ASSERT_EQ(0, qp_create(self->fd, 64, &q));
	ASSERT_EQ(0, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_DOORBELL, &e));
	EXPECT_EQ(4096, e.length);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", e.fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	ASSERT_LT(0, n);
	target[n] = 0;
	EXPECT_EQ(0, strncmp(target, "/dmabuf:", 8)) TH_LOG("fd is %s", target);
	close(e.fd);
	ASSERT_EQ(0, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_SQ, &e));
	EXPECT_EQ(q.c.sq_size, e.length);
	int sq_fd = e.fd;
	ASSERT_EQ(0, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_CQ, &e));
	EXPECT_EQ(q.c.cq_size, e.length);
	close(e.fd);
	if (qp_is_raw(&q)) {
		/* A raw pair has no PRP pool. */
		EXPECT_NE(0, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_PRP_POOL, &e));
	} else {
		ASSERT_EQ(0, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_PRP_POOL, &e));
		EXPECT_EQ(q.c.prp_size, e.length);
		close(e.fd);
	}
	EXPECT_EQ(-EINVAL, export_one(self->fd, q.c.qid, 0, &e));
	EXPECT_EQ(-EINVAL, export_one(self->fd, q.c.qid, 9, &e));
	EXPECT_EQ(-ENOENT, export_one(self->fd, q.c.qid + 1, GPUNVME_EXPORT_CQ, &e));
	UAPI_INIT(e);
	e.qid = q.c.qid;
	e.kind = GPUNVME_EXPORT_CQ;
	e.flags = O_NONBLOCK;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(EINVAL, errno);
	/* Destroying revokes; the fd a peer holds stays a valid, dead dma-buf. */
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(-ENOENT, export_one(self->fd, q.c.qid, GPUNVME_EXPORT_CQ, &e));
	EXPECT_EQ(0, close(sq_fd));
}

static sigjmp_buf fault_jmp;
static void on_sigbus(int sig) { (void)sig; siglongjmp(fault_jmp, 1); }

/* Unbinding revokes: ioctls fail with ENODEV and the doorbell mapping is gone. */
TEST_F(io, unbind_revokes_mappings)
{
	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 8, &q));
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	struct gpunvme_qpair_create c;
	UAPI_INIT(c);
	c.depth = 8;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(ENODEV, errno);
	signal(SIGBUS, on_sigbus);
	signal(SIGSEGV, on_sigbus);
	volatile int faulted = 0;
	if (!sigsetjmp(fault_jmp, 1))
		*(volatile uint32_t *)(q.db + q.c.sq_db) = 1;
	else
		faulted = 1;
	signal(SIGBUS, SIG_DFL);
	signal(SIGSEGV, SIG_DFL);
	EXPECT_EQ(1, faulted);
	EXPECT_EQ(-ENODEV, qp_destroy(&q));
	ASSERT_EQ(0, bind_gpunvme(gpunvme_bdf()));
}

/* memory.current of the cgroup at `dir`, or -1. */
static long long memcg_current(const char *dir)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/memory.current", dir);
	return read_number(path, -1);
}

/*
 * Queue memory counts against the memory cgroup of the task that creates
 * the pair (issue 23: coherent queue memory charged where the kernel can
 * charge it): a deep pair's SQ, CQ (and, shared, its PRP pool and lists)
 * raise the creator's memory.current by at least their size, and its
 * destroy gives it back.
 */
TEST_F(io, queue_memory_is_charged_to_the_creators_memcg)
{
	const char *root = "/sys/fs/cgroup", *cg = "/sys/fs/cgroup/gpunvme-qpair";
	char pid[32];
	struct qp q;

	mkdir(root, 0755);
	if (access("/sys/fs/cgroup/cgroup.controllers", F_OK) &&
	    mount("none", root, "cgroup2", 0, NULL) && errno != EBUSY)
		SKIP(return, "no cgroup2 here (%s)", strerror(errno));
	if (sysfs_write("/sys/fs/cgroup/cgroup.subtree_control", "+memory"))
		SKIP(return, "no memory controller in this kernel");
	ASSERT_TRUE(mkdir(cg, 0755) == 0 || errno == EEXIST);
	snprintf(pid, sizeof(pid), "%d", getpid());
	ASSERT_EQ(0, sysfs_write("/sys/fs/cgroup/gpunvme-qpair/cgroup.procs", pid));

	uint32_t depth = self->info.max_queue_entries < 2048 ? self->info.max_queue_entries : 2048;
	long long before = memcg_current(cg);
	ASSERT_LE(0, before);
	ASSERT_EQ(0, qp_create(self->fd, depth, &q));
	long long with = memcg_current(cg);
	/* What the file may map is the least the pair allocated. */
	long long size = q.c.sq_size + q.c.cq_size + q.c.prp_size;
	TH_LOG("depth %u: memory.current %lld -> %lld (+%lld); the pair maps %lld bytes", depth, before, with,
	       with - before, size);
	EXPECT_LE(size, with - before) TH_LOG("the pair's memory was not charged to its creator");
	ASSERT_EQ(0, qp_destroy(&q));
	long long after = memcg_current(cg);
	EXPECT_GE(with - size / 2, after) TH_LOG("destroying the pair did not give its charge back");

	ASSERT_EQ(0, sysfs_write("/sys/fs/cgroup/cgroup.procs", pid));
	rmdir(cg);
}

TEST_HARNESS_MAIN
