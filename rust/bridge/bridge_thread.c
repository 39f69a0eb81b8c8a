// SPDX-License-Identifier: GPL-2.0-only
/*
 * The threads that run the shared-mode relay (rust/bridge.rs), and each
 * pair's debugfs counters. The 7.3 Rust crate has no kthread API; this is
 * the whole of the C side.
 *
 * A small pool serves every shared pair of every controller: at most one
 * thread per online CPU (module parameter relay_threads lowers it). Threads
 * start as pairs come (a new pair gets a thread of its own while the cap
 * allows, else the thread serving the fewest) and all stop with the last
 * pair, so a machine with no shared pair runs no relay thread, and a thread
 * left with no pair sleeps until it gets one. A pair is served by one
 * thread for its whole life (its relay state is never handed over).
 *
 * Each pass over a thread's pairs spends at most BUDGET page checks on new
 * commands of one file (the first command a step is allowed is always
 * taken, so a file can go one command's cost over), shared by the file's
 * pairs on this thread; the list turns by one pair each pass, so each of
 * them in turn goes first. A file that opens more pairs gets more queues,
 * not more of the relay. A thread that serves one file only gives each of
 * its pairs a whole BUDGET: nobody waits behind it, and splitting the
 * budget would only add passes (each one polls every pair).
 *
 * CPU use is bounded: a thread spins only for a short window after the
 * last progress on any of its pairs (relay_spin_us; 10 ms while one of
 * them has commands on the controller), then sleeps, doubling from 20 us
 * up to 1 ms, and snaps back to spinning on progress. Each pair's share is measured (relay_ns) and
 * shown per million commands.
 */
#include <linux/debugfs.h>
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/ktime.h>
#include <linux/kthread.h>
#include <linux/list.h>
#include <linux/math64.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include "shim.h"

/* rust/bridge.rs `Step`, and its `BUDGET` (one value, defined there). */
struct gpunvme_bridge_step {
	u32 spent;
	bool progress;
};
extern const u32 gpunvme_bridge_budget;
#define GPUNVME_BRIDGE_BUDGET gpunvme_bridge_budget

struct gpunvme_bridge_step gpunvme_bridge_step(void *ctx, u32 budget);
bool gpunvme_bridge_busy(void *ctx);

/* Order of the u64 counters in rust/bridge.rs `Counters`. */
static const char *const counter_names[] = {
	"polls", "sq_doorbell_writes", "cq_doorbell_writes",
	"cqes_mirrored", "max_sq_tail", "bad_doorbell_values",
	"sqes_accepted", "sqes_rejected", "relay_ns",
	"file_pass_checks_max",
};
enum { C_ACCEPTED = 6, C_REJECTED = 7, C_RELAY_NS = 8, C_FILE_PASS_MAX = 9 };

struct gpunvme_relay_thread {
	struct task_struct *task;
	struct mutex lock;		/* the lists, and every step on them */
	struct list_head pairs;
	unsigned int npairs;
	struct list_head files;		/* gpunvme_relay_file, one per file served */
	unsigned int nfiles;
	wait_queue_head_t wake;		/* a thread with no pair waits here */
};

/* One file's share of a thread's passes (its pairs on this thread). */
struct gpunvme_relay_file {
	struct list_head node;
	const void *key;		/* the file's RelayTotals: compared, never read; alive while
					 * one of the file's pairs is here (its Bridge holds it) */
	unsigned int npairs;
	u32 spent;			/* page checks spent on it in this pass */
};

struct gpunvme_bridge {
	struct list_head node;
	struct gpunvme_relay_thread *t;
	struct gpunvme_relay_file *file;
	struct dentry *dir;
	void *ctx;
	u64 *counters;
};

static DEFINE_MUTEX(pool_lock);
static struct gpunvme_relay_thread *pool;	/* room for pool_cap threads */
static unsigned int pool_cap, pool_size, pool_users;	/* pool_size started */

