// SPDX-License-Identifier: GPL-2.0-only
/*
 * The doorbell paths end to end, with a real DMA peer (gpunvme_standin:
 * QEMU's edu DMA engine, importing dma-bufs like a GPU driver would).
 *
 * Owner mode (fixture "db"): the file claims the controller
 * (GPUNVME_IOC_CLAIM_OWNER) and creates raw pairs, whose doorbell export is
 * the real BAR0 page; gpunvme exports a queue pair's doorbell page and CQ
 * as dma-bufs; the stand-in imports both, and then
 *  - the CPU writes a READ SQE into the mmapped SQ,
 *  - edu rings the SQ tail doorbell by DMA through its own vIOMMU mapping
 *    (the only doorbell write for that queue),
 *  - edu DMA-reads the CQE from the CQ dma-buf; cid/phase/status checked,
 *  - edu rings the CQ head doorbell; the data in the host buffer is checked.
 * Plus revocation (destroy / close while imported: ENODEV, no oops) and the
 * unsupported-topology case: on q35 the host bridge (8086:29c0) is not in
 * p2pdma's allowlist, so P2P to the BAR works only when the CPU is an AMD
 * Zen (family >= 0x17): with the runner's default -cpu the doorbell map must
 * fail with EINVAL and a log line; with QEMU_EXTRA="-cpu EPYC" it must work.
 *
 * Shared mode (fixture "shadow"): a file that does not own the controller
 * gets a validated pair, and its doorbell export is the shadow page, plain
 * memory: edu imports it on every CPU model (no peer-to-peer path needed,
 * which proves it is not the BAR), reads back what the CPU wrote there,
 * and rings the shadow SQ tail cell; the module's relay checks the SQE and
 * forwards it, and edu reads the completion from the mirror CQ.
 */
#include <sys/mman.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"
#include "standin_env.h"


/* cpu_supports_p2pdma() in drivers/pci/p2pdma.c, as seen from userspace. */
static int cpu_is_zen(char *desc, size_t len)
{
	char line[256], vendor[64] = "?";
	int family = -1;
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "vendor_id : %63s", vendor) == 1)
			continue;
		if (sscanf(line, "cpu family : %d", &family) == 1)
			break;
	}
	fclose(f);
	snprintf(desc, len, "%s family %#x", vendor, family);
	return !strcmp(vendor, "AuthenticAMD") && family >= 0x17;
}

FIXTURE(db) {
	int nv;		/* /dev/gpunvmeN */
	int sd;		/* /dev/gpunvme_standin */
	int zen;
	char cpu[96];
	struct gpunvme_info info;
	struct hostbuf buf;
	struct qp q;
	int db_fd, cq_fd;
};

FIXTURE_SETUP(db)
{
	self->db_fd = self->cq_fd = -1;
	self->sd = -1;
	self->zen = cpu_is_zen(self->cpu, sizeof(self->cpu));
	self->nv = gpunvme_open_bound();
	ASSERT_LE(0, self->nv) TH_LOG("gpunvme on %s", gpunvme_bdf());
	UAPI_INIT(self->info);
	ASSERT_EQ(0, ioctl(self->nv, GPUNVME_IOC_GET_INFO, &self->info));
	if (!(self->info.modes & GPUNVME_MODE_OWNER))
		SKIP(return, "owner mode is not available in this boot (IOMMU mode %u, modes %#x)",
		     self->info.iommu_mode, self->info.modes);
	/* The real doorbell page belongs to the controller's owner only. */
	ASSERT_EQ(0, claim_owner(self->nv, NULL));
	self->sd = standin_open();
	ASSERT_LE(0, self->sd) TH_LOG("gpunvme_standin on %s: %s", edu_bdf(), strerror(-self->sd));
	ASSERT_EQ(0, hostbuf_map(self->nv, 4 * 4096, &self->buf));
	ASSERT_EQ(0, qp_create_flags(self->nv, 8, GPUNVME_QPAIR_RAW, &self->q));
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_DOORBELL, &self->db_fd));
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_CQ, &self->cq_fd));
}

