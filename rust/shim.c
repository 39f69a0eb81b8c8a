// SPDX-License-Identifier: GPL-2.0-only
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
#include <linux/sched/mm.h>
#include <linux/refcount.h>
#include <linux/vmalloc.h>
#include <linux/pci.h>
#include <linux/sched.h>
#include <linux/string.h>
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

/* rust/uapi/file/mmap.rs: map the page `index` of object `gen` into `vma` at `addr`. */
vm_fault_t gpunvme_mmap_fault(void *state, u64 gen, u32 kind, u64 index,
			      struct vm_area_struct *vma, unsigned long addr);
/* rust/uapi/file/mmap.rs: the last VMA of an mmap of object `gen` went. */
void gpunvme_mmap_closed(void *state, u64 gen);

/*
 * What a gpunvme VMA maps: an object of one open file, named by the queue
 * pair's generation (never reused) and the kind of memory. Shared by the
 * VMAs a split makes, freed with the last of them.
 */
struct gpunvme_vma {
	refcount_t ref;
	void *state;		/* the file's OpenState: the VMA holds the file */
	u64 gen;
	u32 kind;
	unsigned long base_pgoff;
};

static void gpunvme_vma_open(struct vm_area_struct *vma)
{
	struct gpunvme_vma *v = vma->vm_private_data;

	refcount_inc(&v->ref);
}

static void gpunvme_vma_close(struct vm_area_struct *vma)
{
	struct gpunvme_vma *v = vma->vm_private_data;

	if (refcount_dec_and_test(&v->ref)) {
		/* The mmap's last VMA: its queue pair may be freed now. */
		gpunvme_mmap_closed(v->state, v->gen);
		kfree(v);
	}
}

/*
 * Pages are inserted here, at fault time, under the module's lock and after
 * its liveness check, as vfio_pci_core.c does: unbind marks the controller
 * gone under the same lock and then zaps, so a mapping can never outlive
 * the memory behind it (a fault after unbind is SIGBUS).
 */
static vm_fault_t gpunvme_vma_fault(struct vm_fault *vmf)
{
	struct vm_area_struct *vma = vmf->vma;
	struct gpunvme_vma *v = vma->vm_private_data;

	return gpunvme_mmap_fault(v->state, v->gen, v->kind, vmf->pgoff - v->base_pgoff, vma,
				  vmf->address & PAGE_MASK);
}

static const struct vm_operations_struct gpunvme_vm_ops = {
	.open = gpunvme_vma_open,
	.close = gpunvme_vma_close,
	.fault = gpunvme_vma_fault,
};

int gpunvme_shim_mmap_setup(struct vm_area_struct *vma, void *state, u64 gen, u32 kind, bool mmio)
{
	struct gpunvme_vma *v = kzalloc(sizeof(*v), GFP_KERNEL);

	if (!v)
		return -ENOMEM;
	refcount_set(&v->ref, 1);
	v->state = state;
	v->gen = gen;
	v->kind = kind;
	v->base_pgoff = vma->vm_pgoff;
	vma->vm_private_data = v;
	vma->vm_ops = &gpunvme_vm_ops;
	vm_flags_set(vma, VM_PFNMAP | GPUNVME_VM_FLAGS | (mmio ? VM_IO : 0));
	if (mmio)
		vma->vm_page_prot = pgprot_noncached(vma->vm_page_prot);
	return 0;
}

/* What rust/uapi/file/mmap.rs answers for a fault it refuses. */
const vm_fault_t gpunvme_vm_fault_sigbus = VM_FAULT_SIGBUS;

/* Insert the page at `off` of coherent memory `cpu` (linear map or vmap). */
vm_fault_t gpunvme_shim_insert_coherent(struct vm_area_struct *vma, unsigned long addr,
					void *cpu, size_t off)
{
	void *p = (u8 *)cpu + off;
	unsigned long pfn = is_vmalloc_addr(p) ? vmalloc_to_pfn(p) : page_to_pfn(virt_to_page(p));

	return vmf_insert_pfn(vma, addr, pfn);
}

/* Insert BAR0's page at `bar_offset`. */
vm_fault_t gpunvme_shim_insert_bar(struct vm_area_struct *vma, unsigned long addr,
				   struct device *dev, unsigned long bar_offset)
{
	struct pci_dev *pdev = to_pci_dev(dev);

	if (bar_offset + PAGE_SIZE > pci_resource_len(pdev, 0))
		return VM_FAULT_SIGBUS;
	return vmf_insert_pfn(vma, addr, (pci_resource_start(pdev, 0) + bar_offset) >> PAGE_SHIFT);
}

/*
 * The current task's thread group and thread IDs (initial PID namespace)
 * and its name, into comm[TASK_COMM_LEN], NUL-padded. In C because the
 * Rust crate's task_struct view does not match this build: its Task::pid()
 * and Task::tgid() read other fields (seen in the VM: tgid -1, a kernel
 * address as pid).
 */
