// Fake CUDA runtime for CPU emulation: device memory is host memory, streams run synchronously.
#pragma once
#include <cstddef>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2 };
typedef struct FakeStream* cudaStream_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
#define cudaStreamNonBlocking 1
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s);
cudaError_t cudaMemsetAsync(void* dst, int v, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
typedef struct FakeEvent* cudaEvent_t;  // streams are synchronous: an event is always complete
cudaError_t cudaEventCreate(cudaEvent_t* e);
#define cudaEventDisableTiming 2
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetLastError();
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);
const char* cudaGetErrorString(cudaError_t e);
// emulator hooks
bool FakeIsDevice(const void* p, size_t bytes);  // p..p+bytes inside one live device allocation
bool FakeIsHost(const void* p);
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
// Records the kernel's limit; a launch over 48 KB of dynamic shared memory
// without it dies (cuda_emu.h), as it fails on a GPU.
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);
size_t FakeMaxDynamicShared(const void* func);  // 0 unless set
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int device);
