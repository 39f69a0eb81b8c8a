// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-file quotas of shared-mode files, as module parameters under
 * /sys/module/gpunvme/parameters/ (readable by all, writable by root; a
 * change applies from the next call on). They live in C because the 7.3
 * Rust crate registers a module's parameters with permission 0, out of
 * sysfs. The checks themselves are in rust/uapi/quota.rs; an owner is
 * exempt from them.
 */
#include <linux/moduleparam.h>
#include <linux/compiler.h>
#include "shim.h"

static unsigned int max_qpairs_per_file = 8;
module_param(max_qpairs_per_file, uint, 0644);
MODULE_PARM_DESC(max_qpairs_per_file,
		 "I/O queue pairs one shared-mode file may hold (created, being created or destroyed, or not confirmed deleted); 0: no limit. Default 8.");

static unsigned int max_maps_per_file = 64;
module_param(max_maps_per_file, uint, 0644);
MODULE_PARM_DESC(max_maps_per_file,
		 "Buffers (MAP_HOST and MAP_DMABUF together) one shared-mode file may have mapped for the controller; 0: no limit. Default 64.");

static unsigned int max_exports_per_qpair = 4;
module_param(max_exports_per_qpair, uint, 0644);
MODULE_PARM_DESC(max_exports_per_qpair,
		 "dma-buf exports (EXPORT) made of one shared-mode queue pair, every kind together, counted until the pair goes (each is revoked then, with a deadline); 0: no limit. Default 4 (one per kind).");

u32 gpunvme_quota_qpairs(void) { return READ_ONCE(max_qpairs_per_file); }
u32 gpunvme_quota_maps(void) { return READ_ONCE(max_maps_per_file); }
u32 gpunvme_quota_exports(void) { return READ_ONCE(max_exports_per_qpair); }
