// SPDX-License-Identifier: GPL-2.0-only
/*
 * A dma-buf exporter that behaves like a GPU driver with no peer-to-peer
 * path to the importer: its attach callback clears attach->peer2peer, which
 * (for amdgpu) means "I will migrate the buffer to system memory for you".
 * gpunvme's importer must refuse such an attachment; this exercises that.
 * The buffer is one page of system memory.
 */
#include <linux/dma-buf.h>
#include <linux/dma-mapping.h>
#include <linux/fcntl.h>
#include <linux/gfp.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "standin_shim.h"

static int nop2p_attach(struct dma_buf *dmabuf, struct dma_buf_attachment *attach)
{
	attach->peer2peer = false;
	pr_info("gpunvme_standin: no-P2P exporter: %s gets system memory only\n", dev_name(attach->dev));
	return 0;
}

static struct sg_table *nop2p_map(struct dma_buf_attachment *attach, enum dma_data_direction dir)
{
	struct page *page = attach->dmabuf->priv;
	struct sg_table *sgt = kzalloc(sizeof(*sgt), GFP_KERNEL);
	int ret;

	if (!sgt)
		return ERR_PTR(-ENOMEM);
	ret = sg_alloc_table(sgt, 1, GFP_KERNEL);
	if (ret)
		goto free;
	sg_set_page(sgt->sgl, page, PAGE_SIZE, 0);
	ret = dma_map_sgtable(attach->dev, sgt, dir, 0);
	if (ret)
		goto table;
	return sgt;
table:
	sg_free_table(sgt);
free:
	kfree(sgt);
	return ERR_PTR(ret);
}

static void nop2p_unmap(struct dma_buf_attachment *attach, struct sg_table *sgt,
			enum dma_data_direction dir)
{
	dma_unmap_sgtable(attach->dev, sgt, dir, 0);
	sg_free_table(sgt);
	kfree(sgt);
}

static void nop2p_release(struct dma_buf *dmabuf)
{
	__free_page(dmabuf->priv);
}

static const struct dma_buf_ops nop2p_ops = {
	.attach = nop2p_attach,
	.map_dma_buf = nop2p_map,
	.unmap_dma_buf = nop2p_unmap,
	.release = nop2p_release,
};

int standin_export_no_p2p(void)
{
	DEFINE_DMA_BUF_EXPORT_INFO(info);
	struct page *page = alloc_page(GFP_KERNEL | __GFP_ZERO);
	struct dma_buf *dmabuf;
	int fd;

	if (!page)
		return -ENOMEM;
	info.ops = &nop2p_ops;
	info.size = PAGE_SIZE;
	info.flags = O_RDWR;
	info.priv = page;
	dmabuf = dma_buf_export(&info);
	if (IS_ERR(dmabuf)) {
		__free_page(page);
		return PTR_ERR(dmabuf);
	}
	fd = dma_buf_fd(dmabuf, O_CLOEXEC);
	if (fd < 0)
		dma_buf_put(dmabuf);
	return fd;
}
