/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * Helpers for the stand-in tests inside the VM: load gpunvme_standin.ko,
 * hand the edu device to it and open /dev/gpunvme_standin. (The kernel-log
 * helpers that look for new vIOMMU (DMAR) fault lines are in vmenv.h.)
 */
#ifndef GPUNVME_STANDIN_ENV_H
#define GPUNVME_STANDIN_ENV_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "standin_uapi.h"
#include "vmenv.h"

static inline const char *edu_bdf(void) { return env_or("EDU_BDF", "0000:00:06.0"); }

static inline int standin_load(void)
{
	return load_module_named("gpunvme_standin");
}

static inline int edu_bound(void)
{
	char path[256];
	snprintf(path, sizeof(path), "/sys/bus/pci/drivers/gpunvme_standin/%s", edu_bdf());
	return access(path, F_OK) == 0;
}

/* Load the module, bind edu to it (driver_override), open the node. */
static inline int standin_open(void)
{
	char path[256];
	int r = standin_load();
	if (r) {
		fprintf(stderr, "# loading gpunvme_standin.ko: %s\n", strerror(-r));
		return r;
	}
	if (!edu_bound()) {
		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", edu_bdf());
		if ((r = sysfs_write(path, "gpunvme_standin")))
			return r;
		if ((r = sysfs_write("/sys/bus/pci/drivers_probe", edu_bdf())))
			return r;
		if (!edu_bound())
			return -ENODEV;
	}
	int fd = open("/dev/gpunvme_standin", O_RDWR | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static inline int edu_unbind(void)
{
	return sysfs_write("/sys/bus/pci/drivers/gpunvme_standin/unbind", edu_bdf());
}

/* Leave edu as the VM booted it: unbound, no driver_override (other tests
 * bind it to gpunvme on purpose and expect a refusal). */
static inline void standin_restore(void)
{
	char path[256];
	if (edu_bound())
		edu_unbind();
	snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/driver_override", edu_bdf());
	sysfs_write(path, "\n");
}

/* The stand-in's test knob: ignore exporters' invalidate_mappings. */
static inline int set_hold_mappings(int on)
{
	return sysfs_write("/sys/module/gpunvme_standin/parameters/hold_mappings", on ? "1" : "0");
}

static inline int standin_import(int fd, int dmabuf, struct standin_import *imp)
{
	memset(imp, 0, sizeof(*imp));
	imp->fd = dmabuf;
	return ioctl(fd, STANDIN_IOC_IMPORT, imp) ? -errno : 0;
}

static inline int standin_write32(int fd, uint32_t handle, uint64_t off, uint32_t val)
{
	struct standin_write32 w = { .handle = handle, .value = val, .offset = off };
	return ioctl(fd, STANDIN_IOC_WRITE32, &w) ? -errno : 0;
}

static inline int standin_read(int fd, uint32_t handle, uint64_t off, void *buf, uint32_t len)
{
	struct standin_read r = { .handle = handle, .len = len, .offset = off,
				  .buf = (uint64_t)(uintptr_t)buf };
	return ioctl(fd, STANDIN_IOC_READ, &r) ? -errno : 0;
}

static inline int standin_release(int fd, uint32_t handle)
{
	struct standin_release r = { .handle = handle };
	return ioctl(fd, STANDIN_IOC_RELEASE, &r) ? -errno : 0;
}

#endif
