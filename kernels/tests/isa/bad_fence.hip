/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * bad_fence.hip - NEGATIVE TEST INPUT, never shipped: the field report's
 * bug reproduced on purpose. The doorbell and poll sequences are gated on
 * chip macros (__gfx1101__, __gfx90a__) with a silent weak fallback, so
 * gfx1101 and gfx90a get the library's fenced sequences while
 * gfx11-generic and gfx942 quietly do not. The weak path still carries
 * the sites' markers (as a wrapper around a chip-gated body would), so the
 * checker sees a marked site without its sequence. isa_negative.sh proves
 * that isa_check.sh rejects the gfx11-generic and gfx942 objects (and
 * accepts gfx1101's and gfx90a's).
 */
#include <gpunvme/gpunvme.h>

__device__ inline void bad_doorbell(volatile uint32_t *db, uint32_t v)
{
#if defined(__gfx1101__) || defined(__gfx90a__)
	gpunvme::fence::doorbell_write(db, v);
#else
	asm volatile("; gpunvme:doorbell" ::: "memory");
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
	*db = v; /* the weak path: lingers in the write path on RDNA */
#endif
}

__device__ inline uint32_t bad_poll(const volatile uint32_t *p)
{
#if defined(__gfx1101__) || defined(__gfx90a__)
	return gpunvme::fence::poll_load(p);
#else
	asm volatile("; gpunvme:poll" ::: "memory");
	return *p;
#endif
}

GPUNVME_KERNEL void bad_ring_and_poll(volatile uint32_t *db,
				      const volatile uint32_t *cq, uint32_t v,
				      uint64_t budget, uint32_t *out)
{
	gpunvme::deadline d = gpunvme::deadline_start(gpunvme::wall_ticks(),
						      budget, 100000000);

	bad_doorbell(db, v);
	while (bad_poll(cq) == 0 &&
	       d.step(gpunvme::wall_ticks()) == gpunvme::DEADLINE_RUNNING)
		;
	*out = 1;
}
