/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * gpunvme_passthrough.h - the C ABI of the gpunvme library's passthrough
 * back end (userspace/gpunvme/src/passthrough/capi.rs), for programs that
 * speak the module's UAPI (uapi/gpunvme.h) and want the same queues on a
 * namespace the kernel drives: /dev/ngXnY, /dev/nvmeXnY or a partition,
 * relayed through io_uring NVMe passthrough, no module loaded.
 *
 * Link with the library's static archive (cargo build -p gpunvme:
 * target/<profile>/libgpunvme.a) and -pthread -ldl -lm.
 *
 * The handle answers the UAPI's ioctls as a module namespace node does in
 * shared mode (see userspace/gpunvme/src/passthrough/device.rs for what
 * differs: one namespace, the window's size, LBAs relative to it; no
 * owner mode, no dma-bufs); mmap the offsets CREATE_QPAIR returns on
 * gpunvme_pt_fd(), as on the node.
 */
#ifndef GPUNVME_PASSTHROUGH_H
#define GPUNVME_PASSTHROUGH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct gpunvme_pt;

/*
 * Opens `device`. `options`: NULL or "" (the whole namespace, or the
 * partition `device` names), else comma-separated key=value:
 *   partition=/dev/nvme0n1p3   the window is that partition
 *   lba=START:COUNT            the window is COUNT blocks from LBA START
 *   poll=auto|on|off           polled completions (default auto)
 *   fixed=0|1                  io_uring fixed buffers (default 1)
 *   threads=N                  relay threads at most (default: CPUs)
 * `device` "model:BLOCKS:LBA_SIZE" is a RAM-disk model namespace instead
 * (namespace 1, the whole disk): the relay, its checks and threads without
 * a device, for tests.
 * On failure returns NULL with the reason in err (NUL-terminated,
 * truncated to errlen).
 */
struct gpunvme_pt *gpunvme_pt_open(const char *device, const char *options, char *err,
				   size_t errlen);

/* The descriptor to mmap queue memory on (valid until gpunvme_pt_close). */
int gpunvme_pt_fd(const struct gpunvme_pt *pt);

/* A UAPI ioctl: 0, or -1 with errno set (as ioctl(2) on a node). */
int gpunvme_pt_ioctl(struct gpunvme_pt *pt, unsigned long request, void *arg);

/*
 * Counter `name` of queue pair `qid` (the module's debugfs names:
 * polls, sqes_accepted, sqes_rejected, cqes_mirrored, bad_doorbell_values,
 * and transport_errors, last_errno, fixed_buffer_commands,
 * vectored_commands, relay_ns); -1 when there is no such pair or counter.
 */
long long gpunvme_pt_counter(const struct gpunvme_pt *pt, unsigned short qid, const char *name);

/* Whether completions are polled (1) or come by interrupt (0). */
int gpunvme_pt_polled(const struct gpunvme_pt *pt);

/* Closes it: like closing the node (pairs not destroyed yet go with it). */
void gpunvme_pt_close(struct gpunvme_pt *pt);

#ifdef __cplusplus
}
#endif

#endif /* GPUNVME_PASSTHROUGH_H */
