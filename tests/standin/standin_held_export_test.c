// SPDX-License-Identifier: GPL-2.0-only
/*
 * An importer that does not let go of a queue pair's export when gpunvme
 * revokes it (the stand-in's hold_mappings knob makes edu ignore
 * invalidate_mappings, as a misbehaving GPU driver would):
 *  - the memory it maps is kept, never freed or reused, while it holds on;
 *  - once it lets go, the memory is freed, and the module's references on
 *    the dma-bufs go, with no call of any gpunvme file to prompt it (the
 *    module's watch notices), so gpunvme can be unloaded again: the
 *    module's reference count and its count of allocated queue pairs
 *    (debugfs) return to what they were;
 *  - that holds whichever way the pair went: its file closed, its delete
 *    timed out (the memory then stays until the controller is disabled;
 *    only the references go), the controller re-initialised meanwhile, or
 *    the controller unbound (the memory is leaked by design; the dma-buf
 *    still goes).
 * These are the states the fuzzer's "both modules unload" check can end in.
 */
#include <sys/mman.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"
#include "standin_env.h"

FIXTURE(held) {
	int nv, sd;
	long long ref0, alloc0;	/* module references, pairs allocated */
};

/* Nothing of an earlier test still waits for an importer (up to `ms`). */
static int waits_for_no_importer(int ms)
{
	char k[256];
	for (int i = 0;; i += 10) {
		kept_text(k, sizeof(k));
		if (strstr(k, "waits for importers: no"))
			return 0;
		if (i >= ms)
			return -1;
		usleep(10000);
	}
}

/* Poll up to `ms` until the module's references (and, unless negative,
 * the pairs allocated) are what is wanted. */
static int settles(long long ref, long long alloc, int ms)
{
	for (int i = 0;; i += 10) {
		if (gpunvme_refcnt() == ref && (alloc < 0 || qpairs_allocated() == alloc))
			return 0;
		if (i >= ms)
			return -1;
		usleep(10000);
	}
}

/* A shared pair whose SQ edu imported; the export's fd is closed (the
 * import holds the dma-buf). */
static int imported_pair(int nv, int sd, struct qp *q, struct standin_import *d)
{
	int fd = -1, r = qp_create_flags(nv, 64, 0, q);
	if (r)
		return r;
	if ((r = export_fd(nv, q->c.qid, GPUNVME_EXPORT_SQ, &fd)))
		return r;
	r = standin_import(sd, fd, d);
	close(fd);
	return r;
}

/* edu stops ignoring revokes and lets go of its import: 0 or -errno. */
static int let_go(int sd, uint32_t handle)
{
	int r = set_hold_mappings(0);
	return r ? r : standin_release(sd, handle);
}

/* DESTROY_QPAIR of `qid` while the controller gets no doorbell for the
 * delete (it never answers): 0 or -errno. */
static int destroy_unanswered(int nv, uint16_t qid)
{
	struct gpunvme_qpair_destroy x;
	int r = drop_admin_doorbells(1);
	if (r)
		return r;
	UAPI_INIT(x);
	x.qid = qid;
	return ioctl(nv, GPUNVME_IOC_DESTROY_QPAIR, &x) ? -errno : 0;
}

/* Unmap `q` and close its file *nv: with no queue left, the module
 * re-initialises the controller. True when it said so within 15 s. */
static int close_and_reinit(int *nv, struct qp *q)
{
	int re0 = klog_count("controller re-initialised", NULL);
	qp_unmap(q);
	close(*nv);
	*nv = -1;
	return re0 < klog_wait_more("controller re-initialised", NULL, re0, 15000);
}

/* The module's references and pairs come to `ref` and `alloc` within 3 s;
 * if not, the log says what they are and what the module keeps. */
#define EXPECT_SETTLES(ref, alloc, when) \
	EXPECT_EQ(0, settles((ref), (alloc), 3000)) { \
		char k_[256]; \
		kept_text(k_, sizeof(k_)); \
		TH_LOG("%s: refcnt %lld (want %lld), pairs %lld (want %lld); kept: %s", (when), \
		       gpunvme_refcnt(), (long long)(ref), qpairs_allocated(), (long long)(alloc), k_); \
	}