FIXTURE_TEARDOWN(db)
{
	if (self->db_fd >= 0)
		close(self->db_fd);
	if (self->cq_fd >= 0)
		close(self->cq_fd);
	if (self->sd >= 0)
		close(self->sd);
	close(self->nv);
	standin_restore();
}

/* The doorbell import succeeds exactly when p2pdma allows this topology. */
TEST_F(db, doorbell_import_matches_topology)
{
	struct standin_import d;
	char dev[40];
	snprintf(dev, sizeof(dev), "%s", edu_bdf());
	int before = klog_count("no peer-to-peer path", dev);
	int r = standin_import(self->sd, self->db_fd, &d);

	TH_LOG("CPU %s; doorbell import: %s", self->cpu, r ? strerror(-r) : "ok");
	if (self->zen) {
		ASSERT_EQ(0, r);
		TH_LOG("doorbell page at edu dma %#llx + %#llx", (unsigned long long)d.dma_addr,
		       (unsigned long long)d.len);
		EXPECT_EQ(4096, d.len);
		EXPECT_EQ(0, standin_release(self->sd, d.handle));
	} else {
		/* The exporter's map fails with the p2pdma error, verbatim. */
		EXPECT_EQ(-EINVAL, r);
		EXPECT_LT(before, klog_count("no peer-to-peer path", dev))
			TH_LOG("no log line naming %s", dev);
		klog_show("peer-to-peer", 3);
	}
	/* Queue memory needs no P2P path: the CQ imports everywhere. */
	struct standin_import c;
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	EXPECT_LE(self->q.c.cq_size, c.len);
}

/* One READ, doorbells rung by edu only; CQE read by edu. */
TEST_F(db, standin_rings_doorbell_and_reads_cqe)
{
	const uint32_t nsid = self->info.ns[0].nsid, lbs = self->info.ns[0].lba_size;
	const uint64_t lba = 64;
	const uint32_t nlb = 4096 / lbs, seed = 0x5eed1234;
	struct standin_import d, c;
	struct qp w;

	if (!self->zen)
		SKIP(return, "CPU %s: no P2P path to the doorbell BAR here (QEMU_EXTRA=\"-cpu max,family=23\" or \"-cpu EPYC\" gives one)",
		     self->cpu);
	/* The pattern goes to the disk through a second, CPU-rung queue pair. */
	for (uint32_t i = 0; i < 4096; i++)
		self->buf.p[i] = pattern_byte(seed, lba + i / lbs, i % lbs);
	ASSERT_EQ(0, qp_create_flags(self->nv, 4, GPUNVME_QPAIR_RAW, &w));
	ASSERT_EQ(0, qp_sync(&w, rw_cmd(OPC_WRITE, nsid, lba, nlb, self->buf.dma[0], 0)));
	ASSERT_EQ(0, qp_destroy(&w));
	memset(self->buf.p, 0, 2 * 4096);

	ASSERT_EQ(0, standin_import(self->sd, self->db_fd, &d));
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	TH_LOG("doorbell at edu dma %#llx, CQ at %#llx; sq_db %#x cq_db %#x",
	       (unsigned long long)d.dma_addr, (unsigned long long)c.dma_addr,
	       self->q.c.sq_db, self->q.c.cq_db);

	/* CPU builds the SQE; edu rings. */
	uint16_t cid = qp_push(&self->q, rw_cmd(OPC_READ, nsid, lba, nlb, self->buf.dma[1], 0));
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ASSERT_EQ(0, standin_write32(self->sd, d.handle, self->q.c.sq_db, self->q.tail));

	/* edu polls the CQ (each read is ~400 ms of edu time): 10 s deadline. */
	struct cqe e = { 0 };
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ASSERT_EQ(0, standin_read(self->sd, c.handle, 0, &e, sizeof(e)));
		if ((e.status & 1) == 1)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		ASSERT_GT(10, t.tv_sec - t0.tv_sec) TH_LOG("no CQE seen by edu within 10 s");
	}
	TH_LOG("CQE via edu: cid %u status %#x sq_head %u sq_id %u", e.cid, e.status, e.sq_head, e.sq_id);
	EXPECT_EQ(cid, e.cid);
	EXPECT_EQ(0, e.status >> 1);
	EXPECT_EQ(self->q.c.qid, e.sq_id);
	EXPECT_EQ(1, e.sq_head);
	/* The same CQE as the CPU sees it. */
	EXPECT_EQ(0, memcmp(&e, (void *)&self->q.cq[0], sizeof(e)));

	/* edu also rings the CQ head doorbell. */
	ASSERT_EQ(0, standin_write32(self->sd, d.handle, self->q.c.cq_db, 1));
	self->q.head = 1;

	long bad = -1;
	for (uint32_t i = 0; i < 4096 && bad < 0; i++)
		if (self->buf.p[4096 + i] != pattern_byte(seed, lba + i / lbs, i % lbs))
			bad = i;
	EXPECT_EQ(-1, bad) TH_LOG("data differs at byte %ld", bad);

	/* The queue keeps working after edu's rings (CPU path now). */
	EXPECT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, lba, nlb, self->buf.dma[2], 0)));
	EXPECT_EQ(0, memcmp(self->buf.p + 4096, self->buf.p + 2 * 4096, 4096));
}

