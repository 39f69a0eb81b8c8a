// SPDX-License-Identifier: GPL-2.0-only
/*
 * The trust model of UAPI version 2 (DESIGN.md decision 7), against QEMU's
 * NVMe behind the vIOMMU. Every test here fails on the version-1 module:
 *
 *  - shared mode isolates files: an SQE whose PRP1, PRP2 or PRP-list entry
 *    points at another file's buffer, at an address next to this file's own
 *    ones, or whose PRP list is not in the pair's PRP pool, is rejected
 *    (Invalid Field, DNR) and moves no byte: the other file's memory, this
 *    file's buffers and the disk are checked afterwards. Lists and SQEs
 *    changed while the relay reads them never reach another file's memory;
 *  - shared mode lets through only Read/Write/Flush/Write Zeroes on an
 *    active namespace inside its LBA range, without SGL, metadata pointer
 *    or fused bits, each refusal with its own status code;
 *  - a shared file never reaches the real doorbell page: its "doorbell" is
 *    memory, wild values there are counted and dropped, no mmap offset or
 *    export gives it anything but its own shadows;
 *  - ownership: one owner, EBUSY both ways, EPERM without a claim, gone at
 *    close; an owner's stray writes of the admin doorbells do not break the
 *    controller for the files that come after;
 *  - a namespace node reaches only its namespace and cannot claim.
 *
 * Rejections are checked three ways: the status (SCT 0, the SC, DNR), the
 * relay's debugfs counters (sqes_rejected / sqes_accepted: the module
 * answered, not the controller) and the memory and disk contents.
 */
#include <linux/udmabuf.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

#define A_BYTE 0xA5		/* what file A's buffer holds */
/* Scratch LBAs, in 4 KiB pages from 10 MiB into namespace 1 (clear of the
 * other selftests' ranges and of the first and last blocks, which the
 * namespace test and the host-side image checks use). */
#define PG(per, n) ((uint64_t)(2560 + (n)) * (per))
#define B_PAGES 64		/* file B's buffer */
#define A_PAGES 8

/* 1 when `st` (from qp_sync) is a rejection with this SC, SCT 0 and DNR. */
static int rejected_with(int st, int sc)
{
	return st > 0 && NVME_SCT(st) == 0 && NVME_SC(st) == sc && (st & NVME_DNR);
}

#define EXPECT_REJECTED(st, sc, what) do { \
	int __st = (st); \
	EXPECT_TRUE(rejected_with(__st, (sc))) \
		TH_LOG("%s: want SC %#x (SCT 0, DNR), got status %#x", (what), (sc), __st); \
} while (0)

/* Index of the first byte of `len` at p that is not `v`, or -1. */
static long first_not(const uint8_t *p, size_t len, uint8_t v)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != v)
			return i;
	return -1;
}

/* Number of whole pages of b that hold nothing but A's byte. */
static int pages_full_of_a(const struct hostbuf *b)
{
	int n = 0;
	for (size_t pg = 0; pg < b->len / 4096; pg++)
		n += first_not(b->p + pg * 4096, 4096, A_BYTE) < 0;
	return n;
}

/* 1 when dma address x lies in one of b's pages. */
static int in_buf(const struct hostbuf *b, uint64_t x)
{
	for (size_t pg = 0; pg < b->len / 4096; pg++)
		if (x >= b->dma[pg] && x < b->dma[pg] + 4096)
			return 1;
	return 0;
}

/* opc over n pages at `lba` of nsid: PRP1 = pg[0], PRP2 = pg[1] or a list
 * of pg[1..n) at byte `off` of q's PRP pool. Returns qp_sync's status. */
static int xfer(struct qp *q, uint8_t opc, uint32_t nsid, uint64_t lba, uint32_t lbs,
		const uint64_t *pg, uint32_t n, uint64_t off)
{
	uint64_t prp2 = qp_prp2(q, pg, n, off, NULL, 0);
	return qp_sync(q, rw_cmd(opc, nsid, lba, n * 4096 / lbs, pg[0], prp2));
}

/* ------------------------------------------------------------------ */

/*
 * Two files of one controller: A maps a buffer full of A_BYTE (and needs
 * nothing else); B maps its own buffer and has a shared queue pair.
 */
FIXTURE(iso) {
	int a, b;
	struct gpunvme_info info;
	uint32_t nsid, lbs, per;
	uint64_t cap;
	struct hostbuf abuf, bbuf;
	struct qp q;
};

FIXTURE_SETUP(iso)
{
	self->a = gpunvme_open_bound();
	ASSERT_LE(0, self->a);
	self->b = gpunvme_open_bound();
	ASSERT_LE(0, self->b);
	ASSERT_EQ(0, get_info(self->b, &self->info));
	ASSERT_LE(1, self->info.num_namespaces);
	self->nsid = self->info.ns[0].nsid;
	self->lbs = self->info.ns[0].lba_size;
	self->cap = self->info.ns[0].capacity_lbas;
	ASSERT_GE(4096, self->lbs);
	self->per = 4096 / self->lbs;
	ASSERT_EQ(0, hostbuf_map(self->a, A_PAGES * 4096, &self->abuf));
	memset(self->abuf.p, A_BYTE, A_PAGES * 4096);
	ASSERT_EQ(0, hostbuf_map(self->b, B_PAGES * 4096, &self->bbuf));
	ASSERT_EQ(0, qp_create_flags(self->b, 64, 0, &self->q));
	ASSERT_NE(NULL, self->q.prp);
	ASSERT_LE(4096, self->q.c.prp_size);
}

FIXTURE_TEARDOWN(iso)
{
	close(self->b);
	close(self->a);
}

#define ACCEPTED(self) qp_counter((self)->q.c.qid, "sqes_accepted")
#define REJECTED(self) qp_counter((self)->q.c.qid, "sqes_rejected")

/* Write 4 pages of pattern `seed` at lba through valid 2-page commands. */
static int put_pattern(struct qp *q, struct hostbuf *b, int pg, uint32_t nsid, uint64_t lba,
		       uint32_t lbs, uint32_t seed)
{
	uint32_t per = 4096 / lbs;
	pattern_fill(b->p + pg * 4096, 4 * 4096, seed, lba, lbs);
	for (int i = 0; i < 4; i += 2) {
		int st = qp_sync(q, rw_cmd(OPC_WRITE, nsid, lba + i * per, 2 * per, b->dma[pg + i], b->dma[pg + i + 1]));
		if (st)
			return st;
	}
	return 0;
}

/* Read 4 pages at lba into b's page pg.. through valid commands and check
 * them against the pattern; 0, an NVMe status, or -EILSEQ. */
static int check_pattern(struct qp *q, struct hostbuf *b, int pg, uint32_t nsid, uint64_t lba,
			 uint32_t lbs, uint32_t seed)
{
	uint32_t per = 4096 / lbs;
	memset(b->p + pg * 4096, 0, 4 * 4096);
	for (int i = 0; i < 4; i += 2) {
		int st = qp_sync(q, rw_cmd(OPC_READ, nsid, lba + i * per, 2 * per, b->dma[pg + i], b->dma[pg + i + 1]));
		if (st)
			return st;
	}
	return pattern_check(b->p + pg * 4096, 4 * 4096, seed, lba, lbs) < 0 ? 0 : -EILSEQ;
}

/*
 * B aims PRP1, PRP2 and PRP-list entries at A's buffer, in Writes (which
 * would copy A's bytes to the disk) and Reads (which would overwrite A's
 * buffer): every one is rejected, A's buffer is intact, B's landing pages
 * stay zero, and the disk still holds what B wrote before.
 */
