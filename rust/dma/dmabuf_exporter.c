// SPDX-License-Identifier: GPL-2.0-only
/*
 * dma-buf exporter for a queue pair's doorbell page and queue memory.
 *
 * The doorbell page is MMIO: it is exported the way VFIO exports a BAR
 * (drivers/vfio/pci/vfio_pci_dmabuf.c): a p2pdma provider on BAR0 and
 * dma_buf_phys_vec_to_sgt(), which picks the bus address or an IOMMU
 * mapping through the host bridge, or refuses an unsupported topology.
 * Only peer-to-peer importers that can be revoked may attach.
 *
 * Queue memory is coherent DMA memory of the NVMe device; an importer gets
 * it mapped for itself through dma_get_sgtable() + dma_map_sgtable().
 *
 * Every export is revocable: the module revokes it when the queue pair is
 * destroyed or the controller unbound, before that memory is freed; maps
 * fail with ENODEV afterwards. As vfio_pci_dmabuf.c does, every mapping is
 * counted from map to unmap, and revoking waits (bounded) for importers to
 * unmap after invalidate_mappings and for their fences. An importer that
 * does not let go in time is reported, and the caller keeps the memory
 * (rust/dma/registry.rs: quarantine) instead of freeing it. The dma-buf
 * pins this module (owner). The module's own reference is dropped once no
 * importer holds the export any more (the watch asks every tick), so it
 * never keeps the module loaded by itself.
 */
#include <linux/dma-buf.h>
#include <linux/dma-buf-mapping.h>
#include <linux/dma-mapping.h>
#include <linux/dma-resv.h>
#include <linux/mm.h>
#include <linux/scatterlist.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/slab.h>
#include <linux/wait.h>
#include "shim.h"

MODULE_IMPORT_NS("DMA_BUF");

struct gpunvme_export {
	struct dma_buf *dmabuf;
	struct device *dev;	/* the NVMe controller */
	bool mmio;
	bool revoked;
	/* Mappings importers hold; revoke waits for 0. */
	atomic_t maps;
	wait_queue_head_t unmapped;
	/* mmio */
	struct p2pdma_provider *provider;
	struct phys_vec phys;
	/* memory */
	void *cpu;
	dma_addr_t dma;
	size_t size;
};

static int gpunvme_export_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	struct gpunvme_export *exp = dmabuf->priv;

	if (exp->revoked)
		return -ENODEV;
	if (exp->mmio && !attach->peer2peer) {
		dev_warn(exp->dev, "doorbell dma-buf: %s is not a peer-to-peer importer; refused\n",
			 dev_name(attach->dev));
		return -EOPNOTSUPP;
	}
	if (!dma_buf_attach_revocable(attach)) {
		dev_warn(exp->dev, "dma-buf: importer %s cannot be revoked (no invalidate_mappings); refused\n",
			 dev_name(attach->dev));
		return -EOPNOTSUPP;
	}
	return 0;
}

/*
 * The queue memory's pages, in segments no longer than the importer may be
 * handed: dma_get_sgtable() gives one segment for a contiguous allocation,
 * and mapping a 2 MiB one for a device limited to 64 KiB is a DMA-API
 * violation (the debug kernel warns; an IOMMU may merge past the limit).
 */
static int gpunvme_export_sgtable(struct gpunvme_export *exp, struct device *importer,
				  struct sg_table *sgt)
{
	unsigned int count = exp->size >> PAGE_SHIFT, n = 0;
	unsigned int max = dma_get_max_seg_size(importer) & PAGE_MASK;
	struct sg_page_iter it;
	struct sg_table whole;
	struct page **pages;
	int ret;

	ret = dma_get_sgtable(exp->dev, &whole, exp->cpu, exp->dma, exp->size);
	if (ret)
		return ret;
	pages = kvmalloc_array(count, sizeof(*pages), GFP_KERNEL);
	if (!pages) {
		ret = -ENOMEM;
		goto out;
	}
	for_each_sgtable_page(&whole, &it, 0) {
		if (n == count)
			break;
		pages[n++] = sg_page_iter_page(&it);
	}
	ret = n != count ? -EINVAL :
		sg_alloc_table_from_pages_segment(sgt, pages, count, 0, exp->size,
						  max ? max : PAGE_SIZE, GFP_KERNEL);
	kvfree(pages);
out:
	sg_free_table(&whole);
	return ret;
}

