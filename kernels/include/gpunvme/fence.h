/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * fence.h - every memory-ordering decision of the device library, per GPU
 * family, in one file.
 *
 * Four primitives:
 *   release_system()  a lane's own prior stores (SQE, payload) become visible
 *                     to the CPU and to PCIe peers before anything after it;
 *   acquire_system()  later loads see what the SSD/CPU wrote (drop stale
 *                     GPU cache lines);
 *   doorbell_write()  the one 32-bit store the controller (or, for a
 *                     shared pair, the module's shadow cell) must see
 *                     promptly, never lingering in the GPU write path;
 *   poll_load()       a load that re-fetches from memory on every call,
 *                     for CQ phase words and the host stop flag.
 *
 * Gates are family macros (__GFX9__/__GFX10__/__GFX11__/__GFX12__), never
 * chip macros: generic targets (gfx11-generic, ...) define only the family,
 * and a chip gate silently drops the fence there (field report). An unknown
 * GPU target is a compile error, never a weak fallback. `make isa-check`
 * proves the instructions below are really in every built code object.
 */
#ifndef GPUNVME_FENCE_H
#define GPUNVME_FENCE_H

#include "compat.h"

#if defined(GPUNVME_DEV_AMD)
#if defined(__GFX10__) || defined(__GFX11__)
#define GPUNVME_FENCE_RDNA_GL 1 /* GL0/GL1 caches, explicit ISA sequence */
#elif defined(__GFX12__)
#define GPUNVME_FENCE_GFX12 1   /* scoped cache ops, LLVM memory model */
#elif defined(__GFX9__)
#define GPUNVME_FENCE_GFX9 1    /* CDNA (gfx90a/gfx942), LLVM memory model */
#else
#error "gpunvme/fence.h: AMDGPU family without a verified doorbell fence; add it here and to tests/isa"
#endif
#elif defined(GPUNVME_DEV_NVIDIA)
#if __CUDA_ARCH__ < 700
#error "gpunvme/fence.h: needs sm_70+ for .sys-scoped fence/acquire PTX"
#endif
/* st.mmio needs PTX 8.2: nvcc 12.2 and later emit it; clang's PTX version
 * depends on the CUDA it finds, so clang keeps st.volatile. */
#if !defined(__clang__) && defined(__CUDACC_VER_MAJOR__) && \
	(__CUDACC_VER_MAJOR__ > 12 || (__CUDACC_VER_MAJOR__ == 12 && __CUDACC_VER_MINOR__ >= 2))
#define GPUNVME_PTX_MMIO 1
#endif
#endif

namespace gpunvme {
namespace fence {

#if defined(GPUNVME_DEV_AMD)
/* Global address space: global_* instead of flat_* (the doorbell and the
 * CQ are never LDS, so the flat aperture check is wasted work). */
typedef __attribute__((address_space(1))) uint32_t global_u32;
#endif

GPUNVME_HD void release_system()
{
#if defined(GPUNVME_DEV_AMD)
	/* gfx10/11: waits for vmcnt/vscnt (GL0/GL1 are write-through);
	 * gfx12: global_wb scope:SCOPE_SYS; gfx9: buffer_wbl2 [sc0 sc1]. */
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.sc.sys;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

GPUNVME_HD void acquire_system()
{
#if defined(GPUNVME_FENCE_RDNA_GL)
	/* Prior loads done, then drop per-CU (GL0) and per-SE (GL1) lines. */
	asm volatile("s_waitcnt vmcnt(0) lgkmcnt(0)\n\t"
		     "buffer_gl1_inv\n\t"
		     "buffer_gl0_inv" ::: "memory");
#elif defined(GPUNVME_DEV_AMD)
	/* gfx12: global_inv scope:SCOPE_SYS; gfx90a: buffer_invl2 +
	 * buffer_wbinvl1_vol; gfx942: buffer_inv sc0 sc1. */
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/*
 * The doorbell store. The same code writes a raw pair's real MMIO doorbell
 * (mapped through a dma-buf) or a shared pair's shadow cell, memory the
 * module's relay reads.
 */
GPUNVME_HD void doorbell_write(volatile uint32_t *db, uint32_t val)
{
#if defined(GPUNVME_FENCE_RDNA_GL)
	/*
	 * Field-proven RDNA sequence: drain everything, store bypassing all
	 * caches (glc slc dlc), drain again, invalidate GL1/GL0. A plain
	 * __threadfence_system() + release store lingers in the write path
	 * until near kernel exit on gfx1101.
	 */
	asm volatile("s_waitcnt lgkmcnt(0) vmcnt(0)\n\t"
		     "s_waitcnt_vscnt null, 0x0\n\t"
		     "global_store_dword %0, %1, off glc slc dlc\n\t"
		     "s_waitcnt lgkmcnt(0) vmcnt(0)\n\t"
		     "s_waitcnt_vscnt null, 0x0\n\t"
		     "buffer_gl1_inv\n\t"
		     "buffer_gl0_inv"
		     :
		     : "v"(db), "v"(val)
		     : "memory");
#elif defined(GPUNVME_DEV_AMD)
	/*
	 * gfx12: global_wb scope:SCOPE_SYS, global_store_b32 scope:SCOPE_SYS,
	 * then global_wb + global_inv scope:SCOPE_SYS. gfx9: buffer_wbl2,
	 * store (sc0 sc1 on gfx942), buffer_wbl2 + invalidate. The trailing
	 * seq_cst fence waits for the store to leave the CU so it cannot sit
	 * in the write path while the lane spins on the CQ.
	 */
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
	__scoped_atomic_store_n((global_u32 *)db, val, __ATOMIC_RELAXED,
				__MEMORY_SCOPE_SYSTEM);
	__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");
#elif defined(GPUNVME_DEV_NVIDIA) && defined(GPUNVME_PTX_MMIO)
	/* PTX 8.2+ (nvcc 12.2+): st.mmio.relaxed.sys, the store PTX defines
	 * for MMIO: performed exactly once, never merged; the fence orders the
	 * SQE stores (all lanes, after the barrier) before it. */
	asm volatile("fence.sc.sys;\n\t"
		     "st.mmio.relaxed.sys.u32 [%0], %1;"
		     :
		     : "l"(db), "r"(val)
		     : "memory");
#elif defined(GPUNVME_DEV_NVIDIA)
	/* volatile: never merged or elided, fine for MMIO; the fence orders
	 * the SQE stores (all lanes, after the barrier) before it. */
	asm volatile("fence.sc.sys;\n\t"
		     "st.volatile.u32 [%0], %1;"
		     :
		     : "l"(db), "r"(val)
		     : "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(db, val, __ATOMIC_SEQ_CST);
#endif
}

/*
 * Load that must observe a write from the CPU or a PCIe peer made after
 * the previous call. A peer's DMA into host memory does not snoop GPU
 * caches and system-scope/non-temporal loads alone returned stale data on
 * gfx1101, so the caches are invalidated before every load.
 */
GPUNVME_HD uint32_t poll_load(const volatile uint32_t *p)
{
#if defined(GPUNVME_FENCE_RDNA_GL)
	uint32_t v;

	asm volatile("buffer_gl1_inv\n\t"
		     "buffer_gl0_inv\n\t"
		     "global_load_dword %0, %1, off glc slc dlc\n\t"
		     "s_waitcnt vmcnt(0)"
		     : "=v"(v)
		     : "v"(p)
		     : "memory");
	return v;
#elif defined(GPUNVME_DEV_AMD)
	/* gfx12: global_inv scope:SCOPE_SYS + load scope:SCOPE_SYS;
	 * gfx9: buffer_invl2/buffer_inv sc0 sc1 + load glc/sc0 sc1. */
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "");
	return __scoped_atomic_load_n((global_u32 *)p, __ATOMIC_RELAXED,
				      __MEMORY_SCOPE_SYSTEM);
#elif defined(GPUNVME_DEV_NVIDIA)
	uint32_t v;

	asm volatile("ld.acquire.sys.u32 %0, [%1];"
		     : "=r"(v)
		     : "l"(p)
		     : "memory");
	return v;
#else
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#endif
}

/*
 * POLL_BATCH phase words at once (the per-thread API's reaper): the same
 * cache handling as poll_load(), but the loads are all issued before any
 * is waited for, so one thread pays about one memory round trip for the
 * batch instead of one per entry. Relaxed: the caller issues
 * acquire_system() once it has seen a phase it wants.
 */
constexpr int POLL_BATCH = 8;

GPUNVME_HD void poll_load_batch(const volatile uint32_t *const p[POLL_BATCH],
				uint32_t v[POLL_BATCH])
{
#if defined(GPUNVME_FENCE_RDNA_GL)
	asm volatile("buffer_gl1_inv\n\t"
		     "buffer_gl0_inv\n\t"
		     "global_load_dword %0, %8, off glc slc dlc\n\t"
		     "global_load_dword %1, %9, off glc slc dlc\n\t"
		     "global_load_dword %2, %10, off glc slc dlc\n\t"
		     "global_load_dword %3, %11, off glc slc dlc\n\t"
		     "global_load_dword %4, %12, off glc slc dlc\n\t"
		     "global_load_dword %5, %13, off glc slc dlc\n\t"
		     "global_load_dword %6, %14, off glc slc dlc\n\t"
		     "global_load_dword %7, %15, off glc slc dlc\n\t"
		     "s_waitcnt vmcnt(0)"
		     : "=&v"(v[0]), "=&v"(v[1]), "=&v"(v[2]), "=&v"(v[3]),
		       "=&v"(v[4]), "=&v"(v[5]), "=&v"(v[6]), "=&v"(v[7])
		     : "v"(p[0]), "v"(p[1]), "v"(p[2]), "v"(p[3]), "v"(p[4]),
		       "v"(p[5]), "v"(p[6]), "v"(p[7])
		     : "memory");
#elif defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "");
	for (int i = 0; i < POLL_BATCH; i++)
		v[i] = __scoped_atomic_load_n((global_u32 *)p[i], __ATOMIC_RELAXED,
					      __MEMORY_SCOPE_SYSTEM);
#elif defined(GPUNVME_DEV_NVIDIA)
	for (int i = 0; i < POLL_BATCH; i++)
		asm volatile("ld.relaxed.sys.u32 %0, [%1];"
			     : "=r"(v[i])
			     : "l"(p[i])
			     : "memory");
#else
	for (int i = 0; i < POLL_BATCH; i++)
		v[i] = __atomic_load_n(p[i], __ATOMIC_RELAXED);
#endif
}

/*
 * A whole 16-byte CQE in one load, after its phase was seen and
 * acquire_system() issued (the entry is the reader's until its CQ head
 * doorbell, so nothing changes under the load). Against a CQ in host
 * memory every load is a PCIe read: one instead of three.
 */
GPUNVME_HD void load_cqe16(const void *e, uint32_t w[4])
{
#if defined(GPUNVME_DEV_NVIDIA)
	asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
		     : "l"(e)
		     : "memory");
#elif defined(GPUNVME_DEV_AMD)
	typedef uint32_t v4u32 __attribute__((ext_vector_type(4)));
	typedef __attribute__((address_space(1))) v4u32 global_v4u32;
	v4u32 x = *(volatile global_v4u32 *)e;
	w[0] = x[0];
	w[1] = x[1];
	w[2] = x[2];
	w[3] = x[3];
#else
	const volatile uint32_t *s = (const volatile uint32_t *)e;
	for (int i = 0; i < 4; i++)
		w[i] = s[i];
#endif
}

} /* namespace fence */
} /* namespace gpunvme */

#endif /* GPUNVME_FENCE_H */
