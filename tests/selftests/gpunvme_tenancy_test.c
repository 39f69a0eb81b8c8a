// SPDX-License-Identifier: GPL-2.0-only
/*
 * Between tenants: what an owner leaves behind must be gone before any
 * other file is admitted. Ownership is controller-wide authority (raw SQs,
 * the doorbell page), so when the owner's file is released the module
 * resets the controller (disable, enable, Identify again) before a shared
 * file may create a pair, and refuses them meanwhile.
 *
 * The leftover here is a queue the owner created and whose delete the
 * controller never confirmed (its Delete I/O SQ got no doorbell: the
 * debugfs knob drop_admin_doorbells), the kind of state an owner's GPU
 * code could also plant by writing admin SQEs itself. Needs owner mode
 * (a translating IOMMU and CAP_SYS_RAWIO): skipped where it is refused.
 */
#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

/* Write `pages` pages of `seed` at `lba` from `b`, read them back into the
 * next `pages` pages and check every byte: 0, an NVMe status, or -errno. */
static int write_verify(struct qp *q, struct hostbuf *b, uint32_t nsid, uint32_t lbs,
			uint64_t lba, uint32_t pages, uint32_t seed)
{
	uint32_t nlb = pages * 4096 / lbs;
	pattern_fill(b->p, pages * 4096, seed, lba, lbs);
	memset(b->p + pages * 4096, 0, pages * 4096);
	int r = qp_sync(q, rw_cmd(OPC_WRITE, nsid, lba, nlb, b->dma[0],
				  qp_prp2(q, b->dma, pages, 0, NULL, 0)));
	if (r)
		return r;
	r = qp_sync(q, rw_cmd(OPC_READ, nsid, lba, nlb, b->dma[pages],
			      qp_prp2(q, b->dma + pages, pages, 0, NULL, 0)));
	if (r)
		return r;
	return pattern_check(b->p + pages * 4096, pages * 4096, seed, lba, lbs) == -1 ? 0 : -EIO;
}

/* A new file of the controller that owns it: the fd, or -errno (-EPERM
 * where owner mode is refused). */
static int open_owner(void)
{
	int fd = gpunvme_open_bound();
	if (fd < 0)
		return fd;
	int r = claim_owner(fd, NULL);
	if (r) {
		close(fd);
		return r;
	}
	return fd;
}

TEST(owner_leftovers_are_reset_before_a_shared_file)
{
	struct gpunvme_info info;
	struct hostbuf hb, sb;
	struct qp kept, left, s1, s2;
	uint32_t seed = 90 + (getpid() & 7);

	int own = open_owner();
	if (own == -EPERM)
		SKIP(return, "owner mode is refused here (IOMMU, lockdown or capability)");
	ASSERT_LE(0, own);
	ASSERT_EQ(0, get_info(own, &info));
	uint32_t nsid = info.ns[0].nsid, lbs = info.ns[0].lba_size;
	ASSERT_EQ(0, hostbuf_map(own, 8 * 4096, &hb));
	ASSERT_EQ(0, qp_create_flags(own, 8, GPUNVME_QPAIR_RAW, &kept));
	ASSERT_EQ(0, qp_create_flags(own, 8, GPUNVME_QPAIR_RAW, &left));
	uint16_t orphan = left.c.qid;
	ASSERT_EQ(0, write_verify(&kept, &hb, nsid, lbs, 7000, 2, seed));
	/* The leftover: a queue whose delete the controller never confirmed. */
	qp_unmap(&left);
	ASSERT_EQ(0, drop_admin_doorbells(1));
	EXPECT_EQ(-ETIMEDOUT, qpair_destroy(own, orphan));
	drop_admin_doorbells(0);
	qp_unmap(&kept);
	int resets = klog_count("its owner left: resetting the controller", NULL);
	int reinit = klog_count("controller re-initialised", NULL);
	close(own);
	/* The reset ran in the owner's close: before any file is admitted. */
	EXPECT_EQ(resets + 1, klog_count("its owner left: resetting the controller", NULL))
		TH_LOG("the owner's release did not reset the controller");
	EXPECT_EQ(reinit + 1, klog_count("controller re-initialised", NULL));

	int sh = gpunvme_open_bound();
	ASSERT_LE(0, sh);
	ASSERT_EQ(0, get_info(sh, &info));
	EXPECT_TRUE(info.modes & GPUNVME_MODE_SHARED);
	ASSERT_EQ(0, hostbuf_map(sh, 8 * 4096, &sb));
	/* The disable ended the leftover queue, so its qid is free again and
	 * the controller creates it anew (it would refuse an existing one). */
	ASSERT_EQ(0, qp_create(sh, 8, &s1));
	ASSERT_EQ(0, qp_create(sh, 8, &s2));
	EXPECT_TRUE(s1.c.qid == orphan || s2.c.qid == orphan)
		TH_LOG("qid %u, the owner's unconfirmed queue, was not handed out again (got %u and %u)",
		       orphan, s1.c.qid, s2.c.qid);
	struct qp *on_orphan = s1.c.qid == orphan ? &s1 : &s2;
	/* The owner's data is there, and the reused qid does I/O. */
	memset(sb.p, 0, 2 * 4096);
	ASSERT_EQ(0, qp_sync(on_orphan, rw_cmd(OPC_READ, nsid, 7000, 2 * 4096 / lbs, sb.dma[0],
					       qp_prp2(on_orphan, sb.dma, 2, 0, NULL, 0))));
	EXPECT_EQ(-1, pattern_check(sb.p, 2 * 4096, seed, 7000, lbs));
	EXPECT_EQ(0, write_verify(on_orphan, &sb, nsid, lbs, 7100, 2, seed + 1));
	EXPECT_EQ(0, qp_destroy(&s1));
	EXPECT_EQ(0, qp_destroy(&s2));
	EXPECT_EQ(0, hostbuf_unmap(sh, &sb));
	close(sh);
}

/* A clean owner (every delete confirmed) is reset all the same: what it
 * may have set through the admin queue is not visible to the module. */
TEST(a_clean_owner_is_reset_too)
{
	struct qp q;
	int own = open_owner();
	if (own == -EPERM)
		SKIP(return, "owner mode is refused here (IOMMU, lockdown or capability)");
	ASSERT_LE(0, own);
	ASSERT_EQ(0, qp_create_flags(own, 8, GPUNVME_QPAIR_RAW, &q));
	EXPECT_EQ(0, qp_destroy(&q));
	int resets = klog_count("its owner left: resetting the controller", NULL);
	close(own);
	EXPECT_EQ(resets + 1, klog_count("its owner left: resetting the controller", NULL));
	int sh = gpunvme_open_bound();
	ASSERT_LE(0, sh);
	ASSERT_EQ(0, qp_create(sh, 8, &q));
	EXPECT_EQ(0, qp_destroy(&q));
	close(sh);
}

TEST_HARNESS_MAIN
