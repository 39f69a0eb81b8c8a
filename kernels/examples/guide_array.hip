/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * guide_array.hip - the programming guide's array kernels (kernels/README.md
 * shows this file verbatim; `make -C kernels guide-check` compares the two).
 *
 * An array of 64-bit words over one or several SSDs (array.h: a page cache
 * in GPU memory, striped or replicated), read and written with a[i]:
 *   gpunvme_array_check  every element of [first, first + count) against
 *                        example.h's pattern at the element's place on its
 *                        SSD (what `gpunvme write --pattern SEED` wrote);
 *   gpunvme_array_fill   writes that pattern (of another seed) into them;
 *   gpunvme_array_flush  writes every dirty frame back (launch it after
 *                        the fill has finished).
 * Thread t of `threads` takes elements first + t, + threads, ...; every
 * thread calls the array together with the lanes of its warp/wave (lanes
 * that want the same page share one lookup and one command).
 */
#include "example.h"

using namespace gx;

struct array_args {
	uint64_t seed;    /* the pattern's seed */
	uint64_t first;   /* first element */
	uint64_t count;   /* elements */
	uint32_t threads; /* threads in the launch */
	uint32_t fua;     /* flush: write back with FUA */
};
/* Filled from Rust: gpunvme_gpu::kernel_abi::ArrayArgs pins the same. */
static_assert(sizeof(array_args) == 32 && __builtin_offsetof(array_args, fua) == 28,
	      "array_args layout is pinned");

/* The pattern's word for element i: where the array puts it on its SSD. */
GPUNVME_HD uint64_t element_pattern(const array_desc &d, uint64_t seed, uint64_t i)
{
	uint32_t ctrl;
	return pattern(seed, array_disk_offset(d, i * 8, &ctrl));
}

GPUNVME_KERNEL void gpunvme_array_check(const array_desc *desc, const array_args *args,
					io_result *res)
{
	const array<uint64_t> a(desc);
	const array_args x = *args;
	const uint32_t t = group_id() * group_size() + lane_id();
	uint32_t done = 0, bad = 0;

	for (uint64_t i = x.first + t; i < x.first + x.count; i += x.threads) {
		uint64_t v;
		/* The page from the cache, or loaded (one command for every
		 * lane of the warp that wants it); errors are values. */
		const int32_t rc = a.read(i, &v);
		if (rc != OK) {
			note_error(res, rc);
			break;
		}
		bad += v != element_pattern(a.d, x.seed, i);
		done++;
	}
	if (bad)
		atomic_add_relaxed(&res->mismatches, bad);
	atomic_add_relaxed(&res->completed, done);
}

GPUNVME_KERNEL void gpunvme_array_fill(const array_desc *desc, const array_args *args,
				       io_result *res)
{
	const array<uint64_t> a(desc);
	const array_args x = *args;
	const uint32_t t = group_id() * group_size() + lane_id();
	uint32_t done = 0;

	for (uint64_t i = x.first + t; i < x.first + x.count; i += x.threads) {
		/* Loads the page if needed, stores, marks the frame dirty. */
		const int32_t rc = a.write(i, element_pattern(a.d, x.seed, i));
		if (rc != OK) {
			note_error(res, rc);
			break;
		}
		done++;
	}
	atomic_add_relaxed(&res->completed, done);
}

GPUNVME_KERNEL void gpunvme_array_flush(const array_desc *desc, const array_args *args,
					io_result *res)
{
	const array<uint64_t> a(desc);
	const uint32_t t = group_id() * group_size() + lane_id();
	const int32_t rc = a.flush(t, args->threads, args->fua != 0);

	if (rc != OK)
		note_error(res, rc);
	atomic_add_relaxed(&res->completed, 1u);
}
