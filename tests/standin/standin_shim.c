// SPDX-License-Identifier: GPL-2.0-only
/*
 * gpunvme_standin: the dma-buf importer half (the Rust crate of 7.3 has no
 * dma-buf bindings). One import = dma_buf_get + dynamic attach for the edu
 * device (peer2peer allowed, revocable) + one DMA mapping.
 *
 * Locking: imp->sgt is protected by the dma-buf's reservation lock;
 * imp->revoked by imp->lock, which a DMA user holds from
 * standin_imp_begin() to standin_imp_end(). Order: resv, then imp->lock
 * (the invalidate callback runs under resv and waits out a transfer in
 * flight, bounded by the edu deadline); nothing takes resv under imp->lock.
 */
#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/err.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "standin_shim.h"
#include "standin_uapi.h"

MODULE_IMPORT_NS("DMA_BUF");

/* The ioctl numbers as the C compiler sees the header; checked at load. */
const u32 standin_uapi_ioc[5] = {
	STANDIN_IOC_IMPORT, STANDIN_IOC_WRITE32, STANDIN_IOC_READ,
	STANDIN_IOC_RAW_WRITE32, STANDIN_IOC_RELEASE,
};

struct standin_imp {
	struct device *dev;
	struct dma_buf *dmabuf;
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	struct mutex lock;
	bool revoked;
	u64 dma_addr;
	u64 len;
	u32 nents;
};

/*
 * Test knob: a misbehaving importer that ignores invalidate_mappings and
 * keeps its mapping (and keeps DMAing) until IOC_RELEASE or close. The
 * exporter must then keep the memory, not free it.
 */
static bool hold_mappings;
module_param(hold_mappings, bool, 0644);
MODULE_PARM_DESC(hold_mappings, "test only: ignore exporters' invalidate_mappings and keep mapping");

static void standin_invalidate(struct dma_buf_attachment *attach)
{
	struct standin_imp *imp = attach->importer_priv;

	dma_resv_assert_held(attach->dmabuf->resv);
	if (READ_ONCE(hold_mappings)) {
		dev_info(imp->dev, "import of dma-buf %p: invalidate ignored (hold_mappings)\n", imp->dmabuf);
		return;
	}
	/* Waits for a transfer in flight; none starts after this. */
	mutex_lock(&imp->lock);
	imp->revoked = true;
	mutex_unlock(&imp->lock);
	/* The exporter waits for unmap: do it now (bounded time). */
	if (imp->sgt) {
		dma_buf_unmap_attachment(attach, imp->sgt, DMA_BIDIRECTIONAL);
		imp->sgt = NULL;
	}
	dev_info(imp->dev, "import of dma-buf %p revoked by its exporter; unmapped\n", imp->dmabuf);
}

/*
 * Test knob: hold probe() just after /dev/gpunvme_standin is registered, so
 * that a test can open and use the node before probe() returns (an open can
 * run as soon as misc_register() does). Released by writing 0; 30 s deadline.
 */
static bool hold_probe;
module_param(hold_probe, bool, 0644);
MODULE_PARM_DESC(hold_probe, "test only: hold probe() after the device node is registered until this is 0");

void standin_probe_hold(struct device *dev)
{
	unsigned long deadline = jiffies + 30 * HZ;

	if (!READ_ONCE(hold_probe))
		return;
	dev_info(dev, "probe held after registering /dev/gpunvme_standin (hold_probe)\n");
	while (READ_ONCE(hold_probe)) {
		if (time_after(jiffies, deadline)) {
			dev_err(dev, "hold_probe still set after 30 s; probe goes on\n");
			return;
		}
		msleep(5);
	}
	dev_info(dev, "probe released (hold_probe)\n");
}

static const struct dma_buf_attach_ops standin_importer_ops = {
	.allow_peer2peer = true,
	.invalidate_mappings = standin_invalidate,
};

struct standin_imp *standin_imp_new(struct device *dev, int fd, int *err)
{
	struct standin_imp *imp;
	struct sg_table *sgt;
	long wait;
	int ret;

	imp = kzalloc(sizeof(*imp), GFP_KERNEL);
	if (!imp) {
		*err = -ENOMEM;
		return NULL;
	}
	imp->dev = dev;
	mutex_init(&imp->lock);

