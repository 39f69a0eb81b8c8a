/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * clang_wait.hip - NEGATIVE TEST INPUT, never shipped: the doorbell as
 * fence.h wrote it before its inline assembly, a system-scope release
 * fence and a relaxed system-scope store. clang-19 emits the writeback
 * (gfx9 buffer_wbl2, gfx12 global_wb) and then the store with no wait in
 * between (LLVM issues 178316, 135340). isa_negative.sh checks that this
 * still reproduces (else the inline assembly could go) and that
 * isa_check.sh rejects it.
 */
#include <gpunvme/gpunvme.h>

typedef __attribute__((address_space(1))) uint32_t global_u32;

GPUNVME_KERNEL void clang_doorbell(volatile uint32_t *db, uint32_t v,
				   const volatile uint32_t *cq, uint32_t *out)
{
	asm volatile("; gpunvme:doorbell" ::: "memory");
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "");
	__scoped_atomic_store_n((global_u32 *)db, v, __ATOMIC_RELAXED,
				__MEMORY_SCOPE_SYSTEM);
	__builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "");
	*out = gpunvme::fence::poll_load(cq);
}
