/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/* gpunvme.h - the whole device-side API. */
#ifndef GPUNVME_GPUNVME_H
#define GPUNVME_GPUNVME_H

#include "compat.h"
#include "nvme.h"
#include "fence.h"
#include "clock.h"
#include "queue.h"
#include "wave.h"
#include "pqueue.h"
#include "array.h"

#endif /* GPUNVME_GPUNVME_H */
