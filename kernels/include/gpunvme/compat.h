/* SPDX-License-Identifier: MIT OR GPL-2.0-only */
/*
 * compat.h - one source, three compilers.
 *
 * The device library must build with clang's HIP mode without ROCm headers
 * (-nogpuinc), with clang/nvcc for CUDA, and as plain host C++ where a
 * "lane" is a host thread (that is how the unit tests and kernels/hostrun
 * run it). So nothing here includes hip_runtime.h or cuda_runtime.h: we map
 * the qualifiers to clang attributes and the lane/barrier queries to target
 * builtins. On the host, a harness makes N threads one workgroup by setting
 * the host_* thread_locals below in each of them (kernels/hostrun/
 * host_group.h does it); with none set, a thread is a one-lane group.
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
/*
 * Plain host C++: everything is an ordinary inline function. __shared__
 * memory is one object per workgroup, seen by all its lanes; on the host a
 * function-static is one object seen by all threads, so it is workgroup
 * memory as long as a process runs one workgroup of a kernel at a time
 * (hostrun's launcher runs a launch's groups one after another, a schedule
 * a GPU may pick too). thread_local would hand every lane its own copy, and
 * group_reap()'s agreement through agg would silently be none.
 */
#define GPUNVME_HD inline
#define GPUNVME_DEV inline
#define GPUNVME_KERNEL extern "C"
#define GPUNVME_SHARED static
#endif

namespace gpunvme {

#if defined(GPUNVME_HOST_ONLY)
/*
 * Host "lanes" are threads. A harness running N threads as one workgroup
 * sets these in each of them: thread_local, because lane_id() differs per
 * lane while several groups (queue pairs) may run side by side. The
 * defaults make any thread a one-lane group, lane 0 of group 0.
 */
inline thread_local uint32_t host_lane_id = 0;
inline thread_local uint32_t host_group_id = 0;
inline thread_local uint32_t host_group_size = 1;

/*
 * The group barrier sync_lanes() calls on the host: host_barrier(
 * host_barrier_ctx), set per thread by the harness to its group's barrier
 * (every lane of a group the same one). It must block until all
 * host_group_size lanes of the group have arrived and order memory like a
 * mutex does (release before, acquire after). Null, the default, keeps
 * sync_lanes() a fence, which is a barrier for a one-lane group, so plain
 * single-threaded host use needs nothing installed. A hook that cannot
 * complete (a lane never arrives) should give up after a deadline and let
 * its caller report it: sync_lanes() has no way to return an error.
 */
inline thread_local void (*host_barrier)(void *ctx) = nullptr;
inline thread_local void *host_barrier_ctx = nullptr;
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
 * __syncthreads() is. On the host there is no implicit group: the harness's
 * host_barrier is the barrier when installed (N threads = one group run the
 * very group_submit()/group_reap() a GPU runs); without one, a fence.
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
	if (host_barrier)
		host_barrier(host_barrier_ctx);
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
