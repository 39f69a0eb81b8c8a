/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * compat.h - one source, three compilers.
 *
 * The device library must build with clang's HIP mode without ROCm headers
 * (-nogpuinc), with clang/nvcc for CUDA, and as plain host C++ where a
 * "lane" is a host thread (that is how the unit tests run it). So nothing
 * here includes hip_runtime.h or cuda_runtime.h: we map the qualifiers to
 * clang attributes and the lane/barrier queries to target builtins.
 */
#ifndef GPUNVME_COMPAT_H
#define GPUNVME_COMPAT_H

#include <stdint.h>

/* Which world are we compiling for? Exactly one of these is 1. */
#if defined(__HIP_DEVICE_COMPILE__) && defined(__AMDGPU__)
#define GPUNVME_DEV_AMD 1
#elif defined(__CUDA_ARCH__)
#define GPUNVME_DEV_NVIDIA 1
#elif defined(__HIP_DEVICE_COMPILE__) || defined(__SPIRV__) || defined(__NVPTX__)
/* A GPU pass we have no fence recipe for must not fall back to host code. */
#error "gpunvme: unsupported GPU target (need AMDGPU family gfx9/10/11/12 or NVIDIA sm_70+)"
#else
#define GPUNVME_HOST_ONLY 1
#endif

/*
 * Qualifiers. In clang's HIP/CUDA modes without headers the dunder names do
 * not exist yet; with hipcc/nvcc headers they do and we keep theirs.
 */
#if defined(__HIP__) || defined(__CUDA__) || defined(__CUDACC__)
#ifndef __global__
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#endif
#define GPUNVME_HD __host__ __device__ inline
#define GPUNVME_DEV __device__ inline
#define GPUNVME_KERNEL extern "C" __global__
#define GPUNVME_SHARED __shared__
#else
/* Plain host C++: everything is an ordinary inline function. */
#define GPUNVME_HD inline
#define GPUNVME_DEV inline
#define GPUNVME_KERNEL extern "C"
#define GPUNVME_SHARED static thread_local
#endif

namespace gpunvme {

#if defined(GPUNVME_HOST_ONLY)
/* Host "lanes" are threads: the test harness sets these per thread. */
inline thread_local uint32_t host_lane_id = 0;
inline thread_local uint32_t host_group_id = 0;
inline thread_local uint32_t host_group_size = 1;
#endif

GPUNVME_HD uint32_t lane_id()
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_amdgcn_workitem_id_x();
#elif defined(GPUNVME_DEV_NVIDIA) && defined(__clang__)
	return __nvvm_read_ptx_sreg_tid_x();
#elif defined(GPUNVME_DEV_NVIDIA)
	return threadIdx.x;
#else
	return host_lane_id;
#endif
}

GPUNVME_HD uint32_t group_id()
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_amdgcn_workgroup_id_x();
#elif defined(GPUNVME_DEV_NVIDIA) && defined(__clang__)
	return __nvvm_read_ptx_sreg_ctaid_x();
#elif defined(GPUNVME_DEV_NVIDIA)
	return blockIdx.x;
#else
	return host_group_id;
#endif
}

GPUNVME_HD uint32_t group_size()
{
#if defined(GPUNVME_DEV_AMD)
	return __builtin_amdgcn_workgroup_size_x();
#elif defined(GPUNVME_DEV_NVIDIA) && defined(__clang__)
	return __nvvm_read_ptx_sreg_ntid_x();
#elif defined(GPUNVME_DEV_NVIDIA)
	return blockDim.x;
#else
	return host_group_size;
#endif
}

/*
 * Workgroup barrier with workgroup-scope release/acquire, i.e. what HIP's
 * __syncthreads() is. On the host there is no implicit group: the test joins
 * its threads instead, so this is only a compiler/CPU fence there.
 */
GPUNVME_HD void sync_lanes()
{
#if defined(GPUNVME_DEV_AMD)
	__builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
	__builtin_amdgcn_s_barrier();
	__builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#elif defined(GPUNVME_DEV_NVIDIA)
	__syncthreads();
#else
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

/*
 * Relaxed atomics for group bookkeeping (results, agreement flags). clang
 * (HIP, CUDA, host) has the __atomic builtins; nvcc's device pass does not,
 * so there we use the CUDA intrinsics nvcc always provides.
 */
#if defined(GPUNVME_DEV_NVIDIA) && !defined(__clang__)
#define GPUNVME_NVCC_DEVICE 1
#endif

GPUNVME_HD int32_t atomic_load_relaxed(const int32_t *p)
{
#if defined(GPUNVME_NVCC_DEVICE)
	return *(const volatile int32_t *)p;
#else
	return __atomic_load_n(p, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void atomic_store_relaxed(int32_t *p, int32_t v)
{
#if defined(GPUNVME_NVCC_DEVICE)
	*(volatile int32_t *)p = v;
#else
	__atomic_store_n(p, v, __ATOMIC_RELAXED);
#endif
}

GPUNVME_HD void atomic_add_relaxed(uint32_t *p, uint32_t v)
{
#if defined(GPUNVME_NVCC_DEVICE)
	atomicAdd(p, v);
#else
	__atomic_fetch_add(p, v, __ATOMIC_RELAXED);
#endif
}

/* Set *p to v only if it still holds expected (first error wins). */
GPUNVME_HD void atomic_set_if_relaxed(int32_t *p, int32_t expected, int32_t v)
{
#if defined(GPUNVME_NVCC_DEVICE)
	atomicCAS((int *)p, expected, v);
#else
	__atomic_compare_exchange_n(p, &expected, v, false, __ATOMIC_RELAXED,
				    __ATOMIC_RELAXED);
#endif
}

} /* namespace gpunvme */

#endif /* GPUNVME_COMPAT_H */
