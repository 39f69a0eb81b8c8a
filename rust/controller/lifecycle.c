// SPDX-License-Identifier: GPL-2.0-only
/*
 * The controller's life outside probe and remove, where the 7.3 Rust crate
 * has no hook: PCI .shutdown (reboot, kexec), AER error handlers, system
 * sleep (dev_pm_ops), a periodic watch (CSTS, exports let go of), poll()
 * on the device nodes, and the fake_csts fault-injection knob. Every
 * callback forwards to one Rust function (rust/controller/lifecycle.rs)
 * with the controller's context; the decisions are all made there.
 */
#include <linux/delay.h>
#include <linux/device.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/poll.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/workqueue.h>
#include "shim.h"

/* rust/controller/lifecycle.rs */
int gpunvme_pci_event(void *ctx, u32 event);
bool gpunvme_watch_tick(void *ctx);
/* rust/uapi/file.rs */
bool gpunvme_file_poll(void *state, struct file *file, poll_table *wait);

/* Events, as rust/controller/lifecycle.rs `Event` numbers them. */
enum {
	EV_SHUTDOWN = 1,
	EV_ERROR_NORMAL = 2,	/* AER: the link works, the device may not */
	EV_ERROR_FROZEN = 3,	/* AER: MMIO blocked until a reset */
	EV_ERROR_GONE = 4,	/* AER: permanent failure */
	EV_SLOT_RESET = 5,
	EV_RESUME = 6,		/* AER: traffic may flow again */
	EV_SUSPEND = 7,		/* system sleep */
	EV_PM_RESUME = 8,
};

/* Bound controllers and their Rust contexts; callbacks run under the
 * device lock, as remove does, so a context found here stays valid. */
struct hook {
	struct list_head node;
	struct pci_dev *pdev;
	void *ctx;
};
static LIST_HEAD(hooks);
static DEFINE_MUTEX(hooks_lock);

static void *ctx_of(struct pci_dev *pdev)
{
	struct hook *h;
	void *ctx = NULL;

	mutex_lock(&hooks_lock);
	list_for_each_entry(h, &hooks, node)
		if (h->pdev == pdev)
			ctx = h->ctx;
	mutex_unlock(&hooks_lock);
	return ctx;
}

static int event(struct pci_dev *pdev, u32 ev)
{
	void *ctx = ctx_of(pdev);

	return ctx ? gpunvme_pci_event(ctx, ev) : 0;
}

static void gpunvme_pci_shutdown(struct pci_dev *pdev)
{
	event(pdev, EV_SHUTDOWN);
}

static pci_ers_result_t gpunvme_error_detected(struct pci_dev *pdev, pci_channel_state_t state)
{
	switch (state) {
	case pci_channel_io_normal:
		event(pdev, EV_ERROR_NORMAL);
		return PCI_ERS_RESULT_NEED_RESET;
	case pci_channel_io_frozen:
		event(pdev, EV_ERROR_FROZEN);
		return PCI_ERS_RESULT_NEED_RESET;
	default:
		event(pdev, EV_ERROR_GONE);
		return PCI_ERS_RESULT_DISCONNECT;
	}
}

static pci_ers_result_t gpunvme_slot_reset(struct pci_dev *pdev)
{
	/* After a reset config space is back to defaults. */
	pci_restore_state(pdev);
	pci_save_state(pdev);
	pci_set_master(pdev);
	return event(pdev, EV_SLOT_RESET) ? PCI_ERS_RESULT_DISCONNECT : PCI_ERS_RESULT_RECOVERED;
}

static void gpunvme_err_resume(struct pci_dev *pdev)
{
	event(pdev, EV_RESUME);
}

static const struct pci_error_handlers gpunvme_err_handlers = {
	.error_detected = gpunvme_error_detected,
	.slot_reset = gpunvme_slot_reset,
	.resume = gpunvme_err_resume,
};

static int gpunvme_pm_suspend(struct device *dev)
{
	return event(to_pci_dev(dev), EV_SUSPEND);
}

static int gpunvme_pm_resume(struct device *dev)
{
	return event(to_pci_dev(dev), EV_PM_RESUME);
}

static DEFINE_SIMPLE_DEV_PM_OPS(gpunvme_pm_ops, gpunvme_pm_suspend, gpunvme_pm_resume);

/*
 * The Rust crate fills in only probe and remove of its pci_driver; the
 * other hooks are set here, on the registered driver, at the first probe
 * (always the same values, so a second probe's store changes nothing).
 * The PCI core reads them only while the driver is bound to a device.
 */
