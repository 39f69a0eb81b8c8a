// SPDX-License-Identifier: GPL-2.0-only
/*
 * GPU-memory path without a GPU: dma-bufs imported with MAP_DMABUF as data
 * buffers. udmabuf (memfd -> dma-buf) stands in for VRAM; a queue pair's own
 * exported SQ memory stands in for a buffer whose exporter revokes it.
 * Shared pairs by default, the owner's raw pairs in the suite's owner-mode
 * run (gpunvme_test_owner_mode()); in shared mode an imported buffer is one
 * the file mapped, so its addresses pass the validator until it is revoked.
 */
#include <linux/udmabuf.h>
#include <pthread.h>
#include <sys/syscall.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

/* A udmabuf of `len` bytes; its memory mapped at *mem. */
static int make_udmabuf(size_t len, uint8_t **mem)
{
	int memfd = syscall(SYS_memfd_create, "vram-standin", MFD_ALLOW_SEALING);
	if (memfd < 0 || ftruncate(memfd, len) || fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK))
		return -1;
	*mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	int dev = open("/dev/udmabuf", O_RDWR);
	if (dev < 0 || *mem == MAP_FAILED)
		return -1;
	struct udmabuf_create c = { .memfd = memfd, .flags = UDMABUF_FLAGS_CLOEXEC, .offset = 0, .size = len };
	int fd = ioctl(dev, UDMABUF_CREATE, &c);
	close(dev);
	close(memfd);
	return fd;
}

/* Kernel log lines of the importer (rust/dma/dmabuf_importer.c) and exporter. */
#define KEPT_RAW "invalidated by its exporter while this file has raw queue pairs"
#define WAITING "invalidated by its exporter: waiting up to 1 s for"
#define KEPT_INFLIGHT "invalidated by its exporter: accepted commands still in flight after 1 s"
#define EXPORT_HELD "importer mapping(s) of the queue memory still held"

/* Test knob: the relay of shared pair `qid` leaves its real CQ alone. */
static int hold_relay(uint16_t qid)
{
	char path[160], val[16];

	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/relay_hold_qid", gpunvme_bdf());
	snprintf(val, sizeof(val), "%u", qid);
	return sysfs_write(path, val);
}

static int map_dmabuf(int fd, int buf_fd, uint64_t *addrs, uint64_t max_pages, struct gpunvme_map_dmabuf *m)
{
	UAPI_INIT(*m);
	m->fd = buf_fd;
	m->max_pages = max_pages;
	m->dma_addrs = (uintptr_t)addrs;
	return ioctl(fd, GPUNVME_IOC_MAP_DMABUF, m) ? -errno : 0;
}

FIXTURE(dmabuf) {
	int fd;
	uint32_t lbs;
};

FIXTURE_SETUP(dmabuf)
{
	struct gpunvme_info info;
	self->fd = gpunvme_open_bound();
	ASSERT_LE(0, self->fd);
	UAPI_INIT(info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	self->lbs = info.ns[0].lba_size;
}

FIXTURE_TEARDOWN(dmabuf)
{
	close(self->fd);
}

/* NVMe writes come from the dma-buf and reads land in it, byte-exact. */
TEST_F(dmabuf, udmabuf_data_path)
{
	const size_t len = 16 * 4096;
	uint8_t *mem;
	uint64_t addrs[16];
	struct gpunvme_map_dmabuf m;
	int buf = make_udmabuf(len, &mem);
	ASSERT_LE(0, buf);
	ASSERT_EQ(0, map_dmabuf(self->fd, buf, addrs, 16, &m));
	EXPECT_EQ(len, m.len);
	close(buf); /* the module holds its own reference */

	struct qp q;
	ASSERT_EQ(0, qp_create(self->fd, 32, &q));
	uint32_t per = 4096 / self->lbs;
	for (int pg = 0; pg < 8; pg++)
		for (int i = 0; i < 4096; i++)
			mem[pg * 4096 + i] = pattern_byte(9, 3000 + pg * per + i / self->lbs, i % self->lbs);
	for (int pg = 0; pg < 8; pg++)
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, 3000 + pg * per, per, addrs[pg], 0)));
	memset(mem + 8 * 4096, 0xee, 8 * 4096);
	/* Read back two pages at a time (PRP1 + PRP2)... */
	for (int pg = 0; pg < 8; pg += 2)
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, 3000 + pg * per, 2 * per, addrs[8 + pg], addrs[9 + pg])));
	long bad = -1;
	for (int i = 0; i < 8 * 4096 && bad < 0; i++)
		if (mem[8 * 4096 + i] != pattern_byte(9, 3000 + i / self->lbs, i % self->lbs))
			bad = i;
	EXPECT_EQ(-1, bad);
	/* ...and all 8 in one command through a PRP list (the pool of a shared
	 * pair; for a raw pair, a page of host memory). */
	struct hostbuf list;
	ASSERT_EQ(0, hostbuf_map(self->fd, 4096, &list));
	memset(mem + 8 * 4096, 0xee, 8 * 4096);
	uint64_t prp2 = qp_prp2(&q, &addrs[8], 8, 0, list.p, list.dma[0]);
	ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, 3000, 8 * per, addrs[8], prp2)));
	EXPECT_EQ(-1, pattern_check(mem + 8 * 4096, 8 * 4096, 9, 3000, self->lbs));
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
}