static struct sg_table *gpunvme_export_map(struct dma_buf_attachment *attach,
					   enum dma_data_direction dir)
{
	struct gpunvme_export *exp = attach->dmabuf->priv;
	struct sg_table *sgt;
	int ret;

	dma_resv_assert_held(attach->dmabuf->resv);
	if (exp->revoked)
		return ERR_PTR(-ENODEV);

	if (exp->mmio) {
		sgt = dma_buf_phys_vec_to_sgt(attach, exp->provider, &exp->phys, 1,
					      exp->phys.len, dir);
		if (IS_ERR(sgt))
			dev_warn(exp->dev,
				 "doorbell dma-buf: no peer-to-peer path from %s to this controller (%pe); shared mode is the fallback\n",
				 dev_name(attach->dev), sgt);
		else
			atomic_inc(&exp->maps);
		return sgt;
	}

	sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	if (!sgt)
		return ERR_PTR(-ENOMEM);
	ret = gpunvme_export_sgtable(exp, attach->dev, sgt);
	if (ret)
		goto free;
	ret = dma_map_sgtable(attach->dev, sgt, dir, 0);
	if (ret)
		goto table;
	atomic_inc(&exp->maps);
	return sgt;
table:
	sg_free_table(sgt);
free:
	kfree(sgt);
	return ERR_PTR(ret);
}

static void gpunvme_export_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
				 enum dma_data_direction dir)
{
	struct gpunvme_export *exp = attach->dmabuf->priv;

	if (exp->mmio) {
		dma_buf_free_sgt(attach, sgt, dir);
	} else {
		dma_unmap_sgtable(attach->dev, sgt, dir, 0);
		sg_free_table(sgt);
		kfree(sgt);
	}
	if (atomic_dec_and_test(&exp->maps))
		wake_up_all(&exp->unmapped);
}

static void gpunvme_export_release(struct dma_buf *dmabuf)
{
	kfree(dmabuf->priv);
}

static const struct dma_buf_ops gpunvme_export_ops = {
	.attach = gpunvme_export_attach,
	.map_dma_buf = gpunvme_export_map,
	.unmap_dma_buf = gpunvme_export_unmap,
	.release = gpunvme_export_release,
};

/* Export and install an fd; on success the module holds one reference. */
static struct gpunvme_export *export_common(struct gpunvme_export *exp, size_t size, u32 flags,
					    int *fd, int *err)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	int ret;

	atomic_set(&exp->maps, 0);
	init_waitqueue_head(&exp->unmapped);
	info.ops = &gpunvme_export_ops;
	info.size = size;
	info.flags = flags;
	info.priv = exp;
	exp->dmabuf = dma_buf_export(&info);
	if (IS_ERR(exp->dmabuf)) {
		ret = PTR_ERR(exp->dmabuf);
		kfree(exp);
		*err = ret;
		return NULL;
	}
	get_dma_buf(exp->dmabuf);
	ret = dma_buf_fd(exp->dmabuf, flags);
	if (ret < 0) {
		dma_buf_put(exp->dmabuf);
		dma_buf_put(exp->dmabuf);	/* release frees exp */
		*err = ret;
		return NULL;
	}
	*fd = ret;
	return exp;
}

struct gpunvme_export *gpunvme_shim_export_mmio(struct device *dev, u64 bar_offset, u64 len,
						u32 flags, int *fd, int *err)
{
	struct pci_dev *pdev = to_pci_dev(dev);
	struct gpunvme_export *exp;
	int ret;

	if (bar_offset + len > pci_resource_len(pdev, 0)) {
		*err = -EINVAL;
		return NULL;
	}
	ret = pcim_p2pdma_init(pdev);
	if (ret) {
		*err = ret;
		return NULL;
	}
	exp = kzalloc(sizeof(*exp), GFP_KERNEL);
	if (!exp) {
		*err = -ENOMEM;
		return NULL;
	}
	exp->dev = dev;
	exp->mmio = true;
	exp->provider = pcim_p2pdma_provider(pdev, 0);
	if (!exp->provider) {
		kfree(exp);
		*err = -EOPNOTSUPP;
		return NULL;
	}
	exp->phys.paddr = pci_resource_start(pdev, 0) + bar_offset;
	exp->phys.len = len;
	return export_common(exp, len, flags, fd, err);
}

