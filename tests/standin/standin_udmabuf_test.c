// SPDX-License-Identifier: GPL-2.0-only
/*
 * The GPU stand-in (gpunvme_standin: QEMU's edu DMA engine as a dma-buf
 * importer) against udmabuf, with no gpunvme involved: every byte checked
 * here was moved by edu's DMA through its own vIOMMU mapping of the
 * dma-buf, and a DMA to an address no import produced must be blocked by
 * the vIOMMU (DMAR fault, memory unchanged).
 */
#include <linux/udmabuf.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "kselftest_harness.h"
#include "standin_env.h"

#define BUF_PAGES 4
#define BUF_SIZE (BUF_PAGES * 4096)

FIXTURE(ud) {
	int fd;      /* /dev/gpunvme_standin */
	int memfd;
	int dmabuf;
	uint8_t *map;
	struct standin_import imp;
};

FIXTURE_SETUP(ud)
{
	self->fd = -1;
	self->dmabuf = -1;
	self->map = MAP_FAILED;
	int dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		SKIP(return, "no /dev/udmabuf (CONFIG_UDMABUF): %s", strerror(errno));
	self->fd = standin_open();
	ASSERT_LE(0, self->fd) TH_LOG("gpunvme_standin on %s: %s", edu_bdf(), strerror(-self->fd));

	self->memfd = memfd_create("standin", MFD_ALLOW_SEALING | MFD_CLOEXEC);
	ASSERT_LE(0, self->memfd);
	ASSERT_EQ(0, ftruncate(self->memfd, BUF_SIZE));
	ASSERT_EQ(0, fcntl(self->memfd, F_ADD_SEALS, F_SEAL_SHRINK));
	struct udmabuf_create c = { .memfd = self->memfd, .flags = UDMABUF_FLAGS_CLOEXEC,
				    .offset = 0, .size = BUF_SIZE };
	self->dmabuf = ioctl(dev, UDMABUF_CREATE, &c);
	close(dev);
	ASSERT_LE(0, self->dmabuf) TH_LOG("UDMABUF_CREATE: %s", strerror(errno));
	self->map = mmap(NULL, BUF_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, self->memfd, 0);
	ASSERT_NE(MAP_FAILED, self->map);
	memset(self->map, 0, BUF_SIZE);

	ASSERT_EQ(0, standin_import(self->fd, self->dmabuf, &self->imp));
	TH_LOG("import: handle %u, dma %#llx + %#llx, %u entries", self->imp.handle,
	       (unsigned long long)self->imp.dma_addr, (unsigned long long)self->imp.len,
	       self->imp.nents);
	ASSERT_EQ(0, self->imp.dma_addr % 4096);
	ASSERT_LE(4096, self->imp.len);
}