TEST_F(dmabuf, bad_imports)
{
	uint64_t addrs[4];
	struct gpunvme_map_dmabuf m;
	int notbuf = open("/proc/self/status", O_RDONLY);
	EXPECT_EQ(-EINVAL, map_dmabuf(self->fd, notbuf, addrs, 4, &m));
	close(notbuf);
	EXPECT_EQ(-EBADF, map_dmabuf(self->fd, 12345, addrs, 4, &m));
	uint8_t *mem;
	int buf = make_udmabuf(8 * 4096, &mem);
	ASSERT_LE(0, buf);
	EXPECT_EQ(-EINVAL, map_dmabuf(self->fd, buf, addrs, 4, &m)); /* 8 pages, room for 4 */
	EXPECT_EQ(-EINVAL, map_dmabuf(self->fd, buf, addrs, 0, &m));
	close(buf);
}

/*
 * Revocation: import the SQ memory that queue pair A exports, read data
 * into it through queue pair B (it lands in A's SQ, seen through A's
 * mapping), destroy A (its exports are revoked, so the import is unmapped),
 * and the same read no longer reaches that memory: the IOMMU blocks it.
 * (QEMU's controller still reports success for a DMA the IOMMU dropped, as
 * posted PCIe writes do on hardware; the memory is what the test checks.)
 */
TEST_F(dmabuf, revoked_import_fails_io)
{
	struct qp a, b;
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	uint64_t addrs[16];
	ASSERT_EQ(0, qp_create(self->fd, 256, &a)); /* SQ: 16 KiB */
	ASSERT_EQ(0, qp_create(self->fd, 16, &b));
	UAPI_INIT(e);
	e.qid = a.c.qid;
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	ASSERT_EQ(0, map_dmabuf(self->fd, e.fd, addrs, 16, &m));
	EXPECT_EQ(a.c.sq_size, m.len);

	/* Known data on disk, then read into the imported buffer. */
	struct hostbuf hb;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, hostbuf_map(self->fd, 4096, &hb));
	for (int i = 0; i < 4096; i++)
		hb.p[i] = pattern_byte(21, 5000 + i / self->lbs, i % self->lbs);
	ASSERT_EQ(0, qp_sync(&b, rw_cmd(OPC_WRITE, 1, 5000, per, hb.dma[0], 0)));
	ASSERT_EQ(0, qp_sync(&b, rw_cmd(OPC_READ, 1, 5000, per, addrs[1], 0)));
	const volatile uint8_t *asq = (const volatile uint8_t *)a.sq + 4096;
	long bad = -1;
	for (int i = 0; i < 4096 && bad < 0; i++)
		if (asq[i] != pattern_byte(21, 5000 + i / self->lbs, i % self->lbs))
			bad = i;
	EXPECT_EQ(-1, bad);

	/* Destroy A but keep its SQ mapped: the memory stays allocated while mapped. */
	int kept0 = klog_count(KEPT_RAW, NULL), held0 = klog_count(EXPORT_HELD, NULL);
	ASSERT_EQ(0, qpair_destroy(self->fd, a.c.qid)); /* revokes the export */
	if (qp_is_raw(&b)) {
		/* The module never sees a raw pair's commands, so one may still
		 * name the import: it stays mapped (and the exporter keeps its
		 * memory) until B is gone and the import is unmapped. */
		EXPECT_EQ(kept0 + 1, klog_count(KEPT_RAW, NULL));
		EXPECT_EQ(held0 + 1, klog_count(EXPORT_HELD, NULL));
		EXPECT_EQ(0, qp_destroy(&b));
		EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
		close(e.fd);
		return;
	}
	EXPECT_EQ(kept0, klog_count(KEPT_RAW, NULL));
	EXPECT_EQ(held0, klog_count(EXPORT_HELD, NULL)) TH_LOG("an idle shared file's import was not unmapped");
	volatile uint8_t *w = (volatile uint8_t *)a.sq + 4096;
	for (int i = 0; i < 4096; i++)
		w[i] = 0x5a;
	int st = qp_sync(&b, rw_cmd(OPC_READ, 1, 5000, per, addrs[1], 0));
	EXPECT_LE(0, st) TH_LOG("no completion: %d", st);
	/* A shared pair's validator no longer counts the revoked import as
	 * this file's buffer (its IOVA may be reused for anything): the SQE
	 * is rejected before it reaches the controller. */
	if (!qp_is_raw(&b))
		EXPECT_EQ(NVME_SC_INVALID_FIELD | NVME_DNR, st > 0 ? st & (0x7ff | NVME_DNR) : st)
			TH_LOG("status %#x", st);
	bad = -1;
	for (int i = 0; i < 4096 && bad < 0; i++)
		if (asq[i] != 0x5a)
			bad = i;
	EXPECT_EQ(-1, bad) TH_LOG("the controller wrote into a revoked buffer (status %#x)", st);

	EXPECT_EQ(0, qp_destroy(&b));
	EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
	close(e.fd);
}