/*
 * A peer DMA to the controller's doorbell at an address gpunvme never
 * exported (the BAR's own bus address, not an import) faults in the vIOMMU
 * and changes nothing on the controller: the SQE waiting in the SQ is not
 * fetched until the real doorbell is rung, and then completes exactly once.
 */
TEST_F(db, unexported_doorbell_address_faults)
{
	char path[128], line[128];
	unsigned long long bar0 = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource", gpunvme_bdf());
	FILE *f = fopen(path, "r");
	ASSERT_NE(NULL, f);
	ASSERT_NE(NULL, fgets(line, sizeof(line), f));
	fclose(f);
	bar0 = strtoull(line, NULL, 16);
	ASSERT_NE(0, bar0);

	const uint32_t nsid = self->info.ns[0].nsid, lbs = self->info.ns[0].lba_size;
	uint16_t cid = qp_push(&self->q, rw_cmd(OPC_READ, nsid, 0, 4096 / lbs, self->buf.dma[0], 0));
	__atomic_thread_fence(__ATOMIC_SEQ_CST);

	char dev[40];
	snprintf(dev, sizeof(dev), "%s", edu_bdf() + 5); /* DMAR prints "0000:00:06.0" too; match the tail */
	int before = klog_count("DMAR", dev);
	struct standin_raw_write32 w = { .dma_addr = bar0 + 0x1000 + self->q.c.sq_db, .value = self->q.tail };
	EXPECT_EQ(0, ioctl(self->sd, STANDIN_IOC_RAW_WRITE32, &w));
	EXPECT_LT(before, klog_wait_more("DMAR", dev, before, 3000)) TH_LOG("no vIOMMU fault logged");
	klog_show("DMAR", 2);

	usleep(300 * 1000);
	EXPECT_EQ(0, self->q.cq[0].status & 1) TH_LOG("the controller saw a doorbell nobody was given");

	/* The real doorbell: the command runs now, once. */
	struct cqe c;
	qp_ring(&self->q);
	ASSERT_EQ(0, qp_reap(&self->q, &c, 5000));
	EXPECT_EQ(cid, c.cid);
	EXPECT_EQ(0, c.status >> 1);
	usleep(100 * 1000);
	EXPECT_EQ(0, self->q.cq[1].status & 1) TH_LOG("a second completion appeared");
}

