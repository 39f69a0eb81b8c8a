// SPDX-License-Identifier: GPL-2.0-only
/*
 * Shared mode's relay (the CPU bridge of UAPI version 1, now validating):
 * a shared queue pair driven only through its shadow SQ, shadow cells and
 * mirrored CQ with the same code that drives a raw pair: data verified
 * byte-exact, and the relay's debugfs counters checked against the field
 * report's traps (no doorbell flood, no stale re-ring across a pause and a
 * wrap) and against the validator's own (sqes_accepted, sqes_rejected: a
 * rejected SQE completes in the mirror and never reaches the controller).
 * The pairs here are always shared, whatever mode the run tests.
 */
#include <dirent.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

#define counter qp_counter
#define counter_settles qp_counter_settles

FIXTURE(relay) {
	int fd;
	uint32_t lbs;
	struct hostbuf buf;
};

FIXTURE_SETUP(relay)
{
	struct gpunvme_info info;
	self->fd = gpunvme_open_bound();
	ASSERT_LE(0, self->fd);
	ASSERT_EQ(0, get_info(self->fd, &info));
	self->lbs = info.ns[0].lba_size;
	ASSERT_EQ(0, hostbuf_map(self->fd, 16 * 4096, &self->buf));
}

FIXTURE_TEARDOWN(relay)
{
	close(self->fd);
}

static void fill(struct hostbuf *b, int pg, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	pattern_fill(b->p + pg * 4096, 4096, seed, lba, lbs);
}

static long check(struct hostbuf *b, int pg, uint32_t seed, uint64_t lba, uint32_t lbs)
{
	return pattern_check(b->p + pg * 4096, 4096, seed, lba, lbs);
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

TEST_F(relay, single_io_through_shadow_cells)
{
	struct qp q;
	ASSERT_EQ(0, qp_create_flags(self->fd, 16, 0, &q));
	EXPECT_EQ(0, q.c.sq_db);
	EXPECT_EQ(64, q.c.cq_db);
	EXPECT_NE(NULL, q.prp);
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 0, 100, self->lbs, 5));
	/* Two commands, two distinct tails, two CQEs, two head updates. */
	EXPECT_EQ(2, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(2, counter(q.c.qid, "cqes_mirrored"));
	EXPECT_EQ(2, counter_settles(q.c.qid, "cq_doorbell_writes", 2));
	EXPECT_EQ(2, counter(q.c.qid, "max_sq_tail"));
	EXPECT_EQ(2, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(0, counter(q.c.qid, "sqes_rejected"));
	EXPECT_EQ(0, counter(q.c.qid, "bad_doorbell_values"));
	EXPECT_EQ(0, qp_destroy(&q));
	EXPECT_EQ(-1, counter(q.c.qid, "polls")); /* the thread and its counters are gone */
}

/* Eight batches of three on a depth-4 queue: tails 3,2,1,0,3,2,1,0. */
TEST_F(relay, wrap_batches_ring_once_per_distinct_tail)
{
	struct qp q;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create_flags(self->fd, 4, 0, &q));
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
			EXPECT_EQ(q.c.qid, c.sq_id);
			EXPECT_GT(4, c.sq_head); /* the shadow SQ's head: inside the ring */
		}
		/* Let the relay see the last CQ head before the next batch: it
		 * submits only as many commands as the mirror has room for, and
		 * a head read just before the last reap would split the batch
		 * into two doorbell writes (correct, but not what is counted). */
		usleep(2000);
	}
	EXPECT_EQ(8, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(24, counter(q.c.qid, "cqes_mirrored"));
	EXPECT_EQ(3, counter(q.c.qid, "max_sq_tail"));
	EXPECT_EQ(24, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(0, counter(q.c.qid, "sqes_rejected"));
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
TEST_F(relay, pause_across_wrap_never_rerings)
{
	struct qp q;
	struct cqe c;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create_flags(self->fd, 4, 0, &q));
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
	EXPECT_EQ(6, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(relay, out_of_range_shadow_value_is_not_forwarded)
{
	struct qp q;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q));
	*(volatile uint32_t *)(q.db + q.c.sq_db) = 1000;
	usleep(50 * 1000);
	EXPECT_EQ(1, counter_settles(q.c.qid, "bad_doorbell_values", 1));
	EXPECT_EQ(0, counter(q.c.qid, "sq_doorbell_writes"));
	EXPECT_EQ(0, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(0, counter(q.c.qid, "sqes_rejected"));
	*(volatile uint32_t *)(q.db + q.c.sq_db) = 0; /* back to what the relay has */
	/* A CQ head past the ring is dropped and counted too. */
	*(volatile uint32_t *)(q.db + q.c.cq_db) = 8;
	EXPECT_EQ(2, counter_settles(q.c.qid, "bad_doorbell_values", 2));
	*(volatile uint32_t *)(q.db + q.c.cq_db) = 0;
	EXPECT_EQ(0, counter(q.c.qid, "cq_doorbell_writes"));
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 2, 700, self->lbs, 6));
	EXPECT_EQ(0, qp_destroy(&q));
}