FIXTURE_SETUP(held)
{
	self->nv = -1;
	self->sd = standin_open();
	ASSERT_LE(0, self->sd) TH_LOG("gpunvme_standin on %s: %s", edu_bdf(), strerror(-self->sd));
	ASSERT_EQ(0, load_module());
	ASSERT_EQ(0, bind_gpunvme(gpunvme_bdf()));
	ASSERT_EQ(0, waits_for_no_importer(5000));
	self->ref0 = gpunvme_refcnt();
	self->alloc0 = qpairs_allocated();
	ASSERT_LE(0, self->ref0);
	ASSERT_LE(0, self->alloc0) TH_LOG("no debugfs qpairs_allocated");
	self->nv = gpunvme_open_bound();
	ASSERT_LE(0, self->nv) TH_LOG("gpunvme on %s", gpunvme_bdf());
	ASSERT_EQ(self->ref0 + 1, gpunvme_refcnt()) TH_LOG("an open file is one reference");
}

FIXTURE_TEARDOWN(held)
{
	set_hold_mappings(0);
	drop_admin_doorbells(0);
	if (self->nv >= 0)
		close(self->nv);
	if (self->sd >= 0)
		close(self->sd);
	bind_gpunvme(gpunvme_bdf());
	standin_restore();
}

/*
 * An importer that does not let go: edu keeps its mapping of the pair's SQ
 * through the pair's destruction (the stand-in's hold_mappings knob makes
 * it ignore invalidate_mappings). The revoke waits (5 s) for the unmap,
 * then keeps the memory instead of freeing it: the destroy still succeeds,
 * the log says the memory is kept, and edu's DMA still reads what the CPU
 * wrote there, never freed or reused memory.
 */
TEST_F_TIMEOUT(held, importer_that_holds_on_keeps_the_memory, 60)
{
	struct gpunvme_qpair_create c;
	struct standin_import d;
	int sq_fd = -1;
	uint32_t got[16];

	UAPI_INIT(c);
	c.depth = 64;
	ASSERT_EQ(0, ioctl(self->nv, GPUNVME_IOC_CREATE_QPAIR, &c));
	volatile uint32_t *sq = mmap(NULL, c.sq_size, PROT_READ | PROT_WRITE, MAP_SHARED, self->nv, c.sq_offset);
	ASSERT_NE(MAP_FAILED, (void *)sq);
	for (int i = 0; i < 16; i++)
		sq[i] = 0xc0de0000u | i;
	munmap((void *)sq, c.sq_size);
	ASSERT_EQ(0, export_fd(self->nv, c.qid, GPUNVME_EXPORT_SQ, &sq_fd));
	ASSERT_EQ(0, standin_import(self->sd, sq_fd, &d));
	ASSERT_EQ(0, set_hold_mappings(1));
	int before = klog_count("still held at the revoke's deadline", "keeping that memory");

	struct gpunvme_qpair_destroy x;
	UAPI_INIT(x);
	x.qid = c.qid;
	time_t t0 = time(NULL);
	EXPECT_EQ(0, ioctl(self->nv, GPUNVME_IOC_DESTROY_QPAIR, &x));
	time_t took = time(NULL) - t0;
	TH_LOG("destroy took %ld s with an importer holding its mapping", (long)took);
	EXPECT_LE(4, took) TH_LOG("the revoke did not wait for the importer to unmap");
	EXPECT_EQ(before + 1, klog_count("still held at the revoke's deadline", "keeping that memory"));

	/* edu still reaches the memory it never unmapped: it is intact. */
	ASSERT_EQ(0, standin_read(self->sd, d.handle, 0, got, sizeof(got)));
	for (int i = 0; i < 16; i++) {
		EXPECT_EQ(0xc0de0000u | i, got[i]) TH_LOG("word %d of the kept SQ", i);
	}
	EXPECT_EQ(0, set_hold_mappings(0));
	EXPECT_EQ(0, standin_release(self->sd, d.handle));
	close(sq_fd);
	/* The controller goes on working for the file. */
	struct qp q2;
	ASSERT_EQ(0, qp_create_flags(self->nv, 8, 0, &q2));
	EXPECT_EQ(0, qp_destroy(&q2));
}