/*
 * Revocation with a command in flight on the revoked buffer (shared pairs,
 * whose commands the relay counts). Queue pair B reads into the import of
 * A's SQ memory; the relay is held (debugfs relay_hold_qid) after it
 * started the read, so as far as the module can tell the command is in
 * flight. Destroying A revokes the import: the importer must not unmap it
 * while that command may still write it.
 */
struct revoke_fixture {
	struct qp a, b;
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	uint64_t addrs[16];
	uint32_t per;
	uint16_t cid;
};

static int revoke_setup(int fd, uint32_t lbs, struct revoke_fixture *r)
{
	struct hostbuf hb;

	memset(r, 0, sizeof(*r));
	if (qp_create(fd, 256, &r->a) || qp_create(fd, 16, &r->b))
		return -1;
	UAPI_INIT(r->e);
	r->e.qid = r->a.c.qid;
	r->e.kind = GPUNVME_EXPORT_SQ;
	if (ioctl(fd, GPUNVME_IOC_EXPORT, &r->e) || map_dmabuf(fd, r->e.fd, r->addrs, 16, &r->m))
		return -1;
	r->per = 4096 / lbs;
	if (hostbuf_map(fd, 4096, &hb))
		return -1;
	for (int i = 0; i < 4096; i++)
		hb.p[i] = pattern_byte(33, 6000 + i / lbs, i % lbs);
	if (qp_sync(&r->b, rw_cmd(OPC_WRITE, 1, 6000, r->per, hb.dma[0], 0)))
		return -1;
	memset((void *)((uint8_t *)r->a.sq + 4096), 0, 4096);
	/* Hold B's relay, then start the read into A's SQ page 1. */
	if (hold_relay(r->b.c.qid))
		return -1;
	long long accepted = qp_counter(r->b.c.qid, "sqes_accepted");
	r->cid = qp_push(&r->b, rw_cmd(OPC_READ, 1, 6000, r->per, r->addrs[1], 0));
	qp_ring(&r->b);
	return qp_counter_settles(r->b.c.qid, "sqes_accepted", accepted + 1) == accepted + 1 ? 0 : -1;
}

static int destroy_a(int fd, struct revoke_fixture *r)
{
	return qpair_destroy(fd, r->a.c.qid);
}

static void revoke_cleanup(int fd, struct revoke_fixture *r)
{
	hold_relay(0);
	qp_destroy(&r->b);
	unmap_handle(fd, r->m.handle);
	close(r->e.fd);
}

/* Lets the relay go once the importer says it waits for the command. */
static void *release_when_waiting(void *before)
{
	int seen = klog_wait_more(WAITING, NULL, (int)(intptr_t)before, 10000);

	if (seen > (int)(intptr_t)before)
		hold_relay(0);
	return (void *)(intptr_t)(seen > (int)(intptr_t)before);
}

/* The importer waits for the command: when the revoke returns, the read
 * has completed (its completion is already in B's CQ) and its data landed. */
TEST_F(dmabuf, revoke_waits_for_accepted_commands)
{
	struct revoke_fixture r;
	pthread_t t;
	void *released;

	if (gpunvme_test_owner_mode())
		SKIP(return, "raw pairs: the module does not see their commands (revoked_import_fails_io covers them)");
	ASSERT_EQ(0, revoke_setup(self->fd, self->lbs, &r));
	int waiting = klog_count(WAITING, NULL), kept = klog_count(KEPT_INFLIGHT, NULL);
	ASSERT_EQ(0, pthread_create(&t, NULL, release_when_waiting, (void *)(intptr_t)waiting));
	EXPECT_EQ(0, destroy_a(self->fd, &r));
	struct cqe c;
	int reaped = qp_reap(&r.b, &c, 0); /* no waiting: it must be there already */
	pthread_join(t, &released);
	EXPECT_TRUE(released != NULL) TH_LOG("the importer never waited for the command in flight");
	EXPECT_EQ(0, reaped) TH_LOG("the revoke returned while the read into the buffer was in flight");
	if (!reaped) {
		EXPECT_EQ(r.cid, c.cid);
		EXPECT_EQ(0, c.status >> 1);
	}
	EXPECT_EQ(-1, pattern_check((uint8_t *)r.a.sq + 4096, 4096, 33, 6000, self->lbs));
	EXPECT_EQ(kept, klog_count(KEPT_INFLIGHT, NULL));
	revoke_cleanup(self->fd, &r);
}

/* A command that does not complete within the bound: the importer keeps
 * the mapping (so the exporter keeps the memory), and the command, when it
 * completes, completes normally into memory that still exists. */