TEST_F(relay, four_shared_queue_pairs)
{
	struct qp q[4];
	for (int i = 0; i < 4; i++)
		ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q[i]));
	for (int round = 0; round < 3; round++)
		for (int i = 0; i < 4; i++)
			EXPECT_EQ(0, roundtrip(&q[i], &self->buf, i * 2, 2000 + i * 64 + round * 8, self->lbs, 40 + i + round));
	for (int i = 0; i < 4; i++) {
		EXPECT_EQ(6, counter(q[i].c.qid, "sqes_accepted"));
		EXPECT_EQ(0, qp_destroy(&q[i]));
	}
}

/*
 * A rejected SQE in the middle of a batch: it completes in the mirror
 * with its own command ID and an error (Invalid Command Opcode, DNR), the
 * valid ones around it complete normally, and the counters say two went
 * to the controller and one did not.
 */
TEST_F(relay, rejected_sqe_inside_a_batch)
{
	struct qp q;
	struct cqe c;
	uint32_t per = 4096 / self->lbs;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q));
	fill(&self->buf, 0, 77, 900, self->lbs);
	uint16_t w = qp_push(&q, rw_cmd(OPC_WRITE, 1, 900, per, self->buf.dma[0], 0));
	uint16_t bad = qp_push(&q, rw_cmd(0x7f, 1, 900, per, self->buf.dma[1], 0));
	uint16_t f = qp_push(&q, (struct sqe){ .opcode = OPC_FLUSH, .nsid = 1 });
	qp_ring(&q);
	int seen = 0;
	for (int i = 0; i < 3; i++) {
		ASSERT_EQ(0, qp_reap(&q, &c, 5000));
		int st = c.status >> 1;
		if (c.cid == w || c.cid == f) {
			EXPECT_EQ(0, st) TH_LOG("cid %u", c.cid);
			seen |= c.cid == w ? 1 : 4;
		} else if (c.cid == bad) {
			EXPECT_EQ(NVME_SC_INVALID_OPCODE, st & 0x7ff) TH_LOG("status %#x", st);
			EXPECT_TRUE(st & NVME_DNR);
			seen |= 2;
		} else {
			EXPECT_EQ(0, c.cid) TH_LOG("unexpected cid %u", c.cid);
		}
		EXPECT_EQ(q.c.qid, c.sq_id);
	}
	EXPECT_EQ(7, seen);
	EXPECT_EQ(2, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(1, counter(q.c.qid, "sqes_rejected"));
	/* The rejected Read never ran: page 1 is untouched. */
	for (int i = 0; i < 4096; i++)
		if (self->buf.p[4096 + i]) {
			EXPECT_EQ(0, self->buf.p[4096 + i]) TH_LOG("byte %d of the rejected read's page", i);
			break;
		}
	EXPECT_EQ(0, roundtrip(&q, &self->buf, 2, 901, self->lbs, 78));
	EXPECT_EQ(0, qp_destroy(&q));
}

