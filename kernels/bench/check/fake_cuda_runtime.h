// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// fake_cuda_runtime.h - NO-OP DEFINITIONS of the CUDA runtime calls the
// bench makes, for `make -C kernels/bench dry-run` only: gpunvme_bench.cu's
// host side (clang-19, --cuda-host-only) runs on a machine without a GPU.
// Memory is plain host memory (a "device pointer" is the host pointer) and
// a kernel launch does nothing, so every GPU result is zero and every GPU
// run reports CHECK FAILED. What it exercises: the host flow (fixture and
// relay threads start and stop, the runs follow each other), the JSON it
// writes (it must parse), plot.py on that JSON, and the CPU-only relay
// microbenchmark, which needs no GPU and gives real numbers.
#ifndef GPUNVME_BENCH_FAKE_CUDA_RUNTIME_H
#define GPUNVME_BENCH_FAKE_CUDA_RUNTIME_H

#include <stdlib.h>
#include <string.h>

// The types and signatures are the syntax check's: one list of what the
// bench calls. The definitions below give them no-op bodies.
#include "cuda_runtime_stub.h"

inline const char *cudaGetErrorString(cudaError_t) { return "fake runtime"; }
inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
inline cudaError_t cudaSetDeviceFlags(unsigned) { return cudaSuccess; }
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int)
{
	strcpy(p->name, "no GPU (fake runtime dry run)");
	return cudaSuccess;
}
inline cudaError_t cudaDriverGetVersion(int *v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaRuntimeGetVersion(int *v) { *v = 0; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = nullptr; return cudaSuccess; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind)
{
	memcpy(d, s, n);
	return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t)
{
	return cudaMemcpy(d, s, n, k);
}
inline cudaError_t cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return cudaSuccess;
}
template <class T> cudaError_t cudaMalloc(T **p, size_t n)
{
	*p = (T *)aligned_alloc(4096, (n + 4095) / 4096 * 4096);
	memset((void *)*p, 0, n);
	return *p ? cudaSuccess : 2;
}
template <class T> cudaError_t cudaHostAlloc(T **p, size_t n, unsigned) { return cudaMalloc(p, n); }
template <class T> cudaError_t cudaHostGetDevicePointer(T **d, void *h, unsigned)
{
	*d = (T *)h;
	return cudaSuccess;
}
// Kernel launches (clang's header-less launch ABI): nothing runs.
extern "C" inline cudaError_t cudaConfigureCall(dim3, dim3, size_t, cudaStream_t) { return cudaSuccess; }
extern "C" inline cudaError_t cudaSetupArgument(const void *, size_t, size_t) { return cudaSuccess; }
extern "C" inline cudaError_t cudaLaunch(const void *) { return cudaSuccess; }
extern "C" inline unsigned __cudaPushCallConfiguration(dim3, dim3, size_t, cudaStream_t) { return 0; }

#endif