TEST_F(iso, cross_file_prps_rejected)
{
	const uint64_t L = PG(self->per, 0);
	const uint32_t nsid = self->nsid, lbs = self->lbs;
	const uint64_t *A = self->abuf.dma, *B = self->bbuf.dma;
	struct qp *q = &self->q;
	ASSERT_EQ(0, put_pattern(q, &self->bbuf, 0, nsid, L, lbs, 21));
	memset(self->bbuf.p, 0, B_PAGES * 4096);
	long long acc0 = ACCEPTED(self), rej0 = REJECTED(self);

	struct {
		const char *what;
		uint32_t n;
		uint64_t pg[4];
	} cases[] = {
		{ "PRP1 = A's page", 1, { A[0] } },
		{ "PRP1 = A's last page", 1, { A[A_PAGES - 1] } },
		{ "PRP2 = A's page (2 pages)", 2, { B[8], A[0] } },
		{ "PRP1 = A's page, PRP2 = B's (2 pages)", 2, { A[0], B[9] } },
		{ "one list entry = A's page", 4, { B[8], B[9], A[0], B[11] } },
		{ "last list entry = A's page", 4, { B[8], B[9], B[10], A[3] } },
		{ "every list entry = A's pages", 4, { B[8], A[1], A[2], A[3] } },
		{ "all four pages A's", 4, { A[0], A[1], A[2], A[3] } },
	};
	int nrej = 0;
	for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char what[96];
		snprintf(what, sizeof(what), "Write, %s", cases[i].what);
		EXPECT_REJECTED(xfer(q, OPC_WRITE, nsid, L, lbs, cases[i].pg, cases[i].n, 0),
				NVME_SC_INVALID_FIELD, what);
		snprintf(what, sizeof(what), "Read, %s", cases[i].what);
		EXPECT_REJECTED(xfer(q, OPC_READ, nsid, L, lbs, cases[i].pg, cases[i].n, 512),
				NVME_SC_INVALID_FIELD, what);
		nrej += 2;
	}
	/* PRP1 with an offset into B's last page: the transfer runs into a
	 * second page, which PRP2 must cover; A's page does not. */
	if (lbs <= 2048) {
		uint32_t nlb = 4096 / lbs;
		EXPECT_REJECTED(qp_sync(q, rw_cmd(OPC_READ, nsid, L, nlb, B[B_PAGES - 1] + 2048, A[0])),
				NVME_SC_INVALID_FIELD, "Read, PRP1 = B's last page + 2048, PRP2 = A's page");
		EXPECT_REJECTED(qp_sync(q, rw_cmd(OPC_WRITE, nsid, L, nlb, B[B_PAGES - 1] + 2048, A[0])),
				NVME_SC_INVALID_FIELD, "Write, PRP1 = B's last page + 2048, PRP2 = A's page");
		/* One block inside A's page, at an offset. */
		EXPECT_REJECTED(qp_sync(q, rw_cmd(OPC_READ, nsid, L, 1, A[0] + 2048, 0)),
				NVME_SC_INVALID_FIELD, "Read, PRP1 = A's page + 2048");
		nrej += 3;
	}

	EXPECT_EQ(nrej, REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0) TH_LOG("a rejected SQE reached the controller");
	EXPECT_EQ(-1, first_not(self->abuf.p, A_PAGES * 4096, A_BYTE)) TH_LOG("A's buffer changed");
	EXPECT_EQ(-1, first_not(self->bbuf.p, B_PAGES * 4096, 0)) TH_LOG("B's buffer received data");
	/* The disk still holds B's pattern (no Write from A's memory landed). */
	EXPECT_EQ(0, check_pattern(q, &self->bbuf, 16, nsid, L, lbs, 21));
	EXPECT_EQ(0, pages_full_of_a(&self->bbuf)) TH_LOG("A's bytes reached B's buffer");
	/* A legal PRP1 offset (into B's last page, continuing in B's first) works. */
	if (lbs <= 2048) {
		memset(self->bbuf.p, 0, B_PAGES * 4096);
		ASSERT_EQ(0, qp_sync(q, rw_cmd(OPC_READ, nsid, L, 4096 / lbs, B[B_PAGES - 1] + 2048, B[0])));
		uint8_t want[4096];
		pattern_fill(want, 4096, 21, L, lbs);
		EXPECT_EQ(0, memcmp(self->bbuf.p + (B_PAGES - 1) * 4096 + 2048, want, 2048));
		EXPECT_EQ(0, memcmp(self->bbuf.p, want + 2048, 2048));
	}
}

/*
 * The addresses next to the ones B was handed (its buffer's first and last
 * page, its PRP pool, each +/- k pages for k = 1..64), as PRP1, as PRP2
 * and as a PRP-list entry of Writes: every one that is not B's own is
 * rejected, and the disk range they name keeps B's pattern.
 */