TEST_F(dmabuf, revoke_keeps_mapping_of_stuck_commands)
{
	struct revoke_fixture r;

	if (gpunvme_test_owner_mode())
		SKIP(return, "raw pairs: the module does not see their commands (revoked_import_fails_io covers them)");
	ASSERT_EQ(0, revoke_setup(self->fd, self->lbs, &r));
	int kept = klog_count(KEPT_INFLIGHT, NULL), held = klog_count(EXPORT_HELD, NULL);
	EXPECT_EQ(0, destroy_a(self->fd, &r));
	EXPECT_EQ(kept + 1, klog_count(KEPT_INFLIGHT, NULL)) TH_LOG("the import was unmapped under a command in flight");
	EXPECT_EQ(held + 1, klog_count(EXPORT_HELD, NULL)) TH_LOG("the exporter was not told the mapping is still held");
	struct cqe c;
	EXPECT_EQ(-ETIMEDOUT, qp_reap(&r.b, &c, 50));
	ASSERT_EQ(0, hold_relay(0));
	ASSERT_EQ(0, qp_reap(&r.b, &c, 5000));
	EXPECT_EQ(r.cid, c.cid);
	EXPECT_EQ(0, c.status >> 1);
	EXPECT_EQ(-1, pattern_check((uint8_t *)r.a.sq + 4096, 4096, 33, 6000, self->lbs));
	/* B's later commands cannot name the revoked pages. */
	EXPECT_EQ(NVME_SC_INVALID_FIELD | NVME_DNR,
		  qp_sync(&r.b, rw_cmd(OPC_READ, 1, 6000, r.per, r.addrs[1], 0)) & (0x7ff | NVME_DNR));
	revoke_cleanup(self->fd, &r);
}

#define LET_GO_FREED "its importers let go of the deleted queue's memory: freed"

/* A destroyed pair's memory goes with its last mmap: at the destroy when
 * it is not mapped, at the last munmap when it is (until then the mapping
 * stays valid), not at close. */
TEST_F(dmabuf, destroyed_pair_is_freed_with_its_last_mapping)
{
	struct qp q;
	long long base = qpairs_allocated();

	ASSERT_LE(0, base) TH_LOG("no debugfs qpairs_allocated");
	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	EXPECT_EQ(base + 1, qpairs_allocated());
	EXPECT_EQ(0, qp_destroy(&q)); /* unmaps first */
	EXPECT_EQ(base, qpairs_allocated()) TH_LOG("an unmapped pair was not freed by its destroy");

	ASSERT_EQ(0, qp_create(self->fd, 16, &q));
	ASSERT_EQ(0, qpair_destroy(self->fd, q.c.qid));
	EXPECT_EQ(base + 1, qpairs_allocated()) TH_LOG("a mapped pair was freed by its destroy");
	(void)q.cq[0].cid; /* still mapped: no SIGBUS */
	munmap((void *)q.sq, q.c.sq_size);
	munmap((void *)q.db, 4096);
	if (q.prp)
		munmap((void *)q.prp, q.c.prp_size);
	EXPECT_EQ(base + 1, qpairs_allocated()) TH_LOG("freed while its CQ was still mapped");
	(void)q.cq[0].cid;
	munmap((void *)q.cq, q.c.cq_size);
	EXPECT_EQ(base, qpairs_allocated()) TH_LOG("not freed with its last mapping");
}

/* The finding of stop 12: a pair whose export an importer held at the
 * revoke (here this file's own import, kept under a read held in flight)
 * was kept until the controller's next disable, so create, export, import,
 * stall and destroy in a loop grew kernel memory without bound. Now it is
 * freed once the importer lets go; three rounds end where they started. */
TEST_F_TIMEOUT(dmabuf, held_export_is_freed_when_its_importer_lets_go, 90)
{
	if (gpunvme_test_owner_mode())
		SKIP(return, "raw pairs: the module does not see their commands, so nothing holds the import");
	long long base = qpairs_allocated();
	int freed = klog_count(LET_GO_FREED, NULL);

	ASSERT_LE(0, base);
	for (int round = 0; round < 3; round++) {
		struct revoke_fixture r;
		struct cqe c;

		ASSERT_EQ(0, revoke_setup(self->fd, self->lbs, &r));
		EXPECT_EQ(base + 2, qpairs_allocated());
		EXPECT_EQ(0, destroy_a(self->fd, &r));
		qp_unmap(&r.a);
		EXPECT_EQ(base + 2, qpairs_allocated()) TH_LOG("A freed while the import under a command held it");
		ASSERT_EQ(0, hold_relay(0));
		ASSERT_EQ(0, qp_reap(&r.b, &c, 5000));
		EXPECT_EQ(0, c.status >> 1);
		EXPECT_EQ(0, qp_destroy(&r.b));
		EXPECT_EQ(base + 1, qpairs_allocated());
		EXPECT_EQ(0, unmap_handle(self->fd, r.m.handle));
		EXPECT_EQ(base, qpairs_allocated()) TH_LOG("round %d: A kept after its importer let go", round);
		close(r.e.fd);
	}
	EXPECT_EQ(freed + 3, klog_count(LET_GO_FREED, NULL));
}