/*
 * The module picks the command IDs on the real SQ and gives each
 * completion back with the file's own: 0, 0xffff and the same ID twice in
 * flight all come back verbatim, one completion each.
 */
TEST_F(relay, client_command_ids_come_back_verbatim)
{
	struct qp q;
	struct cqe c;
	uint32_t per = 4096 / self->lbs;
	uint16_t cids[] = { 0, 0xffff, 7, 7 };
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q));
	for (int i = 0; i < 4; i++) {
		struct sqe cmd = rw_cmd(OPC_READ, 1, 40 * per + i * per, per, self->buf.dma[i], 0);
		cmd.cid = cids[i];
		qp_push_raw_cid(&q, cmd);
	}
	qp_ring(&q);
	int n0 = 0, nffff = 0, n7 = 0;
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(0, qp_reap(&q, &c, 5000));
		EXPECT_EQ(0, c.status >> 1) TH_LOG("cid %u", c.cid);
		n0 += c.cid == 0;
		nffff += c.cid == 0xffff;
		n7 += c.cid == 7;
	}
	EXPECT_EQ(1, n0);
	EXPECT_EQ(1, nffff);
	EXPECT_EQ(2, n7);
	usleep(100 * 1000);
	EXPECT_NE(q.phase, q.cq[q.head].status & 1) TH_LOG("a fifth completion appeared");
	EXPECT_EQ(4, counter(q.c.qid, "sqes_accepted"));
	EXPECT_EQ(0, qp_destroy(&q));
}

/* For a shared pair every export is a shadow: the doorbell cells (4 KiB of
 * memory), the shadow SQ, the CQ mirror and the PRP pool. */
TEST_F(relay, exports_are_the_shadows)
{
	struct qp q;
	struct gpunvme_export e;
	ASSERT_EQ(0, qp_create_flags(self->fd, 8, 0, &q));
	UAPI_INIT(e);
	e.qid = q.c.qid;
	e.kind = GPUNVME_EXPORT_DOORBELL;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(4096, e.length);
	close(e.fd);
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(q.c.sq_size, e.length);
	close(e.fd);
	e.kind = GPUNVME_EXPORT_CQ;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(q.c.cq_size, e.length);
	close(e.fd);
	e.kind = GPUNVME_EXPORT_PRP_POOL;
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(q.c.prp_size, e.length);
	close(e.fd);
	EXPECT_EQ(0, qp_destroy(&q));
}

/* Kernel threads named gpunvme-relay<n>. */
static int relay_threads(void)
{
	return pids_with_comm("gpunvme-relay", NULL, 0);
}

/*
 * The relay pool: no thread while no shared pair exists; a thread per pair
 * up to one per online CPU, then pairs share; all gone with the last pair.
 */
TEST(relay_threads_follow_the_pairs)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct qp q[4];
	int fd = gpunvme_open_bound();

	ASSERT_LE(0, fd);
	EXPECT_EQ(0, relay_threads()) TH_LOG("relay threads before any shared pair");
	for (int i = 0; i < 4; i++) {
		ASSERT_EQ(0, qp_create_flags(fd, 8, 0, &q[i]));
		long want = i + 1 < cpus ? i + 1 : cpus;
		EXPECT_EQ(want, relay_threads()) TH_LOG("with %d shared pairs and %ld CPUs", i + 1, cpus);
	}
	for (int i = 0; i < 4; i++)
		EXPECT_EQ(0, qp_destroy(&q[i]));
	EXPECT_EQ(0, relay_threads()) TH_LOG("relay threads after the last shared pair");
	close(fd);
}

/* One line of debugfs relay_cpu_per_file. */
struct file_cost {
	unsigned long long file, destroyed, ns, accepted, rejected, per_cmd;
	int tgid, pid, pairs;
	char comm[32];
};