TEST_F_TIMEOUT(iso, neighbour_addresses_rejected, 180)
{
	const uint64_t L = PG(self->per, 8);
	const uint32_t nsid = self->nsid, lbs = self->lbs;
	const uint64_t *B = self->bbuf.dma;
	struct qp *q = &self->q;
	const uint64_t pool = q->c.prp_dma, pool_end = q->c.prp_dma + q->c.prp_size;
	uint64_t bases[] = { B[0], B[B_PAGES - 1], pool, pool_end - 4096 };
	static uint64_t cand[4 * 2 * 64];
	int ncand = 0;

	for (unsigned i = 0; i < 4; i++)
		for (int k = 1; k <= 64; k++)
			for (int sign = -1; sign <= 1; sign += 2) {
				uint64_t x = bases[i] + sign * (int64_t)k * 4096;
				if ((sign < 0 && x > bases[i]) || x == 0)
					continue;
				if (in_buf(&self->bbuf, x) || (x >= pool && x < pool_end))
					continue; /* B's own */
				int dup = 0;
				for (int j = 0; j < ncand && !dup; j++)
					dup = cand[j] == x;
				if (!dup)
					cand[ncand++] = x;
			}
	TH_LOG("%d neighbour addresses (B's buffer at %#llx..%#llx, pool at %#llx + %#llx)", ncand,
	       (unsigned long long)B[0], (unsigned long long)B[B_PAGES - 1],
	       (unsigned long long)pool, (unsigned long long)q->c.prp_size);
	ASSERT_LT(0, ncand);

	ASSERT_EQ(0, put_pattern(q, &self->bbuf, 0, nsid, L, lbs, 33));
	long long acc0 = ACCEPTED(self), rej0 = REJECTED(self);
	const int batch = 32;
	int submitted = 0, bad = 0;
	for (int form = 0; form < 3; form++)
		for (int first = 0; first < ncand; first += batch) {
			int n = ncand - first < batch ? ncand - first : batch;
			uint16_t cids[batch];
			for (int i = 0; i < n; i++) {
				uint64_t x = cand[first + i], pg[3] = { B[0], B[1], x };
				struct sqe c;
				if (form == 0)
					c = rw_cmd(OPC_WRITE, nsid, L, self->per, x, 0);
				else if (form == 1)
					c = rw_cmd(OPC_WRITE, nsid, L, 2 * self->per, B[0], x);
				else
					c = rw_cmd(OPC_WRITE, nsid, L, 3 * self->per, B[0],
						   qp_prp2(q, pg, 3, i * 64, NULL, 0));
				cids[i] = qp_push(q, c);
			}
			qp_ring(q);
			for (int i = 0; i < n; i++) {
				struct cqe c;
				ASSERT_EQ(0, qp_reap(q, &c, 5000));
				int st = c.status >> 1, j;
				for (j = 0; j < n && cids[j] != c.cid; j++)
					;
				ASSERT_GT(n, j) TH_LOG("unknown cid %u", c.cid);
				if (!rejected_with(st, NVME_SC_INVALID_FIELD) && bad++ < 8)
					TH_LOG("form %d, address %#llx: status %#x, not rejected", form,
					       (unsigned long long)cand[first + j], st);
			}
			submitted += n;
		}
	EXPECT_EQ(0, bad) TH_LOG("%d of %d SQEs with a neighbour address were not rejected", bad, submitted);
	EXPECT_EQ(submitted, REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	EXPECT_EQ(0, check_pattern(q, &self->bbuf, 8, nsid, L, lbs, 33)) TH_LOG("the disk range changed");
	EXPECT_EQ(-1, first_not(self->abuf.p, A_PAGES * 4096, A_BYTE));
}

/*
 * PRP lists: valid ones in the pool carry 16 and 64 KiB byte-exact (at
 * offset 0, at a small 8-byte-aligned offset, and ending exactly at the
 * end of a pool page); a PRP2 list pointer anywhere else (B's own data
 * buffer, before or past the pool, misaligned, running off the pool's end,
 * another file's pool) is rejected and moves nothing; so is a transfer
 * over shared_max_transfer.
 */
TEST_F(iso, prp_list_pool_rules)
{
	const uint64_t L = PG(self->per, 16);
	const uint32_t nsid = self->nsid, lbs = self->lbs;
	const uint64_t *B = self->bbuf.dma;
	struct qp *q = &self->q;
	uint64_t pg[16];

	/* Valid lists. */
	struct { uint32_t n; uint64_t off; } ok[] = { { 4, 0 }, { 16, 0 }, { 4, 8 }, { 4, 4096 - 24 } };
	for (unsigned t = 0; t < 4; t++) {
		uint32_t n = ok[t].n;
		if (n * 4096 > self->info.shared_max_transfer)
			continue;
		uint64_t lba = PG(self->per, 32 + t * 32);
		pattern_fill(self->bbuf.p, n * 4096, 40 + t, lba, lbs);
		for (uint32_t i = 0; i < n; i++)
			pg[i] = B[i];
		ASSERT_EQ(0, xfer(q, OPC_WRITE, nsid, lba, lbs, pg, n, ok[t].off)) TH_LOG("%u pages, list at %#llx", n,
											(unsigned long long)ok[t].off);
		memset(self->bbuf.p + 20 * 4096, 0, n * 4096);
		for (uint32_t i = 0; i < n; i++)
			pg[i] = B[20 + i];
		ASSERT_EQ(0, xfer(q, OPC_READ, nsid, lba, lbs, pg, n, ok[t].off));
		EXPECT_EQ(-1, pattern_check(self->bbuf.p + 20 * 4096, n * 4096, 40 + t, lba, lbs))
			TH_LOG("%u pages, list at pool offset %#llx", n, (unsigned long long)ok[t].off);
	}

	/* Invalid list pointers, as Reads of L (pattern 40) into B's zeroed
	 * pages 40..43: those pages must stay zero. */
	ASSERT_EQ(0, put_pattern(q, &self->bbuf, 0, nsid, L, lbs, 40));
	struct qp qa;
	ASSERT_EQ(0, qp_create_flags(self->a, 8, 0, &qa));
	ASSERT_NE(NULL, qa.prp);
	uint64_t list[3] = { B[41], B[42], B[43] };
	memcpy(self->bbuf.p + 30 * 4096, list, sizeof(list)); /* a list in B's data buffer */
	for (int i = 0; i < 3; i++)
		qa.prp[i] = list[i]; /* and in A's pool */
	const uint64_t pool = q->c.prp_dma, size = q->c.prp_size;
	struct { const char *what; uint64_t prp2; } bad[] = {
		{ "list in B's own data buffer", B[30] },
		{ "list just past the pool", pool + size },
		{ "list 8 bytes before the pool", pool - 8 },
		{ "list a page before the pool", pool - 4096 },
		{ "list pointer not 8-byte aligned", pool + 4 },
		{ "list running off the pool's end", pool + size - 8 },
		{ "list in another file's pool", qa.c.prp_dma },
	};
	long long rej0 = REJECTED(self), acc0 = ACCEPTED(self);
	memset(self->bbuf.p + 40 * 4096, 0, 4 * 4096);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		for (int j = 0; j < 3; j++)
			q->prp[j] = list[j]; /* a valid list at offset 0 all along */
		EXPECT_REJECTED(qp_sync(q, rw_cmd(OPC_READ, nsid, L, 4 * self->per, B[40], bad[i].prp2)),
				NVME_SC_INVALID_FIELD, bad[i].what);
	}
	EXPECT_EQ(sizeof(bad) / sizeof(bad[0]), REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	EXPECT_EQ(-1, first_not(self->bbuf.p + 40 * 4096, 4 * 4096, 0)) TH_LOG("a rejected read moved data");

	/* A list entry that is not page aligned: an error either way (the
	 * module's Invalid Field or the controller's PRP Offset Invalid). */
	uint64_t mis[4] = { B[40], B[41], B[42] + 8, B[43] };
	int st = xfer(q, OPC_READ, nsid, L, lbs, mis, 4, 0);
	EXPECT_TRUE(st > 0 && (st & NVME_DNR)) TH_LOG("misaligned list entry: status %#x", st);

	/* One page more than shared_max_transfer, every page B's own. */
	uint32_t n = self->info.shared_max_transfer / 4096 + 1;
	struct hostbuf big;
	ASSERT_EQ(0, hostbuf_map(self->b, n * 4096, &big));
	if (n - 1 <= 512 && n * 4096 / lbs <= 65536) {
		uint64_t prp2 = qp_prp2(q, big.dma, n, 0, NULL, 0);
		EXPECT_REJECTED(qp_sync(q, rw_cmd(OPC_READ, nsid, L, n * 4096 / lbs, big.dma[0], prp2)),
				NVME_SC_INVALID_FIELD, "transfer over shared_max_transfer");
		EXPECT_EQ(-1, first_not(big.p, n * 4096, 0));
	}

	/* Still working. */
	for (uint32_t i = 0; i < 4; i++)
		pg[i] = B[50 + i];
	EXPECT_EQ(0, xfer(q, OPC_READ, nsid, L, lbs, pg, 4, 0));
	EXPECT_EQ(-1, pattern_check(self->bbuf.p + 50 * 4096, 4 * 4096, 40, L, lbs));
	EXPECT_EQ(0, qp_destroy(&qa));
}

/* 1 once the next completion of q is there, or after 5 s (qp_reap then
 * reports the timeout). */
static int cqe_ready(struct qp *q, long spin)
{
	static struct timespec t0;
	struct timespec t;
	if ((q->cq[q->head].status & 1) == q->phase)
		return 1;
	if (spin == 0)
		clock_gettime(CLOCK_MONOTONIC, &t0);
	if (spin % 4096)
		return 0;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec - t0.tv_sec > 5;
}

/*
 * The relay reads each SQE and PRP list once, into kernel memory, before
 * it checks and uses them: B flips a PRP-list entry, and the SQE's PRP1,
 * between its own page and A's page while the relay works on them. Each
 * command either runs on B's pages or is rejected; A's buffer never
 * receives the disk's bytes.
 */
TEST_F_TIMEOUT(iso, flipping_lists_and_sqes_never_reach_another_file, 120)
{
	const uint64_t L = PG(self->per, 200);
	const uint32_t nsid = self->nsid, lbs = self->lbs;
	const uint64_t *A = self->abuf.dma, *B = self->bbuf.dma;
	struct qp *q = &self->q;
	int ok = 0, rej = 0, other = 0;
	ASSERT_EQ(0, put_pattern(q, &self->bbuf, 0, nsid, L, lbs, 55));

	for (int it = 0; it < 60; it++) {
		struct cqe c;
		/* A PRP-list entry flipping between B[42] and A[0]. */
		q->prp[0] = B[41];
		q->prp[1] = B[42];
		q->prp[2] = B[43];
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		qp_push(q, rw_cmd(OPC_READ, nsid, L, 4 * self->per, B[40], q->c.prp_dma));
		qp_ring(q);
		for (long spin = 0; !cqe_ready(q, spin); spin++)
			q->prp[1] = (spin & 1) ? A[0] : B[42];
		ASSERT_EQ(0, qp_reap(q, &c, 5000));
		int st = c.status >> 1;
		if (!st)
			ok++;
		else if (rejected_with(st, NVME_SC_INVALID_FIELD))
			rej++;
		else
			other++;

		/* The SQE's PRP1 flipping between B[44] and A[1]. */
		int slot = q->tail;
		qp_push(q, rw_cmd(OPC_READ, nsid, L, self->per, B[44], 0));
		qp_ring(q);
		for (long spin = 0; !cqe_ready(q, spin); spin++)
			q->sq[slot].prp1 = (spin & 1) ? A[1] : B[44];
		ASSERT_EQ(0, qp_reap(q, &c, 5000));
		st = c.status >> 1;
		if (!st)
			ok++;
		else if (rejected_with(st, NVME_SC_INVALID_FIELD))
			rej++;
		else
			other++;
	}
	TH_LOG("120 commands under flipping: %d ran on B's pages, %d rejected, %d other", ok, rej, other);
	EXPECT_EQ(0, other);
	EXPECT_EQ(-1, first_not(self->abuf.p, A_PAGES * 4096, A_BYTE)) TH_LOG("the disk's bytes reached A's buffer");
}

/* Opcodes outside Read/Write/Flush/Write Zeroes: Invalid Command Opcode. */
TEST_F(iso, opcodes_outside_the_allow_list)
{
	const uint32_t nsid = self->nsid;
	const uint64_t *B = self->bbuf.dma;
	/* Write Uncorrectable, Compare, Identify (admin), DSM, Verify,
	 * Reservation Register, Firmware Commit (admin), Copy, reserved,
	 * vendor specific. */
	uint8_t opcs[] = { 0x04, 0x05, 0x06, 0x09, 0x0c, 0x0d, 0x10, 0x19, 0x7f, 0x80, 0x81, 0xff };
	long long rej0 = REJECTED(self), acc0 = ACCEPTED(self);
	memset(self->bbuf.p, 0x11, 4096);
	for (unsigned i = 0; i < sizeof(opcs); i++) {
		char what[32];
		snprintf(what, sizeof(what), "opcode %#x", opcs[i]);
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(opcs[i], nsid, 0, 1, B[0], 0)), NVME_SC_INVALID_OPCODE, what);
	}
	EXPECT_EQ(sizeof(opcs), REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	EXPECT_EQ(-1, first_not(self->bbuf.p, 4096, 0x11));
	/* The controller keeps working. */
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, nsid, PG(self->per, 220), self->lbs, 61));
	EXPECT_EQ(0, check_pattern(&self->q, &self->bbuf, 4, nsid, PG(self->per, 220), self->lbs, 61));
}