/* The same when the exporting file closes first: its pair outlives the
 * file while another file's import holds it, and goes when that import
 * does. */
TEST_F_TIMEOUT(dmabuf, held_export_outlives_its_file_until_let_go, 60)
{
	if (gpunvme_test_owner_mode())
		SKIP(return, "raw pairs: the module does not see their commands, so nothing holds the import");
	long long base = qpairs_allocated();
	int exporter = gpunvme_open_bound();
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	struct hostbuf hb;
	struct qp a, b;
	struct cqe c;
	uint64_t addrs[16];
	uint32_t per = 4096 / self->lbs;

	ASSERT_LE(0, exporter);
	ASSERT_EQ(0, qp_create(exporter, 256, &a));
	ASSERT_EQ(0, qp_create(self->fd, 16, &b));
	UAPI_INIT(e);
	e.qid = a.c.qid;
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(exporter, GPUNVME_IOC_EXPORT, &e));
	ASSERT_EQ(0, map_dmabuf(self->fd, e.fd, addrs, 16, &m));
	ASSERT_EQ(0, hostbuf_map(self->fd, 4096, &hb));
	for (int i = 0; i < 4096; i++)
		hb.p[i] = pattern_byte(34, 6100 + i / self->lbs, i % self->lbs);
	ASSERT_EQ(0, qp_sync(&b, rw_cmd(OPC_WRITE, 1, 6100, per, hb.dma[0], 0)));
	ASSERT_EQ(0, hold_relay(b.c.qid));
	long long accepted = qp_counter(b.c.qid, "sqes_accepted");
	qp_push(&b, rw_cmd(OPC_READ, 1, 6100, per, addrs[1], 0));
	qp_ring(&b);
	ASSERT_EQ(accepted + 1, qp_counter_settles(b.c.qid, "sqes_accepted", accepted + 1));
	EXPECT_EQ(base + 2, qpairs_allocated());
	qp_unmap(&a);
	close(exporter);
	EXPECT_EQ(base + 2, qpairs_allocated()) TH_LOG("A freed with its file while an import held it");
	ASSERT_EQ(0, hold_relay(0));
	ASSERT_EQ(0, qp_reap(&b, &c, 5000));
	EXPECT_EQ(0, c.status >> 1);
	EXPECT_EQ(0, qp_destroy(&b));
	EXPECT_EQ(base + 1, qpairs_allocated());
	EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
	EXPECT_EQ(base, qpairs_allocated()) TH_LOG("A kept after its importer let go");
	EXPECT_EQ(0, hostbuf_unmap(self->fd, &hb));
	close(e.fd);
}

/*
 * A MAP_DMABUF of another file's SQ export whose page addresses cannot be
 * handed out (dma_addrs points at a read-only page) while the importing
 * file has a pair: a command may already name the pages, so the import
 * stays, but as the file's own mapping, released at its close like any
 * other. Kept until the controller is disabled instead, it would hold the
 * dma-buf, and with it gpunvme itself, loaded until unbind: the module's
 * reference count shows the dma-buf going once both files are done.
 */
TEST_F(dmabuf, import_refused_late_goes_with_its_file)
{
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	struct qp a, b;
	int exporter = gpunvme_open_bound(), importer = gpunvme_open_bound();
	ASSERT_LE(0, exporter);
	ASSERT_LE(0, importer);
	long long ref0 = gpunvme_refcnt();
	ASSERT_LT(0, ref0);
	ASSERT_EQ(0, qp_create_flags(exporter, 64, 0, &a));
	ASSERT_EQ(0, qp_create_flags(importer, 8, 0, &b));
	UAPI_INIT(e);
	e.qid = a.c.qid;
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(exporter, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(ref0 + 1, gpunvme_refcnt()) TH_LOG("a dma-buf is one reference");
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, ro);
	int kept0 = klog_count("keeping memory the controller may still use", NULL);
	EXPECT_EQ(-EFAULT, map_dmabuf(importer, e.fd, ro, 16, &m));
	EXPECT_EQ(kept0, klog_count("keeping memory the controller may still use", NULL))
		TH_LOG("kept until the controller is disabled");
	close(e.fd);

	qp_unmap(&b);
	close(importer);
	EXPECT_EQ(0, qp_destroy(&a));
	/* Nothing holds the dma-buf now: the importer's file released it. */
	for (int i = 0; i < 100 && gpunvme_refcnt() != ref0 - 1; i++)
		usleep(10000);
	EXPECT_EQ(ref0 - 1, gpunvme_refcnt()) TH_LOG("the SQ's dma-buf outlived both the import's file and the pair");
	close(exporter);
	munmap(ro, 4096);
}

/*
 * GPUNVME_QPAIR_CQ_IN_MAP: an owner's raw pair whose CQ the controller
 * writes into a mapping of the file. A udmabuf stands in for GPU memory
 * exported as a dma-buf; the test polls the CQ through the udmabuf's memfd
 * mapping, as a GPU polls its CQ in its own memory. In shared mode the
 * flag is refused (a shared pair's CQ is the module's mirror).
 */
