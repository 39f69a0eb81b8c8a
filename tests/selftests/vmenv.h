/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for the in-VM selftests: where things are (from the environment
 * the VM runner exports) and how to get the controller bound to gpunvme.
 */
#ifndef GPUNVME_SELFTEST_VMENV_H
#define GPUNVME_SELFTEST_VMENV_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline const char *env_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);
	return v && *v ? v : dflt;
}

static inline const char *gpunvme_bdf(void) { return env_or("GPUNVME_BDF", "0000:00:04.0"); }

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

static inline int unbind_gpunvme(const char *bdf)
{
	return sysfs_write("/sys/bus/pci/drivers/gpunvme/unbind", bdf);
}

#endif