/* NSID 0, the broadcast NSID and an inactive NSID: Invalid Namespace or Format. */
TEST_F(iso, namespaces_outside_the_active_ones)
{
	const uint64_t *B = self->bbuf.dma;
	uint32_t inactive = 1;
	for (int again = 1; again;) {
		again = 0;
		for (uint32_t i = 0; i < self->info.num_namespaces; i++)
			if (self->info.ns[i].nsid == inactive) {
				inactive++;
				again = 1;
			}
	}
	uint32_t nsids[] = { 0, 0xffffffff, inactive, 0x10000 };
	long long rej0 = REJECTED(self), acc0 = ACCEPTED(self);
	for (unsigned i = 0; i < 4; i++) {
		char what[48];
		snprintf(what, sizeof(what), "Read with NSID %#x", nsids[i]);
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_READ, nsids[i], 0, 1, B[0], 0)), NVME_SC_INVALID_NS, what);
		snprintf(what, sizeof(what), "Write with NSID %#x", nsids[i]);
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_WRITE, nsids[i], 0, 1, B[0], 0)), NVME_SC_INVALID_NS, what);
	}
	EXPECT_EQ(8, REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, self->nsid, PG(self->per, 230), self->lbs, 62));
	EXPECT_EQ(0, check_pattern(&self->q, &self->bbuf, 4, self->nsid, PG(self->per, 230), self->lbs, 62));
}

/* Ranges past the namespace's end, including ones that wrap around 2^64:
 * LBA Out of Range; the last block itself is fine. */
TEST_F(iso, lba_ranges_past_the_end)
{
	const uint32_t nsid = self->nsid;
	const uint64_t *B = self->bbuf.dma, cap = self->cap;
	struct { const char *what; uint8_t opc; uint64_t slba; uint32_t nlb; } bad[] = {
		{ "Read at capacity", OPC_READ, cap, 1 },
		{ "Read spanning the end", OPC_READ, cap - 1, 2 },
		{ "Write spanning the end", OPC_WRITE, cap - 1, 2 },
		{ "Read wrapping past 2^64", OPC_READ, ~0ull, 2 },
		{ "Write at 2^63", OPC_WRITE, 1ull << 63, 1 },
		{ "Write Zeroes spanning the end", OPC_WRITE_ZEROES, cap - 4, 8 },
		{ "Write Zeroes wrapping past 2^64", OPC_WRITE_ZEROES, ~0ull - 2, 8 },
	};
	/* Known data in the last block first. */
	pattern_fill(self->bbuf.p, self->lbs, 63, cap - 1, self->lbs);
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, cap - 1, 1, B[0], 0)));
	long long rej0 = REJECTED(self), acc0 = ACCEPTED(self);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* Valid PRPs for the length (two blocks of 4 KiB need PRP2). */
		uint64_t prp2 = (uint64_t)bad[i].nlb * self->lbs > 4096 ? B[2] : 0;
		struct sqe c = rw_cmd(bad[i].opc, nsid, bad[i].slba, bad[i].nlb, B[1], prp2);
		if (bad[i].opc == OPC_WRITE_ZEROES)
			c.prp1 = 0;
		EXPECT_REJECTED(qp_sync(&self->q, c), NVME_SC_LBA_RANGE, bad[i].what);
	}
	EXPECT_EQ(sizeof(bad) / sizeof(bad[0]), REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	/* The in-range block of the spanning Write and Write Zeroes is untouched. */
	memset(self->bbuf.p + 4096, 0, 4096);
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, cap - 1, 1, B[1], 0)));
	EXPECT_EQ(-1, pattern_check(self->bbuf.p + 4096, self->lbs, 63, cap - 1, self->lbs));
}

/* SGLs (PSDT != 0), a metadata pointer and fused operations: Invalid Field. */
TEST_F(iso, sgl_metadata_and_fused_rejected)
{
	const uint32_t nsid = self->nsid;
	const uint64_t *B = self->bbuf.dma;
	struct { const char *what; uint8_t flags; uint64_t mptr; } bad[] = {
		{ "PSDT 01 (SGL)", 0x40, 0 },
		{ "PSDT 10 (SGL, MPTR a segment)", 0x80, 0 },
		{ "PSDT 11 (reserved)", 0xc0, 0 },
		{ "MPTR = B's own page", 0, 0 },
		{ "MPTR = 8", 0, 8 },
		{ "fused, first command", 0x01, 0 },
		{ "fused, second command", 0x02, 0 },
		{ "fused bits 11", 0x03, 0 },
	};
	bad[3].mptr = B[5];
	long long rej0 = REJECTED(self), acc0 = ACCEPTED(self);
	memset(self->bbuf.p, 0, 8 * 4096);
	for (unsigned i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sqe c = rw_cmd(OPC_READ, nsid, 0, 1, B[1], 0);
		c.flags = bad[i].flags;
		c.mptr = bad[i].mptr;
		EXPECT_REJECTED(qp_sync(&self->q, c), NVME_SC_INVALID_FIELD, bad[i].what);
	}
	EXPECT_EQ(sizeof(bad) / sizeof(bad[0]), REJECTED(self) - rej0);
	EXPECT_EQ(0, ACCEPTED(self) - acc0);
	EXPECT_EQ(-1, first_not(self->bbuf.p, 8 * 4096, 0));
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, nsid, PG(self->per, 240), self->lbs, 64));
	EXPECT_EQ(0, check_pattern(&self->q, &self->bbuf, 4, nsid, PG(self->per, 240), self->lbs, 64));
}

/* The allow-list itself: Flush, Write Zeroes, Write and Read all pass. */
TEST_F(iso, allowed_commands_pass)
{
	const uint32_t nsid = self->nsid;
	long long acc0 = ACCEPTED(self), rej0 = REJECTED(self);
	const uint64_t L = PG(self->per, 250);
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, nsid, L, self->lbs, 65)); /* 2 Writes */
	EXPECT_EQ(0, qp_sync(&self->q, (struct sqe){ .opcode = OPC_FLUSH, .nsid = nsid }));
	struct sqe wz = rw_cmd(OPC_WRITE_ZEROES, nsid, L, self->per, 0, 0);
	EXPECT_EQ(0, qp_sync(&self->q, wz));
	memset(self->bbuf.p + 8 * 4096, 0xff, 4096);
	EXPECT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, self->bbuf.dma[8], 0)));
	EXPECT_EQ(-1, first_not(self->bbuf.p + 8 * 4096, 4096, 0)) TH_LOG("Write Zeroes did not zero");
	EXPECT_EQ(5, ACCEPTED(self) - acc0);
	EXPECT_EQ(0, REJECTED(self) - rej0);
}