/* Destroying the queue pair revokes the imports: ENODEV, no DMA, no oops. */
TEST_F(db, revoke_on_destroy)
{
	struct standin_import d = { 0 }, c;
	int have_db = standin_import(self->sd, self->db_fd, &d) == 0;
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	uint8_t cqe[16];
	ASSERT_EQ(0, standin_read(self->sd, c.handle, 0, cqe, 16));

	int before = klog_count("revoked by its exporter", NULL);
	ASSERT_EQ(0, qp_destroy(&self->q));
	EXPECT_LE(before + 1 + have_db, klog_count("revoked by its exporter", NULL));
	if (have_db)
		EXPECT_EQ(-ENODEV, standin_write32(self->sd, d.handle, self->q.c.sq_db, 1));
	EXPECT_EQ(-ENODEV, standin_read(self->sd, c.handle, 0, cqe, 16));
	EXPECT_EQ(-ENODEV, standin_write32(self->sd, c.handle, 0, 1));
	/* A new import of a revoked export is refused by the exporter. */
	struct standin_import again;
	EXPECT_NE(0, standin_import(self->sd, self->cq_fd, &again));
	if (have_db)
		EXPECT_EQ(0, standin_release(self->sd, d.handle));
	EXPECT_EQ(0, standin_release(self->sd, c.handle));
}

/* Closing the gpunvme file revokes too; the dma-bufs outlive it safely. */
TEST_F(db, revoke_on_close)
{
	struct standin_import c;
	uint8_t cqe[16];
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	ASSERT_EQ(0, standin_read(self->sd, c.handle, 0, cqe, 16));
	/* The queue mappings hold the file open: drop them, then close. */
	qp_unmap(&self->q);
	int before = klog_count("revoked by its exporter", NULL);
	close(self->nv);
	EXPECT_LT(before, klog_count("revoked by its exporter", NULL));
	EXPECT_EQ(-ENODEV, standin_read(self->sd, c.handle, 0, cqe, 16));
	EXPECT_EQ(0, standin_release(self->sd, c.handle));
	/* The ownership went with the file: another file may claim now. */
	self->nv = gpunvme_open_bound();
	ASSERT_LE(0, self->nv);
	EXPECT_EQ(0, claim_owner(self->nv, NULL));
}

/*
 * gpunvme's importer refuses an exporter that has no peer-to-peer path to
 * the controller (it clears peer2peer: GPU memory would silently become
 * system memory) with EOPNOTSUPP and a log line.
 */
TEST_F(db, import_refuses_migrating_exporter)
{
	int fd = ioctl(self->sd, STANDIN_IOC_EXPORT_NO_P2P);
	ASSERT_LE(0, fd);
	uint64_t addrs[1];
	struct gpunvme_map_dmabuf m;
	UAPI_INIT(m);
	m.fd = fd;
	m.max_pages = 1;
	m.dma_addrs = (uintptr_t)addrs;
	int before = klog_count("would move the buffer to system memory", NULL);
	EXPECT_EQ(-1, ioctl(self->nv, GPUNVME_IOC_MAP_DMABUF, &m));
	EXPECT_EQ(EOPNOTSUPP, errno);
	EXPECT_LT(before, klog_count("would move the buffer to system memory", NULL));
	close(fd);
}

/* Unbinding the controller while the peer holds imports revokes them too. */
TEST_F(db, revoke_on_unbind)
{
	struct standin_import c, d = { 0 };
	uint8_t cqe[16];
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	int have_db = self->zen && standin_import(self->sd, self->db_fd, &d) == 0;
	ASSERT_EQ(0, standin_read(self->sd, c.handle, 0, cqe, 16));
	int before = klog_count("revoked by its exporter", NULL);
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	EXPECT_LT(before, klog_count("revoked by its exporter", NULL));
	EXPECT_EQ(-ENODEV, standin_read(self->sd, c.handle, 0, cqe, 16));
	if (have_db)
		EXPECT_EQ(-ENODEV, standin_write32(self->sd, d.handle, self->q.c.sq_db, 1));
	/* The dma-buf fds stay valid but dead: a new import is refused. */
	struct standin_import again;
	EXPECT_NE(0, standin_import(self->sd, self->cq_fd, &again));
	EXPECT_EQ(0, standin_release(self->sd, c.handle));
	ASSERT_EQ(0, bind_gpunvme(gpunvme_bdf()));
}

