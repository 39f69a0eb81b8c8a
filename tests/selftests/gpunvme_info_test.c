// SPDX-License-Identifier: GPL-2.0
/*
 * GET_INFO and the device node's lifetime, against QEMU's NVMe controller.
 *
 * The expected CAP and VS are read independently of the module: straight
 * from BAR0 through sysfs resource0 while the controller is unbound.
 */
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdint.h>

#include "kselftest_harness.h"
#include "gpunvme.h"
#include "vmenv.h"

struct regs { uint64_t cap; uint32_t vs; };

/* CAP and VS read from BAR0 by mmap of sysfs resource0. */
static int read_bar0(const char *bdf, struct regs *r)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/resource0", bdf);
	int fd = open(path, O_RDONLY | O_SYNC);
	if (fd < 0)
		return -errno;
	volatile uint32_t *bar = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (bar == MAP_FAILED)
		return -errno;
	r->cap = bar[0] | ((uint64_t)bar[1] << 32);
	r->vs = bar[2];
	munmap((void *)bar, 4096);
	return 0;
}

static void info_req(struct gpunvme_info *info)
{
	memset(info, 0, sizeof(*info));
	info->size = sizeof(*info);
	info->version = GPUNVME_UAPI_VERSION;
}

/* Open the /dev/gpunvmeN whose GET_INFO names `bdf`. */
static int open_node(const char *bdf)
{
	for (int i = 0; i < 8; i++) {
		char name[32];
		struct gpunvme_info info;
		snprintf(name, sizeof(name), "/dev/gpunvme%d", i);
		int fd = open(name, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			continue;
		info_req(&info);
		if (!ioctl(fd, GPUNVME_IOC_GET_INFO, &info) && !strcmp(info.bdf, bdf))
			return fd;
		close(fd);
	}
	return -1;
}

FIXTURE(ctrl) {
	int fd;
	struct regs expect;
};

FIXTURE_SETUP(ctrl)
{
	const char *bdf = gpunvme_bdf();
	ASSERT_EQ(0, load_module());
	/* Expected values come from the hardware, before gpunvme owns it. */
	unbind_gpunvme(bdf);
	ASSERT_EQ(0, read_bar0(bdf, &self->expect));
	ASSERT_NE(0xffffffffu, self->expect.vs);
	ASSERT_EQ(0, bind_gpunvme(bdf));
	self->fd = open_node(bdf);
	ASSERT_LE(0, self->fd) TH_LOG("no /dev/gpunvme* for %s", bdf);
}

FIXTURE_TEARDOWN(ctrl)
{
	if (self->fd >= 0)
		close(self->fd);
}

TEST_F(ctrl, get_info_matches_registers)
{
	struct gpunvme_info info;
	info_req(&info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(self->expect.cap, info.cap);
	EXPECT_EQ(self->expect.vs, info.vs);
	EXPECT_EQ((self->expect.cap & 0xffff) + 1, info.max_queue_entries);
	EXPECT_EQ(4u << ((self->expect.cap >> 32) & 0xf), info.doorbell_stride);
	EXPECT_EQ(((self->expect.cap >> 24) & 0xff) * 500, info.ready_timeout_ms);
	EXPECT_EQ(0x1b36, info.pci_vendor); /* QEMU's NVMe: Red Hat, device 0x0010 */
	EXPECT_EQ(0x0010, info.pci_device);
	EXPECT_STREQ(gpunvme_bdf(), info.bdf);
	EXPECT_EQ(sizeof(info), info.size);
	for (int i = 0; i < 8; i++)
		EXPECT_EQ(0, info.reserved[i]);
}

TEST_F(ctrl, wrong_size_is_einval)
{
	struct gpunvme_info info;
	info_req(&info);
	info.size = sizeof(info) - 8;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(ctrl, wrong_version_is_einval)
{
	struct gpunvme_info info;
	info_req(&info);
	info.version = GPUNVME_UAPI_VERSION + 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(ctrl, reserved_nonzero_is_einval)
{
	struct gpunvme_info info;
	info_req(&info);
	info.reserved[7] = 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(ctrl, unknown_ioctl_is_enotty)
{
	EXPECT_EQ(-1, ioctl(self->fd, _IO(GPUNVME_IOC_MAGIC, 0x7f)));
	EXPECT_EQ(ENOTTY, errno);
	/* Same number, different size: a caller built against another header. */
	char small[8] = { 0 };
	EXPECT_EQ(-1, ioctl(self->fd, _IOWR(GPUNVME_IOC_MAGIC, 0x00, small), small));
	EXPECT_EQ(ENOTTY, errno);
}

TEST_F(ctrl, bad_pointer_is_efault)
{
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, (void *)16));
	EXPECT_EQ(EFAULT, errno);
}

TEST_F(ctrl, non_root_open_refused)
{
	char name[64];
	snprintf(name, sizeof(name), "/proc/self/fd/%d", self->fd);
	char node[64];
	ssize_t n = readlink(name, node, sizeof(node) - 1);
	ASSERT_LT(0, n);
	node[n] = 0;
	/* Let the unprivileged user past the file mode: the module must refuse by itself. */
	ASSERT_EQ(0, chmod(node, 0666));
	pid_t pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		if (setgid(65534) || setuid(65534))
			_exit(2);
		int fd = open(node, O_RDWR);
		_exit(fd < 0 && errno == EPERM ? 0 : 1);
	}
	int status;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	chmod(node, 0600);
	EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(ctrl, open_file_after_unbind_is_enodev)
{
	struct gpunvme_info info;
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	info_req(&info);
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(ENODEV, errno);
	/* Rebinding gives a working node again; the stale fd stays dead. */
	ASSERT_EQ(0, bind_gpunvme(gpunvme_bdf()));
	int fd = open_node(gpunvme_bdf());
	ASSERT_LE(0, fd);
	info_req(&info);
	EXPECT_EQ(0, ioctl(fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(ENODEV, errno);
	close(fd);
}

/* Read a sysfs attribute into `out`, trailing whitespace removed. */
static int read_attr(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -errno;
	if (!fgets(out, len, f))
		out[0] = 0;
	fclose(f);
	size_t n = strlen(out);
	while (n && (out[n - 1] == '\n' || out[n - 1] == ' '))
		out[--n] = 0;
	return 0;
}

/*
 * What gpunvme's Identify found must match what the kernel's own nvme driver
 * reports for the same controller: serial, model, firmware, and each
 * namespace's LBA size and capacity.
 */
TEST(identify_matches_nvme_driver)
{
	const char *bdf = gpunvme_bdf();
	char path[512], ctrl[64] = "", buf[128], override[256];
	struct gpunvme_info info;

	ASSERT_EQ(0, load_module());
	ASSERT_EQ(0, system("modprobe nvme"));
	unbind_gpunvme(bdf);
	snprintf(override, sizeof(override), "/sys/bus/pci/devices/%s/driver_override", bdf);
	ASSERT_EQ(0, sysfs_write(override, "nvme"));
	ASSERT_EQ(0, sysfs_write("/sys/bus/pci/drivers_probe", bdf));

	/* nvme probes asynchronously: wait (bounded) for namespace 1. */
	for (int i = 0; i < 200 && !ctrl[0]; i++) {
		for (int c = 0; c < 8; c++) {
			snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/nvme/nvme%d/nvme%dn1/size", bdf, c, c);
			if (!access(path, F_OK)) {
				snprintf(ctrl, sizeof(ctrl), "nvme%d", c);
				break;
			}
		}
		if (!ctrl[0])
			usleep(50000);
	}
	ASSERT_NE(0, ctrl[0]) TH_LOG("nvme driver did not bring up %s within 10 s", bdf);

	char serial[64], model[64], fw[64];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/nvme/%s/serial", bdf, ctrl);
	ASSERT_EQ(0, read_attr(path, serial, sizeof(serial)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/nvme/%s/model", bdf, ctrl);
	ASSERT_EQ(0, read_attr(path, model, sizeof(model)));
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/nvme/%s/firmware_rev", bdf, ctrl);
	ASSERT_EQ(0, read_attr(path, fw, sizeof(fw)));

	/* The driver's nvmeXnY numbering is its own; match namespaces by NSID. */
	unsigned long long sectors[GPUNVME_MAX_NS + 1] = { 0 };
	unsigned int lbs[GPUNVME_MAX_NS + 1] = { 0 };
	int nns = 0;
	for (int n = 1; n <= GPUNVME_MAX_NS; n++) {
		char base[256];
		snprintf(base, sizeof(base), "/sys/bus/pci/devices/%s/nvme/%s/%sn%d", bdf, ctrl, ctrl, n);
		snprintf(path, sizeof(path), "%s/nsid", base);
		if (read_attr(path, buf, sizeof(buf)))
			break;
		unsigned long nsid = strtoul(buf, NULL, 10);
		ASSERT_TRUE(nsid >= 1 && nsid <= GPUNVME_MAX_NS);
		snprintf(path, sizeof(path), "%s/size", base);
		ASSERT_EQ(0, read_attr(path, buf, sizeof(buf)));
		sectors[nsid] = strtoull(buf, NULL, 10);
		snprintf(path, sizeof(path), "%s/queue/logical_block_size", base);
		ASSERT_EQ(0, read_attr(path, buf, sizeof(buf)));
		lbs[nsid] = strtoul(buf, NULL, 10);
		nns++;
	}

	ASSERT_EQ(0, bind_gpunvme(bdf));
	int fd = open_node(bdf);
	ASSERT_LE(0, fd);
	info_req(&info);
	ASSERT_EQ(0, ioctl(fd, GPUNVME_IOC_GET_INFO, &info));
	close(fd);

	EXPECT_STREQ(serial, info.serial);
	EXPECT_STREQ(model, info.model);
	EXPECT_STREQ(fw, info.firmware);
	ASSERT_EQ(nns, info.num_namespaces);
	for (int i = 0; i < nns; i++) {
		uint32_t id = info.ns[i].nsid;
		ASSERT_TRUE(id >= 1 && id <= GPUNVME_MAX_NS);
		if (i)
			EXPECT_LT(info.ns[i - 1].nsid, id); /* lowest NSID first */
		EXPECT_EQ(lbs[id], info.ns[i].lba_size) TH_LOG("nsid %u", id);
		EXPECT_EQ(sectors[id] * 512, info.ns[i].capacity_lbas * info.ns[i].lba_size) TH_LOG("nsid %u", id);
	}
	EXPECT_EQ(4096, info.page_size);
	EXPECT_LT(0, info.io_queues);
}

TEST(non_nvme_device_refused)
{
	const char *edu = env_or("EDU_BDF", "0000:00:06.0");
	char path[256], drv[64];
	ASSERT_EQ(0, load_module());
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", edu);
	ASSERT_EQ(0, sysfs_write(path, "gpunvme"));
	sysfs_write("/sys/bus/pci/drivers_probe", edu);
	pci_driver_of(edu, drv, sizeof(drv));
	EXPECT_STREQ("", drv);
	ASSERT_EQ(0, sysfs_write(path, "\n"));
}

TEST_HARNESS_MAIN
