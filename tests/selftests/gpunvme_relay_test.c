// SPDX-License-Identifier: GPL-2.0
/*
 * The CPU bridge, driven only through its shadow cells and shadow CQ with
 * the same code that drives a direct queue: data verified byte-exact, and
 * the relay's debugfs counters checked against the field report's traps
 * (no doorbell flood, no stale re-ring across a pause and a wrap).
 */
#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

#define OPC_WRITE 0x01
#define OPC_READ  0x02

/* A bridge counter from debugfs, or -1. */
static long long counter(uint16_t qid, const char *name)
{
	char path[256], buf[64];
	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s-q%u/%s", gpunvme_bdf(), qid, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long long v = fgets(buf, sizeof(buf), f) ? atoll(buf) : -1;
	fclose(f);
	return v;
}

/*
 * A counter the bridge thread updates after the client's last step (the
 * CQ head relay, a bad value it drops): poll it until it reaches `want` or
 * 1 s passes, and return what it holds then.
 */
static long long counter_settles(uint16_t qid, const char *name, long long want)
{
	long long v = counter(qid, name);
	for (int i = 0; i < 1000 && v != want; i++) {
		usleep(1000);
		v = counter(qid, name);
	}
	return v;
}

FIXTURE(bridge) {
	int fd;
	uint32_t lbs;
	struct hostbuf buf;
};

FIXTURE_SETUP(bridge)
{
	struct gpunvme_info info;
	self->fd = gpunvme_open_bound();
	ASSERT_LE(0, self->fd);
	UAPI_INIT(info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	self->lbs = info.ns[0].lba_size;
	ASSERT_EQ(0, hostbuf_map(self->fd, 16 * 4096, &self->buf));
}

FIXTURE_TEARDOWN(bridge)
{
	close(self->fd);
}

static void fill(struct hostbuf *b, int pg, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (int i = 0; i < 4096; i++)
		b->p[pg * 4096 + i] = pattern_byte(seed, lba + i / lbs, i % lbs);
}

static long check(struct hostbuf *b, int pg, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	for (int i = 0; i < 4096; i++)
		if (b->p[pg * 4096 + i] != pattern_byte(seed, lba + i / lbs, i % lbs))
			return i;
	return -1;
}

/* Write page `pg` to `lba`, read it back into page `pg + 1`, compare. */
static int roundtrip(struct qp *q, struct hostbuf *b, int pg, uint64_t lba, uint32_t lbs, uint32_t seed)
{
	uint32_t per = 4096 / lbs;
	fill(b, pg, seed, lba, lbs);
	int st = qp_sync(q, rw_cmd(OPC_WRITE, 1, lba, per, b->dma[pg], 0));
	if (st)
		return st < 0 ? st : 0x10000 | st;
	memset(b->p + (pg + 1) * 4096, 0, 4096);
	st = qp_sync(q, rw_cmd(OPC_READ, 1, lba, per, b->dma[pg + 1], 0));
	if (st)
		return st < 0 ? st : 0x20000 | st;
	return check(b, pg + 1, seed, lba, lbs) < 0 ? 0 : -EILSEQ;
}

TEST_F(bridge, single_io_through_shadow_cells)
{
	struct qp q;
	ASSERT_EQ(0, qp_create_flags(self->fd, 16, GPUNVME_QPAIR_BRIDGED, &q));
	EXPECT_EQ(0, q.c.sq_db);
	EXPECT_EQ(64, q.c.cq_db);
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 0, 100, self->lbs, 5));
	/* Two commands, two distinct tails, two CQEs, two head updates. */
	EXPECT_EQ(2, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(2, counter(q.c.qid, "cqes_mirrored"));
	EXPECT_EQ(2, counter_settles(q.c.qid, "cq_doorbell_writes", 2));
	EXPECT_EQ(2, counter(q.c.qid, "max_sq_tail"));
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(-1, counter(q.c.qid, "polls")); /* the thread and its counters are gone */
}