/*
 * A shared file's "doorbell page" is memory, not BAR0: every word reads
 * back what was written there (MMIO doorbells read as zero), words other
 * than the two cells do nothing, and wild cell values are counted in
 * bad_doorbell_values and dropped. Garbage SQEs behind a tail in range are
 * rejected one by one (counted), never reaching the controller; after that
 * the pair works.
 */
TEST_F(iso, shared_doorbell_page_is_memory)
{
	struct qp *q = &self->q;
	volatile uint32_t *page = (volatile uint32_t *)q->db;
	const uint16_t qid = q->c.qid;
	for (int i = 0; i < 1024; i++)
		if (i != q->c.sq_db / 4 && i != q->c.cq_db / 4)
			page[i] = 0xdeadbeef ^ i;
	usleep(20 * 1000);
	int diff = -1;
	for (int i = 0; i < 1024 && diff < 0; i++)
		if (i != q->c.sq_db / 4 && i != q->c.cq_db / 4 && page[i] != (0xdeadbeef ^ i))
			diff = i;
	EXPECT_EQ(-1, diff) TH_LOG("word %d of the doorbell page did not keep its value", diff);

	uint32_t wild[] = { 64, 69, 1000, 0x7fffffff, 0xffffffff };
	long long bad = qp_counter(qid, "bad_doorbell_values");
	for (unsigned i = 0; i < 5; i++) {
		page[q->c.sq_db / 4] = wild[i];
		EXPECT_EQ(bad + 1, qp_counter_settles(qid, "bad_doorbell_values", bad + 1)) TH_LOG("SQ tail %#x", wild[i]);
		bad++;
	}
	page[q->c.sq_db / 4] = 0;
	for (unsigned i = 0; i < 2; i++) {
		page[q->c.cq_db / 4] = wild[i * 4];
		EXPECT_EQ(bad + 1, qp_counter_settles(qid, "bad_doorbell_values", bad + 1)) TH_LOG("CQ head %#x", wild[i * 4]);
		bad++;
	}
	page[q->c.cq_db / 4] = 0;
	usleep(20 * 1000);
	EXPECT_EQ(0, qp_counter(qid, "sq_doorbell_writes"));
	EXPECT_EQ(0, qp_counter(qid, "sqes_accepted"));
	EXPECT_EQ(0, qp_counter(qid, "sqes_rejected"));

	/* Three garbage SQEs, then a tail in range. */
	memset((void *)&q->sq[0], 0xff, 64);
	memset((void *)&q->sq[1], 0x00, 64);
	for (int i = 0; i < 64; i++)
		((volatile uint8_t *)&q->sq[2])[i] = (uint8_t)(i * 37 + 11);
	q->sq[2].opcode = 0x81;
	q->tail = 3;
	qp_ring(q);
	for (int i = 0; i < 3; i++) {
		struct cqe c;
		ASSERT_EQ(0, qp_reap(q, &c, 5000));
		int st = c.status >> 1;
		EXPECT_TRUE(st > 0 && (st & NVME_DNR)) TH_LOG("garbage SQE (cid %#x): status %#x", c.cid, st);
	}
	EXPECT_EQ(3, qp_counter(qid, "sqes_rejected"));
	EXPECT_EQ(0, qp_counter(qid, "sqes_accepted"));
	EXPECT_EQ(0, qp_counter(qid, "sq_doorbell_writes")) TH_LOG("a garbage SQE reached the controller");
	ASSERT_EQ(0, put_pattern(q, &self->bbuf, 0, self->nsid, PG(self->per, 260), self->lbs, 66));
	EXPECT_EQ(0, check_pattern(q, &self->bbuf, 4, self->nsid, PG(self->per, 260), self->lbs, 66));
}

/* mmap at an offset B was not given: EINVAL, whether the offset names A's
 * objects, a queue ID nobody has, the admin queue's ID, or nothing. */
TEST_F(iso, mmap_of_other_objects_refused)
{
	struct qp qa;
	ASSERT_EQ(0, qp_create_flags(self->a, 8, 0, &qa));
	const struct gpunvme_qpair_create *bc = &self->q.c;
	uint64_t mine[] = { bc->sq_offset, bc->cq_offset, bc->db_offset, bc->prp_offset };
	struct { uint64_t off, len; } tries[512];
	int n = 0;
	tries[n].off = qa.c.sq_offset, tries[n++].len = qa.c.sq_size;
	tries[n].off = qa.c.cq_offset, tries[n++].len = qa.c.cq_size;
	tries[n].off = qa.c.db_offset, tries[n++].len = 4096;
	tries[n].off = qa.c.prp_offset, tries[n++].len = qa.c.prp_size;
	/* Today's encoding is ((kind << 16) | qid) * 4096 (not ABI, but every
	 * such offset that is not B's own must be refused). */
	uint32_t qids[] = { 0, bc->qid, qa.c.qid, 0xffff };
	for (uint32_t kind = 0; kind < 16; kind++)
		for (int j = 0; j < 4; j++) {
			tries[n].off = ((uint64_t)kind << 16 | qids[j]) * 4096;
			tries[n++].len = 4096;
		}
	for (int j = 0; j < 4; j++)
		for (int k = -4; k <= 4; k++)
			if (k && mine[j] + k * 4096 < (1ull << 40)) {
				tries[n].off = mine[j] + (int64_t)k * 4096;
				tries[n++].len = 4096;
			}
	tries[n].off = 1ull << 40, tries[n++].len = 4096;
	int refused = 0, tried = 0;
	for (int i = 0; i < n; i++) {
		int own = 0;
		for (int j = 0; j < 4; j++)
			own |= tries[i].off == mine[j];
		if (own)
			continue;
		tried++;
		void *p = mmap(NULL, tries[i].len, PROT_READ | PROT_WRITE, MAP_SHARED, self->b, tries[i].off);
		if (p != MAP_FAILED) {
			TH_LOG("mmap at %#llx (%llu bytes) succeeded", (unsigned long long)tries[i].off,
			       (unsigned long long)tries[i].len);
			munmap(p, tries[i].len);
		} else if (errno == EINVAL) {
			refused++;
		} else {
			TH_LOG("mmap at %#llx: %s, not EINVAL", (unsigned long long)tries[i].off, strerror(errno));
		}
	}
	EXPECT_EQ(tried, refused);
	/* And the other way round. */
	for (int j = 0; j < 4; j++) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, self->a, mine[j]);
		EXPECT_EQ(MAP_FAILED, p) TH_LOG("A mapped B's object at %#llx", (unsigned long long)mine[j]);
		if (p != MAP_FAILED)
			munmap(p, 4096);
	}
	EXPECT_EQ(0, qp_destroy(&qa));
}

/* dma-buf size from /proc/self/fdinfo, or -1. */
static long long dmabuf_size(int fd)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	return read_field(path, "size:");
}

/*
 * EXPORT of a shared pair gives only its shadows: the doorbell is one page
 * (4096 bytes) of memory; another file's queue pair is ENOENT; kinds that
 * do not exist are EINVAL. (That the doorbell export is memory, not MMIO,
 * is proven with a DMA peer by the stand-in test: it imports it where the
 * real doorbell page has no peer-to-peer path.)
 */
TEST_F(iso, exports_of_a_shared_pair)
{
	struct gpunvme_export e;
	struct qp qa;
	ASSERT_EQ(0, qp_create_flags(self->a, 8, 0, &qa));
	struct { uint16_t kind; uint64_t len; } k[] = {
		{ GPUNVME_EXPORT_DOORBELL, 4096 },
		{ GPUNVME_EXPORT_SQ, self->q.c.sq_size },
		{ GPUNVME_EXPORT_CQ, self->q.c.cq_size },
		{ GPUNVME_EXPORT_PRP_POOL, self->q.c.prp_size },
	};
	for (int i = 0; i < 4; i++) {
		UAPI_INIT(e);
		e.qid = self->q.c.qid;
		e.kind = k[i].kind;
		e.flags = O_CLOEXEC;
		ASSERT_EQ(0, ioctl(self->b, GPUNVME_IOC_EXPORT, &e)) TH_LOG("kind %u", k[i].kind);
		EXPECT_EQ(k[i].len, e.length);
		EXPECT_EQ((long long)k[i].len, dmabuf_size(e.fd));
		close(e.fd);
		/* A's pair through B's file. */
		UAPI_INIT(e);
		e.qid = qa.c.qid;
		e.kind = k[i].kind;
		EXPECT_EQ(-1, ioctl(self->b, GPUNVME_IOC_EXPORT, &e));
		EXPECT_EQ(ENOENT, errno);
	}
	uint16_t kinds[] = { 0, 5, 0x100, 0xffff };
	for (int i = 0; i < 4; i++) {
		UAPI_INIT(e);
		e.qid = self->q.c.qid;
		e.kind = kinds[i];
		EXPECT_EQ(-1, ioctl(self->b, GPUNVME_IOC_EXPORT, &e)) TH_LOG("kind %u", kinds[i]);
		EXPECT_EQ(EINVAL, errno);
	}
	/* Queue ID 0 (the admin queue) is nobody's pair. */
	UAPI_INIT(e);
	e.qid = 0;
	e.kind = GPUNVME_EXPORT_DOORBELL;
	EXPECT_EQ(-1, ioctl(self->b, GPUNVME_IOC_EXPORT, &e));
	EXPECT_EQ(ENOENT, errno);
	EXPECT_EQ(0, qp_destroy(&qa));
}

