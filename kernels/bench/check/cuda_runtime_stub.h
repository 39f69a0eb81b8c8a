// SPDX-License-Identifier: MIT OR GPL-2.0-only
//
// cuda_runtime_stub.h - DECLARATIONS ONLY, for `make -C kernels/bench
// cuda-syntax`: lets clang-19's CUDA mode (-nocudainc, no CUDA SDK on the
// build machine) type-check both passes of gpunvme_bench.cu, so a typo
// does not wait for the GPU machine. Nothing is linked or run with it; the
// real build is nvcc against the real cuda_runtime.h (run.sh). Only what
// the bench calls is declared, with the runtime's signatures.
#ifndef GPUNVME_BENCH_CUDA_RUNTIME_STUB_H
#define GPUNVME_BENCH_CUDA_RUNTIME_STUB_H

#include <stddef.h>

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

extern "C" {
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError(void);
cudaError_t cudaSetDeviceFlags(unsigned);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *, int);
cudaError_t cudaDriverGetVersion(int *);
cudaError_t cudaRuntimeGetVersion(int *);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *, unsigned);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaStreamQuery(cudaStream_t);
cudaError_t cudaMemcpy(void *, const void *, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
// Kernel launch configuration, for the <<<>>> syntax (either ABI).
unsigned __cudaPushCallConfiguration(dim3, dim3, size_t = 0, cudaStream_t = 0);
cudaError_t cudaConfigureCall(dim3, dim3, size_t = 0, cudaStream_t = 0);
}

// cuda_runtime.h's C++ template overloads.
template <class T> cudaError_t cudaMalloc(T **, size_t);
template <class T> cudaError_t cudaHostAlloc(T **, size_t, unsigned);
template <class T> cudaError_t cudaHostGetDevicePointer(T **, void *, unsigned);

#endif
