// SPDX-License-Identifier: GPL-2.0-only
/*
 * The controller fails or goes away while a file is using it: queue pairs
 * mapped, a host buffer mapped for DMA, a queue's SQ exported and imported
 * back as a data buffer (an importer that holds the export), and writes
 * submitted but not reaped (I/O in flight). Faults come from the module's
 * debugfs knobs: gpunvme-<bdf>/fake_csts ("cfs": CSTS reads with the fatal
 * status bit; "ones": every register reads all-ones, as after a surprise
 * removal) and drop_admin_doorbells (the next admin command is never
 * rung, so it times out) and pci_event (runs one of the module's PCI
 * callbacks, as the PCI core would for system suspend/resume or AER error
 * recovery; the hardware side of those, a frozen link or a slot reset,
 * is not simulated); unbind is the orderly case.
 *
 * What must follow, for each: poll() on the file reports POLLERR | POLLHUP
 * within a deadline (it blocked before), every call fails with the
 * documented errno (EIO for a fatal status, ENODEV for removal and unbind),
 * every mapping of the file faults with SIGBUS, closing it is clean, and
 * the controller serves new files again (re-initialised by the module for
 * CFS, after a rebind for all-ones and unbind): a new file writes and
 * verifies known patterns, and data written before the fault reads back.
 * A lost admin completion is not a failure: files keep working and poll()
 * stays quiet (the module re-initialises once no file holds a queue).
 */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <time.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

static int knob(const char *name, const char *val)
{
	char path[160];

	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/%s", gpunvme_bdf(), name);
	return sysfs_write(path, val);
}

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

static sigjmp_buf bus_jmp;
static volatile sig_atomic_t bus_hit;

static void on_sigbus(int sig)
{
	(void)sig;
	bus_hit = 1;
	siglongjmp(bus_jmp, 1);
}

/* 1 if touching `p` (a read, or a write when `write`) raises SIGBUS. */
static int sigbus_on(volatile void *p, int write)
{
	struct sigaction sa = { .sa_handler = on_sigbus }, old;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGBUS, &sa, &old);
	bus_hit = 0;
	if (!sigsetjmp(bus_jmp, 1)) {
		if (write)
			*(volatile uint32_t *)p = 0;
		else
			(void)*(volatile uint32_t *)p;
	}
	sigaction(SIGBUS, &old, NULL);
	return bus_hit;
}

/* Write `pages` pages at `lba` through `q` (a PRP list when > 2), read them
 * back into the second half of `b`, and check every byte. */
static int write_verify(struct qp *q, struct hostbuf *b, uint32_t nsid, uint32_t lbs,
			uint64_t lba, uint32_t pages, uint32_t seed)
{
	uint32_t per = 4096 / lbs;

	pattern_fill(b->p, pages * 4096, seed, lba, lbs);
	memset(b->p + pages * 4096, 0, pages * 4096);
	int r = qp_sync(q, rw_cmd(OPC_WRITE, nsid, lba, pages * per, b->dma[0],
				  qp_prp2(q, b->dma, pages, 0, NULL, 0)));
	if (r)
		return r;
	r = qp_sync(q, rw_cmd(OPC_READ, nsid, lba, pages * per, b->dma[pages],
			      qp_prp2(q, b->dma + pages, pages, 0, NULL, 0)));
	if (r)
		return r;
	return pattern_check(b->p + pages * 4096, pages * 4096, seed, lba, lbs) == -1 ? 0 : -EIO;
}

/* Read `pages` pages at `lba` into `b` and check them against `seed`. */
static int read_check(struct qp *q, struct hostbuf *b, uint32_t nsid, uint32_t lbs,
		      uint64_t lba, uint32_t pages, uint32_t seed)
{
	memset(b->p, 0, pages * 4096);
	int r = qp_sync(q, rw_cmd(OPC_READ, nsid, lba, pages * (4096 / lbs), b->dma[0],
				  qp_prp2(q, b->dma, pages, 0, NULL, 0)));
	if (r)
		return r;
	long bad = pattern_check(b->p, pages * 4096, seed, lba, lbs);
	if (bad != -1)
		printf("# LBA %llu: byte %ld is %#x, pattern %u wants %#x\n", (unsigned long long)lba, bad,
		       b->p[bad], seed, pattern_byte(seed, lba + bad / lbs, bad % lbs));
	return bad == -1 ? 0 : -EIO;
}