/*
 * Buffer lifetimes: after B unmaps a buffer, its old addresses are no
 * longer B's (the IOVAs may be handed to A's next mapping): rejected, and
 * A's new buffer keeps its bytes.
 */
TEST_F(iso, stale_addresses_after_unmap_rejected)
{
	struct hostbuf x, a2;
	uint64_t old[4];
	const uint32_t nsid = self->nsid;
	const uint64_t L = PG(self->per, 270);
	ASSERT_EQ(0, hostbuf_map(self->b, 4 * 4096, &x));
	memcpy(old, x.dma, sizeof(old));
	pattern_fill(x.p, 4096, 67, L, self->lbs);
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, L, self->per, old[0], 0)));
	ASSERT_EQ(0, qp_destroy(&self->q)); /* UNMAP needs no live pairs */
	ASSERT_EQ(0, hostbuf_unmap(self->b, &x));
	ASSERT_EQ(0, hostbuf_map(self->a, 4 * 4096, &a2));
	memset(a2.p, A_BYTE, 4 * 4096);
	int reused = 0;
	for (int i = 0; i < 4; i++)
		reused += in_buf(&a2, old[i]);
	TH_LOG("A's new mapping reuses %d of the 4 addresses B unmapped", reused);
	ASSERT_EQ(0, qp_create_flags(self->b, 16, 0, &self->q));
	long long rej0 = REJECTED(self);
	for (int i = 0; i < 4; i++) {
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, old[i], 0)),
				NVME_SC_INVALID_FIELD, "Read into an unmapped buffer's page");
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, L + 1 + i, 1, old[i], 0)),
				NVME_SC_INVALID_FIELD, "Write from an unmapped buffer's page");
	}
	EXPECT_EQ(8, REJECTED(self) - rej0);
	EXPECT_EQ(-1, first_not(a2.p, 4 * 4096, A_BYTE));
	memset(self->bbuf.p, 0, 4096);
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, self->bbuf.dma[0], 0)));
	EXPECT_EQ(-1, pattern_check(self->bbuf.p, 4096, 67, L, self->lbs));
}

/* A udmabuf of `len` bytes (a VRAM stand-in) filled with `v`; its memory at *mem. */
static int make_udmabuf(size_t len, uint8_t v, uint8_t **mem)
{
	int memfd = syscall(SYS_memfd_create, "trust", MFD_ALLOW_SEALING);
	if (memfd < 0 || ftruncate(memfd, len) || fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK))
		return -1;
	*mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	int dev = open("/dev/udmabuf", O_RDWR);
	if (dev < 0 || *mem == MAP_FAILED)
		return -1;
	memset(*mem, v, len);
	struct udmabuf_create c = { .memfd = memfd, .flags = UDMABUF_FLAGS_CLOEXEC, .offset = 0, .size = len };
	int fd = ioctl(dev, UDMABUF_CREATE, &c);
	close(dev);
	close(memfd);
	return fd;
}

static int import(int fd, int buf, uint64_t *addrs, uint64_t pages)
{
	struct gpunvme_map_dmabuf m;
	UAPI_INIT(m);
	m.fd = buf;
	m.max_pages = pages;
	m.dma_addrs = (uintptr_t)addrs;
	return ioctl(fd, GPUNVME_IOC_MAP_DMABUF, &m) ? -errno : 0;
}

/* The same isolation for imported dma-bufs (GPU memory): A's import is
 * not B's, B's own import is. */
TEST_F(iso, cross_file_dmabuf_rejected)
{
	uint8_t *amem, *bmem;
	uint64_t aaddr[4], baddr[4];
	if (access("/dev/udmabuf", F_OK))
		SKIP(return, "no /dev/udmabuf");
	int abuf = make_udmabuf(4 * 4096, A_BYTE, &amem);
	int bbuf = make_udmabuf(4 * 4096, 0, &bmem);
	ASSERT_LE(0, abuf);
	ASSERT_LE(0, bbuf);
	ASSERT_EQ(0, import(self->a, abuf, aaddr, 4));
	ASSERT_EQ(0, import(self->b, bbuf, baddr, 4));
	const uint32_t nsid = self->nsid;
	const uint64_t L = PG(self->per, 280);
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, nsid, L, self->lbs, 68));
	long long rej0 = REJECTED(self);
	EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, aaddr[0], 0)),
			NVME_SC_INVALID_FIELD, "Read into A's dma-buf");
	EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, 2 * self->per, baddr[0], aaddr[1])),
			NVME_SC_INVALID_FIELD, "Read, PRP2 in A's dma-buf");
	EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, L, self->per, aaddr[2], 0)),
			NVME_SC_INVALID_FIELD, "Write from A's dma-buf");
	EXPECT_EQ(3, REJECTED(self) - rej0);
	EXPECT_EQ(-1, first_not(amem, 4 * 4096, A_BYTE));
	EXPECT_EQ(-1, first_not(bmem, 4 * 4096, 0));
	/* B's own import is B's. */
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, 2 * self->per, baddr[0], baddr[1])));
	EXPECT_EQ(-1, pattern_check(bmem, 2 * 4096, 68, L, self->lbs));
	EXPECT_EQ(0, check_pattern(&self->q, &self->bbuf, 8, nsid, L, self->lbs, 68));
	close(abuf);
	close(bbuf);
}

/*
 * An import its exporter revoked is no longer the file's: its IOVAs are
 * unmapped and go back to the allocator, which hands them to the next
 * mapping of that size, another file's included. B imports its own pair's
 * SQ export, destroys that pair (the export is revoked, the import
 * invalidated), A maps a buffer of the same size: B's SQEs naming the old
 * addresses must be rejected, and A's buffer keep its bytes.
 */
TEST_F(iso, revoked_import_addresses_rejected)
{
	struct qp qx;
	struct gpunvme_export e;
	struct hostbuf a2;
	uint64_t addrs[4];
	const uint32_t nsid = self->nsid;
	const uint64_t L = PG(self->per, 290);
	ASSERT_EQ(0, qp_create_flags(self->b, 256, 0, &qx)); /* SQ: 16 KiB */
	ASSERT_EQ(16384, qx.c.sq_size);
	UAPI_INIT(e);
	e.qid = qx.c.qid;
	e.kind = GPUNVME_EXPORT_SQ;
	ASSERT_EQ(0, ioctl(self->b, GPUNVME_IOC_EXPORT, &e));
	ASSERT_EQ(0, import(self->b, e.fd, addrs, 4));
	ASSERT_EQ(0, put_pattern(&self->q, &self->bbuf, 0, nsid, L, self->lbs, 69));
	/* While imported, the pages are B's. */
	EXPECT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, addrs[1], 0)));
	EXPECT_EQ(0, qp_destroy(&qx)); /* revokes the export: the import is unmapped */
	ASSERT_EQ(0, hostbuf_map(self->a, 4 * 4096, &a2));
	memset(a2.p, A_BYTE, 4 * 4096);
	int reused = 0;
	for (int i = 0; i < 4; i++)
		reused += in_buf(&a2, addrs[i]);
	TH_LOG("A's new mapping reuses %d of the 4 addresses of B's revoked import", reused);
	long long rej0 = REJECTED(self);
	for (int i = 0; i < 4; i++) {
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_READ, nsid, L, self->per, addrs[i], 0)),
				NVME_SC_INVALID_FIELD, "Read into a revoked import's page");
		EXPECT_REJECTED(qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, L, self->per, addrs[i], 0)),
				NVME_SC_INVALID_FIELD, "Write from a revoked import's page");
	}
	EXPECT_EQ(8, REJECTED(self) - rej0);
	EXPECT_EQ(-1, first_not(a2.p, 4 * 4096, A_BYTE)) TH_LOG("the controller wrote into A's buffer");
	EXPECT_EQ(0, check_pattern(&self->q, &self->bbuf, 8, nsid, L, self->lbs, 69));
	close(e.fd);
}