/*
 * Every line of debugfs relay_cpu_per_file, up to `max`, into `out`: how
 * many there were, or -1 if the file cannot be read or a line not parsed.
 */
static int relay_cpu_lines(struct file_cost *out, int max)
{
	char path[160], line[512];
	int n = 0;
	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/relay_cpu_per_file", gpunvme_bdf());
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		struct file_cost c = { 0 };
		int at = 0;
		if (sscanf(line, "file %llu tgid %d pid %d pairs %d destroyed %llu relay_ns %llu accepted %llu rejected %llu ns_per_command %llu comm %n",
			   &c.file, &c.tgid, &c.pid, &c.pairs, &c.destroyed, &c.ns, &c.accepted, &c.rejected,
			   &c.per_cmd, &at) != 9 || !at) {
			n = -1;
			break;
		}
		snprintf(c.comm, sizeof(c.comm), "%.*s", (int)strcspn(line + at, "\n"), line + at);
		if (n < max)
			out[n] = c;
		n++;
	}
	fclose(f);
	return n;
}

/* The line of file `id` in relay_cpu_per_file: 0, or -1 if it has none. */
static int relay_cpu_of(unsigned long long id, struct file_cost *out)
{
	struct file_cost all[16];
	int n = relay_cpu_lines(all, 16);
	for (int i = 0; i < n && i < 16; i++)
		if (all[i].file == id) {
			*out = all[i];
			return 0;
		}
	return -1;
}

/* `n` one-page reads through shared pair `q`, each waited for. */
static int reads(struct qp *q, struct hostbuf *b, uint32_t lbs, int n)
{
	for (int i = 0; i < n; i++) {
		int st = qp_sync(q, rw_cmd(OPC_READ, 1, 300 + 8 * (i % 16), 4096 / lbs, b->dma[i % 4], 0));
		if (st)
			return st;
	}
	return 0;
}

static void log_cost(struct __test_metadata *_metadata, const char *what, const struct file_cost *c)
{
	TH_LOG("%s: file %llu tgid %d pid %d pairs %d destroyed %llu relay_ns %llu accepted %llu rejected %llu ns_per_command %llu comm %s",
	       what, c->file, c->tgid, c->pid, c->pairs, c->destroyed, c->ns, c->accepted, c->rejected, c->per_cmd,
	       c->comm);
}

/*
 * Relay CPU per file (debugfs relay_cpu_per_file): two files of this
 * process, A with 200 reads and B with 20 reads and one rejected command,
 * each on its own line with its opener, its pair count and exactly its own
 * command counts; then A destroys its pair (its totals stay: a destroyed
 * pair still counts while the file is open) and makes another, which adds
 * to them.
 */
