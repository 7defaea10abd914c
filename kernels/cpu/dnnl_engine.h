// The process's oneDNN CPU engine, made on first use and never destroyed
// (primitives and memory objects made from it live in thread-local caches
// until their threads end). Shared by the matmul callers of kernels/cpu.
#ifndef LACT_KERNELS_CPU_DNNL_ENGINE_H_
#define LACT_KERNELS_CPU_DNNL_ENGINE_H_

#include <dnnl.hpp>

namespace lact::cpu {

dnnl::engine& DnnlEngine();

}  // namespace lact::cpu

#endif  // LACT_KERNELS_CPU_DNNL_ENGINE_H_