/* ------------------------------------------------------------------ */

/* Tests that open their own files; a fixture only for the longer timeout. */
FIXTURE(ctrl) {
	int unused;
};
FIXTURE_SETUP(ctrl) { self->unused = 0; }
FIXTURE_TEARDOWN(ctrl) { }

/*
 * One owner per controller, EBUSY both ways: a claim fails while another
 * file has queue pairs or buffers mapped, and while a file owns the
 * controller no other file creates queue pairs or maps buffers (raw SQEs
 * could name any of them). RAW without a claim is EPERM; ownership ends
 * when the owner's file goes (close, or process exit).
 */
TEST_F_TIMEOUT(ctrl, ownership_is_exclusive, 60)
{
	struct qp qa, qb;
	struct hostbuf hb;
	struct gpunvme_info info;
	uint32_t mode = 99;
	int a = gpunvme_open_bound(), b = gpunvme_open_bound(), c = gpunvme_open_bound();
	ASSERT_LE(0, a);
	ASSERT_LE(0, b);
	ASSERT_LE(0, c);
	ASSERT_EQ(0, get_info(a, &info));
	if (!(info.modes & GPUNVME_MODE_OWNER))
		SKIP(return, "owner mode is not available in this boot (IOMMU mode %u, modes %#x)",
		     info.iommu_mode, info.modes);
	uint32_t per = 4096 / info.ns[0].lba_size, nsid = info.ns[0].nsid;
	const uint64_t L = PG(per, 300);

	/* A raw pair needs the claim. */
	EXPECT_EQ(-EPERM, qp_create_flags(c, 8, GPUNVME_QPAIR_RAW, &qb));

	/* A file with queue pairs, or with buffers mapped, keeps others
	 * from claiming. */
	ASSERT_EQ(0, qp_create_flags(a, 8, 0, &qa));
	EXPECT_EQ(-EBUSY, claim_owner(b, NULL));
	ASSERT_EQ(0, qp_destroy(&qa));
	ASSERT_EQ(0, hostbuf_map(a, 4096, &hb));
	EXPECT_EQ(-EBUSY, claim_owner(b, NULL));
	ASSERT_EQ(0, hostbuf_unmap(a, &hb));
	ASSERT_EQ(0, claim_owner(b, &mode));
	EXPECT_EQ(info.iommu_mode, mode);
	EXPECT_EQ(-EALREADY, claim_owner(b, NULL));

	/* While B owns it: no one else creates queue pairs or claims. */
	EXPECT_EQ(-EBUSY, qp_create_flags(a, 8, 0, &qa));
	int r = qp_create_flags(a, 8, GPUNVME_QPAIR_RAW, &qa);
	EXPECT_TRUE(r == -EPERM || r == -EBUSY) TH_LOG("raw pair by a non-owner: %d", r);
	EXPECT_EQ(-EBUSY, claim_owner(a, NULL));
	EXPECT_EQ(-EBUSY, claim_owner(c, NULL));
	EXPECT_EQ(-EBUSY, hostbuf_map(a, 4096, &hb));
	if (!access("/dev/udmabuf", F_OK)) {
		uint8_t *mem;
		uint64_t addrs[1];
		int ub = make_udmabuf(4096, 0, &mem);
		ASSERT_LE(0, ub);
		EXPECT_EQ(-EBUSY, import(a, ub, addrs, 1));
		close(ub);
	}
	ASSERT_EQ(0, get_info(a, &info));
	EXPECT_EQ(0, info.modes & GPUNVME_MODE_SHARED) TH_LOG("modes %#x while another file owns", info.modes);
	int ns = gpunvme_open_ns(nsid);
	ASSERT_LE(0, ns);
	EXPECT_EQ(-EBUSY, qp_create_flags(ns, 8, 0, &qa));
	close(ns);

	/* The owner's raw pair works. */
	ASSERT_EQ(0, qp_create_flags(b, 8, GPUNVME_QPAIR_RAW, &qb));
	ASSERT_EQ(0, hostbuf_map(b, 2 * 4096, &hb));
	pattern_fill(hb.p, 4096, 70, L, 4096 / per);
	EXPECT_EQ(0, qp_sync(&qb, rw_cmd(OPC_WRITE, nsid, L, per, hb.dma[0], 0)));

	/* Its mappings hold the file open; once they and the fd are gone,
	 * so is the ownership. */
	qp_unmap(&qb);
	close(b);
	ASSERT_EQ(0, qp_create_flags(a, 8, 0, &qa));
	ASSERT_EQ(0, get_info(c, &info));
	EXPECT_TRUE(info.modes & GPUNVME_MODE_SHARED);
	EXPECT_EQ(-EBUSY, claim_owner(c, NULL)); /* A has a pair now */
	ASSERT_EQ(0, qp_destroy(&qa));

	/* An owner that exits without cleaning up releases it too. (No other
	 * file holds queue pairs or buffers while it claims.) */
	pid_t pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		int o = gpunvme_open_bound();
		struct qp q;
		if (o < 0 || claim_owner(o, NULL) || qp_create_flags(o, 8, GPUNVME_QPAIR_RAW, &q))
			_exit(1);
		_exit(0);
	}
	int status;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	EXPECT_EQ(0, qp_create_flags(a, 8, 0, &qa));
	EXPECT_EQ(0, qp_destroy(&qa));
	EXPECT_EQ(0, claim_owner(c, NULL));
	close(c);

	/* What the owner wrote is there for the shared files after it. */
	ASSERT_EQ(0, qp_create_flags(a, 8, 0, &qa));
	ASSERT_EQ(0, hostbuf_map(a, 4096, &hb));
	EXPECT_EQ(0, qp_sync(&qa, rw_cmd(OPC_READ, nsid, L, per, hb.dma[0], 0)));
	EXPECT_EQ(-1, pattern_check(hb.p, 4096, 70, L, 4096 / per));
	EXPECT_EQ(0, qp_destroy(&qa));
	close(a);
}

/*
 * The owner's raw doorbell page is BAR0's page 0x1000: with a 4-byte
 * stride it holds the admin SQ tail (offset 0) and admin CQ head (offset
 * 4). The owner writes wild values there, several times; after it closes,
 * another file creates queue pairs, writes and verifies data, and
 * GET_INFO works: the admin queue survived.
 */