/* One file in full use: what every test sets up before the fault. */
struct busy {
	int fd;
	uint32_t nsid, lbs, pages;
	struct hostbuf hb;
	struct qp q, x;		/* q does I/O; x's SQ is exported */
	struct gpunvme_export e;
	struct gpunvme_map_dmabuf m;
	uint64_t imported[16];
	int inflight;
};

static int busy_start(struct busy *b, uint32_t seed)
{
	struct gpunvme_info info;
	int r;

	memset(b, 0, sizeof(*b));
	b->fd = gpunvme_open_bound();
	if (b->fd < 0)
		return -ENODEV;
	if ((r = get_info(b->fd, &info)))
		return r;
	b->nsid = info.ns[0].nsid;
	b->lbs = info.ns[0].lba_size;
	b->pages = pages_within_limit(&info, 16);
	if ((r = hostbuf_map(b->fd, 64 * 4096, &b->hb)) || (r = qp_create(b->fd, 64, &b->q)) ||
	    (r = qp_create(b->fd, 256, &b->x)))
		return r;
	/* x's SQ exported, and imported back by the module as a data buffer:
	 * an importer holds the export when the fault comes. */
	UAPI_INIT(b->e);
	b->e.qid = b->x.c.qid;
	b->e.kind = GPUNVME_EXPORT_SQ;
	if (ioctl(b->fd, GPUNVME_IOC_EXPORT, &b->e))
		return -errno;
	UAPI_INIT(b->m);
	b->m.fd = b->e.fd;
	b->m.max_pages = 16;
	b->m.dma_addrs = (uintptr_t)b->imported;
	if (ioctl(b->fd, GPUNVME_IOC_MAP_DMABUF, &b->m))
		return -errno;
	/* Known data on disk before the fault, checked after it. */
	if ((r = write_verify(&b->q, &b->hb, b->nsid, b->lbs, 6000, b->pages, seed)))
		return r;
	/* I/O in flight: writes submitted, rung, never reaped. */
	uint32_t per = 4096 / b->lbs;
	pattern_fill(b->hb.p + 32 * 4096, 4 * 4096, seed + 1, 7000, b->lbs);
	for (int i = 0; i < 16; i++)
		qp_push(&b->q, rw_cmd(OPC_WRITE, b->nsid, 7000 + i * 4 * per, 4 * per,
				      b->hb.dma[32], qp_prp2(&b->q, b->hb.dma + 32, 4, 0, NULL, 0)));
	qp_ring(&b->q);
	b->inflight = 16;
	return 0;
}

/* poll() on fd: the revents, or -1 when nothing came within `ms`. */
static int poll_for(int fd, int ms, long long *took)
{
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLPRI };
	long long t0 = now_ms();
	int n = poll(&p, 1, ms);

	if (took)
		*took = now_ms() - t0;
	return n == 1 ? p.revents : -1;
}

