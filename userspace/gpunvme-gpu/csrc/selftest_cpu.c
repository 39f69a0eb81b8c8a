/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * The CPU half of the self-test (kernels/include/gpunvme/selftest.h) with
 * external linkage, for src/selftest.rs.
 */
#define GPUNVME_ST_API
#include <gpunvme/selftest.h>
