// SPDX-License-Identifier: GPL-2.0
/*
 * The few kernel calls the Rust crate of 7.3 does not wrap: PCI bus-master
 * control, mmap of coherent DMA memory and of a BAR page, zapping a file's
 * mappings, pinning + DMA-mapping user pages, and the checks owner mode
 * needs (IOMMU domain type, lockdown, taint). Thin forwarders; the
 * contracts are stated in rust/shim.rs.
 */
#include <linux/dma-mapping.h>
#include <linux/iommu.h>
#include <linux/panic.h>
#include <linux/security.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include "shim.h"
#include "gpunvme.h"

void gpunvme_shim_clear_master(struct device *dev)
{
	pci_clear_master(to_pci_dev(dev));
}

/* Mappings are never inherited across fork nor grown by mremap. */
#define GPUNVME_VM_FLAGS (VM_DONTEXPAND | VM_DONTDUMP | VM_DONTCOPY)

int gpunvme_shim_mmap_coherent(struct device *dev, struct vm_area_struct *vma,
			       void *cpu_addr, dma_addr_t dma_addr, size_t size)
{
	vm_flags_set(vma, GPUNVME_VM_FLAGS);
	/* The file offset named the object; within it the mapping starts at 0. */
	vma->vm_pgoff = 0;
	return dma_mmap_coherent(dev, vma, cpu_addr, dma_addr, size);
}

int gpunvme_shim_mmap_bar_page(struct device *dev, struct vm_area_struct *vma,
			       unsigned long bar_offset)
{
	struct pci_dev *pdev = to_pci_dev(dev);
	phys_addr_t phys = pci_resource_start(pdev, 0) + bar_offset;

	if (bar_offset + PAGE_SIZE > pci_resource_len(pdev, 0))
		return -EINVAL;
	vm_flags_set(vma, VM_IO | VM_PFNMAP | GPUNVME_VM_FLAGS);
	vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	return io_remap_pfn_range(vma, vma->vm_start, phys >> PAGE_SHIFT, PAGE_SIZE,
				  vma->vm_page_prot);
}

void gpunvme_shim_zap_file(struct file *file)
{
	unmap_mapping_range(file->f_mapping, 0, 0, 1);
}

struct gpunvme_hostmap {
	struct device *dev;
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
};

struct gpunvme_hostmap *gpunvme_shim_map_user(struct device *dev, u64 uaddr, u64 len,
					      u64 *dma_addrs, int *err)
{
	unsigned long npages = len >> PAGE_SHIFT, filled = 0;
	struct gpunvme_hostmap *m;
	struct scatterlist *sg;
	long pinned;
	int i, ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m) {
		*err = -ENOMEM;
		return NULL;
	}
	m->dev = dev;
	m->pages = kvmalloc_array(npages, sizeof(*m->pages), GFP_KERNEL);
	if (!m->pages) {
		ret = -ENOMEM;
		goto free_map;
	}
	/* Long-term pin: the buffer may stay mapped for the file's lifetime. */
	pinned = pin_user_pages_fast(uaddr, npages, FOLL_WRITE | FOLL_LONGTERM, m->pages);
	if (pinned < 0) {
		ret = pinned;
		goto free_pages;
	}
	m->npages = pinned;
	if (pinned != npages) {
		ret = -EFAULT;
		goto unpin;
	}
	/* Merge contiguous pages only up to what the device's DMA mapping takes. */
	ret = sg_alloc_table_from_pages_segment(&m->sgt, m->pages, npages, 0, len,
						dma_get_max_seg_size(dev), GFP_KERNEL);
	if (ret)
		goto unpin;
	ret = dma_map_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
	if (ret)
		goto free_sgt;
	/* One DMA address per 4 KiB page, for PRP entries. */
	for_each_sgtable_dma_sg(&m->sgt, sg, i) {
		dma_addr_t a = sg_dma_address(sg);
		unsigned int n;

		for (n = 0; n < sg_dma_len(sg) >> PAGE_SHIFT && filled < npages; n++)
			dma_addrs[filled++] = a + ((dma_addr_t)n << PAGE_SHIFT);
	}
	if (filled != npages) {
		ret = -EIO;
		goto unmap;
	}
	return m;

unmap:
	dma_unmap_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
free_sgt:
	sg_free_table(&m->sgt);
unpin:
	unpin_user_pages(m->pages, m->npages);
free_pages:
	kvfree(m->pages);
free_map:
	kfree(m);
	*err = ret;
	return NULL;
}

void gpunvme_shim_unmap_user(struct gpunvme_hostmap *m)
{
	dma_unmap_sgtable(m->dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
	sg_free_table(&m->sgt);
	/* The controller may have written the pages: mark them dirty. */
	unpin_user_pages_dirty_lock(m->pages, m->npages, true);
	kvfree(m->pages);
	kfree(m);
}

/* The device's IOMMU domain, as GPUNVME_IOMMU_* (uapi/gpunvme.h). */
u32 gpunvme_shim_iommu_mode(struct device *dev)
{
	struct iommu_domain *d = iommu_get_domain_for_dev(dev);

	if (!d)
		return GPUNVME_IOMMU_NONE;
	switch (d->type) {
	case IOMMU_DOMAIN_IDENTITY:
		return GPUNVME_IOMMU_IDENTITY;
	case IOMMU_DOMAIN_DMA:
		return GPUNVME_IOMMU_STRICT;
	case IOMMU_DOMAIN_DMA_FQ:
		return GPUNVME_IOMMU_LAZY;
	default:
		return GPUNVME_IOMMU_OTHER;
	}
}

/* 0, or -EPERM when the kernel is locked down against raw PCI access. */
int gpunvme_shim_pci_locked_down(void)
{
	return security_locked_down(LOCKDOWN_PCI_ACCESS);
}

/* Owner mode without a translating IOMMU: as VFIO's no-IOMMU mode does. */
void gpunvme_shim_taint_no_iommu(void)
{
	add_taint(TAINT_USER, LOCKDEP_STILL_OK);
}