	imp->dmabuf = dma_buf_get(fd);
	if (IS_ERR(imp->dmabuf)) {
		ret = PTR_ERR(imp->dmabuf);
		dev_warn(dev, "IMPORT: dma_buf_get(%d) failed: %d\n", fd, ret);
		goto free;
	}
	imp->attach = dma_buf_dynamic_attach(imp->dmabuf, dev, &standin_importer_ops, imp);
	if (IS_ERR(imp->attach)) {
		ret = PTR_ERR(imp->attach);
		dev_warn(dev, "IMPORT: dma_buf_dynamic_attach (%s) failed: %d\n",
			 imp->dmabuf->exp_name, ret);
		goto put;
	}

	dma_resv_lock(imp->dmabuf->resv, NULL);
	sgt = dma_buf_map_attachment(imp->attach, DMA_BIDIRECTIONAL);
	if (IS_ERR(sgt)) {
		ret = PTR_ERR(sgt);
		dma_resv_unlock(imp->dmabuf->resv);
		dev_warn(dev, "IMPORT: dma_buf_map_attachment (%s) failed: %d\n",
			 imp->dmabuf->exp_name, ret);
		goto detach;
	}
	imp->sgt = sgt;
	/* A dynamic importer waits for the exporter's kernel fences itself. */
	wait = dma_resv_wait_timeout(imp->dmabuf->resv, DMA_RESV_USAGE_KERNEL, false,
				     msecs_to_jiffies(1000));
	if (wait <= 0 || !sgt->nents || !sg_dma_len(sgt->sgl)) {
		ret = wait < 0 ? wait : wait == 0 ? -ETIMEDOUT : -EINVAL;
		dev_warn(dev, "IMPORT: %s: fences/empty mapping: %d\n", imp->dmabuf->exp_name, ret);
		dma_buf_unmap_attachment(imp->attach, sgt, DMA_BIDIRECTIONAL);
		imp->sgt = NULL;
		dma_resv_unlock(imp->dmabuf->resv);
		goto detach;
	}
	imp->dma_addr = sg_dma_address(sgt->sgl);
	imp->len = sg_dma_len(sgt->sgl);
	imp->nents = sgt->nents;
	dma_resv_unlock(imp->dmabuf->resv);
	dev_info(dev, "IMPORT: %s dma-buf of %zu bytes: dma %#llx + %#llx (%u entries)\n",
		 imp->dmabuf->exp_name, imp->dmabuf->size, imp->dma_addr, imp->len, imp->nents);
	return imp;

detach:
	dma_buf_detach(imp->dmabuf, imp->attach);
put:
	dma_buf_put(imp->dmabuf);
free:
	mutex_destroy(&imp->lock);
	kfree(imp);
	*err = ret;
	return NULL;
}

void standin_imp_info(struct standin_imp *imp, u64 *dma_addr, u64 *len, u32 *nents)
{
	*dma_addr = imp->dma_addr;
	*len = imp->len;
	*nents = imp->nents;
}

/*
 * Start a transfer of @len bytes at @offset: on success (0) *addr is the bus
 * address and imp->lock is held until standin_imp_end().
 */
int standin_imp_begin(struct standin_imp *imp, u64 offset, u64 len, u64 *addr)
{
	mutex_lock(&imp->lock);
	if (imp->revoked) {
		mutex_unlock(&imp->lock);
		return -ENODEV;
	}
	if (!len || offset >= imp->len || len > imp->len - offset) {
		mutex_unlock(&imp->lock);
		dev_warn(imp->dev, "range %#llx+%#llx outside the import (%#llx bytes)\n",
			 offset, len, imp->len);
		return -EINVAL;
	}
	*addr = imp->dma_addr + offset;
	return 0;
}

void standin_imp_end(struct standin_imp *imp)
{
	mutex_unlock(&imp->lock);
}

/* Unmap, detach, put. No begin/end may be running (the caller's lock). */
void standin_imp_release(struct standin_imp *imp)
{
	dma_resv_lock(imp->dmabuf->resv, NULL);
	if (imp->sgt) {
		dma_buf_unmap_attachment(imp->attach, imp->sgt, DMA_BIDIRECTIONAL);
		imp->sgt = NULL;
	}
	dma_resv_unlock(imp->dmabuf->resv);
	dma_buf_detach(imp->dmabuf, imp->attach);
	dma_buf_put(imp->dmabuf);
	mutex_destroy(&imp->lock);
	kfree(imp);
}