FIXTURE_TEARDOWN(ud)
{
	if (self->map != MAP_FAILED)
		munmap(self->map, BUF_SIZE);
	if (self->dmabuf >= 0)
		close(self->dmabuf);
	if (self->fd >= 0)
		close(self->fd);
	standin_restore();
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* edu writes 4 bytes at several offsets: exactly those bytes change. */
TEST_F(ud, write32_lands_in_memfd)
{
	uint64_t len = self->imp.len < BUF_SIZE ? self->imp.len : BUF_SIZE;
	uint64_t offs[] = { 0, 4, 0x100, 0xffc, 0x1000, len - 4 };
	uint8_t expect[BUF_SIZE] = { 0 };

	for (unsigned i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		if (offs[i] + 4 > len)
			continue;
		uint32_t v = 0xc0de0000u | (i << 8) | 0x5a;
		ASSERT_EQ(0, standin_write32(self->fd, self->imp.handle, offs[i], v));
		memcpy(expect + offs[i], &v, 4);
		EXPECT_EQ(v, rd32(self->map + offs[i])) TH_LOG("offset %#llx", (unsigned long long)offs[i]);
	}
	EXPECT_EQ(0, memcmp(expect, self->map, BUF_SIZE)) TH_LOG("bytes outside the written words changed");
}

/* The CPU fills the memfd; edu reads it back through the import. */
TEST_F(ud, read_returns_memfd)
{
	uint8_t got[4096];
	for (int i = 0; i < BUF_SIZE; i++)
		self->map[i] = (uint8_t)(i * 7 + (i >> 8) + 3);

	ASSERT_EQ(0, standin_read(self->fd, self->imp.handle, 0, got, 4096));
	EXPECT_EQ(0, memcmp(got, self->map, 4096));
	if (self->imp.len >= 0x1040 + 64) {
		memset(got, 0, sizeof(got));
		ASSERT_EQ(0, standin_read(self->fd, self->imp.handle, 0x1040, got, 16));
		EXPECT_EQ(0, memcmp(got, self->map + 0x1040, 16));
		EXPECT_EQ(0, got[16]);
	}
}

/* Physical address of the page behind `p` (root reads PFNs), 0 if unknown. */
static uint64_t phys_of(void *p)
{
	uint64_t ent = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	off_t off = ((uintptr_t)p / 4096) * 8;
	if (pread(fd, &ent, 8, off) != 8)
		ent = 0;
	close(fd);
	if (!(ent & (1ull << 63)) || !(ent & ((1ull << 55) - 1)))
		return 0;
	return (ent & ((1ull << 55) - 1)) * 4096;
}

/*
 * edu DMAs to the memfd page's *physical* address, which no import mapped
 * for edu: the vIOMMU must block it (DMAR fault naming edu), the memory
 * must not change. The same for an IOVA far above anything allocated.
 */
TEST_F(ud, raw_write_is_blocked_by_viommu)
{
	self->map[0x10] = 0;
	uint64_t pa = phys_of(self->map);
	ASSERT_NE(0, pa) TH_LOG("no PFN in /proc/self/pagemap");
	uint64_t target = pa + 0x10;
	ASSERT_FALSE(target >= self->imp.dma_addr && target < self->imp.dma_addr + self->imp.len);
	TH_LOG("memfd page at physical %#llx; import at dma %#llx", (unsigned long long)pa,
	       (unsigned long long)self->imp.dma_addr);

	char dev[40];
	snprintf(dev, sizeof(dev), "[%s]", edu_bdf()); /* "[0000:00:06.0]" */
	int before = klog_count("DMAR", dev);
	struct standin_raw_write32 w = { .dma_addr = target, .value = 0xdeadbeef };
	int r = ioctl(self->fd, STANDIN_IOC_RAW_WRITE32, &w);
	TH_LOG("RAW_WRITE32 returned %d (%s)", r, r ? strerror(errno) : "ok");
	EXPECT_EQ(0, rd32(self->map + 0x10));
	for (int i = 0; i < BUF_SIZE; i++)
		if (self->map[i]) {
			EXPECT_EQ(0, self->map[i]) TH_LOG("byte %d changed", i);
			break;
		}
	int after = klog_wait_more("DMAR", dev, before, 2000);
	EXPECT_LT(before, after) TH_LOG("no DMAR fault line for %s", dev);
	klog_show("DMAR", 4);

	/* An IOVA well above anything the IOMMU allocated (64 GiB). */
	before = after;
	w.dma_addr = 1ull << 36;
	ioctl(self->fd, STANDIN_IOC_RAW_WRITE32, &w);
	after = klog_wait_more("DMAR", dev, before, 2000);
	EXPECT_LT(before, after) TH_LOG("no DMAR fault for IOVA 64 GiB");
	EXPECT_EQ(0, rd32(self->map + 0x10));

	/* The import still works afterwards. */
	ASSERT_EQ(0, standin_write32(self->fd, self->imp.handle, 0x10, 0x600df00d));
	EXPECT_EQ(0x600df00d, rd32(self->map + 0x10));
}

TEST_F(ud, bad_arguments)
{
	uint8_t got[16];
	struct standin_import other;
	int memfd2 = memfd_create("not-a-dmabuf", MFD_CLOEXEC);

	EXPECT_EQ(-EINVAL, standin_write32(self->fd, self->imp.handle, 2, 1));
	EXPECT_EQ(-EINVAL, standin_write32(self->fd, self->imp.handle, self->imp.len, 1));
	EXPECT_EQ(-EINVAL, standin_write32(self->fd, self->imp.handle, ~0ull & ~3ull, 1));
	EXPECT_EQ(-ENOENT, standin_write32(self->fd, self->imp.handle + 100, 0, 1));
	EXPECT_EQ(-EINVAL, standin_read(self->fd, self->imp.handle, 0, got, 0));
	EXPECT_EQ(-EINVAL, standin_read(self->fd, self->imp.handle, 0, got, 4097));
	EXPECT_EQ(-EINVAL, standin_read(self->fd, self->imp.handle, self->imp.len - 8, got, 16));
	EXPECT_EQ(-EFAULT, standin_read(self->fd, self->imp.handle, 0, (void *)16, 16));
	EXPECT_EQ(-EBADF, standin_import(self->fd, 9999, &other));
	EXPECT_EQ(-EINVAL, standin_import(self->fd, memfd2, &other));
	close(memfd2);
	EXPECT_EQ(0, memcmp(self->map, (uint8_t[64]){ 0 }, 64)) TH_LOG("a refused call wrote memory");
}

TEST_F(ud, release_and_close)
{
	/* Released handle: gone; twice: ENOENT. */
	ASSERT_EQ(0, standin_release(self->fd, self->imp.handle));
	EXPECT_EQ(-ENOENT, standin_write32(self->fd, self->imp.handle, 0, 1));
	EXPECT_EQ(-ENOENT, standin_release(self->fd, self->imp.handle));

	/* Imports of another file are invisible here and go away with it. */
	int fd2 = open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, fd2);
	struct standin_import a, b;
	ASSERT_EQ(0, standin_import(fd2, self->dmabuf, &a));
	ASSERT_EQ(0, standin_import(fd2, self->dmabuf, &b));
	EXPECT_NE(a.handle, b.handle);
	EXPECT_EQ(-ENOENT, standin_write32(self->fd, a.handle, 0, 1));
	ASSERT_EQ(0, standin_write32(fd2, b.handle, 8, 0x11223344));
	EXPECT_EQ(0x11223344, rd32(self->map + 8));
	close(fd2);

	/* The dma-buf outlives every import; a new one works. */
	ASSERT_EQ(0, standin_import(self->fd, self->dmabuf, &a));
	ASSERT_EQ(0, standin_write32(self->fd, a.handle, 12, 0x55667788));
	EXPECT_EQ(0x55667788, rd32(self->map + 12));
}

