// SPDX-License-Identifier: GPL-2.0-only
/*
 * A namespace that changes under an open shared file (tests/vm/run.sh
 * --subsys: two controllers of one NVM subsystem share namespace 1;
 * gpunvme has controller A, nvme.ko controller B). Through B's admin queue
 * the test detaches the namespace from A, formats it to 4 KiB blocks and
 * attaches it again. A announces each change with an Asynchronous Event
 * (Namespace Attribute Changed); the module must identify the namespace
 * again, refuse its commands while it is detached, and then validate and
 * report it with the new block size, on the pair that was open throughout:
 * a read that was one page at 512 B (PRP1 at offset 0xE00, no PRP2) must
 * be refused at 4 KiB, and 4 KiB blocks written and read back byte for
 * byte. Formatted to a format with metadata, the namespace is refused.
 */
#include <dirent.h>
#include <linux/nvme_ioctl.h>

#include "kselftest_harness.h"
#include "vmenv.h"
#include "nvme_io.h"

#define NVME_ADMIN_IDENTIFY	0x06
#define NVME_ADMIN_NS_ATTACH	0x15
#define NVME_ADMIN_FORMAT	0x80
#define CNS_CTRL		0x01
#define CNS_SUBSYS_CTRLS	0x13
/* QEMU's LBA formats: 0 is 512 B, 1 is 512 B + 8 B metadata, 4 is 4 KiB. */
#define LBAF_512		0
#define LBAF_512_MD8		1
#define LBAF_4K			4
#define NVME_SC_NS_NOT_READY	0x82

static const char *bdf_a(void) { return env_or("SUBSYS_GPUNVME_BDF", ""); }
static const char *bdf_b(void) { return env_or("SUBSYS_KERNEL_BDF", ""); }

/* An admin command through nvme.ko: 0, an NVMe status (> 0), or -errno. */
static int admin(int fd, uint8_t opc, uint32_t nsid, uint32_t cdw10, void *data, uint32_t len)
{
	struct nvme_admin_cmd c = {
		.opcode = opc,
		.nsid = nsid,
		.addr = (uintptr_t)data,
		.data_len = len,
		.cdw10 = cdw10,
		.timeout_ms = 20000,
	};
	int r = ioctl(fd, NVME_IOCTL_ADMIN_CMD, &c);
	return r < 0 ? -errno : r;
}

/* /dev/nvmeN of controller `bdf`, bound to nvme.ko: an fd or -errno. */
static int open_kernel_ctrl(const char *bdf)
{
	char path[256], drv[64];
	if (system("modprobe nvme"))
		return -ENOENT;
	pci_driver_of(bdf, drv, sizeof(drv));
	if (strcmp(drv, "nvme"))
		sysfs_write("/sys/bus/pci/drivers/nvme/bind", bdf);
	for (int i = 0; i < 300; i++) {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/nvme", bdf);
		DIR *d = opendir(path);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (strncmp(e->d_name, "nvme", 4))
				continue;
			snprintf(path, sizeof(path), "/dev/%s", e->d_name);
			int fd = open(path, O_RDWR | O_CLOEXEC);
			if (fd >= 0) {
				closedir(d);
				return fd;
			}
		}
		if (d)
			closedir(d);
		usleep(100 * 1000);
	}
	return -ENODEV;
}

/* Controller A's ID, from B: the subsystem's controllers other than B. */
static int cntlid_of_a(int b, uint16_t *out)
{
	static uint8_t id[4096] __attribute__((aligned(4096)));
	int r = admin(b, NVME_ADMIN_IDENTIFY, 0, CNS_CTRL, id, sizeof(id));
	if (r)
		return r;
	uint16_t self = id[78] | id[79] << 8;
	r = admin(b, NVME_ADMIN_IDENTIFY, 0, CNS_SUBSYS_CTRLS, id, sizeof(id));
	if (r)
		return r;
	uint16_t n = id[0] | id[1] << 8;
	for (uint16_t i = 0; i < n && i < 2047; i++) {
		uint16_t c = id[2 + 2 * i] | id[3 + 2 * i] << 8;
		if (c != self) {
			*out = c;
			return 0;
		}
	}
	return -ENOENT;
}

/* Namespace Attachment of `nsid` to (sel 0) or from (sel 1) `cntlid`. */
static int attach(int b, uint32_t nsid, uint16_t cntlid, int sel)
{
	static uint16_t list[2048] __attribute__((aligned(4096)));
	memset(list, 0, sizeof(list));
	list[0] = 1;
	list[1] = cntlid;
	return admin(b, NVME_ADMIN_NS_ATTACH, nsid, sel, list, sizeof(list));
}

