/* SPDX-License-Identifier: GPL-2.0-only */
/* Prototypes of standin_shim.c; the Rust side declares them in standin_main.rs. */
#ifndef GPUNVME_STANDIN_SHIM_H
#define GPUNVME_STANDIN_SHIM_H
#include <linux/types.h>
struct device;
struct standin_imp;

extern const u32 standin_uapi_ioc[5];
struct standin_imp *standin_imp_new(struct device *dev, int fd, int *err);
void standin_imp_info(struct standin_imp *imp, u64 *dma_addr, u64 *len, u32 *nents);
int standin_imp_begin(struct standin_imp *imp, u64 offset, u64 len, u64 *addr);
void standin_imp_end(struct standin_imp *imp);
void standin_imp_release(struct standin_imp *imp);
int standin_export_no_p2p(void);
void standin_probe_hold(struct device *dev);
#endif