/* The file `b` was cut off with `err`: calls fail, mappings fault. */
static void expect_cut_off(struct __test_metadata *_metadata, struct busy *b, int err)
{
	struct gpunvme_info info;
	struct gpunvme_qpair_create c;
	struct gpunvme_map_host mh;

	UAPI_INIT(info);
	EXPECT_EQ(-1, ioctl(b->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(err, errno);
	UAPI_INIT(c);
	c.depth = 8;
	EXPECT_EQ(-1, ioctl(b->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(err, errno);
	UAPI_INIT(mh);
	mh.addr = (uintptr_t)b->hb.p;
	mh.len = 4096;
	mh.dma_addrs = (uintptr_t)b->imported;
	EXPECT_EQ(-1, ioctl(b->fd, GPUNVME_IOC_MAP_HOST, &mh));
	EXPECT_EQ(err, errno);
	/* Every mapping of the file is gone: SQ, CQ, doorbell page, pool. */
	EXPECT_EQ(1, sigbus_on(b->q.sq, 0));
	EXPECT_EQ(1, sigbus_on(b->q.cq, 0));
	EXPECT_EQ(1, sigbus_on(b->q.db + b->q.c.sq_db, 1));
	EXPECT_EQ(1, sigbus_on(b->x.sq, 1));
	if (b->q.prp)
		EXPECT_EQ(1, sigbus_on(b->q.prp, 0));
	/* A new mapping can't be made either. */
	void *p = mmap(NULL, b->q.c.sq_size, PROT_READ, MAP_SHARED, b->fd, b->q.c.sq_offset);
	EXPECT_EQ(MAP_FAILED, p);
}

/* Close everything of `b` (it must not hang or fail). */
static void busy_close(struct busy *b)
{
	qp_unmap(&b->q);
	qp_unmap(&b->x);
	close(b->e.fd);
	close(b->fd);
}

/* A new file on the (re-initialised or re-bound) controller: full
 * write/verify through a PRP list, and the data from before the fault. */
static void new_file_works(struct __test_metadata *_metadata, uint32_t seed)
{
	struct gpunvme_info info;
	struct hostbuf hb;
	struct qp q;

	int fd = gpunvme_open_bound();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, get_info(fd, &info));
	uint32_t pages = pages_within_limit(&info, 16);
	ASSERT_EQ(0, hostbuf_map(fd, 32 * 4096, &hb));
	ASSERT_EQ(0, qp_create(fd, 16, &q));
	EXPECT_EQ(0, read_check(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 6000, pages, seed));
	EXPECT_EQ(0, write_verify(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 8000, pages, seed + 7));
	EXPECT_EQ(0, write_verify(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 6000, pages, seed + 8));
	EXPECT_EQ(-1, poll_for(fd, 0, NULL));
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(0, hostbuf_unmap(fd, &hb));
	close(fd);
}

FIXTURE(fail) {
	struct busy b;
};
FIXTURE_SETUP(fail)
{
	ASSERT_EQ(0, busy_start(&self->b, 40 + (getpid() & 7)));
	/* Nothing to report yet: poll() blocks. */
	ASSERT_EQ(-1, poll_for(self->b.fd, 200, NULL));
}
FIXTURE_TEARDOWN(fail)
{
	knob("fake_csts", "off");
	knob("drop_admin_doorbells", "0");
	knob("relay_hold_qid", "0");
}

TEST_F_TIMEOUT(fail, fatal_status_cuts_off_files_and_reinitialises, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	int reinit = klog_count("controller re-initialised", NULL);

	ASSERT_EQ(0, knob("fake_csts", "cfs"));
	long long took;
	int ev = poll_for(b->fd, 10000, &took);
	TH_LOG("poll after CSTS.CFS: revents %#x after %lld ms", ev, took);
	ASSERT_NE(-1, ev);
	EXPECT_EQ(POLLERR | POLLHUP, ev & (POLLERR | POLLHUP));
	EXPECT_GE(3000, took);
	EXPECT_LT(reinit, klog_wait_more("controller re-initialised", NULL, reinit, 15000));
	expect_cut_off(_metadata, b, EIO);
	/* Cut off for good: still EIO after the controller came back. */
	EXPECT_NE(-1, poll_for(b->fd, 0, NULL));
	new_file_works(_metadata, seed);
	busy_close(b);
	new_file_works(_metadata, seed + 8);
}

TEST_F_TIMEOUT(fail, all_ones_is_a_surprise_removal_until_rebind, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);

	ASSERT_EQ(0, knob("fake_csts", "ones"));
	long long took;
	int ev = poll_for(b->fd, 10000, &took);
	TH_LOG("poll after all-ones CSTS: revents %#x after %lld ms", ev, took);
	ASSERT_NE(-1, ev);
	EXPECT_EQ(POLLERR | POLLHUP, ev & (POLLERR | POLLHUP));
	EXPECT_GE(3000, took);
	expect_cut_off(_metadata, b, ENODEV);
	/* No new file until the controller is bound again. */
	int idx = -1, n = gpunvme_open_ctrl_node(gpunvme_bdf(), &idx);
	EXPECT_EQ(-1, n);
	if (n >= 0)
		close(n);
	/* Rebind with the old file still open. */
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	new_file_works(_metadata, seed);
	busy_close(b);
}

/*
 * A surprise removal while an import of the file's own export is kept: a
 * read on q is held in flight (debugfs relay_hold_qid), so when the
 * failure revokes x's export the importer cannot know the read is done and
 * keeps its mapping; the exporter gives up waiting and keeps x's memory.
 * The kept mapping is not released while the controller is only known to
 * have stopped mastering the bus (all-ones: it may be alive behind a dead
 * link), but at unbind, before x's memory is freed rather than leaked (on
 * the debug kernel DMA-API debug would report pending allocations at
 * unbind, as a CI run did before this).
 */
TEST_F_TIMEOUT(fail, surprise_removal_releases_a_kept_import, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	char qid[16];

	if (qp_is_raw(&b->q))
		SKIP(return, "raw pairs: the module does not count their commands");
	snprintf(qid, sizeof(qid), "%u", b->q.c.qid);
	ASSERT_EQ(0, knob("relay_hold_qid", qid));
	long long accepted = qp_counter(b->q.c.qid, "sqes_accepted");
	uint32_t per = 4096 / b->lbs;
	qp_push(&b->q, rw_cmd(OPC_READ, b->nsid, 6000, per, b->hb.dma[40], 0));
	qp_ring(&b->q);
	ASSERT_EQ(accepted + 1, qp_counter_settles(b->q.c.qid, "sqes_accepted", accepted + 1));
	int kept = klog_count("accepted commands still in flight after 1 s", NULL);
	int released = klog_count("its kept mapping is released", NULL);

	ASSERT_EQ(0, knob("fake_csts", "ones"));
	EXPECT_NE(-1, poll_for(b->fd, 20000, NULL));
	EXPECT_LT(kept, klog_wait_more("accepted commands still in flight after 1 s", NULL, kept, 15000))
		TH_LOG("the import was not kept under the held read");
	expect_cut_off(_metadata, b, ENODEV);
	EXPECT_EQ(released, klog_count("its kept mapping is released", NULL))
		TH_LOG("the kept import was released before the controller was known to be stopped");
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	EXPECT_LT(released, klog_count("its kept mapping is released", NULL))
		TH_LOG("the kept import was not released at unbind");
	new_file_works(_metadata, seed);
	busy_close(b);
}

/* Unbind with everything in use: an orderly shutdown (queues deleted,
 * CC.SHN until CSTS.SHST reports complete) after the files are cut off;
 * a poll() already waiting wakes up. */
struct waiter {
	int fd, revents;
	long long took;
};

static void *wait_poll(void *arg)
{
	struct waiter *w = arg;

	w->revents = poll_for(w->fd, 15000, &w->took);
	return NULL;
}

TEST_F_TIMEOUT(fail, unbind_shuts_down_and_wakes_pollers, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	struct waiter w = { .fd = b->fd };
	pthread_t t;
	int shn = klog_count("normal shutdown complete", NULL);

	ASSERT_EQ(0, pthread_create(&t, NULL, wait_poll, &w));
	usleep(300 * 1000);
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	pthread_join(t, NULL);
	TH_LOG("waiting poll woke with %#x after %lld ms", w.revents, w.took);
	EXPECT_EQ(POLLERR | POLLHUP, w.revents & (POLLERR | POLLHUP));
	EXPECT_LT(shn, klog_count("normal shutdown complete", NULL));
	expect_cut_off(_metadata, b, ENODEV);
	new_file_works(_metadata, seed);
	busy_close(b);
}

/* A lost admin completion is not a failure: ETIMEDOUT for that call, the
 * busy file keeps working (its in-flight writes complete, poll() stays
 * quiet); once nobody holds a queue the controller is re-initialised. */
TEST_F_TIMEOUT(fail, lost_admin_completion_is_not_a_failure, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	struct gpunvme_qpair_create c;
	struct cqe cqe;

	int a = gpunvme_open_bound();
	ASSERT_LE(0, a);
	ASSERT_EQ(0, knob("drop_admin_doorbells", "1"));
	UAPI_INIT(c);
	c.depth = 8;
	EXPECT_EQ(-1, ioctl(a, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(ETIMEDOUT, errno);
	EXPECT_EQ(-1, poll_for(b->fd, 0, NULL));
	EXPECT_EQ(-1, poll_for(a, 0, NULL));
	for (int i = 0; i < b->inflight; i++) {
		ASSERT_EQ(0, qp_reap(&b->q, &cqe, 5000));
		EXPECT_EQ(0, cqe.status >> 1);
	}
	EXPECT_EQ(0, read_check(&b->q, &b->hb, b->nsid, b->lbs, 7000, 4, seed + 1));
	close(a);
	int reinit = klog_count("controller re-initialised", NULL);
	struct gpunvme_unmap u;
	UAPI_INIT(u);
	u.handle = b->m.handle;
	qp_destroy(&b->q);
	qp_destroy(&b->x);
	EXPECT_EQ(0, ioctl(b->fd, GPUNVME_IOC_UNMAP, &u));
	close(b->e.fd);
	close(b->fd);
	EXPECT_LT(reinit, klog_wait_more("controller re-initialised", NULL, reinit, 10000));
	new_file_works(_metadata, seed);
}

/* A destroy the controller never confirms (its Delete I/O SQ gets no
 * doorbell, so it times out): the pair's commands may still run, so the
 * file's buffers stay mapped. UNMAP used to check only live pairs, and
 * unpinned them here. Closing the file is clean and the controller is
 * re-initialised for new files. */
TEST(unmap_refused_while_a_delete_is_unconfirmed)
{
	struct hostbuf hb;
	struct qp q;
	uint32_t seed = 48 + (getpid() & 7);

	struct gpunvme_info info;
	int fd = gpunvme_open_bound();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, get_info(fd, &info));
	uint32_t pages = pages_within_limit(&info, 16);
	ASSERT_EQ(0, hostbuf_map(fd, 32 * 4096, &hb));
	ASSERT_EQ(0, qp_create(fd, 16, &q));
	/* The data new_file_works() reads back afterwards. */
	ASSERT_EQ(0, write_verify(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 6000, pages, seed));
	qp_unmap(&q);
	ASSERT_EQ(0, knob("drop_admin_doorbells", "1"));
	EXPECT_EQ(-ETIMEDOUT, qpair_destroy(fd, q.c.qid));
	knob("drop_admin_doorbells", "0");
	EXPECT_EQ(-EBUSY, hostbuf_unmap(fd, &hb)) TH_LOG("a buffer was unmapped while the controller may still use the pair");
	int reinit = klog_count("controller re-initialised", NULL);
	close(fd);
	EXPECT_LT(reinit, klog_wait_more("controller re-initialised", NULL, reinit, 10000));
	new_file_works(_metadata, seed);
}

/* L7: a CREATE_QPAIR whose Create got no answer may still make the queue
 * on the controller later, so its qid stays held: the file's buffers stay
 * mapped (UNMAP is refused) until the controller is re-initialised. The
 * qid used to be released at once, and UNMAP then unpinned the buffer. */
TEST(unmap_refused_after_a_create_got_no_answer)
{
	struct gpunvme_qpair_create c;
	struct hostbuf hb;
	uint32_t seed = 52 + (getpid() & 7);

	struct gpunvme_info info;
	struct qp q;
	int fd = gpunvme_open_bound();
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, get_info(fd, &info));
	ASSERT_EQ(0, hostbuf_map(fd, 32 * 4096, &hb));
	/* The data new_file_works() reads back afterwards. */
	ASSERT_EQ(0, qp_create(fd, 16, &q));
	ASSERT_EQ(0, write_verify(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 6000,
				  pages_within_limit(&info, 16), seed));
	ASSERT_EQ(0, qp_destroy(&q));
	ASSERT_EQ(0, drop_admin_doorbells(1));
	UAPI_INIT(c);
	c.depth = 8;
	EXPECT_EQ(-1, ioctl(fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(ETIMEDOUT, errno);
	drop_admin_doorbells(0);
	EXPECT_EQ(-EBUSY, hostbuf_unmap(fd, &hb)) TH_LOG("a buffer was unmapped while a queue may be created late");
	int reinit = klog_count("controller re-initialised", NULL);
	close(fd);
	EXPECT_LT(reinit, klog_wait_more("controller re-initialised", NULL, reinit, 10000));
	new_file_works(_metadata, seed);
}

/* H1: a destroy that timed out before close (not during it). Another file
 * keeps a live pair, so the controller is not re-initialised at the close:
 * the closing file's buffers must stay pinned and mapped (the quarantine
 * holds them, VmLck keeps their charge) while the unconfirmed pair's
 * commands may still run, and go only once the controller is disabled
 * (re-initialised when the other file leaves). Close used to count only
 * the deletes that failed during the close itself, and unpinned them. */
TEST(close_keeps_buffers_while_an_earlier_delete_is_unconfirmed)
{
	struct hostbuf hb, other_hb;
	struct qp q, other;
	struct gpunvme_info info;
	uint32_t seed = 56 + (getpid() & 7);
	const size_t len = 64 * 4096;

	int b = gpunvme_open_bound();
	ASSERT_LE(0, b);
	ASSERT_EQ(0, qp_create(b, 8, &other));
	ASSERT_EQ(0, hostbuf_map(b, 8 * 4096, &other_hb));
	int a = gpunvme_open_bound();
	ASSERT_LE(0, a);
	ASSERT_EQ(0, get_info(a, &info));
	uint32_t pages = pages_within_limit(&info, 16);
	long long bufs0 = kept_quarantined("buffers");
	ASSERT_LE(0, bufs0);
	long lck0 = vm_locked_kb();
	ASSERT_LE(0, lck0);
	ASSERT_EQ(0, hostbuf_map(a, len, &hb));
	long lck1 = vm_locked_kb();
	ASSERT_LE(lck0 + (long)(len / 1024), lck1) TH_LOG("MAP_HOST is not charged to VmLck");
	ASSERT_EQ(0, qp_create(a, 16, &q));
	ASSERT_EQ(0, write_verify(&q, &hb, info.ns[0].nsid, info.ns[0].lba_size, 6000, pages, seed));
	qp_unmap(&q);
	ASSERT_EQ(0, drop_admin_doorbells(1));
	EXPECT_EQ(-ETIMEDOUT, qpair_destroy(a, q.c.qid));
	drop_admin_doorbells(0);
	int reinit = klog_count("controller re-initialised", NULL);
	close(a);
	EXPECT_EQ(bufs0 + 1, kept_quarantined("buffers"))
		TH_LOG("close freed a buffer the unconfirmed pair may still DMA into");
	EXPECT_LE(lck1, vm_locked_kb()) TH_LOG("the kept buffer was unpinned (VmLck dropped)");
	/* The other file is untouched and its I/O works meanwhile. */
	EXPECT_EQ(0, read_check(&other, &other_hb, info.ns[0].nsid, info.ns[0].lba_size, 6000, 1, seed));
	EXPECT_EQ(reinit, klog_count("controller re-initialised", NULL));
	/* Once nobody holds a queue, the controller is re-initialised: the
	 * disable ends every command, and the kept buffer goes. */
	EXPECT_EQ(0, qp_destroy(&other));
	close(b);
	EXPECT_LT(reinit, klog_wait_more("controller re-initialised", NULL, reinit, 10000));
	EXPECT_EQ(bufs0, kept_quarantined("buffers"));
	/* Both buffers' charges are gone (b's went at its close). */
	EXPECT_GE(lck0, vm_locked_kb()) TH_LOG("the kept buffer was never unpinned");
	new_file_works(_metadata, seed);
}

/* Open the controller node by its number: the fd, or -errno. */
static int open_node(int idx)
{
	char name[32];

	snprintf(name, sizeof(name), "/dev/gpunvme%d", idx);
	int fd = open(name, O_RDWR | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

/* System suspend: an orderly shutdown (CC.SHN) after the files are cut
 * off with ENODEV; no new file while suspended; resume re-initialises. */
TEST_F_TIMEOUT(fail, suspend_shuts_down_and_resume_reinitialises, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	int idx = -1, shn = klog_count("normal shutdown complete", NULL);
	int n = gpunvme_open_ctrl_node(gpunvme_bdf(), &idx);

	ASSERT_LE(0, n);
	close(n);
	ASSERT_EQ(0, knob("pci_event", "suspend"));
	EXPECT_EQ(POLLERR | POLLHUP, poll_for(b->fd, 1000, NULL) & (POLLERR | POLLHUP));
	EXPECT_LT(shn, klog_count("normal shutdown complete", NULL));
	expect_cut_off(_metadata, b, ENODEV);
	EXPECT_EQ(-ENODEV, open_node(idx));
	ASSERT_EQ(0, knob("pci_event", "pm_resume"));
	new_file_works(_metadata, seed);
	/* The old file stays cut off after resume. */
	struct gpunvme_info info;
	UAPI_INIT(info);
	EXPECT_EQ(-1, ioctl(b->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(ENODEV, errno);
	busy_close(b);
}

/* AER: error_detected cuts every file off with EIO and stops the
 * controller; new opens fail until slot_reset re-initialises it. */
TEST_F_TIMEOUT(fail, pci_error_cuts_off_files_until_slot_reset, 90)
{
	struct busy *b = &self->b;
	uint32_t seed = 40 + (getpid() & 7);
	int idx = -1;
	int n = gpunvme_open_ctrl_node(gpunvme_bdf(), &idx);

	ASSERT_LE(0, n);
	close(n);
	ASSERT_EQ(0, knob("pci_event", "error_frozen"));
	EXPECT_EQ(POLLERR | POLLHUP, poll_for(b->fd, 1000, NULL) & (POLLERR | POLLHUP));
	expect_cut_off(_metadata, b, EIO);
	EXPECT_EQ(-EIO, open_node(idx));
	int reinit = klog_count("controller re-initialised", NULL);
	ASSERT_EQ(0, knob("pci_event", "slot_reset"));
	EXPECT_LT(reinit, klog_count("controller re-initialised", NULL));
	ASSERT_EQ(0, knob("pci_event", "resume"));
	new_file_works(_metadata, seed);
	busy_close(b);
}

TEST_HARNESS_MAIN