TEST_F(dmabuf, cq_in_a_mapping)
{
	struct gpunvme_qpair_create c;
	struct gpunvme_map_dmabuf m, small;
	uint64_t addrs[16], small_addrs[1];
	uint8_t *cqmem, *smallmem;
	const uint32_t depth = 16;
	int buf = make_udmabuf(64 * 1024, &cqmem), small_buf = make_udmabuf(4096, &smallmem);

	ASSERT_LE(0, buf);
	ASSERT_LE(0, small_buf);
	ASSERT_EQ(0, map_dmabuf(self->fd, buf, addrs, 16, &m));
	if (!gpunvme_test_owner_mode()) {
		UAPI_INIT(c);
		c.depth = depth;
		c.flags = GPUNVME_QPAIR_CQ_IN_MAP;
		c.cq_handle = m.handle;
		EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
		EXPECT_EQ(EINVAL, errno);
		EXPECT_LT(0, klog_count("GPUNVME_QPAIR_CQ_IN_MAP needs a raw pair", NULL));
		EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
		close(buf);
		close(small_buf);
		return;
	}
	ASSERT_EQ(0, map_dmabuf(self->fd, small_buf, small_addrs, 1, &small));
	int r = claim_owner(self->fd, NULL);
	ASSERT_TRUE(r == 0 || r == -EALREADY);
	/* A handle of no mapping, and a mapping smaller than the CQ. */
	UAPI_INIT(c);
	c.depth = depth;
	c.flags = GPUNVME_QPAIR_RAW | GPUNVME_QPAIR_CQ_IN_MAP;
	c.cq_handle = m.handle + 1000;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
	c.cq_handle = small.handle;
	c.depth = 512; /* 8 KiB of CQEs into 4 KiB */
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_LT(0, klog_count("a CQ of depth 512 needs 8192", NULL));

	/* The pair, its CQ at the start of the udmabuf. */
	struct qp q;
	memset(&q, 0, sizeof(q));
	memset(cqmem, 0xff, 64 * 1024);
	memset(cqmem, 0, 4096); /* phase 0 before the controller's first pass */
	q.fd = self->fd;
	UAPI_INIT(q.c);
	q.c.depth = depth;
	q.c.flags = GPUNVME_QPAIR_RAW | GPUNVME_QPAIR_CQ_IN_MAP;
	q.c.cq_handle = m.handle;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &q.c));
	EXPECT_EQ(0, q.c.cq_offset);
	EXPECT_EQ(4096, q.c.cq_size);
	q.sq = mmap(NULL, q.c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.sq_offset);
	q.db = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, q.c.db_offset);
	ASSERT_NE(MAP_FAILED, (void *)q.sq);
	ASSERT_NE(MAP_FAILED, (void *)q.db);
	q.cq = (volatile struct cqe *)cqmem;
	q.phase = 1;
	/* The module's CQ page of the pair is neither mappable nor exported. */
	struct gpunvme_export e;
	UAPI_INIT(e);
	e.qid = q.c.qid;
	e.kind = GPUNVME_EXPORT_CQ;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(EINVAL, errno);
	/* Nor at the offset a caller would guess from a pair whose CQ the
	 * module holds (its CQ and SQ offsets are as far apart). */
	struct qp g;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_RAW, &g));
	off_t guess = (off_t)(q.c.sq_offset + (g.c.cq_offset - g.c.sq_offset));
	EXPECT_EQ(MAP_FAILED, mmap(NULL, 4096, PROT_READ, MAP_SHARED, self->fd, guess));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(0, qp_destroy(&g));
	/* The mapping is held while the pair lives. */
	EXPECT_EQ(-EBUSY, unmap_handle(self->fd, m.handle));

	/* Three passes over the CQ (both phases): write a page of a known
	 * pattern, read it back into a zeroed page, check every byte. */
	struct hostbuf hb;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, hostbuf_map(self->fd, 2 * 4096, &hb));
	for (uint32_t i = 0; i < 3 * depth / 2; i++) {
		uint64_t lba = 9000 + i * per;
		pattern_fill(hb.p, 4096, 61 + i, lba, self->lbs);
		memset(hb.p + 4096, 0, 4096);
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, lba, per, hb.dma[0], 0))) TH_LOG("write %u", i);
		ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, lba, per, hb.dma[1], 0))) TH_LOG("read %u", i);
		ASSERT_EQ(-1, pattern_check(hb.p + 4096, 4096, 61 + i, lba, self->lbs)) TH_LOG("data %u", i);
	}
	EXPECT_EQ(1, q.head == (3 * depth) % depth && q.phase == 0) TH_LOG("head %u phase %u", q.head, q.phase);
	/* Nothing past the CQ was written. */
	int past = -1;
	for (int i = 4096; i < 64 * 1024 && past < 0; i++)
		if (cqmem[i] != 0xff)
			past = i;
	EXPECT_EQ(-1, past);

	munmap((void *)q.sq, q.c.sq_size);
	munmap((void *)q.db, 4096);
	EXPECT_EQ(0, qpair_destroy(self->fd, q.c.qid));
	EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
	EXPECT_EQ(0, unmap_handle(self->fd, small.handle));
	EXPECT_EQ(0, hostbuf_unmap(self->fd, &hb));
	close(buf);
	close(small_buf);
}