/* ------------------------------------------------------------------ */

/* A shared (validated) pair of a file that does not own the controller. */
FIXTURE(shadow) {
	int nv, sd;
	char cpu[96];
	struct gpunvme_info info;
	struct hostbuf buf;
	struct qp q;
	int db_fd, cq_fd;
};

FIXTURE_SETUP(shadow)
{
	self->db_fd = self->cq_fd = -1;
	cpu_is_zen(self->cpu, sizeof(self->cpu));
	self->nv = gpunvme_open_bound();
	ASSERT_LE(0, self->nv) TH_LOG("gpunvme on %s", gpunvme_bdf());
	self->sd = standin_open();
	ASSERT_LE(0, self->sd) TH_LOG("gpunvme_standin on %s: %s", edu_bdf(), strerror(-self->sd));
	UAPI_INIT(self->info);
	ASSERT_EQ(0, ioctl(self->nv, GPUNVME_IOC_GET_INFO, &self->info));
	ASSERT_EQ(0, hostbuf_map(self->nv, 4 * 4096, &self->buf));
	ASSERT_EQ(0, qp_create_flags(self->nv, 8, 0, &self->q));
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_DOORBELL, &self->db_fd));
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_CQ, &self->cq_fd));
}

FIXTURE_TEARDOWN(shadow)
{
	if (self->db_fd >= 0)
		close(self->db_fd);
	if (self->cq_fd >= 0)
		close(self->cq_fd);
	close(self->sd);
	close(self->nv);
	standin_restore();
}

/*
 * The shared pair's doorbell export is the page of memory the file maps
 * at db_offset: edu imports it whatever the CPU model (the BAR page needs
 * a peer-to-peer path the default CPU model lacks), and what the CPU wrote
 * into it is what edu reads (doorbell registers read as zero).
 */
TEST_F(shadow, doorbell_export_is_memory)
{
	struct standin_import d;
	uint32_t got[16];
	int r = standin_import(self->sd, self->db_fd, &d);
	TH_LOG("CPU %s; shadow doorbell import: %s", self->cpu, r ? strerror(-r) : "ok");
	ASSERT_EQ(0, r);
	EXPECT_LE(4096, d.len);
	/* Words 1..15 lie between the SQ tail cell (0) and the CQ head cell (16). */
	volatile uint32_t *page = (volatile uint32_t *)self->q.db;
	for (int i = 1; i < 16; i++)
		page[i] = 0x5a000000u | i * 0x010101u;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ASSERT_EQ(0, standin_read(self->sd, d.handle, 0, got, sizeof(got)));
	for (int i = 1; i < 16; i++) {
		EXPECT_EQ(0x5a000000u | i * 0x010101u, got[i]) TH_LOG("word %d", i);
	}
	/* And the other way: edu writes a word, the CPU sees it. */
	ASSERT_EQ(0, standin_write32(self->sd, d.handle, 0x800, 0xfeedf00d));
	EXPECT_EQ(0xfeedf00d, page[0x200]);
	EXPECT_EQ(0, standin_release(self->sd, d.handle));
}

/*
 * edu drives a shared pair like a GPU would: the CPU writes a READ into
 * the shadow SQ, edu rings the shadow SQ tail cell by DMA, the relay
 * checks the SQE and forwards it, edu reads the completion from the
 * mirror CQ and rings the CQ head cell; the data is checked.
 */
