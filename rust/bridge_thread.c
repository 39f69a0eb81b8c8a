// SPDX-License-Identifier: GPL-2.0
/*
 * The thread that runs the bridge relay (rust/bridge.rs) for one queue
 * pair, from creation to destruction, and its debugfs counters. The 7.3
 * Rust crate has no kthread API; this is the whole of the C side.
 *
 * CPU use is bounded: the thread spins only for a short window after the
 * last progress (an I/O in flight usually completes within it), then sleeps,
 * doubling from 20 us up to 1 ms, and snaps back to spinning on progress.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/ktime.h>
#include <linux/kthread.h>
#include <linux/slab.h>
#include "shim.h"

bool gpunvme_bridge_step(void *ctx);

struct gpunvme_bridge {
	struct task_struct *task;
	struct dentry *dir;
	void *ctx;
};

static const char *const counter_names[] = {
	"polls", "sq_doorbell_writes", "cq_doorbell_writes",
	"cqes_mirrored", "max_sq_tail", "bad_doorbell_values",
};

/* How long the relay keeps spinning after it last moved something. */
#define GPUNVME_BRIDGE_SPIN_NS (200 * NSEC_PER_USEC)

static int gpunvme_bridge_fn(void *data)
{
	struct gpunvme_bridge *b = data;
	unsigned int sleep_us = 20;
	u64 last = ktime_get_ns();

	while (!kthread_should_stop()) {
		if (gpunvme_bridge_step(b->ctx)) {
			last = ktime_get_ns();
			sleep_us = 20;
			cond_resched();
			continue;
		}
		if (ktime_get_ns() - last < GPUNVME_BRIDGE_SPIN_NS) {
			cpu_relax();
			cond_resched();
			continue;
		}
		usleep_range(sleep_us, sleep_us + sleep_us / 2);
		sleep_us = min(sleep_us * 2, 1000u);
	}
	return 0;
}

struct gpunvme_bridge *gpunvme_shim_bridge_start(void *ctx, u64 *counters, struct device *dev,
						 u16 qid, int *err)
{
	struct gpunvme_bridge *b = kzalloc(sizeof(*b), GFP_KERNEL);
	char name[64];
	int i;

	if (!b) {
		*err = -ENOMEM;
		return NULL;
	}
	b->ctx = ctx;
	snprintf(name, sizeof(name), "gpunvme-%s-q%u", dev_name(dev), qid);
	b->dir = debugfs_create_dir(name, NULL);
	for (i = 0; i < ARRAY_SIZE(counter_names); i++)
		debugfs_create_u64(counter_names[i], 0444, b->dir, &counters[i]);
	b->task = kthread_run(gpunvme_bridge_fn, b, "gpunvme-br%u", qid);
	if (IS_ERR(b->task)) {
		*err = PTR_ERR(b->task);
		debugfs_remove_recursive(b->dir);
		kfree(b);
		return NULL;
	}
	return b;
}

void gpunvme_shim_bridge_stop(struct gpunvme_bridge *b)
{
	kthread_stop(b->task);
	debugfs_remove_recursive(b->dir);
	kfree(b);
}