/* Eight batches of three on a depth-4 queue: tails 3,2,1,0,3,2,1,0. */
TEST_F(bridge, wrap_batches_ring_once_per_distinct_tail)
{
	struct qp q;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create_flags(self->fd, 4, GPUNVME_QPAIR_BRIDGED, &q));
	for (int round = 0; round < 8; round++) {
		struct cqe c;
		for (int i = 0; i < 3; i++) {
			fill(&self->buf, i, 300 + round, (round * 3 + i) * per, self->lbs);
			qp_push(&q, rw_cmd(OPC_WRITE, 1, (round * 3 + i) * per, per, self->buf.dma[i], 0));
		}
		qp_ring(&q);
		for (int i = 0; i < 3; i++) {
			ASSERT_EQ(0, qp_reap(&q, &c, 5000));
			EXPECT_EQ(0, c.status >> 1);
		}
	}
	EXPECT_EQ(8, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(24, counter(q.c.qid, "cqes_mirrored"));
	EXPECT_EQ(3, counter(q.c.qid, "max_sq_tail"));
	for (int round = 0; round < 8; round++)
		for (int i = 0; i < 3; i++) {
			uint64_t lba = (round * 3 + i) * per;
			memset(self->buf.p + 8 * 4096, 0, 4096);
			ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, lba, per, self->buf.dma[8], 0)));
			EXPECT_EQ(-1, check(&self->buf, 8, 300 + round, lba, self->lbs));
		}
	EXPECT_EQ(0, qp_destroy(&q));
}

/* The submitter pauses (a GPU kernel ends), the relay idles, then the next
 * batch wraps the ring: exactly one new doorbell write, nothing re-rung. */
TEST_F(bridge, pause_across_wrap_never_rerings)
{
	struct qp q;
	struct cqe c;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create_flags(self->fd, 4, GPUNVME_QPAIR_BRIDGED, &q));
	for (int i = 0; i < 3; i++)
		qp_push(&q, rw_cmd(OPC_READ, 1, i * per, per, self->buf.dma[i], 0));
	qp_ring(&q); /* tail 3 */
	for (int i = 0; i < 3; i++)
		ASSERT_EQ(0, qp_reap(&q, &c, 5000));
	long long polls = counter(q.c.qid, "polls");
	usleep(300 * 1000);
	EXPECT_LT(polls, counter(q.c.qid, "polls")); /* alive while idle... */
	EXPECT_EQ(1, counter(q.c.qid, "sq_doorbell_writes")); /* ...and silent */
	for (int i = 0; i < 3; i++)
		qp_push(&q, rw_cmd(OPC_READ, 1, i * per, per, self->buf.dma[i], 0));
	qp_ring(&q); /* tail 2, across the wrap */
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(0, qp_reap(&q, &c, 5000));
		EXPECT_EQ(0, c.status >> 1);
	}
	EXPECT_EQ(2, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(0, counter(q.c.qid, "bad_doorbell_values"));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(bridge, out_of_range_shadow_value_is_not_forwarded)
{
	struct qp q;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_BRIDGED, &q));
	*(volatile uint32_t *)(q.db + q.c.sq_db) = 1000;
	usleep(50 * 1000);
	EXPECT_EQ(1, counter_settles(q.c.qid, "bad_doorbell_values", 1));
	EXPECT_EQ(0, counter(q.c.qid, "sq_doorbell_writes"));
	*(volatile uint32_t *)(q.db + q.c.sq_db) = 0; /* back to what the controller has */
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 2, 700, self->lbs, 6));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(bridge, four_bridged_queue_pairs)
{
	struct qp q[4];
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_BRIDGED, &q[i]));
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(0, roundtrip(&q[i], &self->buf, i * 2, 2000 + i * 64 + round * 8, self->lbs, 40 + i + round));
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, qp_destroy(&q[i]));
}

/* For a bridged pair, the "doorbell" export is the shadow page (memory). */
TEST_F(bridge, exports_are_the_shadows)
{
	struct qp q;
	struct gpunvme_export e;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, GPUNVME_QPAIR_BRIDGED, &q));
	UAPI_INIT(e);
	e.qid = q.c.qid;
	e.kind = GPUNVME_EXPORT_DOORBELL;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(4096, e.length);
	close(e.fd);
	e.kind = GPUNVME_EXPORT_CQ;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(q.c.cq_size, e.length);
	close(e.fd);
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_HARNESS_MAIN