struct gpunvme_export *gpunvme_shim_export_mem(struct device *dev, void *cpu, dma_addr_t dma,
					       size_t size, u32 flags, int *fd, int *err)
{
	struct gpunvme_export *exp = kzalloc(sizeof(*exp), GFP_KERNEL);

	if (!exp) {
		*err = -ENOMEM;
		return NULL;
	}
	exp->dev = dev;
	exp->cpu = cpu;
	exp->dma = dma;
	exp->size = size;
	return export_common(exp, size, flags, fd, err);
}

/* How long importers get to unmap and to signal their fences. */
#define GPUNVME_REVOKE_TIMEOUT (5 * HZ)

/* The deadline of revokes started now: one for all of them, so revoking N
 * exports waits 5 s at most, not 5 s each. */
unsigned long gpunvme_shim_revoke_deadline(void)
{
	return jiffies + GPUNVME_REVOKE_TIMEOUT;
}

/* First half of a revoke: no importer maps the memory anew, and every
 * importer is told to unmap (its invalidate_mappings runs now). */
void gpunvme_shim_export_revoke_start(struct gpunvme_export *exp)
{
	struct dma_buf *dmabuf = exp->dmabuf;

	dma_resv_lock(dmabuf->resv, NULL);
	exp->revoked = true;
	dma_buf_invalidate_mappings(dmabuf);
	dma_resv_unlock(dmabuf->resv);
}

static long jiffies_left(unsigned long until)
{
	return time_before(jiffies, until) ? (long)(until - jiffies) : 0;
}

/*
 * Second half: wait until `until` (jiffies) for every importer to unmap and
 * for its fences. True when nothing outside the module can reach the
 * memory any more; false when an importer held on: the caller must keep the
 * memory, and may ask later (gpunvme_shim_export_held) whether it still
 * does. The module's reference is not dropped here: gpunvme_shim_export_put
 * does.
 */
bool gpunvme_shim_export_revoke_wait(struct gpunvme_export *exp, unsigned long until)
{
	struct dma_buf *dmabuf = exp->dmabuf;
	bool clean = true;
	long t;

	t = dma_resv_wait_timeout(dmabuf->resv, DMA_RESV_USAGE_BOOKKEEP, false, jiffies_left(until));
	if (t <= 0) {
		dev_err(exp->dev, "dma-buf revoke: importer fences still pending at the revoke's deadline (5 s)\n");
		clean = false;
	}
	if (!wait_event_timeout(exp->unmapped, atomic_read(&exp->maps) == 0, jiffies_left(until))) {
		dev_err(exp->dev, "dma-buf revoke: %d importer mapping(s) of the %s still held at the revoke's deadline (5 s); keeping that memory\n",
			atomic_read(&exp->maps), exp->mmio ? "doorbell page" : "queue memory");
		clean = false;
	}
	return clean;
}

/* Both halves, with a deadline of its own. */
bool gpunvme_shim_export_revoke(struct gpunvme_export *exp)
{
	gpunvme_shim_export_revoke_start(exp);
	return gpunvme_shim_export_revoke_wait(exp, gpunvme_shim_revoke_deadline());
}

/* After a revoke: does an importer still map the memory or fence it? The
 * exporter has no mmap or vmap, so a mapping is the only way to reach it. */
bool gpunvme_shim_export_held(struct gpunvme_export *exp)
{
	return atomic_read(&exp->maps) != 0 ||
	       !dma_resv_test_signaled(exp->dmabuf->resv, DMA_RESV_USAGE_BOOKKEEP);
}

/* Drop the module's reference (the last one frees `exp`). */
void gpunvme_shim_export_put(struct gpunvme_export *exp)
{
	dma_buf_put(exp->dmabuf);
}