TEST_F_TIMEOUT(ctrl, admin_queue_survives_stray_owner_writes, 120)
{
	struct gpunvme_info info;
	struct qp q;
	struct hostbuf hb;
	int o = gpunvme_open_bound();
	ASSERT_LE(0, o);
	ASSERT_EQ(0, get_info(o, &info));
	if (!(info.modes & GPUNVME_MODE_OWNER))
		SKIP(return, "owner mode is not available in this boot (modes %#x)", info.modes);
	if (info.doorbell_stride != 4)
		SKIP(return, "doorbell stride %u: the admin doorbells are elsewhere", info.doorbell_stride);
	uint32_t nsid = info.ns[0].nsid, lbs = info.ns[0].lba_size, per = 4096 / lbs;
	const uint64_t L1 = PG(per, 310), L2 = PG(per, 320);
	ASSERT_EQ(0, claim_owner(o, NULL));
	ASSERT_EQ(0, qp_create_flags(o, 8, GPUNVME_QPAIR_RAW, &q));
	ASSERT_GT(512, q.c.qid);
	EXPECT_EQ(8 * q.c.qid, q.c.sq_db);	/* 0x1000 + 2 * qid * 4, within the page */
	EXPECT_EQ(8 * q.c.qid + 4, q.c.cq_db);
	ASSERT_EQ(0, hostbuf_map(o, 2 * 4096, &hb));
	pattern_fill(hb.p, 4096, 71, L1, lbs);
	ASSERT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, nsid, L1, per, hb.dma[0], 0)));

	volatile uint32_t *admin_sq_tail = (volatile uint32_t *)q.db, *admin_cq_head = admin_sq_tail + 1;
	uint32_t wild[] = { 0, 5, 31, 1000, 0xffffffff };
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 5; i++) {
			*admin_sq_tail = wild[i];
			usleep(2000);
			*admin_cq_head = wild[(i + round) % 5];
			usleep(2000);
		}
		/* Every tail in 0..63: one of them is "the current tail + 1". */
		for (uint32_t v = 0; v < 64; v++)
			*admin_sq_tail = v;
		for (uint32_t v = 0; v < 64; v++)
			*admin_cq_head = v;
		usleep(50 * 1000);
	}
	/*
	 * The owner's own pair tears down through the admin queue. The owner
	 * may have desynchronised it beyond what the kernel can follow (its
	 * raw access allows that): then the delete times out, the queue's
	 * memory is kept, and the controller is re-initialised once the owner
	 * has gone, which is what the rest of this test checks.
	 */
	int d = qp_destroy(&q);
	EXPECT_TRUE(d == 0 || d == -ETIMEDOUT) TH_LOG("destroy after the stray writes: %d", d);
	if (d)
		TH_LOG("the owner's delete timed out: the controller must be re-initialised at close");
	close(o);

	int n = gpunvme_open_bound();
	ASSERT_LE(0, n);
	ASSERT_EQ(0, get_info(n, &info));
	EXPECT_STREQ(gpunvme_bdf(), info.bdf);
	EXPECT_TRUE(info.modes & GPUNVME_MODE_SHARED);
	struct hostbuf nb;
	ASSERT_EQ(0, hostbuf_map(n, 32 * 4096, &nb));
	ASSERT_EQ(0, qp_create_flags(n, 16, 0, &q));
	/* 64 KiB written and read back through a PRP list, every byte checked. */
	uint32_t pages = pages_within_limit(&info, 16);
	pattern_fill(nb.p, pages * 4096, 72, L2, lbs);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, nsid, L2, pages * per, nb.dma[0],
					 qp_prp2(&q, nb.dma, pages, 0, NULL, 0))));
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, nsid, L2, pages * per, nb.dma[16],
					 qp_prp2(&q, nb.dma + 16, pages, 0, NULL, 0))));
	EXPECT_EQ(-1, pattern_check(nb.p + 16 * 4096, pages * 4096, 72, L2, lbs));
	/* And what the owner wrote before its stray writes is there. */
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, nsid, L1, per, nb.dma[0], 0)));
	EXPECT_EQ(-1, pattern_check(nb.p, 4096, 71, L1, lbs));
	/* More admin commands: pairs created and deleted. */
	for (int i = 0; i < 3; i++) {
		struct qp more;
		EXPECT_EQ(0, qp_create_flags(n, 4, 0, &more));
		EXPECT_EQ(0, qp_destroy(&more));
	}
	EXPECT_EQ(0, qp_destroy(&q));
	close(n);
	/* A new owner gets a working controller too. */
	o = gpunvme_open_bound();
	ASSERT_LE(0, o);
	EXPECT_EQ(0, claim_owner(o, NULL));
	EXPECT_EQ(0, qp_create_flags(o, 8, GPUNVME_QPAIR_RAW, &q));
	close(o);
}

/*
 * /dev/gpunvme<N>n1 reaches namespace 1 only: I/O there works, an SQE for
 * any other NSID (namespace 2 in the suite's two-namespace boot) is
 * rejected with Invalid Namespace or Format; it cannot claim the
 * controller nor create raw pairs.
 */
TEST_F(ctrl, namespace_node_limits)
{
	struct gpunvme_info ctrl, info;
	struct qp q;
	struct hostbuf hb;
	int c = gpunvme_open_bound();
	ASSERT_LE(0, c);
	ASSERT_EQ(0, get_info(c, &ctrl));
	close(c);
	int has2 = 0;
	uint32_t lbs2 = 0;
	for (uint32_t i = 0; i < ctrl.num_namespaces; i++)
		if (ctrl.ns[i].nsid == 2) {
			has2 = 1;
			lbs2 = ctrl.ns[i].lba_size;
		}
	ASSERT_EQ(1, ctrl.ns[0].nsid);
	uint32_t lbs = ctrl.ns[0].lba_size, per = 4096 / lbs;
	const uint64_t L = PG(per, 330);
	TH_LOG("namespace 2 is %s", has2 ? "active: the node must keep its SQEs out" : "not active here");

	int fd = gpunvme_open_ns(1);
	ASSERT_LE(0, fd) TH_LOG("namespace node of NSID 1: %s", strerror(-fd));
	ASSERT_EQ(0, get_info(fd, &info));
	EXPECT_EQ(1, info.node_nsid);
	EXPECT_EQ(-EPERM, claim_owner(fd, NULL));
	EXPECT_EQ(-EPERM, qp_create_flags(fd, 8, GPUNVME_QPAIR_RAW, &q));
	ASSERT_EQ(0, hostbuf_map(fd, 4 * 4096, &hb));
	ASSERT_EQ(0, qp_create_flags(fd, 8, 0, &q));
	pattern_fill(hb.p, 4096, 73, L, lbs);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 1, L, per, hb.dma[0], 0)));
	memset(hb.p + 4096, 0, 4096);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 1, L, per, hb.dma[1], 0)));
	EXPECT_EQ(-1, pattern_check(hb.p + 4096, 4096, 73, L, lbs));
	EXPECT_EQ(0, qp_sync(&q, (struct sqe){ .opcode = OPC_FLUSH, .nsid = 1 }));

	long long rej0 = qp_counter(q.c.qid, "sqes_rejected");
	memset(hb.p + 2 * 4096, 0, 2 * 4096);
	uint32_t others[] = { 2, 0, 0xffffffff, 3 };
	for (int i = 0; i < 4; i++) {
		char what[48];
		snprintf(what, sizeof(what), "Read of NSID %#x on the n1 node", others[i]);
		EXPECT_REJECTED(qp_sync(&q, rw_cmd(OPC_READ, others[i], 0, 1, hb.dma[2], 0)), NVME_SC_INVALID_NS, what);
		snprintf(what, sizeof(what), "Write of NSID %#x on the n1 node", others[i]);
		EXPECT_REJECTED(qp_sync(&q, rw_cmd(OPC_WRITE, others[i], 0, 1, hb.dma[3], 0)), NVME_SC_INVALID_NS, what);
	}
	EXPECT_EQ(8, qp_counter(q.c.qid, "sqes_rejected") - rej0);
	EXPECT_EQ(-1, first_not(hb.p + 2 * 4096, 2 * 4096, 0));
	EXPECT_EQ(0, qp_destroy(&q));
	close(fd);

	if (!has2)
		return;
	/* The n2 node: namespace 2 works there, namespace 1 does not. */
	fd = gpunvme_open_ns(2);
	ASSERT_LE(0, fd);
	ASSERT_EQ(0, get_info(fd, &info));
	EXPECT_EQ(2, info.node_nsid);
	ASSERT_EQ(0, hostbuf_map(fd, 4 * 4096, &hb));
	ASSERT_EQ(0, qp_create_flags(fd, 8, 0, &q));
	pattern_fill(hb.p, 4096, 74, 100, lbs2);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_WRITE, 2, 100, 4096 / lbs2, hb.dma[0], 0)));
	memset(hb.p + 4096, 0, 4096);
	EXPECT_EQ(0, qp_sync(&q, rw_cmd(OPC_READ, 2, 100, 4096 / lbs2, hb.dma[1], 0)));
	EXPECT_EQ(-1, pattern_check(hb.p + 4096, 4096, 74, 100, lbs2));
	EXPECT_REJECTED(qp_sync(&q, rw_cmd(OPC_READ, 1, L, per, hb.dma[2], 0)), NVME_SC_INVALID_NS,
			"Read of NSID 1 on the n2 node");
	EXPECT_EQ(0, qp_destroy(&q));
	close(fd);
}

TEST_HARNESS_MAIN
