// SPDX-License-Identifier: GPL-2.0-only
/*
 * Fault injection, the kernel's way: a debugfs knob of the module
 * (gpunvme-<bdf>/drop_admin_doorbells) swallows the next admin doorbell
 * write, so that command gets no completion, as on a hung controller.
 *
 * What must follow: the call fails with ETIMEDOUT after the 5 s deadline
 * (never a hang, never EIO), what the command named is kept, I/O on
 * queues that exist goes on, the next admin command resynchronises the
 * queue, and once no file holds a queue the module re-initialises the
 * controller (freeing what it kept); then a full write and verify passes.
 */
#include <sys/mman.h>
#include <time.h>

#include "kselftest_harness.h"
#include "nvme_io.h"

/* Write `pages` pages at `lba` through `q` (a PRP list when > 2), read them
 * back into the second half of `b`, and check every byte. */
static int write_verify(struct qp *q, struct hostbuf *b, uint32_t nsid, uint32_t lbs,
			uint64_t lba, uint32_t pages, uint32_t seed)
{
	uint32_t per = 4096 / lbs;

	pattern_fill(b->p, pages * 4096, seed, lba, lbs);
	memset(b->p + pages * 4096, 0, pages * 4096);
	int r = qp_sync(q, rw_cmd(0x01, nsid, lba, pages * per, b->dma[0],
				  qp_prp2(q, b->dma, pages, 0, NULL, 0)));
	if (r)
		return r;
	r = qp_sync(q, rw_cmd(0x02, nsid, lba, pages * per, b->dma[pages],
			      qp_prp2(q, b->dma + pages, pages, 0, NULL, 0)));
	if (r)
		return r;
	return pattern_check(b->p + pages * 4096, pages * 4096, seed, lba, lbs) == -1 ? 0 : -EIO;
}

/* A fixture only for the longer timeout. */
FIXTURE(fault) {
	int unused;
};
FIXTURE_SETUP(fault) { self->unused = 0; }
FIXTURE_TEARDOWN(fault) { drop_admin_doorbells(0); }

TEST_F_TIMEOUT(fault, hung_admin_command_times_out_and_the_controller_recovers, 90)
{
	struct gpunvme_info info;
	struct hostbuf hb, cb;
	struct qp qb, qa, qc;
	struct gpunvme_qpair_create c;

	int b = gpunvme_open_bound();
	ASSERT_LE(0, b);
	ASSERT_EQ(0, get_info(b, &info));
	uint32_t nsid = info.ns[0].nsid, lbs = info.ns[0].lba_size;
	ASSERT_EQ(0, hostbuf_map(b, 32 * 4096, &hb));
	ASSERT_EQ(0, qp_create(b, 16, &qb));
	ASSERT_EQ(0, write_verify(&qb, &hb, nsid, lbs, 4096, 4, 81));

	/* The next admin command hangs: CREATE_QPAIR fails in bounded time. */
	int a = gpunvme_open_bound();
	ASSERT_LE(0, a);
	ASSERT_EQ(0, drop_admin_doorbells(1));
	UAPI_INIT(c);
	c.depth = 8;
	time_t t0 = time(NULL);
	EXPECT_EQ(-1, ioctl(a, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(ETIMEDOUT, errno);
	time_t took = time(NULL) - t0;
	TH_LOG("the hung CREATE_QPAIR failed after %ld s", (long)took);
	EXPECT_LE(4, took);
	EXPECT_GE(15, took);

	/* I/O on the queue that exists is not affected. */
	EXPECT_EQ(0, write_verify(&qb, &hb, nsid, lbs, 4200, 4, 82));
	/* The next admin command rings past the dropped one: it works. */
	ASSERT_EQ(0, qp_create(a, 8, &qa));
	EXPECT_EQ(0, qp_destroy(&qa));
	close(a);

	/* Nobody holds a queue any more: the controller is re-initialised. */
	int before = klog_count("controller re-initialised", NULL);
	EXPECT_EQ(0, qp_destroy(&qb));
	close(b);
	EXPECT_LT(before, klog_wait_more("controller re-initialised", NULL, before, 10000));

	/* A new file gets a working controller: 64 KiB through a PRP list. */
	int n = gpunvme_open_bound();
	ASSERT_LE(0, n);
	ASSERT_EQ(0, hostbuf_map(n, 32 * 4096, &cb));
	ASSERT_EQ(0, qp_create(n, 16, &qc));
	uint32_t pages = pages_within_limit(&info, 16);
	EXPECT_EQ(0, write_verify(&qc, &cb, nsid, lbs, 4400, pages, 83));
	EXPECT_EQ(0, qp_destroy(&qc));
	close(n);
}

TEST_HARNESS_MAIN
