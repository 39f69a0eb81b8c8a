/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * fence.h - every memory-ordering decision of the device library, per GPU
 * family, in one file.
 *
 * Four primitives:
 *   release_system()  a lane's own prior stores (SQE, payload) become visible
 *                     to the CPU and to PCIe peers before anything after it;
 *   acquire_system()  later loads see what the SSD/CPU wrote (drop stale
 *                     GPU cache lines);
 *   sq_doorbell_write() / cq_doorbell_write()
 *                     the one 32-bit store the controller (or, for a
 *                     shared pair, the module's shadow cell) must see
 *                     promptly, never lingering in the GPU write path;
 *   poll_load()       a load that re-fetches from memory on every call,
 *                     for CQ phase words and the host stop flag;
 * and the payload contract, payload_acquire() / payload_release() (below).
 *
 * Gates are family macros (__GFX9__/__GFX10__/__GFX11__/__GFX12__), never
 * chip macros: generic targets (gfx11-generic, ...) define only the family,
 * and a chip gate silently drops the fence there (field report). The one
 * chip test, gfx9's two spellings of "system scope", ends in #error, not in
 * a fallback. An unknown GPU target is a compile error, never a weak
 * fallback. `make isa-check` proves the sequences below are really at every
 * doorbell, poll, release and acquire of every built code object.
 */
#ifndef GPUNVME_FENCE_H
#define GPUNVME_FENCE_H

#include "compat.h"

#if defined(GPUNVME_DEV_AMD)
#if defined(__GFX10__) || defined(__GFX11__)
#define GPUNVME_FENCE_RDNA_GL 1 /* GL0/GL1 caches, explicit ISA sequence */
#elif defined(__GFX12__)
#define GPUNVME_FENCE_GFX12 1   /* scoped cache ops, explicit ISA sequence */
#elif defined(__GFX9__)
#define GPUNVME_FENCE_GFX9 1    /* CDNA (gfx90a/gfx942), explicit ISA sequence */
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

/*
 * AMD: every sequence below is one inline-assembly block, so nothing the
 * compiler does can drop or move a wait inside it. clang-19 emits the
 * system-scope release writeback (gfx9 buffer_wbl2, gfx12 global_wb) and
 * then issues the next store without waiting for it (LLVM issues 178316,
 * 135340; make isa-check's negative test reproduces it), so a doorbell
 * could reach the controller before the SQE. Each block starts with a
 * marker comment ("; gpunvme:<kind>") that survives into the compiler's
 * assembly output, where tests/isa/isa_check.sh finds every site, per
 * function, and checks the sequence after it; it also checks that the
 * object holds exactly as many of these sequences as there are markers.
 *
 * Per family (GPUNVME_ASM_*):
 *   REL     release: prior loads and stores (SQE, payload) done and, where
 *           the family has a writeback, written back to memory first;
 *   INV     acquire: drop the lines later loads might hit stale;
 *   LD/ST   32-bit load/store that bypasses the non-coherent caches;
 *   LD16    the same load, 128 bits wide (a whole CQE, poll_cqe());
 *   LD_WAIT / ST_WAIT  wait for that load/store to complete;
 *   POST    after the doorbell store: write it back out of L2 (gfx9: a
 *           store to fine-grained host memory may sit dirty in L2 until
 *           the next buffer_wbl2; what the seq_cst fence that ended the
 *           doorbell before did), nothing on RDNA.
 *
 * gfx9 (CDNA) needs two spellings: gfx940-class chips name the system
 * scope sc0 sc1, gfx90a glc; any other gfx9 chip is a compile error, never
 * a weak fallback (there is no gfx9 generic target with these caches).
 */
#if defined(GPUNVME_FENCE_RDNA_GL)
#define GPUNVME_ASM_REL "s_waitcnt lgkmcnt(0) vmcnt(0)\n\t" \
			"s_waitcnt_vscnt null, 0x0\n\t"
#define GPUNVME_ASM_ACQ_WAIT "s_waitcnt vmcnt(0) lgkmcnt(0)\n\t"
#define GPUNVME_ASM_INV "buffer_gl1_inv\n\t" \
			"buffer_gl0_inv\n\t"
#define GPUNVME_ASM_LD "global_load_dword"
#define GPUNVME_ASM_LD16 "global_load_dwordx4"
#define GPUNVME_ASM_LD_SYS " glc slc dlc"
#define GPUNVME_ASM_ST "global_store_dword"
#define GPUNVME_ASM_ST_SYS " glc slc dlc"
#define GPUNVME_ASM_LD_WAIT "s_waitcnt vmcnt(0)\n\t"
#define GPUNVME_ASM_ST_WAIT GPUNVME_ASM_REL
#define GPUNVME_ASM_POST ""
#elif defined(GPUNVME_FENCE_GFX12)
#define GPUNVME_ASM_REL "global_wb scope:SCOPE_SYS\n\t" \
			"s_wait_loadcnt 0x0\n\t"   \
			"s_wait_storecnt 0x0\n\t"
#define GPUNVME_ASM_ACQ_WAIT "s_wait_loadcnt 0x0\n\t" \
			     "s_wait_storecnt 0x0\n\t"
#define GPUNVME_ASM_INV "global_inv scope:SCOPE_SYS\n\t" \
			"s_wait_loadcnt 0x0\n\t"
#define GPUNVME_ASM_LD "global_load_b32"
#define GPUNVME_ASM_LD16 "global_load_b128"
#define GPUNVME_ASM_LD_SYS " scope:SCOPE_SYS"
#define GPUNVME_ASM_ST "global_store_b32"
#define GPUNVME_ASM_ST_SYS " scope:SCOPE_SYS"
#define GPUNVME_ASM_LD_WAIT "s_wait_loadcnt 0x0\n\t"
#define GPUNVME_ASM_ST_WAIT "s_wait_storecnt 0x0\n\t"
#define GPUNVME_ASM_POST "global_wb scope:SCOPE_SYS\n\ts_wait_storecnt 0x0\n\t"
#elif defined(GPUNVME_FENCE_GFX9)
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define GPUNVME_ASM_WB "buffer_wbl2 sc0 sc1\n\t"
#define GPUNVME_ASM_INV "buffer_inv sc0 sc1\n\t"
#define GPUNVME_ASM_LD_SYS " sc0 sc1"
#define GPUNVME_ASM_ST_SYS " sc0 sc1"
#elif defined(__gfx90a__)
#define GPUNVME_ASM_WB "buffer_wbl2\n\t"
#define GPUNVME_ASM_INV "buffer_invl2\n\t" \
			"buffer_wbinvl1_vol\n\t"
#define GPUNVME_ASM_LD_SYS " glc"
#define GPUNVME_ASM_ST_SYS ""
#else
#error "gpunvme/fence.h: gfx9 chip without a verified system-scope sequence (gfx90a, gfx940-942 only); add it here and to tests/isa"
#endif
#define GPUNVME_ASM_REL GPUNVME_ASM_WB \
			"s_waitcnt vmcnt(0) lgkmcnt(0)\n\t"
#define GPUNVME_ASM_ACQ_WAIT "s_waitcnt vmcnt(0) lgkmcnt(0)\n\t"
#define GPUNVME_ASM_LD "global_load_dword"
#define GPUNVME_ASM_LD16 "global_load_dwordx4"
#define GPUNVME_ASM_ST "global_store_dword"
#define GPUNVME_ASM_LD_WAIT "s_waitcnt vmcnt(0)\n\t"
#define GPUNVME_ASM_ST_WAIT "s_waitcnt vmcnt(0)\n\t"
#define GPUNVME_ASM_POST GPUNVME_ASM_WB "s_waitcnt vmcnt(0)\n\t"
#endif

namespace gpunvme {
namespace fence {

GPUNVME_HD void release_system()
{
#if defined(GPUNVME_DEV_AMD)
	/* gfx10/11: waits only (GL0/GL1 are write-through; GL2 keeps
	 * coarse-grained lines: see payload_release()); gfx12: global_wb
	 * scope:SCOPE_SYS, then the waits; gfx9: buffer_wbl2, then the wait. */
	asm volatile("; gpunvme:release\n\t" GPUNVME_ASM_REL ::: "memory");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.sc.sys;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

GPUNVME_HD void acquire_system()
{
#if defined(GPUNVME_DEV_AMD)
	/* Prior loads done, then drop the stale lines: gfx10/11 GL1 and GL0;
	 * gfx12 global_inv scope:SCOPE_SYS; gfx90a buffer_invl2 +
	 * buffer_wbinvl1_vol; gfx942 buffer_inv sc0 sc1. */
	asm volatile("; gpunvme:acquire\n\t" GPUNVME_ASM_ACQ_WAIT GPUNVME_ASM_INV ::: "memory");
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.acq_rel.sys;" ::: "memory");
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/*
 * The payload contract (what the SSD reads or writes while the kernel
 * runs). The allocation: on AMD the payload buffer must be fine-grained
 * or uncached. RDNA (gfx10/11/12): a system-scope release there is only
 * waits and its acquire never invalidates GL2, so coarse-grained VRAM
 * (plain hipMalloc) may keep stale or dirty lines the SSD never sees.
 * CDNA (gfx90a/gfx942): the acquire invalidates only L2 lines of
 * non-local memory; a coarse-grained VRAM line is dropped by a peer's
 * write only if the platform makes PCIe requests coherent, which no run
 * here has shown, so the same rule until a hardware test does.
 * gpunvme-gpu's Gpu::alloc_payload() allocates it uncached on AMD
 * (hipExtMallocWithFlags(hipDeviceMallocUncached)). The code: a kernel
 * calls payload_acquire() after a read's completion and before its first
 * load of the data, and payload_release() after its last store of data
 * the SSD will read and before the command is submitted. The submit's own
 * release_system() orders the same stores; payload_release() makes the
 * kernel's side of the contract explicit, and make isa-check demands both
 * in the example kernels that touch payload.
 */
GPUNVME_HD void payload_acquire()
{
#if defined(GPUNVME_DEV_AMD)
	asm volatile("; gpunvme:payload-acquire\n\t" GPUNVME_ASM_ACQ_WAIT GPUNVME_ASM_INV ::: "memory");
#else
	acquire_system();
#endif
}

GPUNVME_HD void payload_release()
{
#if defined(GPUNVME_DEV_AMD)
	asm volatile("; gpunvme:payload-release\n\t" GPUNVME_ASM_REL ::: "memory");
#else
	release_system();
#endif
}

/*
 * The doorbell store. The same code writes a raw pair's real MMIO doorbell
 * (mapped through a dma-buf) or a shared pair's shadow cell, memory the
 * module's relay reads. The library rings through sq_doorbell_write() (an
 * SQ tail: the SQEs it announces must have been released by their writers,
 * release_system()) and cq_doorbell_write() (a CQ head); their markers name
 * the ring ("; gpunvme:doorbell sq" / "cq"), so make isa-check can demand a
 * release after every SQE store on every path to an SQ doorbell. The
 * doorbell's own release covers only the ringing lane's stores.
 * doorbell_write() is the same store without a ring named (a test's cell).
 */
#if defined(GPUNVME_DEV_AMD)
	/*
	 * Release (gfx9/gfx12: writeback, then wait for it; gfx10/11: drain
	 * everything), the store bypassing every non-coherent cache (glc slc
	 * dlc / sc0 sc1 / scope:SCOPE_SYS), wait until it has left the CU so
	 * it cannot linger in the write path while the lane spins on the CQ,
	 * write it back out of L2 (gfx9/gfx12), then invalidate. The RDNA
	 * form is the field-proven one: a plain __threadfence_system() +
	 * release store lingered until near kernel exit on gfx1101.
	 */
#define GPUNVME_DOORBELL(marker, db, val)                                      \
	asm volatile(marker "\n\t"                                              \
		     GPUNVME_ASM_REL                                             \
		     GPUNVME_ASM_ST " %0, %1, off" GPUNVME_ASM_ST_SYS "\n\t"      \
		     GPUNVME_ASM_ST_WAIT                                         \
		     GPUNVME_ASM_POST                                            \
		     GPUNVME_ASM_INV                                             \
		     :                                                           \
		     : "v"(db), "v"(val)                                         \
		     : "memory")
#elif defined(GPUNVME_DEV_NVIDIA) && defined(GPUNVME_PTX_MMIO)
	/* PTX 8.2+ (nvcc 12.2+): st.mmio.relaxed.sys, the store PTX defines
	 * for MMIO: performed exactly once, never merged; the fence orders the
	 * SQE stores (all lanes, after the barrier) before it. */
#define GPUNVME_DOORBELL(marker, db, val)                                      \
	asm volatile("fence.sc.sys;\n\t"                                        \
		     "st.mmio.relaxed.sys.u32 [%0], %1;"                          \
		     :                                                           \
		     : "l"(db), "r"(val)                                         \
		     : "memory")
#elif defined(GPUNVME_DEV_NVIDIA)
	/* volatile: never merged or elided, fine for MMIO; the fence orders
	 * the SQE stores (all lanes, after the barrier) before it. */
#define GPUNVME_DOORBELL(marker, db, val)                                      \
	asm volatile("fence.sc.sys;\n\t"                                        \
		     "st.volatile.u32 [%0], %1;"                                  \
		     :                                                           \
		     : "l"(db), "r"(val)                                         \
		     : "memory")
#else
#define GPUNVME_DOORBELL(marker, db, val)                                      \
	do {                                                                   \
		__atomic_thread_fence(__ATOMIC_SEQ_CST);                       \
		__atomic_store_n(db, val, __ATOMIC_SEQ_CST);                   \
	} while (0)
#endif

GPUNVME_HD void sq_doorbell_write(volatile uint32_t *db, uint32_t val)
{
	GPUNVME_DOORBELL("; gpunvme:doorbell sq", db, val);
}

GPUNVME_HD void cq_doorbell_write(volatile uint32_t *db, uint32_t val)
{
	GPUNVME_DOORBELL("; gpunvme:doorbell cq", db, val);
}

GPUNVME_HD void doorbell_write(volatile uint32_t *db, uint32_t val)
{
	GPUNVME_DOORBELL("; gpunvme:doorbell", db, val);
}
#undef GPUNVME_DOORBELL

/*
 * After a doorbell store, before the ring passes to the next ringer (the
 * per-thread API's unlock): the store is performed, at system scope,
 * before anything after it, so two ringers' values reach the controller
 * in the order they were written. NVIDIA: fence.sc.sys (a gpu-scope lock
 * handoff alone orders a sys-scope MMIO store only through cumulativity);
 * AMD: nothing, doorbell_write() already waited for its store to complete
 * (ST_WAIT, POST); host: the store was sequentially consistent.
 */
GPUNVME_HD void doorbell_handoff()
{
#if defined(GPUNVME_DEV_NVIDIA)
	asm volatile("fence.sc.sys;" ::: "memory");
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
#if defined(GPUNVME_DEV_AMD)
	uint32_t v;

	asm volatile("; gpunvme:poll\n\t"
		     GPUNVME_ASM_INV
		     GPUNVME_ASM_LD " %0, %1, off" GPUNVME_ASM_LD_SYS "\n\t"
		     GPUNVME_ASM_LD_WAIT
		     : "=v"(v)
		     : "v"(p)
		     : "memory");
	return v;
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

/* Entries the per-thread API's reaper polls at once (poll_cqe_batch()). */
constexpr int POLL_BATCH = 8;

/*
 * Poll one CQE with ONE 16-byte load: the same cache handling as
 * poll_load() (AMD: invalidate, then a system-scope/uncached load, then
 * its wait; NVIDIA: ld.volatile, i.e. relaxed at system scope, never
 * cached in L1), 128 bits wide, so the phase word (dword 3, the last) and
 * dwords 0-2 come from the same access. Against a CQ in host memory every
 * load is a PCIe read: a poll that sees the new phase already holds the
 * whole entry, where the 32-bit poll needed three more serial reads.
 *
 * Why the other dwords are valid when the phase is: the controller posts
 * a CQE as one 16-byte write (one TLP; the bench's software fixture and
 * the module's mirror write dwords 0-2 first and the phase dword last),
 * and a 16-byte aligned load is one request that the memory side (the
 * host's coherent line for host memory, one L2 sector for VRAM) answers
 * from one state of the line. The PTX and AMDGPU memory models promise
 * single-copy atomicity only per element, not for a vector, so this is a
 * property of the hardware paths above, not of the models; the
 * per-thread reaper still checks every entry it routes (command ID in
 * flight, SQ head in range) and poisons the pair on anything torn.
 * Relaxed: the caller issues acquire_system() once it has seen the phase
 * it wants (before it reads payload).
 */
GPUNVME_HD void poll_cqe(const void *e, uint32_t w[4])
{
#if defined(GPUNVME_DEV_AMD)
	typedef uint32_t v4u32 __attribute__((ext_vector_type(4)));
	v4u32 x;

	asm volatile("; gpunvme:poll\n\t"
		     GPUNVME_ASM_INV
		     GPUNVME_ASM_LD16 " %0, %1, off" GPUNVME_ASM_LD_SYS "\n\t"
		     GPUNVME_ASM_LD_WAIT
		     : "=v"(x)
		     : "v"(e)
		     : "memory");
	w[0] = x[0];
	w[1] = x[1];
	w[2] = x[2];
	w[3] = x[3];
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("ld.volatile.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
		     : "l"(e)
		     : "memory");
#else
	/* Host: no 16-byte single-copy-atomic load in C++; the classic
	 * order instead: the phase word (acquire), then the rest. The rest
	 * is only meaningful when the phase is the one wanted. */
	const volatile uint32_t *s = (const volatile uint32_t *)e;
	w[3] = __atomic_load_n((const uint32_t *)&s[3], __ATOMIC_ACQUIRE);
	w[0] = s[0];
	w[1] = s[1];
	w[2] = s[2];
#endif
}

/*
 * POLL_BATCH consecutive-or-not CQEs, one 16-byte load each, all issued
 * before any is waited for (the per-thread API's reaper): one memory round
 * trip for the batch, and no second load for the entries found complete.
 */
GPUNVME_HD void poll_cqe_batch(const void *const p[POLL_BATCH],
			       uint32_t w[POLL_BATCH][4])
{
#if defined(GPUNVME_DEV_AMD)
	typedef uint32_t v4u32 __attribute__((ext_vector_type(4)));
	v4u32 x[POLL_BATCH];
#define GPUNVME_ASM_LDQ(o, i) GPUNVME_ASM_LD16 " %" #o ", %" #i ", off" GPUNVME_ASM_LD_SYS "\n\t"
	asm volatile("; gpunvme:poll\n\t"
		     GPUNVME_ASM_INV
		     GPUNVME_ASM_LDQ(0, 8) GPUNVME_ASM_LDQ(1, 9)
		     GPUNVME_ASM_LDQ(2, 10) GPUNVME_ASM_LDQ(3, 11)
		     GPUNVME_ASM_LDQ(4, 12) GPUNVME_ASM_LDQ(5, 13)
		     GPUNVME_ASM_LDQ(6, 14) GPUNVME_ASM_LDQ(7, 15)
		     GPUNVME_ASM_LD_WAIT
		     : "=&v"(x[0]), "=&v"(x[1]), "=&v"(x[2]), "=&v"(x[3]),
		       "=&v"(x[4]), "=&v"(x[5]), "=&v"(x[6]), "=&v"(x[7])
		     : "v"(p[0]), "v"(p[1]), "v"(p[2]), "v"(p[3]), "v"(p[4]),
		       "v"(p[5]), "v"(p[6]), "v"(p[7])
		     : "memory");
#undef GPUNVME_ASM_LDQ
	for (int i = 0; i < POLL_BATCH; i++)
		for (int k = 0; k < 4; k++)
			w[i][k] = x[i][k];
#else
	for (int i = 0; i < POLL_BATCH; i++)
		poll_cqe(p[i], w[i]);
#endif
}

/*
 * Optional backoff between polls that found nothing: give the memory
 * system (and on AMD the SIMD) to someone else for a moment. Off by
 * default; a build turns it on for the group API with
 * -DGPUNVME_POLL_BACKOFF=1 (the per-thread API has a per-pair switch,
 * pqueue::backoff). NVIDIA sm_70+: nanosleep (about 64 ns asked; the
 * hardware may sleep anywhere in [0, 2x]); AMD: s_sleep 1 (64 clocks);
 * host: sched_yield() is the caller's (pqueue.h), nothing here.
 */
#ifndef GPUNVME_POLL_BACKOFF
#define GPUNVME_POLL_BACKOFF 0
#endif

GPUNVME_HD void poll_pause()
{
#if defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_s_sleep(1);
#elif defined(GPUNVME_DEV_NVIDIA)
	asm volatile("nanosleep.u32 64;");
#endif
}

} /* namespace fence */
} /* namespace gpunvme */

#endif /* GPUNVME_FENCE_H */
