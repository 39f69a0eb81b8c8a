// SPDX-License-Identifier: GPL-2.0 OR MIT
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

typedef int cudaError_t;
enum : int { cudaSuccess = 0, cudaErrorNotReady = 600 };
typedef struct CUstream_st *cudaStream_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
#define cudaStreamNonBlocking 0x01
#define cudaHostAllocDefault 0x00
#define cudaHostAllocMapped 0x02
#define cudaDeviceScheduleSpin 0x01
#define cudaDeviceMapHost 0x08

struct cudaDeviceProp {
	char name[256];
};

struct dim3 {
	unsigned x, y, z;
	constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

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
extern "C" inline cudaError_t cudaConfigureCall(dim3, dim3, size_t = 0, cudaStream_t = 0) { return cudaSuccess; }
extern "C" inline cudaError_t cudaSetupArgument(const void *, size_t, size_t) { return cudaSuccess; }
extern "C" inline cudaError_t cudaLaunch(const void *) { return cudaSuccess; }
extern "C" inline unsigned __cudaPushCallConfiguration(dim3, dim3, size_t = 0, cudaStream_t = 0) { return 0; }

#endif