int gpunvme_shim_hooks_add(struct device *dev, void *ctx)
{
	struct pci_dev *pdev = to_pci_dev(dev);
	struct pci_driver *drv = to_pci_driver(dev->driver);
	struct hook *h = kzalloc(sizeof(*h), GFP_KERNEL);

	if (!h)
		return -ENOMEM;
	h->pdev = pdev;
	h->ctx = ctx;
	mutex_lock(&hooks_lock);
	drv->shutdown = gpunvme_pci_shutdown;
	drv->err_handler = &gpunvme_err_handlers;
	drv->driver.pm = pm_sleep_ptr(&gpunvme_pm_ops);
	list_add(&h->node, &hooks);
	mutex_unlock(&hooks_lock);
	/* slot_reset restores this. */
	pci_save_state(pdev);
	return 0;
}

/* Forget `dev`'s context; returns it (for the Rust side to release). */
void *gpunvme_shim_hooks_del(struct device *dev)
{
	struct hook *h, *n;
	void *ctx = NULL;

	mutex_lock(&hooks_lock);
	list_for_each_entry_safe(h, n, &hooks, node) {
		if (h->pdev == to_pci_dev(dev)) {
			ctx = h->ctx;
			list_del(&h->node);
			kfree(h);
		}
	}
	mutex_unlock(&hooks_lock);
	return ctx;
}

/* The watch: gpunvme_watch_tick every period until it says stop. */
struct gpunvme_watch {
	struct delayed_work work;
	void *ctx;
	unsigned long period;
};

static void watch_fn(struct work_struct *w)
{
	struct gpunvme_watch *wt = container_of(to_delayed_work(w), struct gpunvme_watch, work);

	if (gpunvme_watch_tick(wt->ctx))
		schedule_delayed_work(&wt->work, wt->period);
}

struct gpunvme_watch *gpunvme_shim_watch_start(void *ctx, u32 period_ms)
{
	struct gpunvme_watch *wt = kzalloc(sizeof(*wt), GFP_KERNEL);

	if (!wt)
		return NULL;
	wt->ctx = ctx;
	wt->period = msecs_to_jiffies(period_ms);
	INIT_DELAYED_WORK(&wt->work, watch_fn);
	schedule_delayed_work(&wt->work, wt->period);
	return wt;
}

/* Once this returns the tick neither runs nor will run. */
void gpunvme_shim_watch_stop(struct gpunvme_watch *wt)
{
	cancel_delayed_work_sync(&wt->work);
	kfree(wt);
}

/*
 * poll() on the device nodes: the Rust crate's miscdevice builds its
 * file_operations without .poll, so each node's misc->fops is replaced,
 * right after registration, by a copy with .poll added. The copies are
 * static (one per Rust file type): open files point at them after their
 * node is gone. misc_open() reads misc->fops at each open.
 */
static struct file_operations poll_fops[2];
static const struct file_operations *poll_src[2];

static __poll_t gpunvme_poll(struct file *file, poll_table *wait)
{
	return gpunvme_file_poll(file->private_data, file, wait) ? EPOLLERR | EPOLLHUP : 0;
}

int gpunvme_shim_add_poll(struct miscdevice *misc)
{
	int i, ret = -ENOSPC;

	mutex_lock(&hooks_lock);
	for (i = 0; i < ARRAY_SIZE(poll_src); i++) {
		if (!poll_src[i]) {
			poll_fops[i] = *misc->fops;
			poll_fops[i].poll = gpunvme_poll;
			poll_src[i] = misc->fops;
		}
		if (poll_src[i] == misc->fops) {
			WRITE_ONCE(misc->fops, &poll_fops[i]);
			ret = 0;
			break;
		}
	}
	mutex_unlock(&hooks_lock);
	return ret;
}

/*
 * debugfs pci_event (rust/controller/debugfs.rs parses the name): run PCI
 * callback `ev` above as the PCI core would, under the device lock (taken
 * with a bounded trylock: unbind holds the lock while it removes the
 * file). What it cannot fake is the hardware side: MMIO keeps working
 * after a simulated "error_frozen", and "slot_reset" resets nothing.
 */
int gpunvme_shim_pci_event(struct device *dev, u32 ev, const char *name)
{
	int tries, ret = -ENODEV;

	if (ev < EV_SHUTDOWN || ev > EV_PM_RESUME)
		return -EINVAL;
	for (tries = 0; !device_trylock(dev); tries++) {
		if (tries == 100)
			return -EBUSY;
		msleep(10);
	}
	if (dev->driver) {
		dev_warn(dev, "fault injection: PCI event %s\n", name);
		ret = event(to_pci_dev(dev), ev);
	}
	device_unlock(dev);
	return ret;
}
