// SPDX-License-Identifier: GPL-2.0-only
/*
 * dma-buf importer for data buffers (GPUNVME_IOC_MAP_DMABUF), the way RDMA
 * imports GPU memory (drivers/infiniband/core/umem_dmabuf.c): a dynamic
 * attachment to the NVMe device that allows peer-to-peer, pinned, mapped,
 * with the exporter's fences waited for (bounded).
 *
 * An exporter that cannot reach the controller peer-to-peer clears
 * attach->peer2peer and would hand out (migrate to) system memory instead:
 * that is refused, so "GPU memory" never silently becomes host memory.
 *
 * When the exporter invalidates the mapping, its pages are first taken out
 * of the importing file's own pages (rust/dma/buffers.rs), so shared-mode
 * commands naming them are refused from then on. It is unmapped only once
 * every command the file's relays accepted before that has completed
 * (waited for, bounded). When they do not complete in time, or the file has
 * raw pairs (whose commands the module never sees), whether the controller
 * may still write the pages is unknown: the mapping is kept until the
 * import is dropped (UNMAP, which needs the file's pairs gone, or close),
 * and the exporter learns it from the mapping it still sees.
 */
#include <linux/dma-buf.h>
#include <linux/dma-resv.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "shim.h"

/*
 * rust/shim.rs: forget mapping `handle` of the file whose pages are
 * `buffers`; returns how many accepted commands may still name them and
 * sets *pending to what drain must wait for (GPUNVME_PENDING_UNKNOWN: raw
 * pairs, not knowable). drain waits up to 1 s; true when all completed.
 */
#define GPUNVME_PENDING_UNKNOWN 3
u32 gpunvme_buffers_revoke(void *buffers, u32 handle, u32 *pending);
bool gpunvme_buffers_drain(void *buffers, u32 pending);

struct gpunvme_import {
	struct dma_buf *dmabuf;
	struct dma_buf_attachment *attach;
	struct sg_table *sgt;
	bool pinned;
	bool revoked;
	void *buffers;
	u32 handle;
};

static void gpunvme_import_invalidate(struct dma_buf_attachment *attach)
{
	struct gpunvme_import *imp = attach->importer_priv;
	u32 pending, n;

	dma_resv_assert_held(attach->dmabuf->resv);
	WRITE_ONCE(imp->revoked, true);
	if (!imp->sgt)
		return; /* not mapped yet (MAP_DMABUF sees `revoked`) or already unmapped */
	n = gpunvme_buffers_revoke(imp->buffers, imp->handle, &pending);
	if (pending == GPUNVME_PENDING_UNKNOWN) {
		dev_warn(attach->dev, "dma-buf import invalidated by its exporter while this file has raw queue pairs, whose commands may still name it: the mapping is kept until it is unmapped or the file closed\n");
		return;
	}
	if (n) {
		dev_info(attach->dev, "dma-buf import invalidated by its exporter: waiting up to 1 s for %u accepted command(s) that may name it\n", n);
		if (!gpunvme_buffers_drain(imp->buffers, pending)) {
			dev_warn(attach->dev, "dma-buf import invalidated by its exporter: accepted commands still in flight after 1 s: the mapping is kept until it is unmapped or the file closed\n");
			return;
		}
	}
	if (imp->sgt) {
		dma_buf_unmap_attachment(attach, imp->sgt, DMA_BIDIRECTIONAL);
		imp->sgt = NULL;
		dev_warn(attach->dev, "dma-buf import invalidated by its exporter: I/O to it now fails\n");
	}
}

static const struct dma_buf_attach_ops gpunvme_import_ops = {
	.allow_peer2peer = true,
	.invalidate_mappings = gpunvme_import_invalidate,
};

static void import_teardown(struct gpunvme_import *imp)
{
	if (imp->attach) {
		dma_resv_lock(imp->dmabuf->resv, NULL);
		if (imp->sgt && READ_ONCE(imp->revoked))
			dev_info(imp->attach->dev, "dma-buf import revoked earlier: its kept mapping is released\n");
		if (imp->sgt)
			dma_buf_unmap_attachment(imp->attach, imp->sgt, DMA_BIDIRECTIONAL);
		if (imp->pinned)
			dma_buf_unpin(imp->attach);
		dma_resv_unlock(imp->dmabuf->resv);
		dma_buf_detach(imp->dmabuf, imp->attach);
	}
	dma_buf_put(imp->dmabuf);
	kfree(imp);
}