/*
 * The pair's file closes while edu holds on: the deleted pair is kept
 * (the close waits 5 s for the unmap first). Then edu lets go, and no
 * gpunvme call follows: the memory and the module's reference on the
 * dma-buf go by themselves.
 */
TEST_F_TIMEOUT(held, deleted_pair_goes_when_its_late_importer_lets_go, 60)
{
	struct qp q;
	struct standin_import d;
	char k[256];

	ASSERT_EQ(0, imported_pair(self->nv, self->sd, &q, &d));
	ASSERT_EQ(0, set_hold_mappings(1));
	int kept0 = klog_count("deleted, but an importer still holds", NULL);
	int freed0 = klog_count("its importers let go of the deleted queue's memory: freed", NULL);
	qp_unmap(&q);
	close(self->nv);
	self->nv = -1;
	EXPECT_EQ(kept0 + 1, klog_count("deleted, but an importer still holds", NULL));
	kept_text(k, sizeof(k));
	TH_LOG("kept while edu holds on: %s", k);
	EXPECT_EQ(self->ref0 + 1, gpunvme_refcnt()) TH_LOG("the kept SQ's dma-buf holds the module");
	EXPECT_EQ(self->alloc0 + 1, qpairs_allocated()) TH_LOG("the pair edu maps was freed");

	ASSERT_EQ(0, let_go(self->sd, d.handle));
	EXPECT_SETTLES(self->ref0, self->alloc0, "3 s after edu let go");
	EXPECT_EQ(freed0 + 1, klog_count("its importers let go of the deleted queue's memory: freed", NULL));
}

/*
 * The controller does not answer the pair's delete (a dropped admin
 * doorbell) while edu holds on: the pair is kept for the controller's
 * sake. When edu lets go, the module's reference on the dma-buf goes at
 * once while the memory stays; closing the file lets the module
 * re-initialise the controller, which frees it.
 */
TEST_F_TIMEOUT(held, pair_kept_for_the_controller_lets_its_exports_go, 90)
{
	struct qp q;
	struct standin_import d;
	char k[256];

	ASSERT_EQ(0, imported_pair(self->nv, self->sd, &q, &d));
	ASSERT_EQ(0, set_hold_mappings(1));
	EXPECT_EQ(-ETIMEDOUT, destroy_unanswered(self->nv, q.c.qid));
	kept_text(k, sizeof(k));
	TH_LOG("kept: %s", k);
	EXPECT_TRUE(strstr(k, "exported 1") != NULL);
	EXPECT_EQ(self->ref0 + 2, gpunvme_refcnt()) TH_LOG("the file and the kept SQ's dma-buf");

	int let0 = klog_count("its importers let go of its memory; kept until the controller is disabled", NULL);
	ASSERT_EQ(0, let_go(self->sd, d.handle));
	EXPECT_SETTLES(self->ref0 + 1, self->alloc0 + 1, "3 s after edu let go");
	EXPECT_EQ(let0 + 1, klog_count("its importers let go of its memory; kept until the controller is disabled", NULL));

	EXPECT_TRUE(close_and_reinit(&self->nv, &q));
	EXPECT_SETTLES(self->ref0, self->alloc0, "after the re-initialisation");
}

/*
 * As above, but the controller is re-initialised (disabled: it forgot the
 * queue) while edu still holds on: the memory is then the importer's
 * alone, and goes as soon as edu lets go.
 */
