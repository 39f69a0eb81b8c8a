/* SPDX-License-Identifier: GPL-2.0-only */
/* Prototypes of rust/shim.c; the Rust side declares them in rust/shim.rs. */
#ifndef GPUNVME_SHIM_H
#define GPUNVME_SHIM_H
#include <linux/mm_types.h>
#include <linux/types.h>
struct device;
struct file;
struct vm_area_struct;
struct gpunvme_hostmap;

void gpunvme_shim_clear_master(struct device *dev);
int gpunvme_shim_mmap_setup(struct vm_area_struct *vma, void *state, u64 gen, u32 kind, bool mmio);
vm_fault_t gpunvme_shim_insert_coherent(struct vm_area_struct *vma, unsigned long addr,
					void *cpu, size_t off);
vm_fault_t gpunvme_shim_insert_bar(struct vm_area_struct *vma, unsigned long addr,
				   struct device *dev, unsigned long bar_offset);
void gpunvme_shim_zap_file(struct file *file);
void gpunvme_shim_current_task(s32 *tgid, s32 *pid, char *comm);
struct gpunvme_hostmap *gpunvme_shim_pin_user(u64 uaddr, u64 len, int *err);
int gpunvme_shim_map_pinned(struct gpunvme_hostmap *m, struct device *dev, u64 *dma_addrs);
void gpunvme_shim_unmap_user(struct gpunvme_hostmap *map);
struct gpunvme_export;
struct gpunvme_export *gpunvme_shim_export_mmio(struct device *dev, u64 bar_offset, u64 len,
						u32 flags, int *fd, int *err);
struct gpunvme_export *gpunvme_shim_export_mem(struct device *dev, void *cpu, dma_addr_t dma,
					       size_t size, u32 flags, int *fd, int *err);
bool gpunvme_shim_export_revoke(struct gpunvme_export *exp);
unsigned long gpunvme_shim_revoke_deadline(void);
void gpunvme_shim_export_revoke_start(struct gpunvme_export *exp);
bool gpunvme_shim_export_revoke_wait(struct gpunvme_export *exp, unsigned long until);
bool gpunvme_shim_export_held(struct gpunvme_export *exp);
void gpunvme_shim_export_put(struct gpunvme_export *exp);
struct gpunvme_import;
struct gpunvme_import *gpunvme_shim_import(struct device *dev, int fd, u64 *dma_addrs,
					   u64 max_pages, u64 *len, void *buffers, u32 handle,
					   int *err);
void gpunvme_shim_unimport(struct gpunvme_import *imp);
bool gpunvme_shim_import_revoked(struct gpunvme_import *imp);
void gpunvme_shim_import_release_kept(struct gpunvme_import *imp);
struct gpunvme_bridge;
struct gpunvme_bridge *gpunvme_shim_bridge_start(void *ctx, u64 *counters, struct device *dev,
						 u16 qid, u32 threads, const void *file, int *err);
void gpunvme_shim_bridge_stop(struct gpunvme_bridge *b);
u32 gpunvme_shim_iommu_mode(struct device *dev);
int gpunvme_shim_pci_locked_down(void);
void gpunvme_shim_taint_no_iommu(void);
/* rust/controller/lifecycle.c */
struct miscdevice;
struct gpunvme_watch;
int gpunvme_shim_hooks_add(struct device *dev, void *ctx);
void *gpunvme_shim_hooks_del(struct device *dev);
struct gpunvme_watch *gpunvme_shim_watch_start(void *ctx, u32 period_ms);
void gpunvme_shim_watch_stop(struct gpunvme_watch *wt);
int gpunvme_shim_add_poll(struct miscdevice *misc);
int gpunvme_shim_pci_event(struct device *dev, u32 ev, const char *name);
/* rust/uapi/quota.c */
u32 gpunvme_quota_qpairs(void);
u32 gpunvme_quota_maps(void);
u32 gpunvme_quota_exports(void);
#endif
