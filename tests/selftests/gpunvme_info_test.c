// SPDX-License-Identifier: GPL-2.0-only
/*
 * GET_INFO and the device nodes' lifetime, against QEMU's NVMe controller.
 *
 * The expected CAP and VS are read independently of the module: straight
 * from BAR0 through sysfs resource0 while the controller is unbound. The
 * expected IOMMU mode comes from the device's IOMMU group in sysfs.
 * UAPI version 2: opening needs no capability (the node's file mode
 * decides); per-namespace nodes /dev/gpunvme<N>n<NSID> exist for NSID 1..4.
 */
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <stdint.h>

#include "kselftest_harness.h"
#include "gpunvme.h"
#include "vmenv.h"
#include "nvme_io.h"

#define NRES (sizeof(((struct gpunvme_info *)0)->reserved) / sizeof(__u64))

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
	EXPECT_EQ(GPUNVME_UAPI_VERSION, info.version);
	for (unsigned i = 0; i < NRES; i++)
		EXPECT_EQ(0, info.reserved[i]);
}

/* The version-2 fields: IOMMU mode as sysfs has it, the modes root may use,
 * the shared-mode transfer cap, and node_nsid 0 on the controller node. */
TEST_F(ctrl, get_info_v2_fields)
{
	struct gpunvme_info info;
	char type[32];
	uint32_t want = expected_iommu_mode(gpunvme_bdf(), type, sizeof(type));
	info_req(&info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(want, info.iommu_mode) TH_LOG("IOMMU group type %s", type);
	EXPECT_TRUE(info.modes & GPUNVME_MODE_SHARED) TH_LOG("modes %#x", info.modes);
	EXPECT_EQ(0, info.modes & ~(GPUNVME_MODE_SHARED | GPUNVME_MODE_OWNER));
	uint32_t cap = 2u << 20;
	if (info.mdts_bytes && info.mdts_bytes < cap)
		cap = info.mdts_bytes;
	EXPECT_EQ(cap, info.shared_max_transfer) TH_LOG("mdts_bytes %u", info.mdts_bytes);
	EXPECT_EQ(0, info.node_nsid);
	TH_LOG("iommu_mode %u (%s), modes %#x, shared_max_transfer %u", info.iommu_mode, type,
	       info.modes, info.shared_max_transfer);
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

/* A caller built against UAPI version 1: the structs kept their sizes, so
 * the ioctl numbers match and only the version tells them apart. */
TEST_F(ctrl, version_1_caller_is_einval)
{
	struct gpunvme_info info;
	info_req(&info);
	info.version = 1;
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(EINVAL, errno);
	struct gpunvme_qpair_create c;
	memset(&c, 0, sizeof(c));
	c.size = sizeof(c);
	c.version = 1;
	c.depth = 8;
	c.flags = 1; /* version 1's GPUNVME_QPAIR_BRIDGED */
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_CREATE_QPAIR, &c));
	EXPECT_EQ(EINVAL, errno);
}

TEST_F(ctrl, reserved_nonzero_is_einval)
{
	struct gpunvme_info info;
	for (unsigned i = 0; i < NRES; i++) {
		info_req(&info);
		info.reserved[i] = 1;
		EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info)) TH_LOG("reserved[%u]", i);
		EXPECT_EQ(EINVAL, errno);
	}
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