TEST_F_TIMEOUT(held, pair_kept_across_a_reinit_goes_when_its_importer_lets_go, 90)
{
	struct qp q;
	struct standin_import d;
	char k[256];

	ASSERT_EQ(0, imported_pair(self->nv, self->sd, &q, &d));
	ASSERT_EQ(0, set_hold_mappings(1));
	EXPECT_EQ(-ETIMEDOUT, destroy_unanswered(self->nv, q.c.qid));
	EXPECT_TRUE(close_and_reinit(&self->nv, &q));
	kept_text(k, sizeof(k));
	TH_LOG("kept after the re-initialisation: %s", k);
	EXPECT_TRUE(strstr(k, "lent 1") != NULL);
	EXPECT_EQ(self->ref0 + 1, gpunvme_refcnt()) TH_LOG("the kept SQ's dma-buf holds the module");
	EXPECT_EQ(self->alloc0 + 1, qpairs_allocated());

	int freed0 = klog_count("its importers let go of the deleted queue's memory: freed", NULL);
	ASSERT_EQ(0, let_go(self->sd, d.handle));
	EXPECT_SETTLES(self->ref0, self->alloc0, "3 s after edu let go");
	EXPECT_EQ(freed0 + 1, klog_count("its importers let go of the deleted queue's memory: freed", NULL));
}

/*
 * The controller is unbound while edu holds on: that memory is leaked, by
 * design (nothing that a peer may still reach is freed), but the module's
 * reference on the dma-buf goes, so once edu lets go nothing keeps gpunvme
 * loaded. Then the controller binds and works again.
 */
TEST_F_TIMEOUT(held, unbind_leaves_no_reference_once_the_importer_lets_go, 90)
{
	struct qp q;
	struct standin_import d;

	/* DMA-API debug reports the leak at unbind (a WARNING), as it should. */
	if (access("/sys/kernel/debug/dma-api", F_OK) == 0)
		SKIP(return, "DMA-API debug reports the memory leaked at unbind, by design, as a WARNING");
	ASSERT_EQ(0, imported_pair(self->nv, self->sd, &q, &d));
	ASSERT_EQ(0, set_hold_mappings(1));
	qp_unmap(&q);
	close(self->nv);
	self->nv = -1;
	int leaked0 = klog_count("an importer still holds are leaked", NULL);
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	EXPECT_EQ(leaked0 + 1, klog_count("an importer still holds are leaked", NULL));
	EXPECT_EQ(self->ref0 + 1, gpunvme_refcnt()) TH_LOG("the dma-buf edu holds keeps the module");

	ASSERT_EQ(0, let_go(self->sd, d.handle));
	EXPECT_EQ(0, settles(self->ref0, -1, 3000))
		TH_LOG("3 s after edu let go: refcnt %lld (was %lld)", gpunvme_refcnt(), self->ref0);

	ASSERT_EQ(0, bind_gpunvme(gpunvme_bdf()));
	self->nv = gpunvme_open_bound();
	ASSERT_LE(0, self->nv);
	struct qp q2;
	ASSERT_EQ(0, qp_create_flags(self->nv, 8, 0, &q2));
	EXPECT_EQ(0, qp_destroy(&q2));
}

/*
 * H2: the controller's owner leaves while edu still maps an export of its
 * raw pair (a peer that could go on using the owner's raw access). No
 * file is admitted (EBUSY, and the log says why) until edu lets go; then
 * the module's watch resets the controller, with no gpunvme call to prompt
 * it, and a shared file creates a pair and does I/O. The module used to
 * admit shared files as soon as the owner's file was released.
 */
