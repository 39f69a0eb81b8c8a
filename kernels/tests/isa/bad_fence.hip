/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * bad_fence.hip - NEGATIVE TEST INPUT, never shipped: the field report's
 * bug reproduced on purpose. The RDNA doorbell sequence is gated on the
 * chip macro __gfx1101__ with a silent weak fallback, so gfx1101 gets the
 * fence and gfx11-generic quietly does not. isa_negative.sh proves that
 * isa_check.sh rejects the gfx11-generic object (and accepts gfx1101's).
 */
#include <gpunvme/compat.h>
#include <gpunvme/clock.h>

__device__ inline void bad_doorbell(volatile uint32_t *db, uint32_t v)
{
#if defined(__gfx1101__)
	asm volatile("s_waitcnt lgkmcnt(0) vmcnt(0)\n\t"
		     "s_waitcnt_vscnt null, 0x0\n\t"
		     "global_store_dword %0, %1, off glc slc dlc\n\t"
		     "s_waitcnt lgkmcnt(0) vmcnt(0)\n\t"
		     "s_waitcnt_vscnt null, 0x0\n\t"
		     "buffer_gl1_inv\n\t"
		     "buffer_gl0_inv" ::"v"(db), "v"(v) : "memory");
#else
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
	*db = v; /* the weak path: lingers in the write path on RDNA */
#endif
}

__device__ inline uint32_t bad_poll(const volatile uint32_t *p)
{
#if defined(__gfx1101__)
	uint32_t v;

	asm volatile("buffer_gl1_inv\n\t"
		     "buffer_gl0_inv\n\t"
		     "global_load_dword %0, %1, off glc slc dlc\n\t"
		     "s_waitcnt vmcnt(0)" : "=v"(v) : "v"(p) : "memory");
	return v;
#else
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