TEST_F(relay, relay_cpu_is_counted_per_file)
{
	struct file_cost all[4], a, b, a2, a3;
	struct hostbuf bbuf;
	struct qp qa, qb, qa2;
	char comm[32] = "";
	int other = gpunvme_open_bound();
	FILE *cf = fopen("/proc/self/comm", "r");

	ASSERT_NE(NULL, cf);
	ASSERT_NE(NULL, fgets(comm, sizeof(comm), cf));
	fclose(cf);
	comm[strcspn(comm, "\n")] = 0;
	ASSERT_LE(0, other);
	ASSERT_EQ(0, hostbuf_map(other, 16 * 4096, &bbuf));
	EXPECT_EQ(0, relay_cpu_lines(all, 4)) TH_LOG("lines before any shared pair of this test");
	ASSERT_EQ(0, qp_create_flags(self->fd, 16, 0, &qa));
	ASSERT_EQ(0, qp_create_flags(other, 16, 0, &qb));
	ASSERT_EQ(0, reads(&qa, &self->buf, self->lbs, 200));
	ASSERT_EQ(0, reads(&qb, &bbuf, self->lbs, 20));
	ASSERT_NE(0, qp_sync(&qb, rw_cmd(0x7f, 1, 0, 1, bbuf.dma[0], 0)));
	/* Files appear in the order they made their first shared pair. */
	ASSERT_EQ(2, relay_cpu_lines(all, 4));
	a = all[0];
	b = all[1];
	log_cost(_metadata, "A", &a);
	log_cost(_metadata, "B", &b);
	EXPECT_NE(a.file, b.file);
	EXPECT_EQ(getpid(), a.tgid);
	EXPECT_EQ(getpid(), a.pid);
	EXPECT_EQ(getpid(), b.tgid);
	EXPECT_STREQ(comm, a.comm);
	EXPECT_EQ(1, a.pairs);
	EXPECT_EQ(0ull, a.destroyed);
	EXPECT_EQ(200ull, a.accepted);
	EXPECT_EQ(0ull, a.rejected);
	EXPECT_LT(0ull, a.ns);
	EXPECT_EQ(a.ns / 200, a.per_cmd);
	EXPECT_EQ(1, b.pairs);
	EXPECT_EQ(20ull, b.accepted);
	EXPECT_EQ(1ull, b.rejected);
	EXPECT_EQ(b.ns / 21, b.per_cmd);

	/* Recycling a pair does not hide its cost. */
	ASSERT_EQ(0, qp_destroy(&qa));
	ASSERT_EQ(0, relay_cpu_of(a.file, &a2)) TH_LOG("A's line went with its last pair");
	log_cost(_metadata, "A, pair destroyed", &a2);
	EXPECT_EQ(0, a2.pairs);
	EXPECT_EQ(1ull, a2.destroyed);
	EXPECT_EQ(200ull, a2.accepted);
	EXPECT_LE(a.ns, a2.ns);
	ASSERT_EQ(0, qp_create_flags(self->fd, 16, 0, &qa2));
	ASSERT_EQ(0, reads(&qa2, &self->buf, self->lbs, 10));
	ASSERT_EQ(0, relay_cpu_of(a.file, &a3));
	log_cost(_metadata, "A, new pair", &a3);
	EXPECT_EQ(1, a3.pairs);
	EXPECT_EQ(1ull, a3.destroyed);
	EXPECT_EQ(210ull, a3.accepted);
	EXPECT_LT(a2.ns, a3.ns);
	ASSERT_EQ(0, relay_cpu_of(b.file, &b));
	EXPECT_EQ(20ull, b.accepted) TH_LOG("B's count moved with A's I/O");

	EXPECT_EQ(0, qp_destroy(&qa2));
	EXPECT_EQ(0, qp_destroy(&qb));
	close(other);
}

/*
 * A closed file leaves relay_cpu_per_file, whether it destroyed its pairs
 * or left them to close; a file still open keeps its line with no pair.
 */
TEST_F(relay, closed_file_leaves_relay_cpu_per_file)
{
	struct file_cost all[4], a;
	struct hostbuf bbuf;
	struct qp qa, qb;
	int other = gpunvme_open_bound();

	ASSERT_LE(0, other);
	ASSERT_EQ(0, hostbuf_map(other, 16 * 4096, &bbuf));
	ASSERT_EQ(0, qp_create_flags(self->fd, 16, 0, &qa));
	ASSERT_EQ(0, qp_create_flags(other, 16, 0, &qb));
	ASSERT_EQ(0, reads(&qa, &self->buf, self->lbs, 5));
	ASSERT_EQ(0, reads(&qb, &bbuf, self->lbs, 5));
	ASSERT_EQ(2, relay_cpu_lines(all, 4));
	unsigned long long ida = all[0].file, idb = all[1].file;
	/* B closes with its pair still there. */
	qp_unmap(&qb);
	close(other);
	ASSERT_EQ(1, relay_cpu_lines(all, 4));
	EXPECT_EQ(ida, all[0].file);
	EXPECT_NE(0, relay_cpu_of(idb, &a)) TH_LOG("the closed file's line is still there");
	/* A destroys its pair: still open, still listed. */
	EXPECT_EQ(0, qp_destroy(&qa));
	ASSERT_EQ(0, relay_cpu_of(ida, &a));
	EXPECT_EQ(0, a.pairs);
	EXPECT_EQ(5ull, a.accepted);
	close(self->fd);
	self->fd = -1;
	EXPECT_EQ(0, relay_cpu_lines(all, 4)) TH_LOG("a line after every file closed");
}