/* Namespace 1 as GET_INFO on `fd` reports it. */
static int ns1(int fd, uint32_t *lba_size, uint64_t *capacity)
{
	struct gpunvme_info info;
	if (get_info(fd, &info) || info.num_namespaces < 1 || info.ns[0].nsid != 1)
		return -EIO;
	*lba_size = info.ns[0].lba_size;
	*capacity = info.ns[0].capacity_lbas;
	return 0;
}

/* Wait (10 s at most) until namespace 1 has blocks of `want` bytes (0:
 * refused); 0 when it does. */
static int wait_lba_size(int fd, uint32_t want)
{
	uint32_t lbs = ~0u;
	uint64_t cap;
	for (int i = 0; i < 200; i++) {
		if (!ns1(fd, &lbs, &cap) && lbs == want)
			return 0;
		usleep(50 * 1000);
	}
	fprintf(stderr, "# namespace 1: lba_size %u, waited for %u\n", lbs, want);
	return -ETIMEDOUT;
}

/* Write `bytes` of pattern `seed` at `lba` from b's first pages, read them
 * into the pages after and check every byte: 0, an NVMe status or -errno. */
static int write_verify(struct qp *q, struct hostbuf *b, uint32_t lbs, uint64_t lba,
			uint32_t bytes, uint32_t seed)
{
	uint32_t pages = bytes / 4096, nlb = bytes / lbs;
	pattern_fill(b->p, bytes, seed, lba, lbs);
	memset(b->p + bytes, 0, bytes);
	int r = qp_sync(q, rw_cmd(OPC_WRITE, 1, lba, nlb, b->dma[0],
				  qp_prp2(q, b->dma, pages, 0, NULL, 0)));
	if (r)
		return r;
	r = qp_sync(q, rw_cmd(OPC_READ, 1, lba, nlb, b->dma[pages],
			      qp_prp2(q, b->dma + pages, pages, 2048, NULL, 0)));
	if (r)
		return r;
	long at = pattern_check(b->p + bytes, bytes, seed, lba, lbs);
	if (at >= 0)
		fprintf(stderr, "# byte %ld differs\n", at);
	return at == -1 ? 0 : -EIO;
}

FIXTURE(subsys)
{
	int a, b;
	uint16_t cntlid_a;
	struct qp q;
	struct hostbuf buf;
};

FIXTURE_SETUP(subsys)
{
	self->a = self->b = -1;
	if (!bdf_a()[0])
		SKIP(return, "no shared-namespace subsystem (tests/vm/run.sh --subsys)");
	ASSERT_EQ(0, load_module());
	ASSERT_EQ(0, bind_gpunvme(bdf_a()));
	self->a = gpunvme_open_ctrl_node(bdf_a(), NULL);
	ASSERT_LE(0, self->a);
	self->b = open_kernel_ctrl(bdf_b());
	ASSERT_LE(0, self->b);
	ASSERT_EQ(0, cntlid_of_a(self->b, &self->cntlid_a));
	ASSERT_EQ(0, qp_create(self->a, 64, &self->q));
	ASSERT_EQ(0, hostbuf_map(self->a, 16 * 4096, &self->buf));
	TH_LOG("controller A (gpunvme, cntlid %u), B (nvme.ko)", self->cntlid_a);
}

FIXTURE_TEARDOWN(subsys)
{
	if (self->b >= 0) {
		/* The next case starts from 512 B blocks, attached to A. */
		attach(self->b, 1, self->cntlid_a, 0);
		admin(self->b, NVME_ADMIN_FORMAT, 1, LBAF_512, NULL, 0);
		close(self->b);
	}
	if (self->a >= 0)
		close(self->a);
}

