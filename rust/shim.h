/* SPDX-License-Identifier: GPL-2.0 */
/* Prototypes of rust/shim.c; the Rust side declares them in rust/shim.rs. */
#ifndef GPUNVME_SHIM_H
#define GPUNVME_SHIM_H
struct device;
void gpunvme_shim_clear_master(struct device *dev);
#endif