struct gpunvme_import *gpunvme_shim_import(struct device *dev, int fd, u64 *dma_addrs,
					   u64 max_pages, u64 *len, void *buffers, u32 handle,
					   int *err)
{
	struct gpunvme_import *imp;
	struct scatterlist *sg;
	u64 filled = 0;
	long waited;
	int i, ret;

	imp = kzalloc(sizeof(*imp), GFP_KERNEL);
	if (!imp) {
		*err = -ENOMEM;
		return NULL;
	}
	imp->buffers = buffers;
	imp->handle = handle;
	imp->dmabuf = dma_buf_get(fd);
	if (IS_ERR(imp->dmabuf)) {
		*err = PTR_ERR(imp->dmabuf);
		kfree(imp);
		return NULL;
	}
	if (imp->dmabuf->size % PAGE_SIZE || imp->dmabuf->size / PAGE_SIZE > max_pages) {
		dev_warn(dev, "MAP_DMABUF: %zu bytes: need a multiple of 4 KiB and at most %llu pages\n",
			 imp->dmabuf->size, max_pages);
		ret = -EINVAL;
		goto out;
	}
	imp->attach = dma_buf_dynamic_attach(imp->dmabuf, dev, &gpunvme_import_ops, imp);
	if (IS_ERR(imp->attach)) {
		ret = PTR_ERR(imp->attach);
		imp->attach = NULL;
		dev_warn(dev, "MAP_DMABUF: attach to %s's dma-buf failed: %d\n",
			 imp->dmabuf->exp_name, ret);
		goto out;
	}
	if (!imp->attach->peer2peer) {
		dev_warn(dev, "MAP_DMABUF: exporter %s has no peer-to-peer path to this controller and would move the buffer to system memory; refused\n",
			 imp->dmabuf->exp_name);
		ret = -EOPNOTSUPP;
		goto out;
	}

	dma_resv_lock(imp->dmabuf->resv, NULL);
	ret = dma_buf_pin(imp->attach);
	if (!ret) {
		imp->pinned = true;
		imp->sgt = dma_buf_map_attachment(imp->attach, DMA_BIDIRECTIONAL);
		if (IS_ERR(imp->sgt)) {
			ret = PTR_ERR(imp->sgt);
			imp->sgt = NULL;
		}
	}
	dma_resv_unlock(imp->dmabuf->resv);
	if (ret) {
		dev_warn(dev, "MAP_DMABUF: pin/map of %s's dma-buf failed: %d\n", imp->dmabuf->exp_name, ret);
		goto out;
	}
	/* The exporter may still be filling or moving it. */
	waited = dma_resv_wait_timeout(imp->dmabuf->resv, DMA_RESV_USAGE_KERNEL, true, 5 * HZ);
	if (waited <= 0) {
		ret = waited ? waited : -ETIMEDOUT;
		dev_warn(dev, "MAP_DMABUF: exporter fences not signalled within 5 s\n");
		goto out;
	}
	for_each_sgtable_dma_sg(imp->sgt, sg, i) {
		dma_addr_t a = sg_dma_address(sg);
		unsigned int n, l = sg_dma_len(sg);

		if (a % PAGE_SIZE || l % PAGE_SIZE) {
			dev_warn(dev, "MAP_DMABUF: segment %pad+%u not 4 KiB aligned; refused\n", &a, l);
			ret = -EINVAL;
			goto out;
		}
		for (n = 0; n < l / PAGE_SIZE && filled < max_pages; n++)
			dma_addrs[filled++] = a + (u64)n * PAGE_SIZE;
	}
	*len = filled * PAGE_SIZE;
	return imp;
out:
	import_teardown(imp);
	*err = ret;
	return NULL;
}

void gpunvme_shim_unimport(struct gpunvme_import *imp)
{
	import_teardown(imp);
}

/*
 * The controller is stopped (disabled, or bus mastering off): a mapping
 * kept after a revoke (commands that might still name it) can go now.
 */
void gpunvme_shim_import_release_kept(struct gpunvme_import *imp)
{
	dma_resv_lock(imp->dmabuf->resv, NULL);
	if (READ_ONCE(imp->revoked) && imp->sgt) {
		dma_buf_unmap_attachment(imp->attach, imp->sgt, DMA_BIDIRECTIONAL);
		imp->sgt = NULL;
		dev_info(imp->attach->dev, "dma-buf import revoked earlier: its kept mapping is released\n");
	}
	dma_resv_unlock(imp->dmabuf->resv);
}

/* Has the exporter invalidated the mapping since it was made? */
bool gpunvme_shim_import_revoked(struct gpunvme_import *imp)
{
	return READ_ONCE(imp->revoked);
}