/* Unbinding edu with imports held: later calls ENODEV, then rebind works. */
TEST_F(ud, unbind_with_import_held)
{
	ASSERT_EQ(0, edu_unbind());
	EXPECT_EQ(-ENODEV, standin_write32(self->fd, self->imp.handle, 0, 1));
	struct standin_import again;
	EXPECT_EQ(-ENODEV, standin_import(self->fd, self->dmabuf, &again));
	EXPECT_EQ(-1, open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC));
	EXPECT_EQ(0, rd32(self->map));

	int fd2 = standin_open();
	ASSERT_LE(0, fd2) TH_LOG("rebind: %s", strerror(-fd2));
	ASSERT_EQ(0, standin_import(fd2, self->dmabuf, &again));
	ASSERT_EQ(0, standin_write32(fd2, again.handle, 0, 0xabcdef01));
	EXPECT_EQ(0xabcdef01, rd32(self->map));
	close(fd2);
}

static int set_hold_probe(int on)
{
	return sysfs_write("/sys/module/gpunvme_standin/parameters/hold_probe", on ? "1" : "0");
}

/*
 * An open() can run as soon as probe() registers the node: held there (the
 * hold_probe knob), the node opens and works, every field open() reads
 * already set (the fuzzer once met one still unwritten on the KASAN kernel,
 * an open racing an edu rebind), and the probe then completes.
 */
TEST_F(ud, node_works_while_probe_is_held_after_registering)
{
	ASSERT_EQ(0, edu_unbind());
	ASSERT_EQ(-1, open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC));
	int held = klog_count("probe held after registering", NULL);
	/* Reports from before this test (the debug kernel's known early-boot
	 * KASAN report under TCG, an earlier test's) are not this test's. */
	int gpf = klog_count("general protection", NULL);
	int kasan = klog_count("BUG: KASAN", NULL);
	ASSERT_EQ(0, set_hold_probe(1));
	pid_t child = fork();
	ASSERT_LE(0, child);
	if (child == 0)
		_exit(sysfs_write("/sys/bus/pci/drivers_probe", edu_bdf()) ? 1 : 0);

	int fd2 = -1, status = 0;
	EXPECT_LT(held, klog_wait_more("probe held after registering", NULL, held, 20000));
	for (int i = 0; i < 2000 && fd2 < 0; i++) {
		fd2 = open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC);
		if (fd2 < 0)
			usleep(10000);
	}
	EXPECT_LE(0, fd2) TH_LOG("open while probe is held: %s", strerror(errno));
	/* Still inside probe(): the bind has not returned. */
	EXPECT_EQ(0, waitpid(child, &status, WNOHANG));
	if (fd2 >= 0) {
		struct standin_import imp;
		EXPECT_EQ(0, standin_import(fd2, self->dmabuf, &imp));
		EXPECT_EQ(0, standin_write32(fd2, imp.handle, 16, 0x0badcafe));
		EXPECT_EQ(0x0badcafe, rd32(self->map + 16));
		EXPECT_EQ(0, waitpid(child, &status, WNOHANG));
	}

	ASSERT_EQ(0, set_hold_probe(0));
	EXPECT_EQ(child, waitpid(child, &status, 0));
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) TH_LOG("bind: status %#x", status);
	EXPECT_TRUE(edu_bound());
	EXPECT_EQ(gpf, klog_count("general protection", NULL));
	EXPECT_EQ(kasan, klog_count("BUG: KASAN", NULL));
	if (fd2 >= 0)
		close(fd2);
}

TEST_HARNESS_MAIN
