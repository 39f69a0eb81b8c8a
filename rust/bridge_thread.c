// SPDX-License-Identifier: GPL-2.0
/*
 * The threads that run the shared-mode relay (rust/bridge.rs), and each
 * pair's debugfs counters. The 7.3 Rust crate has no kthread API; this is
 * the whole of the C side.
 *
 * A small pool serves every shared pair of every controller: at most one
 * thread per online CPU (module parameter relay_threads lowers it), started
 * with the first pair and stopped with the last, so a machine with no
 * shared pair runs no relay thread. A pair is served by one thread for its
 * whole life (its relay state is never handed between threads); a new pair
 * goes to the thread serving the fewest.
 *
 * CPU use is bounded: a thread spins only for a short window after the
 * last progress on any of its pairs (an I/O in flight usually completes
 * within it), then sleeps, doubling from 20 us up to 1 ms, and snaps back
 * to spinning on progress. Each pair's share is measured (relay_ns) and
 * shown per million commands.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/ktime.h>
#include <linux/kthread.h>
#include <linux/list.h>
#include <linux/math64.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include "shim.h"

bool gpunvme_bridge_step(void *ctx);

/* Order of the u64 counters in rust/bridge.rs `Counters`. */
static const char *const counter_names[] = {
	"polls", "sq_doorbell_writes", "cq_doorbell_writes",
	"cqes_mirrored", "max_sq_tail", "bad_doorbell_values",
	"sqes_accepted", "sqes_rejected", "relay_ns",
};
enum { C_ACCEPTED = 6, C_REJECTED = 7, C_RELAY_NS = 8 };

struct gpunvme_relay_thread {
	struct task_struct *task;
	struct mutex lock;		/* the list, and every step on it */
	struct list_head pairs;
	unsigned int npairs;
};

struct gpunvme_bridge {
	struct list_head node;
	struct gpunvme_relay_thread *t;
	struct dentry *dir;
	void *ctx;
	u64 *counters;
};

static DEFINE_MUTEX(pool_lock);
static struct gpunvme_relay_thread *pool;
static unsigned int pool_size, pool_users;

/* How long a thread keeps spinning after it last moved something. */
#define GPUNVME_BRIDGE_SPIN_NS (200 * NSEC_PER_USEC)

static int gpunvme_relay_fn(void *data)
{
	struct gpunvme_relay_thread *t = data;
	unsigned int sleep_us = 20;
	u64 last = ktime_get_ns();

	while (!kthread_should_stop()) {
		struct gpunvme_bridge *b;
		bool progress = false;

		mutex_lock(&t->lock);
		list_for_each_entry(b, &t->pairs, node) {
			u64 start = ktime_get_ns();

			progress |= gpunvme_bridge_step(b->ctx);
			b->counters[C_RELAY_NS] += ktime_get_ns() - start;
		}
		mutex_unlock(&t->lock);
		if (progress) {
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

static void pool_stop(void)
{
	unsigned int i;

	for (i = 0; i < pool_size; i++)
		if (pool[i].task)
			kthread_stop(pool[i].task);
	kfree(pool);
	pool = NULL;
	pool_size = 0;
}

/* Under pool_lock: make sure the pool runs; returns 0 or -errno. */
static int pool_get(unsigned int want)
{
	unsigned int i, n = num_online_cpus();

	if (pool_users++)
		return 0;
	if (want && want < n)
		n = want;
	pool = kcalloc(n, sizeof(*pool), GFP_KERNEL);
	if (!pool)
		goto fail;
	pool_size = n;
	for (i = 0; i < n; i++) {
		mutex_init(&pool[i].lock);
		INIT_LIST_HEAD(&pool[i].pairs);
		pool[i].task = kthread_run(gpunvme_relay_fn, &pool[i], "gpunvme-relay%u", i);
		if (IS_ERR(pool[i].task)) {
			int err = PTR_ERR(pool[i].task);

			pool[i].task = NULL;
			pool_stop();
			pool_users--;
			return err;
		}
	}
	return 0;
fail:
	pool_users--;
	return -ENOMEM;
}

static void pool_put(void)
{
	if (--pool_users == 0)
		pool_stop();
}

static int cpu_per_mcmd_get(void *data, u64 *val)
{
	u64 *c = data;
	u64 cmds = c[C_ACCEPTED] + c[C_REJECTED];

	*val = cmds ? div64_u64(c[C_RELAY_NS] * 1000000, cmds) : 0;
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(cpu_per_mcmd_fops, cpu_per_mcmd_get, NULL, "%llu\n");

struct gpunvme_bridge *gpunvme_shim_bridge_start(void *ctx, u64 *counters, struct device *dev,
						 u16 qid, u32 threads, int *err)
{
	struct gpunvme_bridge *b = kzalloc(sizeof(*b), GFP_KERNEL);
	struct gpunvme_relay_thread *t;
	char name[64];
	unsigned int i;
	int ret;

	if (!b) {
		*err = -ENOMEM;
		return NULL;
	}
	b->ctx = ctx;
	b->counters = counters;
	snprintf(name, sizeof(name), "gpunvme-%s-q%u", dev_name(dev), qid);
	b->dir = debugfs_create_dir(name, NULL);
	for (i = 0; i < ARRAY_SIZE(counter_names); i++)
		debugfs_create_u64(counter_names[i], 0444, b->dir, &counters[i]);
	debugfs_create_file_unsafe("cpu_ns_per_million_commands", 0444, b->dir, counters,
				   &cpu_per_mcmd_fops);

	mutex_lock(&pool_lock);
	ret = pool_get(threads);
	if (ret) {
		mutex_unlock(&pool_lock);
		debugfs_remove_recursive(b->dir);
		kfree(b);
		*err = ret;
		return NULL;
	}
	t = &pool[0];
	for (i = 1; i < pool_size; i++)
		if (pool[i].npairs < t->npairs)
			t = &pool[i];
	b->t = t;
	mutex_lock(&t->lock);
	list_add_tail(&b->node, &t->pairs);
	t->npairs++;
	mutex_unlock(&t->lock);
	mutex_unlock(&pool_lock);
	return b;
}

/* Once this returns, no thread runs or will run the pair's relay. */
void gpunvme_shim_bridge_stop(struct gpunvme_bridge *b)
{
	struct gpunvme_relay_thread *t = b->t;

	mutex_lock(&pool_lock);
	mutex_lock(&t->lock);
	list_del(&b->node);
	t->npairs--;
	mutex_unlock(&t->lock);
	pool_put();
	mutex_unlock(&pool_lock);
	debugfs_remove_recursive(b->dir);
	kfree(b);
}
