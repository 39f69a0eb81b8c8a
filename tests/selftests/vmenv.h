/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the in-VM selftests: where things are (from the environment
 * the VM runner exports) and how to get the controller bound to gpunvme.
 */
#ifndef GPUNVME_SELFTEST_VMENV_H
#define GPUNVME_SELFTEST_VMENV_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/klog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static inline const char *gpunvme_bdf(void) { return env_or("GPUNVME_BDF", "0000:00:04.0"); }

/*
 * The queue-pair mode this run tests: "owner" (claim the controller, raw
 * pairs) or "shared" (validated pairs, the default). From the environment
 * (GPUNVME_TEST_QPAIR_MODE) or, in the VM, from $GPUNVME_DIR/mode.env,
 * which the suite's owner-mode boot adds with a line
 * "GPUNVME_TEST_QPAIR_MODE=owner".
 */
static inline int gpunvme_test_owner_mode(void)
{
	static int mode = -1;
	if (mode >= 0)
		return mode;
	const char *v = getenv("GPUNVME_TEST_QPAIR_MODE");
	char line[128], path[256];
	mode = 0;
	if (v && *v) {
		mode = !strcmp(v, "owner");
		return mode;
	}
	snprintf(path, sizeof(path), "%s/mode.env", env_or("GPUNVME_DIR", "/opt/gpunvme"));
	FILE *f = fopen(path, "r");
	if (!f)
		return mode;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "GPUNVME_TEST_QPAIR_MODE=owner", 29))
			mode = 1;
	fclose(f);
	return mode;
}

/* Write a string to a sysfs file; returns 0 or -errno. */
static inline int sysfs_write(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, val, strlen(val));
	int err = n < 0 ? -errno : 0;
	close(fd);
	return err;
}

/* Name of the driver bound to a PCI device ("" when none). */
static inline void pci_driver_of(const char *bdf, char *out, size_t len)
{
	char path[256], link[256];
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver", bdf);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	out[0] = 0;
	if (n > 0) {
		link[n] = 0;
		const char *slash = strrchr(link, '/');
		snprintf(out, len, "%s", slash ? slash + 1 : link);
	}
}

/* A number from a sysfs/procfs/debugfs file, or `dflt`. */
static inline long long read_number(const char *path, long long dflt)
{
	char buf[64];
	FILE *f = fopen(path, "r");
	if (!f)
		return dflt;
	long long v = fgets(buf, sizeof(buf), f) ? strtoll(buf, NULL, 0) : dflt;
	fclose(f);
	return v;
}

/*
 * The type of the IOMMU group `bdf` is in ("DMA", "DMA-FQ", "identity",
 * "blocked", ...), or "" when the device has no IOMMU group (no IOMMU).
 */
static inline void iommu_group_type(const char *bdf, char *out, size_t len)
{
	char path[256], link[256];
	out[0] = 0;
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/iommu_group", bdf);
	ssize_t n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return;
	link[n] = 0;
	const char *g = strrchr(link, '/');
	snprintf(path, sizeof(path), "/sys/kernel/iommu_groups/%s/type", g ? g + 1 : link);
	FILE *f = fopen(path, "r");
	if (!f)
		return;
	if (!fgets(out, len, f))
		out[0] = 0;
	fclose(f);
	out[strcspn(out, "\n")] = 0;
}

/* Load $GPUNVME_DIR/<name>.ko unless it is loaded; 0 or -errno. */
static inline int load_module_named(const char *name)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/module/%s", name);
	if (access(path, F_OK) == 0)
		return 0;
	snprintf(path, sizeof(path), "%s/%s.ko", env_or("GPUNVME_DIR", "/opt/gpunvme"), name);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = syscall(SYS_finit_module, fd, "", 0);
	int err = r && errno != EEXIST ? -errno : 0;
	close(fd);
	return err;
}

static inline int load_module(void)
{
	return load_module_named("gpunvme");
}

/* Hand `bdf` to gpunvme through driver_override; 0 or -errno. */
static inline int bind_gpunvme(const char *bdf)
{
	char path[256], drv[64];
	pci_driver_of(bdf, drv, sizeof(drv));
	if (!strcmp(drv, "gpunvme"))
		return 0;
	if (drv[0]) {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver/unbind", bdf);
		int r = sysfs_write(path, bdf);
		if (r)
			return r;
	}
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", bdf);
	int r = sysfs_write(path, "gpunvme");
	if (r)
		return r;
	r = sysfs_write("/sys/bus/pci/drivers_probe", bdf);
	if (r)
		return r;
	pci_driver_of(bdf, drv, sizeof(drv));
	return strcmp(drv, "gpunvme") ? -ENODEV : 0;
}