TEST_F(shadow, standin_rings_shadow_cell)
{
	const uint32_t nsid = self->info.ns[0].nsid, lbs = self->info.ns[0].lba_size;
	const uint64_t lba = 96;
	const uint32_t nlb = 4096 / lbs, seed = 0x5eed4321;
	struct standin_import d, c;
	for (uint32_t i = 0; i < 4096; i++)
		self->buf.p[i] = pattern_byte(seed, lba + i / lbs, i % lbs);
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_WRITE, nsid, lba, nlb, self->buf.dma[0], 0)));
	memset(self->buf.p + 4096, 0, 4096);
	long long acc = qp_counter(self->q.c.qid, "sqes_accepted");

	ASSERT_EQ(0, standin_import(self->sd, self->db_fd, &d));
	ASSERT_EQ(0, standin_import(self->sd, self->cq_fd, &c));
	EXPECT_EQ(0, self->q.c.sq_db);
	EXPECT_EQ(64, self->q.c.cq_db);
	uint32_t slot = self->q.head;
	uint16_t cid = qp_push(&self->q, rw_cmd(OPC_READ, nsid, lba, nlb, self->buf.dma[1], 0));
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ASSERT_EQ(0, standin_write32(self->sd, d.handle, self->q.c.sq_db, self->q.tail));

	struct cqe e = { 0 };
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		ASSERT_EQ(0, standin_read(self->sd, c.handle, slot * 16, &e, sizeof(e)));
		if ((e.status & 1) == self->q.phase)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t);
		ASSERT_GT(10, t.tv_sec - t0.tv_sec) TH_LOG("no CQE in the mirror seen by edu within 10 s");
	}
	TH_LOG("mirrored CQE via edu: cid %u status %#x sq_head %u sq_id %u", e.cid, e.status, e.sq_head, e.sq_id);
	EXPECT_EQ(cid, e.cid);
	EXPECT_EQ(0, e.status >> 1);
	EXPECT_EQ(self->q.c.qid, e.sq_id);
	EXPECT_EQ(self->q.tail, e.sq_head);
	ASSERT_EQ(0, standin_write32(self->sd, d.handle, self->q.c.cq_db, slot + 1));
	self->q.head = slot + 1;
	EXPECT_EQ(acc + 1, qp_counter(self->q.c.qid, "sqes_accepted"));

	long bad = -1;
	for (uint32_t i = 0; i < 4096 && bad < 0; i++)
		if (self->buf.p[4096 + i] != pattern_byte(seed, lba + i / lbs, i % lbs))
			bad = i;
	EXPECT_EQ(-1, bad) TH_LOG("data differs at byte %ld", bad);
	/* The pair keeps working from the CPU. */
	EXPECT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, nsid, lba, nlb, self->buf.dma[2], 0)));
	EXPECT_EQ(0, memcmp(self->buf.p + 4096, self->buf.p + 2 * 4096, 4096));
}

/* The SQ and PRP-pool exports of a shared pair are memory too. */
TEST_F(shadow, sq_and_prp_pool_exports_import_anywhere)
{
	struct standin_import sq, pool;
	int sq_fd = -1, pool_fd = -1;
	uint64_t got[2];
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_SQ, &sq_fd));
	ASSERT_EQ(0, export_fd(self->nv, self->q.c.qid, GPUNVME_EXPORT_PRP_POOL, &pool_fd));
	ASSERT_EQ(0, standin_import(self->sd, sq_fd, &sq));
	ASSERT_EQ(0, standin_import(self->sd, pool_fd, &pool));
	self->q.prp[0] = 0x1122334455667788ull;
	self->q.prp[1] = self->buf.dma[3];
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	ASSERT_EQ(0, standin_read(self->sd, pool.handle, 0, got, sizeof(got)));
	EXPECT_EQ(0x1122334455667788ull, got[0]);
	EXPECT_EQ(self->buf.dma[3], got[1]);
	EXPECT_EQ(0, standin_release(self->sd, sq.handle));
	EXPECT_EQ(0, standin_release(self->sd, pool.handle));
	close(sq_fd);
	close(pool_fd);
}

TEST_HARNESS_MAIN