/*
 * How long a thread keeps polling after it last moved something, before it
 * backs off to sleeps. The GPU cannot wake a sleeping thread: a command
 * that comes after a longer pause waits for the sleep to end (up to 1 ms).
 * In C because the 7.3 Rust crate keeps its parameters out of sysfs.
 */
static unsigned int relay_spin_us = 200;
module_param(relay_spin_us, uint, 0644);
MODULE_PARM_DESC(relay_spin_us,
		 "Microseconds a shared-mode relay thread keeps polling after it last moved a command, before it sleeps (20 us doubling to 1 ms). Longer: less latency after pauses, a CPU busy for that long. Default 200.");

/*
 * With commands on the controller the thread polls this long after its last
 * progress, whatever relay_spin_us says: a completion later than the spin
 * (a large read, a busy or QLC SSD: hundreds of microseconds) would
 * otherwise wait for a sleep to end. Bounded, so a controller that stopped
 * answering does not keep a CPU busy.
 */
#define GPUNVME_BRIDGE_BUSY_SPIN_NS (10 * NSEC_PER_MSEC)

static int gpunvme_relay_fn(void *data)
{
	struct gpunvme_relay_thread *t = data;
	unsigned int sleep_us = 20;
	u64 last = ktime_get_ns();

	while (!kthread_should_stop()) {
		struct gpunvme_relay_file *f;
		struct gpunvme_bridge *b;
		bool progress = false, busy = false, shared;

		if (!READ_ONCE(t->npairs)) {
			wait_event_interruptible(t->wake, READ_ONCE(t->npairs) || kthread_should_stop());
			continue;
		}

		mutex_lock(&t->lock);
		shared = t->nfiles > 1;
		list_for_each_entry(f, &t->files, node)
			f->spent = 0;
		list_for_each_entry(b, &t->pairs, node) {
			u64 start = ktime_get_ns();
			u32 budget = GPUNVME_BRIDGE_BUDGET;
			struct gpunvme_bridge_step s;

			if (shared)
				budget -= min(b->file->spent, budget);
			s = gpunvme_bridge_step(b->ctx, budget);
			b->file->spent += s.spent;
			progress |= s.progress;
			busy |= gpunvme_bridge_busy(b->ctx);
			b->counters[C_RELAY_NS] += ktime_get_ns() - start;
			/* Each step is bounded (BUDGET page checks): yield between pairs. */
			cond_resched();
		}
		if (shared) {
			/* What each file got this pass, for debugfs. */
			list_for_each_entry(b, &t->pairs, node)
				if (b->file->spent > b->counters[C_FILE_PASS_MAX])
					b->counters[C_FILE_PASS_MAX] = b->file->spent;
		}
		/* The next pass starts one pair later: a file's pairs take turns first. */
		list_rotate_left(&t->pairs);
		mutex_unlock(&t->lock);
		if (progress) {
			last = ktime_get_ns();
			sleep_us = 20;
			cond_resched();
			continue;
		}
		if (ktime_get_ns() - last < (busy ? GPUNVME_BRIDGE_BUSY_SPIN_NS : (u64)READ_ONCE(relay_spin_us) * NSEC_PER_USEC)) {
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
		kthread_stop(pool[i].task);
	kfree(pool);
	pool = NULL;
	pool_cap = pool_size = 0;
}

/* Under pool_lock: the thread for a new pair, started if need be. */
static struct gpunvme_relay_thread *pool_pick(unsigned int want, int *err)
{
	struct gpunvme_relay_thread *t = NULL;
	unsigned int i;

	if (!pool) {
		pool_cap = num_online_cpus();
		if (want && want < pool_cap)
			pool_cap = want;
		pool = kcalloc(pool_cap, sizeof(*pool), GFP_KERNEL);
		if (!pool) {
			*err = -ENOMEM;
			return NULL;
		}
	}
	for (i = 0; i < pool_size; i++)
		if (!t || pool[i].npairs < t->npairs)
			t = &pool[i];
	if (t && (!t->npairs || pool_size == pool_cap))
		return t;
	/* Every running thread has pairs and the cap allows one more. */
	t = &pool[pool_size];
	mutex_init(&t->lock);
	INIT_LIST_HEAD(&t->pairs);
	INIT_LIST_HEAD(&t->files);
	init_waitqueue_head(&t->wake);
	t->task = kthread_run(gpunvme_relay_fn, t, "gpunvme-relay%u", pool_size);
	if (IS_ERR(t->task)) {
		*err = PTR_ERR(t->task);
		if (!pool_size)
			pool_stop();
		return NULL;
	}
	pool_size++;
	return t;
}

static int cpu_per_mcmd_get(void *data, u64 *val)
{
	u64 *c = data;
	u64 cmds = c[C_ACCEPTED] + c[C_REJECTED];

	*val = cmds ? div64_u64(c[C_RELAY_NS] * 1000000, cmds) : 0;
	return 0;
}
DEFINE_DEBUGFS_ATTRIBUTE(cpu_per_mcmd_fops, cpu_per_mcmd_get, NULL, "%llu\n");

/* Under t->lock: the file's share of t, made from `spare` if it has none yet. */
static struct gpunvme_relay_file *file_join(struct gpunvme_relay_thread *t, const void *key,
					    struct gpunvme_relay_file **spare)
{
	struct gpunvme_relay_file *f;

	list_for_each_entry(f, &t->files, node)
		if (f->key == key)
			goto found;
	f = *spare;
	*spare = NULL;
	f->key = key;
	list_add_tail(&f->node, &t->files);
	t->nfiles++;
found:
	f->npairs++;
	return f;
}

/* Under t->lock. */
static void file_leave(struct gpunvme_relay_thread *t, struct gpunvme_relay_file *f)
{
	if (--f->npairs)
		return;
	list_del(&f->node);
	t->nfiles--;
	kfree(f);
}

struct gpunvme_bridge *gpunvme_shim_bridge_start(void *ctx, u64 *counters, struct device *dev,
						 u16 qid, u32 threads, const void *file, int *err)
{
	struct gpunvme_bridge *b = kzalloc(sizeof(*b), GFP_KERNEL);
	/* Allocated before the locks, freed below if the file has its share already. */
	struct gpunvme_relay_file *spare = kzalloc(sizeof(*spare), GFP_KERNEL);
	struct gpunvme_relay_thread *t;
	char name[64];
	unsigned int i;
	int ret;

	if (!b || !spare) {
		kfree(b);
		kfree(spare);
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
	t = pool_pick(threads, &ret);
	if (!t) {
		mutex_unlock(&pool_lock);
		debugfs_remove_recursive(b->dir);
		kfree(b);
		kfree(spare);
		*err = ret;
		return NULL;
	}
	pool_users++;
	b->t = t;
	mutex_lock(&t->lock);
	b->file = file_join(t, file, &spare);
	list_add_tail(&b->node, &t->pairs);
	WRITE_ONCE(t->npairs, t->npairs + 1);
	mutex_unlock(&t->lock);
	wake_up(&t->wake);
	mutex_unlock(&pool_lock);
	kfree(spare);
	return b;
}

/* Once this returns, no thread runs or will run the pair's relay. */
void gpunvme_shim_bridge_stop(struct gpunvme_bridge *b)
{
	struct gpunvme_relay_thread *t = b->t;

	mutex_lock(&pool_lock);
	mutex_lock(&t->lock);
	list_del(&b->node);
	file_leave(t, b->file);
	WRITE_ONCE(t->npairs, t->npairs - 1);
	mutex_unlock(&t->lock);
	if (--pool_users == 0)
		pool_stop();
	mutex_unlock(&pool_lock);
	debugfs_remove_recursive(b->dir);
	kfree(b);
}