/* A pair's file_pass_checks_max (debugfs): -1 if it cannot be read. */
static long long file_pass_checks_max(uint16_t qid)
{
	return counter(qid, "file_pass_checks_max");
}

/*
 * One relay pass gives a file at most BUDGET (256) page checks for new
 * commands, however many pairs it spreads its commands over (the first
 * command a step may take goes in whole, so a file can go one command's
 * cost over). B's pair is made first, on relay thread 0; A's eight pairs
 * then spread over the threads, so with at most four CPUs two or more of
 * them share B's thread. Each of A's pairs gets 63 reads of the largest
 * transfer at an address A does not own: each costs the most checks a
 * command can and is refused without reaching the controller, so A's
 * queues hold 8 x 63 x cost page checks of work, dozens of passes at 256,
 * whenever the relay gets to them. A per-pair budget (the module before
 * per-file turns) gives A about 256 per pair on B's thread in one pass.
 */
TEST_F(relay, a_file_gets_one_budget_per_pass_however_many_pairs_it_has)
{
	enum { PAIRS = 8, DEPTH = 64, BUDGET = 256 };
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	struct gpunvme_info info;
	struct qp qa[PAIRS], qb;
	int other = gpunvme_open_bound();

	if (cpus > 4)
		SKIP(return, "%ld CPUs: A's 8 pairs would not share B's relay thread", cpus);
	ASSERT_LE(0, other);
	ASSERT_EQ(0, get_info(self->fd, &info));
	long long cost = 2 + info.shared_max_transfer / 4096; /* validate::check_cost */
	ASSERT_EQ(0, qp_create_flags(other, 16, 0, &qb));
	for (int i = 0; i < PAIRS; i++)
		ASSERT_EQ(0, qp_create_flags(self->fd, DEPTH, 0, &qa[i]));
	for (int i = 0; i < PAIRS; i++) {
		for (int k = 0; k < DEPTH - 1; k++)
			qp_push(&qa[i], rw_cmd(OPC_READ, 1, 0, 65536, 0, 0));
		qp_ring(&qa[i]);
	}
	/* Every refusal completes in A's mirrors (which nobody reaps). */
	for (int i = 0; i < PAIRS; i++) {
		EXPECT_EQ(DEPTH - 1, counter_settles(qa[i].c.qid, "sqes_rejected", DEPTH - 1))
			TH_LOG("pair %d", i);
	}
	long long most = 0, b_most = file_pass_checks_max(qb.c.qid);
	for (int i = 0; i < PAIRS; i++) {
		long long m = file_pass_checks_max(qa[i].c.qid);
		ASSERT_LE(0, m) TH_LOG("pair %d's file_pass_checks_max", i);
		TH_LOG("A's pair %d (qid %u): file_pass_checks_max %lld", i, qa[i].c.qid, m);
		if (m > most)
			most = m;
	}
	TH_LOG("A's most in one pass %lld (budget %d, one command costs %lld); B's %lld", most, BUDGET, cost, b_most);
	/* The flood filled passes on B's thread: a bound met by doing nothing proves nothing. */
	EXPECT_LE(BUDGET, most);
	EXPECT_GT(BUDGET + cost, most);
	EXPECT_EQ(0, b_most) TH_LOG("B sent nothing");
	for (int i = 0; i < PAIRS; i++)
		EXPECT_EQ(0, qp_destroy(&qa[i]));
	EXPECT_EQ(0, qp_destroy(&qb));
	close(other);
}

TEST_HARNESS_MAIN