void gpunvme_shim_current_task(s32 *tgid, s32 *pid, char *comm)
{
	BUILD_BUG_ON(TASK_COMM_LEN != 16);
	*tgid = task_tgid_nr(current);
	*pid = task_pid_nr(current);
	/* A concurrent rename may tear the name, as get_task_comm() allows. */
	strscpy_pad(comm, current->comm, TASK_COMM_LEN);
}

void gpunvme_shim_zap_file(struct file *file)
{
	unmap_mapping_range(file->f_mapping, 0, 0, 1);
}

struct gpunvme_hostmap {
	struct device *dev;		/* set once mapped */
	struct mm_struct *mm;		/* charged for the pinned pages */
	struct page **pages;
	unsigned long npages;
	struct sg_table sgt;
};

/* Give back RLIMIT_MEMLOCK charge; nothing to do once the mm has exited. */
static void hostmap_unaccount(struct gpunvme_hostmap *m)
{
	if (mmget_not_zero(m->mm)) {
		account_locked_vm(m->mm, m->npages, false);
		mmput(m->mm);
	}
	mmdrop(m->mm);
}

/*
 * Pin the user pages [uaddr, uaddr + len) of the current process for the
 * long term, charged to its RLIMIT_MEMLOCK as VFIO and RDMA do. Needs no
 * device and takes no module lock: a range backed by userfaultfd may make
 * it wait, and nobody else waits with it.
 */
struct gpunvme_hostmap *gpunvme_shim_pin_user(u64 uaddr, u64 len, int *err)
{
	unsigned long npages = len >> PAGE_SHIFT;
	struct gpunvme_hostmap *m;
	long pinned;
	int ret;

	m = kzalloc(sizeof(*m), GFP_KERNEL);
	if (!m) {
		*err = -ENOMEM;
		return NULL;
	}
	m->mm = current->mm;
	mmgrab(m->mm);
	ret = account_locked_vm(m->mm, npages, true);
	if (ret)
		goto drop_mm;
	m->npages = npages;
	m->pages = kvmalloc_array(npages, sizeof(*m->pages), GFP_KERNEL);
	if (!m->pages) {
		ret = -ENOMEM;
		goto unaccount;
	}
	pinned = pin_user_pages_fast(uaddr, npages, FOLL_WRITE | FOLL_LONGTERM, m->pages);
	if (pinned != npages) {
		if (pinned > 0)
			unpin_user_pages(m->pages, pinned);
		ret = pinned < 0 ? pinned : -EFAULT;
		goto free_pages;
	}
	return m;

free_pages:
	kvfree(m->pages);
unaccount:
	hostmap_unaccount(m);
	kfree(m);
	*err = ret;
	return NULL;
drop_mm:
	mmdrop(m->mm);
	kfree(m);
	*err = ret;
	return NULL;
}

/* DMA-map pinned pages for `dev`; one DMA address per 4 KiB page. */
int gpunvme_shim_map_pinned(struct gpunvme_hostmap *m, struct device *dev, u64 *dma_addrs)
{
	unsigned long filled = 0;
	struct scatterlist *sg;
	int i, ret;

	/* Merge contiguous pages only up to what the device's DMA mapping takes. */
	ret = sg_alloc_table_from_pages_segment(&m->sgt, m->pages, m->npages, 0,
						m->npages << PAGE_SHIFT, dma_get_max_seg_size(dev),
						GFP_KERNEL);
	if (ret)
		return ret;
	ret = dma_map_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
	if (ret) {
		sg_free_table(&m->sgt);
		return ret;
	}
	for_each_sgtable_dma_sg(&m->sgt, sg, i) {
		dma_addr_t a = sg_dma_address(sg);
		unsigned int n;

		for (n = 0; n < sg_dma_len(sg) >> PAGE_SHIFT && filled < m->npages; n++)
			dma_addrs[filled++] = a + ((dma_addr_t)n << PAGE_SHIFT);
	}
	if (filled != m->npages) {
		dma_unmap_sgtable(dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
		sg_free_table(&m->sgt);
		return -EIO;
	}
	m->dev = dev;
	return 0;
}

/* Undo map_pinned (if it ran) and pin_user. Takes the owner mm's mmap
 * lock to give back the charge: callers hold no lock a fault takes. */
void gpunvme_shim_unmap_user(struct gpunvme_hostmap *m)
{
	if (m->dev) {
		dma_unmap_sgtable(m->dev, &m->sgt, DMA_BIDIRECTIONAL, 0);
		sg_free_table(&m->sgt);
	}
	/* The controller may have written the pages: mark them dirty. */
	unpin_user_pages_dirty_lock(m->pages, m->npages, true);
	kvfree(m->pages);
	hostmap_unaccount(m);
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