TEST_F(subsys, a_reformatted_namespace_is_refused_while_detached_then_validated_with_its_new_size)
{
	uint32_t lbs;
	uint64_t cap, cap512;
	uint8_t *p = self->buf.p;

	ASSERT_EQ(0, ns1(self->a, &lbs, &cap512));
	ASSERT_EQ(512, lbs);
	ASSERT_EQ(0, write_verify(&self->q, &self->buf, 512, 0, 8192, 41));
	/* One 512 B block at offset 0xE00 of a page: one page, no PRP2. */
	ASSERT_EQ(0, qp_sync(&self->q, rw_cmd(OPC_READ, 1, 3, 1, self->buf.dma[0] + 0xe00, 0)));

	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 1));
	ASSERT_EQ(0, wait_lba_size(self->a, 0));
	memset(p, 0xa5, 4096);
	int st = qp_sync(&self->q, rw_cmd(OPC_READ, 1, 0, 1, self->buf.dma[0], 0));
	TH_LOG("read while detached: status %#x", st);
	ASSERT_LT(0, st);
	EXPECT_TRUE(NVME_SC(st) == NVME_SC_INVALID_NS || NVME_SC(st) == NVME_SC_NS_NOT_READY);
	for (int i = 0; i < 4096; i++) {
		if (p[i] != 0xa5) {
			ASSERT_EQ(0xa5, p[i]) TH_LOG("byte %d of the refused read's page was written", i);
		}
	}

	ASSERT_EQ(0, admin(self->b, NVME_ADMIN_FORMAT, 1, LBAF_4K, NULL, 0));
	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 0));
	ASSERT_EQ(0, wait_lba_size(self->a, 4096));
	ASSERT_EQ(0, ns1(self->a, &lbs, &cap));
	ASSERT_EQ(cap512 / 8, cap);

	/* The same one-block read is now 4 KiB from offset 0xE00: two pages,
	 * and PRP2 0 is refused before the controller sees it. */
	st = qp_sync(&self->q, rw_cmd(OPC_READ, 1, 3, 1, self->buf.dma[0] + 0xe00, 0));
	ASSERT_LT(0, st);
	EXPECT_EQ(NVME_SC_INVALID_FIELD, NVME_SC(st));
	/* Out of range at the new capacity (it was in range at 512 B). */
	st = qp_sync(&self->q, rw_cmd(OPC_READ, 1, cap, 1, self->buf.dma[0], 0));
	EXPECT_EQ(NVME_SC_LBA_RANGE, NVME_SC(st));
	/* 4 KiB blocks: one, two (PRP2), six (a PRP list), every byte checked. */
	ASSERT_EQ(0, write_verify(&self->q, &self->buf, 4096, 0, 4096, 42));
	ASSERT_EQ(0, write_verify(&self->q, &self->buf, 4096, 9, 8192, 43));
	ASSERT_EQ(0, write_verify(&self->q, &self->buf, 4096, cap - 6, 6 * 4096, 44));

	/* A new pair sees the new format too. */
	struct qp q2;
	ASSERT_EQ(0, qp_create(self->a, 64, &q2));
	ASSERT_EQ(0, write_verify(&q2, &self->buf, 4096, 100, 4096, 45));
	ASSERT_EQ(0, qp_destroy(&q2));
}

TEST_F(subsys, a_namespace_formatted_with_metadata_is_refused)
{
	char node[64];
	int index = -1;
	close(gpunvme_open_ctrl_node(bdf_a(), &index));
	snprintf(node, sizeof(node), "/dev/gpunvme%dn1", index);

	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 1));
	ASSERT_EQ(0, wait_lba_size(self->a, 0));
	ASSERT_EQ(0, admin(self->b, NVME_ADMIN_FORMAT, 1, LBAF_512_MD8, NULL, 0));
	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 0));
	/* Attached again, and still refused: 8 bytes of metadata per block. */
	usleep(500 * 1000);
	ASSERT_EQ(0, wait_lba_size(self->a, 0));
	int st = qp_sync(&self->q, rw_cmd(OPC_READ, 1, 0, 1, self->buf.dma[0], 0));
	EXPECT_EQ(NVME_SC_INVALID_NS, NVME_SC(st));
	int fd = open(node, O_RDWR | O_CLOEXEC);
	EXPECT_EQ(-1, fd);
	EXPECT_EQ(ENXIO, errno);
	if (fd >= 0)
		close(fd);

	/* Back to 512 B: usable again, on the pair that stayed open. */
	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 1));
	ASSERT_EQ(0, admin(self->b, NVME_ADMIN_FORMAT, 1, LBAF_512, NULL, 0));
	ASSERT_EQ(0, attach(self->b, 1, self->cntlid_a, 0));
	ASSERT_EQ(0, wait_lba_size(self->a, 512));
	ASSERT_EQ(0, write_verify(&self->q, &self->buf, 512, 7, 4096, 46));
	fd = open(node, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd);
	close(fd);
}

TEST_HARNESS_MAIN
