// SPDX-License-Identifier: GPL-2.0-only
/*
 * Helper of gpunvme_bind_test.sh (not a test itself):
 *
 *   gpunvme_bind_helper excl PATH READY
 *       open PATH with O_RDONLY|O_EXCL (as a program holding a disk
 *       exclusively would), create the file READY, then sleep until killed;
 *   gpunvme_bind_helper dm-create NAME DEV
 *       create device-mapper device NAME, a linear map of all of block
 *       device DEV, through the DM ioctls (no dmsetup in the VM); prints
 *       its kernel name (dm-N);
 *   gpunvme_bind_helper dm-remove NAME
 *       remove it.
 *
 * Exit 0 on success; 1 with a message on stderr otherwise.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/dm-ioctl.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DM_CONTROL "/dev/mapper/control"

static int die(const char *what)
{
	fprintf(stderr, "gpunvme_bind_helper: %s: %s\n", what, strerror(errno));
	return 1;
}

static int excl(const char *path, const char *ready)
{
	int fd = open(path, O_RDONLY | O_EXCL);
	if (fd < 0)
		return die(path);
	int r = open(ready, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (r < 0)
		return die(ready);
	close(r);
	for (;;)
		pause();
}

/* The DM ioctl buffer: the header, then (for a table load) one target. */
union dm_buf {
	struct dm_ioctl io;
	char bytes[16384];
};

static void dm_init(union dm_buf *b, const char *name, size_t size)
{
	memset(b, 0, sizeof(*b));
	b->io.version[0] = DM_VERSION_MAJOR;
	b->io.version[1] = DM_VERSION_MINOR;
	b->io.version[2] = DM_VERSION_PATCHLEVEL;
	b->io.data_size = size;
	b->io.data_start = sizeof(struct dm_ioctl);
	snprintf(b->io.name, sizeof(b->io.name), "%s", name);
}

static int dm_create(const char *name, const char *dev)
{
	static union dm_buf b;
	struct stat st;
	uint64_t bytes;
	int ctl = open(DM_CONTROL, O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return die(DM_CONTROL);
	int fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) || !S_ISBLK(st.st_mode))
		return die(dev);
	if (ioctl(fd, BLKGETSIZE64, &bytes))
		return die("BLKGETSIZE64");
	close(fd);

	dm_init(&b, name, sizeof(b.io));
	if (ioctl(ctl, DM_DEV_CREATE, &b))
		return die("DM_DEV_CREATE");
	unsigned int minor = minor(b.io.dev);

	struct dm_target_spec *t = (void *)(b.bytes + sizeof(struct dm_ioctl));
	char *params = (char *)(t + 1);
	dm_init(&b, name, sizeof(b));
	b.io.target_count = 1;
	t->sector_start = 0;
	t->length = bytes / 512;
	snprintf(t->target_type, sizeof(t->target_type), "linear");
	snprintf(params, 64, "%u:%u 0", major(st.st_rdev), minor(st.st_rdev));
	size_t used = sizeof(struct dm_ioctl) + sizeof(*t) + strlen(params) + 1;
	used = (used + 7) & ~(size_t)7;
	t->next = used - sizeof(struct dm_ioctl);
	b.io.data_size = used;
	if (ioctl(ctl, DM_TABLE_LOAD, &b)) {
		int e = errno;
		dm_init(&b, name, sizeof(b.io));
		ioctl(ctl, DM_DEV_REMOVE, &b);
		errno = e;
		return die("DM_TABLE_LOAD");
	}
	/* DM_DEV_SUSPEND without DM_SUSPEND_FLAG resumes: the table goes live. */
	dm_init(&b, name, sizeof(b.io));
	if (ioctl(ctl, DM_DEV_SUSPEND, &b))
		return die("DM_DEV_SUSPEND (resume)");
	printf("dm-%u\n", minor);
	return 0;
}

static int dm_remove(const char *name)
{
	static union dm_buf b;
	int ctl = open(DM_CONTROL, O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return die(DM_CONTROL);
	dm_init(&b, name, sizeof(b.io));
	if (ioctl(ctl, DM_DEV_REMOVE, &b))
		return die("DM_DEV_REMOVE");
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "excl"))
		return excl(argv[2], argv[3]);
	if (argc == 4 && !strcmp(argv[1], "dm-create"))
		return dm_create(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "dm-remove"))
		return dm_remove(argv[2]);
	fprintf(stderr, "usage: %s excl PATH READY | dm-create NAME DEV | dm-remove NAME\n", argv[0]);
	return 2;
}