/*
 * A mapping refused at its reply (its DMA addresses cannot be written
 * back) while the file has a pair stays the file's until close, but leaves
 * its buffers at once: a raw pair's CQ may not be put there
 * (GPUNVME_QPAIR_CQ_IN_MAP naming it is a handle of no mapping), while a
 * mapping made right after it takes the CQ. Its handle is known: handles
 * come from one counter per file, so it lies between the mappings made
 * just before and after it.
 */
TEST_F(dmabuf, cq_not_in_a_mapping_refused_late)
{
	struct gpunvme_qpair_create c;
	struct gpunvme_map_dmabuf before, late, after;
	uint64_t addrs[1];
	uint8_t *mem[3];
	int buf[3];

	if (!gpunvme_test_owner_mode())
		SKIP(return, "GPUNVME_QPAIR_CQ_IN_MAP needs a raw pair (owner mode)");
	for (int i = 0; i < 3; i++) {
		buf[i] = make_udmabuf(4096, &mem[i]);
		ASSERT_LE(0, buf[i]);
	}
	int r = claim_owner(self->fd, NULL);
	ASSERT_TRUE(r == 0 || r == -EALREADY);
	struct qp g;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_RAW, &g));
	void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, ro);
	ASSERT_EQ(0, map_dmabuf(self->fd, buf[0], addrs, 1, &before));
	EXPECT_EQ(-EFAULT, map_dmabuf(self->fd, buf[1], ro, 1, &late));
	ASSERT_EQ(0, map_dmabuf(self->fd, buf[2], addrs, 1, &after));
	ASSERT_EQ(before.handle + 2, after.handle) TH_LOG("the refused mapping took no handle between them");

	int none0 = klog_count("no such mapping on this file", NULL);
	UAPI_INIT(c);
	c.depth = 16;
	c.flags = GPUNVME_QPAIR_RAW | GPUNVME_QPAIR_CQ_IN_MAP;
	c.cq_handle = before.handle + 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
	EXPECT_EQ(none0 + 1, klog_count("no such mapping on this file", NULL));
	c.cq_handle = after.handle;
	EXPECT_EQ(0, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(0, qpair_destroy(self->fd, c.qid));

	EXPECT_EQ(0, qp_destroy(&g));
	EXPECT_EQ(0, unmap_handle(self->fd, before.handle));
	EXPECT_EQ(0, unmap_handle(self->fd, after.handle));
	for (int i = 0; i < 3; i++)
		close(buf[i]);
	munmap(ro, 4096);
}

/*
 * The CQ's mapping revoked by its exporter while the raw pair lives: the
 * CQ is in an import of another pair's SQ memory (the module's own export,
 * which it revokes when that pair is destroyed). The importer must keep
 * the mapping, since the controller still writes CQEs there; I/O goes on
 * into it; the memory goes once the pair is destroyed and the mapping and
 * the exporter's own mmaps are gone.
 */
TEST_F_TIMEOUT(dmabuf, cq_in_a_revoked_mapping_stays_until_the_pair_goes, 60)
{
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	struct hostbuf hb;
	struct qp a, b;
	uint64_t addrs[16];
	uint32_t per = 4096 / self->lbs;

	if (!gpunvme_test_owner_mode())
		SKIP(return, "GPUNVME_QPAIR_CQ_IN_MAP needs a raw pair (owner mode)");
	long long base = qpairs_allocated();
	ASSERT_LE(0, base);
	ASSERT_EQ(0, qp_create(self->fd, 256, &a)); /* its SQ memory: 16 KiB, unused */
	UAPI_INIT(e);
	e.qid = a.c.qid;
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	ASSERT_EQ(0, map_dmabuf(self->fd, e.fd, addrs, 16, &m));
	memset(&b, 0, sizeof(b));
	b.fd = self->fd;
	UAPI_INIT(b.c);
	b.c.depth = 16;
	b.c.flags = GPUNVME_QPAIR_RAW | GPUNVME_QPAIR_CQ_IN_MAP;
	b.c.cq_handle = m.handle;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &b.c));
	b.sq = mmap(NULL, b.c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, b.c.sq_offset);
	b.db = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->fd, b.c.db_offset);
	ASSERT_NE(MAP_FAILED, (void *)b.sq);
	ASSERT_NE(MAP_FAILED, (void *)b.db);
	b.cq = (volatile struct cqe *)a.sq; /* the CPU's view of B's CQ */
	b.phase = 1;
	ASSERT_EQ(0, hostbuf_map(self->fd, 2 * 4096, &hb));
	/* A page written, read back, checked; `round` picks LBAs and pattern. */