TEST_F_TIMEOUT(held, owner_export_held_keeps_files_out_until_reset, 60)
{
	struct qp q, s;
	struct standin_import d;
	struct hostbuf hb;
	int fd = -1;

	int r = claim_owner(self->nv, NULL);
	if (r == -EPERM)
		SKIP(return, "owner mode is refused here (IOMMU, lockdown or capability)");
	ASSERT_EQ(0, r);
	ASSERT_EQ(0, qp_create_flags(self->nv, 64, GPUNVME_QPAIR_RAW, &q));
	ASSERT_EQ(0, export_fd(self->nv, q.c.qid, GPUNVME_EXPORT_SQ, &fd));
	ASSERT_EQ(0, standin_import(self->sd, fd, &d));
	close(fd);
	ASSERT_EQ(0, set_hold_mappings(1));
	int refused0 = klog_count("reset after its owner left before any file is admitted", NULL);
	int resets0 = klog_count("its owner left: resetting the controller", NULL);
	qp_unmap(&q);
	close(self->nv);
	self->nv = -1;
	EXPECT_EQ(resets0, klog_count("its owner left: resetting the controller", NULL))
		TH_LOG("reset while a peer still maps the owner's export");

	int sh = gpunvme_open_bound();
	ASSERT_LE(0, sh);
	EXPECT_EQ(-EBUSY, qp_create_flags(sh, 8, 0, &s)) TH_LOG("a shared file was admitted before the reset");
	EXPECT_LT(refused0, klog_count("reset after its owner left before any file is admitted", NULL));
	EXPECT_EQ(-EBUSY, hostbuf_map(sh, 8 * 4096, &hb));

	ASSERT_EQ(0, let_go(self->sd, d.handle));
	EXPECT_LT(resets0, klog_wait_more("its owner left: resetting the controller", NULL, resets0, 5000))
		TH_LOG("edu let go, but the watch never reset the controller");
	struct gpunvme_info info;
	ASSERT_EQ(0, get_info(sh, &info));
	uint32_t lbs = info.ns[0].lba_size, nsid = info.ns[0].nsid;
	ASSERT_EQ(0, hostbuf_map(sh, 8 * 4096, &hb));
	ASSERT_EQ(0, qp_create_flags(sh, 8, 0, &s));
	pattern_fill(hb.p, 4096, 31, 900, lbs);
	EXPECT_EQ(0, qp_sync(&s, rw_cmd(OPC_WRITE, nsid, 900, 4096 / lbs, hb.dma[0], 0)));
	memset(hb.p + 4096, 0, 4096);
	EXPECT_EQ(0, qp_sync(&s, rw_cmd(OPC_READ, nsid, 900, 4096 / lbs, hb.dma[1], 0)));
	EXPECT_EQ(-1, pattern_check(hb.p + 4096, 4096, 31, 900, lbs));
	EXPECT_EQ(0, qp_destroy(&s));
	EXPECT_EQ(0, hostbuf_unmap(sh, &hb));
	close(sh);
}

/*
 * A queue pair's PRP pool at the largest depth is one contiguous 2 MiB
 * allocation or more. Exported to edu (whose DMA segments are at most
 * 64 KiB, the default for a device that sets none), its mapping must come
 * in segments edu may take: the export used to hand over one segment for
 * the whole pool (the debug kernel's DMA-API check warned, in the fuzzer).
 */
TEST_F_TIMEOUT(held, a_large_export_is_mapped_within_the_importers_segment_size, 60)
{
	struct gpunvme_info info;
	struct standin_import d;
	struct qp q;
	int fd = -1;

	ASSERT_EQ(0, get_info(self->nv, &info));
	ASSERT_EQ(0, qp_create_flags(self->nv, info.max_queue_entries, 0, &q));
	ASSERT_LT(65536, q.c.prp_size) TH_LOG("the pool is not larger than one 64 KiB segment");
	ASSERT_EQ(0, export_fd(self->nv, q.c.qid, GPUNVME_EXPORT_PRP_POOL, &fd));
	ASSERT_EQ(0, standin_import(self->sd, fd, &d));
	close(fd);
	TH_LOG("pool %llu bytes: %u segment(s), the first %llu bytes", (unsigned long long)q.c.prp_size,
	       d.nents, (unsigned long long)d.len);
	EXPECT_GE(65536, d.len) TH_LOG("a segment longer than edu supports");
	EXPECT_LE(q.c.prp_size / 65536, d.nents);
	EXPECT_EQ(0, standin_release(self->sd, d.handle));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_HARNESS_MAIN