/* Path of the node behind an open fd. */
static int node_of_fd(int fd, char *node, size_t len)
{
	char name[64];
	snprintf(name, sizeof(name), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(name, node, len - 1);
	if (n <= 0)
		return -1;
	node[n] = 0;
	return 0;
}

/* The nodes are created root-only: a udev rule, not the module, widens them. */
TEST_F(ctrl, nodes_are_root_only_by_default)
{
	char node[64];
	struct stat st;
	ASSERT_EQ(0, node_of_fd(self->fd, node, sizeof(node)));
	ASSERT_EQ(0, stat(node, &st));
	EXPECT_TRUE(S_ISCHR(st.st_mode));
	EXPECT_EQ(0600, st.st_mode & 07777) TH_LOG("%s has mode %o", node, st.st_mode & 07777);
	EXPECT_EQ(0, st.st_uid);
	snprintf(node + strlen(node), sizeof(node) - strlen(node), "n1");
	ASSERT_EQ(0, stat(node, &st)) TH_LOG("%s: %s", node, strerror(errno));
	EXPECT_TRUE(S_ISCHR(st.st_mode));
	EXPECT_EQ(0600, st.st_mode & 07777) TH_LOG("%s has mode %o", node, st.st_mode & 07777);
}

/*
 * Opening needs no capability any more: an unprivileged user the file mode
 * lets in may use shared mode (GET_INFO says so), but not claim the
 * controller (no CAP_SYS_RAWIO: EPERM) nor create raw pairs.
 */
TEST_F(ctrl, non_root_open_allowed_claim_refused)
{
	char node[64];
	ASSERT_EQ(0, node_of_fd(self->fd, node, sizeof(node)));
	/* Let the unprivileged user past the file mode, as a udev rule would. */
	ASSERT_EQ(0, chmod(node, 0666));
	pid_t pid = fork();
	ASSERT_LE(0, pid);
	if (pid == 0) {
		struct gpunvme_info info;
		struct gpunvme_owner o;
		struct gpunvme_qpair_create c;
		if (setgid(65534) || setuid(65534))
			_exit(2);
		int fd = open(node, O_RDWR);
		if (fd < 0)
			_exit(3);
		info_req(&info);
		if (ioctl(fd, GPUNVME_IOC_GET_INFO, &info))
			_exit(4);
		if (!(info.modes & GPUNVME_MODE_SHARED) || (info.modes & GPUNVME_MODE_OWNER))
			_exit(5);
		memset(&o, 0, sizeof(o));
		o.size = sizeof(o);
		o.version = GPUNVME_UAPI_VERSION;
		if (!ioctl(fd, GPUNVME_IOC_CLAIM_OWNER, &o) || errno != EPERM)
			_exit(6);
		memset(&c, 0, sizeof(c));
		c.size = sizeof(c);
		c.version = GPUNVME_UAPI_VERSION;
		c.depth = 8;
		c.flags = GPUNVME_QPAIR_RAW;
		if (!ioctl(fd, GPUNVME_IOC_CREATE_QPAIR, &c) || errno != EPERM)
			_exit(7);
		_exit(0);
	}
	int status;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	chmod(node, 0600);
	EXPECT_TRUE(WIFEXITED(status));
	/* 3: open refused; 4: GET_INFO; 5: modes; 6: claim not EPERM; 7: raw pair not EPERM */
	EXPECT_EQ(0, WEXITSTATUS(status));
}

/*
 * One node per active namespace with NSID 1..4: GET_INFO there names the
 * same controller and the node's namespace; inactive NSIDs have no node.
 */
TEST_F(ctrl, namespace_nodes)
{
	struct gpunvme_info info, ni;
	char path[64];
	info_req(&info);
	ASSERT_EQ(0, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	for (uint32_t nsid = 1; nsid <= 4; nsid++) {
		int active = 0;
		for (uint32_t i = 0; i < info.num_namespaces; i++)
			active |= info.ns[i].nsid == nsid;
		ASSERT_EQ(0, gpunvme_ns_node_path(nsid, path, sizeof(path)));
		int fd = open(path, O_RDWR | O_CLOEXEC);
		if (!active) {
			EXPECT_EQ(-1, fd) TH_LOG("%s exists for an inactive namespace", path);
			if (fd >= 0)
				close(fd);
			continue;
		}
		ASSERT_LE(0, fd) TH_LOG("%s: %s", path, strerror(errno));
		info_req(&ni);
		ASSERT_EQ(0, ioctl(fd, GPUNVME_IOC_GET_INFO, &ni));
		EXPECT_EQ(nsid, ni.node_nsid) TH_LOG("%s", path);
		EXPECT_STREQ(info.bdf, ni.bdf);
		EXPECT_EQ(info.cap, ni.cap);
		EXPECT_EQ(info.iommu_mode, ni.iommu_mode);
		TH_LOG("%s: node_nsid %u, modes %#x", path, ni.node_nsid, ni.modes);
		close(fd);
	}
}

TEST_F(ctrl, open_file_after_unbind_is_enodev)
{
	struct gpunvme_info info;
	char nspath[64];
	ASSERT_EQ(0, gpunvme_ns_node_path(1, nspath, sizeof(nspath)));
	int nsfd = open(nspath, O_RDWR | O_CLOEXEC);
	ASSERT_LE(0, nsfd) TH_LOG("%s: %s", nspath, strerror(errno));
	ASSERT_EQ(0, unbind_gpunvme(gpunvme_bdf()));
	info_req(&info);
	EXPECT_EQ(-1, ioctl(self->fd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(ENODEV, errno);
	EXPECT_EQ(-1, ioctl(nsfd, GPUNVME_IOC_GET_INFO, &info));
	EXPECT_EQ(ENODEV, errno);
	EXPECT_NE(0, access(nspath, F_OK)) TH_LOG("%s outlived the unbind", nspath);
	close(nsfd);
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