/* The number after `key` on the first line of `path` that starts with it
 * (a procfs "Key: value" file: status, fdinfo), or -1. */
static inline long long read_field(const char *path, const char *key)
{
	char line[256];
	long long v = -1;
	size_t n = strlen(key);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n)) {
			v = strtoll(line + n, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* "VmLck:" of this process in kB (RLIMIT_MEMLOCK charge), or -1. */
static inline long vm_locked_kb(void)
{
	return (long)read_field("/proc/self/status", "VmLck:");
}

/* The debugfs knob that swallows the next `n` admin doorbells. */
static inline int drop_admin_doorbells(unsigned int n)
{
	char path[128], v[16];

	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/drop_admin_doorbells", gpunvme_bdf());
	snprintf(v, sizeof(v), "%u", n);
	return sysfs_write(path, v);
}

/* The first line of debugfs gpunvme-<bdf>/kept (what the registry holds:
 * "queues live L retired R; buffers B; quarantine: queues Q buffers QB
 * exported E lent N; waits for importers: yes|no"), or "". */
static inline void kept_text(char *out, size_t len)
{
	char path[160];
	snprintf(path, sizeof(path), "/sys/kernel/debug/gpunvme-%s/kept", gpunvme_bdf());
	FILE *f = fopen(path, "r");
	out[0] = 0;
	if (f) {
		if (!fgets(out, len, f))
			out[0] = 0;
		fclose(f);
	}
	out[strcspn(out, "\n")] = 0;
}

/* How many of `kind` ("queues", "buffers", "exported", "lent") the
 * quarantine holds (memory the controller may still use), or -1. */
static inline long long kept_quarantined(const char *kind)
{
	char k[256], key[32];
	kept_text(k, sizeof(k));
	const char *q = strstr(k, "quarantine:");
	snprintf(key, sizeof(key), " %s ", kind);
	const char *at = q ? strstr(q, key) : NULL;
	return at ? strtoll(at + strlen(key), NULL, 10) : -1;
}

/* References on the gpunvme module (open files, dma-bufs), or -1. */
static inline long long gpunvme_refcnt(void)
{
	return read_number("/sys/module/gpunvme/refcnt", -1);
}

static inline int unbind_gpunvme(const char *bdf)
{
	return sysfs_write("/sys/bus/pci/drivers/gpunvme/unbind", bdf);
}

/* Kernel log lines containing all of `a` and `b` (either may be NULL). */
static inline int klog_count(const char *a, const char *b)
{
	int len = klogctl(10 /* SYSLOG_ACTION_SIZE_BUFFER */, NULL, 0);
	if (len <= 0)
		return -1;
	char *buf = (char *)malloc(len + 1);
	if (!buf)
		return -1;
	int n = klogctl(3 /* SYSLOG_ACTION_READ_ALL */, buf, len);
	int count = 0;
	if (n < 0) {
		free(buf);
		return -1;
	}
	buf[n] = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if ((!a || strstr(line, a)) && (!b || strstr(line, b)))
			count++;
	free(buf);
	return count;
}

/* Wait (up to ms) until klog_count(a, b) exceeds `before`; returns the count. */
static inline int klog_wait_more(const char *a, const char *b, int before, int ms)
{
	int now = klog_count(a, b);
	for (int i = 0; i < ms / 10 && now <= before; i++) {
		usleep(10000);
		now = klog_count(a, b);
	}
	return now;
}

/* Print kernel log lines containing `a` as TAP comments (the last `max`). */
static inline void klog_show(const char *a, int max)
{
	int total = klog_count(a, NULL), seen = 0;
	int len = klogctl(10, NULL, 0);
	char *buf = len > 0 ? (char *)malloc(len + 1) : NULL;
	if (!buf)
		return;
	int n = klogctl(3, buf, len);
	buf[n > 0 ? n : 0] = 0;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
		if (strstr(line, a) && ++seen > total - max)
			printf("#   klog: %s\n", line);
	free(buf);
}

/*
 * Processes (kernel threads too) whose comm starts with `prefix`: how many,
 * the first `max` of their pids into `out` (may be NULL); -1 without /proc.
 */
static inline int pids_with_comm(const char *prefix, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char path[300], comm[64] = "";
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", e->d_name);
		FILE *f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f) && !strncmp(comm, prefix, strlen(prefix))) {
			if (out && n < max)
				out[n] = atoi(e->d_name);
			n++;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

#endif