#define ROUND(round) do { \
		uint64_t lba = 9700 + (round) * per; \
		pattern_fill(hb.p, 4096, 80 + (round), lba, self->lbs); \
		memset(hb.p + 4096, 0, 4096); \
		ASSERT_EQ(0, qp_sync(&b, rw_cmd(OPC_WRITE, 1, lba, per, hb.dma[0], 0))); \
		ASSERT_EQ(0, qp_sync(&b, rw_cmd(OPC_READ, 1, lba, per, hb.dma[1], 0))); \
		ASSERT_EQ(-1, pattern_check(hb.p + 4096, 4096, 80 + (round), lba, self->lbs)); \
	} while (0)
	for (int r = 0; r < 4; r++)
		ROUND(r);
	int kept = klog_count(KEPT_RAW, NULL);
	ASSERT_EQ(0, qpair_destroy(self->fd, a.c.qid)); /* revokes the export */
	EXPECT_EQ(kept + 1, klog_count(KEPT_RAW, NULL)) TH_LOG("the CQ's mapping was not kept at the revoke");
	EXPECT_EQ(base + 2, qpairs_allocated());
	/* B goes on, its CQEs landing in the kept mapping: two more passes. */
	for (int r = 4; r < 20; r++)
		ROUND(r);
#undef ROUND
	munmap((void *)b.sq, b.c.sq_size);
	munmap((void *)b.db, 4096);
	EXPECT_EQ(0, qpair_destroy(self->fd, b.c.qid));
	EXPECT_EQ(base + 1, qpairs_allocated()) TH_LOG("A went before the import of its memory");
	EXPECT_EQ(0, unmap_handle(self->fd, m.handle));
	EXPECT_EQ(base + 1, qpairs_allocated()) TH_LOG("A went while this file still maps it");
	qp_unmap(&a);
	EXPECT_EQ(base, qpairs_allocated()) TH_LOG("A kept after everything let go");
	EXPECT_EQ(0, hostbuf_unmap(self->fd, &hb));
	close(e.fd);
}

/*
 * Unbind with many exports that the same file imported (M2 of the review):
 * a command of the file is held in flight by its relay, so each import
 * that an export's revoke invalidates would wait for it (1 s) and keep its
 * mapping, and each revoke would then wait 5 s for that mapping. Unbind
 * stops the relays and the controller first, so nothing is in flight, and
 * revokes every export together: no import waits or keeps its mapping, no
 * revoke reaches its deadline, and unbind returns in seconds, not the
 * minutes a revoke-by-revoke wait would take (18 exports: about 108 s).
 */
TEST_F_TIMEOUT(dmabuf, unbind_does_not_wait_for_its_own_imports_one_by_one, 240)
{
	enum { PAIRS = 6 };
	static const uint16_t kinds[] = { GPUNVME_EXPORT_DOORBELL, GPUNVME_EXPORT_SQ, GPUNVME_EXPORT_CQ };
	struct qp pairs[PAIRS];
	struct gpunvme_export e[PAIRS][3];
	struct gpunvme_map_dmabuf m[PAIRS][3];
	uint64_t addrs[PAIRS][3][16];
	struct revoke_fixture r;
	char path[128];

	if (gpunvme_test_owner_mode())
		SKIP(return, "raw pairs: imports are kept whatever runs (Pending::Unknown)");
	for (int i = 0; i < PAIRS; i++) {
		ASSERT_EQ(0, qp_create(self->fd, 16, &pairs[i]));
		for (int k = 0; k < 3; k++) {
			UAPI_INIT(e[i][k]);
			e[i][k].qid = pairs[i].c.qid;
			e[i][k].kind = kinds[k];
			ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e[i][k]));
			ASSERT_EQ(0, map_dmabuf(self->fd, e[i][k].fd, addrs[i][k], 16, &m[i][k]));
		}
	}
	/* One more pair's read held in flight: the file's imports would wait. */
	ASSERT_EQ(0, revoke_setup(self->fd, self->lbs, &r));
	int waited = klog_count(WAITING, NULL), kept = klog_count(KEPT_INFLIGHT, NULL);
	int held = klog_count(EXPORT_HELD, NULL);

	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", gpunvme_bdf());
	ASSERT_EQ(0, sysfs_write(path, gpunvme_bdf()));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	TH_LOG("unbind with %d self-imported exports and a command held in flight took %.1f s", PAIRS * 3 + 1, secs);

	EXPECT_EQ(waited, klog_count(WAITING, NULL)) TH_LOG("an import waited for commands of a stopped controller");
	EXPECT_EQ(kept, klog_count(KEPT_INFLIGHT, NULL)) TH_LOG("an import kept its mapping for commands of a stopped controller");
	EXPECT_EQ(held, klog_count(EXPORT_HELD, NULL)) TH_LOG("a revoke waited until its deadline for an import");
	/* A liveness bound, far above the seconds it takes: one revoke
	 * deadline (5 s) and the shutdown's (5 s) at most. */
	EXPECT_GT(12.0, secs);
	for (int i = 0; i < PAIRS; i++)
		for (int k = 0; k < 3; k++)
			close(e[i][k].fd);
	close(r.e.fd);
}

TEST_HARNESS_MAIN
